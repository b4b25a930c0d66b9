//! Reading for the HTTP API's consumers: records from given positions, each partition fetched
//! from its leader (this broker in process, another through the gateway's forwarding), and the
//! offsets a position may start from (earliest, latest, by time). A fetch is one long poll of at
//! most `max_wait` for all partitions together; it reads uncommitted data (the Kafka consumer's
//! default `read_uncommitted`) and never returns control records.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::fetch::Fetch;
use millrace_frontend::api::list_offsets::ListOffsets;
use millrace_frontend::error_codes;

use crate::error::RestError;
use crate::gateway::{Caller, Gateway};
use crate::records::{self, FetchedRecord};

/// Fetch v12: the newest version that names topics (v13+ carries topic ids).
const FETCH_VERSION: i16 = 12;
/// ListOffsets v7 (max timestamp, KIP-734); enough for earliest, latest and by-time.
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' timestamp for the earliest offset.
const EARLIEST: i64 = -2;
/// ListOffsets' timestamp for the latest offset (the high watermark).
const LATEST: i64 = -1;

/// Where to read one partition from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPosition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// How much one fetch may return and wait.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    /// Bytes of record batches for the whole fetch (at least one batch is returned).
    pub max_bytes: i32,
    /// Bytes of record batches per partition.
    pub partition_max_bytes: i32,
    /// How long to wait for data when there is none.
    pub max_wait: Duration,
}

impl Default for FetchLimits {
    /// The Kafka consumer's defaults: 50 MiB, 1 MiB per partition, 500 ms.
    fn default() -> Self {
        Self {
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            max_wait: Duration::from_millis(500),
        }
    }
}

/// What one partition returned.
#[derive(Debug, Clone)]
pub struct FetchedPartition {
    pub topic: String,
    pub partition: i32,
    /// The data records from the asked offset on.
    pub records: Vec<FetchedRecord>,
    /// Where the next fetch starts: past the last whole batch returned (or the asked offset).
    pub next_offset: i64,
    pub high_watermark: i64,
    /// A Kafka error code (NONE when the read went well): OFFSET_OUT_OF_RANGE asks the caller to
    /// reset the position, NOT_LEADER_OR_FOLLOWER and the like to try again.
    pub error_code: i16,
}

/// Where a position starts when none is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The first offset whose timestamp is at or after this (ms).
    Timestamp(i64),
}

/// Reads from every position, each partition from its leader; partitions whose leader is unknown
/// come back with LEADER_NOT_AVAILABLE.
pub async fn fetch(
    gateway: &Gateway,
    caller: &Caller,
    positions: &[FetchPosition],
    limits: FetchLimits,
) -> Result<Vec<FetchedPartition>, RestError> {
    let mut by_leader: BTreeMap<i32, Vec<&FetchPosition>> = BTreeMap::new();
    let mut out = Vec::new();
    for p in positions {
        match gateway.leader_of(&p.topic, p.partition) {
            Ok(leader) => by_leader.entry(leader).or_default().push(p),
            Err(e) if e.error_code == crate::error::code::TOPIC_NOT_FOUND => return Err(e),
            Err(e) if e.error_code == crate::error::code::PARTITION_NOT_FOUND => return Err(e),
            Err(_) => out.push(empty(p, error_codes::LEADER_NOT_AVAILABLE)),
        }
    }
    let calls = by_leader
        .into_iter()
        .map(|(leader, group)| fetch_from(gateway, caller, leader, group, limits));
    for result in futures::future::join_all(calls).await {
        out.extend(result?);
    }
    Ok(out)
}

/// One Fetch to `leader` for `positions`.
async fn fetch_from(
    gateway: &Gateway,
    caller: &Caller,
    leader: i32,
    positions: Vec<&FetchPosition>,
    limits: FetchLimits,
) -> Result<Vec<FetchedPartition>, RestError> {
    let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for p in &positions {
        topics.entry(p.topic.as_str()).or_default().push(
            FetchPartition::default()
                .with_partition(p.partition)
                .with_fetch_offset(p.offset)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(limits.partition_max_bytes),
        );
    }
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(i32::try_from(limits.max_wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(1)
        .with_max_bytes(limits.max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response = gateway
        .call_on::<Fetch>(leader, caller, FETCH_VERSION, request)
        .await?;
    if response.error_code != error_codes::NONE {
        return Err(RestError::kafka(response.error_code, "fetch"));
    }
    let mut out = Vec::new();
    for topic in response.responses {
        let name = topic.topic.0.to_string();
        for partition in topic.partitions {
            let Some(asked) = positions
                .iter()
                .find(|p| p.topic == name && p.partition == partition.partition_index)
            else {
                continue;
            };
            let bytes = partition.records.unwrap_or_default();
            let next_offset = records::next_offset(&bytes)
                .unwrap_or(asked.offset)
                .max(asked.offset);
            let decoded = records::decode_batches(bytes, asked.offset)
                .map_err(|e| RestError::internal(format!("{name}-{}: {e}", asked.partition)))?;
            out.push(FetchedPartition {
                topic: name.clone(),
                partition: partition.partition_index,
                records: decoded,
                next_offset,
                high_watermark: partition.high_watermark,
                error_code: partition.error_code,
            });
        }
    }
    Ok(out)
}

fn empty(p: &FetchPosition, error_code: i16) -> FetchedPartition {
    FetchedPartition {
        topic: p.topic.clone(),
        partition: p.partition,
        records: Vec::new(),
        next_offset: p.offset,
        high_watermark: -1,
        error_code,
    }
}

/// The offset `spec` names in `topic`'s `partition`, asked of its leader.
pub async fn resolve_offset(
    gateway: &Gateway,
    caller: &Caller,
    topic: &str,
    partition: i32,
    spec: OffsetSpec,
) -> Result<i64, RestError> {
    let leader = gateway.leader_of(topic, partition)?;
    let timestamp = match spec {
        OffsetSpec::Earliest => EARLIEST,
        OffsetSpec::Latest => LATEST,
        OffsetSpec::Timestamp(ms) => ms,
    };
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(0)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp)])]);
    let response = gateway
        .call_on::<ListOffsets>(leader, caller, LIST_OFFSETS_VERSION, request)
        .await?;
    let answer = response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| RestError::partition_not_found(topic, partition))?;
    if answer.error_code != error_codes::NONE {
        return Err(RestError::kafka(
            answer.error_code,
            &format!("partition {topic}-{partition}"),
        ));
    }
    Ok(answer.offset)
}
