//! CreateTopics (key 19): name, partitions, replication factor (-1 = broker default), manual
//! assignments and topic configs, validated by `cluster`; configs are stored with the topic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use millrace_cluster::{NewTopic, TopicConfigs};

use super::str_bytes;
use crate::error_codes::{self, INVALID_REQUEST};
use crate::BrokerContext;

/// First version whose result carries partitions, replication factor and configs.
const DETAILS_VERSION_MIN: i16 = 5;
/// First version whose result carries the topic id.
const TOPIC_ID_VERSION_MIN: i16 = 7;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let cluster = &ctx.cluster;
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<String> = request
        .topics
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|n| !seen.insert(n.clone()))
        .collect();

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
            let new = NewTopic {
                name: name.clone(),
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
            };
            let outcome = if request.validate_only {
                cluster
                    .validate_new_topic(&new)
                    .map(|(p, rf, configs)| (None, p, rf, configs))
            } else {
                cluster.create_topic(&new).map(|t| {
                    (
                        Some(t.topic_id),
                        t.partitions,
                        t.replication_factor,
                        t.configs,
                    )
                })
            };
            match outcome {
                Ok((topic_id, partitions, replication_factor, configs)) => {
                    if version >= DETAILS_VERSION_MIN {
                        result.num_partitions = partitions;
                        result.replication_factor = replication_factor;
                        result.configs = Some(describe_configs(ctx, &configs));
                    }
                    if version >= TOPIC_ID_VERSION_MIN {
                        if let Some(id) = topic_id {
                            result.topic_id = id;
                        }
                    }
                }
                Err(e) => {
                    let err = error_codes::from_admin(&e, &name);
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
        .describe(&ctx.cluster.config)
        .map(|(name, value, source)| {
            CreatableTopicConfigs::default()
                .with_name(str_bytes(name))
                .with_value(value.as_deref().map(str_bytes))
                .with_config_source(source as i8)
        })
        .collect()
}
