//! CreateTopics (key 19): name, partitions, replication factor (-1 = broker default), manual
//! assignments and topic configs, forwarded to the active controller, which validates, places the
//! replicas and commits the topic; the answer comes once committed (and seen by this broker).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use millrace_cluster::TopicConfigs;
use millrace_controller::messages::{CreatedTopic, TopicSpec};
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, INVALID_REQUEST};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// CreateTopics: its key, versions, handler and error codes, for [`crate::registry`].
    CreateTopics, versions 2..=7, CreateTopicsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

// `topic_config_error_code` (a v5+ tagged field explaining why `configs` is missing) is
// not counted, as in Kafka's CreateTopicsResponse.errorCounts.
response_fields!(CreateTopicsResponse: errors[topics[error_code]], throttle_time_ms);

/// First version whose result carries partitions, replication factor and configs.
const DETAILS_VERSION_MIN: i16 = 5;
/// First version whose result carries the topic id.
const TOPIC_ID_VERSION_MIN: i16 = 7;

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    // Creating needs Create on the cluster or on the topic; seeing the new topic's configs,
    // DescribeConfigs on it.
    let cluster_create = authz.cluster(AclOperation::Create);
    let may_create = |name: &str| cluster_create || authz.topic(AclOperation::Create, name);
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<String> = request
        .topics
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|n| !seen.insert(n.clone()))
        .collect();
    let specs: Vec<TopicSpec> = request
        .topics
        .iter()
        .filter(|t| !duplicates.contains(t.name.0.as_str()) && may_create(t.name.0.as_str()))
        .map(|topic| TopicSpec {
            name: topic.name.0.to_string(),
            partitions: (topic.num_partitions != -1).then_some(topic.num_partitions),
            replication_factor: (topic.replication_factor != -1)
                .then_some(topic.replication_factor),
            assignments: topic
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs: topic
                .configs
                .iter()
                .filter_map(|c| {
                    c.value
                        .as_ref()
                        .map(|v| (c.name.to_string(), v.to_string()))
                })
                .collect::<BTreeMap<_, _>>(),
        })
        .collect();
    let outcome: Result<BTreeMap<String, Result<CreatedTopic, ControllerError>>, ControllerError> =
        if specs.is_empty() {
            Ok(BTreeMap::new())
        } else {
            let forwarded = forward::forward(
                &ctx,
                ControllerRequest::CreateTopics {
                    topics: specs,
                    validate_only: request.validate_only,
                },
                forward::timeout(request.timeout_ms),
            )
            .await;
            match forwarded {
                Ok(ControllerResponse::CreateTopics { results }) => {
                    Ok(results.into_iter().collect())
                }
                Ok(other) => Err(ControllerError::Internal(format!(
                    "unexpected answer {other:?}"
                ))),
                Err(e) => Err(e),
            }
        };
    if let Ok(results) = &outcome {
        if !request.validate_only {
            let created: Vec<String> = results
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(n, _)| n.clone())
                .collect();
            forward::await_image(&ctx, |image| {
                created.iter().all(|n| image.topic(n).is_some())
            })
            .await;
        }
    }

    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
            if duplicates.contains(&name) {
                result.error_code = INVALID_REQUEST;
                result.error_message = Some(str_bytes("Duplicate topic name in the request."));
                return result;
            }
            if !may_create(&name) {
                result.error_code = TOPIC_AUTHORIZATION_FAILED;
                if version >= 1 {
                    result.error_message = Some(str_bytes("Authorization failed."));
                }
                if version >= DETAILS_VERSION_MIN {
                    result.num_partitions = -1;
                    result.replication_factor = -1;
                }
                return result;
            }
            let one = match &outcome {
                Ok(results) => results
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| Err(ControllerError::Internal("no answer".into()))),
                Err(e) => Err(e.clone()),
            };
            match one {
                Ok(created) => {
                    if version >= DETAILS_VERSION_MIN {
                        result.num_partitions = created.partitions;
                        result.replication_factor = created.replication_factor;
                        if authz.topic(AclOperation::DescribeConfigs, &name) {
                            result.configs = Some(describe_configs(&ctx, &created.configs));
                        } else {
                            result.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED;
                        }
                    }
                    if version >= TOPIC_ID_VERSION_MIN && !request.validate_only {
                        result.topic_id = created.topic_id;
                    }
                }
                Err(e) => {
                    let err = error_codes::from_controller(&e, &name);
                    result.error_code = err.code;
                    if version >= 1 {
                        result.error_message = err.message.as_deref().map(str_bytes);
                    }
                    if version >= DETAILS_VERSION_MIN {
                        result.num_partitions = -1;
                        result.replication_factor = -1;
                    }
                }
            }
            result
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

fn describe_configs(
    ctx: &Arc<BrokerContext>,
    configs: &TopicConfigs,
) -> Vec<CreatableTopicConfigs> {
    configs
        .describe(&ctx.cluster.effective_config())
        .map(|(name, value, source)| {
            CreatableTopicConfigs::default()
                .with_name(str_bytes(name))
                .with_value(value.as_deref().map(str_bytes))
                .with_config_source(source as i8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;

    use super::*;
    use crate::api::topic_name;
    use crate::error_codes::{
        INVALID_REPLICATION_FACTOR, TOPIC_ALREADY_EXISTS, UNKNOWN_SERVER_ERROR,
    };
    use crate::handler::counted_errors;

    #[test]
    fn error_metrics_count_each_result_but_not_config_codes() {
        let response = CreateTopicsResponse::default().with_topics(vec![
            CreatableTopicResult::default()
                .with_name(topic_name("a"))
                .with_error_code(TOPIC_ALREADY_EXISTS),
            CreatableTopicResult::default()
                .with_name(topic_name("b"))
                .with_topic_config_error_code(UNKNOWN_SERVER_ERROR),
            CreatableTopicResult::default()
                .with_name(topic_name("c"))
                .with_error_code(INVALID_REPLICATION_FACTOR),
        ]);
        assert_eq!(counted_errors::<CreateTopics>(&response), vec![36, 38]);
    }
}
