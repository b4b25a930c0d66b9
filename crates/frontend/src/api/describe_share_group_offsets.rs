//! DescribeShareGroupOffsets (key 90, KIP-932): each share partition's start offset, the leader
//! epoch its state last recorded and (v1) its lag, as `kafka-share-groups.sh --describe` and
//! Admin's `listShareGroupOffsets` show them (Kafka 4.4's `describeShareGroupOffsets`).
//!
//! Where the numbers come from: ReadShareGroupStateSummary through the persister (the share
//! coordinator may be another broker), and the partition's high watermark (its leader's
//! ListOffsets latest). Lag = high watermark − start offset − delivery-complete count, -1 while
//! either is unknown; a summary that fails is answered as no data (start offset -1, leader epoch
//! 0), as Kafka does.
//!
//! Kafka's answers: a group with no `Topics` (null) lists every initialized partition of the
//! share group, nothing (and no error) for a group that does not exist; named topics are read
//! whatever the group, a topic that does not exist answers start offset -1 with the zero topic id
//! and no error. ACLs: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for the group), DESCRIBE
//! on each named topic (TOPIC_AUTHORIZATION_FAILED on its partitions; unnamed topics the client
//! may not describe are left out). Answered by the group's coordinator (NOT_COORDINATOR
//! elsewhere); UNSUPPORTED_VERSION while share groups are off.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
    ListOffsetsRequest, ListOffsetsResponse,
};
use millrace_cluster::acl::AclOperation;
use millrace_cluster::image::NO_LEADER;
use millrace_groups::GroupError;
use uuid::Uuid;

use super::{leadership, str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{
    self, GROUP_AUTHORIZATION_FAILED, NONE, TOPIC_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::share_persister::Persister;
use crate::BrokerContext;

api_handler! {
    /// DescribeShareGroupOffsets: its key, versions, handler and error codes.
    DescribeShareGroupOffsets, versions 0..=1, DescribeShareGroupOffsetsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz.clone(), request)),
}

response_fields!(
    DescribeShareGroupOffsetsResponse: errors[groups[error_code, topics[partitions[error_code]]]],
    throttle_time_ms
);

/// Kafka's start offset of a share partition without state.
const UNINITIALIZED_START_OFFSET: i64 = -1;
/// Kafka's lag while it is unknown.
const UNINITIALIZED_LAG: i64 = -1;
/// How long asking another broker for a partition's high watermark may take.
const LATEST_OFFSET_TIMEOUT: Duration = Duration::from_secs(5);
/// ListOffsets' replica id of a consumer.
const CONSUMER_REPLICA_ID: i32 = -1;
/// ListOffsets' timestamp for the latest offset.
const LATEST_TIMESTAMP: i64 = -1;

/// The topics and partitions of one group to describe: (name, id, partitions), the id `None` for
/// a topic that does not exist.
type Wanted = Vec<(String, Option<Uuid>, Vec<i32>)>;

async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let deadline = Persister::retry_deadline();
    let mut groups = Vec::with_capacity(request.groups.len());
    for group in request.groups {
        groups.push(describe_group(&ctx, &authz, group, deadline).await);
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

fn group_error(
    group_id: kafka_protocol::messages::GroupId,
    code: i16,
    message: &str,
) -> DescribeShareGroupOffsetsResponseGroup {
    DescribeShareGroupOffsetsResponseGroup::default()
        .with_group_id(group_id)
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
}

async fn describe_group(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    group: DescribeShareGroupOffsetsRequestGroup,
    deadline: tokio::time::Instant,
) -> DescribeShareGroupOffsetsResponseGroup {
    let group_id = group.group_id.clone();
    if !ctx.shares.settings.enabled {
        return group_error(
            group_id,
            UNSUPPORTED_VERSION,
            super::share_common::DISABLED_MESSAGE,
        );
    }
    if !authz.group(AclOperation::Describe, &group_id.0) {
        return group_error(
            group_id,
            GROUP_AUTHORIZATION_FAILED,
            "Group authorization failed.",
        );
    }
    let image = ctx.cluster.image();
    // The coordinator's question comes first: only the group's coordinator answers.
    let initialized = match ctx.groups.share_group_partitions(&group_id.0) {
        Ok(p) => p,
        Err(GroupError::GroupIdNotFound | GroupError::GroupIdNotFoundWith(_)) => Default::default(),
        Err(e) => {
            let mapped = error_codes::from_group(&e, "DescribeShareGroupOffsets");
            return group_error(group_id, mapped.code, &e.to_string());
        }
    };
    let mut topics = Vec::new();
    let wanted: Wanted = match group.topics {
        None => initialized
            .into_iter()
            .filter_map(|(id, (_, partitions))| {
                let name = image.topic_by_id(id)?.name.clone();
                authz
                    .topic(AclOperation::Describe, &name)
                    .then(|| (name, Some(id), partitions.into_iter().collect()))
            })
            .collect(),
        Some(named) => {
            let mut wanted = Vec::with_capacity(named.len());
            for t in named {
                let name = t.topic_name.0.to_string();
                if !authz.topic(AclOperation::Describe, &name) {
                    topics.push(refused_topic(&name, &t.partitions));
                    continue;
                }
                let id = image.topic(&name).map(|m| m.topic_id);
                wanted.push((name, id, t.partitions));
            }
            wanted
        }
    };
    let persister = ctx.shares.persister();
    for (name, id, partitions) in wanted {
        let mut answers = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let answer = match (id, persister) {
                (Some(id), Some(persister)) => {
                    describe_partition(ctx, persister, deadline, &group_id.0, &name, id, partition)
                        .await
                }
                _ => no_data(partition),
            };
            answers.push(answer);
        }
        topics.push(
            DescribeShareGroupOffsetsResponseTopic::default()
                .with_topic_name(topic_name(&name))
                .with_topic_id(id.unwrap_or(Uuid::nil()))
                .with_partitions(answers),
        );
    }
    DescribeShareGroupOffsetsResponseGroup::default()
        .with_group_id(group_id)
        .with_topics(topics)
        .with_error_code(NONE)
}

fn no_data(partition: i32) -> DescribeShareGroupOffsetsResponsePartition {
    DescribeShareGroupOffsetsResponsePartition::default()
        .with_partition_index(partition)
        .with_start_offset(UNINITIALIZED_START_OFFSET)
        .with_leader_epoch(0)
        .with_lag(UNINITIALIZED_LAG)
}

fn refused_topic(name: &str, partitions: &[i32]) -> DescribeShareGroupOffsetsResponseTopic {
    DescribeShareGroupOffsetsResponseTopic::default()
        .with_topic_name(topic_name(name))
        .with_topic_id(Uuid::nil())
        .with_partitions(
            partitions
                .iter()
                .map(|p| {
                    no_data(*p)
                        .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                        .with_error_message(Some(str_bytes("Topic authorization failed.")))
                })
                .collect(),
        )
}

/// One share partition: its summary, and its lag when both numbers are known.
async fn describe_partition(
    ctx: &Arc<BrokerContext>,
    persister: &Persister,
    deadline: tokio::time::Instant,
    group_id: &str,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
) -> DescribeShareGroupOffsetsResponsePartition {
    let summary = persister
        .retrying(deadline, || {
            persister.read_summary(group_id, topic_id, partition)
        })
        .await;
    let Ok(summary) = summary else {
        return no_data(partition);
    };
    let answer = no_data(partition)
        .with_start_offset(summary.start_offset)
        .with_leader_epoch(summary.leader_epoch);
    if summary.start_offset < 0 || summary.delivery_complete_count < 0 {
        return answer;
    }
    match latest_offset(ctx, topic, partition).await {
        Ok(latest) => answer.with_lag(
            latest
                .saturating_sub(summary.start_offset)
                .saturating_sub(i64::from(summary.delivery_complete_count)),
        ),
        Err((code, message)) => answer
            .with_error_code(code)
            .with_error_message(Some(str_bytes(&message))),
    }
}

/// The partition's latest offset (its high watermark): from its log when it is led here, else
/// by ListOffsets to its leader.
async fn latest_offset(
    ctx: &Arc<BrokerContext>,
    topic: &str,
    partition: i32,
) -> Result<i64, (i16, String)> {
    if let Ok(log) = leadership::led_log(ctx, true, topic, partition) {
        return Ok(log.high_watermark());
    }
    let unavailable = |m: String| (error_codes::LEADER_NOT_AVAILABLE, m);
    let leader = ctx
        .cluster
        .image()
        .topic(topic)
        .and_then(|t| t.partition(partition).map(|p| p.leader))
        .unwrap_or(NO_LEADER);
    if leader == NO_LEADER || leader == ctx.cluster.node_id() {
        return Err(unavailable(format!("{topic}-{partition} has no leader")));
    }
    let addr = ctx
        .replicas
        .broker_address(leader)
        .ok_or_else(|| unavailable(format!("no address for broker {leader}")))?;
    let client_id = format!("broker-{}-share-lag", ctx.cluster.node_id());
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(CONSUMER_REPLICA_ID))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(LATEST_TIMESTAMP)])]);
    let failed = |e: String| (error_codes::UNKNOWN_SERVER_ERROR, e);
    let mut conn = ctx
        .replicas
        .connect_to(&addr, &client_id, LATEST_OFFSET_TIMEOUT)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let response: ListOffsetsResponse = conn
        .send(ApiKey::ListOffsets, 1, &request, LATEST_OFFSET_TIMEOUT)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let p = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| failed(format!("broker {leader} answered no partition")))?;
    if p.error_code != NONE {
        return Err((p.error_code, format!("ListOffsets from broker {leader}")));
    }
    Ok(p.offset)
}
