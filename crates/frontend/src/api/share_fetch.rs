//! ShareFetch (key 78, KIP-932): a share consumer's fetch. It acquires records for the member
//! from the share partitions of its share session ([`crate::share_session`]) and answers them
//! with the acquired offset ranges and their delivery counts; acknowledgements of earlier
//! records ride along and are applied first.
//!
//! As in Kafka:
//! - epoch 0 opens the member's session (acknowledgements there are INVALID_REQUEST), a later
//!   epoch adds `topics` and drops `forgotten_topics_data`, epoch -1 applies the
//!   acknowledgements, closes the session, releases what the member still holds and fetches
//!   nothing;
//! - every request fetches from every partition of the session (rotated by epoch, so that
//!   `max_records` does not starve the last ones); `max_records` is soft across the request
//!   and rounded up to a log batch; `max_records` or `max_bytes` 0, or a v2 renew
//!   (`is_renew_ack`), fetches nothing;
//! - a fetch that acquired nothing waits up to `max_wait_ms` for the high watermark of one of
//!   its partitions to move, for records to be released, or for a lock to end;
//! - the answer names a partition only when it has records, an error, an acknowledgement
//!   outcome, or was just added; `records` is never null; `acquisition_lock_timeout_ms` is the
//!   record lock duration.
//!
//! Records are read up to the high watermark, or for a group with `share.isolation.level`
//! read_committed up to the last stable offset (an open transaction holds the fetch there until
//! it ends), where the data batches of aborted transactions are archived as they are acquired
//! and left out of the acquired ranges; whole log batches are returned, from the first to the
//! last that holds an acquired record — the client delivers only acquired offsets, and
//! acknowledges transaction markers as gaps. The group's configs (`share.*` on its GROUP
//! resource) are read at each request: the lock duration, the isolation level, the start of a
//! new share partition.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{BrokerId, ShareFetchRequest, ShareFetchResponse};
use millrace_cluster::acl::AclOperation;
use millrace_cluster::{ShareAutoOffsetReset, ShareIsolationLevel};
use millrace_replication::ReplicaError;
use millrace_share::{AcquireMode, AcquiredRange, LogBatch};
use millrace_store::batch::BatchHeader;
use millrace_store::batch_walk::{BatchWalk, Validation, WalkChecks};
use millrace_store::AbortedTxn;
use millrace_store::{ReadError, Records};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::leadership::{self, LeaderHint};
use super::share_common::{
    self, PartitionOutcome, WireAck, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
};
use super::str_bytes;
use crate::authz::Authz;
use crate::clock::now_ms;
use crate::error_codes::{
    GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, KAFKA_STORAGE_ERROR, NONE, UNSUPPORTED_VERSION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::limits::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::share_partitions::ShareKey;
use crate::share_session::{MemberKey, SharePartitionId, ShareSessionError, OPEN_EPOCH};
use crate::BrokerContext;

api_handler! {
    /// ShareFetch: its key, versions, handler and error codes, for [`crate::registry`].
    ShareFetch, versions 1..=2, ShareFetchRequest,
    |call, request| {
        let connection = share_common::connection(call.ctx, call.session);
        let on = Connection {
            id: connection.id,
            listener: call.session.listener.to_string(),
        };
        if request.share_session_epoch == OPEN_EPOCH {
            if let Ok(key) = share_common::member_key(
                request.group_id.as_ref().map(|g| g.0.as_str()),
                request.member_id.as_ref().map(|m| m.as_str()),
            ) {
                connection.opened(&key);
            }
        }
        Reply::later(handle(call.ctx.clone(), call.authz.clone(), request, call.version, on))
    },
}

response_fields!(
    ShareFetchResponse:
    errors[error_code, responses[partitions[error_code, acknowledge_error_code]]],
    throttle_time_ms
);

/// `share_acquire_mode` of record_limit (v2).
const RECORD_LIMIT_MODE: i8 = 1;
/// The first read of a share partition's log for one fetch (bytes). A share fetch acquires at
/// most `max_records` (and the in-flight window), usually far less than `max_bytes` (clients send
/// `fetch.max.bytes`, 50 MiB): the read grows from here to what the records wanted need, instead of
/// copying `max_bytes` of log for every fetch.
const SHARE_READ_BYTES_FIRST: usize = 64 * 1024;

/// The connection a request came on.
struct Connection {
    id: u64,
    listener: String,
}

/// One partition's answer while it is being made.
#[derive(Default)]
struct Answer {
    fetch: Option<PartitionOutcome>,
    ack: Option<PartitionOutcome>,
    records: Option<Bytes>,
    acquired: Vec<AcquiredRange>,
}

async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: ShareFetchRequest,
    version: i16,
    on: Connection,
) -> ShareFetchResponse {
    let group = request.group_id.as_ref().map_or("", |g| g.0.as_str());
    let lock_ms = i32::try_from(
        ctx.shares
            .settings
            .group(group)
            .partition
            .record_lock_duration_ms,
    )
    .unwrap_or(i32::MAX);
    let refuse = |code: i16, message: &str| {
        ShareFetchResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
    };
    if !ctx.shares.settings.enabled {
        return refuse(UNSUPPORTED_VERSION, share_common::DISABLED_MESSAGE);
    }
    let member = match share_common::member_key(
        request.group_id.as_ref().map(|g| g.0.as_str()),
        request.member_id.as_ref().map(|m| m.as_str()),
    ) {
        Ok(m) => m,
        Err(why) => return refuse(INVALID_REQUEST, why),
    };
    if !authz.group(AclOperation::Read, &member.group_id) {
        return refuse(GROUP_AUTHORIZATION_FAILED, "");
    }
    let renew = version >= 2 && request.is_renew_ack;
    if renew
        && (request.max_bytes != 0
            || request.min_bytes != 0
            || request.max_records != 0
            || request.max_wait_ms != 0)
    {
        return refuse(
            INVALID_REQUEST,
            "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 when IsRenewAck is set",
        );
    }
    // librdkafka may name a topic more than once: merge.
    let mut added: Vec<SharePartitionId> = Vec::new();
    let mut acks: Vec<(SharePartitionId, Vec<WireAck<'_>>)> = Vec::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let id = (topic.topic_id, p.partition_index);
            if !added.contains(&id) {
                added.push(id);
            }
            if !p.acknowledgement_batches.is_empty() {
                let batches = p.acknowledgement_batches.iter().map(|b| {
                    (
                        b.first_offset,
                        b.last_offset,
                        b.acknowledge_types.as_slice(),
                    )
                });
                match acks.iter_mut().find(|(k, _)| *k == id) {
                    Some((_, list)) => list.extend(batches),
                    None => acks.push((id, batches.collect())),
                }
            }
        }
    }
    if request.share_session_epoch == OPEN_EPOCH && !acks.is_empty() {
        return refuse(
            INVALID_REQUEST,
            "Acknowledge data present on initial fetch request",
        );
    }
    let forgotten: Vec<SharePartitionId> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let step = match ctx.shares.sessions.fetch(
        &member,
        request.share_session_epoch,
        on.id,
        &added,
        &forgotten,
    ) {
        Ok(step) => step,
        Err(e) => {
            let code = match e {
                ShareSessionError::NotFound => SHARE_SESSION_NOT_FOUND,
                ShareSessionError::InvalidEpoch => INVALID_SHARE_SESSION_EPOCH,
                ShareSessionError::LimitReached => SHARE_SESSION_LIMIT_REACHED,
            };
            return refuse(code, &e.to_string());
        }
    };
    // A member that opens its session again (after SHARE_SESSION_NOT_FOUND, say) keeps what it
    // acquired: its records stay locked to its member id, so it can still acknowledge them.
    let now = now_ms();

    let mut answers: HashMap<SharePartitionId, Answer> = HashMap::new();
    for (id, batches) in &acks {
        let outcome =
            share_common::acknowledge(&ctx, &authz, &member, *id, batches, renew, now).await;
        answers.entry(*id).or_default().ack = Some(outcome);
    }
    if step.closed {
        ctx.shares
            .release_member(&member.group_id, &member.member_id, &step.partitions, now);
    } else if !renew && request.max_records > 0 && request.max_bytes > 0 {
        fetch(
            &ctx,
            &authz,
            &member,
            &request,
            &step.partitions,
            &mut answers,
        )
        .await;
    }
    // A partition just added is answered even with nothing in it.
    for id in &added {
        if step.partitions.contains(id) {
            answers.entry(*id).or_default();
        }
    }
    respond(&ctx, answers, lock_ms, &on.listener)
}

/// Acquires records from `partitions` until something is acquired, a partition fails, or the
/// request's wait is over.
async fn fetch(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    member: &MemberKey,
    request: &ShareFetchRequest,
    partitions: &[SharePartitionId],
    answers: &mut HashMap<SharePartitionId, Answer>,
) {
    let wait_ms = u64::try_from(request.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_WAIT_MS_MAX);
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let mode = if request.share_acquire_mode == RECORD_LIMIT_MODE {
        AcquireMode::RecordLimit
    } else {
        AcquireMode::BatchOptimized
    };
    let batch_size = u32::try_from(request.batch_size).unwrap_or(0);
    let max_bytes = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .min(FETCH_RESPONSE_BYTES_MAX);
    let isolation = ctx.shares.settings.group(&member.group_id).isolation_level;
    // Rotated by epoch, as Kafka does, so that the first partitions do not always win.
    let mut order: Vec<SharePartitionId> = partitions.to_vec();
    if !order.is_empty() {
        let shift = usize::try_from(request.share_session_epoch.max(0)).unwrap_or(0) % order.len();
        order.rotate_left(shift);
    }
    let keys: Vec<ShareKey> = order
        .iter()
        .map(|(topic_id, partition)| ShareKey {
            group_id: Arc::clone(&member.group_id),
            topic_id: *topic_id,
            partition: *partition,
        })
        .collect();
    // Each share partition is loaded (its persisted state read, or initialized) before the
    // first look; one that cannot be is answered with the coordinator's error.
    let mut failed: Vec<SharePartitionId> = Vec::new();
    for (id, key) in order.iter().zip(&keys) {
        if let Err(outcome) = load(ctx, authz, *id, key).await {
            answers.entry(*id).or_default().fetch = Some(outcome);
            failed.push(*id);
        }
    }
    if !failed.is_empty() {
        return;
    }
    loop {
        let waiter = Arc::new(Notify::new());
        let released = ctx.shares.released();
        tokio::pin!(released);
        released.as_mut().enable();
        let mut budget = max_bytes;
        let mut records_left = u32::try_from(request.max_records).unwrap_or(0);
        let mut done = false;
        for (id, key) in order.iter().zip(&keys) {
            if records_left == 0 || budget == 0 {
                break;
            }
            let want = Want {
                key,
                budget,
                max_records: records_left,
                batch_size,
                mode,
                isolation,
            };
            match acquire(ctx, authz, &member.member_id, *id, &want, &waiter) {
                Ok(None) => {}
                Ok(Some((records, acquired))) => {
                    budget = budget.saturating_sub(records.len());
                    let count: i64 = acquired.iter().map(|r| r.last - r.first + 1).sum();
                    records_left =
                        records_left.saturating_sub(u32::try_from(count).unwrap_or(u32::MAX));
                    let answer = answers.entry(*id).or_default();
                    answer.records = Some(records);
                    answer.acquired = acquired;
                    done = true;
                }
                Err(outcome) => {
                    answers.entry(*id).or_default().fetch = Some(outcome);
                    done = true;
                }
            }
        }
        let now = Instant::now();
        if done || now >= deadline || ctx.shutdown.is_cancelled() {
            return;
        }
        // A lock that ends makes its records available again.
        let until = match ctx.shares.next_lock_deadline(&keys) {
            Some(lock) => {
                let in_ms = u64::try_from(lock.saturating_sub(now_ms())).unwrap_or(0) + 1;
                deadline.min(now + Duration::from_millis(in_ms))
            }
            None => deadline,
        };
        tokio::select! {
            _ = waiter.notified() => {}
            _ = released => {}
            _ = tokio::time::sleep_until(until) => {}
            _ = ctx.shutdown.cancelled() => {}
        }
    }
}

/// Loads the share partition `key` led here (see `ShareState::load`); its start, when it has
/// none yet, is where the group's `share.auto.offset.reset` points when it is initialized: the
/// high watermark (`latest`, whatever the isolation level, as Kafka), the log start
/// (`earliest`), or the first offset stamped at or after now minus the duration (`by_duration`;
/// the high watermark when no record is that recent). A partition not led here is left to
/// `acquire`, which answers its leadership error.
async fn load(
    ctx: &BrokerContext,
    authz: &Authz,
    id: SharePartitionId,
    key: &ShareKey,
) -> Result<(), PartitionOutcome> {
    let Ok((tp, hosted, leader_epoch)) = share_common::led_partition(ctx, authz, id.0, id.1) else {
        return Ok(());
    };
    let log = &hosted.log;
    let reset = ctx.shares.settings.group(&key.group_id).auto_offset_reset;
    let start = || match reset {
        ShareAutoOffsetReset::Latest => log.high_watermark(),
        ShareAutoOffsetReset::Earliest => log.log_start_offset(),
        ShareAutoOffsetReset::ByDuration { duration_ms } => {
            let high_watermark = log.high_watermark();
            let since = now_ms().saturating_sub(duration_ms);
            match log.offset_for_timestamp(since) {
                Ok(Some((offset, _))) if offset < high_watermark => offset,
                Ok(_) => high_watermark,
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "share partition start by time: lookup failed; starting at the high watermark");
                    high_watermark
                }
            }
        }
    };
    ctx.shares
        .load(key, leader_epoch, start)
        .await
        .map_err(|e| PartitionOutcome {
            code: e.code,
            message: Some(e.message),
            hint: None,
        })
}

/// What one partition may acquire.
struct Want<'a> {
    key: &'a ShareKey,
    budget: usize,
    max_records: u32,
    batch_size: u32,
    mode: AcquireMode,
    /// The group's `share.isolation.level`: up to the high watermark, or the last stable
    /// offset with aborted transactions archived.
    isolation: ShareIsolationLevel,
}

/// Reads from the share partition's next fetch offset and acquires for `member`: the whole log
/// batches that hold acquired records and the acquired ranges, or `None` when nothing could be
/// acquired (nothing new, or the in-flight window is full).
fn acquire(
    ctx: &BrokerContext,
    authz: &Authz,
    member: &str,
    id: SharePartitionId,
    want: &Want<'_>,
    waiter: &Arc<Notify>,
) -> Result<Option<(Bytes, Vec<AcquiredRange>)>, PartitionOutcome> {
    let (tp, hosted, leader_epoch) = share_common::led_partition(ctx, authz, id.0, id.1)?;
    let log = &hosted.log;
    // Before the high watermark is read: a rise after this wakes the long poll (the last stable
    // offset moves only when the high watermark passes a transaction marker).
    log.watch_high_watermark(waiter);
    let read_committed = want.isolation == ShareIsolationLevel::ReadCommitted;
    let visible_end = if read_committed {
        log.last_stable_offset()
    } else {
        log.high_watermark()
    };
    let now = now_ms();
    let shares = &ctx.shares;
    // Not loaded (a write failed since, or the leader epoch moved): the next request loads it.
    let Some((fetch_offset, can_acquire)) =
        shares.with_partition(want.key, leader_epoch, now, |sp, _| {
            (sp.next_fetch_offset(), sp.can_acquire())
        })
    else {
        return Ok(None);
    };
    if !can_acquire || fetch_offset >= visible_end {
        return Ok(None);
    }
    // Whole log batches from `fetch_offset`, enough to hold the records wanted: read a little,
    // then, if the batches read hold fewer offsets than wanted, again with the size those
    // batches' bytes per offset say is needed (never past the budget or the visible end).
    let wanted = i64::from(want.max_records.max(1));
    let mut size = SHARE_READ_BYTES_FIRST.min(want.budget).max(1);
    let (bytes, batches, aborted) = loop {
        let Some((bytes, batches, aborted)) =
            read_batches(ctx, &tp, fetch_offset, size, read_committed)?
        else {
            // Retention removed what the share partition had not reached: it moves to the log
            // start (Kafka's answer to OFFSET_OUT_OF_RANGE here), and the next look reads.
            let log_start = log.log_start_offset();
            let _ = shares.with_partition(want.key, leader_epoch, now, |sp, epochs| {
                let change = sp.archive_below(log_start);
                shares.write_in_background(want.key, epochs, change);
            });
            waiter.notify_one();
            return Ok(None);
        };
        let covered = batches
            .last()
            .map_or(0, |(b, _, _)| b.last + 1 - fetch_offset);
        if covered >= wanted || size >= want.budget || fetch_offset + covered >= visible_end {
            break (bytes, batches, aborted);
        }
        let per_offset = bytes.len().max(1) as f64 / covered.max(1) as f64;
        let needed = (per_offset * wanted as f64 * 1.25) as usize;
        size = needed.max(size.saturating_mul(2)).min(want.budget);
    };
    let log_batches: Vec<LogBatch> = batches.iter().map(|(b, _, _)| *b).collect();
    let Some(acquired) = shares.with_partition(want.key, leader_epoch, now, |sp, _| {
        sp.acquire(
            member,
            fetch_offset,
            &log_batches,
            want.max_records,
            want.batch_size,
            want.mode,
            &aborted,
            now,
        )
    }) else {
        return Ok(None);
    };
    let acquired = acquired.map_err(|e| share_common::share_error(&e))?;
    let (Some(first), Some(last)) = (acquired.first(), acquired.last()) else {
        return Ok(None);
    };
    // The batches from the first to the last that hold an acquired offset (contiguous bytes).
    let holding = |b: &LogBatch| b.last >= first.first && b.first <= last.last;
    let from = batches.iter().find(|(b, _, _)| holding(b));
    let to = batches.iter().rev().find(|(b, _, _)| holding(b));
    let records = match (from, to) {
        (Some((_, start, _)), Some((_, end, len))) => bytes.slice(*start..end + len),
        _ => Bytes::new(),
    };
    Ok(Some((records, acquired)))
}

/// A share partition's whole log batches from `fetch_offset`, at most `size` bytes (one batch at
/// least): the bytes, each batch with its position and length, and (read_committed) the batches of
/// aborted transactions. `None` when retention passed `fetch_offset`.
fn read_batches(
    ctx: &BrokerContext,
    tp: &millrace_store::TopicPartition,
    fetch_offset: i64,
    size: usize,
    read_committed: bool,
) -> Result<Option<ReadBatches>, PartitionOutcome> {
    let read = match ctx.replicas.read_for_consumer(
        tp,
        -1,
        fetch_offset,
        size,
        true,
        read_committed,
        false,
    ) {
        Ok(read) => read,
        Err(ReplicaError::Read(ReadError::OffsetOutOfRange { .. })) => return Ok(None),
        Err(e) => {
            let refusal = leadership::refusal(ctx, tp, &e);
            return Err(PartitionOutcome {
                code: refusal.error.code,
                message: refusal.error.message,
                hint: refusal.hint,
            });
        }
    };
    let bytes = match read.records {
        Records::Memory(b) => b,
        Records::File(slice) => slice.read_to_bytes().map_err(|e| {
            tracing::warn!(partition = %tp, error = %e, "share fetch read failed");
            PartitionOutcome::code(KAFKA_STORAGE_ERROR)
        })?,
    };
    // Where each whole batch is in `bytes`.
    let walk = BatchWalk::new(
        &bytes,
        WalkChecks {
            validation: Validation::Header,
            batch_bytes_max: None,
        },
    );
    let mut batches: Vec<(LogBatch, usize, usize)> = Vec::new();
    // read_committed: the data batches of aborted transactions, archived and never delivered.
    let mut aborted: Vec<(i64, i64)> = Vec::new();
    for walked in walk {
        let Ok(w) = walked else { break };
        let batch = LogBatch {
            first: w.header.base_offset,
            last: w.header.last_offset(),
        };
        if read_committed && of_aborted_transaction(&w.header, &read.aborted_transactions) {
            aborted.push((batch.first, batch.last));
        }
        batches.push((batch, w.position, w.bytes.len()));
    }
    Ok(Some((bytes, batches, aborted)))
}

/// What [`read_batches`] reads: the bytes, each whole batch with its position and length, and
/// the aborted transactions' batches.
type ReadBatches = (Bytes, Vec<(LogBatch, usize, usize)>, Vec<(i64, i64)>);

/// Whether a batch holds records of one of the `aborted` transactions (Kafka's
/// `SharePartition.fetchAbortedTransactionRecordBatches`): a transactional data batch of a
/// producer whose aborted transaction began at or before it and ends with a marker after it. A
/// producer has one transaction open at a time, so that is exact; markers themselves are not
/// archived here (clients acknowledge control records as gaps, as with Kafka).
fn of_aborted_transaction(header: &BatchHeader, aborted: &[AbortedTxn]) -> bool {
    header.is_transactional()
        && !header.is_control()
        && aborted.iter().any(|t| {
            t.producer_id == header.producer_id
                && t.first_offset <= header.base_offset
                && header.base_offset < t.last_offset
        })
}

fn respond(
    ctx: &BrokerContext,
    answers: HashMap<SharePartitionId, Answer>,
    lock_ms: i32,
    listener: &str,
) -> ShareFetchResponse {
    let mut by_topic: Vec<(Uuid, Vec<PartitionData>)> = Vec::new();
    let mut hints: Vec<LeaderHint> = Vec::new();
    let mut sorted: Vec<_> = answers.into_iter().collect();
    sorted.sort_by_key(|(id, _)| *id);
    for ((topic_id, partition), answer) in sorted {
        let fetch = answer.fetch.unwrap_or_default();
        let ack = answer.ack;
        let mut data = PartitionData::default()
            .with_partition_index(partition)
            .with_error_code(fetch.code)
            .with_error_message(fetch.message.as_deref().map(str_bytes))
            .with_records(Some(answer.records.unwrap_or_default()))
            .with_acquired_records(
                answer
                    .acquired
                    .iter()
                    .map(|r| {
                        AcquiredRecords::default()
                            .with_first_offset(r.first)
                            .with_last_offset(r.last)
                            .with_delivery_count(r.delivery_count)
                    })
                    .collect(),
            );
        if let Some(ack) = ack {
            data.acknowledge_error_code = ack.code;
            data.acknowledge_error_message = ack.message.as_deref().map(str_bytes);
        }
        if let Some(hint) = fetch.hint {
            data.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(hint.leader_id)
                .with_leader_epoch(hint.leader_epoch);
            hints.push(hint);
        }
        match by_topic.last_mut() {
            Some((id, partitions)) if *id == topic_id => partitions.push(data),
            _ => by_topic.push((topic_id, vec![data])),
        }
    }
    ShareFetchResponse::default()
        .with_error_code(NONE)
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(
            by_topic
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_node_endpoints(
            leadership::endpoints(ctx, hints, listener)
                .into_iter()
                .map(|(id, host, port, rack)| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(id))
                        .with_host(str_bytes(&host))
                        .with_port(i32::from(port))
                        .with_rack(rack.as_deref().map(str_bytes))
                })
                .collect(),
        )
}
