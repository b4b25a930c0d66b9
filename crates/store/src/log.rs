//! `PartitionLog`: the log of one topic-partition (Kafka's `UnifiedLog`/`LocalLog`): an ordered
//! set of segments, the log start / end offsets, high watermark, durable offset, producer state
//! and leader-epoch cache.
//!
//! Data flow: the front end calls `append` with producer batches (validated, offsets assigned,
//! written with `pwrite` to the active segment) and `read` for Fetch (whole stored batches).
//!
//! Invariants: `log_start_offset <= high_watermark <= log_end_offset`; `durable_offset <=
//! log_end_offset`; offsets in the log strictly increase; no append is partially visible (readers
//! see only `[0, segment.size)`, and `size` moves after the write succeeded; a failed write is cut
//! back before the lock is released).
//!
//! Locking: one `parking_lot::Mutex<LogInner>` per partition around the segment state. `read`
//! takes it only to find the segment, position and an `Arc<File>`, then `pread`s outside it.
//! In `Batch` mode no lock is held across an fsync (the flusher syncs outside it); in `Always`
//! mode the append holds it across its own fdatasync. Offsets that readers poll are atomics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::batch::{self, BatchError, BatchHeader};
use crate::checkpoint::{self, LEADER_EPOCH_FILE, SNAPSHOT_SUFFIX};
use crate::config::{FlushPolicy, LogConfig, TimestampType, TopicPartition};
use crate::error::{AppendError, ReadError, StoreError};
use crate::leader_epoch::LeaderEpochCache;
use crate::limits::{
    BATCHES_PER_APPEND_MAX, LOG_OVERHEAD_BYTES, PRODUCER_SNAPSHOTS_KEPT, SEGMENT_BYTES_MAX,
    SEGMENT_RELATIVE_OFFSET_MAX,
};
use crate::producer_state::{Check, ProducerStateEntry, ProducerStates};
use crate::records;
use crate::segment::{self, ChunkReader, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::StoreShared;

/// Result of a successful append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended (or of the original, for a duplicate).
    pub base_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    /// Append time for LogAppendTime topics, else -1.
    pub log_append_time_ms: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
    /// Idempotent duplicate: nothing appended, offsets are the original ones.
    pub duplicate: bool,
}

/// Result of a read.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, starting with the batch that contains the fetch offset.
    pub records: Bytes,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// Log end offset at the time of the read.
    pub log_end_offset: i64,
}

/// Where a read stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadUpperBound {
    /// Consumers: up to the high watermark.
    HighWatermark,
    /// Replicas: up to the log end offset.
    LogEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Offline,
    ShutDown,
    Deleted,
}

/// What `wait_durable` watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Durable {
    pub(crate) offset: i64,
    pub(crate) failure: Option<Failure>,
}

/// Work deferred to the flusher.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Files of sealed segments to fdatasync.
    pub(crate) sync_paths: Vec<PathBuf>,
    /// The partition directory needs an fsync (new or removed files).
    pub(crate) sync_dir: bool,
    /// Producer snapshots to write: (offset, payload).
    pub(crate) snapshots: Vec<(i64, Vec<u8>)>,
    /// The active segment must be synced even under `Never` (flush.messages / flush.ms / recovery).
    pub(crate) flush_active: bool,
    /// Leader-epoch cache entries to checkpoint (written before the recovery point passes them).
    pub(crate) epochs: Option<Vec<(i32, i64)>>,
}

/// State guarded by the partition mutex.
pub(crate) struct LogInner {
    pub(crate) segments: BTreeMap<i64, Segment>,
    pub(crate) log_end_offset: i64,
    pub(crate) producers: ProducerStates,
    pub(crate) epochs: LeaderEpochCache,
    pub(crate) pending: Pending,
    pub(crate) messages_since_flush: i64,
    pub(crate) last_flush_ms: i64,
    /// Bumped by truncation; a flush round started before it must not publish its offsets.
    pub(crate) generation: u64,
    /// Offset below which the log has been cleaned (compaction).
    pub(crate) cleaner_point: i64,
}

/// The log of one partition. `Send + Sync`; used as `Arc<PartitionLog>`.
pub struct PartitionLog {
    pub(crate) tp: TopicPartition,
    pub(crate) dir: PathBuf,
    pub(crate) shared: Arc<StoreShared>,
    me: Weak<PartitionLog>,
    pub(crate) inner: Mutex<LogInner>,
    config: RwLock<LogConfig>,
    pub(crate) log_start: AtomicI64,
    log_end: AtomicI64,
    high_watermark: AtomicI64,
    pub(crate) recovery_point: AtomicI64,
    durable: watch::Sender<Durable>,
    queued: AtomicBool,
    pub(crate) deleted: AtomicBool,
}

/// Everything needed to build a `PartitionLog` (from `create` or `recovery`).
pub(crate) struct LogParts {
    pub(crate) segments: BTreeMap<i64, Segment>,
    pub(crate) log_start_offset: i64,
    pub(crate) log_end_offset: i64,
    pub(crate) high_watermark: i64,
    pub(crate) recovery_point: i64,
    pub(crate) producers: ProducerStates,
    pub(crate) epochs: LeaderEpochCache,
    pub(crate) pending: Pending,
    pub(crate) cleaner_point: i64,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn batch_error(e: BatchError) -> AppendError {
    match e {
        BatchError::BadMagic(_) | BatchError::BadCount(_) => {
            AppendError::InvalidRecord(e.to_string())
        }
        _ => AppendError::CorruptMessage(e.to_string()),
    }
}

/// Compacted topics need a key on every record (Kafka answers INVALID_RECORD otherwise); this
/// is the one place the produce path decompresses, with the usual output limit.
fn require_keys(batch_bytes: &[u8]) -> Result<(), AppendError> {
    let (_, recs) = records::decode_records(batch_bytes)
        .map_err(|e| AppendError::CorruptMessage(format!("undecodable records: {e}")))?;
    let record_indexes: Vec<i32> = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.key.is_none())
        .map(|(i, _)| i32::try_from(i).unwrap_or(i32::MAX))
        .take(crate::limits::RECORD_ERRORS_MAX)
        .collect();
    if !record_indexes.is_empty() {
        return Err(AppendError::InvalidRecords {
            message: "Compacted topic cannot accept message without key.".into(),
            record_indexes,
        });
    }
    Ok(())
}

pub(crate) fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    segment::segment_path(dir, offset, SNAPSHOT_SUFFIX)
}

impl PartitionLog {
    pub(crate) fn from_parts(
        tp: TopicPartition,
        dir: PathBuf,
        shared: Arc<StoreShared>,
        config: LogConfig,
        parts: LogParts,
    ) -> Arc<PartitionLog> {
        let durable_offset = parts.log_end_offset;
        Arc::new_cyclic(|me| PartitionLog {
            tp,
            dir,
            shared,
            me: me.clone(),
            inner: Mutex::new(LogInner {
                segments: parts.segments,
                log_end_offset: parts.log_end_offset,
                producers: parts.producers,
                epochs: parts.epochs,
                pending: parts.pending,
                messages_since_flush: 0,
                last_flush_ms: now_ms(),
                generation: 0,
                cleaner_point: parts.cleaner_point,
            }),
            config: RwLock::new(config),
            log_start: AtomicI64::new(parts.log_start_offset),
            log_end: AtomicI64::new(parts.log_end_offset),
            high_watermark: AtomicI64::new(parts.high_watermark),
            recovery_point: AtomicI64::new(parts.recovery_point),
            durable: watch::Sender::new(Durable {
                offset: durable_offset,
                failure: None,
            }),
            queued: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
        })
    }

    /// The partition this log belongs to.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    fn writable(&self) -> Result<(), StoreError> {
        if self.deleted.load(Ordering::SeqCst) {
            return Err(StoreError::UnknownPartition(self.tp.clone()));
        }
        self.shared.check_writable()
    }

    /// Appends one or more v2 batches; see `API.md`.
    pub fn append(
        &self,
        mut records: BytesMut,
        leader_epoch: i32,
    ) -> Result<AppendInfo, AppendError> {
        self.writable()?;
        let (max_message_bytes, ts_type, compacted) = {
            let c = self.config.read();
            (
                c.max_message_bytes as usize,
                c.message_timestamp_type,
                c.cleanup_policy.compact,
            )
        };
        let mut batches: Vec<(usize, BatchHeader)> = Vec::new();
        let mut pos = 0usize;
        while pos < records.len() {
            let h = batch::validate(records.get(pos..).unwrap_or(&[])).map_err(batch_error)?;
            if h.total_size() > max_message_bytes {
                return Err(AppendError::MessageTooLarge {
                    size: h.total_size(),
                    max: max_message_bytes,
                });
            }
            if compacted && !h.is_control() {
                require_keys(records.get(pos..pos + h.total_size()).unwrap_or(&[]))?;
            }
            batches.push((pos, h));
            pos += h.total_size();
            if batches.len() > BATCHES_PER_APPEND_MAX {
                return Err(AppendError::InvalidRecord(format!(
                    "more than {BATCHES_PER_APPEND_MAX} batches in one append"
                )));
            }
        }
        if batches.is_empty() {
            return Err(AppendError::InvalidRecord("no record batch".into()));
        }
        let now = now_ms();
        let mut inner = self.inner.lock();
        self.writable()?;

        // Idempotent producer checks, against a staged copy when several batches share a request.
        let mut staged: Option<ProducerStates> = None;
        let mut duplicates = Vec::new();
        for (_, h) in &batches {
            let states = staged.as_ref().unwrap_or(&inner.producers);
            match states.check(h)? {
                Check::Duplicate(meta) => duplicates.push(meta),
                Check::Append if batches.len() > 1 && h.has_producer_id() => {
                    let s = staged.get_or_insert_with(|| inner.producers.clone());
                    s.update(h, 0, h.max_timestamp);
                }
                Check::Append => {}
            }
        }
        if let (Some(first), Some(last)) = (duplicates.first(), duplicates.last()) {
            if duplicates.len() != batches.len() {
                return Err(AppendError::OutOfOrderSequence(
                    "duplicate batch mixed with new batches in one request".into(),
                ));
            }
            return Ok(AppendInfo {
                base_offset: first.first_offset,
                last_offset: last.last_offset,
                log_append_time_ms: if ts_type == TimestampType::LogAppendTime {
                    first.timestamp
                } else {
                    -1
                },
                log_start_offset: self.log_start.load(Ordering::SeqCst),
                duplicate: true,
            });
        }

        // Assign offsets: patch baseOffset and partitionLeaderEpoch (outside the CRC).
        let base_offset = inner.log_end_offset;
        let mut next = base_offset;
        for (pos, h) in batches.iter_mut() {
            let b = records
                .get_mut(*pos..*pos + h.total_size())
                .unwrap_or(&mut []);
            batch::set_base_offset(b, next);
            batch::set_partition_leader_epoch(b, leader_epoch);
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            if ts_type == TimestampType::LogAppendTime {
                batch::set_log_append_time(b, now);
                h.max_timestamp = now;
                h.attributes |= batch::ATTR_LOG_APPEND_TIME;
            }
            next = h.next_offset();
        }
        let last_offset = next - 1;
        let config = self.config.read().clone();
        self.maybe_roll(&mut inner, records.len() as u64, last_offset, now, &config)?;

        let active_base = inner.active_base();
        let Some(seg) = inner.segments.get_mut(&active_base) else {
            return Err(StoreError::Corrupt("partition has no active segment".into()).into());
        };
        let pre_size = seg.size;
        if pre_size + records.len() as u64 > SEGMENT_BYTES_MAX {
            return Err(AppendError::MessageTooLarge {
                size: records.len(),
                max: max_message_bytes,
            });
        }
        let file = self.segment_file(seg, true)?;
        if let Err(e) = self.shared.storage.write_at(&file, &records, pre_size) {
            let path = seg.log_path(&self.dir);
            // Cut a torn write back so no partial batch is ever visible; if even that fails the
            // file's state is unknown and the data dir goes offline.
            if let Err(e2) = self.shared.storage.set_len(&file, pre_size) {
                self.shared.mark_offline(format!(
                    "append to {} failed ({e}) and could not be rolled back ({e2})",
                    path.display()
                ));
            }
            return Err(StoreError::io(format!("append to {}", path.display()), e).into());
        }
        let mut record_count = 0i64;
        for (pos, h) in &batches {
            seg.track_batch(pre_size + *pos as u64, h, config.index_interval_bytes);
            record_count += i64::from(h.record_count);
        }
        for (_, h) in &batches {
            inner.producers.update(h, h.base_offset, h.max_timestamp);
        }
        inner.log_end_offset = next;
        self.log_end.store(next, Ordering::SeqCst);
        if inner.epochs.assign(leader_epoch, base_offset) {
            // Deferred to the flusher: no fsync under the partition lock, and recovery rebuilds
            // the entries past the recovery point from batch headers anyway.
            inner.pending.epochs = Some(inner.epochs.entries().to_vec());
        }

        let policy = self.shared.config.flush_policy;
        let queue;
        match policy {
            FlushPolicy::Always => {
                if let Err(e) = self.shared.storage.sync(&file) {
                    let err = StoreError::io(format!("fdatasync {}", self.tp), e);
                    self.shared.mark_offline(err.to_string());
                    return Err(err.into());
                }
                // The recovery point stays with the flusher: it also covers index files and the
                // leader-epoch checkpoint, which this fsync does not.
                self.publish_durable(next);
                queue = inner.has_pending();
            }
            FlushPolicy::Never => {
                self.publish_durable(next);
                inner.messages_since_flush += record_count;
                if inner.messages_since_flush >= config.flush_messages {
                    inner.pending.flush_active = true;
                }
                queue = inner.has_pending();
            }
            FlushPolicy::Batch => queue = true,
        }
        drop(inner);
        if queue {
            self.enqueue_flush();
        }
        Ok(AppendInfo {
            base_offset,
            last_offset,
            log_append_time_ms: if ts_type == TimestampType::LogAppendTime {
                now
            } else {
                -1
            },
            log_start_offset: self.log_start.load(Ordering::SeqCst),
            duplicate: false,
        })
    }

    fn maybe_roll(
        &self,
        inner: &mut LogInner,
        append_bytes: u64,
        last_offset: i64,
        now: i64,
        config: &LogConfig,
    ) -> Result<(), StoreError> {
        let Some(active) = inner.segments.values().next_back() else {
            return Err(StoreError::Corrupt(
                "partition has no active segment".into(),
            ));
        };
        let overflow = last_offset - active.base_offset > SEGMENT_RELATIVE_OFFSET_MAX;
        let full = active.size > 0
            && (active.size + append_bytes > config.effective_segment_bytes()
                || now.saturating_sub(active.created_ms) >= config.segment_ms
                || active.indexes_full());
        if overflow || full {
            self.roll(inner, now, config)?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at the log end offset.
    pub(crate) fn roll(
        &self,
        inner: &mut LogInner,
        now: i64,
        config: &LogConfig,
    ) -> Result<(), StoreError> {
        let new_base = inner.log_end_offset;
        let active_base = inner.active_base();
        if new_base == active_base {
            return Ok(());
        }
        let storage = &*self.shared.storage;
        if let Some(seg) = inner.segments.get_mut(&active_base) {
            seg.finish_time_index();
            if let Some((index, time_index)) = seg.encoded_indexes() {
                for (suffix, bytes) in [(INDEX_SUFFIX, index), (TIME_INDEX_SUFFIX, time_index)] {
                    let path = segment::segment_path(&self.dir, active_base, suffix);
                    self.shared.cache.invalidate(&path);
                    segment::write_index_file(storage, &path, &bytes)
                        .map_err(|e| StoreError::io(format!("write {}", path.display()), e))?;
                }
            }
        }
        let new_path = segment::segment_path(&self.dir, new_base, LOG_SUFFIX);
        self.shared
            .cache
            .get(&new_path, true)
            .map_err(|e| StoreError::io(format!("create {}", new_path.display()), e))?;
        inner
            .segments
            .insert(new_base, Segment::new_empty(new_base, config, now));
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            inner
                .pending
                .sync_paths
                .push(segment::segment_path(&self.dir, active_base, suffix));
        }
        inner.pending.sync_dir = true;
        inner
            .pending
            .snapshots
            .push((new_base, inner.producers.encode()));
        if self.shared.config.flush_policy == FlushPolicy::Always {
            storage
                .sync_dir(&self.dir)
                .map_err(|e| StoreError::io(format!("fsync {}", self.dir.display()), e))?;
        }
        Ok(())
    }

    fn write_epoch_checkpoint(&self, entries: &[(i32, i64)]) -> Result<(), StoreError> {
        let path = self.dir.join(LEADER_EPOCH_FILE);
        let bytes = checkpoint::encode_epochs(entries);
        checkpoint::write_atomic(&*self.shared.storage, &path, &bytes)
            .map_err(|e| StoreError::io(format!("write {}", path.display()), e))
    }

    /// Raises the durable offset (never beyond the log end) and, when the store owns it, the
    /// high watermark; wakes long-polling fetches. The high watermark moves first: whoever waits
    /// on `durable` (a Produce about to be acknowledged) must find its data already visible.
    fn publish_durable(&self, offset: i64) {
        if self.shared.config.high_watermark_follows_durable {
            self.raise_high_watermark(offset);
        }
        self.durable.send_if_modified(|d| {
            if offset > d.offset {
                d.offset = offset;
                true
            } else {
                false
            }
        });
    }

    fn raise_high_watermark(&self, offset: i64) {
        let offset = offset.min(self.log_end.load(Ordering::SeqCst));
        if self.high_watermark.fetch_max(offset, Ordering::SeqCst) < offset {
            self.shared.data_available.notify_waiters();
        }
    }

    pub(crate) fn enqueue_flush(&self) {
        if !self.queued.swap(true, Ordering::SeqCst) {
            if let Some(me) = self.me.upgrade() {
                self.shared.flusher.push(me);
            }
        }
    }

    /// One flusher step for this partition: fsync sealed files, the directory and (per policy)
    /// the active segment outside the lock; write snapshots; then publish offsets.
    pub(crate) fn flush_pending(&self) {
        self.queued.store(false, Ordering::SeqCst);
        let policy = self.shared.config.flush_policy;
        let (pending, active_path, target, generation, active_base) = {
            let mut inner = self.inner.lock();
            let pending = std::mem::take(&mut inner.pending);
            let active_base = inner.active_base();
            (
                pending,
                segment::segment_path(&self.dir, active_base, LOG_SUFFIX),
                inner.log_end_offset,
                inner.generation,
                active_base,
            )
        };
        let sync_active = policy == FlushPolicy::Batch || pending.flush_active;
        let storage = &*self.shared.storage;
        let result = (|| -> Result<(), StoreError> {
            for path in &pending.sync_paths {
                match self.shared.cache.get(path, false) {
                    Ok(f) => storage
                        .sync(&f)
                        .map_err(|e| StoreError::io(format!("fdatasync {}", path.display()), e))?,
                    // Deleted meanwhile (retention, truncation): nothing to sync.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
                }
            }
            if sync_active {
                let f =
                    self.shared.cache.get(&active_path, false).map_err(|e| {
                        StoreError::io(format!("open {}", active_path.display()), e)
                    })?;
                storage.sync(&f).map_err(|e| {
                    StoreError::io(format!("fdatasync {}", active_path.display()), e)
                })?;
            }
            if pending.sync_dir {
                storage
                    .sync_dir(&self.dir)
                    .map_err(|e| StoreError::io(format!("fsync {}", self.dir.display()), e))?;
            }
            for (offset, payload) in &pending.snapshots {
                self.write_snapshot(*offset, payload)?;
            }
            if let Some(entries) = &pending.epochs {
                self.write_epoch_checkpoint(entries)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            if !self.deleted.load(Ordering::SeqCst) {
                self.shared.mark_offline(e.to_string());
            }
            return;
        }
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return;
        }
        let synced_to = if sync_active {
            target
        } else {
            active_base.min(target)
        };
        self.recovery_point.fetch_max(synced_to, Ordering::SeqCst);
        if sync_active {
            inner.messages_since_flush = 0;
            inner.last_flush_ms = now_ms();
        }
        if policy == FlushPolicy::Batch {
            self.publish_durable(target);
        }
    }

    /// Writes a producer snapshot at `offset` and deletes all but the newest few.
    pub(crate) fn write_snapshot(&self, offset: i64, payload: &[u8]) -> Result<(), StoreError> {
        let path = snapshot_path(&self.dir, offset);
        let bytes = checkpoint::encode_snapshot(offset, payload);
        checkpoint::write_atomic(&*self.shared.storage, &path, &bytes)
            .map_err(|e| StoreError::io(format!("write {}", path.display()), e))?;
        let mut snapshots = list_snapshots(&self.dir);
        snapshots.sort_unstable();
        let excess = snapshots.len().saturating_sub(PRODUCER_SNAPSHOTS_KEPT);
        for old in snapshots.iter().take(excess) {
            let p = snapshot_path(&self.dir, *old);
            self.shared
                .storage
                .remove_file(&p)
                .map_err(|e| StoreError::io(format!("remove {}", p.display()), e))?;
        }
        Ok(())
    }

    /// Batches starting with the one containing `fetch_offset`; see `API.md`.
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        bound: ReadUpperBound,
        min_one_batch: bool,
    ) -> Result<ReadResult, ReadError> {
        let mut offset = fetch_offset;
        let mut reindexed = false;
        loop {
            let (file, start, expect_base, end, upper, hwm, lso, leo, seg_next) = {
                let mut inner = self.inner.lock();
                let leo = inner.log_end_offset;
                let lso = self.log_start.load(Ordering::SeqCst);
                let hwm = self.high_watermark.load(Ordering::SeqCst);
                let upper = match bound {
                    ReadUpperBound::HighWatermark => hwm,
                    ReadUpperBound::LogEnd => leo,
                };
                if fetch_offset < lso || fetch_offset > upper {
                    return Err(ReadError::OffsetOutOfRange {
                        fetch_offset,
                        log_start_offset: lso,
                        log_end_offset: leo,
                    });
                }
                let empty = ReadResult {
                    records: Bytes::new(),
                    high_watermark: hwm,
                    log_start_offset: lso,
                    log_end_offset: leo,
                };
                if offset >= upper {
                    return Ok(empty);
                }
                let Some(located) = self.locate(&mut inner, offset)? else {
                    return Ok(empty);
                };
                let (file, start, expect_base, end, seg_next) = located;
                (
                    file,
                    start,
                    expect_base,
                    end,
                    upper,
                    hwm,
                    lso,
                    leo,
                    seg_next,
                )
            };
            let records = match read_batches(
                &file,
                start,
                expect_base,
                end,
                offset,
                upper,
                max_bytes,
                min_one_batch,
            ) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData && !reindexed => {
                    // The index disagrees with the log: rebuild it from the log and retry once.
                    tracing::warn!(partition = %self.tp, error = %e, "offset index inconsistent; rebuilding");
                    reindexed = true;
                    self.reindex_segment_containing(offset)?;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(StoreError::Corrupt(format!("{}: {e}", self.tp)).into())
                }
                Err(e) => return Err(StoreError::io(format!("read {}", self.tp), e).into()),
            };
            match records {
                Some(records) => {
                    return Ok(ReadResult {
                        records,
                        high_watermark: hwm,
                        log_start_offset: lso,
                        log_end_offset: leo,
                    })
                }
                // Nothing at or after `offset` in this segment (a compacted tail): next segment.
                None if seg_next > offset => offset = seg_next,
                None => {
                    return Ok(ReadResult {
                        records: Bytes::new(),
                        high_watermark: hwm,
                        log_start_offset: lso,
                        log_end_offset: leo,
                    })
                }
            }
        }
    }

    /// Rebuilds the indexes of the segment holding `offset` from its log and rewrites the files.
    fn reindex_segment_containing(&self, offset: i64) -> Result<(), StoreError> {
        let config = self.config.read().clone();
        let mut inner = self.inner.lock();
        let active_base = inner.active_base();
        let Some((&base, seg)) = inner.segments.range_mut(..=offset).next_back() else {
            return Ok(());
        };
        let path = seg.log_path(&self.dir);
        let file = self
            .shared
            .cache
            .get(&path, false)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        let size_before = seg.size;
        seg.rebuild_indexes(&file, &config)
            .map_err(|e| StoreError::io(format!("reindex {}", path.display()), e))?;
        if seg.size != size_before {
            // The log itself is damaged below what recovery checked: keep serving up to it.
            tracing::error!(partition = %self.tp, segment = base, valid = seg.size, "segment has invalid bytes");
        }
        if base != active_base {
            if let Some((index, time_index)) = seg.encoded_indexes() {
                for (suffix, bytes) in [(INDEX_SUFFIX, index), (TIME_INDEX_SUFFIX, time_index)] {
                    let p = segment::segment_path(&self.dir, base, suffix);
                    self.shared.cache.invalidate(&p);
                    segment::write_index_file(&*self.shared.storage, &p, &bytes)
                        .map_err(|e| StoreError::io(format!("write {}", p.display()), e))?;
                }
            }
        }
        Ok(())
    }

    /// Finds the segment holding `offset` (or the first after it) → (file, start position from
    /// the index, base offset of the batch there, segment size, offset after the segment).
    #[allow(clippy::type_complexity)]
    fn locate(
        &self,
        inner: &mut LogInner,
        offset: i64,
    ) -> Result<Option<(Arc<std::fs::File>, u64, i64, u64, i64)>, StoreError> {
        use std::ops::Bound::{Excluded, Unbounded};
        let floor = inner
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b)
            .or_else(|| inner.segments.keys().next().copied());
        let Some(mut cursor) = floor else {
            return Ok(None);
        };
        loop {
            let next_base = inner
                .segments
                .range((Excluded(cursor), Unbounded))
                .next()
                .map(|(b, _)| *b);
            let Some(seg) = inner.segments.get_mut(&cursor) else {
                return Ok(None);
            };
            let file = self.segment_file(seg, false)?;
            if seg.indexes.is_none() {
                let config = self.config.read().clone();
                seg.ensure_loaded(&self.dir, &file, &config).map_err(|e| {
                    StoreError::io(
                        format!("load indexes of {}", seg.log_path(&self.dir).display()),
                        e,
                    )
                })?;
            }
            if seg.next_offset <= offset {
                match next_base {
                    Some(n) => {
                        cursor = n;
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let entry = seg.indexes.as_ref().map_or(
                crate::index::IndexEntry {
                    offset: seg.base_offset,
                    position: 0,
                },
                |(index, _)| index.lookup(offset),
            );
            let seg_next = next_base.unwrap_or(seg.next_offset);
            return Ok(Some((
                file,
                u64::from(entry.position),
                entry.offset,
                seg.size,
                seg_next,
            )));
        }
    }

    /// The segment's open `.log` (through its cached handle, else the file cache).
    fn segment_file(
        &self,
        seg: &mut Segment,
        create: bool,
    ) -> Result<Arc<std::fs::File>, StoreError> {
        if let Some(f) = seg.file.upgrade() {
            return Ok(f);
        }
        let path = seg.log_path(&self.dir);
        let f = self
            .shared
            .cache
            .get(&path, create)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        seg.file = Arc::downgrade(&f);
        Ok(f)
    }

    /// Log start offset.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start.load(Ordering::SeqCst)
    }

    /// Log end offset.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end.load(Ordering::SeqCst)
    }

    /// High watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::SeqCst)
    }

    /// Sets the high watermark (replication); clamped to `[log start, log end]`.
    pub fn set_high_watermark(&self, offset: i64) {
        let _inner = self.inner.lock();
        let offset = offset
            .min(self.log_end.load(Ordering::SeqCst))
            .max(self.log_start.load(Ordering::SeqCst));
        let old = self.high_watermark.swap(offset, Ordering::SeqCst);
        if offset > old {
            self.shared.data_available.notify_waiters();
        }
    }

    /// Everything below this offset is as durable as the flush policy promises.
    pub fn durable_offset(&self) -> i64 {
        self.durable.borrow().offset
    }

    /// Resolves once `durable_offset() >= offset`. Errors if the log dir went offline, the store
    /// shut down first or the partition was deleted.
    pub async fn wait_durable(&self, offset: i64) -> Result<(), StoreError> {
        let mut rx = self.durable.subscribe();
        let result = rx
            .wait_for(|d| d.offset >= offset || d.failure.is_some())
            .await
            .map(|d| *d);
        match result {
            Ok(d) if d.offset >= offset => Ok(()),
            Ok(Durable {
                failure: Some(Failure::Deleted),
                ..
            }) => Err(StoreError::UnknownPartition(self.tp.clone())),
            Ok(Durable {
                failure: Some(Failure::ShutDown),
                ..
            }) => Err(StoreError::ShutDown),
            Ok(_) => Err(StoreError::Offline(self.shared.offline_reason())),
            Err(_) => Err(StoreError::ShutDown),
        }
    }

    pub(crate) fn fail_waiters(&self, failure: Failure) {
        self.durable.send_modify(|d| d.failure = Some(failure));
    }

    /// First record with timestamp >= `ts` → (offset, timestamp). Exact: decompresses the batch.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>, StoreError> {
        let mut inner = self.inner.lock();
        let config = self.config.read().clone();
        let lso = self.log_start.load(Ordering::SeqCst);
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        for base in bases {
            let Some(seg) = inner.segments.get_mut(&base) else {
                continue;
            };
            let path = seg.log_path(&self.dir);
            let file = self
                .shared
                .cache
                .get(&path, false)
                .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
            seg.ensure_loaded(&self.dir, &file, &config)
                .map_err(|e| StoreError::io(format!("load {}", path.display()), e))?;
            if seg.max_timestamp < ts || seg.next_offset <= lso {
                continue;
            }
            let Some((index, time_index)) = seg.indexes.as_ref() else {
                continue;
            };
            let start_offset = time_index.lookup(ts).max(lso);
            let start = u64::from(index.lookup(start_offset).position);
            let mut found: Option<(i64, i64)> = None;
            let mut decode_error: Option<String> = None;
            segment::scan_batches(
                &file,
                start,
                seg.size,
                seg.base_offset,
                i64::MIN,
                |_, h, bytes| {
                    if found.is_some()
                        || decode_error.is_some()
                        || h.max_timestamp < ts
                        || h.last_offset() < lso
                    {
                        return;
                    }
                    match records::decode_records(bytes) {
                        Ok((_, recs)) => {
                            found = recs
                                .iter()
                                .find(|r| r.timestamp >= ts && r.offset >= lso)
                                .map(|r| (r.offset, r.timestamp));
                        }
                        Err(e) => decode_error = Some(e.to_string()),
                    }
                },
            )
            .map_err(|e| StoreError::io(format!("scan {}", path.display()), e))?;
            if let Some(e) = decode_error {
                return Err(StoreError::Corrupt(format!("{}: {e}", self.tp)));
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// (offset, timestamp) of the first record with the largest timestamp; `None` if empty.
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>, StoreError> {
        let mut inner = self.inner.lock();
        let config = self.config.read().clone();
        let lso = self.log_start.load(Ordering::SeqCst);
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        let mut best: Option<(i64, i64, i64)> = None; // (timestamp, batch base offset, segment)
        for base in bases {
            let Some(seg) = inner.segments.get_mut(&base) else {
                continue;
            };
            let path = seg.log_path(&self.dir);
            let file = self
                .shared
                .cache
                .get(&path, false)
                .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
            seg.ensure_loaded(&self.dir, &file, &config)
                .map_err(|e| StoreError::io(format!("load {}", path.display()), e))?;
            if seg.size > 0
                && seg.next_offset > lso
                && best.is_none_or(|(t, _, _)| seg.max_timestamp > t)
            {
                best = Some((seg.max_timestamp, seg.offset_of_max_timestamp, base));
            }
        }
        let Some((max_ts, batch_offset, base)) = best else {
            return Ok(None);
        };
        let Some(seg) = inner.segments.get(&base) else {
            return Ok(None);
        };
        let file = self
            .shared
            .cache
            .get(&seg.log_path(&self.dir), false)
            .map_err(|e| StoreError::io("open segment", e))?;
        let start = seg
            .indexes
            .as_ref()
            .map_or(0, |(i, _)| u64::from(i.lookup(batch_offset).position));
        let mut found = None;
        segment::scan_batches(
            &file,
            start,
            seg.size,
            seg.base_offset,
            i64::MIN,
            |_, h, bytes| {
                if found.is_some() || h.base_offset != batch_offset {
                    return;
                }
                found = match records::decode_records(bytes) {
                    Ok((_, recs)) => recs
                        .iter()
                        .find(|r| r.timestamp == max_ts && r.offset >= lso)
                        .map(|r| (r.offset, r.timestamp))
                        .or(Some((h.last_offset(), max_ts))),
                    Err(_) => Some((h.last_offset(), max_ts)),
                };
            },
        )
        .map_err(|e| StoreError::io("scan segment", e))?;
        Ok(found.or(Some((batch_offset, max_ts))))
    }

    /// Removes every batch at or after the batch containing `offset` (follower truncation).
    pub fn truncate_to(&self, offset: i64) -> Result<(), StoreError> {
        self.writable()?;
        let mut inner = self.inner.lock();
        if offset >= inner.log_end_offset {
            return Ok(());
        }
        let config = self.config.read().clone();
        let storage = &*self.shared.storage;
        let lso = self.log_start.load(Ordering::SeqCst);
        inner.generation += 1;
        if offset <= lso {
            // Everything goes; start over at `offset`.
            let bases: Vec<i64> = inner.segments.keys().rev().copied().collect();
            for base in bases {
                self.remove_segment_files(base)?;
                inner.segments.remove(&base);
            }
            let new_base = offset.max(0);
            let path = segment::segment_path(&self.dir, new_base, LOG_SUFFIX);
            self.shared
                .cache
                .get(&path, true)
                .map_err(|e| StoreError::io(format!("create {}", path.display()), e))?;
            inner
                .segments
                .insert(new_base, Segment::new_empty(new_base, &config, now_ms()));
            inner.log_end_offset = new_base;
            self.log_start.store(new_base, Ordering::SeqCst);
        } else {
            // Newest first, so a crash leaves a prefix of the segments.
            let doomed: Vec<i64> = inner
                .segments
                .range(offset + 1..)
                .rev()
                .map(|(b, _)| *b)
                .collect();
            let keep_first = inner.segments.keys().next().copied().unwrap_or(0);
            for base in doomed {
                if base == keep_first {
                    break;
                }
                self.remove_segment_files(base)?;
                inner.segments.remove(&base);
            }
            let active_base = inner.active_base();
            let Some(seg) = inner.segments.get_mut(&active_base) else {
                return Err(StoreError::Corrupt("no active segment".into()));
            };
            let path = seg.log_path(&self.dir);
            let file = self
                .shared
                .cache
                .get(&path, false)
                .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
            // Byte position of the first batch whose last offset >= `offset`.
            let mut cut = seg.size;
            segment::scan_batches(
                &file,
                0,
                seg.size,
                seg.base_offset,
                seg.base_offset,
                |pos, h, _| {
                    if cut == seg.size && h.last_offset() >= offset {
                        cut = pos;
                    }
                },
            )
            .map_err(|e| StoreError::io(format!("scan {}", path.display()), e))?;
            storage
                .set_len(&file, cut)
                .map_err(|e| StoreError::io(format!("truncate {}", path.display()), e))?;
            seg.size = cut;
            seg.rebuild_indexes(&file, &config)
                .map_err(|e| StoreError::io(format!("reindex {}", path.display()), e))?;
            if let Some((index, time_index)) = seg.encoded_indexes() {
                for (suffix, bytes) in [(INDEX_SUFFIX, index), (TIME_INDEX_SUFFIX, time_index)] {
                    let p = segment::segment_path(&self.dir, active_base, suffix);
                    self.shared.cache.invalidate(&p);
                    segment::write_index_file(storage, &p, &bytes)
                        .map_err(|e| StoreError::io(format!("write {}", p.display()), e))?;
                }
            }
            inner.log_end_offset = seg.next_offset;
        }
        let leo = inner.log_end_offset;
        self.log_end.store(leo, Ordering::SeqCst);
        self.high_watermark.fetch_min(leo, Ordering::SeqCst);
        self.recovery_point.fetch_min(leo, Ordering::SeqCst);
        self.durable.send_modify(|d| d.offset = d.offset.min(leo));
        if inner.epochs.truncate_from_end(leo) {
            inner.pending.epochs = Some(inner.epochs.entries().to_vec());
        }
        // Producer state: drop snapshots past the end, rebuild from the newest one left.
        for snap in list_snapshots(&self.dir) {
            if snap > leo {
                let p = snapshot_path(&self.dir, snap);
                storage
                    .remove_file(&p)
                    .map_err(|e| StoreError::io(format!("remove {}", p.display()), e))?;
            }
        }
        inner.producers = crate::recovery::rebuild_producer_state(self, &mut inner, &config)?;
        inner.pending.sync_dir = true;
        inner.pending.flush_active = true;
        inner.cleaner_point = inner.cleaner_point.min(leo);
        drop(inner);
        self.enqueue_flush();
        // The on-disk recovery point must not stay above the new end: data appended after this
        // would otherwise escape validation after a power loss.
        self.shared.write_offset_checkpoints()
    }

    /// Deletes the files of one segment (newest-first callers keep the log a prefix on a crash).
    pub(crate) fn remove_segment_files(&self, base: i64) -> Result<(), StoreError> {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let p = segment::segment_path(&self.dir, base, suffix);
            self.shared.cache.invalidate(&p);
            self.shared
                .storage
                .remove_file(&p)
                .map_err(|e| StoreError::io(format!("remove {}", p.display()), e))?;
        }
        Ok(())
    }

    /// Advances the log start offset to `offset` (-1 = high watermark), deleting whole sealed
    /// segments below it. Offsets above the high watermark are clamped to it. Returns the new log
    /// start offset, which is checkpointed before this returns.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, StoreError> {
        self.writable()?;
        let hwm = self.high_watermark();
        let target = if offset < 0 { hwm } else { offset.min(hwm) };
        {
            let mut inner = self.inner.lock();
            if target > self.log_start.load(Ordering::SeqCst) {
                self.log_start.store(target, Ordering::SeqCst);
                inner.producers.remove_before(target);
            }
            crate::retention::delete_segments_below_log_start(self, &mut inner)?;
        }
        self.shared.write_offset_checkpoints()?;
        Ok(self.log_start.load(Ordering::SeqCst))
    }

    /// The topic config in force.
    pub fn config(&self) -> LogConfig {
        self.config.read().clone()
    }

    /// Replaces the topic config (persisted to `config.json`).
    pub fn update_config(&self, config: LogConfig) {
        if let Err(e) = write_config(&*self.shared.storage, &self.dir, &config, true) {
            tracing::warn!(partition = %self.tp, error = %e, "persisting topic config failed");
        }
        *self.config.write() = config;
    }

    /// Bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.inner.lock().segments.values().map(|s| s.size).sum()
    }

    /// Idempotent producer states.
    pub fn producer_states(&self) -> Vec<ProducerStateEntry> {
        self.inner.lock().producers.entries()
    }

    /// For OffsetForLeaderEpoch: the largest leader epoch <= `epoch` and its end offset.
    pub fn end_offset_for_leader_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let inner = self.inner.lock();
        inner.epochs.end_offset_for(epoch, inner.log_end_offset)
    }

    /// The latest leader epoch recorded in the log, if any.
    pub fn latest_leader_epoch(&self) -> Option<i32> {
        self.inner.lock().epochs.latest().map(|(e, _)| e)
    }

    /// Flushes everything and writes the active indexes and a producer snapshot (shutdown).
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        let mut inner = self.inner.lock();
        let storage = &*self.shared.storage;
        let active_base = inner.active_base();
        let pending = std::mem::take(&mut inner.pending);
        for path in &pending.sync_paths {
            if let Ok(f) = self.shared.cache.get(path, false) {
                storage
                    .sync(&f)
                    .map_err(|e| StoreError::io(format!("fdatasync {}", path.display()), e))?;
            }
        }
        for (offset, payload) in &pending.snapshots {
            self.write_snapshot(*offset, payload)?;
        }
        if let Some(entries) = &pending.epochs {
            self.write_epoch_checkpoint(entries)?;
        }
        if let Some(seg) = inner.segments.get_mut(&active_base) {
            seg.finish_time_index();
            if let Some((index, time_index)) = seg.encoded_indexes() {
                for (suffix, bytes) in [(INDEX_SUFFIX, index), (TIME_INDEX_SUFFIX, time_index)] {
                    let p = segment::segment_path(&self.dir, active_base, suffix);
                    self.shared.cache.invalidate(&p);
                    let f = segment::write_index_file(storage, &p, &bytes)
                        .map_err(|e| StoreError::io(format!("write {}", p.display()), e))?;
                    storage
                        .sync(&f)
                        .map_err(|e| StoreError::io(format!("fdatasync {}", p.display()), e))?;
                }
            }
            let path = seg.log_path(&self.dir);
            let f = self
                .shared
                .cache
                .get(&path, true)
                .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
            storage
                .sync(&f)
                .map_err(|e| StoreError::io(format!("fdatasync {}", path.display()), e))?;
        }
        let leo = inner.log_end_offset;
        self.write_snapshot(leo, &inner.producers.encode())?;
        storage
            .sync_dir(&self.dir)
            .map_err(|e| StoreError::io(format!("fsync {}", self.dir.display()), e))?;
        self.recovery_point.store(leo, Ordering::SeqCst);
        self.publish_durable(leo);
        Ok(())
    }

    /// `flush.ms`: under `Never`, queue an fsync of the active segment when it is due.
    pub(crate) fn maybe_flush_for_time(&self, now: i64) {
        let flush_ms = self.config.read().flush_ms;
        let mut inner = self.inner.lock();
        let due = flush_ms != i64::MAX
            && now.saturating_sub(inner.last_flush_ms) >= flush_ms
            && self.recovery_point.load(Ordering::SeqCst) < inner.log_end_offset;
        if due {
            inner.pending.flush_active = true;
            drop(inner);
            self.enqueue_flush();
        }
    }

    /// `segment.ms`: roll an idle active segment that is too old.
    pub(crate) fn maybe_roll_for_time(&self, now: i64) -> Result<bool, StoreError> {
        let config = self.config.read().clone();
        let mut inner = self.inner.lock();
        let rolled = match inner.segments.values().next_back() {
            Some(a) if a.size > 0 && now.saturating_sub(a.created_ms) >= config.segment_ms => {
                self.roll(&mut inner, now, &config)?;
                true
            }
            _ => false,
        };
        drop(inner);
        if rolled {
            self.enqueue_flush();
        }
        Ok(rolled)
    }
}

impl LogInner {
    pub(crate) fn active_base(&self) -> i64 {
        self.segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(self.log_end_offset)
    }

    fn has_pending(&self) -> bool {
        let p = &self.pending;
        !p.sync_paths.is_empty()
            || p.sync_dir
            || !p.snapshots.is_empty()
            || p.flush_active
            || p.epochs.is_some()
    }
}

/// Offsets of the producer snapshots in `dir`.
pub(crate) fn list_snapshots(dir: &Path) -> Vec<i64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            match segment::parse_segment_name(&name) {
                Some((off, SNAPSHOT_SUFFIX)) => Some(off),
                _ => None,
            }
        })
        .collect()
}

/// Persists a `LogConfig` as `config.json` (atomically; the dir fsync only if `sync_dir`).
pub(crate) fn write_config(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    config: &LogConfig,
    sync_dir: bool,
) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(config)
        .map_err(|e| StoreError::Corrupt(format!("encoding config: {e}")))?;
    let path = dir.join(checkpoint::CONFIG_FILE);
    let result = if sync_dir {
        checkpoint::write_atomic(storage, &path, &bytes)
    } else {
        checkpoint::write_atomic_no_dir_sync(storage, &path, &bytes)
    };
    result.map_err(|e| StoreError::io(format!("write {}", path.display()), e))
}

/// Reads whole batches from `file[start..end)`: skips batches ending before `offset`, then takes
/// batches with base offset < `upper` while they fit `max_bytes` (the first one always, if
/// `min_one_batch`), with one `pread` for the returned region. Each returned batch passed its CRC
/// check here; the data is cut before the first one that does not (so a corrupt batch is never
/// served). `None`: no batch at or after `offset` in the range. `InvalidData`: the batch at `start`
/// does not have base offset `expect_base` (a stale index).
#[allow(clippy::too_many_arguments)]
fn read_batches(
    file: &std::fs::File,
    start: u64,
    expect_base: i64,
    end: u64,
    offset: i64,
    upper: i64,
    max_bytes: usize,
    min_one_batch: bool,
) -> std::io::Result<Option<Bytes>> {
    use std::os::unix::fs::FileExt;
    /// Bytes through lastOffsetDelta.
    const PREFIX: usize = 27;
    let prefix = |h: &[u8]| -> (i64, i64, i64) {
        let base = i64::from_be_bytes(h[0..8].try_into().unwrap_or([0; 8]));
        let len = i32::from_be_bytes(h[8..12].try_into().unwrap_or([0; 4]));
        let delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or([0; 4]));
        (base, i64::from(len), i64::from(delta))
    };
    // Skip to the batch containing `offset`, reading headers only.
    let mut reader = ChunkReader::with_chunk(file, end, crate::limits::READ_SKIP_CHUNK_BYTES);
    let mut pos = start;
    let mut expected = expect_base;
    let (first_pos, first_base, first_total) = loop {
        let Some(h) = reader.bytes_at(pos, PREFIX)? else {
            return Ok(None);
        };
        let (base, len, delta) = prefix(h);
        if base != expected {
            if pos == start {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("batch at position {pos} has offset {base}, expected {expected}"),
                ));
            }
            return Ok(None);
        }
        let total = LOG_OVERHEAD_BYTES as u64 + len.max(0) as u64;
        if len < 0 || delta < 0 || pos + total > end {
            return Ok(None);
        }
        let last = base.saturating_add(delta);
        if last >= offset {
            break (pos, base, total as usize);
        }
        expected = last.saturating_add(1);
        pos += total;
    };
    if first_base >= upper || (first_total > max_bytes && !min_one_batch) {
        return Ok(Some(Bytes::new()));
    }
    // One read for the whole answer, then cut it at a batch boundary.
    let want = (end - first_pos).min(max_bytes.max(first_total) as u64) as usize;
    let mut buf = vec![0u8; want];
    file.read_exact_at(&mut buf, first_pos)?;
    let mut cut = 0usize;
    let mut expected = first_base;
    while let Some(h) = buf.get(cut..cut + PREFIX) {
        let (base, len, _) = prefix(h);
        let total = LOG_OVERHEAD_BYTES + len.max(0) as usize;
        if base != expected
            || (cut > 0 && (base >= upper || cut + total > max_bytes))
            || cut + total > buf.len()
        {
            break;
        }
        // Pair assertion: validate what we are about to serve.
        match batch::validate_stored(buf.get(cut..cut + total).unwrap_or(&[])) {
            Ok(h) => expected = h.next_offset(),
            Err(e) => {
                tracing::error!(error = %e, position = first_pos + cut as u64, "corrupt batch in log; serving up to it");
                break;
            }
        }
        cut += total;
    }
    buf.truncate(cut);
    Ok(Some(Bytes::from(buf)))
}
