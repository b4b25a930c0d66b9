//! OffsetCommit (key 8): commits go to the coordinator, which appends them to
//! `__consumer_offsets` and answers once durable. Partitions of unknown topics get
//! UNKNOWN_TOPIC_OR_PARTITION, as in Kafka, and are not written.
//!
//! Served from v2 (Kafka 4's minimum). v2-4 carry `retention_time_ms`, v6+ the leader epoch, v7+
//! the group.instance.id, v10 names topics by id alone (KIP-848): an id the image does not know
//! (the zero id too) is UNKNOWN_TOPIC_ID for each of its partitions, as Kafka 4.4 answers, and the
//! response names topics by id. Generation -1 commits while the group is Empty (standalone consumers,
//! admin clients) and creates the group if needed; a generation ≥ 0 for an unknown group gets
//! GROUP_ID_NOT_FOUND from v9 and ILLEGAL_GENERATION before, as in Kafka.

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestPartition;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use millrace_groups::{CommitPartition, CommitRequest, GroupError};

use crate::authz::Authz;
use crate::error_codes::{
    self, ILLEGAL_GENERATION, NONE, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// OffsetCommit: its key, versions, handler and error codes, for [`crate::registry`].
    OffsetCommit, versions 2..=10, OffsetCommitRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(OffsetCommitResponse: errors[topics[partitions[error_code]]], throttle_time_ms);

/// A partition of the request: its index, and the error it gets without being committed.
pub(crate) type Slot = (i32, Option<i16>);

/// The first version that names topics by id alone (KIP-848).
const TOPIC_ID_VERSION_MIN: i16 = 10;

/// A partition of an OffsetCommit or TxnOffsetCommit request, whose fields are named alike.
pub(crate) trait RequestPartition {
    fn partition_index(&self) -> i32;
    /// The offset to commit in `topic`; the leader epoch only where the version carries one.
    fn into_commit(self, topic: &str, with_leader_epoch: bool) -> CommitPartition;
}

macro_rules! request_partition {
    ($($partition:ty),+) => {$(
        impl RequestPartition for $partition {
            fn partition_index(&self) -> i32 {
                self.partition_index
            }

            fn into_commit(self, topic: &str, with_leader_epoch: bool) -> CommitPartition {
                CommitPartition {
                    topic: topic.to_string(),
                    partition: self.partition_index,
                    offset: self.committed_offset,
                    leader_epoch: if with_leader_epoch { self.committed_leader_epoch } else { -1 },
                    metadata: self.committed_metadata.map(|m| m.to_string()),
                }
            }
        }
    )+};
}
request_partition!(
    OffsetCommitRequestPartition,
    TxnOffsetCommitRequestPartition
);

/// Walks a commit's partitions in request order: the code each gets without being committed
/// (`refusal`, the whole request's, for every one; else the topic's own, for an id the image
/// does not know; else TOPIC_AUTHORIZATION_FAILED without Read on the topic; else
/// UNKNOWN_TOPIC_OR_PARTITION where the image lacks the partition), and the partitions to commit.
pub(crate) fn check_partitions<P: RequestPartition>(
    ctx: &BrokerContext,
    authz: &Authz,
    refusal: Option<i16>,
    with_leader_epoch: bool,
    topics: impl Iterator<Item = (TopicName, Option<i16>, Vec<P>)>,
) -> (Vec<(TopicName, Vec<Slot>)>, Vec<CommitPartition>) {
    let mut layout = Vec::new();
    let mut partitions = Vec::new();
    for (topic, topic_refusal, requested) in topics {
        let name = topic.0.to_string();
        let refusal = refusal.or(topic_refusal);
        let topic_allowed = refusal.is_none() && authz.topic(AclOperation::Read, &name);
        let mut slots = Vec::with_capacity(requested.len());
        for p in requested {
            let index = p.partition_index();
            let refused = if refusal.is_some() {
                refusal
            } else if !topic_allowed {
                Some(TOPIC_AUTHORIZATION_FAILED)
            } else if ctx
                .cluster
                .topic(&name)
                .is_some_and(|t| t.partition(index).is_some())
            {
                None
            } else {
                Some(UNKNOWN_TOPIC_OR_PARTITION)
            };
            slots.push((index, refused));
            if refused.is_none() {
                partitions.push(p.into_commit(&name, with_leader_epoch));
            }
        }
        layout.push((topic, slots));
    }
    (layout, partitions)
}

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: OffsetCommitRequest,
    version: i16,
) -> impl Future<Output = OffsetCommitResponse> + Send + 'static {
    // Committing needs Read on the group, then Read on each topic (Kafka's order).
    let group_allowed = authz.group(AclOperation::Read, &request.group_id.0);
    let by_id = version >= TOPIC_ID_VERSION_MIN;
    // v10: each topic by its id; the response names it by the same id.
    let mut ids = Vec::with_capacity(request.topics.len());
    let topics = request.topics.into_iter().map(|t| {
        ids.push(t.topic_id);
        if !by_id {
            return (t.name, None, t.partitions);
        }
        match ctx.cluster.topic_by_id(t.topic_id) {
            Some(topic) => (super::topic_name(&topic.name), None, t.partitions),
            None => (
                TopicName(StrBytes::default()),
                Some(UNKNOWN_TOPIC_ID),
                t.partitions,
            ),
        }
    });
    let refusal = (!group_allowed).then_some(GROUP_AUTHORIZATION_FAILED);
    let (layout, partitions) = check_partitions(ctx, authz, refusal, version >= 6, topics);
    let commit = CommitRequest {
        group_id: request.group_id.0.to_string(),
        generation_id: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        group_instance_id: request
            .group_instance_id
            .filter(|_| version >= 7)
            .map(|s| s.to_string()),
        retention_time_ms: if version <= 4 {
            request.retention_time_ms
        } else {
            -1
        },
        partitions,
    };
    let reply = group_allowed.then(|| ctx.groups.commit_offsets(commit));
    async move {
        let results = match reply {
            Some(reply) => reply.await,
            None => Vec::new(),
        };
        let mut topics: Vec<OffsetCommitResponseTopic> = answer(layout, results, |e| match e {
            // A missing group only: a share group id gets GROUP_ID_NOT_FOUND at every version,
            // as Kafka's `ShareGroup.validateOffsetCommit` throws it whatever the version.
            GroupError::GroupIdNotFound if version < 9 => ILLEGAL_GENERATION,
            e => error_codes::from_group(e, "OffsetCommit").code,
        });
        if by_id {
            for (topic, id) in topics.iter_mut().zip(ids) {
                topic.topic_id = id;
            }
        }
        OffsetCommitResponse::default().with_topics(topics)
    }
}

/// A topic of an OffsetCommit or TxnOffsetCommit response, built alike from (partition, code).
pub(crate) trait ResponseTopic {
    fn new(name: TopicName, partitions: Vec<(i32, i16)>) -> Self;
}

macro_rules! response_topic {
    ($($topic:ty: $partition:ty),+) => {$(
        impl ResponseTopic for $topic {
            fn new(name: TopicName, partitions: Vec<(i32, i16)>) -> Self {
                let partitions = partitions
                    .into_iter()
                    .map(|(index, code)| {
                        <$partition>::default().with_partition_index(index).with_error_code(code)
                    })
                    .collect();
                Self::default().with_name(name).with_partitions(partitions)
            }
        }
    )+};
}
response_topic!(
    OffsetCommitResponseTopic: OffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic: TxnOffsetCommitResponsePartition
);

/// The response's topics once the group coordinator has answered: each slot's refusal, else the
/// next of `results` (`code` maps a group error), COORDINATOR_NOT_AVAILABLE's code for a slot the
/// answer does not reach.
pub(crate) fn answer<T: ResponseTopic>(
    layout: Vec<(TopicName, Vec<Slot>)>,
    results: Vec<Result<(), GroupError>>,
    code: impl Fn(&GroupError) -> i16,
) -> Vec<T> {
    let mut results = results.into_iter();
    layout
        .into_iter()
        .map(|(name, slots)| {
            let partitions = slots
                .into_iter()
                .map(|(index, refusal)| {
                    let code = refusal.unwrap_or_else(|| match results.next() {
                        Some(Ok(())) => NONE,
                        Some(Err(e)) => code(&e),
                        None => code(&GroupError::CoordinatorNotAvailable),
                    });
                    (index, code)
                })
                .collect();
            T::new(name, partitions)
        })
        .collect()
}
