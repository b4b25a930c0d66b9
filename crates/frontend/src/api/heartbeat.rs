//! Heartbeat (key 12): keeps a member's session alive and tells it when to rejoin
//! (REBALANCE_IN_PROGRESS), or that it is gone (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION).

use std::sync::Arc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::authz::Authz;
use crate::error_codes::{self, GROUP_AUTHORIZATION_FAILED, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// Heartbeat: its key, versions, handler and error codes, for [`crate::registry`].
    Heartbeat, versions 0..=4, HeartbeatRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(HeartbeatResponse: errors[error_code], throttle_time_ms);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: HeartbeatRequest,
    version: i16,
) -> HeartbeatResponse {
    if !authz.group(AclOperation::Read, &request.group_id.0) {
        return HeartbeatResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    let instance = request
        .group_instance_id
        .as_ref()
        .filter(|_| version >= 3)
        .map(|s| s.to_string());
    let code = match ctx.groups.heartbeat(
        &request.group_id.0,
        &request.member_id,
        instance.as_deref(),
        request.generation_id,
    ) {
        Ok(()) => NONE,
        Err(e) => error_codes::from_group(&e, "Heartbeat").code,
    };
    HeartbeatResponse::default().with_error_code(code)
}
