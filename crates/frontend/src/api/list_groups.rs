//! ListGroups (key 16): every classic group this coordinator owns, optionally filtered by state
//! (v4+) and type (v5+: only "classic" groups exist here).

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::error_codes;
use crate::BrokerContext;

const GROUP_TYPE_CLASSIC: &str = "classic";

pub fn handle(
    ctx: &Arc<BrokerContext>,
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
    let classic_wanted = version < 5
        || request.types_filter.is_empty()
        || request
            .types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case(GROUP_TYPE_CLASSIC));
    match ctx.groups.list_groups(&states) {
        Err(e) => ListGroupsResponse::default()
            .with_error_code(error_codes::from_group(&e, "ListGroups").code),
        Ok(_) if !classic_wanted => ListGroupsResponse::default(),
        Ok(groups) => {
            let groups = groups
                .into_iter()
                .map(|g| {
                    let mut listed = ListedGroup::default()
                        .with_group_id(GroupId(str_bytes(&g.group_id)))
                        .with_protocol_type(str_bytes(&g.protocol_type));
                    if version >= 4 {
                        listed.group_state = str_bytes(g.state.name());
                    }
                    if version >= 5 {
                        listed.group_type = str_bytes("Classic");
                    }
                    listed
                })
                .collect();
            ListGroupsResponse::default().with_groups(groups)
        }
    }
}
