//! JoinGroup (key 11): translated into a [`millrace_groups::JoinRequest`]; the answer is deferred
//! until the group's rebalance completes (or at once for errors and MEMBER_ID_REQUIRED).
//!
//! Version notes: v0 has no rebalance timeout (the session timeout is used), v4+ gets the
//! MEMBER_ID_REQUIRED handshake, v5+ static membership, v7+ protocol type in the response, v9
//! `skip_assignment`. Fields a version lacks are left at their defaults, so encoding never fails.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use millrace_groups::{JoinRequest, Protocol};

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{self, GROUP_AUTHORIZATION_FAILED, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// JoinGroup: its key, versions, handler and error codes, for [`crate::registry`].
    JoinGroup, versions 0..=9, JoinGroupRequest,
    |call, request| {
        let peer = call.session.peer;
        Reply::later(handle(call.ctx, &call.authz, request, call.version, call.client_id, peer))
    },
}

// Members carry no code of their own.
response_fields!(JoinGroupResponse: errors[error_code], throttle_time_ms);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: JoinGroupRequest,
    version: i16,
    client_id: &str,
    peer: SocketAddr,
) -> impl Future<Output = JoinGroupResponse> + Send + 'static {
    let join = JoinRequest {
        group_id: request.group_id.0.to_string(),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: if version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        },
        member_id: request.member_id.to_string(),
        group_instance_id: request
            .group_instance_id
            .as_ref()
            .filter(|_| version >= 5)
            .map(|s| s.to_string()),
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| Protocol {
                name: p.name.to_string(),
                // Copied: a slice would keep the whole request (and its share of
                // queued.max.request.bytes) alive for as long as the member exists.
                metadata: bytes::Bytes::copy_from_slice(&p.metadata),
            })
            .collect(),
        client_id: client_id.to_string(),
        client_host: format!("/{}", peer.ip()),
        require_known_member_id: version >= 4,
    };
    // Joining needs Read on the group.
    let reply = authz
        .group(AclOperation::Read, &join.group_id)
        .then(|| ctx.groups.join(join));
    async move {
        let Some(reply) = reply else {
            let mut refused = JoinGroupResponse::default()
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
                .with_generation_id(-1);
            refused.protocol_name = (version < 7).then(|| str_bytes(""));
            return refused;
        };
        let r = reply.await;
        let code = r
            .error
            .as_ref()
            .map_or(NONE, |e| error_codes::from_group(e, "JoinGroup").code);
        let mut response = JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(r.generation_id)
            .with_leader(str_bytes(&r.leader))
            .with_member_id(str_bytes(&r.member_id));
        response.protocol_name = if version >= 7 {
            r.protocol_name.as_deref().map(str_bytes)
        } else {
            Some(str_bytes(r.protocol_name.as_deref().unwrap_or_default()))
        };
        if version >= 7 {
            response.protocol_type = r.protocol_type.as_deref().map(str_bytes);
        }
        if version >= 9 {
            response.skip_assignment = r.skip_assignment;
        }
        response.members = r
            .members
            .into_iter()
            .map(|m| {
                let mut member = JoinGroupResponseMember::default()
                    .with_member_id(str_bytes(&m.member_id))
                    .with_metadata(m.metadata);
                if version >= 5 {
                    member.group_instance_id = m.group_instance_id.as_deref().map(str_bytes);
                }
                member
            })
            .collect();
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_codes::UNKNOWN_MEMBER_ID;
    use crate::handler::counted_errors;

    #[test]
    fn error_metrics_count_its_code() {
        let response = JoinGroupResponse::default().with_error_code(UNKNOWN_MEMBER_ID);
        assert_eq!(counted_errors::<JoinGroup>(&response), vec![25]);
        assert!(counted_errors::<JoinGroup>(&JoinGroupResponse::default()).is_empty());
    }
}
