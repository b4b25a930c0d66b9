//! Produce (key 0): validate each partition's records at the protocol level, append them to the
//! partition log, and answer once they are as durable as `log.flush.policy` promises.
//!
//! The appends happen in [`handle`] itself, before it returns, so that pipelined Produce requests
//! on one connection append in request order (idempotent producers keep five in flight and rely on
//! it). Only the durability wait is left to the returned future.
//!
//! Protocol checks here (Kafka's `ProduceRequest.validateRecords`): exactly one record batch per
//! partition, magic 2, no zstd below v7, read with the store's batch parsing
//! (`millrace_store::batch`, the workspace's one v2 codec). The store checks the rest (CRC,
//! lengths, counts, size).
//! Records for internal topics (`__consumer_offsets`) are refused with INVALID_TOPIC_EXCEPTION, as
//! Kafka does for clients. Both acks=1 and acks=-1 wait for durability: on a single node "the leader has it" and "the ISR
//! has it" mean the same thing.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use millrace_cluster::LEADER_EPOCH;
use millrace_store::batch::{BatchHeader, BatchPrefix};
use millrace_store::PartitionLog;

use super::str_bytes;
use crate::error_codes::{
    self, KafkaError, CORRUPT_MESSAGE, INVALID_RECORD, INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_COMPRESSION_TYPE,
};
use crate::limits::PRODUCE_TIMEOUT_MS_MAX;
use crate::BrokerContext;

/// Compression codec id of zstd (`BatchHeader::compression`).
const CODEC_ZSTD: u8 = 4;
/// First Produce version that may carry zstd batches.
const ZSTD_VERSION_MIN: i16 = 7;

/// One partition's outcome; `wait` is set when the response must wait for durability.
struct Outcome {
    index: i32,
    result: Result<PartitionProduceResponse, KafkaError>,
    wait: Option<(Arc<PartitionLog>, i64)>,
}

/// Appends now; the future answers once durable (or timed out).
pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: ProduceRequest,
    version: i16,
) -> impl Future<Output = ProduceResponse> + Send + 'static {
    let acks = request.acks;
    let timeout =
        Duration::from_millis((request.timeout_ms.max(0) as u64).min(PRODUCE_TIMEOUT_MS_MAX));
    let mut topics: Vec<(kafka_protocol::messages::TopicName, Vec<Outcome>)> = Vec::new();
    for topic in request.topic_data {
        let name = topic.name.0.to_string();
        let outcomes = topic
            .partition_data
            .into_iter()
            .map(|p| {
                let context = format!("{name}-{}", p.index);
                if !matches!(acks, -1..=1) {
                    return Outcome {
                        index: p.index,
                        result: Err(KafkaError::code(INVALID_REQUIRED_ACKS)),
                        wait: None,
                    };
                }
                if super::metadata::INTERNAL_TOPICS.contains(&name.as_str()) {
                    // Only the coordinators write there (Kafka: "Cannot append to internal
                    // topic"); a client's records would be replayed as group state.
                    return Outcome {
                        index: p.index,
                        result: Err(KafkaError::new(
                            INVALID_TOPIC_EXCEPTION,
                            format!("Cannot append to internal topic {name}"),
                        )),
                        wait: None,
                    };
                }
                match ctx.cluster.partition_log(&name, p.index) {
                    None => Outcome {
                        index: p.index,
                        result: Err(KafkaError::code(UNKNOWN_TOPIC_OR_PARTITION)),
                        wait: None,
                    },
                    Some(log) => append(&log, p.index, p.records, version, acks, &context),
                }
            })
            .collect();
        topics.push((topic.name, outcomes));
    }

    async move {
        let mut responses = Vec::with_capacity(topics.len());
        for (name, outcomes) in topics {
            let mut partitions = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                let result = match (outcome.result, outcome.wait) {
                    (Ok(ok), Some((log, end))) => {
                        match tokio::time::timeout(timeout, log.wait_durable(end)).await {
                            Ok(Ok(())) => Ok(ok),
                            Ok(Err(e)) => Err(error_codes::from_store(&e, &name.0)),
                            Err(_) => Err(KafkaError::new(
                                REQUEST_TIMED_OUT,
                                "the append did not become durable within timeout_ms",
                            )),
                        }
                    }
                    (result, _) => result,
                };
                partitions.push(to_response(outcome.index, result, version));
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_partition_responses(partitions),
            );
        }
        ProduceResponse::default().with_responses(responses)
    }
}

fn append(
    log: &Arc<PartitionLog>,
    index: i32,
    records: Option<Bytes>,
    version: i16,
    acks: i16,
    context: &str,
) -> Outcome {
    let fail = |e: KafkaError| Outcome {
        index,
        result: Err(e),
        wait: None,
    };
    let records = records.unwrap_or_default();
    if let Err(e) = check_single_batch(&records, version) {
        return fail(e);
    }
    match log.append(BytesMut::from(&records[..]), LEADER_EPOCH) {
        Ok(info) => {
            let mut ok = PartitionProduceResponse::default()
                .with_index(index)
                .with_base_offset(info.base_offset)
                .with_log_append_time_ms(info.log_append_time_ms);
            if version >= 5 {
                ok.log_start_offset = info.log_start_offset;
            }
            let wait = (acks != 0).then(|| (log.clone(), info.last_offset + 1));
            Outcome {
                index,
                result: Ok(ok),
                wait,
            }
        }
        Err(e) => fail(error_codes::from_append(&e, context)),
    }
}

/// Kafka's protocol-level checks on one partition's records (v3+).
fn check_single_batch(records: &[u8], version: i16) -> Result<(), KafkaError> {
    if records.is_empty() {
        return Err(KafkaError::new(
            INVALID_RECORD,
            "Produce request has no record batch",
        ));
    }
    let mut position = 0usize;
    let mut batches = 0usize;
    while let Some(rest) = records.get(position..).filter(|r| !r.is_empty()) {
        let corrupt = |e: millrace_store::batch::BatchError| {
            KafkaError::new(CORRUPT_MESSAGE, format!("record batch {batches}: {e}"))
        };
        let prefix = BatchPrefix::parse(rest).map_err(corrupt)?;
        if prefix.total_size() > rest.len() {
            return Err(KafkaError::new(
                CORRUPT_MESSAGE,
                "record batch length out of bounds",
            ));
        }
        if prefix.magic != 2 {
            return Err(KafkaError::new(
                INVALID_RECORD,
                format!(
                    "Produce requests with version {version} must have magic 2, not {}",
                    prefix.magic
                ),
            ));
        }
        let header = BatchHeader::parse(rest).map_err(corrupt)?;
        if header.compression() == CODEC_ZSTD && version < ZSTD_VERSION_MIN {
            return Err(KafkaError::new(
                UNSUPPORTED_COMPRESSION_TYPE,
                "zstd needs Produce v7 or later",
            ));
        }
        batches += 1;
        position += prefix.total_size();
    }
    if batches != 1 {
        return Err(KafkaError::new(
            INVALID_RECORD,
            format!(
                "Produce requests must carry exactly one record batch per partition, got {batches}"
            ),
        ));
    }
    Ok(())
}

fn to_response(
    index: i32,
    result: Result<PartitionProduceResponse, KafkaError>,
    version: i16,
) -> PartitionProduceResponse {
    match result {
        Ok(ok) => ok,
        Err(e) => {
            let mut r = PartitionProduceResponse::default()
                .with_index(index)
                .with_error_code(e.code)
                .with_base_offset(-1);
            if version >= 8 {
                r.error_message = e.message.as_deref().map(str_bytes);
                r.record_errors = e
                    .record_errors
                    .iter()
                    .map(|(index, why)| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(*index)
                            .with_batch_index_error_message(Some(str_bytes(why)))
                    })
                    .collect();
            }
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(magic: u8, codec: u8, body_len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 61 + body_len];
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[16] = magic;
        b[22] = codec;
        b
    }

    fn check(records: &[u8], version: i16, expected: Option<i16>) {
        assert_eq!(
            check_single_batch(records, version).err().map(|e| e.code),
            expected
        );
    }

    #[test]
    fn single_batch_rules() {
        check(&batch(2, 0, 5), 9, None);
        check(&[], 9, Some(INVALID_RECORD));
        check(&batch(1, 0, 5), 9, Some(INVALID_RECORD));
        check(
            &[batch(2, 0, 1), batch(2, 0, 1)].concat(),
            9,
            Some(INVALID_RECORD),
        );
        check(&batch(2, 0, 5)[..40], 9, Some(CORRUPT_MESSAGE));
        check(
            &batch(2, CODEC_ZSTD, 5),
            6,
            Some(UNSUPPORTED_COMPRESSION_TYPE),
        );
        check(&batch(2, CODEC_ZSTD, 5), 7, None);
        let mut negative = batch(2, 0, 5);
        negative[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        check(&negative, 9, Some(CORRUPT_MESSAGE));
    }
}
