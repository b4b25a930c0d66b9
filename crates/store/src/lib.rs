//! Millrace's native partitioned segment store (see `API.md` for the contract the front end codes
//! against, and `docs/log-format.md` for every byte on disk and the crash analysis).
//!
//! Where it sits: the front end decodes Produce/Fetch/ListOffsets/DeleteRecords and calls
//! `Store`/`PartitionLog`; nothing here knows the Kafka wire protocol beyond the v2 record batch,
//! whose 61-byte header `batch.rs` parses itself (this crate does not import `kafka-protocol`).
//!
//! Read first: `Store` (this file), `log::PartitionLog`, `segment::Segment`, `recovery`.
//!
//! Module layers, each using only those before it (no cycles): file formats and parts (`batch`,
//! `batch_walk`, `reader`, `records`, `compression`, `validator`, `control`, `checkpoint`,
//! `partition_dir`, `index`, `time_index`, `leader_epoch`, `producer_state`, `segment`,
//! `storage`, `file_cache`, `watchers`, `config`, `limits`, `error`) → `flusher`, `shared` → `log`
//! (the one owner of a partition's state) → `recovery`, `retention`, `cleaner` (which call
//! methods on the log) → `Store` (this file). `testing` holds batch fixtures for tests.
//!
//! Invariants: one directory `<topic>-<partition>` per partition in exactly one of the log dirs
//! (`data_dir` and `extra_log_dirs`, see `log_dirs`), holding its topic id
//! (`partition.metadata`); every file mutation goes through `storage::Storage`; a dir's
//! clean-shutdown marker exists only between a successful `shutdown` and the next `open`; a log
//! dir that saw an I/O error of unknown outcome goes offline (appends to its partitions fail with
//! `StoreError::Offline`) instead of panicking, and the other dirs go on; the store deletes a
//! partition directory only when asked to (`delete_partition`) or once a replica move copied it
//! elsewhere (`replica_move`); `set_aside_partition` renames, never deletes.
//!
//! Locking: a `RwLock` around the partition map (held briefly); one mutex per partition
//! (`log/`); the flusher queue's own mutex (`flusher.rs`); the file cache's mutex
//! (`file_cache.rs`); each log dir's offline state and checkpoint table in `shared.rs`; the
//! replica moves' table (`replica_move.rs`). Lock order: maintenance → partition map →
//! partition → file cache → shared's locks, and moves' table → partition map / a log's location;
//! the flusher queue is a leaf.

pub mod batch;
pub mod batch_walk;
mod checkpoint;
mod cleaner;
pub mod compression;
mod config;
mod control;
mod damage;
mod error;
mod file_cache;
mod flusher;
pub mod free_space;
mod index;
mod leader_epoch;
pub mod limits;
mod log;
mod log_dirs;
mod partition_dir;
mod producer_state;
pub mod reader;
pub mod records;
mod recovery;
mod replica_move;
mod retention;
mod scrub;
mod segment;
mod shared;
pub mod storage;
pub mod testing;
mod time_index;
pub mod validator;
mod watchers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use config::{
    CleanupPolicy, ConfigParseError, FlushPolicy, LogConfig, StoreConfig, TimestampType,
    TopicPartition,
};
pub use control::{parse_marker, Marker};
pub use damage::DamagedRange;
pub use error::{AppendError, ReadError, StoreError};
pub use log::{
    AppendInfo, FileSlice, PartitionLog, ReadResult, ReadUpperBound, Records, RepairError,
    ReplicatedAppend, TierSegment, NOTHING_COPIED,
};
pub use partition_dir::{
    inspect_partition_dir, partition_dirs, PartitionDirInfo, TopicId, ORPHANED_SUFFIX,
};
pub use producer_state::{AbortedTxn, BatchMetadata, ProducerStateEntry};
pub use replica_move::{LogDirInfo, MoveError};
pub use scrub::ScrubSettings;
pub use shared::{DurableListener, OfflineListener};
pub use watchers::Watchers;

use checkpoint::CLEAN_SHUTDOWN_FILE;
use limits::{SHUTDOWN_THREADS, SYNCFS_ROUND_PARTITIONS_MIN};
use partition_dir::DELETE_SUFFIX;
use shared::{LogDir, StoreShared};
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
    /// Writes this tick could not make for lack of space (retried next tick).
    pub no_space_errors: usize,
}

/// The store: all partition logs of every log dir. `Send + Sync`, used as `Arc<Store>`.
pub struct Store {
    shared: Arc<StoreShared>,
    partitions: RwLock<HashMap<TopicPartition, Arc<PartitionLog>>>,
    flusher_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    create_lock: Mutex<()>,
    /// One `syncfs` of the data directory's file system (Linux 5.8+ only) for batched partition
    /// creation, through its own handle on the data directory: Linux reports a writeback error
    /// once per handle, so the flusher's grouped rounds keep their own and each sees every error.
    create_sync_all: Option<flusher::SyncAll>,
    maintenance: Mutex<cleaner::CleanerState>,
    /// The clean-shutdown marker was there when the store opened, in every log dir.
    opened_clean: bool,
    /// The scrubber thread and its stop flag, once started (`start_scrubber`).
    scrubber: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>>,
    /// Replica moves between log dirs in progress (`AlterReplicaLogDirs`).
    moves: replica_move::Moves,
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) every log dir; see `API.md`.
    pub fn open(config: StoreConfig) -> Result<Arc<Store>, StoreError> {
        Store::open_with_storage(config, Arc::new(OsStorage))
    }

    /// Like `open`, with every file mutation going through `storage` (crash-injection tests).
    ///
    /// Each log dir is scanned on its own (`log_dirs::scan`): a dir that cannot be created or
    /// listed starts offline (its partitions are not served) unless every dir fails, which fails
    /// the open. A partition found live in two dirs fails the open, as Kafka refuses to start.
    pub fn open_with_storage(
        config: StoreConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<Arc<Store>, StoreError> {
        let shared = Arc::new(StoreShared::new(config, storage));
        let scanned = log_dirs::scan(&shared)?;
        let clean = scanned.clean;
        let mut partitions = HashMap::new();
        for (log_dir, found) in scanned.partitions {
            let log = recovery::load_partition(
                &shared,
                &log_dir,
                found.tp.clone(),
                &found.dir,
                found.checkpoints,
                found.clean,
            )?;
            partitions.insert(found.tp, log);
        }
        log_dirs::remove_clean_markers(&shared, &scanned.markers)?;
        let queue = Arc::clone(&shared.flusher);
        let interval = shared.config.flush_interval;
        // Grouped rounds sync through one handle on the data directory, opened before the
        // store writes anything more, so that it sees every later writeback error. One `syncfs`
        // covers one file system: with several log dirs every round syncs file by file.
        let data_dir = shared.config.data_dir.clone();
        let sync_all = || -> Result<Option<flusher::SyncAll>, StoreError> {
            if !shared.storage.sync_filesystem_reports_errors() || shared.dirs.len() != 1 {
                return Ok(None);
            }
            let storage = Arc::clone(&shared.storage);
            let dir = std::fs::File::open(&data_dir)
                .map_err(|e| StoreError::io(format!("open {}", data_dir.display()), e))?;
            Ok(Some(Box::new(move || storage.sync_filesystem(&dir))))
        };
        let flusher_sync_all = sync_all()?;
        let create_sync_all = sync_all()?;
        let handle = std::thread::Builder::new()
            .name("millrace-flusher".into())
            .spawn(move || flusher::run(queue, interval, flusher_sync_all))
            .map_err(|e| StoreError::io("spawn flusher thread", e))?;
        Ok(Arc::new(Store {
            shared,
            partitions: RwLock::new(partitions),
            flusher_thread: Mutex::new(Some(handle)),
            create_lock: Mutex::new(()),
            create_sync_all,
            maintenance: Mutex::new(cleaner::CleanerState::default()),
            opened_clean: clean,
            scrubber: Mutex::new(None),
            moves: replica_move::Moves::default(),
        }))
    }

    /// Whether the previous run of every log dir ended with a clean shutdown (the marker was
    /// there when the store opened): recovery was skipped, nothing unflushed could be lost.
    pub fn opened_after_clean_shutdown(&self) -> bool {
        self.opened_clean
    }

    /// Creates an empty partition of the topic `topic_id` (recorded in its directory as
    /// `partition.metadata`); `AlreadyExists` if present.
    pub fn create_partition(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
        topic_id: TopicId,
    ) -> Result<Arc<PartitionLog>, StoreError> {
        self.shared.check_running()?;
        let _guard = self.create_lock.lock();
        let log_dir = self.place_new_partition()?;
        self.write_new_partition(&log_dir, tp, &config, topic_id, true)?;
        Ok(self.insert_new_partition(log_dir, tp, config, topic_id))
    }

    /// Creates many empty partitions, as `create_partition` each, with one answer per request in
    /// order (a partition named twice: `AlreadyExists` the second time). With at least
    /// `SYNCFS_ROUND_PARTITIONS_MIN` of them on a kernel whose `syncfs` reports writeback errors,
    /// their files and directories are written unsynced and made durable by one `syncfs` before
    /// any of them joins the store (a crash before that leaves directories no log was ever
    /// served from: recovery loads them as empty logs, torn files counting as missing);
    /// otherwise each is created and synced on its own.
    pub fn create_partitions(
        &self,
        batch: Vec<(TopicPartition, LogConfig, TopicId)>,
    ) -> Vec<Result<Arc<PartitionLog>, StoreError>> {
        let sync_all = match &self.create_sync_all {
            Some(sync_all) if batch.len() >= SYNCFS_ROUND_PARTITIONS_MIN => sync_all,
            _ => {
                return batch
                    .into_iter()
                    .map(|(tp, config, id)| self.create_partition(&tp, config, id))
                    .collect()
            }
        };
        let _guard = self.create_lock.lock();
        let mut named = std::collections::HashSet::new();
        // Grouped creation happens only with one log dir (see `open`): every partition goes there.
        let log_dir = match self.place_new_partition() {
            Ok(d) => d,
            Err(e) => {
                let reason = e.to_string();
                return batch
                    .iter()
                    .map(|_| Err(StoreError::Offline(reason.clone())))
                    .collect();
            }
        };
        let written: Vec<Result<(), StoreError>> = batch
            .iter()
            .map(|(tp, config, id)| {
                self.shared.check_running()?;
                log_dir.check_online()?;
                if !named.insert(tp) {
                    return Err(StoreError::AlreadyExists(tp.clone()));
                }
                self.write_new_partition(&log_dir, tp, config, *id, false)
            })
            .collect();
        if written.iter().all(Result::is_err) {
            // Nothing was written (an offline store, say): nothing to sync.
            return written
                .into_iter()
                .filter_map(Result::err)
                .map(Err)
                .collect();
        }
        if let Err(e) = sync_all() {
            // The error may be any file's on this file system, another partition's unflushed
            // appends among them, and this handle will not report it again: as a grouped
            // flush round does, take the store offline.
            let reason = format!("syncfs {}: {e}", log_dir.path().display());
            log_dir.mark_offline(reason.clone());
            return batch
                .iter()
                .map(|_| Err(StoreError::Offline(reason.clone())))
                .collect();
        }
        batch
            .into_iter()
            .zip(written)
            .map(|((tp, config, id), written)| {
                written.map(|()| self.insert_new_partition(Arc::clone(&log_dir), &tp, config, id))
            })
            .collect()
    }

    /// Writes a new partition's directory, `config.json`, `partition.metadata` and first
    /// segment; with `sync`, each file and both directories are synced before it returns.
    /// Called under `create_lock`.
    fn write_new_partition(
        &self,
        log_dir: &LogDir,
        tp: &TopicPartition,
        config: &LogConfig,
        topic_id: TopicId,
        sync: bool,
    ) -> Result<(), StoreError> {
        if self.partitions.read().contains_key(tp) {
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
        let dir = log_dir.path().join(tp.to_string());
        let io = |what: &str, e| StoreError::io(format!("{what} {}", dir.display()), e);
        // A directory left by a crashed create (never loaded, so never acknowledged anything):
        // start afresh.
        if dir.exists() {
            storage.remove_dir_all(&dir).map_err(|e| io("remove", e))?;
        }
        storage.create_dir_all(&dir).map_err(|e| io("create", e))?;
        // The new directory is fsynced once below (or the file system by the batch).
        let durability = if sync {
            checkpoint::Durability::FileOnly
        } else {
            checkpoint::Durability::Unsynced
        };
        partition_dir::write_config(storage, &dir, config, durability)?;
        partition_dir::write_topic_id(storage, &dir, topic_id, durability)?;
        let seg_path = segment::segment_path(&dir, 0, segment::LOG_SUFFIX);
        self.shared
            .cache
            .get(&seg_path, true)
            .map_err(|e| StoreError::io(format!("create {}", seg_path.display()), e))?;
        if sync {
            storage.sync_dir(&dir).map_err(|e| io("fsync", e))?;
            storage
                .sync_dir(log_dir.path())
                .map_err(|e| io("fsync parent of", e))?;
        }
        Ok(())
    }

    /// The log of a partition `write_new_partition` wrote (and something synced), now served.
    fn insert_new_partition(
        &self,
        log_dir: Arc<LogDir>,
        tp: &TopicPartition,
        config: LogConfig,
        topic_id: TopicId,
    ) -> Arc<PartitionLog> {
        let dir = log_dir.path().join(tp.to_string());
        let location = log::Location { dir, log_dir };
        let log = PartitionLog::create(
            Arc::clone(&self.shared),
            tp.clone(),
            location,
            config,
            topic_id,
        );
        self.partitions.write().insert(tp.clone(), Arc::clone(&log));
        log
    }

    /// Takes a partition out of the store and renames its directory to `<dir><suffix>`, fsyncing
    /// the data dir. Returns the new path.
    fn remove_from_store(&self, tp: &TopicPartition, suffix: &str) -> Result<PathBuf, StoreError> {
        self.shared.check_running()?;
        let location = match self.partitions.read().get(tp) {
            Some(log) => log.location(),
            None => return Err(StoreError::UnknownPartition(tp.clone())),
        };
        location.log_dir.check_online()?;
        // A move in progress of this partition stops (its copy is dropped) before the rename.
        self.moves.cancel_and_wait(tp);
        let Some(log) = self.partitions.write().remove(tp) else {
            return Err(StoreError::UnknownPartition(tp.clone()));
        };
        log.mark_deleted();
        let location = log.location();
        let dir = location.dir;
        let parent = location.log_dir.path();
        let target = parent.join(format!("{tp}{suffix}"));
        let storage = &*self.shared.storage;
        storage
            .rename(&dir, &target)
            .map_err(|e| StoreError::io(format!("rename {}", dir.display()), e))?;
        storage
            .sync_dir(parent)
            .map_err(|e| StoreError::io(format!("fsync {}", parent.display()), e))?;
        self.shared.cache.invalidate_dir(&dir);
        Ok(target)
    }

    /// Deletes a partition crash-safely: rename to `<dir>.<nanos>-delete`, fsync, remove.
    pub fn delete_partition(&self, tp: &TopicPartition) -> Result<(), StoreError> {
        let _guard = self.create_lock.lock();
        let doomed = self.remove_from_store(tp, &format!(".{}{DELETE_SUFFIX}", unix_nanos()))?;
        self.shared
            .storage
            .remove_dir_all(&doomed)
            .map_err(|e| StoreError::io(format!("remove {}", doomed.display()), e))
    }

    /// Sets a partition aside without deleting anything: its directory is renamed to
    /// `<dir>.<nanos>.orphaned` (which no later `open` loads) and the partition leaves the store.
    /// For directories the cluster metadata does not name. Returns the new path.
    pub fn set_aside_partition(&self, tp: &TopicPartition) -> Result<PathBuf, StoreError> {
        let _guard = self.create_lock.lock();
        self.remove_from_store(tp, &format!(".{}{ORPHANED_SUFFIX}", unix_nanos()))
    }

    /// The partition's log, if hosted here.
    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<PartitionLog>> {
        self.partitions.read().get(tp).cloned()
    }

    /// All hosted partitions, sorted.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self.partitions.read().keys().cloned().collect();
        v.sort();
        v
    }

    /// Calls `listener` (from the flusher thread, with no store lock held) each time a flush round
    /// made a partition's appended data durable under `log.flush.policy=batch`. Under `always` and
    /// `never` the durable offset moves inside `append` itself, and the caller steps after it.
    pub fn set_durable_listener(&self, listener: DurableListener) {
        self.shared.set_durable_listener(listener);
    }

    /// Starts the scrubber thread (`scrub.rs`): full passes over every sealed segment every
    /// `settings.interval` at most `settings.bytes_per_sec`, and at once over a partition a read
    /// found a bad batch in. Stopped by `shutdown`. A second call does nothing.
    pub fn start_scrubber(self: &Arc<Self>, settings: ScrubSettings) -> Result<(), StoreError> {
        let mut slot = self.scrubber.lock();
        if slot.is_some() {
            return Ok(());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let store = Arc::downgrade(self);
        let thread_stop = Arc::clone(&stop);
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("millrace-scrubber".into())
            .spawn(move || {
                let logs = || {
                    store.upgrade().map_or_else(Vec::new, |s| {
                        let mut all: Vec<Arc<PartitionLog>> =
                            s.partitions.read().values().cloned().collect();
                        all.sort_by(|a, b| a.topic_partition().cmp(b.topic_partition()));
                        all
                    })
                };
                let log_of = |tp: &TopicPartition| store.upgrade().and_then(|s| s.partition(tp));
                scrub::run(settings, &shared.damage, logs, log_of, &thread_stop);
            })
            .map_err(|e| StoreError::io("spawn scrubber thread", e))?;
        *slot = Some((stop, handle));
        Ok(())
    }

    fn stop_scrubber(&self) {
        if let Some((stop, handle)) = self.scrubber.lock().take() {
            stop.store(true, Ordering::SeqCst);
            let _ = handle.join();
        }
    }

    /// Scans every sealed segment of `tp` now, on this thread and unpaced, as the scrubber does;
    /// returns the partition's damaged ranges.
    pub fn scrub_partition(&self, tp: &TopicPartition) -> Result<Vec<DamagedRange>, StoreError> {
        let log = self
            .partition(tp)
            .ok_or_else(|| StoreError::UnknownPartition(tp.clone()))?;
        let stop = AtomicBool::new(false);
        scrub::scrub_log(&log, &mut scrub::Pace::new(u64::MAX), &stop);
        Ok(log.damaged_ranges())
    }

    /// Partitions holding damaged batches (repair reads their `damaged_ranges`).
    pub fn damaged_partitions(&self) -> Vec<TopicPartition> {
        self.shared.damage.damaged()
    }

    /// Changes whenever a partition's damage is found or repaired, or a read asks for a scan.
    pub fn damage_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.damage.subscribe()
    }

    /// Calls `listener` when a log dir goes offline (once per dir), from the thread that saw the
    /// error, possibly under a partition lock: it must return at once and not call the store (the
    /// broker wakes its heartbeat, which then asks `offline_partitions`).
    pub fn set_offline_listener(&self, listener: OfflineListener) {
        if let Some(dir) = self.shared.dirs.first() {
            dir.set_offline_listener(listener);
        }
    }

    /// Why the store cannot write at all: every log dir is offline (the reasons joined). With
    /// one log dir, whether it is offline. See `offline_log_dirs` for each dir.
    pub fn offline_reason(&self) -> Option<String> {
        let reasons: Vec<String> = self
            .shared
            .dirs
            .iter()
            .map(|d| d.offline_reason())
            .collect::<Option<Vec<String>>>()?;
        Some(reasons.join("; "))
    }

    /// The offline log dirs and why each went offline, in `log.dirs` order.
    pub fn offline_log_dirs(&self) -> Vec<(PathBuf, String)> {
        self.shared
            .dirs
            .iter()
            .filter_map(|d| Some((d.path().to_path_buf(), d.offline_reason()?)))
            .collect()
    }

    /// One bounded tick of background work: retention, compaction, segment.ms rolls, flush.ms,
    /// offset checkpoints.
    ///
    /// Partitions of an offline log dir are skipped; a dir whose checkpoints cannot be written goes
    /// offline (the other dirs keep going). `Offline` only when every dir is.
    pub fn run_maintenance(&self, now_ms: i64) -> Result<MaintenanceReport, StoreError> {
        self.shared.check_running()?;
        if let Some(reason) = self.offline_reason() {
            return Err(StoreError::Offline(reason));
        }
        let mut cleaner = self.maintenance.lock();
        let logs: Vec<Arc<PartitionLog>> = self
            .partitions
            .read()
            .values()
            .filter(|log| !log.log_dir().is_offline())
            .cloned()
            .collect();
        let mut report = MaintenanceReport::default();
        for log in &logs {
            let result = (|| -> Result<(), StoreError> {
                match log.maybe_roll_for_time(now_ms) {
                    Ok(true) => report.segments_rolled += 1,
                    Ok(false) => {}
                    // A full disk must not stop retention, which frees it: roll later.
                    Err(e) if e.is_no_space() => report.no_space_errors += 1,
                    Err(e) => return Err(e),
                }
                log.maybe_flush_for_time(now_ms);
                report.segments_deleted += retention::apply_retention(log, now_ms)?;
                Ok(())
            })();
            match result {
                // Deleted during this tick: its files are gone, nothing to maintain.
                Err(_) if log.is_deleted() => {}
                Err(e) if e.is_no_space() => report.no_space_errors += 1,
                // Its log dir went offline meanwhile: the other dirs' partitions go on.
                Err(StoreError::Offline(_)) => {}
                other => other?,
            }
        }
        match cleaner.run(&self.shared, &logs, now_ms) {
            Ok((cleaned, bytes)) => {
                report.partitions_cleaned += cleaned;
                report.bytes_cleaned += bytes;
            }
            Err(e) if e.is_no_space() => report.no_space_errors += 1,
            Err(e) => return Err(e),
        }
        // Retried at the next tick (the table forgets what it last wrote on failure).
        report.no_space_errors += log_dirs::write_all_checkpoints(&self.shared);
        if report.no_space_errors > 0 {
            tracing::warn!(
                errors = report.no_space_errors,
                "maintenance found a log dir full; what it could not write is retried next tick"
            );
        }
        Ok(report)
    }

    /// Flushes everything, writes checkpoints and the clean-shutdown marker. After this, appends
    /// fail with `ShutDown`. Idempotent.
    pub fn shutdown(&self) -> Result<(), StoreError> {
        if self.shared.set_shut_down() {
            return Ok(());
        }
        self.stop_scrubber();
        // Let a running maintenance tick (retention, a cleaner swap) finish first.
        // Stop replica moves (their copies are dropped at the next open), then let a running
        // maintenance tick (retention, a cleaner swap) finish.
        self.moves.cancel_all_and_wait();
        let _maintenance = self.maintenance.lock();
        self.stop_flusher();
        let all: Vec<Arc<PartitionLog>> = self.partitions.read().values().cloned().collect();
        // An offline dir gets no marker (its next open recovers it); the others close cleanly.
        let logs: Vec<Arc<PartitionLog>> = all
            .iter()
            .filter(|log| !log.log_dir().is_offline())
            .cloned()
            .collect();
        close_all(&logs)?;
        // Every partition's files are durable now (`close_all` returned only after each
        // `close` did): the checkpoints and the marker may vouch for them.
        for log_dir in &self.shared.dirs {
            if log_dir.is_offline() {
                continue;
            }
            log_dir.write_offset_checkpoints()?;
            let marker = log_dir.path().join(CLEAN_SHUTDOWN_FILE);
            checkpoint::write_atomic(&*self.shared.storage, &marker, b"")
                .map_err(|e| StoreError::io(format!("write {}", marker.display()), e))?;
        }
        for log in &all {
            log.fail_waiters(log::Failure::ShutDown);
        }
        match self.offline_log_dirs().into_iter().next() {
            Some((dir, reason)) => Err(StoreError::Offline(format!("{}: {reason}", dir.display()))),
            None => Ok(()),
        }
    }

    fn stop_flusher(&self) {
        self.shared.flusher.stop();
        if let Some(handle) = self.flusher_thread.lock().take() {
            let _ = handle.join();
        }
    }
}

/// Closes every log (`PartitionLog::close`: fsyncs, active indexes, a producer snapshot, a
/// directory fsync) on up to `SHUTDOWN_THREADS` threads at once, and returns once all are closed
/// or one failed. After the first error no further log is started; the error is returned (the
/// caller then writes no marker).
fn close_all(logs: &[Arc<PartitionLog>]) -> Result<(), StoreError> {
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<StoreError>> = Mutex::new(None);
    // Each call takes logs one at a time until none is left or one failed: every log is closed
    // at most once, so the loop ends after at most `logs.len()` closes in all.
    let work = || loop {
        if failed.lock().is_some() {
            return;
        }
        let Some(log) = logs.get(next.fetch_add(1, Ordering::SeqCst)) else {
            return;
        };
        if let Err(e) = log.close() {
            failed.lock().get_or_insert(e);
            return;
        }
    };
    let helpers = SHUTDOWN_THREADS.min(logs.len()).saturating_sub(1);
    std::thread::scope(|scope| {
        for i in 0..helpers {
            // A helper that cannot be spawned leaves its share to the others (this thread
            // always works too), so a failed spawn costs time, never a log.
            let _ = std::thread::Builder::new()
                .name(format!("millrace-close-{i}"))
                .spawn_scoped(scope, work);
        }
        work();
    });
    match failed.into_inner() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop_flusher();
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
            .create_partition(
                &super::TopicPartition::new("t", 0),
                Default::default(),
                super::TopicId::from_bytes([1; 16]),
            )
            .expect("create");
        send(&log.wait_durable(0));
    }
}
