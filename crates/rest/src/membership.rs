//! The HTTP API's consumers as group members: a KIP-848 consumer-group member kept alive by
//! ConsumerGroupHeartbeat on the group's coordinator (the server assigns partitions; the member
//! takes what it is given and reports it as owned in its next heartbeat), the group's committed
//! offsets (OffsetFetch) and commits (OffsetCommit with the member's id and epoch, as Kafka
//! requires of a consumer-group member). Every call goes to the coordinator, found in the metadata
//! image (FindCoordinator first creates `__consumer_offsets` when it does not exist yet).
//!
//! Members of the HTTP API use the consumer protocol; Kafka clients of the same group must use it
//! too (`group.protocol=consumer`), as a group does not mix protocols while it has members.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, FindCoordinatorRequest, GroupId,
    OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::protocol::{Decodable, Encodable};
use millrace_frontend::api::consumer_group_describe::ConsumerGroupDescribe;
use millrace_frontend::api::consumer_group_heartbeat::ConsumerGroupHeartbeat;
use millrace_frontend::api::find_coordinator::FindCoordinator;
use millrace_frontend::api::offset_commit::OffsetCommit;
use millrace_frontend::api::offset_fetch::OffsetFetch;
use millrace_frontend::error_codes;
use millrace_frontend::handler::ApiHandler;

use crate::error::RestError;
use crate::gateway::{Caller, Gateway};

/// ConsumerGroupHeartbeat v0 (server-side assignor, topic names in the subscription).
const HEARTBEAT_VERSION: i16 = 0;
/// ConsumerGroupDescribe v0.
const DESCRIBE_VERSION: i16 = 0;
/// OffsetCommit v9: the newest that names topics; carries the member id and epoch.
const OFFSET_COMMIT_VERSION: i16 = 9;
/// OffsetFetch v8: several groups per request, topics by name.
const OFFSET_FETCH_VERSION: i16 = 8;
/// FindCoordinator v4 (batched keys).
const FIND_COORDINATOR_VERSION: i16 = 4;
/// How long to wait for a group coordinator to be elected and loaded.
const COORDINATOR_WAIT: Duration = Duration::from_secs(10);
/// The pause between two looks for a coordinator.
const COORDINATOR_RETRY: Duration = Duration::from_millis(100);
/// The epoch that leaves the group.
const LEAVE_EPOCH: i32 = -1;
/// The rebalance timeout a member announces (the Kafka consumer's `max.poll.interval.ms`).
const REBALANCE_TIMEOUT_MS: i32 = 300_000;

/// A topic partition by name.
pub type TopicPartition = (String, i32);

/// One member of a consumer group, as the coordinator last answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub group: String,
    /// Chosen by the HTTP API (a UUID), as KIP-848 clients choose theirs.
    pub member_id: String,
    /// 0 until the first heartbeat answers.
    pub epoch: i32,
    pub topics: Vec<String>,
    /// The partitions the coordinator assigned, by topic name.
    pub assignment: Vec<TopicPartition>,
    /// How often the coordinator wants a heartbeat.
    pub heartbeat_interval: Duration,
}

impl Member {
    /// A member about to join `group` subscribed to `topics`.
    pub fn new(group: &str, member_id: &str, topics: Vec<String>) -> Self {
        Self {
            group: group.to_string(),
            member_id: member_id.to_string(),
            epoch: 0,
            topics,
            assignment: Vec::new(),
            heartbeat_interval: Duration::from_secs(5),
        }
    }
}

/// The coordinator of `group`, waiting (bounded) while it is being elected or loaded.
pub async fn coordinator(
    gateway: &Gateway,
    caller: &Caller,
    group: &str,
) -> Result<i32, RestError> {
    let deadline = Instant::now() + COORDINATOR_WAIT;
    loop {
        let found = match gateway.coordinator_of(group) {
            Ok(node) => Ok(node),
            Err(_) => find_coordinator(gateway, caller, group).await,
        };
        match found {
            Ok(node) => return Ok(node),
            Err(e) if Instant::now() < deadline && e.status.is_server_error() => {
                tokio::time::sleep(COORDINATOR_RETRY).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether `code` says the group's coordinator moved or is still loading (ask again).
fn coordinator_moving(code: i16) -> bool {
    matches!(
        code,
        error_codes::NOT_COORDINATOR
            | error_codes::COORDINATOR_LOAD_IN_PROGRESS
            | error_codes::COORDINATOR_NOT_AVAILABLE
    )
}

/// Calls `H` on `group`'s coordinator, asking again (bounded by [`COORDINATOR_WAIT`]) while the
/// answer's `code` says the coordinator moved or is loading.
async fn on_coordinator<H>(
    gateway: &Gateway,
    caller: &Caller,
    group: &str,
    version: i16,
    request: H::Request,
    code: fn(&H::Response) -> i16,
) -> Result<H::Response, RestError>
where
    H: ApiHandler,
    H::Request: Encodable + Clone,
    H::Response: Decodable,
{
    let deadline = Instant::now() + COORDINATOR_WAIT;
    loop {
        let node = coordinator(gateway, caller, group).await?;
        let response = gateway
            .call_on::<H>(node, caller, version, request.clone())
            .await?;
        if !coordinator_moving(code(&response)) || Instant::now() >= deadline {
            return Ok(response);
        }
        tokio::time::sleep(COORDINATOR_RETRY).await;
    }
}

/// FindCoordinator on this broker (which creates `__consumer_offsets` if it has to).
async fn find_coordinator(
    gateway: &Gateway,
    caller: &Caller,
    group: &str,
) -> Result<i32, RestError> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
    let response = gateway
        .call::<FindCoordinator>(caller, FIND_COORDINATOR_VERSION, request)
        .await?;
    let answer = response
        .coordinators
        .first()
        .ok_or_else(|| RestError::internal("FindCoordinator answered no coordinator"))?;
    if answer.error_code != error_codes::NONE {
        return Err(RestError::kafka(
            answer.error_code,
            &format!("group {group}"),
        ));
    }
    Ok(answer.node_id.0)
}

/// One heartbeat for `member` (epoch 0 joins): its epoch, assignment and interval are updated
/// from the answer. Errors are the coordinator's (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH: the
/// member must join again).
pub async fn heartbeat(
    gateway: &Gateway,
    caller: &Caller,
    member: &mut Member,
) -> Result<(), RestError> {
    let image = gateway.image()?;
    let owned = (member.epoch > 0).then(|| topic_ids(&image, &member.assignment));
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(member.group.clone())))
        .with_member_id(StrBytes::from_string(member.member_id.clone()))
        .with_member_epoch(member.epoch)
        .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
        .with_subscribed_topic_names(Some(
            member
                .topics
                .iter()
                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                .collect(),
        ))
        .with_topic_partitions(owned.or_else(|| Some(Vec::new())));
    let response = on_coordinator::<ConsumerGroupHeartbeat>(
        gateway,
        caller,
        &member.group,
        HEARTBEAT_VERSION,
        request,
        |r| r.error_code,
    )
    .await?;
    if response.error_code != error_codes::NONE {
        return Err(RestError::kafka(
            response.error_code,
            &format!("group {} member {}", member.group, member.member_id),
        ));
    }
    member.epoch = response.member_epoch;
    member.heartbeat_interval =
        Duration::from_millis(u64::try_from(response.heartbeat_interval_ms).unwrap_or(5_000));
    if let Some(assignment) = response.assignment {
        let mut assigned = Vec::new();
        for tp in assignment.topic_partitions {
            if let Some(topic) = image.topic_by_id(tp.topic_id) {
                assigned.extend(tp.partitions.iter().map(|p| (topic.name.clone(), *p)));
            }
        }
        assigned.sort();
        member.assignment = assigned;
    }
    Ok(())
}

/// Leaves the group (epoch -1). Errors are ignored by callers that are closing anyway.
pub async fn leave(gateway: &Gateway, caller: &Caller, member: &Member) -> Result<(), RestError> {
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(member.group.clone())))
        .with_member_id(StrBytes::from_string(member.member_id.clone()))
        .with_member_epoch(LEAVE_EPOCH);
    let response = on_coordinator::<ConsumerGroupHeartbeat>(
        gateway,
        caller,
        &member.group,
        HEARTBEAT_VERSION,
        request,
        |r| r.error_code,
    )
    .await?;
    match response.error_code {
        error_codes::NONE | error_codes::UNKNOWN_MEMBER_ID => Ok(()),
        code => Err(RestError::kafka(code, &format!("group {}", member.group))),
    }
}

/// The member as the coordinator knows it now (epoch and assignment; `None` if it is not a
/// member), for a broker that did not send its last heartbeat.
pub async fn describe(
    gateway: &Gateway,
    caller: &Caller,
    group: &str,
    member_id: &str,
) -> Result<Option<Member>, RestError> {
    let request = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_string()))]);
    let response = on_coordinator::<ConsumerGroupDescribe>(
        gateway,
        caller,
        group,
        DESCRIBE_VERSION,
        request,
        |r| r.groups.first().map_or(error_codes::NONE, |g| g.error_code),
    )
    .await?;
    let Some(described) = response.groups.into_iter().next() else {
        return Ok(None);
    };
    match described.error_code {
        error_codes::NONE => {}
        error_codes::GROUP_ID_NOT_FOUND => return Ok(None),
        code => return Err(RestError::kafka(code, &format!("group {group}"))),
    }
    let Some(m) = described
        .members
        .into_iter()
        .find(|m| m.member_id.as_str() == member_id)
    else {
        return Ok(None);
    };
    let mut assignment: Vec<TopicPartition> = m
        .assignment
        .topic_partitions
        .iter()
        .flat_map(|tp| {
            tp.partitions
                .iter()
                .map(|p| (tp.topic_name.0.to_string(), *p))
        })
        .collect();
    assignment.sort();
    Ok(Some(Member {
        group: group.to_string(),
        member_id: member_id.to_string(),
        epoch: m.member_epoch,
        topics: m
            .subscribed_topic_names
            .iter()
            .map(|t| t.0.to_string())
            .collect(),
        assignment,
        heartbeat_interval: Duration::from_secs(5),
    }))
}

/// A committed offset and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub metadata: Option<String>,
}

/// The group's committed offsets for `partitions` (all of the group's when `None`); partitions
/// without a committed offset are left out.
pub async fn committed(
    gateway: &Gateway,
    caller: &Caller,
    group: &str,
    partitions: Option<&[TopicPartition]>,
) -> Result<BTreeMap<TopicPartition, Committed>, RestError> {
    let topics = partitions.map(|ps| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in ps {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopics::default()
                    .with_name(TopicName(StrBytes::from_string(t.to_string())))
                    .with_partition_indexes(ps)
            })
            .collect()
    });
    let request =
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_epoch(-1)
            .with_topics(topics)]);
    let response =
        on_coordinator::<OffsetFetch>(gateway, caller, group, OFFSET_FETCH_VERSION, request, |r| {
            r.groups.first().map_or(error_codes::NONE, |g| g.error_code)
        })
        .await?;
    let Some(answer) = response.groups.into_iter().next() else {
        return Err(RestError::internal("OffsetFetch answered no group"));
    };
    if answer.error_code != error_codes::NONE {
        return Err(RestError::kafka(
            answer.error_code,
            &format!("group {group}"),
        ));
    }
    let mut out = BTreeMap::new();
    for topic in answer.topics {
        for p in topic.partitions {
            if p.error_code != error_codes::NONE {
                return Err(RestError::kafka(
                    p.error_code,
                    &format!(
                        "group {group} partition {}-{}",
                        topic.name.0, p.partition_index
                    ),
                ));
            }
            if p.committed_offset >= 0 {
                out.insert(
                    (topic.name.0.to_string(), p.partition_index),
                    Committed {
                        offset: p.committed_offset,
                        metadata: p.metadata.map(|m| m.to_string()),
                    },
                );
            }
        }
    }
    Ok(out)
}

/// Commits `offsets` for `group` as `member` (its id and epoch; `None`: a commit from outside
/// the group, which Kafka accepts only while the group has no members). Answers the partitions
/// the coordinator refused, with their Kafka error codes.
pub async fn commit(
    gateway: &Gateway,
    caller: &Caller,
    group: &str,
    member: Option<(&str, i32)>,
    offsets: &BTreeMap<TopicPartition, Committed>,
) -> Result<Vec<(TopicPartition, i16)>, RestError> {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((t, p), c) in offsets {
        by_topic.entry(t.as_str()).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(c.offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(c.metadata.clone().map(StrBytes::from_string)),
        );
    }
    let (member_id, epoch) = member.unwrap_or(("", -1));
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(epoch)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_retention_time_ms(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let response = on_coordinator::<OffsetCommit>(
        gateway,
        caller,
        group,
        OFFSET_COMMIT_VERSION,
        request,
        |r| {
            r.topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .map(|p| p.error_code)
                .find(|c| coordinator_moving(*c))
                .unwrap_or(error_codes::NONE)
        },
    )
    .await?;
    Ok(response
        .topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name.0.to_string();
            t.partitions
                .into_iter()
                .filter(|p| p.error_code != error_codes::NONE)
                .map(move |p| ((name.clone(), p.partition_index), p.error_code))
        })
        .collect())
}

/// `partitions` as KIP-848's owned partitions, by topic id (topics no longer in the image are
/// left out).
fn topic_ids(
    image: &millrace_cluster::image::MetadataImage,
    partitions: &[TopicPartition],
) -> Vec<TopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        by_topic.entry(t.as_str()).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .filter_map(|(t, ps)| {
            image.topic(t).map(|topic| {
                TopicPartitions::default()
                    .with_topic_id(topic.topic_id)
                    .with_partitions(ps)
            })
        })
        .collect()
}
