//! Consumer groups as v3 shows them ([`GroupView`]), read from their coordinators the way Kafka's
//! admin client reads them: ListGroups on every live broker (each lists the groups it
//! coordinates), then ConsumerGroupDescribe for consumer-protocol groups (KIP-848) and
//! DescribeGroups for classic ones, on the same broker — forwarded there when it is another one.
//!
//! A classic member's partitions come from its assignment (the consumer protocol's
//! `ConsumerProtocolAssignment`, which Kafka shows only while the group is Stable); a
//! consumer-protocol member's from its current assignment. A group that does not exist (Dead, or
//! unknown to its coordinator) is `None`. Only consumer groups are listed (protocol type
//! `consumer`, or none for a group that only commits offsets), as Kafka's `listConsumerGroups`.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerProtocolAssignment,
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, ListGroupsRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use millrace_frontend::api::consumer_group_describe::ConsumerGroupDescribe;
use millrace_frontend::api::describe_groups::DescribeGroups;
use millrace_frontend::api::list_groups::ListGroups;
use millrace_frontend::error_codes as kafka;
use tracing::debug;

use super::errors;
use crate::{Caller, RestApi, RestError};

const LIST_GROUPS_VERSION: i16 = 5;
const DESCRIBE_GROUPS_VERSION: i16 = 5;
const CONSUMER_GROUP_DESCRIBE_VERSION: i16 = 1;
/// Groups one v3 list describes at most (sorted by id, the first ones); one answer stays
/// bounded however many groups the cluster has.
pub const GROUPS_LISTED_MAX: usize = 10_000;
/// The newest `ConsumerProtocolAssignment` version; a newer one is read as this one (Kafka's
/// consumer protocol stays readable across versions).
const ASSIGNMENT_VERSION_MAX: i16 = 3;
/// ConsumerGroupDescribe's member type of a member that speaks the classic protocol.
const MEMBER_TYPE_CLASSIC: i8 = 0;

/// One consumer group, as v3 describes it.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub group_id: String,
    /// A group that only commits offsets (no protocol type).
    pub is_simple: bool,
    pub partition_assignor: String,
    /// Confluent's state name (`STABLE`, `PREPARING_REBALANCE`, …).
    pub state: &'static str,
    /// `CLASSIC` or `CONSUMER`.
    pub group_type: &'static str,
    pub is_mixed: bool,
    pub coordinator: i32,
    pub members: Vec<MemberView>,
}

/// One member of a group.
#[derive(Debug, Clone)]
pub struct MemberView {
    pub consumer_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    /// (topic, partition), sorted.
    pub assignments: Vec<(String, i32)>,
}

impl GroupView {
    /// The member `partition` of `topic` is assigned to.
    pub fn owner_of(&self, topic: &str, partition: i32) -> Option<&MemberView> {
        self.members.iter().find(|m| {
            m.assignments
                .iter()
                .any(|(t, p)| t == topic && *p == partition)
        })
    }
}

/// Confluent's name of a group state, from Kafka's (`PreparingRebalance`, `stable`, …).
fn state_name(kafka_state: &str) -> &'static str {
    let folded: String = kafka_state
        .chars()
        .filter(|c| *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    match folded.as_str() {
        "stable" => "STABLE",
        "preparingrebalance" => "PREPARING_REBALANCE",
        "completingrebalance" => "COMPLETING_REBALANCE",
        "assigning" => "ASSIGNING",
        "reconciling" => "RECONCILING",
        "empty" => "EMPTY",
        "dead" => "DEAD",
        _ => "UNKNOWN",
    }
}

/// The partitions of a classic member's assignment bytes; none when they are empty or not the
/// consumer protocol's.
fn classic_assignment(bytes: &Bytes) -> Vec<(String, i32)> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16().min(ASSIGNMENT_VERSION_MAX);
    if version < 0 {
        return Vec::new();
    }
    let Ok(assignment) = ConsumerProtocolAssignment::decode(&mut buf, version) else {
        return Vec::new();
    };
    let mut out: Vec<(String, i32)> = assignment
        .assigned_partitions
        .iter()
        .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.0.to_string(), *p)))
        .collect();
    out.sort();
    out
}

fn group_id(id: &str) -> GroupId {
    GroupId(StrBytes::from_string(id.to_string()))
}

/// The views of the classic groups of a DescribeGroups answer from `coordinator`; `Err` for the
/// first group refused with an error other than "no such group".
fn classic_views(
    response: DescribeGroupsResponse,
    coordinator: i32,
) -> Result<Vec<GroupView>, RestError> {
    let mut out = Vec::new();
    for g in response.groups {
        let id = g.group_id.0.to_string();
        if g.error_code == kafka::GROUP_ID_NOT_FOUND
            || (g.error_code == kafka::NONE && state_name(&g.group_state) == "DEAD")
        {
            continue;
        }
        if g.error_code != kafka::NONE {
            return Err(errors::kafka(
                g.error_code,
                g.error_message.as_deref(),
                &format!("group {id}"),
            ));
        }
        let consumer_protocol = g.protocol_type.as_str() == "consumer";
        out.push(GroupView {
            group_id: id,
            is_simple: g.protocol_type.is_empty(),
            partition_assignor: g.protocol_data.to_string(),
            state: state_name(&g.group_state),
            group_type: "CLASSIC",
            is_mixed: false,
            coordinator,
            members: g
                .members
                .iter()
                .map(|m| MemberView {
                    consumer_id: m.member_id.to_string(),
                    instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    assignments: if consumer_protocol {
                        classic_assignment(&m.member_assignment)
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        });
    }
    Ok(out)
}

/// The views of the consumer-protocol groups of a ConsumerGroupDescribe answer from
/// `coordinator`, and the ids it says are not such groups (classic or unknown).
fn consumer_views(
    response: ConsumerGroupDescribeResponse,
    coordinator: i32,
) -> Result<(Vec<GroupView>, Vec<String>), RestError> {
    let mut views = Vec::new();
    let mut other = Vec::new();
    for g in response.groups {
        let id = g.group_id.0.to_string();
        if g.error_code == kafka::GROUP_ID_NOT_FOUND {
            other.push(id);
            continue;
        }
        if g.error_code != kafka::NONE {
            return Err(errors::kafka(
                g.error_code,
                g.error_message.as_deref(),
                &format!("group {id}"),
            ));
        }
        if state_name(&g.group_state) == "DEAD" {
            continue;
        }
        views.push(GroupView {
            group_id: id,
            is_simple: false,
            partition_assignor: g.assignor_name.to_string(),
            state: state_name(&g.group_state),
            group_type: "CONSUMER",
            is_mixed: g
                .members
                .iter()
                .any(|m| m.member_type == MEMBER_TYPE_CLASSIC),
            coordinator,
            members: g
                .members
                .iter()
                .map(|m| {
                    let mut assignments: Vec<(String, i32)> = m
                        .assignment
                        .topic_partitions
                        .iter()
                        .flat_map(|tp| {
                            tp.partitions
                                .iter()
                                .map(|p| (tp.topic_name.0.to_string(), *p))
                        })
                        .collect();
                    assignments.sort();
                    MemberView {
                        consumer_id: m.member_id.to_string(),
                        instance_id: m.instance_id.as_ref().map(|i| i.to_string()),
                        client_id: m.client_id.to_string(),
                        assignments,
                    }
                })
                .collect(),
        });
    }
    Ok((views, other))
}

/// Describes `ids` on their coordinator `node`: consumer-protocol groups first, the rest as
/// classic groups; groups that do not exist are left out.
async fn describe_on(
    api: &RestApi,
    caller: &Caller,
    node: i32,
    ids: &[String],
) -> Result<Vec<GroupView>, RestError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let request = ConsumerGroupDescribeRequest::default()
        .with_group_ids(ids.iter().map(|id| group_id(id)).collect());
    let response = api
        .gateway
        .call_on::<ConsumerGroupDescribe>(node, caller, CONSUMER_GROUP_DESCRIBE_VERSION, request)
        .await?;
    let (mut views, classic) = consumer_views(response, node)?;
    if !classic.is_empty() {
        let request = DescribeGroupsRequest::default()
            .with_groups(classic.iter().map(|id| group_id(id)).collect());
        let response = api
            .gateway
            .call_on::<DescribeGroups>(node, caller, DESCRIBE_GROUPS_VERSION, request)
            .await?;
        views.extend(classic_views(response, node)?);
    }
    Ok(views)
}

/// Group `id` as `caller` sees it; `None` when it does not exist.
pub async fn describe(
    api: &RestApi,
    caller: &Caller,
    id: &str,
) -> Result<Option<GroupView>, RestError> {
    // No offsets topic yet: no group has ever had a coordinator.
    if api
        .gateway
        .image()?
        .topic(millrace_groups::OFFSETS_TOPIC)
        .is_none()
    {
        return Ok(None);
    }
    let coordinator = api.gateway.coordinator_of(id)?;
    let views = describe_on(api, caller, coordinator, &[id.to_string()]).await?;
    Ok(views.into_iter().find(|v| v.group_id == id))
}

/// Every consumer group `caller` may Describe on `brokers` (the live ones), sorted by id, at most
/// [`GROUPS_LISTED_MAX`]. A broker that cannot answer (still loading its groups, unreachable) is
/// passed over, as Kafka's admin client keeps only the valid listings.
pub async fn list(
    api: &RestApi,
    caller: &Caller,
    brokers: &[i32],
) -> Result<Vec<GroupView>, RestError> {
    let mut by_coordinator: Vec<(i32, Vec<String>)> = Vec::new();
    let mut listed = 0usize;
    for &node in brokers {
        let answer = api
            .gateway
            .call_on::<ListGroups>(
                node,
                caller,
                LIST_GROUPS_VERSION,
                ListGroupsRequest::default(),
            )
            .await;
        let response = match answer {
            Ok(r) if r.error_code == kafka::NONE => r,
            Ok(r) => {
                debug!(
                    node,
                    error = kafka::error_name(r.error_code),
                    "ListGroups refused"
                );
                continue;
            }
            Err(e) => {
                debug!(node, error = %e, "ListGroups failed");
                continue;
            }
        };
        let mut ids: Vec<String> = response
            .groups
            .iter()
            .filter(|g| matches!(g.protocol_type.as_str(), "consumer" | ""))
            .map(|g| g.group_id.0.to_string())
            .collect();
        ids.sort();
        ids.truncate(GROUPS_LISTED_MAX.saturating_sub(listed));
        listed += ids.len();
        by_coordinator.push((node, ids));
    }
    let mut views = Vec::new();
    for (node, ids) in by_coordinator {
        views.extend(describe_on(api, caller, node, &ids).await?);
    }
    views.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    Ok(views)
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::{ConsumerProtocolAssignment, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::{classic_assignment, state_name};

    #[test]
    fn states_take_confluents_names() {
        assert_eq!(state_name("Stable"), "STABLE");
        assert_eq!(state_name("PreparingRebalance"), "PREPARING_REBALANCE");
        assert_eq!(state_name("CompletingRebalance"), "COMPLETING_REBALANCE");
        assert_eq!(state_name("Empty"), "EMPTY");
        assert_eq!(state_name("Dead"), "DEAD");
        assert_eq!(state_name("reconciling"), "RECONCILING");
        assert_eq!(state_name("assigning"), "ASSIGNING");
        assert_eq!(state_name("not_ready"), "UNKNOWN");
    }

    #[test]
    fn classic_assignments_are_read_from_the_consumer_protocol() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![2, 0]),
        ]);
        let mut bytes = BytesMut::new();
        bytes.put_i16(1);
        assignment.encode(&mut bytes, 1).expect("encode");
        let read = classic_assignment(&bytes.freeze());
        assert_eq!(read, vec![("t".to_string(), 0), ("t".to_string(), 2)]);
        assert!(classic_assignment(&bytes::Bytes::new()).is_empty());
        assert!(classic_assignment(&bytes::Bytes::from_static(&[0, 1, 0xff])).is_empty());
    }
}
