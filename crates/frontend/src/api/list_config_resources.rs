//! ListConfigResources (key 74, KIP-1142; v0 was KIP-1000's ListClientMetricsResources): the names
//! of the resources whose configs DescribeConfigs can show, by config resource type.
//!
//! v0 lists client-metrics subscriptions only; v1 takes a type filter, empty meaning every type the
//! broker supports (topic, broker, broker logger, client metrics, group), and a type outside that
//! set answers UNSUPPORTED_VERSION, as Kafka does. Groups are listed when they have dynamic
//! configs (whether the group exists or not, as Kafka lists them). Millrace has no client-metrics
//! subscriptions (KIP-714), so that type lists nothing.

use std::sync::Arc;

use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};

use super::describe_configs::{
    RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP, RESOURCE_TOPIC,
};
use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::UNSUPPORTED_VERSION;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ListConfigResources: its key, versions, handler and error codes, for [`crate::registry`].
    ListConfigResources, versions 0..=1, ListConfigResourcesRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(ListConfigResourcesResponse: errors[error_code], throttle_time_ms);

/// Config resource type of a client-metrics subscription (KIP-714).
const RESOURCE_CLIENT_METRICS: i8 = 16;
/// The types v1 serves, in the order the answer lists them.
const V1_TYPES: [i8; 5] = [
    RESOURCE_TOPIC,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
];

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ListConfigResourcesRequest,
    version: i16,
) -> ListConfigResourcesResponse {
    if !authz.cluster(AclOperation::DescribeConfigs) {
        return ListConfigResourcesResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED);
    }
    let mut response = ListConfigResourcesResponse::default();
    let wanted: Vec<i8> = if version == 0 {
        vec![RESOURCE_CLIENT_METRICS]
    } else if request.resource_types.is_empty() {
        V1_TYPES.to_vec()
    } else {
        request.resource_types
    };
    if let Some(bad) = wanted.iter().find(|t| !V1_TYPES.contains(t)) {
        tracing::debug!(resource_type = bad, "ListConfigResources: unsupported type");
        response.error_code = UNSUPPORTED_VERSION;
        return response;
    }
    let resource = |name: String, resource_type: i8| {
        ConfigResource::default()
            .with_resource_name(str_bytes(&name))
            .with_resource_type(resource_type)
    };
    for resource_type in V1_TYPES.into_iter().filter(|t| wanted.contains(t)) {
        match resource_type {
            RESOURCE_TOPIC => {
                let image = ctx.cluster.image();
                response.config_resources.extend(
                    image
                        .topics
                        .keys()
                        .map(|name| resource(name.clone(), resource_type)),
                );
            }
            RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => {
                response.config_resources.extend(
                    ctx.cluster
                        .brokers()
                        .into_iter()
                        .map(|b| resource(b.node_id.to_string(), resource_type)),
                );
            }
            RESOURCE_GROUP => {
                let image = ctx.cluster.image();
                response.config_resources.extend(
                    image
                        .group_configs
                        .keys()
                        .map(|name| resource(name.clone(), resource_type)),
                );
            }
            // No client-metrics subscriptions exist in Millrace.
            _ => {}
        }
    }
    response
}
