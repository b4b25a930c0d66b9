//! The in-flight state of one share-partition (group, topic, partition) on the partition leader
//! (Kafka's `SharePartition`): which records are available, acquired by which member until when,
//! acknowledged or archived, and how often each was delivered.
//!
//! Where it sits: the front end reads the log from [`SharePartition::next_fetch_offset`] (whole
//! log batches, bounded by the high watermark or the last stable offset), hands the batch ranges
//! to [`SharePartition::acquire`], and applies acknowledgements with
//! [`SharePartition::acknowledge`]. Every state change that must be persisted comes back as a
//! [`StateChange`] for the caller to write to `__share_group_state` before it answers; acquiring
//! is never persisted. On a failed write the caller drops this value and loads the share
//! partition again from the persisted state (records in flight are then redelivered, as after a
//! leader change).
//!
//! Offsets: the share-partition start offset (SPSO, `start_offset`) is the first offset not yet
//! terminally processed; the end offset (SPEO, `end_offset`) is the last offset ever acquired,
//! inclusive (equal to SPSO when nothing is cached). Between them an ordered map of in-flight
//! batches (first offset → [`InFlightBatch`]).
//!
//! Invariants:
//! - no offset below SPSO is ever acquired; SPSO only moves forward, and only across a
//!   contiguous prefix of ACKNOWLEDGED/ARCHIVED records ([`SharePartition::advance_start`]);
//! - cached batches never overlap; an offset is ACQUIRED by at most one member;
//! - a record's delivery count rises by one per acquisition and never otherwise; a record
//!   released or timing out at the delivery-count limit is archived, so it is delivered at most
//!   `delivery_count_limit` times;
//! - the in-flight window (SPEO − SPSO + 1) grows past `max_record_locks` by at most one log
//!   batch;
//! - an acknowledgement request changes a partition entirely or not at all.
//!
//! Not here: sessions, the purgatory, the wire format, reading the log, writing state. No clock
//! is read: locks expire when the caller calls [`SharePartition::expire_locks`] (at
//! [`SharePartition::next_lock_deadline`]), and every check of a lock uses the caller's `now_ms`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::ShareError;
use crate::in_flight::{InFlightBatch, Record};
use crate::limits::{
    DELIVERY_COUNT_LIMIT_DEFAULT, DELIVERY_COUNT_LIMIT_MIN, MAX_RECORD_LOCKS_DEFAULT,
    RECORD_LOCK_DURATION_MS_DEFAULT,
};
use crate::state::{combine, DeliveredRange, PersistedState, RecordState, StateBatch};

/// The group configs a share partition obeys (Kafka's group `share.*` configs, falling back to
/// the broker's `group.share.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharePartitionConfig {
    /// `share.delivery.count.limit`: deliveries per record before it is archived.
    pub delivery_count_limit: i16,
    /// `share.partition.max.record.locks`: the in-flight window (records).
    pub max_record_locks: u32,
    /// `share.record.lock.duration.ms`: how long an acquisition lock lasts.
    pub record_lock_duration_ms: i64,
    /// `share.renew.acknowledge.enable`: whether RENEW acknowledgements are allowed.
    pub renew_enabled: bool,
}

impl Default for SharePartitionConfig {
    fn default() -> SharePartitionConfig {
        SharePartitionConfig {
            delivery_count_limit: DELIVERY_COUNT_LIMIT_DEFAULT,
            max_record_locks: MAX_RECORD_LOCKS_DEFAULT,
            record_lock_duration_ms: RECORD_LOCK_DURATION_MS_DEFAULT,
            renew_enabled: true,
        }
    }
}

/// `cfg` with a delivery-count limit of at least Kafka's minimum.
fn normalized(cfg: SharePartitionConfig) -> SharePartitionConfig {
    SharePartitionConfig {
        delivery_count_limit: cfg.delivery_count_limit.max(DELIVERY_COUNT_LIMIT_MIN),
        ..cfg
    }
}

/// How `acquire` bounds a fetch by `max_records` (ShareFetch v2's `ShareAcquireMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireMode {
    /// Kafka's default: the limit is soft and rounded up to the end of a log batch.
    BatchOptimized,
    /// At most `max_records` records; the rest of a log batch stays AVAILABLE.
    RecordLimit,
}

/// One log batch the leader read: its first and last offset (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBatch {
    pub first: i64,
    pub last: i64,
}

/// A range of acquired records as ShareFetch returns it (`AcquiredRecords`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRange {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i16,
}

/// An acknowledgement type (Kafka's `AcknowledgeType` ids, with GAP as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// 0: no record at this offset (compaction, control record) → ARCHIVED.
    Gap,
    /// 1: processed → ACKNOWLEDGED.
    Accept,
    /// 2: give back for redelivery → AVAILABLE (ARCHIVED at the delivery-count limit).
    Release,
    /// 3: unprocessable → ARCHIVED.
    Reject,
    /// 4 (v2): restart the acquisition lock; nothing else changes and nothing is persisted.
    Renew,
}

impl AckType {
    /// The type with Kafka's id; `None` for any other value (the front end answers
    /// INVALID_REQUEST, and refuses 4 on v1 itself).
    pub fn from_id(id: i8) -> Option<AckType> {
        match id {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            4 => Some(AckType::Renew),
            _ => None,
        }
    }
}

/// One acknowledgement batch: one type for all of `[first, last]`, or one per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<AckType>,
}

/// What a state change must persist: the ranges whose persisted state changed (with their new
/// state and delivery count) and the share-partition start offset after it. Written as a
/// ShareUpdate (WriteShareGroupState).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// Sorted, coalesced ranges with their new persisted state.
    pub batches: Vec<StateBatch>,
    /// SPSO after the change.
    pub start_offset: i64,
    /// Whether SPSO moved.
    pub start_offset_moved: bool,
    /// Terminal records at or above SPSO after the change (for lag).
    pub delivery_complete_count: i32,
}

impl StateChange {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty() && !self.start_offset_moved
    }
}

/// Counters for share-group metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SharePartitionMetrics {
    /// SPEO − SPSO + 1 while anything at or above SPSO is cached, else 0 (Kafka's in-flight
    /// message count).
    pub in_flight_records: u64,
    /// Records ACQUIRED now.
    pub acquired_records: u64,
    /// Records archived since load (rejected, gaps, delivery-count limit, aborted, log start).
    pub archived_records_total: u64,
    /// Acquisitions of records delivered before (delivery count 2 or more) since load.
    pub redelivered_records_total: u64,
}

/// The persisted-read gap window (Kafka's `GapWindow`): after loading persisted state with holes
/// (records acquired before a restart but never written), offsets in holes at or above
/// `gap_start` up to `end_offset` are fetched and acquired as new records. The window is active
/// while SPEO still equals `end_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GapWindow {
    end_offset: i64,
    gap_start: i64,
}

/// The in-flight state of one share-partition. See the module comment.
#[derive(Debug, Clone)]
pub struct SharePartition {
    cfg: SharePartitionConfig,
    state_epoch: i32,
    leader_epoch: i32,
    start_offset: i64,
    end_offset: i64,
    cache: BTreeMap<i64, InFlightBatch>,
    gap_window: Option<GapWindow>,
    archived_total: u64,
    redelivered_total: u64,
}

/// The bookkeeping of one `acquire` call.
struct Acquisition<'a> {
    member: Arc<str>,
    deadline_ms: i64,
    log: &'a [LogBatch],
    mode: AcquireMode,
    batch_size: i64,
    result: Vec<AcquiredRange>,
    count: i64,
    max: i64,
}

/// One contiguous piece of an acknowledgement batch with one type.
#[derive(Debug, Clone, Copy)]
struct AckSegment {
    first: i64,
    last: i64,
    ack: AckType,
}

impl SharePartition {
    /// Loads a share partition from its persisted state (Kafka's `maybeInitialize`): SPSO resumes
    /// from the persisted start offset, ACKNOWLEDGED and ARCHIVED ranges stay terminal, AVAILABLE
    /// ranges keep their delivery counts, and holes between persisted ranges (records acquired
    /// but never written) form the gap window, to be fetched again as new records with delivery
    /// count 1. The caller resolves an uninitialized start offset (-1) with
    /// `share.auto.offset.reset` first.
    pub fn new(
        state: PersistedState,
        cfg: SharePartitionConfig,
    ) -> Result<SharePartition, ShareError> {
        let cfg = normalized(cfg);
        let start = state.start_offset;
        if start < 0 {
            return Err(ShareError::InvalidPersistedState(format!(
                "start offset {start}"
            )));
        }
        let mut cache = BTreeMap::new();
        let mut prev_last: Option<i64> = None;
        let mut gap_start: Option<i64> = None;
        let mut next = start;
        for b in &state.batches {
            let Some(rec_state) = RecordState::from_persisted_id(b.state) else {
                return Err(ShareError::InvalidPersistedState(format!(
                    "delivery state {}",
                    b.state
                )));
            };
            if b.first > b.last || b.last == i64::MAX || b.delivery_count < 0 {
                return Err(ShareError::InvalidPersistedState(format!("batch {b:?}")));
            }
            if prev_last.is_some_and(|p| b.first <= p) {
                return Err(ShareError::InvalidPersistedState(format!(
                    "batch {b:?} overlaps or is out of order"
                )));
            }
            prev_last = Some(b.last);
            if b.last < start {
                continue;
            }
            let first = b.first.max(start);
            if first > next && gap_start.is_none() {
                gap_start = Some(next);
            }
            next = b.last + 1;
            cache.insert(
                first,
                InFlightBatch::new(first, b.last, Record::unlocked(rec_state, b.delivery_count)),
            );
        }
        let end_offset = cache.values().next_back().map_or(start, |b| b.last);
        let mut partition = SharePartition {
            cfg,
            state_epoch: state.state_epoch,
            leader_epoch: state.leader_epoch,
            start_offset: start,
            end_offset,
            cache,
            gap_window: gap_start.map(|gap_start| GapWindow {
                end_offset,
                gap_start,
            }),
            archived_total: 0,
            redelivered_total: 0,
        };
        partition.advance_start();
        Ok(partition)
    }

    /// The state epoch the share partition was loaded in (its writes carry it).
    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    /// The share-partition start offset (SPSO).
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// The share-partition end offset (SPEO): the last offset acquired, or SPSO when nothing is
    /// cached.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The configuration in force.
    pub fn config(&self) -> &SharePartitionConfig {
        &self.cfg
    }

    /// Puts `cfg` in force from now on (the group's configs changed; Kafka reads them at each
    /// use): a new lock duration applies to the next acquisition, a new delivery-count limit to
    /// the next release or lock expiry, a new in-flight window to the next fetch. Locks already
    /// held keep their deadlines.
    pub fn set_config(&mut self, cfg: SharePartitionConfig) {
        self.cfg = normalized(cfg);
    }

    /// Where the next log read starts: the first AVAILABLE cached record or acquirable gap-window
    /// hole, else SPEO + 1 (SPSO when nothing at or above SPSO is cached).
    pub fn next_fetch_offset(&self) -> i64 {
        let mut gap = self.active_gap_start();
        for batch in self.cache.values() {
            if batch.last < self.start_offset {
                continue;
            }
            if let Some(g) = gap {
                if batch.first > g {
                    return g.max(self.start_offset);
                }
                gap = Some(g.max(batch.last + 1));
            }
            if let Some(run) = batch
                .runs
                .iter()
                .find(|r| r.last >= self.start_offset && r.rec.state == RecordState::Available)
            {
                return run.first.max(self.start_offset);
            }
        }
        if self.nothing_in_flight() {
            self.start_offset
        } else {
            self.end_offset + 1
        }
    }

    /// Whether a fetch could acquire anything: an AVAILABLE record (or gap hole) lies inside the
    /// window, or the window is below `max_record_locks` (Kafka's `canAcquireRecords`).
    pub fn can_acquire(&self) -> bool {
        if self.next_fetch_offset() != self.end_offset + 1 {
            return true;
        }
        self.in_flight_span() < i64::from(self.cfg.max_record_locks)
    }

    /// Acquires records for `member` from the log batches the leader just read starting at
    /// `read_offset` (the [`Self::next_fetch_offset`] it read from; Kafka's
    /// `SharePartition.acquire` takes the same fetch offset): new offsets become ACQUIRED with
    /// delivery count 1; cached AVAILABLE records are re-acquired with their count plus one;
    /// nothing below SPSO is acquired; cached AVAILABLE records between `read_offset` and the
    /// first batch, which the log skipped over (compaction), are archived. A record released
    /// below `read_offset` while the leader read (another member's acknowledgement) is not in
    /// that range: it stays AVAILABLE for the next fetch. Records of aborted transactions
    /// (`aborted`, read_committed) are archived at once and left out of the result.
    /// `max_records` is capped by the in-flight window and, in batch-optimized mode, rounded up
    /// to a log batch end; new ranges longer than `batch_size` are split at log batch boundaries
    /// (`batch_size` 0: no split). Nothing here is persisted.
    #[allow(clippy::too_many_arguments)] // Kafka's acquire takes the same inputs; a struct would only rename them.
    pub fn acquire(
        &mut self,
        member: &str,
        read_offset: i64,
        log_batches: &[LogBatch],
        max_records: u32,
        batch_size: u32,
        mode: AcquireMode,
        aborted: &[(i64, i64)],
        now_ms: i64,
    ) -> Result<Vec<AcquiredRange>, ShareError> {
        check_log_batches(log_batches)?;
        let (Some(first_batch), Some(last_batch)) = (log_batches.first(), log_batches.last())
        else {
            return Ok(Vec::new());
        };
        if max_records == 0 || last_batch.last < self.start_offset {
            return Ok(Vec::new());
        }
        let fetch_offset = self.next_fetch_offset();
        let (last_to_acquire, max) =
            self.last_offset_and_max_records(fetch_offset, i64::from(max_records), last_batch.last);
        if max <= 0 {
            return Ok(Vec::new());
        }
        let log_base = first_batch.first;
        self.archive_stale(read_offset, log_base);

        let mut acq = Acquisition {
            member: Arc::from(member),
            deadline_ms: now_ms.saturating_add(self.cfg.record_lock_duration_ms),
            log: log_batches,
            mode,
            batch_size: if batch_size == 0 {
                i64::MAX
            } else {
                i64::from(batch_size)
            },
            result: Vec::new(),
            count: 0,
            max,
        };
        self.acquire_range(&mut acq, log_base, last_to_acquire);
        if let Some(last) = acq.result.last() {
            self.move_gap_start(last.last + 1);
        }
        let result = self.archive_aborted(acq.result, aborted);
        self.advance_start();
        Ok(result)
    }

    /// Applies one member's acknowledgements (Kafka's `SharePartition.acknowledge` and the
    /// front end's batch validation), all or nothing. Batches wholly below SPSO are skipped.
    /// Errors: a malformed batch, or offsets past the cached records → `InvalidRequest`;
    /// offsets not found, not ACQUIRED, acquired by another member, whose lock expired at
    /// `now_ms`, or RENEW while renewing is disabled → `InvalidRecordState`. ACCEPT →
    /// ACKNOWLEDGED, RELEASE → AVAILABLE (ARCHIVED at the delivery-count limit), REJECT and GAP →
    /// ARCHIVED, RENEW → the lock restarts at `now_ms` (nothing persisted).
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        is_renew: bool,
        now_ms: i64,
    ) -> Result<StateChange, ShareError> {
        validate_ack_batches(batches, is_renew)?;
        let start_before = self.start_offset;
        let mut undo: Vec<(i64, InFlightBatch)> = Vec::new();
        let mut changes: Vec<StateBatch> = Vec::new();
        let mut archived = 0u64;
        for batch in batches {
            if let Err(e) = self.acknowledge_batch(
                member,
                batch,
                now_ms,
                &mut undo,
                &mut changes,
                &mut archived,
            ) {
                for (key, original) in undo.into_iter().rev() {
                    self.cache.insert(key, original);
                }
                return Err(e);
            }
        }
        for (key, _) in &undo {
            if let Some(b) = self.cache.get_mut(key) {
                b.coalesce();
            }
        }
        self.archived_total += archived;
        self.advance_start();
        Ok(self.state_change(changes, start_before))
    }

    /// Ends every acquisition lock that expired at `now_ms` (Kafka's acquisition lock timeout):
    /// the records return to AVAILABLE with their delivery count unchanged, or are ARCHIVED at
    /// the delivery-count limit or below SPSO.
    pub fn expire_locks(&mut self, now_ms: i64) -> StateChange {
        self.release_where(|rec| !rec.is_locked(now_ms))
    }

    /// Releases everything `member` holds (share session closed, connection gone) as lock expiry
    /// does, together with any other lock already expired at `now_ms`.
    pub fn release_member(&mut self, member: &str, now_ms: i64) -> StateChange {
        self.release_where(|rec| rec.is_owned_by(member) || !rec.is_locked(now_ms))
    }

    /// The earliest acquisition-lock deadline (ms), when anything is acquired.
    pub fn next_lock_deadline(&self) -> Option<i64> {
        self.cache
            .values()
            .flat_map(|b| &b.runs)
            .filter(|r| r.rec.state == RecordState::Acquired)
            .filter_map(|r| r.rec.lock_deadline_ms)
            .min()
    }

    /// The log start offset moved past SPSO (retention, DeleteRecords; a fetch got
    /// OFFSET_OUT_OF_RANGE): SPSO jumps to it and AVAILABLE records below it are archived.
    /// ACQUIRED ones below it are archived when released or timed out. Kafka persists this
    /// lazily, with the next write; the change carries no batches.
    pub fn archive_below(&mut self, log_start_offset: i64) -> StateChange {
        let start_before = self.start_offset;
        if log_start_offset <= self.start_offset {
            return self.state_change(Vec::new(), start_before);
        }
        let mut archived = 0u64;
        let keys: Vec<i64> = self
            .cache
            .range(..log_start_offset)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some(batch) = self.cache.get_mut(&key) {
                for run in batch.range_mut(i64::MIN, log_start_offset - 1) {
                    if run.rec.state == RecordState::Available {
                        run.rec = Record::unlocked(RecordState::Archived, run.rec.delivery_count);
                        archived += run.len().unsigned_abs();
                    }
                }
                batch.coalesce();
            }
        }
        self.archived_total += archived;
        self.start_offset = log_start_offset;
        self.end_offset = self.end_offset.max(log_start_offset);
        self.advance_start();
        self.state_change(Vec::new(), start_before)
    }

    /// What the share coordinator holds for this partition now: SPSO and the non-ACQUIRED
    /// ranges at or above it. A record that is ACQUIRED again after being released or timing out
    /// (delivery count n ≥ 2) was last written as AVAILABLE with count n − 1, which is what the
    /// snapshot says; a record acquired for the first time was never written and is left out.
    pub fn persisted_state(&self) -> PersistedState {
        let mut batches = Vec::new();
        for run in self.cache.values().flat_map(|b| &b.runs) {
            let (state, count) = match run.rec.state {
                RecordState::Acquired if run.rec.delivery_count >= 2 => {
                    (RecordState::Available, run.rec.delivery_count - 1)
                }
                RecordState::Acquired => continue,
                s => (s, run.rec.delivery_count),
            };
            batches.push(StateBatch {
                first: run.first,
                last: run.last,
                state: state.id(),
                delivery_count: count,
            });
        }
        PersistedState {
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: self.start_offset,
            delivery_complete_count: self.delivery_complete_count(),
            batches: combine(&[], &batches, self.start_offset),
        }
    }

    /// Every run of records delivered at least once, with its delivery count, whatever its state
    /// now: what a reload after a failed write carries over
    /// ([`PersistedState::carry_delivery_counts`]).
    pub fn delivered_ranges(&self) -> Vec<DeliveredRange> {
        let mut out: Vec<DeliveredRange> = Vec::new();
        for run in self.cache.values().flat_map(|b| &b.runs) {
            let count = run.rec.delivery_count;
            if count <= 0 {
                continue;
            }
            match out.last_mut() {
                Some(prev) if prev.delivery_count == count && prev.last + 1 == run.first => {
                    prev.last = run.last;
                }
                _ => out.push(DeliveredRange {
                    first: run.first,
                    last: run.last,
                    delivery_count: count,
                }),
            }
        }
        out
    }

    /// Counters for metrics.
    pub fn metrics(&self) -> SharePartitionMetrics {
        let acquired = self
            .cache
            .values()
            .flat_map(|b| &b.runs)
            .filter(|r| r.rec.state == RecordState::Acquired)
            .map(|r| r.len().unsigned_abs())
            .sum();
        SharePartitionMetrics {
            in_flight_records: self.in_flight_span().unsigned_abs(),
            acquired_records: acquired,
            archived_records_total: self.archived_total,
            redelivered_records_total: self.redelivered_total,
        }
    }

    /// Terminal records at or above SPSO.
    pub fn delivery_complete_count(&self) -> i32 {
        let n: i64 = self
            .cache
            .values()
            .flat_map(|b| &b.runs)
            .filter(|r| r.rec.state.is_terminal() && r.last >= self.start_offset)
            .map(|r| r.last - r.first.max(self.start_offset) + 1)
            .sum();
        i32::try_from(n).unwrap_or(i32::MAX)
    }

    // ---- acquisition ----

    /// Kafka's `lastOffsetAndMaxRecordsToAcquire`: caps the records to acquire by the room left
    /// in the in-flight window; when the window is full but the fetch re-acquires inside it,
    /// acquisition stops at SPEO.
    fn last_offset_and_max_records(
        &self,
        fetch_offset: i64,
        max_records: i64,
        last_offset: i64,
    ) -> (i64, i64) {
        let room = i64::from(self.cfg.max_record_locks) - self.in_flight_span();
        let max = max_records.min(room);
        if max > 0 {
            return (last_offset, max);
        }
        if fetch_offset <= self.end_offset {
            (
                last_offset.min(self.end_offset),
                max_records.min(self.end_offset - fetch_offset + 1),
            )
        } else {
            (last_offset, 0)
        }
    }

    /// Archives cached AVAILABLE records between the offset the log was read from and the first
    /// log batch: the log no longer has them (compaction). Gap-window holes there are gone from
    /// the log too; holes below `read_offset` were not looked for, and stay.
    fn archive_stale(&mut self, read_offset: i64, log_base: i64) {
        if read_offset >= log_base {
            return;
        }
        if let Some(w) = self.gap_window.as_mut() {
            if w.gap_start >= read_offset {
                w.gap_start = w.gap_start.max(log_base);
            }
        }
        let keys: Vec<i64> = self.cache.range(..log_base).map(|(k, _)| *k).collect();
        let mut archived = 0u64;
        for key in keys {
            if let Some(batch) = self.cache.get_mut(&key) {
                for run in batch.range_mut(read_offset, log_base - 1) {
                    if run.rec.state == RecordState::Available {
                        run.rec = Record::unlocked(RecordState::Archived, run.rec.delivery_count);
                        archived += run.len().unsigned_abs();
                    }
                }
                batch.coalesce();
            }
        }
        self.archived_total += archived;
    }

    /// The walk over the cached batches that overlap `[log_base, last_to_acquire]` (Kafka's
    /// acquire loop): gap-window holes and the offsets past the cache are acquired as new
    /// records, cached batches as whole batches or record by record.
    fn acquire_range(&mut self, acq: &mut Acquisition<'_>, log_base: i64, last_to_acquire: i64) {
        // A log batch that starts inside a cached batch is handled on the cached batch's bounds.
        let mut base = log_base;
        match self.cache.range(..=log_base).next_back() {
            Some((&key, b)) if b.last >= log_base => base = key,
            None if base < self.start_offset => base = self.start_offset,
            _ => {}
        }
        if base.min(log_base) > last_to_acquire {
            // The window is full and the log skipped past SPEO: nothing inside it to re-acquire.
            return;
        }
        let keys: Vec<i64> = self
            .cache
            .range(base.min(log_base)..=last_to_acquire)
            .map(|(k, _)| *k)
            .collect();
        let Some(&last_key) = keys.last() else {
            self.acquire_new(acq, base, last_to_acquire);
            return;
        };
        let last_cached = self
            .cache
            .get(&last_key)
            .map_or(last_to_acquire, |b| b.last);
        let mut hole_start = base;
        for key in keys {
            if acq.count >= acq.max {
                break;
            }
            let Some(batch) = self.cache.get(&key) else {
                continue;
            };
            let (first, last) = (batch.first, batch.last);
            if self.active_gap_start().is_some() {
                if hole_start < first {
                    self.acquire_new(acq, hole_start, first - 1);
                }
                hole_start = last + 1;
                if acq.count >= acq.max {
                    break;
                }
            }
            let Some(batch) = self.cache.get(&key) else {
                continue;
            };
            let full_match = first >= log_base && last <= last_to_acquire;
            let record_limit_subset =
                acq.mode == AcquireMode::RecordLimit && batch.len() > acq.max - acq.count;
            let throttle = self.should_throttle(batch, log_base, last_to_acquire);
            if throttle && acq.count > 0 {
                // A batch being throttled is delivered on its own, in a later fetch.
                acq.max = 0;
                break;
            }
            let whole = batch.uniform_record().cloned();
            match whole {
                Some(rec) if full_match && !record_limit_subset && !throttle => {
                    if rec.state == RecordState::Available {
                        self.acquire_whole(acq, key, rec.delivery_count);
                    }
                }
                Some(rec) if rec.state != RecordState::Available => {}
                _ => {
                    let got = self.acquire_subset(acq, key, log_base, last_to_acquire);
                    if throttle && got > 0 {
                        acq.max = 0;
                        break;
                    }
                }
            }
        }
        if acq.count < acq.max && last_cached < last_to_acquire {
            self.acquire_new(acq, last_cached + 1, last_to_acquire);
        }
    }

    /// Kafka's `shouldThrottleRecordsDelivery`: an AVAILABLE batch (or any AVAILABLE record of
    /// a split batch within the request) that reached `max(2, ceil(limit / 2))` deliveries.
    fn should_throttle(&self, batch: &InFlightBatch, req_first: i64, req_last: i64) -> bool {
        let limit = self.throttle_limit();
        batch
            .runs
            .iter()
            .filter(|r| {
                r.last >= req_first && r.first <= req_last && r.rec.state == RecordState::Available
            })
            .any(|r| r.rec.delivery_count >= limit)
    }

    fn throttle_limit(&self) -> i16 {
        let limit = self.cfg.delivery_count_limit;
        (limit / 2 + limit % 2).max(2)
    }

    /// Re-acquires a whole AVAILABLE batch (one `AcquiredRecords` entry).
    fn acquire_whole(&mut self, acq: &mut Acquisition<'_>, key: i64, count: i16) {
        let Some(batch) = self.cache.get_mut(&key) else {
            return;
        };
        let new_count = count.saturating_add(1);
        let (first, last) = (batch.first, batch.last);
        for run in batch.range_mut(first, last) {
            run.rec = Record::acquired(&acq.member, new_count, acq.deadline_ms);
        }
        acq.result.push(AcquiredRange {
            first,
            last,
            delivery_count: new_count,
        });
        acq.count += batch.len();
        if count >= 1 {
            self.redelivered_total += batch.len().unsigned_abs();
        }
    }

    /// Re-acquires the AVAILABLE records of a split, partly requested or throttled batch record
    /// by record (Kafka's `acquireSubsetBatchRecords`): a record on its last delivery goes alone;
    /// once a record reached the throttle limit, at most `batch length >> (count − throttle + 1)`
    /// records are taken; in record-limit mode at most the records left. Contiguous records with
    /// equal counts form one entry. Returns the records acquired.
    fn acquire_subset(
        &mut self,
        acq: &mut Acquisition<'_>,
        key: i64,
        req_first: i64,
        req_last: i64,
    ) -> i64 {
        let limit = self.cfg.delivery_count_limit;
        let throttle_limit = self.throttle_limit();
        let remaining = acq.max - acq.count;
        let Some(batch) = self.cache.get_mut(&key) else {
            return 0;
        };
        let batch_len = batch.len();
        let mut got: i64 = 0;
        let mut throttle_max: Option<i64> = None;
        let mut local: Vec<AcquiredRange> = Vec::new();
        let mut redelivered = 0i64;
        let mut pos = req_first.max(batch.first);
        while pos <= req_last.min(batch.last) {
            let Some(run) = batch.range_mut(pos, req_last).first().cloned() else {
                break;
            };
            pos = run.last + 1;
            if run.rec.state != RecordState::Available {
                continue;
            }
            let count = run.rec.delivery_count;
            if limit > 2 && count == limit - 1 && got > 0 {
                break;
            }
            if count >= throttle_limit && throttle_max.is_none() {
                let shift = u32::try_from(count - throttle_limit + 1)
                    .unwrap_or(0)
                    .min(63);
                throttle_max = Some((batch_len >> shift).max(1));
            }
            let mut n = run.len();
            let last_attempt = limit > 2 && count.saturating_add(1) == limit;
            if last_attempt {
                n = 1;
            }
            if acq.mode == AcquireMode::RecordLimit {
                n = n.min(remaining - got);
            }
            if let Some(t) = throttle_max.filter(|t| *t > got) {
                n = n.min(t - got);
            }
            if n <= 0 {
                break;
            }
            let new_count = count.saturating_add(1);
            for r in batch.range_mut(run.first, run.first + n - 1) {
                r.rec = Record::acquired(&acq.member, new_count, acq.deadline_ms);
            }
            push_merged(
                &mut local,
                AcquiredRange {
                    first: run.first,
                    last: run.first + n - 1,
                    delivery_count: new_count,
                },
            );
            got += n;
            if count >= 1 {
                redelivered += n;
            }
            let limit_reached = acq.mode == AcquireMode::RecordLimit && got == remaining;
            if last_attempt || limit_reached || throttle_max == Some(got) {
                break;
            }
            pos = run.first + n;
        }
        batch.coalesce();
        acq.result.extend(local);
        acq.count += got;
        self.redelivered_total += redelivered.unsigned_abs();
        got
    }

    /// Acquires the uncached offsets `[first, last]` as new records (Kafka's
    /// `acquireNewBatchRecords` and `createBatches`).
    fn acquire_new(&mut self, acq: &mut Acquisition<'_>, first: i64, last: i64) {
        let mut first = first.max(self.start_offset);
        if self.cache.is_empty() {
            first = first.max(self.end_offset);
        }
        let remaining = acq.max - acq.count;
        if first > last || remaining <= 0 {
            return;
        }
        let mut last_acquired = last;
        if remaining < last - first + 1 {
            last_acquired = log_batch_end(acq.log, first.saturating_add(remaining - 1)).min(last);
        }
        let taken = if acq.mode == AcquireMode::RecordLimit {
            let acquired_last = last_acquired.min(first.saturating_add(remaining - 1));
            let mut batch = InFlightBatch::new(
                first,
                last_acquired,
                Record::unlocked(RecordState::Available, 0),
            );
            for r in batch.range_mut(first, acquired_last) {
                r.rec = Record::acquired(&acq.member, 1, acq.deadline_ms);
            }
            self.cache.insert(first, batch);
            acq.result.push(AcquiredRange {
                first,
                last: acquired_last,
                delivery_count: 1,
            });
            acquired_last - first + 1
        } else {
            for (piece_first, piece_last) in
                split_by_batch_size(acq.log, first, last_acquired, acq.batch_size)
            {
                self.cache.insert(
                    piece_first,
                    InFlightBatch::new(
                        piece_first,
                        piece_last,
                        Record::acquired(&acq.member, 1, acq.deadline_ms),
                    ),
                );
                acq.result.push(AcquiredRange {
                    first: piece_first,
                    last: piece_last,
                    delivery_count: 1,
                });
            }
            last_acquired - first + 1
        };
        if self.cache.keys().next() == Some(&first) {
            self.start_offset = self.start_offset.max(first);
        }
        // SPEO only moves forward: a gap-window hole lies below it.
        self.end_offset = self.end_offset.max(last_acquired);
        acq.count += taken;
        self.move_gap_start(first + taken);
    }

    /// Archives the acquired records of aborted transactions and removes them from `acquired`.
    fn archive_aborted(
        &mut self,
        acquired: Vec<AcquiredRange>,
        aborted: &[(i64, i64)],
    ) -> Vec<AcquiredRange> {
        if aborted.is_empty() {
            return acquired;
        }
        let mut out = Vec::with_capacity(acquired.len());
        for range in acquired {
            let mut pos = range.first;
            let mut overlaps: Vec<(i64, i64)> = aborted
                .iter()
                .filter(|(f, l)| *f <= range.last && *l >= range.first && f <= l)
                .map(|(f, l)| ((*f).max(range.first), (*l).min(range.last)))
                .collect();
            overlaps.sort_unstable();
            for (f, l) in overlaps {
                if l < pos {
                    continue;
                }
                let f = f.max(pos);
                if f > pos {
                    out.push(AcquiredRange {
                        first: pos,
                        last: f - 1,
                        ..range
                    });
                }
                self.archive_acquired(f, l);
                pos = l + 1;
            }
            if pos <= range.last {
                out.push(AcquiredRange {
                    first: pos,
                    ..range
                });
            }
        }
        out
    }

    /// Archives ACQUIRED records in `[first, last]` (aborted transactions).
    fn archive_acquired(&mut self, first: i64, last: i64) {
        let keys: Vec<i64> = self.keys_overlapping(first, last);
        let mut archived = 0u64;
        for key in keys {
            if let Some(batch) = self.cache.get_mut(&key) {
                for run in batch.range_mut(first, last) {
                    if run.rec.state == RecordState::Acquired {
                        run.rec = Record::unlocked(RecordState::Archived, run.rec.delivery_count);
                        archived += run.len().unsigned_abs();
                    }
                }
                batch.coalesce();
            }
        }
        self.archived_total += archived;
    }

    // ---- acknowledgement ----

    /// One acknowledgement batch (Kafka's `fetchSubMapForAcknowledgementBatch` and
    /// `acknowledgeBatchRecords`). Every batch it changes is saved in `undo` first.
    fn acknowledge_batch(
        &mut self,
        member: &str,
        ack: &AckBatch,
        now_ms: i64,
        undo: &mut Vec<(i64, InFlightBatch)>,
        changes: &mut Vec<StateBatch>,
        archived: &mut u64,
    ) -> Result<(), ShareError> {
        if ack.last < self.start_offset {
            return Ok(());
        }
        let floor = match self.cache.range(..=ack.first).next_back() {
            Some((&k, _)) => k,
            None if ack.first < self.start_offset => {
                match self.cache.range(..=self.start_offset).next_back() {
                    Some((&k, _)) => k,
                    None => return Err(record_not_found()),
                }
            }
            None => return Err(record_not_found()),
        };
        let keys: Vec<i64> = self
            .cache
            .range(floor..=ack.last)
            .map(|(k, _)| *k)
            .collect();
        let last_cached = keys
            .last()
            .and_then(|k| self.cache.get(k))
            .map_or(i64::MIN, |b| b.last);
        if last_cached < ack.first {
            return Err(ShareError::InvalidRequest(
                "Batch record not found. The first offset in request is past acquired records."
                    .into(),
            ));
        }
        if ack.last > last_cached {
            return Err(ShareError::InvalidRequest(
                "Batch record not found. The last offset in request is past acquired records."
                    .into(),
            ));
        }
        for key in keys {
            let Some(batch) = self.cache.get(&key) else {
                continue;
            };
            if batch.last < self.start_offset {
                continue;
            }
            // Kafka checks a batch without per-offset state as a whole before anything else.
            if let Some(rec) = batch.uniform_record() {
                check_whole_batch_owner(rec, member, now_ms)?;
            }
            let lo = ack.first.max(batch.first).max(self.start_offset);
            let hi = ack.last.min(batch.last);
            if lo > hi {
                continue;
            }
            if !undo.iter().any(|(k, _)| *k == key) {
                undo.push((key, batch.clone()));
            }
            for seg in ack_segments(ack, lo, hi) {
                self.acknowledge_segment(key, seg, member, now_ms, changes, archived)?;
            }
        }
        Ok(())
    }

    /// Applies one same-type piece of an acknowledgement to the records of one cached batch.
    fn acknowledge_segment(
        &mut self,
        key: i64,
        seg: AckSegment,
        member: &str,
        now_ms: i64,
        changes: &mut Vec<StateBatch>,
        archived: &mut u64,
    ) -> Result<(), ShareError> {
        let limit = self.cfg.delivery_count_limit;
        let renew_enabled = self.cfg.renew_enabled;
        let lock_ms = self.cfg.record_lock_duration_ms;
        let Some(batch) = self.cache.get_mut(&key) else {
            return Ok(());
        };
        for run in batch.range_mut(seg.first, seg.last) {
            if !run.rec.is_locked(now_ms) {
                return Err(ShareError::InvalidRecordState(
                    "The offset cannot be acknowledged. The offset is not acquired.".into(),
                ));
            }
            if !run.rec.is_owned_by(member) {
                return Err(ShareError::InvalidRecordState(
                    "Member is not the owner of offset".into(),
                ));
            }
            let count = run.rec.delivery_count;
            let state = match seg.ack {
                AckType::Renew if !renew_enabled => {
                    return Err(ShareError::InvalidRecordState(
                        "The acquisition lock cannot be renewed: share.renew.acknowledge.enable is false.".into(),
                    ));
                }
                AckType::Renew => {
                    run.rec.lock_deadline_ms = Some(now_ms.saturating_add(lock_ms));
                    continue;
                }
                AckType::Accept => RecordState::Acknowledged,
                AckType::Release if count >= limit => RecordState::Archived,
                AckType::Release => RecordState::Available,
                AckType::Reject | AckType::Gap => RecordState::Archived,
            };
            run.rec = Record::unlocked(state, count);
            if state == RecordState::Archived {
                *archived += run.len().unsigned_abs();
            }
            changes.push(StateBatch {
                first: run.first,
                last: run.last,
                state: state.id(),
                delivery_count: count,
            });
        }
        Ok(())
    }

    // ---- release, lock expiry ----

    /// Releases every ACQUIRED record whose record matches `releases`: AVAILABLE with the count
    /// unchanged, or ARCHIVED at the delivery-count limit or below SPSO.
    fn release_where(&mut self, releases: impl Fn(&Record) -> bool) -> StateChange {
        let start_before = self.start_offset;
        let start = self.start_offset;
        let limit = self.cfg.delivery_count_limit;
        let mut changes = Vec::new();
        let mut archived = 0u64;
        for batch in self.cache.values_mut() {
            let hit = batch
                .runs
                .iter()
                .any(|r| r.rec.state == RecordState::Acquired && releases(&r.rec));
            if !hit {
                continue;
            }
            // Records below SPSO are archived, those above released: split at SPSO.
            if batch.first < start && batch.last >= start {
                let _ = batch.range_mut(start, batch.last);
            }
            for run in &mut batch.runs {
                if run.rec.state != RecordState::Acquired || !releases(&run.rec) {
                    continue;
                }
                let count = run.rec.delivery_count;
                let state = if run.last < start || count >= limit {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
                run.rec = Record::unlocked(state, count);
                if state == RecordState::Archived {
                    archived += run.len().unsigned_abs();
                }
                changes.push(StateBatch {
                    first: run.first,
                    last: run.last,
                    state: state.id(),
                    delivery_count: count,
                });
            }
            batch.coalesce();
        }
        self.archived_total += archived;
        self.advance_start();
        self.state_change(changes, start_before)
    }

    // ---- offsets ----

    /// Moves SPSO across the contiguous prefix of terminal records (Kafka's
    /// `maybeUpdateCachedStateAndOffsets`): a hole the log skipped is passed over, an acquirable
    /// gap-window hole or a non-terminal record stops it. Fully terminal batches below SPSO are
    /// dropped; when nothing at or above SPSO remains cached, SPEO = SPSO.
    fn advance_start(&mut self) {
        let gap = self.active_gap_start();
        let mut pos = self.start_offset;
        'batches: for batch in self.cache.values() {
            if batch.last < pos {
                continue;
            }
            if batch.first > pos {
                if let Some(g) = gap.filter(|g| *g < batch.first) {
                    pos = pos.max(g);
                    break;
                }
                pos = batch.first;
            }
            for run in &batch.runs {
                if run.last < pos {
                    continue;
                }
                if !run.rec.state.is_terminal() {
                    break 'batches;
                }
                pos = run.last + 1;
            }
        }
        self.start_offset = self.start_offset.max(pos);
        let start = self.start_offset;
        self.cache
            .retain(|_, b| b.last >= start || !b.is_terminal());
        if self.nothing_in_flight() {
            self.end_offset = self.end_offset.max(start);
            if self.cache.is_empty() {
                self.end_offset = start;
            }
        }
        if let Some(w) = self.gap_window.as_mut() {
            w.gap_start = w.gap_start.max(start);
        }
    }

    /// Nothing at or above SPSO is cached.
    fn nothing_in_flight(&self) -> bool {
        match self.cache.values().next_back() {
            Some(b) => b.last < self.start_offset,
            None => true,
        }
    }

    /// SPEO − SPSO + 1 while anything at or above SPSO is cached.
    fn in_flight_span(&self) -> i64 {
        if self.nothing_in_flight() {
            0
        } else {
            self.end_offset - self.start_offset + 1
        }
    }

    /// The first acquirable hole of an active gap window.
    fn active_gap_start(&self) -> Option<i64> {
        self.gap_window
            .filter(|w| w.end_offset == self.end_offset && w.gap_start <= w.end_offset)
            .map(|w| w.gap_start)
    }

    /// Records that holes below `offset` were fetched; drops a window SPEO has moved past.
    fn move_gap_start(&mut self, offset: i64) {
        if let Some(w) = self.gap_window {
            if w.end_offset == self.end_offset && offset <= w.end_offset {
                self.gap_window = Some(GapWindow {
                    gap_start: w.gap_start.max(offset),
                    ..w
                });
            } else {
                self.gap_window = None;
            }
        }
    }

    fn keys_overlapping(&self, first: i64, last: i64) -> Vec<i64> {
        let floor = match self.cache.range(..=first).next_back() {
            Some((&k, b)) if b.last >= first => k,
            _ => first,
        };
        self.cache.range(floor..=last).map(|(k, _)| *k).collect()
    }

    fn state_change(&self, mut batches: Vec<StateBatch>, start_before: i64) -> StateChange {
        batches.sort_unstable_by_key(|b| b.first);
        let mut coalesced: Vec<StateBatch> = Vec::with_capacity(batches.len());
        for b in batches {
            match coalesced.last_mut() {
                Some(p)
                    if p.state == b.state
                        && p.delivery_count == b.delivery_count
                        && p.last + 1 == b.first =>
                {
                    p.last = b.last;
                }
                _ => coalesced.push(b),
            }
        }
        StateChange {
            batches: coalesced,
            start_offset: self.start_offset,
            start_offset_moved: self.start_offset != start_before,
            delivery_complete_count: self.delivery_complete_count(),
        }
    }
}

fn record_not_found() -> ShareError {
    ShareError::InvalidRecordState(
        "Batch record not found. The request batch offsets are not found in the cache.".into(),
    )
}

/// Kafka's whole-batch ownership check: a batch no member holds (or whose lock expired) is not
/// acquired; one another member holds is not the requester's.
fn check_whole_batch_owner(rec: &Record, member: &str, now_ms: i64) -> Result<(), ShareError> {
    if !rec.is_locked(now_ms) {
        return Err(ShareError::InvalidRecordState(
            "The batch cannot be acknowledged. The batch is not in the acquired state.".into(),
        ));
    }
    if !rec.is_owned_by(member) {
        return Err(ShareError::InvalidRecordState(
            "Member is not the owner of batch record".into(),
        ));
    }
    Ok(())
}

/// The front end's checks of acknowledgement batches (Kafka's `validateAcknowledgementBatches`),
/// all INVALID_REQUEST: first > last; a batch starting before the previous batch's last offset
/// (Kafka lets an overlap of exactly one offset through here); no types; a type list neither one
/// long nor one per offset; RENEW without `IsRenewAck`.
fn validate_ack_batches(batches: &[AckBatch], is_renew: bool) -> Result<(), ShareError> {
    let mut prev_last: Option<i64> = None;
    for b in batches {
        if b.first > b.last {
            return Err(ShareError::InvalidRequest(format!(
                "First offset {} is greater than last offset {}",
                b.first, b.last
            )));
        }
        if prev_last.is_some_and(|p| b.first < p) {
            return Err(ShareError::InvalidRequest(
                "Acknowledgement batches are not in ascending order".into(),
            ));
        }
        prev_last = Some(b.last);
        if b.types.is_empty() {
            return Err(ShareError::InvalidRequest(
                "Acknowledge types cannot be empty".into(),
            ));
        }
        let span = i128::from(b.last) - i128::from(b.first) + 1;
        let n = b.types.len();
        if n != 1 && i128::try_from(n).ok() != Some(span) {
            return Err(ShareError::InvalidRequest(format!(
                "Acknowledge types of size {n} do not match the batch of {span} offsets"
            )));
        }
        if !is_renew && b.types.contains(&AckType::Renew) {
            return Err(ShareError::InvalidRequest(
                "RENEW acknowledgement type requires IsRenewAck".into(),
            ));
        }
    }
    Ok(())
}

/// The same-type pieces of `ack` within `[lo, hi]`.
fn ack_segments(ack: &AckBatch, lo: i64, hi: i64) -> Vec<AckSegment> {
    if let [only] = ack.types.as_slice() {
        return vec![AckSegment {
            first: lo,
            last: hi,
            ack: *only,
        }];
    }
    let mut segs: Vec<AckSegment> = Vec::new();
    for offset in lo..=hi {
        let idx = usize::try_from(offset - ack.first).unwrap_or(usize::MAX);
        let Some(&t) = ack.types.get(idx) else { break };
        match segs.last_mut() {
            Some(s) if s.ack == t => s.last = offset,
            _ => segs.push(AckSegment {
                first: offset,
                last: offset,
                ack: t,
            }),
        }
    }
    segs
}

/// Log batches must be ascending, non-overlapping, each first ≤ last < i64::MAX.
fn check_log_batches(log: &[LogBatch]) -> Result<(), ShareError> {
    let mut prev: Option<i64> = None;
    for b in log {
        if b.first > b.last
            || b.first < 0
            || b.last == i64::MAX
            || prev.is_some_and(|p| b.first <= p)
        {
            return Err(ShareError::InvalidLogBatches(format!(
                "{b:?} after {prev:?}"
            )));
        }
        prev = Some(b.last);
    }
    Ok(())
}

/// The last offset of the first log batch ending at or after `offset` (Kafka's
/// `lastOffsetFromBatchWithRequestOffset`); `offset` itself past the last batch.
fn log_batch_end(log: &[LogBatch], offset: i64) -> i64 {
    log.iter()
        .find(|b| b.last >= offset)
        .map_or(offset, |b| b.last)
}

/// Kafka's `createBatches` in batch-optimized mode: `[first, last]` cut at log batch starts so
/// that each piece holds at least `batch_size` records.
fn split_by_batch_size(
    log: &[LogBatch],
    first: i64,
    last: i64,
    batch_size: i64,
) -> Vec<(i64, i64)> {
    let mut pieces = Vec::new();
    let mut current = first;
    if last - first + 1 > batch_size {
        for b in log {
            if b.first > last {
                break;
            }
            if b.first > current && b.first - current >= batch_size {
                pieces.push((current, b.first - 1));
                current = b.first;
            }
        }
    }
    pieces.push((current, last));
    pieces
}

/// Appends `r`, merged into the previous entry when contiguous with an equal delivery count
/// (Kafka's `ShareFetchUtils.accumulateAcquiredRecords`).
fn push_merged(out: &mut Vec<AcquiredRange>, r: AcquiredRange) {
    match out.last_mut() {
        Some(p) if p.last + 1 == r.first && p.delivery_count == r.delivery_count => p.last = r.last,
        _ => out.push(r),
    }
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
