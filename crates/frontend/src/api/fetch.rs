//! Fetch (key 1): whole record batches from the partition logs, as stored, with long polling —
//! for consumers, and for follower replicas copying the leader's log.
//!
//! Consumers (no replica id): only from the partition's leader, with a current leader epoch
//! (KIP-320), up to the high watermark — for `read_committed` up to the last stable offset, with
//! the aborted transactions of what was read (taken under the read's own lock). A fetch returns at once when it has `min_bytes`, when any
//! partition has an error, or when `max_wait_ms` is 0; otherwise it parks until the high watermark
//! of a partition it asked for advances (each partition wakes only the fetches registered with it,
//! `PartitionLog::watch_high_watermark` — not a timer, not any append anywhere), that partition
//! changes leader or is deleted, or `max_wait_ms` passes, and reads again. A partition this broker
//! does not lead answers NOT_LEADER_OR_FOLLOWER with the current leader (v12+) and its endpoint
//! (v16+, KIP-951).
//!
//! Followers (`replica_state.replica_id` >= 0, v15+; `replica_id` before): the leader accounts the
//! follower's fetch offset (which may move the high watermark and the ISR), answers a diverging
//! epoch when the follower's log disagrees (v12+), and otherwise sends records up to its log end;
//! a follower's long poll wakes on leader appends to the partitions it asked for.
//!
//! Size rules (KIP-74): each partition gets at most `partition_max_bytes` and the response at most
//! `max_bytes`, except that the first batch of the first partition with data is returned whole even
//! if it is larger.
//!
//! Zero copy: a consumer's records already CRC-checked in this process are not read into memory;
//! the partition's `records` holds a file marker and the response carries the segment file slice
//! beside it, which the connection sends with `sendfile` ([`crate::splice`]). Followers' reads
//! are read into memory (the bytes a leader sends its followers are checked as they are read).
//!
//! Sessions (KIP-227, v7+, [`crate::fetch_session`]): a fetcher that starts a session (epoch 0)
//! then names only the partitions whose position changed, and the answer carries only the
//! partitions with something new; the long poll still waits on, and reads, every partition of the
//! session.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName,
};
use millrace_replication::ReplicaError;
use millrace_store::{FileSlice, ReadError, Records, TopicPartition};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::leadership::{self, LeaderHint, Refusal};
use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use crate::error_codes::{
    KafkaError, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, NONE, UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::fetch_session::{Answered, FetchContext, SessionError, SessionPartition};
use crate::handler::{response_fields, ApiHandler, Call, Reply, Spliced, Versions};
use crate::limits::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::quota::{QuotaType, Throttle};
use crate::splice;
use crate::tiered::{self, RemoteWanted};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

/// Fetch: its key, versions, handler and error codes, for [`crate::registry`].
pub struct Fetch;

impl ApiHandler for Fetch {
    const KEY: ApiKey = ApiKey::Fetch;
    const VERSIONS: Versions = 4..=18;
    type Request = FetchRequest;
    type Response = FetchResponse;

    fn handle(call: Call<'_>, request: FetchRequest) -> Reply<FetchResponse> {
        let follower = request.replica_id.0 >= 0 || request.replica_state.replica_id.0 >= 0;
        let quota = (!call.ctx.cluster.image().client_quotas.is_empty()).then(|| FetchQuota {
            user: call.session.quota_user(),
            client_id: call.client_id.to_string(),
            throttle: call.session.throttle.clone(),
        });
        let response = handle(
            call.ctx.clone(),
            call.authz,
            quota,
            request,
            call.version,
            call.session.listener.clone(),
        );
        Reply::Spliced(Spliced {
            response: Box::pin(response),
            take_records: splice::take_records,
            inline_records: splice::inline_records,
            // A follower's fetches are not charged to a request quota (Kafka exempts them).
            request_quota_exempt: follower,
        })
    }
}

response_fields!(
    FetchResponse:
    errors[error_code, responses[partitions[error_code]]],
    throttle_time_ms
);

/// First Fetch version with sessions (KIP-227).
const SESSION_VERSION_MIN: i16 = 7;
/// First Fetch version that names topics by id.
const TOPIC_ID_VERSION_MIN: i16 = 13;
/// First Fetch version with `replica_state` (KIP-903).
const REPLICA_STATE_VERSION_MIN: i16 = 15;
/// First Fetch version with `current_leader` / `diverging_epoch` in partition data.
const LEADER_FIELDS_VERSION_MIN: i16 = 12;
/// First Fetch version with `node_endpoints` (KIP-951).
const NODE_ENDPOINTS_VERSION_MIN: i16 = 16;
/// First Fetch version a follower serves to consumers (KIP-392: Kafka builds client metadata
/// from v11 on, and then reads from any replica up to its high watermark).
const FOLLOWER_READ_VERSION_MIN: i16 = 11;
/// `isolation_level` value of read_committed.
const READ_COMMITTED: i8 = 1;

/// Who is fetching.
#[derive(Debug, Clone, Copy)]
enum Fetcher {
    /// A consumer (or another broker reading like one: a repair copy); `follower_too`: a
    /// follower of the partition serves it as well as the leader.
    Consumer {
        follower_too: bool,
    },
    Follower {
        replica_id: i32,
        broker_epoch: i64,
    },
}

/// One requested partition, resolved once per request.
struct Wanted {
    tp: Option<TopicPartition>,
    partition: i32,
    fetch_offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    partition_max_bytes: usize,
    /// The error for a partition that is not read: its topic is unknown or not authorized.
    missing: Option<i16>,
    /// What this fetch session last answered for the partition (incremental sessions).
    answered: Option<Answered>,
}

struct WantedTopic {
    /// The topic as the request named it (empty from v13, where the id names it).
    name: TopicName,
    /// The topic's name as the metrics label (resolved by id for v13+).
    label: Arc<str>,
    topic_id: Uuid,
    /// The topic's name in the metadata image; `None` when it does not exist.
    meta_name: Option<String>,
    partitions: Vec<Wanted>,
}

/// The response, and the segment file slices its file markers stand for.
pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    quota: Option<FetchQuota>,
    request: FetchRequest,
    version: i16,
    listener: Arc<str>,
) -> (FetchResponse, Vec<FileSlice>) {
    let wait = Duration::from_millis((request.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MS_MAX));
    let deadline = Instant::now() + wait;
    let min_bytes = request.min_bytes.max(0) as usize;
    let mut max_bytes = (request.max_bytes.max(0) as usize).min(FETCH_RESPONSE_BYTES_MAX);
    let read_committed = request.isolation_level == READ_COMMITTED;
    let fetcher = if version >= REPLICA_STATE_VERSION_MIN {
        match request.replica_state.replica_id.0 {
            id if id >= 0 => Fetcher::Follower {
                replica_id: id,
                broker_epoch: request.replica_state.replica_epoch,
            },
            _ => Fetcher::Consumer {
                follower_too: version >= FOLLOWER_READ_VERSION_MIN,
            },
        }
    } else if request.replica_id.0 >= 0 {
        Fetcher::Follower {
            replica_id: request.replica_id.0,
            broker_epoch: -1,
        }
    } else {
        Fetcher::Consumer {
            follower_too: version >= FOLLOWER_READ_VERSION_MIN,
        }
    };
    let follower = matches!(fetcher, Fetcher::Follower { .. });
    // A consumer under a fetch quota gets at most a window's worth at once (Kafka's bound).
    let quota = quota.filter(|_| !follower);
    if let Some(q) = &quota {
        if let Some(most) = ctx
            .quotas
            .fetch_bytes_max(&ctx.cluster.image(), &q.user, &q.client_id)
        {
            max_bytes = max_bytes.min(most);
        }
    }
    let requested = requested_partitions(&request, version);
    let session = if version >= SESSION_VERSION_MIN {
        let forgotten = forgotten_partitions(&request, version);
        ctx.fetch_sessions.begin(
            request.session_id,
            request.session_epoch,
            follower,
            &requested,
            &forgotten,
            now_ms(),
        )
    } else {
        FetchContext::Sessionless
    };
    let topics = match &session {
        FetchContext::Error(e) => {
            let code = match e {
                SessionError::NotFound => FETCH_SESSION_ID_NOT_FOUND,
                SessionError::InvalidEpoch => INVALID_FETCH_SESSION_EPOCH,
            };
            tracing::debug!(session_id = request.session_id, epoch = request.session_epoch, error = %e, "fetch session refused");
            return (FetchResponse::default().with_error_code(code), Vec::new());
        }
        FetchContext::Incremental { partitions, .. } => resolve(&ctx, partitions, version),
        FetchContext::Sessionless | FetchContext::Full { .. } => resolve(&ctx, &requested, version),
    };
    let topics = authorize(topics, &authz, follower);
    // This fetch's own wake-up, registered with each partition it asked for: an append elsewhere
    // does not wake it.
    let waiter = Arc::new(Notify::new());

    loop {
        // Each partition registers the waiter before it is read, so a change between the read and
        // the wait is not missed (the wake-up is kept as a permit until `notified` is awaited).
        let (mut response, files, mut bytes, any_error, remote_reads) = read_all(
            &ctx,
            &topics,
            fetcher,
            &waiter,
            max_bytes,
            read_committed,
            version,
            &listener,
        );
        let remote_read = !remote_reads.is_empty();
        if remote_read {
            bytes += read_remote(
                &ctx,
                &mut response,
                remote_reads,
                &topics,
                max_bytes.saturating_sub(bytes),
                bytes == 0,
                read_committed,
            )
            .await;
        }
        let done = remote_read
            || bytes >= min_bytes
            || any_error
            || Instant::now() >= deadline
            || ctx.shutdown.is_cancelled();
        if done {
            if let Some(q) = &quota {
                let throttle = charge(&ctx, q, &response, &files);
                if throttle > 0 {
                    // Kafka's throttled answer: nothing fetched, the throttle time, and the
                    // connection muted; the records are not charged (KIP-219).
                    // A full fetch's new session is dropped (Kafka creates none for a throttled
                    // answer); an incremental one keeps its id and state.
                    let id = match &session {
                        FetchContext::Full { id } => {
                            ctx.fetch_sessions.remove(*id);
                            0
                        }
                        other => session_id(other),
                    };
                    let throttled = FetchResponse::default()
                        .with_throttle_time_ms(throttle)
                        .with_session_id(id);
                    return (throttled, Vec::new());
                }
            }
            if matches!(fetcher, Fetcher::Consumer { .. }) {
                count_bytes_out(&topics, &response, &files);
            }
            return (finish_session(&ctx, &session, &topics, response), files);
        }
        tokio::select! {
            _ = waiter.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = ctx.shutdown.cancelled() => {}
        }
    }
}

/// Who a consumer fetch charges under `consumer_byte_rate`, and the connection to mute.
#[derive(Debug, Clone)]
pub struct FetchQuota {
    pub user: String,
    pub client_id: String,
    pub throttle: Throttle,
}

/// Records the answer's record bytes against the fetch quota: the throttle time (0: within it,
/// and the bytes stay charged; else they are taken back and the connection is muted).
fn charge(
    ctx: &BrokerContext,
    q: &FetchQuota,
    response: &FetchResponse,
    files: &[FileSlice],
) -> i32 {
    let bytes: usize = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_ref().map(|r| splice::records_len(r, files)))
        .sum();
    let image = ctx.cluster.image();
    let throttle = ctx.quotas.record(
        &image,
        QuotaType::Fetch,
        &q.user,
        &q.client_id,
        bytes as f64,
    );
    if throttle > 0 {
        ctx.quotas.unrecord(
            &image,
            QuotaType::Fetch,
            &q.user,
            &q.client_id,
            bytes as f64,
        );
        q.throttle.extend(throttle);
    }
    throttle
}

/// The session id an answer carries (0 without a session).
fn session_id(session: &FetchContext) -> i32 {
    match session {
        FetchContext::Full { id } | FetchContext::Incremental { id, .. } => *id,
        _ => 0,
    }
}

/// Kafka's BytesOutPerSec: the record bytes a consumer fetch returns, per topic.
fn count_bytes_out(topics: &[WantedTopic], response: &FetchResponse, files: &[FileSlice]) {
    let metrics = millrace_metrics::global();
    for (topic, answered) in topics.iter().zip(&response.responses) {
        let bytes: usize = answered
            .partitions
            .iter()
            .filter_map(|p| p.records.as_ref().map(|r| splice::records_len(r, files)))
            .sum();
        if bytes > 0 {
            metrics.record_bytes_out(&topic.label, bytes as u64);
        }
    }
}

/// The request's partitions, in request order, as a session keeps them (by id from v13, else by
/// name).
fn requested_partitions(request: &FetchRequest, version: i16) -> Vec<SessionPartition> {
    let by_id = version >= TOPIC_ID_VERSION_MIN;
    let mut out = Vec::with_capacity(request.topics.iter().map(|t| t.partitions.len()).sum());
    for topic in &request.topics {
        let name: Arc<str> = if by_id {
            Arc::from("")
        } else {
            Arc::from(topic.topic.0.as_str())
        };
        let topic_id = if by_id { topic.topic_id } else { Uuid::nil() };
        for p in &topic.partitions {
            out.push(SessionPartition {
                topic: Arc::clone(&name),
                topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
                partition_max_bytes: p.partition_max_bytes,
                answered: None,
            });
        }
    }
    out
}

/// `forgotten_topics_data` as session keys.
fn forgotten_partitions(request: &FetchRequest, version: i16) -> Vec<(Uuid, String, i32)> {
    let by_id = version >= TOPIC_ID_VERSION_MIN;
    request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let (id, name) = if by_id {
                (t.topic_id, String::new())
            } else {
                (Uuid::nil(), t.topic.0.to_string())
            };
            t.partitions.iter().map(move |&p| (id, name.clone(), p))
        })
        .collect()
}

/// Resolves partitions against the metadata image; consecutive partitions of one topic form one
/// topic of the answer.
fn resolve(
    ctx: &Arc<BrokerContext>,
    partitions: &[SessionPartition],
    version: i16,
) -> Vec<WantedTopic> {
    let image = ctx.cluster.image();
    let by_id = version >= TOPIC_ID_VERSION_MIN;
    let missing = if by_id {
        UNKNOWN_TOPIC_ID
    } else {
        UNKNOWN_TOPIC_OR_PARTITION
    };
    let mut topics: Vec<WantedTopic> = Vec::new();
    for p in partitions {
        let same = topics
            .last()
            .is_some_and(|t| t.topic_id == p.topic_id && t.name.0.as_str() == &*p.topic);
        if !same {
            let meta = if by_id {
                image.topic_by_id(p.topic_id).cloned()
            } else {
                image.topic(&p.topic).cloned()
            };
            let label: Arc<str> = match &meta {
                Some(m) => Arc::from(m.name.as_str()),
                None => Arc::clone(&p.topic),
            };
            topics.push(WantedTopic {
                label,
                name: super::topic_name(&p.topic),
                topic_id: p.topic_id,
                meta_name: meta.map(|m| m.name.clone()),
                partitions: Vec::new(),
            });
        }
        let Some(topic) = topics.last_mut() else {
            continue;
        };
        topic.partitions.push(Wanted {
            tp: topic
                .meta_name
                .as_ref()
                .map(|name| TopicPartition::new(name, p.partition)),
            partition: p.partition,
            fetch_offset: p.fetch_offset,
            current_leader_epoch: p.current_leader_epoch,
            last_fetched_epoch: p.last_fetched_epoch,
            partition_max_bytes: p.partition_max_bytes.max(0) as usize,
            missing: topic.meta_name.is_none().then_some(missing),
            answered: p.answered,
        });
    }
    topics
}

/// Kafka's rules: a follower needs ClusterAction on the cluster, or every partition is
/// TOPIC_AUTHORIZATION_FAILED; a consumer needs Read on each topic it names (checked before
/// whether the topic exists, so a client learns nothing of topics it may not read).
fn authorize(mut topics: Vec<WantedTopic>, authz: &Authz, follower: bool) -> Vec<WantedTopic> {
    let cluster_action = follower && authz.cluster(AclOperation::ClusterAction);
    for topic in &mut topics {
        let allowed = if follower {
            cluster_action
        } else {
            // A topic named by an id this broker does not know stays UNKNOWN_TOPIC_ID.
            let name = topic.meta_name.as_deref().unwrap_or(topic.name.0.as_str());
            (topic.meta_name.is_none() && topic.name.0.is_empty())
                || authz.topic(AclOperation::Read, name)
        };
        if !allowed {
            for p in &mut topic.partitions {
                p.tp = None;
                p.missing = Some(TOPIC_AUTHORIZATION_FAILED);
            }
        }
    }
    topics
}

/// Ends the fetch's session part: the answer's session id, and for an incremental session only
/// the partitions with something new; the session remembers what was answered.
fn finish_session(
    ctx: &Arc<BrokerContext>,
    session: &FetchContext,
    topics: &[WantedTopic],
    mut response: FetchResponse,
) -> FetchResponse {
    let (id, incremental) = match session {
        FetchContext::Full { id } if *id != 0 => (*id, false),
        FetchContext::Incremental { id, .. } => (*id, true),
        _ => return response,
    };
    response.session_id = id;
    let mut answered = Vec::new();
    for (topic, out) in topics.iter().zip(response.responses.iter_mut()) {
        let key_name = topic.name.0.to_string();
        out.partitions = std::mem::take(&mut out.partitions)
            .into_iter()
            .zip(&topic.partitions)
            .filter_map(|(data, wanted)| {
                let now = Answered {
                    high_watermark: data.high_watermark,
                    last_stable_offset: data.last_stable_offset,
                    log_start_offset: data.log_start_offset,
                };
                let had_records = data.records.as_ref().is_some_and(|r| !r.is_empty());
                let include = !incremental
                    || had_records
                    || data.error_code != NONE
                    || wanted.answered != Some(now)
                    || data.diverging_epoch.end_offset >= 0
                    || data.current_leader.leader_id.0 >= 0;
                if !include {
                    return None;
                }
                answered.push((
                    (topic.topic_id, key_name.clone(), wanted.partition),
                    now,
                    had_records,
                ));
                Some(data)
            })
            .collect();
    }
    response.responses.retain(|t| !t.partitions.is_empty());
    ctx.fetch_sessions.answered(id, &answered);
    response
}

/// One pass over every partition: the response, the file slices of its file markers, its record
/// bytes, and whether any partition erred.
#[allow(clippy::too_many_arguments)]
fn read_all(
    ctx: &Arc<BrokerContext>,
    topics: &[WantedTopic],
    fetcher: Fetcher,
    waiter: &Arc<Notify>,
    max_bytes: usize,
    read_committed: bool,
    version: i16,
    listener: &str,
) -> (
    FetchResponse,
    Vec<FileSlice>,
    usize,
    bool,
    Vec<RemotePending>,
) {
    let mut total = 0usize;
    let mut remote_reads = Vec::new();
    let mut files = Vec::new();
    let mut any_error = false;
    let mut hints: Vec<LeaderHint> = Vec::new();
    let mut responses = Vec::with_capacity(topics.len());
    for (topic_index, topic) in topics.iter().enumerate() {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for wanted in &topic.partitions {
            let mut remote = None;
            let mut data = PartitionData::default()
                .with_partition_index(wanted.partition)
                .with_high_watermark(-1)
                .with_records(Some(Bytes::new()));
            if !read_committed {
                data.aborted_transactions = None;
            }
            let budget = wanted
                .partition_max_bytes
                .min(max_bytes.saturating_sub(total));
            let outcome = match (&wanted.tp, wanted.missing) {
                (_, Some(code)) => Err(Refusal {
                    error: KafkaError::code(code),
                    hint: None,
                }),
                (None, None) => Err(Refusal {
                    error: KafkaError::code(UNKNOWN_TOPIC_OR_PARTITION),
                    hint: None,
                }),
                (Some(tp), None) => match fetcher {
                    Fetcher::Consumer { follower_too } => read_for_consumer(
                        ctx,
                        tp,
                        wanted,
                        waiter,
                        Budget {
                            bytes: budget,
                            first: total == 0,
                        },
                        read_committed,
                        follower_too,
                        &mut data,
                        &mut remote,
                    ),
                    Fetcher::Follower {
                        replica_id,
                        broker_epoch,
                    } => read_for_follower(
                        ctx,
                        tp,
                        wanted,
                        waiter,
                        replica_id,
                        broker_epoch,
                        budget,
                        version,
                        &mut data,
                    )
                    .map(Records::Memory),
                },
            };
            match outcome {
                Ok(records) => {
                    total += records.len();
                    data.records = Some(match records {
                        Records::Memory(bytes) => bytes,
                        Records::File(slice) => {
                            files.push(slice);
                            splice::file_marker(files.len() - 1)
                        }
                    });
                    // A follower told to truncate must hear it now, not after the long poll.
                    any_error |= data.diverging_epoch.end_offset >= 0;
                }
                Err(Refusal { error, hint }) => {
                    data.error_code = error.code;
                    any_error |= error.code != NONE;
                    if version >= LEADER_FIELDS_VERSION_MIN {
                        if let Some(h) = hint {
                            data.current_leader = LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(h.leader_id))
                                .with_leader_epoch(h.leader_epoch);
                            hints.push(h);
                        }
                    }
                }
            }
            if let Some(wanted) = remote {
                remote_reads.push(RemotePending {
                    topic_index,
                    partition_index: partitions.len(),
                    wanted,
                });
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
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= NODE_ENDPOINTS_VERSION_MIN {
        response.node_endpoints = leadership::endpoints(ctx, hints, listener)
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
    (response, files, total, any_error, remote_reads)
}

/// A partition of a fetch answered from the object store once the local reads are done.
struct RemotePending {
    topic_index: usize,
    partition_index: usize,
    wanted: RemoteWanted,
}

/// Fills the partitions that read below the local log start from the object store, within the
/// response's remaining bytes (Kafka's remote fetch: bounded by `remote.fetch.max.wait.ms`; a
/// read that does not finish in time answers no records, and the consumer asks again). Returns
/// the bytes added.
async fn read_remote(
    ctx: &Arc<BrokerContext>,
    response: &mut FetchResponse,
    pending: Vec<RemotePending>,
    topics: &[WantedTopic],
    mut room: usize,
    mut first: bool,
    read_committed: bool,
) -> usize {
    let wait = Duration::from_millis(ctx.remote_fetch_max_wait_ms());
    let mut added = 0;
    for p in pending {
        let partition_max = topics
            .get(p.topic_index)
            .and_then(|t| t.partitions.get(p.partition_index))
            .map_or(0, |w| w.partition_max_bytes);
        let budget = partition_max.min(room);
        if budget == 0 && !first {
            continue;
        }
        let read = tokio::time::timeout(
            wait,
            tiered::read(ctx, &p.wanted, budget, first, read_committed),
        )
        .await;
        let Some(data) = response
            .responses
            .get_mut(p.topic_index)
            .and_then(|t| t.partitions.get_mut(p.partition_index))
        else {
            continue;
        };
        match read {
            Ok(Ok(read)) => {
                let len = read.records.len();
                if read_committed {
                    data.aborted_transactions = Some(
                        read.aborted
                            .iter()
                            .map(|t| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(t.producer_id))
                                    .with_first_offset(t.first_offset)
                            })
                            .collect(),
                    );
                }
                data.records = Some(read.records);
                added += len;
                room = room.saturating_sub(len);
                first &= len == 0;
            }
            Ok(Err(e)) => data.error_code = e.code,
            Err(_) => {
                tracing::debug!(partition = %p.wanted.tp, "remote read did not finish within remote.fetch.max.wait.ms");
            }
        }
    }
    added
}

/// What a partition's read may take of the response.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// Bytes left for it.
    bytes: usize,
    /// It is the response's first partition with data (it may exceed `bytes` by one batch).
    first: bool,
}

/// A consumer's read: up to the high watermark, or for `read_committed` up to the last stable
/// offset with the aborted transactions that began below it (from the fetch offset on).
#[allow(clippy::too_many_arguments)]
fn read_for_consumer(
    ctx: &Arc<BrokerContext>,
    tp: &TopicPartition,
    wanted: &Wanted,
    waiter: &Arc<Notify>,
    budget: Budget,
    read_committed: bool,
    follower_too: bool,
    data: &mut PartitionData,
    remote: &mut Option<RemoteWanted>,
) -> Result<Records, Refusal> {
    let Budget {
        bytes: budget,
        first,
    } = budget;
    let hosted = leadership::serving_replica(ctx, tp, wanted.current_leader_epoch, follower_too)?;
    let log = &hosted.log;
    // Before the high watermark is read: a rise after this wakes the long poll (the last stable
    // offset moves only when the high watermark passes a marker).
    log.watch_high_watermark(waiter);
    let high_watermark = log.high_watermark();
    data.high_watermark = high_watermark;
    data.log_start_offset = tiered::log_start_offset(ctx, &hosted);
    // The last stable offset takes the partition lock: asked for here only when the answer is
    // decided without a read (a read reports it, taken under its own lock).
    let read_committed_end = read_committed.then(|| log.last_stable_offset());
    let visible = read_committed_end.unwrap_or(high_watermark);
    // Offsets between the visible end and the log end exist but are not yet visible.
    let nothing_visible =
        wanted.fetch_offset >= visible && wanted.fetch_offset <= log.log_end_offset();
    if nothing_visible || (budget == 0 && !first) {
        data.last_stable_offset = read_committed_end.unwrap_or_else(|| log.last_stable_offset());
        return Ok(Records::Memory(Bytes::new()));
    }
    match ctx.replicas.read_for_consumer(
        tp,
        wanted.current_leader_epoch,
        wanted.fetch_offset,
        budget,
        first,
        read_committed,
        follower_too,
    ) {
        Ok(read) => {
            data.last_stable_offset = read.last_stable_offset;
            if read_committed {
                data.aborted_transactions = Some(
                    read.aborted_transactions
                        .iter()
                        .map(|t| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(t.producer_id))
                                .with_first_offset(t.first_offset)
                        })
                        .collect(),
                );
            }
            Ok(read.records)
        }
        Err(e @ ReplicaError::Read(ReadError::OffsetOutOfRange { .. })) => {
            // Below the local log start, inside the remote log: the object store answers, after
            // the local reads of this fetch (`read_remote`).
            if let Some(wanted) = tiered::remote_wanted(ctx, &hosted, wanted.fetch_offset) {
                data.last_stable_offset = log.last_stable_offset();
                *remote = Some(wanted);
                return Ok(Records::Memory(Bytes::new()));
            }
            tracing::debug!(error = %e, partition = %tp, "fetch out of range");
            Err(leadership::refusal(ctx, tp, &e))
        }
        Err(e) => Err(leadership::refusal(ctx, tp, &e)),
    }
}

#[allow(clippy::too_many_arguments)]
fn read_for_follower(
    ctx: &Arc<BrokerContext>,
    tp: &TopicPartition,
    wanted: &Wanted,
    waiter: &Arc<Notify>,
    replica_id: i32,
    broker_epoch: i64,
    budget: usize,
    version: i16,
    data: &mut PartitionData,
) -> Result<Bytes, Refusal> {
    // Before the read: a leader append after this wakes the long poll.
    if let Some(hosted) = ctx.replicas.partition(tp) {
        hosted.log.watch_log_end(waiter);
    }
    // A long poll reads again on every wake-up; the follower's position is accounted each time
    // (the same position: the machine sees nothing new after the first).
    let read = ctx
        .replicas
        .read_for_follower(
            tp,
            replica_id,
            broker_epoch,
            wanted.current_leader_epoch,
            wanted.fetch_offset,
            wanted.last_fetched_epoch,
            budget.max(1),
        )
        .map_err(|e| {
            if let ReplicaError::Partition(millrace_replication::PartitionError::OffsetOutOfRange) =
                e
            {
                data.log_start_offset = ctx
                    .replicas
                    .partition(tp)
                    .map_or(-1, |h| h.log.log_start_offset());
            }
            leadership::refusal(ctx, tp, &e)
        })?;
    data.high_watermark = read.high_watermark;
    // Followers do not use it; the high watermark bounds it.
    data.last_stable_offset = read.high_watermark;
    data.log_start_offset = read.log_start_offset;
    if let Some((epoch, end_offset)) = read.diverging {
        if version >= LEADER_FIELDS_VERSION_MIN {
            data.diverging_epoch = EpochEndOffset::default()
                .with_epoch(epoch)
                .with_end_offset(end_offset);
        }
        return Ok(Bytes::new());
    }
    Ok(read.records)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::error_codes::{OFFSET_OUT_OF_RANGE, UNKNOWN_SERVER_ERROR};
    use crate::handler::counted_errors;

    #[test]
    fn error_metrics_count_the_top_level_then_partitions() {
        let response = FetchResponse::default()
            .with_error_code(UNKNOWN_SERVER_ERROR)
            .with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![
                    PartitionData::default()
                        .with_partition_index(0)
                        .with_error_code(OFFSET_OUT_OF_RANGE),
                    PartitionData::default().with_partition_index(1),
                ])]);
        assert_eq!(counted_errors::<Fetch>(&response), vec![-1, 1]);
    }
}
