//! AlterShareGroupOffsets (key 91, KIP-932): sets the start offset of share partitions of an
//! Empty share group, as `kafka-share-groups.sh --reset-offsets --execute` does (Kafka 4.4's
//! `alterShareGroupOffsets`).
//!
//! Each valid partition's share state is replaced by InitializeShareGroupState through the
//! persister: a fresh state at the given start offset, no in-flight records. Its state epoch is
//! the group epoch (Kafka's), raised above the epoch the state had so that a share-partition
//! leader still holding the old state is fenced on its next write (Kafka relies on the group
//! epoch having moved since). The share partition held here, if any, is dropped so the next
//! fetch loads the new state; leaders elsewhere dropped theirs when the group's last session
//! there ended (`share_partitions.rs`). The partitions are then recorded as initialized in the
//! group (created if it did not exist, as Kafka does).
//!
//! Kafka's answers: an empty group id INVALID_GROUP_ID; READ on the group denied
//! GROUP_AUTHORIZATION_FAILED; a group with members NON_EMPTY_GROUP; a group of another type
//! GROUP_ID_NOT_FOUND (all top-level); per partition, READ on the topic denied
//! TOPIC_AUTHORIZATION_FAILED, an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION, a failed
//! initialization its error. Answered by the group's coordinator (NOT_COORDINATOR elsewhere);
//! UNSUPPORTED_VERSION while share groups are off.

use std::sync::Arc;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse};
use millrace_cluster::acl::AclOperation;
use millrace_groups::InitializedPartitions;
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{self, NONE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::share_partitions::ShareKey;
use crate::share_persister::Persister;
use crate::BrokerContext;

api_handler! {
    /// AlterShareGroupOffsets: its key, versions, handler and error codes.
    AlterShareGroupOffsets, versions 0..=0, AlterShareGroupOffsetsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz.clone(), request)),
}

response_fields!(
    AlterShareGroupOffsetsResponse: errors[error_code, responses[partitions[error_code]]],
    throttle_time_ms
);

fn refused(code: i16, message: &str) -> AlterShareGroupOffsetsResponse {
    AlterShareGroupOffsetsResponse::default()
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
}

fn partition_answer(
    partition: i32,
    code: i16,
    message: Option<&str>,
) -> AlterShareGroupOffsetsResponsePartition {
    AlterShareGroupOffsetsResponsePartition::default()
        .with_partition_index(partition)
        .with_error_code(code)
        .with_error_message(message.map(str_bytes))
}

async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let group_id = request.group_id.0.to_string();
    let persister = match super::share_common::share_offsets_admission(
        &ctx,
        &authz,
        &group_id,
        AclOperation::Read,
    ) {
        Ok(p) => p,
        Err((code, message)) => return refused(code, message),
    };
    let deadline = Persister::retry_deadline();
    let group_epoch = match ctx.groups.share_offsets_alterable(&group_id).await {
        Ok(epoch) => epoch,
        Err(e) => {
            let mapped = error_codes::from_group(&e, "AlterShareGroupOffsets");
            return refused(mapped.code, &e.to_string());
        }
    };
    let image = ctx.cluster.image();
    let mut responses = Vec::with_capacity(request.topics.len());
    let mut initialized = InitializedPartitions::new();
    for t in request.topics {
        let name = t.topic_name.0.to_string();
        let readable = authz.topic(AclOperation::Read, &name);
        let topic = image.topic(&name);
        let topic_id = topic.map_or(Uuid::nil(), |m| m.topic_id);
        let mut answers = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let index = p.partition_index;
            if !readable {
                answers.push(partition_answer(
                    index,
                    TOPIC_AUTHORIZATION_FAILED,
                    Some("Topic authorization failed."),
                ));
                continue;
            }
            if !topic.is_some_and(|m| index >= 0 && index < m.partition_count()) {
                answers.push(partition_answer(
                    index,
                    UNKNOWN_TOPIC_OR_PARTITION,
                    Some("This server does not host this topic-partition."),
                ));
                continue;
            }
            // Above the stored state epoch, so that a stale share-partition leader is fenced.
            let stored = persister
                .retrying(deadline, || {
                    persister.read_summary(&group_id, topic_id, index)
                })
                .await
                .map_or(0, |s| s.state_epoch);
            let state_epoch = group_epoch.max(stored.saturating_add(1));
            let start_offset = p.start_offset;
            match persister
                .retrying(deadline, || {
                    persister.initialize(&group_id, topic_id, index, state_epoch, start_offset)
                })
                .await
            {
                Ok(()) => {
                    ctx.shares.forget(&ShareKey {
                        group_id: Arc::from(group_id.as_str()),
                        topic_id,
                        partition: index,
                    });
                    initialized
                        .entry(topic_id)
                        .or_insert_with(|| (name.clone(), Default::default()))
                        .1
                        .insert(index);
                    answers.push(partition_answer(index, NONE, None));
                }
                Err(e) => answers.push(partition_answer(index, e.code, Some(&e.message))),
            }
        }
        responses.push(
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(topic_name(&name))
                .with_topic_id(topic_id)
                .with_partitions(answers),
        );
    }
    let mut response = AlterShareGroupOffsetsResponse::default().with_responses(responses);
    if !initialized.is_empty() {
        if let Err(e) = ctx
            .groups
            .share_partitions_initialized(&group_id, initialized)
            .await
        {
            let mapped = error_codes::from_group(&e, "AlterShareGroupOffsets");
            response = response
                .with_error_code(mapped.code)
                .with_error_message(Some(str_bytes(&e.to_string())));
        }
    }
    response
}
