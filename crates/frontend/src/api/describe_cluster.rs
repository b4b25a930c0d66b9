//! DescribeCluster (key 60): cluster id, controller and brokers, for Java Admin and Connect.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::str_bytes;
use crate::authz::Authz;
use millrace_cluster::acl::AclOperation;
use millrace_cluster::acl::{ResourceType, CLUSTER_RESOURCE_NAME};

use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeCluster: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeCluster, versions 0..=2, DescribeClusterRequest,
    |call, request| {
        Reply::Now(handle(call.ctx, &call.authz, request, call.version, &call.session.listener))
    },
}

response_fields!(DescribeClusterResponse: errors[error_code], throttle_time_ms);

/// Kafka's endpoint type for brokers (v1+); 2 = controllers, which Millrace does not expose.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
/// First version that may list fenced brokers (KIP-1073).
const INCLUDE_FENCED_VERSION_MIN: i16 = 2;
/// UNSUPPORTED_ENDPOINT_TYPE.
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 119;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeClusterRequest,
    version: i16,
    listener: &str,
) -> DescribeClusterResponse {
    let cluster = &ctx.cluster;
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&cluster.cluster_id()))
        .with_controller_id(BrokerId(super::metadata::controller_id(ctx)));
    if request.include_cluster_authorized_operations {
        // Kafka: the operations when the client may Describe the cluster, else none (0).
        if let Some(ops) = authz.operations(ResourceType::Cluster, CLUSTER_RESOURCE_NAME) {
            response.cluster_authorized_operations = if authz.cluster(AclOperation::Describe) {
                ops
            } else {
                0
            };
        }
    }
    if version >= 1 {
        response.endpoint_type = request.endpoint_type;
        if request.endpoint_type != ENDPOINT_TYPE_BROKERS {
            response.error_code = UNSUPPORTED_ENDPOINT_TYPE;
            response.error_message = Some(str_bytes("Only broker endpoints are served."));
            return response;
        }
    }
    // v2 (KIP-1073): fenced brokers too when asked, marked as such.
    let with_fenced = version >= INCLUDE_FENCED_VERSION_MIN && request.include_fenced_brokers;
    let image = cluster.image();
    response.brokers = image
        .brokers
        .values()
        .filter(|b| with_fenced || !b.fenced)
        .filter_map(|b| {
            let (host, port) = b.endpoint_for(listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.node_id))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port))
                    .with_rack(b.rack.as_deref().map(str_bytes))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    response
}
