//! `PartitionLog`: the log of one topic-partition (Kafka's `UnifiedLog`/`LocalLog`): an ordered
//! set of segments, the log start / end offsets, high watermark, durable offset, recovery point,
//! producer state, leader-epoch cache and cleaner point. This module is their only owner: every
//! field is private, and recovery, retention, the cleaner and the store call methods on the log.
//!
//! Data flow: the replica manager (for Produce) calls `append` with producer batches (validated,
//! offsets assigned, then written by the one internal write path, `write_batches`, to the active
//! segment) and `read`/`read_records` for Fetch (whole stored batches). Recovery builds a log from
//! what it found on disk (`PartitionLog::open`); retention moves the log start offset
//! (`advance_log_start`); the cleaner swaps sealed segments (`replace_sealed_segment`);
//! replication calls `truncate_to`, `set_high_watermark` and the follower append
//! (`append_replicated`, `follower.rs`), which reuses `write_batches`. The submodules split the
//! methods by concern: `append`, `read`, `durability`, `log_start`, `follower`, `timestamps`,
//! `compaction`, `transactions`.
//!
//! Invariants: `log_start_offset <= high_watermark <= log_end_offset`; `durable_offset <=
//! log_end_offset`; `recovery_point <= log_end_offset`, and everything below the recovery point
//! has been fsynced (segment files, their indexes, the leader-epoch checkpoint); offsets in the
//! log strictly increase and are contiguous inside a segment; no append is partially visible
//! (readers see only `[0, segment.size)`, and `size` moves after the write succeeded; a failed
//! write is cut back before the lock is released). Only `advance_log_start` raises the log start
//! offset, and only `truncate_to` lowers the log end offset.
//!
//! Locking: one `parking_lot::Mutex<LogInner>` per partition around the segment state. `read`
//! takes it only to find the segment, position and an `Arc<File>`, then `pread`s outside it. In
//! `Batch` mode no lock is held across an fsync (the flusher syncs outside it); in `Always` mode
//! the append holds it across its own fdatasync. Offsets that readers poll are atomics (the
//! checkpointed ones live in `shared::PartitionOffsets`, which the store's checkpoint writer
//! reads). Lock order: partition → file cache → (shared's leaf locks).
//!
//! Not here: what to retain (`retention`), what to compact (`cleaner`), how to find the valid end
//! of a log on disk (`recovery`), the flusher's scheduling (`flusher`).
//!
//! Files: `append.rs` (leader append, the write path, rolls), `read.rs` (Fetch), `durability.rs`
//! (flush, durable offset, high watermark, waiters, close), `log_start.rs` (log start offset,
//! truncation, producer-state rebuild), `timestamps.rs` (ListOffsets by time),
//! `compaction.rs` (what the cleaner may see and change), `transactions.rs` (markers, last stable
//! offset, aborted transactions).

mod append;
mod compaction;
mod damage;
mod durability;
mod follower;
mod log_start;
mod read;
mod relocate;
mod tiered;
mod timestamps;
mod transactions;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{watch, Notify};

use crate::checkpoint::Durability;
use crate::config::{LogConfig, TopicPartition};
use crate::damage::DamagedRange;
use crate::error::StoreError;
use crate::leader_epoch::LeaderEpochCache;
use crate::partition_dir::{self, TopicId};
use crate::producer_state::{ProducerStateEntry, ProducerStates};
use crate::segment::{self, Segment, INDEX_SUFFIX, TIME_INDEX_SUFFIX};
use crate::shared::{LogDir, PartitionOffsets, StoreShared};
use crate::watchers::Watchers;

pub(crate) use compaction::SealedSegment;
pub use damage::RepairError;
pub(crate) use damage::ScrubView;
pub(crate) use durability::{list_snapshots, snapshot_path};
pub use follower::ReplicatedAppend;
pub use read::{FileSlice, Records};
pub(crate) use relocate::{copy_file, Copied, SwapError};
pub use tiered::{TierSegment, NOTHING_COPIED};

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

/// Result of a read: `R` is [`Bytes`] for [`PartitionLog::read`], [`Records`] for
/// [`PartitionLog::read_records`].
#[derive(Debug, Clone)]
pub struct ReadResult<R = Bytes> {
    /// Whole batches, starting with the batch that contains the fetch offset.
    pub records: R,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// Log end offset at the time of the read.
    pub log_end_offset: i64,
    /// Last stable offset at the time of the read.
    pub last_stable_offset: i64,
    /// For [`ReadUpperBound::LastStable`]: the aborted transactions the returned batches may hold
    /// records of (marker at or after the fetch offset, begun before the read's end).
    pub aborted_transactions: Vec<crate::producer_state::AbortedTxn>,
}

/// Where a read stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadUpperBound {
    /// Consumers: up to the high watermark.
    HighWatermark,
    /// Replicas: up to the log end offset.
    LogEnd,
    /// `read_committed` consumers: up to the last stable offset (offsets up to the high watermark
    /// are in range, those past the last stable offset read nothing).
    LastStable,
}

/// Why waiters were released without their offset becoming durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    ShutDown,
    Deleted,
}

/// What `wait_durable` watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Durable {
    offset: i64,
    failure: Option<Failure>,
}

/// Work deferred to the flusher.
#[derive(Debug, Default)]
struct Pending {
    /// Files of sealed segments to fdatasync.
    sync_paths: Vec<PathBuf>,
    /// The partition directory needs an fsync (new or removed files).
    sync_dir: bool,
    /// Producer snapshots to write: (offset, payload).
    snapshots: Vec<(i64, Vec<u8>)>,
    /// The active segment must be synced even under `Never` (flush.messages / flush.ms / recovery).
    flush_active: bool,
    /// Leader-epoch cache entries to checkpoint (written before the recovery point passes them),
    /// with their version (`LogInner::epochs_version`).
    epochs: Option<(u64, Vec<(i32, i64)>)>,
}

impl Pending {
    /// Puts back the work of a flush round that failed, before anything queued since.
    fn take_back(&mut self, mut earlier: Pending) {
        earlier.sync_paths.append(&mut self.sync_paths);
        self.sync_paths = earlier.sync_paths;
        earlier.snapshots.append(&mut self.snapshots);
        self.snapshots = earlier.snapshots;
        self.sync_dir |= earlier.sync_dir;
        self.flush_active |= earlier.flush_active;
        if self.epochs.is_none() {
            self.epochs = earlier.epochs;
        }
    }

    fn is_empty(&self) -> bool {
        self.sync_paths.is_empty()
            && !self.sync_dir
            && self.snapshots.is_empty()
            && !self.flush_active
            && self.epochs.is_none()
    }
}

/// State guarded by the partition mutex.
struct LogInner {
    segments: BTreeMap<i64, Segment>,
    log_end_offset: i64,
    producers: ProducerStates,
    epochs: LeaderEpochCache,
    pending: Pending,
    messages_since_flush: i64,
    last_flush_ms: i64,
    /// Bumped by truncation; a flush round or cleaning pass started before it must not publish.
    generation: u64,
    /// Offset below which the log has been cleaned (compaction).
    cleaner_point: i64,
    /// Bumped at every change of `epochs` that is to reach the checkpoint file: a write of an
    /// older version never replaces a newer one (`write_epoch_checkpoint`).
    epochs_version: u64,
    /// Bumped when the log moved to another log dir (`relocate.rs`): a flush round that took its
    /// work before may fail on the old paths without the dir being at fault.
    relocations: u64,
}

impl LogInner {
    /// Queues the current leader-epoch entries for the checkpoint file, as a new version, for
    /// the next flush round to write.
    fn stage_epochs(&mut self) {
        let (version, entries) = self.next_epochs();
        self.pending.epochs = Some((version, entries));
    }

    /// The current leader-epoch entries as a new version, for a caller that writes them itself
    /// (at once, durably); a flush round holding an older version will not write over them.
    fn next_epochs(&mut self) -> (u64, Vec<(i32, i64)>) {
        self.epochs_version += 1;
        (self.epochs_version, self.epochs.entries().to_vec())
    }

    fn active_base(&self) -> i64 {
        self.segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(self.log_end_offset)
    }
}

/// The log of one partition. `Send + Sync`; used as `Arc<PartitionLog>`.
pub struct PartitionLog {
    tp: TopicPartition,
    /// The partition directory and the log dir holding it; changed only by a replica move
    /// (`move_to`), under `inner`.
    location: RwLock<Location>,
    topic_id: OnceLock<TopicId>,
    /// Whether `config.json` was found when the log was loaded (or written since).
    config_persisted: AtomicBool,
    shared: Arc<StoreShared>,
    me: Weak<PartitionLog>,
    inner: Mutex<LogInner>,
    /// The version of the leader-epoch entries `leader-epoch-checkpoint` durably holds, as this
    /// process last wrote it (`None`: not written since the log was loaded, or a write failed).
    /// Held across each write, so writes are ordered, an older version never overwrites a newer
    /// one and a version is not written twice (see `write_epoch_checkpoint`). Taken after
    /// `inner`, never before.
    epoch_checkpoint: Mutex<Option<u64>>,
    config: RwLock<LogConfig>,
    /// Log start offset, high watermark and recovery point (also read by the checkpoint writer).
    offsets: Arc<PartitionOffsets>,
    log_end: AtomicI64,
    durable: watch::Sender<Durable>,
    queued: AtomicBool,
    deleted: AtomicBool,
    /// Consumer fetches parked until the high watermark moves.
    high_watermark_watchers: Watchers,
    /// Follower fetches parked until the leader's log end moves.
    log_end_watchers: Watchers,
    /// Damaged ranges of sealed segments, by first offset (`damage.rs`); a leaf lock.
    damage: Mutex<BTreeMap<i64, DamagedRange>>,
    /// Offsets below this are in the object store (`tiered.rs`; `NOTHING_COPIED` if none).
    remote_copied_end: AtomicI64,
    /// Bytes waiting for upload and the bound they passed (0: produce is not refused).
    upload_backlog: std::sync::atomic::AtomicU64,
    upload_backlog_bound: std::sync::atomic::AtomicU64,
}

/// Where a log lives: its directory and the log dir (`log.dirs` entry) that holds it.
#[derive(Clone)]
pub(crate) struct Location {
    pub(crate) dir: PathBuf,
    pub(crate) log_dir: Arc<LogDir>,
}

/// What recovery found on disk, to build a `PartitionLog` from (`PartitionLog::open`).
pub(crate) struct LoadedLog {
    pub(crate) tp: TopicPartition,
    pub(crate) dir: PathBuf,
    pub(crate) topic_id: Option<TopicId>,
    /// `None`: `config.json` was missing or unreadable (defaults apply).
    pub(crate) config: Option<LogConfig>,
    pub(crate) segments: BTreeMap<i64, Segment>,
    pub(crate) log_start_offset: i64,
    pub(crate) high_watermark: i64,
    pub(crate) recovery_point: i64,
    pub(crate) epochs: LeaderEpochCache,
    pub(crate) cleaner_point: i64,
    /// Files recovery validated that may be only in the page cache (fsynced by the flusher).
    pub(crate) unsynced: Vec<PathBuf>,
    /// The directory itself may have unsynced changes.
    pub(crate) sync_dir: bool,
    /// Recovery changed the leader-epoch cache but found no space to write its checkpoint: the
    /// flusher writes it (before the recovery point passes it).
    pub(crate) epochs_unwritten: bool,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl PartitionLog {
    fn build(
        shared: Arc<StoreShared>,
        tp: TopicPartition,
        location: Location,
        config: LogConfig,
        config_persisted: bool,
        inner: LogInner,
        offsets: PartitionOffsets,
    ) -> Arc<PartitionLog> {
        let log_end_offset = inner.log_end_offset;
        let offsets = Arc::new(offsets);
        location.log_dir.register_offsets(&tp, Arc::clone(&offsets));
        Arc::new_cyclic(|me| PartitionLog {
            tp,
            location: RwLock::new(location),
            topic_id: OnceLock::new(),
            config_persisted: AtomicBool::new(config_persisted),
            shared,
            me: me.clone(),
            inner: Mutex::new(inner),
            epoch_checkpoint: Mutex::new(None),
            config: RwLock::new(config),
            offsets,
            log_end: AtomicI64::new(log_end_offset),
            durable: watch::Sender::new(Durable {
                offset: log_end_offset,
                failure: None,
            }),
            queued: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            high_watermark_watchers: Watchers::default(),
            log_end_watchers: Watchers::default(),
            damage: Mutex::new(BTreeMap::new()),
            remote_copied_end: AtomicI64::new(tiered::NOTHING_COPIED),
            upload_backlog: std::sync::atomic::AtomicU64::new(0),
            upload_backlog_bound: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A new, empty log in `dir`, whose files (directory, `config.json`, `partition.metadata`,
    /// first segment) the store has just created and synced.
    pub(crate) fn create(
        shared: Arc<StoreShared>,
        tp: TopicPartition,
        location: Location,
        config: LogConfig,
        topic_id: TopicId,
    ) -> Arc<PartitionLog> {
        let mut segments = BTreeMap::new();
        segments.insert(0, Segment::new_empty(0, &config, now_ms()));
        let inner = LogInner {
            segments,
            log_end_offset: 0,
            producers: ProducerStates::default(),
            epochs: LeaderEpochCache::default(),
            pending: Pending::default(),
            messages_since_flush: 0,
            last_flush_ms: now_ms(),
            generation: 0,
            cleaner_point: 0,
            epochs_version: 0,
            relocations: 0,
        };
        let log = PartitionLog::build(
            shared,
            tp,
            location,
            config,
            true,
            inner,
            PartitionOffsets::new(0, 0, 0),
        );
        let _ = log.topic_id.set(topic_id);
        log
    }

    /// A log over what recovery found: rebuilds producer state (newest snapshot plus the batch
    /// headers after it), clamps the cleaner point, and queues the fsync of whatever recovery
    /// read that may not be on disk yet.
    pub(crate) fn open(
        shared: Arc<StoreShared>,
        log_dir: Arc<LogDir>,
        loaded: LoadedLog,
    ) -> Result<Arc<PartitionLog>, StoreError> {
        let log_end_offset = loaded
            .segments
            .values()
            .next_back()
            .map_or(0, |s| s.next_offset);
        let pending = Pending {
            sync_paths: loaded.unsynced,
            sync_dir: loaded.sync_dir,
            ..Pending::default()
        };
        let mut inner = LogInner {
            segments: loaded.segments,
            log_end_offset,
            producers: ProducerStates::default(),
            epochs: loaded.epochs,
            pending,
            messages_since_flush: 0,
            last_flush_ms: now_ms(),
            generation: 0,
            cleaner_point: loaded.cleaner_point,
            epochs_version: 0,
            relocations: 0,
        };
        if loaded.epochs_unwritten {
            inner.stage_epochs();
        }
        let queue = !inner.pending.is_empty();
        let persisted = loaded.config.is_some();
        let config = loaded.config.unwrap_or_default();
        let log = PartitionLog::build(
            shared,
            loaded.tp,
            Location {
                dir: loaded.dir,
                log_dir,
            },
            config,
            persisted,
            inner,
            PartitionOffsets::new(
                loaded.log_start_offset,
                loaded.high_watermark,
                loaded.recovery_point,
            ),
        );
        if let Some(id) = loaded.topic_id {
            let _ = log.topic_id.set(id);
        }
        {
            let mut inner = log.inner.lock();
            let config = log.config.read().clone();
            inner.producers = log.rebuild_producer_state(&mut inner, &config)?;
            let log_start = log.offsets.log_start();
            inner.cleaner_point = inner.cleaner_point.clamp(log_start, inner.log_end_offset);
        }
        if queue {
            log.enqueue_flush();
        }
        Ok(log)
    }

    /// The partition this log belongs to.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// The partition's directory.
    pub(crate) fn dir(&self) -> PathBuf {
        self.location.read().dir.clone()
    }

    /// The log dir holding the partition.
    pub(crate) fn log_dir(&self) -> Arc<LogDir> {
        Arc::clone(&self.location.read().log_dir)
    }

    /// Whether the log dir holding the partition is offline (an I/O error there): it takes no
    /// writes until the broker restarts and rescans the dir.
    pub fn is_offline(&self) -> bool {
        self.location.read().log_dir.is_offline()
    }

    /// Where the partition lives (directory and log dir).
    pub(crate) fn location(&self) -> Location {
        self.location.read().clone()
    }

    /// The topic id recorded in the partition directory (`partition.metadata`); `None` for a
    /// directory written before topic ids were recorded.
    pub fn topic_id(&self) -> Option<TopicId> {
        self.topic_id.get().copied()
    }

    /// Records the topic id of a directory that has none (written before topic ids were
    /// recorded). `StoreError::TopicIdMismatch` if it already has another one; a no-op if it has
    /// this one.
    pub fn assign_topic_id(&self, topic_id: TopicId) -> Result<(), StoreError> {
        let _inner = self.inner.lock();
        match self.topic_id.get() {
            Some(id) if *id == topic_id => return Ok(()),
            Some(id) => {
                return Err(StoreError::TopicIdMismatch {
                    partition: self.tp.clone(),
                    on_disk: id.to_string(),
                    expected: topic_id.to_string(),
                })
            }
            None => {}
        }
        self.writable()?;
        partition_dir::write_topic_id(
            &*self.shared.storage,
            &self.dir(),
            topic_id,
            Durability::Synced,
        )?;
        let _ = self.topic_id.set(topic_id);
        Ok(())
    }

    /// Whether the topic config in force came from `config.json` (false: the file was missing or
    /// unreadable when the log was loaded, and defaults apply until `update_config`).
    pub fn config_persisted(&self) -> bool {
        self.config_persisted.load(Ordering::SeqCst)
    }

    fn writable(&self) -> Result<(), StoreError> {
        if self.is_deleted() {
            return Err(StoreError::UnknownPartition(self.tp.clone()));
        }
        self.log_dir().check_online()?;
        self.shared.check_running()
    }

    /// The store removed this partition (deleted or set aside).
    pub(crate) fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::SeqCst)
    }

    /// Marks the log removed from the store: later writes fail with `UnknownPartition`, waiters
    /// are released. Returns once no append, truncation or flush publication is in progress.
    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::SeqCst);
        let _inner = self.inner.lock();
        self.fail_waiters(Failure::Deleted);
        self.log_dir().unregister_offsets(&self.tp);
        // Parked fetches find out now (UNKNOWN_TOPIC_OR_PARTITION), not at their deadline.
        self.wake_watchers();
    }

    /// Wakes `waiter` (once) the next time the high watermark rises, or the partition changes
    /// hands or is deleted. The long poll of a consumer Fetch.
    pub fn watch_high_watermark(&self, waiter: &Arc<Notify>) {
        self.high_watermark_watchers.watch(waiter);
    }

    /// Wakes `waiter` (once) at the next [`PartitionLog::wake_log_end_watchers`], or when the
    /// partition changes hands or is deleted. The long poll of a follower's Fetch.
    pub fn watch_log_end(&self, waiter: &Arc<Notify>) {
        self.log_end_watchers.watch(waiter);
    }

    /// The log end moved: a leader append (called by replication after it has accounted it).
    pub fn wake_log_end_watchers(&self) {
        self.log_end_watchers.wake();
    }

    /// Wakes every parked fetch: its answer may have changed (leadership, deletion).
    pub fn wake_watchers(&self) {
        self.high_watermark_watchers.wake();
        self.log_end_watchers.wake();
    }

    /// Log start offset.
    pub fn log_start_offset(&self) -> i64 {
        self.offsets.log_start()
    }

    /// Log end offset.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end.load(Ordering::SeqCst)
    }

    /// High watermark.
    pub fn high_watermark(&self) -> i64 {
        self.offsets.high_watermark()
    }

    /// The topic config in force.
    pub fn config(&self) -> LogConfig {
        self.config.read().clone()
    }

    /// Replaces the topic config (persisted to `config.json`).
    pub fn update_config(&self, config: LogConfig) {
        match partition_dir::write_config(
            &*self.shared.storage,
            &self.dir(),
            &config,
            Durability::Synced,
        ) {
            Ok(()) => self.config_persisted.store(true, Ordering::SeqCst),
            Err(e) => {
                tracing::warn!(partition = %self.tp, error = %e, "persisting topic config failed")
            }
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

    /// The segment's open `.log` (through its cached handle, else the file cache).
    fn segment_file(
        &self,
        seg: &mut Segment,
        create: bool,
    ) -> Result<Arc<std::fs::File>, StoreError> {
        if let Some(f) = seg.file.upgrade() {
            return Ok(f);
        }
        let path = seg.log_path(&self.dir());
        let f = self
            .shared
            .cache
            .get(&path, create)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        seg.file = Arc::downgrade(&f);
        Ok(f)
    }

    /// Loads a segment's indexes if they are not yet (sealed segments load lazily).
    fn ensure_loaded(&self, seg: &mut Segment, config: &LogConfig) -> Result<(), StoreError> {
        if seg.indexes.is_some() {
            return Ok(());
        }
        let file = self.segment_file(seg, false)?;
        seg.ensure_loaded(&self.dir(), &file, config).map_err(|e| {
            StoreError::io(
                format!("load indexes of {}", seg.log_path(&self.dir()).display()),
                e,
            )
        })
    }

    /// Rewrites the `.index` and `.timeindex` of `seg` from its in-memory indexes; returns the
    /// written files (for callers that sync them).
    fn write_index_files(
        &self,
        seg: &Segment,
    ) -> Result<Vec<(PathBuf, std::fs::File)>, StoreError> {
        let mut written = Vec::new();
        if let Some((index, time_index)) = seg.encoded_indexes() {
            for (suffix, bytes) in [(INDEX_SUFFIX, index), (TIME_INDEX_SUFFIX, time_index)] {
                let p = segment::segment_path(&self.dir(), seg.base_offset, suffix);
                self.shared.cache.invalidate(&p);
                let f = segment::write_index_file(&*self.shared.storage, &p, &bytes)
                    .map_err(|e| StoreError::io(format!("write {}", p.display()), e))?;
                written.push((p, f));
            }
        }
        Ok(written)
    }
}
