//! Where a partition request belongs, for the per-partition APIs (Produce, Fetch, ListOffsets,
//! OffsetForLeaderEpoch, DeleteRecords, DescribeProducers): the replica hosted here, or an error that tells the client
//! where to go instead (KIP-951: the current leader and its endpoint ride along with
//! NOT_LEADER_OR_FOLLOWER on Produce v10+ and Fetch v16+, so clients need no metadata round trip).

use std::collections::BTreeSet;
use std::sync::Arc;

use millrace_cluster::image::NO_LEADER;
use millrace_replication::{HostedPartition, PartitionError, ReplicaError};
use millrace_store::{PartitionLog, TopicPartition};

use crate::error_codes::{
    self, KafkaError, NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::BrokerContext;

/// The leader a client should talk to instead, as the committed image says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderHint {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

/// A partition-level refusal with the hint, if any.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub error: KafkaError,
    pub hint: Option<LeaderHint>,
}

impl Refusal {
    fn new(error: KafkaError, hint: Option<LeaderHint>) -> Self {
        Self { error, hint }
    }
}

/// The image's leader of `tp`, if the topic and partition exist.
pub fn leader_of(ctx: &BrokerContext, tp: &TopicPartition) -> Option<LeaderHint> {
    let image = ctx.cluster.image();
    let p = image.partition(&tp.topic, tp.partition)?;
    Some(LeaderHint {
        leader_id: p.leader,
        leader_epoch: p.leader_epoch,
    })
}

/// The refusal for a partition this broker hosts no replica of: UNKNOWN_TOPIC_OR_PARTITION when
/// the image does not know it, NOT_LEADER_OR_FOLLOWER (with the leader) when it does.
pub fn not_hosted(ctx: &BrokerContext, tp: &TopicPartition) -> Refusal {
    match leader_of(ctx, tp) {
        None => Refusal::new(KafkaError::code(UNKNOWN_TOPIC_OR_PARTITION), None),
        Some(hint) => Refusal::new(
            KafkaError::code(NOT_LEADER_OR_FOLLOWER),
            (hint.leader_id != NO_LEADER).then_some(hint),
        ),
    }
}

/// Maps a replica manager failure, adding the leader hint where it helps.
pub fn refusal(ctx: &BrokerContext, tp: &TopicPartition, err: &ReplicaError) -> Refusal {
    match err {
        ReplicaError::UnknownPartition(_) => not_hosted(ctx, tp),
        ReplicaError::Partition(PartitionError::NotLeader { .. }) => {
            // The image is fresher than a replica that just lost or has not taken leadership.
            let hint = leader_of(ctx, tp).filter(|h| h.leader_id != NO_LEADER);
            Refusal::new(KafkaError::code(NOT_LEADER_OR_FOLLOWER), hint)
        }
        other => Refusal::new(error_codes::from_replica(other, &tp.to_string()), None),
    }
}

/// The hosted replica that leads `tp` with `current_leader_epoch` (-1: any), or the refusal.
pub fn leader_replica(
    ctx: &BrokerContext,
    tp: &TopicPartition,
    current_leader_epoch: i32,
) -> Result<Arc<HostedPartition>, Refusal> {
    let Some(hosted) = ctx.replicas.partition(tp) else {
        return Err(not_hosted(ctx, tp));
    };
    match hosted.check_leader(current_leader_epoch) {
        Ok(_) => Ok(hosted),
        Err(e) => Err(refusal(ctx, tp, &ReplicaError::Partition(e))),
    }
}

/// The hosted replica that may serve a consumer's read of `tp` in `current_leader_epoch`: the
/// leader, or with `follower_too` (Fetch v11+, KIP-392) a follower too.
pub fn serving_replica(
    ctx: &BrokerContext,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    follower_too: bool,
) -> Result<Arc<HostedPartition>, Refusal> {
    let Some(hosted) = ctx.replicas.partition(tp) else {
        return Err(not_hosted(ctx, tp));
    };
    match hosted.check_serving(current_leader_epoch, follower_too) {
        Ok(_) => Ok(hosted),
        Err(e) => Err(refusal(ctx, tp, &ReplicaError::Partition(e))),
    }
}

/// The log of `topic`'s `partition` where this broker leads it at any leader epoch and the client
/// may act on the topic (`allowed`, checked by the caller for the API's operation); else the code
/// the partition gets: TOPIC_AUTHORIZATION_FAILED, or the leadership refusal's.
pub fn led_log(
    ctx: &BrokerContext,
    allowed: bool,
    topic: &str,
    partition: i32,
) -> Result<Arc<PartitionLog>, i16> {
    if !allowed {
        return Err(TOPIC_AUTHORIZATION_FAILED);
    }
    let tp = TopicPartition::new(topic, partition);
    match leader_replica(ctx, &tp, -1) {
        Ok(hosted) => Ok(Arc::clone(&hosted.log)),
        Err(refusal) => Err(refusal.error.code),
    }
}

/// Endpoints of the brokers named in `hints` (KIP-951 `node_endpoints`), on the client's
/// `listener`.
pub fn endpoints(
    ctx: &BrokerContext,
    hints: impl IntoIterator<Item = LeaderHint>,
    listener: &str,
) -> Vec<(i32, String, u16, Option<String>)> {
    let ids: BTreeSet<i32> = hints.into_iter().map(|h| h.leader_id).collect();
    let image = ctx.cluster.image();
    ids.into_iter()
        .filter_map(|id| image.broker(id))
        .filter_map(|b| {
            let (host, port) = b.endpoint_for(listener)?;
            Some((b.node_id, host.to_string(), port, b.rack.clone()))
        })
        .collect()
}
