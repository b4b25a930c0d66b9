//! LeaveGroup (key 13): v0-2 name one member; v3+ a batch of (member id, group.instance.id) with
//! an error per member.

use std::sync::Arc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use crate::authz::Authz;
use crate::error_codes::{self, GROUP_AUTHORIZATION_FAILED, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// LeaveGroup: its key, versions, handler and error codes, for [`crate::registry`].
    LeaveGroup, versions 0..=5, LeaveGroupRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

// Per-member codes exist from v3 (batch leave).
response_fields!(LeaveGroupResponse: errors[error_code, members[error_code]], throttle_time_ms);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    if !authz.group(AclOperation::Read, &request.group_id.0) {
        return LeaveGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let code = |e: &millrace_groups::GroupError| error_codes::from_group(e, "LeaveGroup").code;
    match ctx.groups.leave(&request.group_id.0, &members) {
        Err(e) => LeaveGroupResponse::default().with_error_code(code(&e)),
        Ok(results) if version < 3 => {
            let first = results
                .first()
                .and_then(|r| r.as_ref().err())
                .map_or(NONE, code);
            LeaveGroupResponse::default().with_error_code(first)
        }
        Ok(results) => {
            let responses = members
                .into_iter()
                .zip(results)
                .map(|((member_id, instance), result)| {
                    MemberResponse::default()
                        .with_member_id(super::str_bytes(&member_id))
                        .with_group_instance_id(instance.as_deref().map(super::str_bytes))
                        .with_error_code(result.as_ref().err().map_or(NONE, code))
                })
                .collect();
            LeaveGroupResponse::default().with_members(responses)
        }
    }
}
