//! DescribeGroups (key 15): state, protocol and members of each group. Members' metadata and
//! assignments are shown only in Stable, as Kafka does; an unknown group is "Dead" with NONE, and
//! so is a share or KIP-848 consumer group — below v6. From v6 (KIP-1043) both are "Dead" with
//! GROUP_ID_NOT_FOUND and Kafka 4.4's message ("Group G not found.", "Group G is not a classic
//! group.").

use std::sync::Arc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND};
use crate::handler::{api_handler, response_fields, Reply};
use millrace_cluster::acl::AclOperation;
use millrace_cluster::acl::ResourceType;
use millrace_groups::GroupState;

api_handler! {
    /// DescribeGroups: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeGroups, versions 0..=6, DescribeGroupsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

// Members carry no code of their own.
response_fields!(DescribeGroupsResponse: errors[groups[error_code]], throttle_time_ms);

/// First version where a group of another type is answered GROUP_ID_NOT_FOUND (KIP-1043).
const DEAD_WITH_ERROR_VERSION_MIN: i16 = 6;

/// First version with `include_authorized_operations`.
const AUTHORIZED_OPERATIONS_VERSION_MIN: i16 = 3;
use crate::error_codes;
use crate::BrokerContext;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let include_operations = request.include_authorized_operations;
    let groups = request
        .groups
        .into_iter()
        .map(|id| match ctx.groups.describe_group(&id.0) {
            _ if !authz.group(AclOperation::Describe, &id.0) => DescribedGroup::default()
                .with_group_id(id)
                .with_error_code(GROUP_AUTHORIZATION_FAILED),
            // A share or consumer group: not a classic group (`GroupIdNotFoundWith`), "Dead" with
            // no error before v6, as Kafka's `describeGroups`.
            Err(millrace_groups::GroupError::GroupIdNotFoundWith(_))
                if version < DEAD_WITH_ERROR_VERSION_MIN =>
            {
                DescribedGroup::default()
                    .with_group_id(id)
                    .with_group_state(str_bytes("Dead"))
            }
            Err(e) => {
                let mut dead = DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(error_codes::from_group(&e, "DescribeGroups").code)
                    .with_group_state(str_bytes("Dead"));
                if version >= DEAD_WITH_ERROR_VERSION_MIN {
                    dead.error_message = Some(str_bytes(&e.to_string()));
                }
                dead
            }
            // No such group: v6 says so (Kafka's `GroupIdNotFoundException`).
            Ok(d) if d.state == GroupState::Dead && version >= DEAD_WITH_ERROR_VERSION_MIN => {
                let message = format!("Group {} not found.", id.0);
                DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(str_bytes(&message)))
                    .with_group_state(str_bytes("Dead"))
            }
            Ok(d) => {
                let members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut member = DescribedGroupMember::default()
                            .with_member_id(str_bytes(&m.member_id))
                            .with_client_id(str_bytes(&m.client_id))
                            .with_client_host(str_bytes(&m.client_host))
                            .with_member_metadata(m.metadata)
                            .with_member_assignment(m.assignment);
                        if version >= 4 {
                            member.group_instance_id =
                                m.group_instance_id.as_deref().map(str_bytes);
                        }
                        member
                    })
                    .collect();
                let mut described = DescribedGroup::default();
                if version >= AUTHORIZED_OPERATIONS_VERSION_MIN && include_operations {
                    if let Some(ops) = authz.operations(ResourceType::Group, &id.0) {
                        described.authorized_operations = ops;
                    }
                }
                described
                    .with_group_id(id)
                    .with_group_state(str_bytes(d.state.name()))
                    .with_protocol_type(str_bytes(&d.protocol_type))
                    .with_protocol_data(str_bytes(&d.protocol_name))
                    .with_members(members)
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
