//! DeleteShareGroupOffsets (key 92, KIP-932): deletes the share state of whole topics of an
//! Empty share group, as `kafka-share-groups.sh --delete-offsets` does (Kafka 4.4's
//! `deleteShareGroupOffsets`). A consumer that subscribes again starts the topic's partitions
//! afresh at `share.auto.offset.reset`.
//!
//! For each topic, DeleteShareGroupState of every initialized partition of it goes through the
//! persister; the share partitions held here are dropped (leaders elsewhere dropped theirs when
//! the group's last session there ended); then the group forgets the topics whose state is gone
//! (its ShareGroupStatePartitionMetadata record, answered once committed).
//!
//! Kafka's answers: an empty group id INVALID_GROUP_ID; DELETE on the group denied
//! GROUP_AUTHORIZATION_FAILED; a missing group GROUP_ID_NOT_FOUND; a group with members
//! NON_EMPTY_GROUP (all top-level); per topic, READ on it denied TOPIC_AUTHORIZATION_FAILED, a
//! topic unknown or never initialized in the group UNKNOWN_TOPIC_OR_PARTITION ("There is no
//! offset information to delete."), a failed deletion its error. Answered by the group's
//! coordinator (NOT_COORDINATOR elsewhere); UNSUPPORTED_VERSION while share groups are off.

use std::sync::Arc;

use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::{DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse};
use millrace_cluster::acl::AclOperation;
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{self, NONE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::share_partitions::ShareKey;
use crate::share_persister::Persister;
use crate::BrokerContext;

api_handler! {
    /// DeleteShareGroupOffsets: its key, versions, handler and error codes.
    DeleteShareGroupOffsets, versions 0..=0, DeleteShareGroupOffsetsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz.clone(), request)),
}

response_fields!(
    DeleteShareGroupOffsetsResponse: errors[error_code, responses[error_code]],
    throttle_time_ms
);

/// Kafka's message for a topic with no share state in the group.
const NO_OFFSETS_MESSAGE: &str = "There is no offset information to delete.";

fn refused(code: i16, message: &str) -> DeleteShareGroupOffsetsResponse {
    DeleteShareGroupOffsetsResponse::default()
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
}

fn topic_answer(
    name: &str,
    topic_id: Uuid,
    code: i16,
    message: Option<&str>,
) -> DeleteShareGroupOffsetsResponseTopic {
    DeleteShareGroupOffsetsResponseTopic::default()
        .with_topic_name(topic_name(name))
        .with_topic_id(topic_id)
        .with_error_code(code)
        .with_error_message(message.map(str_bytes))
}

async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let group_id = request.group_id.0.to_string();
    let persister = match super::share_common::share_offsets_admission(
        &ctx,
        &authz,
        &group_id,
        AclOperation::Delete,
    ) {
        Ok(p) => p,
        Err((code, message)) => return refused(code, message),
    };
    let deadline = Persister::retry_deadline();
    let initialized = match ctx.groups.share_offsets_deletable(&group_id) {
        Ok(p) => p,
        Err(e) => {
            let mapped = error_codes::from_group(&e, "DeleteShareGroupOffsets");
            return refused(mapped.code, &e.to_string());
        }
    };
    let image = ctx.cluster.image();
    let mut responses = Vec::with_capacity(request.topics.len());
    let mut deleted = Vec::new();
    for t in request.topics {
        let name = t.topic_name.0.to_string();
        let topic_id = image.topic(&name).map(|m| m.topic_id);
        if !authz.topic(AclOperation::Read, &name) {
            responses.push(topic_answer(
                &name,
                topic_id.unwrap_or(Uuid::nil()),
                TOPIC_AUTHORIZATION_FAILED,
                Some("Topic authorization failed."),
            ));
            continue;
        }
        let Some((topic_id, (_, partitions))) =
            topic_id.and_then(|id| initialized.get(&id).map(|p| (id, p)))
        else {
            responses.push(topic_answer(
                &name,
                topic_id.unwrap_or(Uuid::nil()),
                UNKNOWN_TOPIC_OR_PARTITION,
                Some(NO_OFFSETS_MESSAGE),
            ));
            continue;
        };
        let mut failure = None;
        for &partition in partitions {
            match persister
                .retrying(deadline, || {
                    persister.delete(&group_id, topic_id, partition)
                })
                .await
            {
                Ok(()) => ctx.shares.forget(&ShareKey {
                    group_id: Arc::from(group_id.as_str()),
                    topic_id,
                    partition,
                }),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        match failure {
            None => {
                deleted.push(topic_id);
                responses.push(topic_answer(&name, topic_id, NONE, None));
            }
            Some(e) => responses.push(topic_answer(&name, topic_id, e.code, Some(&e.message))),
        }
    }
    let mut response = DeleteShareGroupOffsetsResponse::default().with_responses(responses);
    if !deleted.is_empty() {
        if let Err(e) = ctx.groups.share_topics_deleted(&group_id, deleted).await {
            let mapped = error_codes::from_group(&e, "DeleteShareGroupOffsets");
            response = response
                .with_error_code(mapped.code)
                .with_error_message(Some(str_bytes(&e.to_string())));
        }
    }
    response
}
