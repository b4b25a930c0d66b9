//! ShareGroupDescribe (key 77, KIP-932): each share group's state (Empty/Stable), group and
//! assignment epochs, assignor (`simple`) and members with their assignments (topic ids and
//! names). A missing group or one of another type gets GROUP_ID_NOT_FOUND with Kafka's message
//! ("Group X not found.", "Group X is not a share group.").
//!
//! ACLs as Kafka's `handleShareGroupDescribe`: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED),
//! and a group whose assignments name a topic the client may not describe is answered
//! TOPIC_AUTHORIZATION_FAILED with no members, so that describing it discloses no topic.
//!
//! Not here: the `share.version` feature gate, decided where the feature is served.

use std::sync::Arc;

use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse};
use millrace_cluster::acl::{AclOperation, ResourceType};
use millrace_cluster::image::MetadataImage;
use millrace_groups::ShareGroupDescription;

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{self, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ShareGroupDescribe: its key, versions, handler and error codes, for [`crate::registry`].
    ShareGroupDescribe, versions 1..=1, ShareGroupDescribeRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request)),
}

response_fields!(ShareGroupDescribeResponse: errors[groups[error_code]], throttle_time_ms);

/// `authorized_operations` when the client did not ask for them.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

fn assignment(image: &MetadataImage, a: &millrace_groups::Assignment) -> Assignment {
    Assignment::default().with_topic_partitions(
        a.iter()
            .filter(|(_, ps)| !ps.is_empty())
            .map(|(id, ps)| {
                let name = image
                    .topic_by_id(*id)
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
                TopicPartitions::default()
                    .with_topic_id(*id)
                    .with_topic_name(topic_name(&name))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

/// Whether a member is assigned a topic the client may not describe.
fn hides_topics(authz: &Authz, image: &MetadataImage, d: &ShareGroupDescription) -> bool {
    authz.enabled()
        && d.members.iter().any(|m| {
            m.assigned.keys().any(|topic_id| {
                image
                    .topic_by_id(*topic_id)
                    .is_some_and(|t| !authz.topic(AclOperation::Describe, &t.name))
            })
        })
}

fn described(
    authz: &Authz,
    image: &MetadataImage,
    d: ShareGroupDescription,
    include_operations: bool,
) -> DescribedGroup {
    let members = d
        .members
        .iter()
        .map(|m| {
            Member::default()
                .with_member_id(str_bytes(&m.member_id))
                .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                .with_member_epoch(m.member_epoch)
                .with_client_id(str_bytes(&m.client_id))
                .with_client_host(str_bytes(&m.client_host))
                .with_subscribed_topic_names(
                    m.subscribed_topic_names
                        .iter()
                        .map(|n| topic_name(n))
                        .collect(),
                )
                .with_assignment(assignment(image, &m.assigned))
        })
        .collect();
    DescribedGroup::default()
        .with_group_id(kafka_protocol::messages::GroupId(str_bytes(&d.group_id)))
        .with_group_state(str_bytes(d.state.name()))
        .with_group_epoch(d.group_epoch)
        .with_assignment_epoch(d.assignment_epoch)
        .with_assignor_name(str_bytes(d.assignor))
        .with_members(members)
        .with_authorized_operations(
            include_operations
                .then(|| authz.operations(ResourceType::Group, &d.group_id))
                .flatten()
                .unwrap_or(AUTHORIZED_OPERATIONS_OMITTED),
        )
}

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    if !ctx.shares.settings.enabled {
        // Kafka with `share.version` 0: the whole request is refused.
        return ShareGroupDescribeResponse::default().with_groups(
            request
                .group_ids
                .into_iter()
                .map(|id| {
                    DescribedGroup::default()
                        .with_group_id(id)
                        .with_error_code(crate::error_codes::UNSUPPORTED_VERSION)
                        .with_error_message(Some(str_bytes(super::share_common::DISABLED_MESSAGE)))
                })
                .collect(),
        );
    }
    let image = ctx.cluster.image();
    let include_operations = request.include_authorized_operations;
    let groups = request
        .group_ids
        .into_iter()
        .map(|id| {
            let refused = |code: i16, message: String| {
                DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(&message)))
                    .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
            };
            if !authz.group(AclOperation::Describe, &id.0) {
                return refused(
                    GROUP_AUTHORIZATION_FAILED,
                    "Group authorization failed.".to_string(),
                );
            }
            match ctx.groups.describe_share_group(&id.0) {
                Err(e) => refused(
                    error_codes::from_group(&e, "ShareGroupDescribe").code,
                    e.to_string(),
                ),
                Ok(d) if hides_topics(authz, &image, &d) => refused(
                    TOPIC_AUTHORIZATION_FAILED,
                    "The group has described topic(s) that the client is not authorized to describe."
                        .to_string(),
                ),
                Ok(d) => described(authz, &image, d, include_operations),
            }
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(groups)
}
