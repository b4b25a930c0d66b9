//! OffsetCommit (key 8): commits go to the coordinator, which appends them to
//! `__consumer_offsets` and answers once durable. Partitions of unknown topics get
//! UNKNOWN_TOPIC_OR_PARTITION, as in Kafka, and are not written.
//!
//! Served from v2 (Kafka 4's minimum). v2-4 carry `retention_time_ms`, v6+ the leader epoch, v7+
//! the group.instance.id. Generation -1 commits while the group is Empty (standalone consumers,
//! admin clients) and creates the group if needed; a generation ≥ 0 for an unknown group gets
//! GROUP_ID_NOT_FOUND from v9 and ILLEGAL_GENERATION before, as in Kafka.

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, TopicName};
use millrace_groups::{CommitPartition, CommitRequest, GroupError};

use crate::authz::Authz;
use crate::error_codes::{self, ILLEGAL_GENERATION, NONE, UNKNOWN_TOPIC_OR_PARTITION};
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// OffsetCommit: its key, versions, handler and error codes, for [`crate::registry`].
    OffsetCommit, versions 2..=9, OffsetCommitRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(OffsetCommitResponse: errors[topics[partitions[error_code]]], throttle_time_ms);

/// A partition of the request: its index, and the error it gets without being committed.
type Slot = (i32, Option<i16>);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: OffsetCommitRequest,
    version: i16,
) -> impl Future<Output = OffsetCommitResponse> + Send + 'static {
    // Committing needs Read on the group, then Read on each topic (Kafka's order).
    let group_allowed = authz.group(AclOperation::Read, &request.group_id.0);
    // (topic, partition, refusal) in request order.
    let mut layout: Vec<(TopicName, Vec<Slot>)> = Vec::new();
    let mut partitions = Vec::new();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let topic_allowed = group_allowed && authz.topic(AclOperation::Read, &name);
        let mut slots = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let refusal = if !group_allowed {
                Some(GROUP_AUTHORIZATION_FAILED)
            } else if !topic_allowed {
                Some(TOPIC_AUTHORIZATION_FAILED)
            } else if ctx
                .cluster
                .topic(&name)
                .is_some_and(|t| t.partition(p.partition_index).is_some())
            {
                None
            } else {
                Some(UNKNOWN_TOPIC_OR_PARTITION)
            };
            slots.push((p.partition_index, refusal));
            if refusal.is_none() {
                partitions.push(CommitPartition {
                    topic: name.clone(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: p.committed_metadata.map(|m| m.to_string()),
                });
            }
        }
        layout.push((topic.name, slots));
    }
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
        let mut results = match reply {
            Some(reply) => reply.await,
            None => Vec::new(),
        }
        .into_iter();
        let topics = layout
            .into_iter()
            .map(|(name, slots)| {
                let partitions = slots
                    .into_iter()
                    .map(|(index, refusal)| {
                        let code = if let Some(code) = refusal {
                            code
                        } else {
                            match results.next() {
                                Some(Ok(())) => NONE,
                                Some(Err(GroupError::GroupIdNotFound)) if version < 9 => {
                                    ILLEGAL_GENERATION
                                }
                                Some(Err(e)) => error_codes::from_group(&e, "OffsetCommit").code,
                                None => {
                                    error_codes::from_group(
                                        &GroupError::CoordinatorNotAvailable,
                                        "OffsetCommit",
                                    )
                                    .code
                                }
                            }
                        };
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(index)
                            .with_error_code(code)
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetCommitResponse::default().with_topics(topics)
    }
}
