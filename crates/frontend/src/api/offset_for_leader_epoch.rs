//! OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, from the partition's
//! leader-epoch cache. Consumers use it to validate their position after a leader change (KIP-320);
//! followers will use it to truncate when replication arrives.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use millrace_cluster::LEADER_EPOCH;

use super::leader_epoch_error;
use crate::error_codes::UNKNOWN_TOPIC_OR_PARTITION;
use crate::BrokerContext;

/// Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: i64 = -1;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: OffsetForLeaderEpochRequest,
    _version: i16,
) -> OffsetForLeaderEpochResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.0.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let out = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(UNDEFINED);
                    let Some(log) = ctx.cluster.partition_log(&name, p.partition) else {
                        return out.with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
                    };
                    if let Some(code) = leader_epoch_error(p.current_leader_epoch, LEADER_EPOCH) {
                        return out.with_error_code(code);
                    }
                    match log.end_offset_for_leader_epoch(p.leader_epoch) {
                        Some((epoch, end)) => out.with_leader_epoch(epoch).with_end_offset(end),
                        // An empty log has no epochs yet; its current epoch ends at the log end.
                        None if p.leader_epoch == LEADER_EPOCH => out
                            .with_leader_epoch(LEADER_EPOCH)
                            .with_end_offset(log.log_end_offset()),
                        None => out,
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
