//! What the store, every partition log and the flusher share: the store config, the `Storage`
//! every file mutation goes through, the open-file cache, the flusher queue, the "data available"
//! notification, whether the store is shut down, and one `LogDir` per log dir (`log.dirs`): its
//! path, whether it is offline, and the table behind its three offset checkpoints.
//!
//! Where it sits: below `log` (each `PartitionLog` holds an `Arc<StoreShared>` and the
//! `Arc<LogDir>` of the dir it lives in), above the file formats. It knows no partition log: the
//! checkpoint table holds each partition's `PartitionOffsets` (the very atomics its log updates),
//! and waiters learn that their log dir went offline from a watch channel, so `log` → `shared` is
//! the only direction.
//!
//! Invariants: a log dir's offline state is its own (an I/O error in one dir takes only that dir's
//! partitions offline, as Kafka's `LogDirFailureChannel` does); once offline, offline until the
//! process restarts (a dir that comes back is rescanned by the next `Store::open`, never put back
//! into service in place); a checkpoint written from a table never claims more than the logs' own
//! offsets did while it was written (the log lowers its recovery point before it truncates, and
//! raises it only after the fsyncs that justify it).
//!
//! Locking: each dir's offline state and checkpoint table have their own locks, taken last (no
//! other store lock is taken while holding them). A table's lock is held across the checkpoint
//! file writes so that two writers never interleave.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::checkpoint::{self, HIGH_WATERMARK_FILE, LOG_START_FILE, RECOVERY_POINT_FILE};
use crate::config::{StoreConfig, TopicPartition};
use crate::damage::DamageBoard;
use crate::error::StoreError;
use crate::file_cache::FileCache;
use crate::flusher::FlushQueue;
use crate::storage::Storage;

/// The offsets of one partition that the data-dir checkpoints record. Written only by the
/// partition's own log (`log/`); read by the checkpoint writer.
#[derive(Debug)]
pub(crate) struct PartitionOffsets {
    log_start: AtomicI64,
    high_watermark: AtomicI64,
    recovery_point: AtomicI64,
}

impl PartitionOffsets {
    pub(crate) fn new(log_start: i64, high_watermark: i64, recovery_point: i64) -> Self {
        PartitionOffsets {
            log_start: AtomicI64::new(log_start),
            high_watermark: AtomicI64::new(high_watermark),
            recovery_point: AtomicI64::new(recovery_point),
        }
    }

    pub(crate) fn log_start(&self) -> i64 {
        self.log_start.load(Ordering::SeqCst)
    }

    pub(crate) fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::SeqCst)
    }

    pub(crate) fn recovery_point(&self) -> i64 {
        self.recovery_point.load(Ordering::SeqCst)
    }

    /// The log's own atomics, for its single writer (`log/`).
    pub(crate) fn log_start_atomic(&self) -> &AtomicI64 {
        &self.log_start
    }

    pub(crate) fn high_watermark_atomic(&self) -> &AtomicI64 {
        &self.high_watermark
    }

    pub(crate) fn recovery_point_atomic(&self) -> &AtomicI64 {
        &self.recovery_point
    }
}

/// Recovery points, log start offsets and high watermarks, as last written.
type CheckpointMaps = [BTreeMap<TopicPartition, i64>; 3];

#[derive(Default)]
struct CheckpointTable {
    partitions: BTreeMap<TopicPartition, Arc<PartitionOffsets>>,
    last_written: Option<CheckpointMaps>,
}

/// Told (once per dir) that a log dir went offline; it may run under a partition lock, so it must
/// not block or call back into the store (see `Store::set_offline_listener`).
pub type OfflineListener = Arc<dyn Fn(&Path) + Send + Sync>;

/// One log dir (an entry of `log.dirs`): its path, whether it is offline, and its checkpoints.
pub(crate) struct LogDir {
    path: PathBuf,
    storage: Arc<dyn Storage>,
    /// Told when this dir goes offline (shared by every dir of the store).
    offline_listener: Arc<parking_lot::RwLock<Option<OfflineListener>>>,
    offline: Mutex<Option<String>>,
    offline_flag: AtomicBool,
    offline_watch: watch::Sender<bool>,
    checkpoints: Mutex<CheckpointTable>,
}

/// State shared by the store, its partitions and the flusher.
pub(crate) struct StoreShared {
    pub(crate) config: StoreConfig,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) cache: FileCache,
    pub(crate) flusher: Arc<FlushQueue>,
    /// Every log dir, in `log.dirs` order (the first is `config.data_dir`).
    pub(crate) dirs: Vec<Arc<LogDir>>,
    shut_down: AtomicBool,
    durable_listener: parking_lot::RwLock<Option<DurableListener>>,
    /// Partitions with damaged batches, and those to scrub first (`damage.rs`).
    pub(crate) damage: DamageBoard,
}

/// Called by the flusher after a partition's durable offset moved (see
/// `Store::set_durable_listener`).
pub type DurableListener = Arc<dyn Fn(&TopicPartition) + Send + Sync>;

impl StoreShared {
    pub(crate) fn new(config: StoreConfig, storage: Arc<dyn Storage>) -> StoreShared {
        let offline_listener = Arc::new(parking_lot::RwLock::new(None));
        let dirs = config
            .log_dirs()
            .into_iter()
            .map(|path| {
                Arc::new(LogDir::new(
                    path,
                    Arc::clone(&storage),
                    Arc::clone(&offline_listener),
                ))
            })
            .collect();
        StoreShared {
            cache: FileCache::new(config.max_open_files, Arc::clone(&storage)),
            storage,
            flusher: Arc::new(FlushQueue::default()),
            dirs,
            shut_down: AtomicBool::new(false),
            durable_listener: parking_lot::RwLock::new(None),
            damage: DamageBoard::default(),
            config,
        }
    }

    pub(crate) fn set_durable_listener(&self, listener: DurableListener) {
        *self.durable_listener.write() = Some(listener);
    }

    /// Tells the listener that `tp`'s durable offset moved. Called with no store lock held.
    pub(crate) fn notify_durable(&self, tp: &TopicPartition) {
        let listener = self.durable_listener.read().clone();
        if let Some(l) = listener {
            l(tp);
        }
    }

    /// `ShutDown` once the store is shut down.
    pub(crate) fn check_running(&self) -> Result<(), StoreError> {
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(StoreError::ShutDown);
        }
        Ok(())
    }

    /// Marks the store shut down; returns whether it already was.
    pub(crate) fn set_shut_down(&self) -> bool {
        self.shut_down.swap(true, Ordering::SeqCst)
    }
}

impl LogDir {
    fn new(
        path: PathBuf,
        storage: Arc<dyn Storage>,
        offline_listener: Arc<parking_lot::RwLock<Option<OfflineListener>>>,
    ) -> LogDir {
        LogDir {
            path,
            storage,
            offline_listener,
            offline: Mutex::new(None),
            offline_flag: AtomicBool::new(false),
            offline_watch: watch::Sender::new(false),
            checkpoints: Mutex::new(CheckpointTable::default()),
        }
    }

    /// The directory (as configured in `log.dirs`).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `Offline` if the dir saw an I/O error of unknown outcome.
    pub(crate) fn check_online(&self) -> Result<(), StoreError> {
        if self.offline_flag.load(Ordering::SeqCst) {
            return Err(StoreError::Offline(
                self.offline_reason().unwrap_or_default(),
            ));
        }
        Ok(())
    }

    /// Whether the dir is offline (cheap: one atomic load).
    pub(crate) fn is_offline(&self) -> bool {
        self.offline_flag.load(Ordering::SeqCst)
    }

    pub(crate) fn offline_reason(&self) -> Option<String> {
        self.offline.lock().clone()
    }

    /// Takes the log dir offline: later writes to its partitions fail with `Offline`, and every
    /// `wait_durable` on them (which watches `offline_watch`) wakes with an error. Other dirs
    /// keep serving.
    pub(crate) fn mark_offline(&self, reason: String) {
        {
            let mut offline = self.offline.lock();
            if offline.is_some() {
                return;
            }
            tracing::error!(log_dir = %self.path.display(), %reason, "log directory going offline");
            millrace_metrics::global().log_offline_dirs.inc();
            *offline = Some(reason);
            self.offline_flag.store(true, Ordering::SeqCst);
        }
        self.offline_watch.send_replace(true);
        let listener = self.offline_listener.read().clone();
        if let Some(listener) = listener {
            listener(&self.path);
        }
    }

    /// Sets who is told when this dir goes offline (the same listener for every dir).
    pub(crate) fn set_offline_listener(&self, listener: OfflineListener) {
        *self.offline_listener.write() = Some(listener);
    }

    /// Becomes `true` when the log dir goes offline.
    pub(crate) fn offline_watch(&self) -> watch::Receiver<bool> {
        self.offline_watch.subscribe()
    }

    /// How many partitions the checkpoint table holds (those served from this dir).
    pub(crate) fn partition_count(&self) -> usize {
        self.checkpoints.lock().partitions.len()
    }

    /// Adds a partition's offsets to the checkpoint table.
    pub(crate) fn register_offsets(&self, tp: &TopicPartition, offsets: Arc<PartitionOffsets>) {
        self.checkpoints
            .lock()
            .partitions
            .insert(tp.clone(), offsets);
    }

    /// Removes a partition from the checkpoint table (deleted or set aside).
    pub(crate) fn unregister_offsets(&self, tp: &TopicPartition) {
        self.checkpoints.lock().partitions.remove(tp);
    }

    /// Writes the three data-dir offset checkpoint files (those that changed since last time).
    pub(crate) fn write_offset_checkpoints(&self) -> Result<(), StoreError> {
        let mut table = self.checkpoints.lock();
        let mut rp = BTreeMap::new();
        let mut ls = BTreeMap::new();
        let mut hw = BTreeMap::new();
        for (tp, offsets) in &table.partitions {
            rp.insert(tp.clone(), offsets.recovery_point());
            ls.insert(tp.clone(), offsets.log_start());
            hw.insert(tp.clone(), offsets.high_watermark());
        }
        let maps: CheckpointMaps = [rp, ls, hw];
        let names = [RECOVERY_POINT_FILE, LOG_START_FILE, HIGH_WATERMARK_FILE];
        for (i, (name, map)) in names.iter().zip(maps.iter()).enumerate() {
            if table.last_written.as_ref().and_then(|l| l.get(i)) == Some(map) {
                continue;
            }
            let path = self.path.join(name);
            if let Err(e) =
                checkpoint::write_atomic(&*self.storage, &path, &checkpoint::encode_offsets(map))
            {
                table.last_written = None;
                return Err(StoreError::io(format!("write {}", path.display()), e));
            }
        }
        table.last_written = Some(maps);
        Ok(())
    }

    /// One of the data-dir offset checkpoints; empty if missing or malformed (recovery then does
    /// more work, never loses data).
    pub(crate) fn read_offset_checkpoint(&self, name: &str) -> BTreeMap<TopicPartition, i64> {
        let path = self.path.join(name);
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
