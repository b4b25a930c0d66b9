//! ConsumerGroupDescribe (key 69, KIP-848): each consumer group's state, epochs, assignor and
//! members with their current and target assignments (topic ids and names). A classic group or
//! an unknown one gets GROUP_ID_NOT_FOUND, as in Kafka; the admin client then falls back to
//! DescribeGroups.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse};
use millrace_cluster::image::MetadataImage;
use millrace_groups::GroupError;

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use millrace_cluster::acl::AclOperation;
use millrace_cluster::acl::ResourceType;

use crate::error_codes;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ConsumerGroupDescribe: its key, versions, handler and error codes, for [`crate::registry`].
    ConsumerGroupDescribe, versions 0..=1, ConsumerGroupDescribeRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(ConsumerGroupDescribeResponse: errors[groups[error_code]], throttle_time_ms);

/// `authorized_operations` when the client did not ask for them.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// Member type of a member that speaks the consumer protocol (v1).
const MEMBER_TYPE_CONSUMER: i8 = 1;

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

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ConsumerGroupDescribeRequest,
    version: i16,
) -> ConsumerGroupDescribeResponse {
    let image = ctx.cluster.image();
    let include_operations = request.include_authorized_operations;
    let groups = request
        .group_ids
        .into_iter()
        .map(|id| match ctx.groups.describe_consumer_group(&id.0) {
            _ if !authz.group(AclOperation::Describe, &id.0) => DescribedGroup::default()
                .with_group_id(id)
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
                .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
            Err(e) => {
                let err = error_codes::from_group(&e, "ConsumerGroupDescribe");
                DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(err.code)
                    .with_error_message(Some(str_bytes(&match e {
                        GroupError::GroupIdNotFound => {
                            format!("Group {} not found or not a consumer group.", id.0)
                        }
                        other => other.to_string(),
                    })))
                    .with_group_state(str_bytes("Dead"))
                    .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
            }
            // A group whose assignments name a topic the client may not Describe is not shown
            // (Kafka's answer), so that describing it discloses no topic.
            Ok(d)
                if authz.enabled()
                    && d.members.iter().any(|m| {
                        m.member.assigned.keys().chain(m.target.keys()).any(|topic_id| {
                            image.topic_by_id(*topic_id).is_some_and(|t| {
                                !authz.topic(AclOperation::Describe, &t.name)
                            })
                        })
                    }) =>
            {
                DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    .with_error_message(Some(str_bytes(
                        "The group has described topic(s) that the client is not authorized to describe.",
                    )))
                    .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
            }
            Ok(d) => {
                let id_text = id.0.to_string();
                let members = d
                    .members
                    .iter()
                    .map(|m| {
                        let member = &m.member;
                        let mut out = Member::default()
                            .with_member_id(str_bytes(&member.member_id))
                            .with_instance_id(member.instance_id.as_deref().map(str_bytes))
                            .with_rack_id(member.rack_id.as_deref().map(str_bytes))
                            .with_member_epoch(member.member_epoch)
                            .with_client_id(str_bytes(&member.client_id))
                            .with_client_host(str_bytes(&member.client_host))
                            .with_subscribed_topic_names(
                                member
                                    .subscribed_topic_names
                                    .iter()
                                    .map(|n| topic_name(n))
                                    .collect(),
                            )
                            .with_subscribed_topic_regex(
                                member.subscribed_topic_regex.as_deref().map(str_bytes),
                            )
                            .with_assignment(assignment(&image, &member.assigned))
                            .with_target_assignment(assignment(&image, &m.target));
                        if version >= 1 {
                            out.member_type = MEMBER_TYPE_CONSUMER;
                        }
                        out
                    })
                    .collect();
                DescribedGroup::default()
                    .with_group_id(id)
                    .with_group_state(str_bytes(d.state.name()))
                    .with_group_epoch(d.group_epoch)
                    .with_assignment_epoch(d.assignment_epoch)
                    .with_assignor_name(str_bytes(d.assignor))
                    .with_members(members)
                    .with_authorized_operations(
                        include_operations
                            .then(|| authz.operations(ResourceType::Group, &id_text))
                            .flatten()
                            .unwrap_or(AUTHORIZED_OPERATIONS_OMITTED),
                    )
            }
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
