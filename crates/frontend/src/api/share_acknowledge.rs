//! ShareAcknowledge (key 79, KIP-932): a share consumer's acknowledgements without a fetch
//! (commitSync/commitAsync, and the closing of a session). It shares the share session and its
//! epoch counter with ShareFetch, cannot open a session (epoch 0 is
//! INVALID_SHARE_SESSION_EPOCH), and with epoch -1 applies its acknowledgements, then ends the
//! session and releases what the member still holds. Each partition succeeds or fails whole
//! ([`super::share_common::acknowledge`]).

use std::sync::Arc;

use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{BrokerId, ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use millrace_cluster::acl::AclOperation;

use super::leadership::{self, LeaderHint};
use super::share_common::{
    self, WireAck, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
};
use super::str_bytes;
use crate::authz::Authz;
use crate::clock::now_ms;
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, UNSUPPORTED_VERSION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::share_session::ShareSessionError;
use crate::BrokerContext;

api_handler! {
    /// ShareAcknowledge: its key, versions, handler and error codes, for [`crate::registry`].
    ShareAcknowledge, versions 1..=2, ShareAcknowledgeRequest,
    |call, request| {
        let listener = call.session.listener.to_string();
        Reply::later(handle(call.ctx.clone(), call.authz.clone(), request, call.version, listener))
    },
}

response_fields!(
    ShareAcknowledgeResponse:
    errors[error_code, responses[partitions[error_code]]],
    throttle_time_ms
);

/// First version whose answer carries `acquisition_lock_timeout_ms`.
const LOCK_TIMEOUT_VERSION_MIN: i16 = 2;

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: ShareAcknowledgeRequest,
    version: i16,
    listener: String,
) -> ShareAcknowledgeResponse {
    let (ctx, authz, listener) = (&ctx, &authz, listener.as_str());
    let mut response = ShareAcknowledgeResponse::default();
    if version >= LOCK_TIMEOUT_VERSION_MIN {
        let group = request.group_id.as_ref().map_or("", |g| g.0.as_str());
        response.acquisition_lock_timeout_ms = i32::try_from(
            ctx.shares
                .settings
                .group(group)
                .partition
                .record_lock_duration_ms,
        )
        .unwrap_or(i32::MAX);
    }
    let refuse = |mut response: ShareAcknowledgeResponse, code: i16, message: &str| {
        response.error_code = code;
        response.error_message = Some(str_bytes(message));
        response
    };
    if !ctx.shares.settings.enabled {
        return refuse(
            response,
            UNSUPPORTED_VERSION,
            share_common::DISABLED_MESSAGE,
        );
    }
    let member = match share_common::member_key(
        request.group_id.as_ref().map(|g| g.0.as_str()),
        request.member_id.as_ref().map(|m| m.as_str()),
    ) {
        Ok(m) => m,
        Err(why) => return refuse(response, INVALID_REQUEST, why),
    };
    if !authz.group(AclOperation::Read, &member.group_id) {
        return refuse(response, GROUP_AUTHORIZATION_FAILED, "");
    }
    let step = match ctx
        .shares
        .sessions
        .acknowledge(&member, request.share_session_epoch)
    {
        Ok(step) => step,
        Err(e) => {
            let code = match e {
                ShareSessionError::NotFound => SHARE_SESSION_NOT_FOUND,
                ShareSessionError::InvalidEpoch => INVALID_SHARE_SESSION_EPOCH,
                ShareSessionError::LimitReached => SHARE_SESSION_LIMIT_REACHED,
            };
            return refuse(response, code, &e.to_string());
        }
    };
    let renew = version >= 2 && request.is_renew_ack;
    let now = now_ms();
    let mut hints: Vec<LeaderHint> = Vec::new();
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let batches: Vec<WireAck<'_>> = p
                .acknowledgement_batches
                .iter()
                .map(|b| {
                    (
                        b.first_offset,
                        b.last_offset,
                        b.acknowledge_types.as_slice(),
                    )
                })
                .collect();
            let outcome = share_common::acknowledge(
                ctx,
                authz,
                &member,
                (topic.topic_id, p.partition_index),
                &batches,
                renew,
                now,
            )
            .await;
            let mut data = PartitionData::default()
                .with_partition_index(p.partition_index)
                .with_error_code(outcome.code)
                .with_error_message(outcome.message.as_deref().map(str_bytes));
            if let Some(hint) = outcome.hint {
                data.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(hint.leader_id)
                    .with_leader_epoch(hint.leader_epoch);
                hints.push(hint);
            }
            partitions.push(data);
        }
        response.responses.push(
            ShareAcknowledgeTopicResponse::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    if step.closed {
        ctx.shares
            .release_member(&member.group_id, &member.member_id, &step.partitions, now);
    }
    response.node_endpoints = leadership::endpoints(ctx, hints, listener)
        .into_iter()
        .map(|(id, host, port, rack)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(i32::from(port))
                .with_rack(rack.as_deref().map(str_bytes))
        })
        .collect();
    response
}
