//! ListGroups (key 16): every group this coordinator owns, classic, consumer (KIP-848) and share
//! (KIP-932, protocol type "share", group type "Share", states Empty/Stable), optionally filtered by
//! state (v4+) and type (v5+: "classic", "consumer", "share"), both case-insensitively.

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::authz::Authz;
use millrace_cluster::acl::AclOperation;

use crate::error_codes;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ListGroups: its key, versions, handler and error codes, for [`crate::registry`].
    ListGroups, versions 0..=5, ListGroupsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(ListGroupsResponse: errors[error_code], throttle_time_ms);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let states: Vec<String> = if version >= 4 {
        request
            .states_filter
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        Vec::new()
    };
    let type_wanted = |group_type: &str| {
        version < 5
            || request.types_filter.is_empty()
            || request
                .types_filter
                .iter()
                .any(|t| t.eq_ignore_ascii_case(group_type))
    };
    let cluster_describe = authz.cluster(AclOperation::Describe);
    match ctx.groups.list_groups(&states) {
        Err(e) => ListGroupsResponse::default()
            .with_error_code(error_codes::from_group(&e, "ListGroups").code),
        Ok(groups) => {
            let groups = groups
                .into_iter()
                .filter(|g| type_wanted(g.group_type))
                // Describe on the cluster lists every group; else those the client may describe.
                .filter(|g| cluster_describe || authz.group(AclOperation::Describe, &g.group_id))
                .map(|g| {
                    let mut listed = ListedGroup::default()
                        .with_group_id(GroupId(str_bytes(&g.group_id)))
                        .with_protocol_type(str_bytes(&g.protocol_type));
                    if version >= 4 {
                        listed.group_state = str_bytes(g.state);
                    }
                    if version >= 5 {
                        listed.group_type = str_bytes(g.group_type);
                    }
                    listed
                })
                .collect();
            ListGroupsResponse::default().with_groups(groups)
        }
    }
}
