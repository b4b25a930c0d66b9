//! DescribeConfigs (key 32): every config of a topic, of this broker (its dynamic configs and the
//! cluster default's over the static ones, with those sources) or of a group (GROUP
//! resources: its dynamic configs, else the broker's `group.*` values, else Kafka's defaults;
//! any group name, existing or not, as Kafka answers), with value, source, synonyms and type,
//! under Kafka's names.
//!
//! A topic always reports `cleanup.policy` as stored at CreateTopics (Kafka Connect refuses to start
//! when its compacted internal topics look otherwise; checklist §4).

use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use millrace_cluster::ConfigEntry;

use super::str_bytes;
use crate::authz::Authz;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeConfigs: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeConfigs, versions 1..=4, DescribeConfigsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(DescribeConfigsResponse: errors[results[error_code]], throttle_time_ms);

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
/// A group's dynamic configs (KIP-848, KIP-932).
pub const RESOURCE_GROUP: i8 = 32;

/// First version with `config_type` and `documentation`.
const CONFIG_TYPE_VERSION_MIN: i16 = 3;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let cluster = &ctx.cluster;
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let mut result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let name = resource.resource_name.as_str();
            // DescribeConfigs on the resource (the cluster for a broker), checked first.
            if let Err(code) =
                authz.config_resource(AclOperation::DescribeConfigs, resource.resource_type, name)
            {
                result.error_code = code;
                return result;
            }
            let entries = match resource.resource_type {
                RESOURCE_TOPIC => match cluster.topic(name) {
                    Some(topic) => Ok(cluster.effective_config().describe_topic(&topic.configs)),
                    None => Err((
                        UNKNOWN_TOPIC_OR_PARTITION,
                        format!("Topic '{name}' does not exist."),
                    )),
                },
                RESOURCE_BROKER if name.is_empty() => {
                    Ok(cluster.effective_config().describe_broker_default())
                }
                RESOURCE_BROKER if name == cluster.node_id().to_string() => {
                    Ok(cluster.effective_config().describe_broker())
                }
                RESOURCE_BROKER => {
                    Err((INVALID_REQUEST, format!("Unexpected broker id '{name}'.")))
                }
                RESOURCE_BROKER_LOGGER => Ok(Vec::new()),
                RESOURCE_GROUP if name.is_empty() => {
                    Err((INVALID_REQUEST, "Group name must not be empty".to_string()))
                }
                RESOURCE_GROUP => {
                    let image = cluster.image();
                    let configs = image.group_configs(name).cloned().unwrap_or_default();
                    Ok(cluster.config.describe_group(&configs))
                }
                other => Err((
                    INVALID_REQUEST,
                    format!("Unsupported resource type {other}."),
                )),
            };
            match entries {
                Ok(entries) => {
                    let wanted = resource.configuration_keys.as_ref();
                    result.configs = entries
                        .iter()
                        .filter(|e| {
                            wanted.is_none_or(|keys| keys.iter().any(|k| k.as_str() == e.name))
                        })
                        .map(|e| describe(e, request.include_synonyms, version))
                        .collect();
                }
                Err((code, message)) => {
                    result.error_code = code;
                    result.error_message = Some(str_bytes(&message));
                }
            }
            result
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn describe(
    entry: &ConfigEntry,
    include_synonyms: bool,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut out = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(entry.name))
        .with_value(entry.value.as_deref().map(str_bytes))
        .with_read_only(entry.read_only)
        .with_is_sensitive(entry.sensitive)
        .with_config_source(entry.source as i8);
    if include_synonyms {
        out.synonyms = entry
            .synonyms
            .iter()
            .map(|s| {
                DescribeConfigsSynonym::default()
                    .with_name(str_bytes(&s.name))
                    .with_value(s.value.as_deref().map(str_bytes))
                    .with_source(s.source as i8)
            })
            .collect();
    }
    if version >= CONFIG_TYPE_VERSION_MIN {
        out.config_type = entry.ty.kafka_code();
    }
    out
}
