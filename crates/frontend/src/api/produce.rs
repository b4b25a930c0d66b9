//! Produce (key 0): validate each partition's records at the protocol level, append them as the
//! partition's leader, and answer once they are acknowledged: acks=1 once as durable on the leader
//! as `log.flush.policy` promises, acks=-1 once the high watermark passed them (they are on every
//! in-sync replica), acks=0 never.
//!
//! The appends happen in [`handle`] itself, before it returns, so that pipelined Produce requests
//! on one connection append in request order (idempotent producers keep five in flight and rely on
//! it). Only the acknowledgement wait is left to the returned future.
//!
//! Protocol checks here (Kafka's `ProduceRequest.validateRecords`): exactly one record batch per
//! partition, magic 2, no zstd below v7, read with the store's batch parsing
//! (`millrace_store::batch`, the workspace's one v2 codec). The store checks the rest (CRC,
//! lengths, counts, size). Records for internal topics (`__consumer_offsets`) are refused with
//! INVALID_TOPIC_EXCEPTION, as Kafka does for clients. A partition this broker does not lead gets
//! NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint (v10+, KIP-951). From v13 topics
//! come by id, not name (KIP-516); an unknown id gets UNKNOWN_TOPIC_ID.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, BrokerId, ProduceRequest, ProduceResponse, TopicName};
use millrace_replication::AckWait;
use millrace_store::batch::{BatchHeader, BatchPrefix};
use millrace_store::{FlushPolicy, TopicPartition};
use uuid::Uuid;

use super::leadership::{self, LeaderHint, Refusal};
use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{
    self, KafkaError, CORRUPT_MESSAGE, INVALID_PRODUCER_EPOCH, INVALID_RECORD,
    INVALID_REQUIRED_ACKS, INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNSUPPORTED_COMPRESSION_TYPE,
};
use crate::handler::{response_fields, ApiHandler, Call, Reply, Versions};
use crate::limits::PRODUCE_TIMEOUT_MS_MAX;
use crate::quota::QuotaType;
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

/// Produce: its key, versions, handler and error codes, for [`crate::registry`].
pub struct Produce;

impl ApiHandler for Produce {
    const KEY: ApiKey = ApiKey::Produce;
    /// v0-2 are advertised as Kafka 4 does (librdkafka looks for v0 to use gzip/snappy).
    const VERSIONS: Versions = 0..=13;
    /// v0-2 carry magic 0/1 message sets, which are gone: a request below v3 closes the
    /// connection.
    const SERVED_MIN: i16 = 3;
    type Request = ProduceRequest;
    type Response = ProduceResponse;

    fn handle(call: Call<'_>, request: ProduceRequest) -> Reply<ProduceResponse> {
        let acks = request.acks;
        // Kafka charges a produce request's whole size against `producer_byte_rate`.
        let throttle = call.charge_quota(QuotaType::Produce, call.frame_bytes as f64);
        let response = handle(
            call.ctx,
            call.authz,
            request,
            call.version,
            call.session.listener.clone(),
        );
        let response = async move {
            let mut response = response.await;
            response.throttle_time_ms = throttle;
            response
        };
        if acks == 0 {
            Reply::unanswered(response)
        } else {
            Reply::later(response)
        }
    }
}

response_fields!(
    ProduceResponse:
    errors[responses[partition_responses[error_code]]],
    throttle_time_ms
);

/// Compression codec id of zstd (`BatchHeader::compression`).
const CODEC_ZSTD: u8 = 4;
/// First Produce version that may carry zstd batches.
const ZSTD_VERSION_MIN: i16 = 7;
/// First Produce version with KIP-951 leader hints.
const LEADER_HINT_VERSION_MIN: i16 = 10;
/// First Produce version that names topics by id (KIP-516).
const TOPIC_ID_VERSION_MIN: i16 = 13;

/// One partition's outcome; `wait` is set when the answer must wait for the acknowledgement.
struct Outcome {
    index: i32,
    result: Result<PartitionProduceResponse, Refusal>,
    wait: Option<AckWait>,
}

impl Outcome {
    fn refused(index: i32, error: KafkaError) -> Self {
        Outcome {
            index,
            result: Err(Refusal { error, hint: None }),
            wait: None,
        }
    }
}

/// Appends now; the future answers once acknowledged (or timed out).
pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: Authz,
    request: ProduceRequest,
    version: i16,
    listener: Arc<str>,
) -> impl Future<Output = ProduceResponse> + Send + 'static {
    let acks = request.acks;
    let timeout =
        Duration::from_millis((request.timeout_ms.max(0) as u64).min(PRODUCE_TIMEOUT_MS_MAX));
    let topic_data = request.topic_data;
    // A transactional producer needs Write on its transactional id, or nothing is written.
    let transactional_denied = request
        .transactional_id
        .as_ref()
        .is_some_and(|id| !authz.transactional_id(AclOperation::Write, id));
    let transactional_id = request.transactional_id.map(|id| id.0.to_string());
    let append_all = move || {
        let mut topics: Vec<(TopicName, Uuid, Vec<Outcome>)> = Vec::new();
        for topic in topic_data {
            // v13+ names a topic by its id alone (KIP-516); an id this broker does not know is
            // UNKNOWN_TOPIC_ID for each of its partitions, as Kafka answers.
            let (topic_name, known) = if version >= TOPIC_ID_VERSION_MIN {
                match ctx.cluster.topic_by_id(topic.topic_id) {
                    Some(t) => (super::topic_name(&t.name), true),
                    None => (topic.name, false),
                }
            } else {
                (topic.name, true)
            };
            let name = topic_name.0.to_string();
            let label: Arc<str> = Arc::from(name.as_str());
            let write_allowed = authz.topic(AclOperation::Write, &name);
            let outcomes = topic
                .partition_data
                .into_iter()
                .map(|p| {
                    if !known {
                        return Outcome::refused(p.index, KafkaError::code(UNKNOWN_TOPIC_ID));
                    }
                    if transactional_denied {
                        return Outcome::refused(
                            p.index,
                            KafkaError::code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                        );
                    }
                    if !write_allowed {
                        return Outcome::refused(
                            p.index,
                            KafkaError::code(TOPIC_AUTHORIZATION_FAILED),
                        );
                    }
                    if !matches!(acks, -1..=1) {
                        return Outcome::refused(p.index, KafkaError::code(INVALID_REQUIRED_ACKS));
                    }
                    if super::metadata::INTERNAL_TOPICS.contains(&name.as_str()) {
                        // Only the coordinators write there (Kafka: "Cannot append to internal
                        // topic"); a client's records would be replayed as group state.
                        return Outcome::refused(
                            p.index,
                            KafkaError::new(
                                INVALID_TOPIC_EXCEPTION,
                                format!("Cannot append to internal topic {name}"),
                            ),
                        );
                    }
                    let tp = TopicPartition::new(&name, p.index);
                    append(
                        ctx,
                        &tp,
                        &label,
                        p.records,
                        version,
                        acks,
                        transactional_id.as_deref(),
                    )
                })
                .collect();
            topics.push((topic_name, topic.topic_id, outcomes));
        }
        topics
    };
    // Under `always` each append fdatasyncs before it returns: off the shared runtime thread, so
    // that other connections' requests are not held behind the disk.
    let topics = if ctx.cluster.config.flush_policy() == FlushPolicy::Always {
        crate::blocking::run(append_all)
    } else {
        append_all()
    };
    let ctx = Arc::clone(ctx);

    async move {
        let mut responses = Vec::with_capacity(topics.len());
        let mut hints: Vec<LeaderHint> = Vec::new();
        for (name, topic_id, outcomes) in topics {
            let mut partitions = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                let result = match (outcome.result, outcome.wait) {
                    (Ok(ok), Some(wait)) => match wait.wait(timeout).await {
                        Ok(()) => Ok(ok),
                        Err(e) => {
                            let tp = TopicPartition::new(name.0.as_str(), outcome.index);
                            let hint = leadership::leader_of(&ctx, &tp).filter(|h| {
                                h.leader_id >= 0 && h.leader_id != ctx.cluster.node_id()
                            });
                            Err(Refusal {
                                error: error_codes::from_ack(e),
                                hint,
                            })
                        }
                    },
                    (result, _) => result,
                };
                if let Err(Refusal { hint: Some(h), .. }) = &result {
                    hints.push(*h);
                }
                partitions.push(to_response(outcome.index, result, version));
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_topic_id(topic_id)
                    .with_partition_responses(partitions),
            );
        }
        let mut response = ProduceResponse::default().with_responses(responses);
        if version >= LEADER_HINT_VERSION_MIN {
            response.node_endpoints = leadership::endpoints(&ctx, hints, &listener)
                .into_iter()
                .map(|(id, host, port, rack)| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(id))
                        .with_host(str_bytes(&host))
                        .with_port(i32::from(port))
                        .with_rack(rack.as_deref().map(str_bytes))
                })
                .collect();
        }
        response
    }
}

fn append(
    ctx: &Arc<BrokerContext>,
    tp: &TopicPartition,
    label: &Arc<str>,
    records: Option<Bytes>,
    version: i16,
    acks: i16,
    transactional_id: Option<&str>,
) -> Outcome {
    let index = tp.partition;
    let records = records.unwrap_or_default();
    let header = match check_single_batch(&records, version) {
        Ok(h) => h,
        Err(e) => return Outcome::refused(index, e),
    };
    if header.is_transactional() {
        if let Err(e) = verify_transactional(ctx, tp, &header, transactional_id) {
            return Outcome::refused(index, e);
        }
    }
    match ctx.replicas.append(tp, &records, acks) {
        Ok((info, wait)) => {
            if !info.duplicate {
                let records_in = info.last_offset - info.base_offset + 1;
                millrace_metrics::global().record_bytes_in(
                    label,
                    records.len() as u64,
                    u64::try_from(records_in).unwrap_or(0),
                );
            }
            let mut ok = PartitionProduceResponse::default()
                .with_index(index)
                .with_base_offset(info.base_offset)
                .with_log_append_time_ms(info.log_append_time_ms);
            if version >= 5 {
                ok.log_start_offset = info.log_start_offset;
            }
            Outcome {
                index,
                result: Ok(ok),
                wait,
            }
        }
        Err(e) => Outcome {
            index,
            result: Err(leadership::refusal(ctx, tp, &e)),
            wait: None,
        },
    }
}

/// A transactional batch must name its transactional id and belong to that id's ongoing
/// transaction on this partition (Kafka's verification, KIP-890 part 1; ids coordinated on
/// another broker are not checked).
fn verify_transactional(
    ctx: &Arc<BrokerContext>,
    tp: &TopicPartition,
    header: &BatchHeader,
    transactional_id: Option<&str>,
) -> Result<(), KafkaError> {
    let Some(id) = transactional_id else {
        // Kafka's `handleProduceRequest`: transactional records need a transactional id to be
        // authorized against.
        return Err(KafkaError::new(
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional records without a transactional id",
        ));
    };
    ctx.transactions
        .verify(
            id,
            header.producer_id,
            header.producer_epoch,
            &tp.topic,
            tp.partition,
        )
        .map_err(|e| {
            KafkaError::new(
                super::transactions::error_code(e, INVALID_PRODUCER_EPOCH),
                format!("{tp} is not part of the ongoing transaction of {id}: {e}"),
            )
        })
}

/// Kafka's protocol-level checks on one partition's records (v3+) → the header of its one batch.
fn check_single_batch(records: &[u8], version: i16) -> Result<BatchHeader, KafkaError> {
    if records.is_empty() {
        return Err(KafkaError::new(
            INVALID_RECORD,
            "Produce request has no record batch",
        ));
    }
    let mut position = 0usize;
    let mut batches = 0usize;
    let mut first = None;
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
        first.get_or_insert(header);
        if header.compression() == CODEC_ZSTD && version < ZSTD_VERSION_MIN {
            return Err(KafkaError::new(
                UNSUPPORTED_COMPRESSION_TYPE,
                "zstd needs Produce v7 or later",
            ));
        }
        batches += 1;
        position += prefix.total_size();
    }
    match (batches, first) {
        (1, Some(h)) => Ok(h),
        _ => Err(KafkaError::new(
            INVALID_RECORD,
            format!(
                "Produce requests must carry exactly one record batch per partition, got {batches}"
            ),
        )),
    }
}

fn to_response(
    index: i32,
    result: Result<PartitionProduceResponse, Refusal>,
    version: i16,
) -> PartitionProduceResponse {
    match result {
        Ok(ok) => ok,
        Err(Refusal { error: e, hint }) => {
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
            if version >= LEADER_HINT_VERSION_MIN {
                if let Some(h) = hint {
                    r.current_leader = LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(h.leader_id))
                        .with_leader_epoch(h.leader_epoch);
                }
            }
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::handler::counted_errors;

    #[test]
    fn error_metrics_count_only_the_failed_partition() {
        let response =
            ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(0)
                        .with_error_code(error_codes::NONE),
                    PartitionProduceResponse::default()
                        .with_index(1)
                        .with_error_code(error_codes::NOT_LEADER_OR_FOLLOWER),
                ])]);
        assert_eq!(counted_errors::<Produce>(&response), vec![6]);
    }

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
