//! OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, from the partition's
//! leader-epoch cache of the partition's leader. Consumers use it to validate their position after
//! a leader change (KIP-320); followers find where they diverge through Fetch's diverging epoch
//! instead, but may ask here too.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use millrace_store::TopicPartition;

use super::leadership;
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// OffsetForLeaderEpoch: its key, versions, handler and error codes, for [`crate::registry`].
    OffsetForLeaderEpoch, versions 2..=4, OffsetForLeaderEpochRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(
    OffsetForLeaderEpochResponse:
    errors[topics[partitions[error_code]]],
    throttle_time_ms
);

/// Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: i64 = -1;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: OffsetForLeaderEpochRequest,
    _version: i16,
) -> OffsetForLeaderEpochResponse {
    // A follower (ClusterAction on the cluster) asks about any topic; a consumer needs Describe.
    let cluster_action = authz.cluster(AclOperation::ClusterAction);
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.0.to_string();
            let allowed = cluster_action || authz.topic(AclOperation::Describe, &name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let out = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(UNDEFINED);
                    if !allowed {
                        return out.with_error_code(TOPIC_AUTHORIZATION_FAILED);
                    }
                    let tp = TopicPartition::new(&name, p.partition);
                    let hosted = match leadership::leader_replica(ctx, &tp, p.current_leader_epoch)
                    {
                        Ok(h) => h,
                        Err(refusal) => return out.with_error_code(refusal.error.code),
                    };
                    match hosted.log.end_offset_for_leader_epoch(p.leader_epoch) {
                        Some((epoch, end)) => out.with_leader_epoch(epoch).with_end_offset(end),
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
