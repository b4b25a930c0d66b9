//! DescribeTopicPartitions (key 75): topics and partitions, paged by a (topic, partition) cursor
//! and `response_partition_limit`. An empty topic list means every topic. Java Admin's
//! `describeTopics` uses it.

use std::sync::Arc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};

use super::metadata::INTERNAL_TOPICS;
use super::topic_name;
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::UNKNOWN_TOPIC_OR_PARTITION;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeTopicPartitions: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeTopicPartitions, versions 0..=0, DescribeTopicPartitionsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(
    DescribeTopicPartitionsResponse:
    errors[topics[error_code, partitions[error_code]]],
    throttle_time_ms
);

/// Most partitions in one response, whatever the request asks (Kafka's
/// `max.request.partition.size.limit` default).
const PARTITIONS_PER_RESPONSE_MAX: usize = 2000;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeTopicPartitionsRequest,
    _version: i16,
) -> DescribeTopicPartitionsResponse {
    let image = ctx.cluster.image();
    let limit = (request.response_partition_limit.max(1) as usize).min(PARTITIONS_PER_RESPONSE_MAX);
    // Every topic means every topic the client may describe; a named one it may not is
    // TOPIC_AUTHORIZATION_FAILED, whether or not it exists.
    let listing_all = request.topics.is_empty();
    let mut names: Vec<String> = if listing_all {
        image
            .topics
            .keys()
            .filter(|n| authz.topic(AclOperation::Describe, n))
            .cloned()
            .collect()
    } else {
        request
            .topics
            .iter()
            .map(|t| t.name.0.to_string())
            .collect()
    };
    names.sort();
    names.dedup();
    let (cursor_topic, cursor_partition) = request
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index.max(0)))
        .unwrap_or_default();

    let mut budget = limit;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names
        .into_iter()
        .filter(|n| n.as_str() >= cursor_topic.as_str())
    {
        let first = if name == cursor_topic {
            cursor_partition
        } else {
            0
        };
        if !listing_all && !authz.topic(AclOperation::Describe, &name) {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(topic_name(&name)))
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED),
            );
            continue;
        }
        let Some(meta) = image.topic(&name) else {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(topic_name(&name)))
                    .with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
            );
            continue;
        };
        if budget == 0 {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(first),
            );
            break;
        }
        let count = meta.partition_count();
        let last = (first as usize + budget).min(count as usize) as i32;
        let ids = |v: &[i32]| v.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
        let partitions = (first..last)
            .filter_map(|p| meta.partition(p).map(|reg| (p, reg)))
            .map(|(p, reg)| {
                let offline: Vec<i32> = reg
                    .replicas
                    .iter()
                    .copied()
                    .filter(|b| image.broker(*b).is_none_or(|r| r.fenced))
                    .collect();
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(p)
                    .with_error_code(if reg.has_leader() {
                        0
                    } else {
                        crate::error_codes::LEADER_NOT_AVAILABLE
                    })
                    .with_leader_id(BrokerId(reg.leader))
                    .with_leader_epoch(reg.leader_epoch)
                    .with_replica_nodes(ids(&reg.replicas))
                    .with_isr_nodes(ids(&reg.isr))
                    .with_offline_replicas(ids(&offline))
                    .with_eligible_leader_replicas(Some(ids(&reg.elr)))
                    .with_last_known_elr(Some(ids(&reg.last_known_elr)))
            })
            .collect::<Vec<_>>();
        budget -= partitions.len();
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(meta.topic_id)
                .with_is_internal(INTERNAL_TOPICS.contains(&name.as_str()))
                .with_partitions(partitions),
        );
        if last < count {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(last),
            );
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}
