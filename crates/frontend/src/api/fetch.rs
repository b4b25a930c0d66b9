//! Fetch (key 1): whole record batches from the partition logs, as stored, with long polling.
//!
//! A fetch returns at once when it has `min_bytes`, when any partition has an error, or when
//! `max_wait_ms` is 0; otherwise it parks until an append advances some high watermark (the store's
//! `data_available` notification — not a timer) or `max_wait_ms` passes, and reads again.
//!
//! Size rules (KIP-74): each partition gets at most `partition_max_bytes` and the response at most
//! `max_bytes`, except that the first batch of the first partition with data is returned whole even
//! if it is larger. Consumers see data up to the high watermark; with no transactions the last
//! stable offset equals it, so `read_committed` needs nothing more. Sessions are not kept: the
//! response's session id is always 0, which clients treat as "full fetch every time".

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use millrace_cluster::LEADER_EPOCH;
use millrace_store::{PartitionLog, ReadError, ReadUpperBound};
use tokio::time::Instant;
use uuid::Uuid;

use super::leader_epoch_error;
use crate::error_codes::{
    self, NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::limits::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::BrokerContext;

/// First Fetch version that names topics by id.
const TOPIC_ID_VERSION_MIN: i16 = 13;
/// `isolation_level` value of read_committed.
const READ_COMMITTED: i8 = 1;

/// One requested partition, resolved once per request.
struct Wanted {
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: usize,
    target: Result<Arc<PartitionLog>, i16>,
}

struct WantedTopic {
    name: TopicName,
    topic_id: Uuid,
    partitions: Vec<Wanted>,
}

pub async fn handle(ctx: Arc<BrokerContext>, request: FetchRequest, version: i16) -> FetchResponse {
    let wait = Duration::from_millis((request.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MS_MAX));
    let deadline = Instant::now() + wait;
    let min_bytes = request.min_bytes.max(0) as usize;
    let max_bytes = (request.max_bytes.max(0) as usize).min(FETCH_RESPONSE_BYTES_MAX);
    let read_committed = request.isolation_level == READ_COMMITTED;
    let topics = resolve(&ctx, request, version);
    let notify = ctx.cluster.store.data_available();

    loop {
        // Register for the wake-up before reading, so an append between the read and the wait
        // is not missed.
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        let (response, bytes, any_error) = read_all(&topics, max_bytes, read_committed, version);
        let done = bytes >= min_bytes
            || any_error
            || Instant::now() >= deadline
            || ctx.shutdown.is_cancelled();
        if done {
            return response;
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = ctx.shutdown.cancelled() => {}
        }
    }
}

fn resolve(ctx: &Arc<BrokerContext>, request: FetchRequest, version: i16) -> Vec<WantedTopic> {
    let cluster = &ctx.cluster;
    request
        .topics
        .into_iter()
        .map(|topic| {
            let meta = if version >= TOPIC_ID_VERSION_MIN {
                cluster.metadata.topic_by_id(topic.topic_id)
            } else {
                cluster.metadata.topic(topic.topic.0.as_str())
            };
            let missing = if version >= TOPIC_ID_VERSION_MIN {
                UNKNOWN_TOPIC_ID
            } else {
                UNKNOWN_TOPIC_OR_PARTITION
            };
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let target = match &meta {
                        None => Err(missing),
                        Some(m) => match leader_epoch_error(p.current_leader_epoch, LEADER_EPOCH) {
                            Some(code) => Err(code),
                            None => cluster
                                .partition_log(&m.name, p.partition)
                                .ok_or(UNKNOWN_TOPIC_OR_PARTITION),
                        },
                    };
                    Wanted {
                        partition: p.partition,
                        fetch_offset: p.fetch_offset,
                        partition_max_bytes: p.partition_max_bytes.max(0) as usize,
                        target,
                    }
                })
                .collect();
            WantedTopic {
                name: topic.topic,
                topic_id: topic.topic_id,
                partitions,
            }
        })
        .collect()
}

/// One pass over every partition: the response, its record bytes, and whether any partition erred.
fn read_all(
    topics: &[WantedTopic],
    max_bytes: usize,
    read_committed: bool,
    version: i16,
) -> (FetchResponse, usize, bool) {
    let mut total = 0usize;
    let mut any_error = false;
    let mut responses = Vec::with_capacity(topics.len());
    for topic in topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for wanted in &topic.partitions {
            let mut data = PartitionData::default()
                .with_partition_index(wanted.partition)
                .with_high_watermark(-1)
                .with_records(Some(Bytes::new()));
            if !read_committed {
                data.aborted_transactions = None;
            }
            match &wanted.target {
                Err(code) => {
                    data.error_code = *code;
                    any_error = true;
                }
                Ok(log) => {
                    let budget = wanted
                        .partition_max_bytes
                        .min(max_bytes.saturating_sub(total));
                    let (code, records) =
                        read_partition(log, wanted.fetch_offset, budget, total == 0);
                    let high_watermark = log.high_watermark();
                    data.error_code = code;
                    data.high_watermark = high_watermark;
                    data.last_stable_offset = high_watermark;
                    if version >= 5 {
                        data.log_start_offset = log.log_start_offset();
                    }
                    any_error |= code != NONE;
                    total += records.len();
                    data.records = Some(records);
                }
            }
            partitions.push(data);
        }
        let mut response = FetchableTopicResponse::default().with_partitions(partitions);
        if version >= TOPIC_ID_VERSION_MIN {
            response.topic_id = topic.topic_id;
        } else {
            response.topic = topic.name.clone();
        }
        responses.push(response);
    }
    (
        FetchResponse::default().with_responses(responses),
        total,
        any_error,
    )
}

fn read_partition(
    log: &PartitionLog,
    fetch_offset: i64,
    budget: usize,
    first: bool,
) -> (i16, Bytes) {
    let high_watermark = log.high_watermark();
    // Offsets between the high watermark and the log end exist but are not yet visible.
    if fetch_offset >= high_watermark && fetch_offset <= log.log_end_offset() {
        return (NONE, Bytes::new());
    }
    if budget == 0 && !first {
        return (NONE, Bytes::new());
    }
    match log.read(fetch_offset, budget, ReadUpperBound::HighWatermark, first) {
        Ok(read) => (NONE, read.records),
        Err(e @ ReadError::OffsetOutOfRange { .. }) => {
            tracing::debug!(error = %e, "fetch out of range");
            (OFFSET_OUT_OF_RANGE, Bytes::new())
        }
        Err(e) => (error_codes::from_read(&e, "fetch").code, Bytes::new()),
    }
}
