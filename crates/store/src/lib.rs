//! Millrace's native partitioned segment store (see `API.md` for the contract the front end codes
//! against, and `docs/log-format.md` for every byte on disk and the crash analysis).
//!
//! Where it sits: the front end decodes Produce/Fetch/ListOffsets/DeleteRecords and calls
//! `Store`/`PartitionLog`; nothing here knows the Kafka wire protocol beyond the v2 record batch,
//! whose 61-byte header `batch.rs` parses itself (this crate does not import `kafka-protocol`).
//!
//! Read first: `Store` (this file), `log::PartitionLog`, `segment::Segment`, `recovery`.
//!
//! Invariants: one directory `<topic>-<partition>` per partition under `data_dir`; every file
//! mutation goes through `storage::Storage`; the clean-shutdown marker exists only between a
//! successful `shutdown` and the next `open`; a data dir that saw an I/O error of unknown outcome
//! goes offline (appends fail with `StoreError::Offline`) instead of panicking.
//!
//! Locking: a `RwLock` around the partition map (held briefly); one mutex per partition
//! (`log.rs`); the flusher queue's own mutex (`flusher.rs`); the file cache's mutex
//! (`file_cache.rs`). Lock order: partition map → partition → file cache; the flusher queue is a
//! leaf.

pub mod batch;
mod checkpoint;
mod cleaner;
pub mod compression;
mod config;
mod error;
mod file_cache;
mod flusher;
mod index;
mod leader_epoch;
pub mod limits;
mod log;
mod producer_state;
pub mod records;
mod recovery;
mod retention;
mod segment;
pub mod storage;
pub mod testing;
mod time_index;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

pub use config::{
    CleanupPolicy, ConfigParseError, FlushPolicy, LogConfig, StoreConfig, TimestampType,
    TopicPartition,
};
pub use error::{AppendError, ReadError, StoreError};
pub use log::{AppendInfo, PartitionLog, ReadResult, ReadUpperBound};
pub use producer_state::{BatchMetadata, ProducerStateEntry};

use checkpoint::{CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_FILE, LOG_START_FILE, RECOVERY_POINT_FILE};
use file_cache::FileCache;
use flusher::FlushQueue;
use recovery::PartitionCheckpoints;
use storage::{OsStorage, Storage};

/// What one `run_maintenance` tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Segments deleted by retention or DeleteRecords.
    pub segments_deleted: usize,
    /// Active segments rolled by `segment.ms`.
    pub segments_rolled: usize,
    /// Partitions compacted.
    pub partitions_cleaned: usize,
    /// Log bytes read by the cleaner.
    pub bytes_cleaned: u64,
}

/// State shared by the store, its partitions and the flusher.
pub(crate) struct StoreShared {
    pub(crate) config: StoreConfig,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) cache: FileCache,
    pub(crate) data_available: Arc<Notify>,
    pub(crate) flusher: Arc<FlushQueue>,
    pub(crate) partitions: RwLock<HashMap<TopicPartition, Arc<PartitionLog>>>,
    offline: Mutex<Option<String>>,
    offline_flag: AtomicBool,
    shut_down: AtomicBool,
    /// Serializes checkpoint writers; holds what was last written, to skip unchanged rewrites.
    checkpoint_lock: Mutex<Option<CheckpointMaps>>,
}

/// Recovery points, log start offsets and high watermarks, as last written.
type CheckpointMaps = [BTreeMap<TopicPartition, i64>; 3];

impl StoreShared {
    pub(crate) fn check_writable(&self) -> Result<(), StoreError> {
        if self.offline_flag.load(Ordering::SeqCst) {
            return Err(StoreError::Offline(self.offline_reason()));
        }
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(StoreError::ShutDown);
        }
        Ok(())
    }

    pub(crate) fn offline_reason(&self) -> String {
        self.offline.lock().clone().unwrap_or_default()
    }

    /// Takes the data dir offline: later appends fail with `Offline`, waiters are woken.
    pub(crate) fn mark_offline(&self, reason: String) {
        {
            let mut offline = self.offline.lock();
            if offline.is_some() {
                return;
            }
            tracing::error!(data_dir = %self.config.data_dir.display(), %reason, "log directory going offline");
            *offline = Some(reason);
            self.offline_flag.store(true, Ordering::SeqCst);
        }
        for log in self.partitions.read().values() {
            log.fail_waiters(log::Failure::Offline);
        }
    }

    /// Writes the three data-dir offset checkpoint files (those that changed since last time).
    pub(crate) fn write_offset_checkpoints(&self) -> Result<(), StoreError> {
        let mut last = self.checkpoint_lock.lock();
        let mut rp = BTreeMap::new();
        let mut ls = BTreeMap::new();
        let mut hw = BTreeMap::new();
        for (tp, log) in self.partitions.read().iter() {
            rp.insert(tp.clone(), log.recovery_point.load(Ordering::SeqCst));
            ls.insert(tp.clone(), log.log_start_offset());
            hw.insert(tp.clone(), log.high_watermark());
        }
        let maps: CheckpointMaps = [rp, ls, hw];
        let names = [RECOVERY_POINT_FILE, LOG_START_FILE, HIGH_WATERMARK_FILE];
        for (i, (name, map)) in names.iter().zip(maps.iter()).enumerate() {
            if last.as_ref().and_then(|l| l.get(i)) == Some(map) {
                continue;
            }
            let path = self.config.data_dir.join(name);
            if let Err(e) =
                checkpoint::write_atomic(&*self.storage, &path, &checkpoint::encode_offsets(map))
            {
                *last = None;
                return Err(StoreError::io(format!("write {}", path.display()), e));
            }
        }
        *last = Some(maps);
        Ok(())
    }

    fn read_offset_checkpoint(&self, name: &str) -> BTreeMap<TopicPartition, i64> {
        let path = self.config.data_dir.join(name);
        match checkpoint::read_bounded(&path) {
            Ok(Some(bytes)) => checkpoint::decode_offsets(&bytes).unwrap_or_else(|| {
                tracing::warn!(file = %path.display(), "malformed offset checkpoint ignored");
                BTreeMap::new()
            }),
            Ok(None) => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "unreadable offset checkpoint ignored");
                BTreeMap::new()
            }
        }
    }
}

/// The store: all partition logs of one data dir. `Send + Sync`, used as `Arc<Store>`.
pub struct Store {
    shared: Arc<StoreShared>,
    flusher_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    create_lock: Mutex<()>,
    maintenance: Mutex<cleaner::CleanerState>,
}

impl Store {
    /// Opens (creating if needed) the data dir; see `API.md`.
    pub fn open(config: StoreConfig) -> Result<Arc<Store>, StoreError> {
        Store::open_with_storage(config, Arc::new(OsStorage))
    }

    /// Like `open`, with every file mutation going through `storage` (crash-injection tests).
    pub fn open_with_storage(
        config: StoreConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<Arc<Store>, StoreError> {
        let data_dir = config.data_dir.clone();
        storage
            .create_dir_all(&data_dir)
            .map_err(|e| StoreError::io(format!("create {}", data_dir.display()), e))?;
        let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = marker.exists();
        let shared = Arc::new(StoreShared {
            cache: FileCache::new(config.max_open_files, Arc::clone(&storage)),
            storage,
            data_available: Arc::new(Notify::new()),
            flusher: Arc::new(FlushQueue::default()),
            partitions: RwLock::new(HashMap::new()),
            offline: Mutex::new(None),
            offline_flag: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            checkpoint_lock: Mutex::new(None),
            config,
        });
        let recovery_points = shared.read_offset_checkpoint(RECOVERY_POINT_FILE);
        let log_starts = shared.read_offset_checkpoint(LOG_START_FILE);
        let high_watermarks = shared.read_offset_checkpoint(HIGH_WATERMARK_FILE);
        let entries = std::fs::read_dir(&data_dir)
            .map_err(|e| StoreError::io(format!("list {}", data_dir.display()), e))?;
        let mut dirs: Vec<(TopicPartition, PathBuf)> = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| StoreError::io(format!("list {}", data_dir.display()), e))?;
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.ends_with("-delete") {
                shared
                    .storage
                    .remove_dir_all(&path)
                    .map_err(|e| StoreError::io(format!("remove {}", path.display()), e))?;
                continue;
            }
            if let Some(tp) = TopicPartition::from_dir_name(&name) {
                dirs.push((tp, path));
            }
        }
        dirs.sort();
        for (tp, dir) in dirs {
            let ckpt = PartitionCheckpoints {
                recovery_point: recovery_points.get(&tp).copied(),
                log_start_offset: log_starts.get(&tp).copied(),
                high_watermark: high_watermarks.get(&tp).copied(),
            };
            let log = recovery::load_partition(&shared, tp.clone(), &dir, ckpt, clean)?;
            shared.partitions.write().insert(tp, log);
        }
        if clean {
            shared
                .storage
                .remove_file(&marker)
                .map_err(|e| StoreError::io(format!("remove {}", marker.display()), e))?;
            shared
                .storage
                .sync_dir(&data_dir)
                .map_err(|e| StoreError::io(format!("fsync {}", data_dir.display()), e))?;
        }
        let queue = Arc::clone(&shared.flusher);
        let interval = shared.config.flush_interval;
        let handle = std::thread::Builder::new()
            .name("millrace-flusher".into())
            .spawn(move || flusher::run(queue, interval))
            .map_err(|e| StoreError::io("spawn flusher thread", e))?;
        Ok(Arc::new(Store {
            shared,
            flusher_thread: Mutex::new(Some(handle)),
            create_lock: Mutex::new(()),
            maintenance: Mutex::new(cleaner::CleanerState::default()),
        }))
    }

    fn partition_dir(&self, tp: &TopicPartition) -> PathBuf {
        self.shared.config.data_dir.join(tp.to_string())
    }

    /// Creates an empty partition; `AlreadyExists` if present.
    pub fn create_partition(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
    ) -> Result<Arc<PartitionLog>, StoreError> {
        self.shared.check_writable()?;
        let _guard = self.create_lock.lock();
        if self.shared.partitions.read().contains_key(tp) {
            return Err(StoreError::AlreadyExists(tp.clone()));
        }
        if !config::is_legal_topic_name(&tp.topic)
            || tp.partition < 0
            || TopicPartition::from_dir_name(&tp.to_string()).as_ref() != Some(tp)
        {
            return Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid topic partition {tp:?}"),
            )));
        }
        let storage = &*self.shared.storage;
        let dir = self.partition_dir(tp);
        let io = |what: &str, e| StoreError::io(format!("{what} {}", dir.display()), e);
        // A directory left by a crashed create or an unloadable partition: start afresh.
        if dir.exists() {
            storage.remove_dir_all(&dir).map_err(|e| io("remove", e))?;
        }
        storage.create_dir_all(&dir).map_err(|e| io("create", e))?;
        log::write_config(storage, &dir, &config, false)?;
        let seg_path = segment::segment_path(&dir, 0, segment::LOG_SUFFIX);
        self.shared
            .cache
            .get(&seg_path, true)
            .map_err(|e| StoreError::io(format!("create {}", seg_path.display()), e))?;
        storage.sync_dir(&dir).map_err(|e| io("fsync", e))?;
        storage
            .sync_dir(&self.shared.config.data_dir)
            .map_err(|e| io("fsync parent of", e))?;
        let mut segments = BTreeMap::new();
        segments.insert(0, segment::Segment::new_empty(0, &config, log::now_ms()));
        let parts = log::LogParts {
            segments,
            log_start_offset: 0,
            log_end_offset: 0,
            high_watermark: 0,
            recovery_point: 0,
            producers: Default::default(),
            epochs: Default::default(),
            pending: Default::default(),
            cleaner_point: 0,
        };
        let log =
            PartitionLog::from_parts(tp.clone(), dir, Arc::clone(&self.shared), config, parts);
        self.shared
            .partitions
            .write()
            .insert(tp.clone(), Arc::clone(&log));
        Ok(log)
    }

    /// Deletes a partition crash-safely: rename to `<dir>.<nanos>-delete`, fsync, remove.
    pub fn delete_partition(&self, tp: &TopicPartition) -> Result<(), StoreError> {
        self.shared.check_writable()?;
        let _guard = self.create_lock.lock();
        let Some(log) = self.shared.partitions.write().remove(tp) else {
            return Err(StoreError::UnknownPartition(tp.clone()));
        };
        log.deleted.store(true, Ordering::SeqCst);
        let _inner = log.inner.lock();
        log.fail_waiters(log::Failure::Deleted);
        let dir = self.partition_dir(tp);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let doomed = self
            .shared
            .config
            .data_dir
            .join(format!("{tp}.{nanos}-delete"));
        let storage = &*self.shared.storage;
        storage
            .rename(&dir, &doomed)
            .map_err(|e| StoreError::io(format!("rename {}", dir.display()), e))?;
        storage
            .sync_dir(&self.shared.config.data_dir)
            .map_err(|e| {
                StoreError::io(
                    format!("fsync {}", self.shared.config.data_dir.display()),
                    e,
                )
            })?;
        self.shared.cache.invalidate_dir(&dir);
        storage
            .remove_dir_all(&doomed)
            .map_err(|e| StoreError::io(format!("remove {}", doomed.display()), e))?;
        Ok(())
    }

    /// The partition's log, if hosted here.
    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<PartitionLog>> {
        self.shared.partitions.read().get(tp).cloned()
    }

    /// All hosted partitions, sorted.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self.shared.partitions.read().keys().cloned().collect();
        v.sort();
        v
    }

    /// Notified (`notify_waiters`) every time any partition's high watermark advances.
    pub fn data_available(&self) -> Arc<Notify> {
        Arc::clone(&self.shared.data_available)
    }

    /// Whether the data dir is offline, and why.
    pub fn offline_reason(&self) -> Option<String> {
        self.shared.offline.lock().clone()
    }

    /// One bounded tick of background work: retention, compaction, segment.ms rolls, flush.ms,
    /// offset checkpoints.
    pub fn run_maintenance(&self, now_ms: i64) -> Result<MaintenanceReport, StoreError> {
        self.shared.check_writable()?;
        let mut cleaner = self.maintenance.lock();
        let logs: Vec<Arc<PartitionLog>> =
            self.shared.partitions.read().values().cloned().collect();
        let mut report = MaintenanceReport::default();
        for log in &logs {
            let result = (|| -> Result<(), StoreError> {
                if log.maybe_roll_for_time(now_ms)? {
                    report.segments_rolled += 1;
                }
                log.maybe_flush_for_time(now_ms);
                report.segments_deleted += retention::apply_retention(log, now_ms)?;
                Ok(())
            })();
            match result {
                // Deleted during this tick: its files are gone, nothing to maintain.
                Err(_) if log.deleted.load(Ordering::SeqCst) => {}
                other => other?,
            }
        }
        let (cleaned, bytes) = cleaner.run(&logs, now_ms)?;
        report.partitions_cleaned += cleaned;
        report.bytes_cleaned += bytes;
        self.shared.write_offset_checkpoints()?;
        Ok(report)
    }

    /// Flushes everything, writes checkpoints and the clean-shutdown marker. After this, appends
    /// fail with `ShutDown`. Idempotent.
    pub fn shutdown(&self) -> Result<(), StoreError> {
        if self.shared.shut_down.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Let a running maintenance tick (retention, a cleaner swap) finish first.
        let _maintenance = self.maintenance.lock();
        self.stop_flusher();
        if let Some(reason) = self.offline_reason() {
            return Err(StoreError::Offline(reason));
        }
        let logs: Vec<Arc<PartitionLog>> =
            self.shared.partitions.read().values().cloned().collect();
        for log in &logs {
            log.close()?;
        }
        self.shared.write_offset_checkpoints()?;
        let marker = self.shared.config.data_dir.join(CLEAN_SHUTDOWN_FILE);
        checkpoint::write_atomic(&*self.shared.storage, &marker, b"")
            .map_err(|e| StoreError::io(format!("write {}", marker.display()), e))?;
        for log in &logs {
            log.fail_waiters(log::Failure::ShutDown);
        }
        Ok(())
    }

    fn stop_flusher(&self) {
        self.shared.flusher.stop();
        if let Some(handle) = self.flusher_thread.lock().take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop_flusher();
        // Break the partition ↔ shared reference cycle.
        self.shared.partitions.write().clear();
    }
}

#[cfg(test)]
mod tests {
    /// The front end shares these across tasks: they must stay `Send + Sync`, and the future of
    /// `wait_durable` must be `Send`.
    #[test]
    fn public_types_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>(_: &T) {}
        send_sync::<super::Store>();
        send_sync::<super::PartitionLog>();
        send_sync::<super::StoreError>();
        send_sync::<super::AppendError>();
        let dir = tempfile::tempdir().expect("tmp");
        let store = super::Store::open(super::StoreConfig::new(dir.path())).expect("open");
        let log = store
            .create_partition(&super::TopicPartition::new("t", 0), Default::default())
            .expect("create");
        send(&log.wait_durable(0));
    }
}
