//! SyncGroup (key 14): the leader hands in the assignments; every member's answer is deferred
//! until the leader's has arrived (and the group's metadata record is durable). v5+ echoes the
//! protocol type and name.

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use millrace_groups::SyncRequest;

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{self, GROUP_AUTHORIZATION_FAILED, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// SyncGroup: its key, versions, handler and error codes, for [`crate::registry`].
    SyncGroup, versions 0..=5, SyncGroupRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(SyncGroupResponse: errors[error_code], throttle_time_ms);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: SyncGroupRequest,
    version: i16,
) -> impl Future<Output = SyncGroupResponse> + Send + 'static {
    let sync = SyncRequest {
        group_id: request.group_id.0.to_string(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        group_instance_id: request
            .group_instance_id
            .as_ref()
            .filter(|_| version >= 3)
            .map(|s| s.to_string()),
        protocol_type: request
            .protocol_type
            .as_ref()
            .filter(|_| version >= 5)
            .map(|s| s.to_string()),
        protocol_name: request
            .protocol_name
            .as_ref()
            .filter(|_| version >= 5)
            .map(|s| s.to_string()),
        assignments: request
            .assignments
            .into_iter()
            // Copied, not sliced from the request: see join_group.rs.
            .map(|a| {
                let assignment = bytes::Bytes::copy_from_slice(&a.assignment);
                (a.member_id.to_string(), assignment)
            })
            .collect(),
    };
    let reply = authz
        .group(AclOperation::Read, &sync.group_id)
        .then(|| ctx.groups.sync(sync));
    async move {
        let Some(reply) = reply else {
            return SyncGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
        };
        let r = reply.await;
        let code = r
            .error
            .as_ref()
            .map_or(NONE, |e| error_codes::from_group(e, "SyncGroup").code);
        let mut response = SyncGroupResponse::default()
            .with_error_code(code)
            .with_assignment(r.assignment);
        if version >= 5 {
            response.protocol_type = r.protocol_type.as_deref().map(str_bytes);
            response.protocol_name = r.protocol_name.as_deref().map(str_bytes);
        }
        response
    }
}
