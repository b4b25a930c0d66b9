//! The HTTP API's one produce path, shared by REST v2 (`POST /topics/{t}`,
//! `POST /topics/{t}/partitions/{p}`) and v3 (`POST /v3/clusters/{c}/topics/{t}/records`):
//! records for one topic → a partition for each → one uncompressed v2 batch per partition
//! ([`records::encode_batch`]) → one Produce (acks=-1) per partition leader, the leaders asked in
//! parallel through the [`Gateway`] (in process for this broker, an Envelope for another) → one
//! outcome per record, in the request's order.
//!
//! Partitions are chosen as a Kafka producer's default partitioner chooses them: an explicit
//! partition is kept; a keyed record goes to `toPositive(murmur2(key)) % partitions`
//! ([`partition_for_key`], Kafka's `BuiltInPartitioner.partitionForKey`), so a key lands on the
//! same partition whether an HTTP client or a Java/librdkafka (`murmur2_random`) producer sends it;
//! keyless records of one request stick to one partition with a leader, and the next request
//! moves on (round robin across requests — Kafka's sticky partitioner, with one request as the
//! batch).
//!
//! A partition whose leader refuses with NOT_LEADER_OR_FOLLOWER or LEADER_NOT_AVAILABLE was not
//! written, so it is sent again to the leader the next image names, [`PRODUCE_ATTEMPTS_MAX`]
//! times at most. Nothing else is retried: a timed-out acks=-1 append may be in the log, and a
//! second send would duplicate it (the REST client sees a retriable error and decides).
//!
//! A client quota's throttle applies as on the Kafka listener: the gateway holds each leader's
//! answer back for its `throttle_time_ms` ([`Gateway::throttle`]), so the HTTP answer waits too.
//!
//! Types to read first: [`ProduceRecord`], [`RecordOutcome`], [`produce`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::produce::Produce;
use millrace_frontend::error_codes;

use crate::error::RestError;
use crate::gateway::{Caller, Gateway};
use crate::records::{self, OutgoingRecord};

/// Produce's version for the HTTP API's requests: the newest that names topics (v13 names them
/// by id).
const PRODUCE_VERSION: i16 = 12;
/// acks=-1: answered once every in-sync replica has the records, as Confluent's proxy produces.
const ACKS_ALL: i16 = -1;
/// Produce's `timeout_ms`: how long a leader waits for the in-sync replicas.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// Sends of one partition's batch at most (the first and the retries after a leader change).
pub const PRODUCE_ATTEMPTS_MAX: usize = 3;
/// The pause before a retry, for the metadata image to name the new leader.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);
/// Records in one HTTP produce request at most (the body limit bounds their bytes).
pub const RECORDS_PER_REQUEST_MAX: usize = 100_000;

/// The keyless records' partition rotation: one step per request that has keyless records.
static STICKY: AtomicUsize = AtomicUsize::new(0);

/// One record to produce, with the partition the client asked for, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProduceRecord {
    pub partition: Option<i32>,
    pub record: OutgoingRecord,
}

/// What became of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Appended at `offset` of `partition` and acknowledged by every in-sync replica.
    Written {
        partition: i32,
        offset: i64,
        /// The record's timestamp as the log keeps it (LogAppendTime topics: the broker's).
        timestamp_ms: i64,
    },
    /// Not written (or not known to be): the partition it was for and the Kafka error.
    Failed {
        partition: i32,
        error_code: i16,
        message: String,
    },
}

impl RecordOutcome {
    /// Whether a client may send the record again (Kafka's `RetriableException`).
    pub fn is_retriable(&self) -> bool {
        match self {
            RecordOutcome::Written { .. } => false,
            RecordOutcome::Failed { error_code, .. } => error_codes::is_retriable(*error_code),
        }
    }
}

/// Produces `records` to `topic` as `caller`: one outcome per record, in order. The request
/// fails as a whole (nothing written) for an unknown topic (40401), a partition the topic does
/// not have (40402), no records, or a broker that does not serve yet (503).
pub async fn produce(
    gateway: &Gateway,
    caller: &Caller,
    topic: &str,
    records: Vec<ProduceRecord>,
) -> Result<Vec<RecordOutcome>, RestError> {
    if records.is_empty() {
        return Err(RestError::unprocessable(
            "records: at least one record is required",
        ));
    }
    if records.len() > RECORDS_PER_REQUEST_MAX {
        return Err(RestError::unprocessable(format!(
            "records: {} records, at most {RECORDS_PER_REQUEST_MAX} in one request",
            records.len()
        )));
    }
    let image = gateway.image()?;
    let Some(image_topic) = image.topic(topic) else {
        return Err(RestError::topic_not_found(topic));
    };
    let count = image_topic.partition_count();
    let with_leader: Vec<i32> = image_topic
        .partitions
        .iter()
        .enumerate()
        .filter(|(_, p)| p.leader >= 0)
        .filter_map(|(i, _)| i32::try_from(i).ok())
        .collect();
    let sticky = sticky_partition(&with_leader, count, &records);
    let mut chosen = Vec::with_capacity(records.len());
    for r in &records {
        let partition = choose_partition(r, count, sticky);
        if partition < 0 || partition >= count {
            return Err(RestError::partition_not_found(topic, partition));
        }
        chosen.push(partition);
    }

    // One batch per partition, the records in request order; `slots[p]` lists their indexes.
    let mut slots: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, p) in chosen.iter().enumerate() {
        slots.entry(*p).or_default().push(i);
    }
    let now = now_ms();
    let mut batches = BTreeMap::new();
    for (partition, indexes) in &slots {
        let batch_records: Vec<OutgoingRecord> =
            indexes.iter().map(|i| records[*i].record.clone()).collect();
        let batch = records::encode_batch(&batch_records, now)
            .map_err(|e| RestError::unprocessable(format!("records: {e}")))?;
        batches.insert(*partition, (batch, batch_records));
    }
    drop(records);

    let mut results: BTreeMap<i32, PartitionResult> = BTreeMap::new();
    let mut pending: Vec<i32> = batches.keys().copied().collect();
    for attempt in 1..=PRODUCE_ATTEMPTS_MAX {
        if attempt > 1 {
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
        let image = gateway.image()?;
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for p in &pending {
            match image.partition(topic, *p).map(|r| r.leader) {
                Some(leader) if leader >= 0 => by_leader.entry(leader).or_default().push(*p),
                _ => {
                    results.insert(
                        *p,
                        PartitionResult::failed(
                            error_codes::LEADER_NOT_AVAILABLE,
                            format!("partition {topic}-{p} has no leader"),
                        ),
                    );
                }
            }
        }
        let sends = by_leader.into_iter().map(|(leader, partitions)| {
            let request = produce_request(topic, &partitions, &batches);
            async move {
                let answer = gateway
                    .call_on::<Produce>(leader, caller, PRODUCE_VERSION, request)
                    .await;
                (leader, partitions, answer)
            }
        });
        for (leader, partitions, answer) in futures::future::join_all(sends).await {
            match answer {
                Ok(response) => read_response(topic, &partitions, &response, &mut results),
                Err(e) => {
                    for p in partitions {
                        results.insert(
                            p,
                            PartitionResult::failed(
                                error_codes::REQUEST_TIMED_OUT,
                                format!("broker {leader}: {}", e.message),
                            ),
                        );
                    }
                }
            }
        }
        pending = results
            .iter()
            .filter(|(_, r)| r.leader_moved())
            .map(|(p, _)| *p)
            .collect();
        if pending.is_empty() {
            break;
        }
    }
    let mut outcomes = vec![None; chosen.len()];
    for (partition, indexes) in &slots {
        let result = results.get(partition);
        let timestamps = batches.get(partition).map(|(_, r)| r.as_slice());
        for (n, i) in indexes.iter().enumerate() {
            let timestamp = timestamps
                .and_then(|r| r.get(n))
                .and_then(|r| r.timestamp)
                .unwrap_or(now);
            outcomes[*i] = Some(outcome(*partition, n, timestamp, result));
        }
    }
    Ok(outcomes
        .into_iter()
        .zip(chosen)
        .map(|(o, partition)| {
            o.unwrap_or_else(|| RecordOutcome::Failed {
                partition,
                error_code: error_codes::UNKNOWN_SERVER_ERROR,
                message: "no answer for the record".to_string(),
            })
        })
        .collect())
}

/// A partition's answer from its leader.
#[derive(Debug, Clone)]
struct PartitionResult {
    error_code: i16,
    message: String,
    base_offset: i64,
    /// LogAppendTime topics: the time the leader stamped (-1: CreateTime).
    log_append_time_ms: i64,
    /// Per-record messages (INVALID_RECORD), by index in the batch.
    record_errors: BTreeMap<usize, String>,
}

impl PartitionResult {
    fn failed(error_code: i16, message: String) -> Self {
        Self {
            error_code,
            message,
            base_offset: -1,
            log_append_time_ms: -1,
            record_errors: BTreeMap::new(),
        }
    }

    /// The leader was not the leader: nothing was appended, another broker may take it.
    fn leader_moved(&self) -> bool {
        matches!(
            self.error_code,
            error_codes::NOT_LEADER_OR_FOLLOWER | error_codes::LEADER_NOT_AVAILABLE
        )
    }
}

/// The outcome of the `n`th record of `partition`'s batch.
fn outcome(
    partition: i32,
    n: usize,
    timestamp: i64,
    result: Option<&PartitionResult>,
) -> RecordOutcome {
    let Some(result) = result else {
        return RecordOutcome::Failed {
            partition,
            error_code: error_codes::UNKNOWN_SERVER_ERROR,
            message: format!("no answer for partition {partition}"),
        };
    };
    if result.error_code != error_codes::NONE {
        let message = result
            .record_errors
            .get(&n)
            .cloned()
            .unwrap_or_else(|| result.message.clone());
        return RecordOutcome::Failed {
            partition,
            error_code: result.error_code,
            message,
        };
    }
    let offset = i64::try_from(n)
        .ok()
        .and_then(|n| result.base_offset.checked_add(n));
    match offset {
        Some(offset) => RecordOutcome::Written {
            partition,
            offset,
            timestamp_ms: if result.log_append_time_ms >= 0 {
                result.log_append_time_ms
            } else {
                timestamp
            },
        },
        None => RecordOutcome::Failed {
            partition,
            error_code: error_codes::UNKNOWN_SERVER_ERROR,
            message: "the offset overflows".to_string(),
        },
    }
}

/// One Produce for `partitions` of `topic`, each with its batch.
fn produce_request(
    topic: &str,
    partitions: &[i32],
    batches: &BTreeMap<i32, (bytes::Bytes, Vec<OutgoingRecord>)>,
) -> ProduceRequest {
    let partition_data = partitions
        .iter()
        .filter_map(|p| {
            batches.get(p).map(|(batch, _)| {
                PartitionProduceData::default()
                    .with_index(*p)
                    .with_records(Some(batch.clone()))
            })
        })
        .collect();
    ProduceRequest::default()
        .with_acks(ACKS_ALL)
        .with_timeout_ms(PRODUCE_TIMEOUT_MS)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(partition_data)])
}

/// Records the leader's answer for each of `partitions` (a partition it left out is an error).
fn read_response(
    topic: &str,
    partitions: &[i32],
    response: &ProduceResponse,
    results: &mut BTreeMap<i32, PartitionResult>,
) {
    let answered: BTreeMap<
        i32,
        &kafka_protocol::messages::produce_response::PartitionProduceResponse,
    > = response
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partition_responses.iter())
        .map(|p| (p.index, p))
        .collect();
    for p in partitions {
        let result = match answered.get(p) {
            Some(r) => PartitionResult {
                error_code: r.error_code,
                message: r
                    .error_message
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_else(|| error_codes::error_name(r.error_code).to_string()),
                base_offset: r.base_offset,
                log_append_time_ms: r.log_append_time_ms,
                record_errors: r
                    .record_errors
                    .iter()
                    .filter_map(|e| {
                        let index = usize::try_from(e.batch_index).ok()?;
                        let message = e.batch_index_error_message.as_ref()?.to_string();
                        Some((index, message))
                    })
                    .collect(),
            },
            None => PartitionResult::failed(
                error_codes::UNKNOWN_SERVER_ERROR,
                format!("the leader did not answer for partition {topic}-{p}"),
            ),
        };
        results.insert(*p, result);
    }
}

/// The partition for keyless records without a partition in this request: the next one with a
/// leader in the rotation (any partition when none has one: the send then fails per record).
fn sticky_partition(with_leader: &[i32], count: i32, records: &[ProduceRecord]) -> i32 {
    let keyless = records
        .iter()
        .any(|r| r.partition.is_none() && r.record.key.is_none());
    if !keyless || count <= 0 {
        return 0;
    }
    let step = STICKY.fetch_add(1, Ordering::Relaxed);
    if with_leader.is_empty() {
        let count = usize::try_from(count).unwrap_or(1);
        return i32::try_from(step % count).unwrap_or(0);
    }
    with_leader[step % with_leader.len()]
}

/// The partition `record` goes to among `count`: its own, its key's, or `sticky`.
fn choose_partition(record: &ProduceRecord, count: i32, sticky: i32) -> i32 {
    match (record.partition, &record.record.key) {
        (Some(p), _) => p,
        (None, Some(key)) => partition_for_key(key, count),
        (None, None) => sticky,
    }
}

/// Kafka's partition for a keyed record: `toPositive(murmur2(key)) % partitions`
/// (`BuiltInPartitioner.partitionForKey`); librdkafka's `murmur2_random` agrees.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    if partitions <= 0 {
        return 0;
    }
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// MurmurHash2, 32 bits, with the seed Kafka's `Utils.murmur2` uses; bytes are read four at a
/// time little-endian, the tail folded in as Kafka does.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka mixes the length as a Java int: a key is far below 2^31 bytes (the body limit).
    let length = data.len() as u32;
    let mut h = SEED ^ length;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(key: &[u8], expected: i32) {
        assert_eq!(
            murmur2(key),
            expected,
            "murmur2({:?})",
            String::from_utf8_lossy(key)
        );
    }

    /// The values Kafka's own `UtilsTest.testMurmur2` expects.
    #[test]
    fn murmur2_is_kafkas() {
        check(b"21", -973_932_308);
        check(b"foobar", -790_332_482);
        check(b"a-little-bit-long-string", -985_981_536);
        check(b"a-little-bit-longer-string", -1_486_304_829);
        check(
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        );
        check(b"abc", 479_470_107);
    }

    #[test]
    fn a_key_picks_a_positive_partition() {
        for key in [&b"21"[..], b"foobar", b"abc", b""] {
            let p = partition_for_key(key, 7);
            assert!((0..7).contains(&p), "{p}");
            assert_eq!(p, (murmur2(key) & 0x7fff_ffff) % 7);
        }
        assert_eq!(partition_for_key(b"k", 0), 0);
    }

    #[test]
    fn an_explicit_partition_wins_over_the_key() {
        let record = ProduceRecord {
            partition: Some(5),
            record: OutgoingRecord {
                key: Some(bytes::Bytes::from_static(b"k")),
                ..OutgoingRecord::default()
            },
        };
        assert_eq!(choose_partition(&record, 3, 0), 5);
        let keyless = ProduceRecord::default();
        assert_eq!(choose_partition(&keyless, 3, 2), 2);
    }

    #[test]
    fn keyless_requests_rotate_over_partitions_with_a_leader() {
        let records = vec![ProduceRecord::default()];
        let seen: std::collections::BTreeSet<i32> = (0..20)
            .map(|_| sticky_partition(&[1, 3], 4, &records))
            .collect();
        assert!(seen.is_subset(&[1, 3].into_iter().collect()));
        assert_eq!(seen.len(), 2, "{seen:?}");
    }
}
