//! ShareGroupHeartbeat (key 76, KIP-932): the one membership request of a share group — join
//! (epoch 0, with a member id the client made), stay, leave (epoch -1). The coordinator steps the
//! group against the current metadata image and answers with the member's epoch and, when it
//! must hear it, its assignment by topic id; a partition may be assigned to several members.
//!
//! Checks in Kafka's order (`KafkaApis.handleShareGroupHeartbeat`): READ on the group, the member
//! id (1 to 36 characters, else INVALID_REQUEST "Invalid member id"), DESCRIBE on every topic the
//! request subscribes to; the coordinator then checks the other fields and routes the group.
//!
//! Not here: the `share.version` feature gate (UNSUPPORTED_VERSION while share groups are off),
//! which is decided where the feature is served.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use millrace_cluster::acl::AclOperation;
use millrace_groups::share_group::SHARE_MEMBER_ID_CHARS_MAX;
use millrace_groups::{GroupError, ShareHeartbeatRequest, ShareHeartbeatResponse};

use super::consumer_group_heartbeat::ImageTopics;
use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{
    self, GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, TOPIC_AUTHORIZATION_FAILED,
    UNSUPPORTED_VERSION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ShareGroupHeartbeat: its key, versions, handler and error codes, for [`crate::registry`].
    ShareGroupHeartbeat, versions 1..=1, ShareGroupHeartbeatRequest,
    |call, request| {
        let peer = call.session.peer;
        Reply::later(handle(call.ctx, &call.authz, request, call.client_id, peer))
    },
}

response_fields!(ShareGroupHeartbeatResponse: errors[error_code], throttle_time_ms);

/// The refusal the front end answers before the coordinator sees the request, if any.
fn refusal(authz: &Authz, request: &ShareGroupHeartbeatRequest) -> Option<(i16, String)> {
    if !authz.group(AclOperation::Read, &request.group_id.0) {
        return Some((
            GROUP_AUTHORIZATION_FAILED,
            "Group authorization failed.".to_string(),
        ));
    }
    let member_chars = request.member_id.chars().count();
    if member_chars == 0 || member_chars > SHARE_MEMBER_ID_CHARS_MAX {
        return Some((INVALID_REQUEST, "Invalid member id".to_string()));
    }
    let denied: Vec<&str> = request
        .subscribed_topic_names
        .iter()
        .flatten()
        .map(|n| n.0.as_str())
        .filter(|n| !authz.topic(AclOperation::Describe, n))
        .collect();
    (!denied.is_empty()).then(|| {
        (
            TOPIC_AUTHORIZATION_FAILED,
            format!(
                "The following topics are not authorized: {}",
                denied.join(", ")
            ),
        )
    })
}

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ShareGroupHeartbeatRequest,
    client_id: &str,
    peer: SocketAddr,
) -> impl Future<Output = ShareGroupHeartbeatResponse> + Send + 'static {
    let disabled = (!ctx.shares.settings.enabled).then(|| {
        (
            UNSUPPORTED_VERSION,
            super::share_common::DISABLED_MESSAGE.to_string(),
        )
    });
    if let Some((code, message)) = disabled.or_else(|| refusal(authz, &request)) {
        let response = ShareGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(&message)));
        return futures::future::Either::Left(std::future::ready(response));
    }
    let req = ShareHeartbeatRequest {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        rack_id: request.rack_id.map(|s| s.to_string()),
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        client_id: client_id.to_string(),
        client_host: format!("/{}", peer.ip()),
        timeouts: crate::group_settings::share_timeouts(ctx, &request.group_id.0),
    };
    let reply = ctx
        .groups
        .share_heartbeat(&req, &ImageTopics(ctx.cluster.image()));
    futures::future::Either::Right(async move { respond(reply.await) })
}

fn respond(result: Result<ShareHeartbeatResponse, GroupError>) -> ShareGroupHeartbeatResponse {
    match result {
        Err(e) => {
            let err = error_codes::from_group(&e, "ShareGroupHeartbeat");
            ShareGroupHeartbeatResponse::default()
                .with_error_code(err.code)
                .with_error_message(Some(str_bytes(&e.to_string())))
        }
        Ok(r) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&r.member_id)))
            .with_member_epoch(r.member_epoch)
            .with_heartbeat_interval_ms(r.heartbeat_interval_ms)
            .with_assignment(r.assignment.map(|a| {
                Assignment::default().with_topic_partitions(
                    a.into_iter()
                        .map(|(topic_id, partitions)| {
                            TopicPartitions::default()
                                .with_topic_id(topic_id)
                                .with_partitions(partitions.into_iter().collect())
                        })
                        .collect(),
                )
            })),
    }
}
