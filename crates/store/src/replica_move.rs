//! Moving a hosted replica between log dirs while it keeps serving (Kafka's AlterReplicaLogDirs,
//! KIP-113), and what DescribeLogDirs reports about every dir.
//!
//! Where it sits: the front end's AlterReplicaLogDirs calls `Store::alter_replica_log_dir`, which
//! checks the request, creates `<target>/<topic>-<partition>.<id>-future` and hands the copy to a
//! mover thread, then answers at once (as Kafka does: the copy runs in the background and
//! DescribeLogDirs shows it as a future replica until the swap). The mover copies the sealed
//! segments without the partition lock, a second round for segments sealed meanwhile, then takes
//! the maintenance lock (no cleaner or retention pass in between) and the partition lock for the
//! tail and the swap (`log/relocate.rs`), then removes the old copy.
//!
//! Invariants: at most one move per partition; the live replica is served from its source dir
//! until the swap, and the future copy is never read; a move that fails or is cancelled removes
//! only its own future copy; a move whose log was truncated meanwhile starts its copy again (at
//! most `MOVE_COPY_ATTEMPTS` times, then fails).
//!
//! Locking: `Moves`' own mutex, never held across I/O; under it only the partition map and a
//! log's location are read (neither is ever held while taking it). The mover takes the store's
//! maintenance lock, then the partition lock, as `run_maintenance` does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::config::TopicPartition;
use crate::error::StoreError;
use crate::limits::MOVE_COPY_ATTEMPTS;
use crate::log::{copy_file, Copied, PartitionLog, SwapError};
use crate::log_dirs::{FUTURE_SUFFIX, MOVED_SUFFIX};
use crate::partition_dir::DELETE_SUFFIX;
use crate::shared::LogDir;
use crate::Store;

/// Why `alter_replica_log_dir` refused (each maps to Kafka's code in the front end).
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The path is not one of `log.dirs` → LOG_DIR_NOT_FOUND.
    #[error("{0} is not a log dir of this broker")]
    LogDirNotFound(String),
    /// The partition is not hosted here → REPLICA_NOT_AVAILABLE.
    #[error("partition {0} is not hosted on this broker")]
    ReplicaNotAvailable(TopicPartition),
    /// The source or target dir is offline, or the copy could not start → KAFKA_STORAGE_ERROR.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A log dir as DescribeLogDirs reports it.
#[derive(Debug, Clone)]
pub struct LogDirInfo {
    /// The path as configured in `log.dirs`.
    pub path: PathBuf,
    /// Why it is offline, if it is.
    pub offline: Option<String>,
    /// Its live replicas: partition, size in bytes.
    pub partitions: Vec<(TopicPartition, u64)>,
    /// Future replicas being copied into it: partition, bytes copied so far, offset lag.
    pub futures: Vec<(TopicPartition, u64, i64)>,
    /// File system size and space available to the broker (statvfs); `None` if unknown.
    pub total_bytes: Option<u64>,
    pub usable_bytes: Option<u64>,
}

struct Move {
    id: u64,
    target: Arc<LogDir>,
    cancel: Arc<AtomicBool>,
    copied_bytes: Arc<AtomicU64>,
    copied_to: Arc<AtomicI64>,
}

/// Moves in progress.
#[derive(Default)]
pub(crate) struct Moves {
    running: Mutex<HashMap<TopicPartition, Move>>,
    ended: Condvar,
    next_id: AtomicU64,
}

impl Moves {
    /// The target dir of every move in progress (for placement).
    pub(crate) fn targets(&self) -> Vec<Arc<LogDir>> {
        self.running
            .lock()
            .values()
            .map(|m| Arc::clone(&m.target))
            .collect()
    }

    /// Cancels the move of `tp`, if any, and waits until its mover has stopped.
    pub(crate) fn cancel_and_wait(&self, tp: &TopicPartition) {
        let mut running = self.running.lock();
        while let Some(m) = running.get(tp) {
            m.cancel.store(true, Ordering::SeqCst);
            self.ended.wait(&mut running);
        }
    }

    /// Cancels every move and waits for their movers (shutdown).
    pub(crate) fn cancel_all_and_wait(&self) {
        let mut running = self.running.lock();
        while !running.is_empty() {
            for m in running.values() {
                m.cancel.store(true, Ordering::SeqCst);
            }
            self.ended.wait(&mut running);
        }
    }

    fn finish(&self, tp: &TopicPartition, id: u64) {
        let mut running = self.running.lock();
        if running.get(tp).is_some_and(|m| m.id == id) {
            running.remove(tp);
        }
        self.ended.notify_all();
    }
}

impl Store {
    /// The log dir (as configured) of a hosted partition.
    pub fn log_dir_of(&self, tp: &TopicPartition) -> Option<PathBuf> {
        let log = self.partition(tp)?;
        Some(log.log_dir().path().to_path_buf())
    }

    /// Every log dir, in `log.dirs` order.
    pub fn log_dir_paths(&self) -> Vec<PathBuf> {
        self.shared
            .dirs
            .iter()
            .map(|d| d.path().to_path_buf())
            .collect()
    }

    /// What DescribeLogDirs reports: every dir, its replicas and sizes, its future replicas.
    pub fn describe_log_dirs(&self) -> Vec<LogDirInfo> {
        let logs: Vec<Arc<PartitionLog>> = self.partitions.read().values().cloned().collect();
        let mut infos: Vec<LogDirInfo> = self
            .shared
            .dirs
            .iter()
            .map(|d| {
                let (total, usable) = crate::free_space::total_and_free_bytes(d.path())
                    .ok()
                    .unzip();
                LogDirInfo {
                    path: d.path().to_path_buf(),
                    offline: d.offline_reason(),
                    partitions: Vec::new(),
                    futures: Vec::new(),
                    total_bytes: total,
                    usable_bytes: usable,
                }
            })
            .collect();
        let index = |dir: &Arc<LogDir>| self.shared.dirs.iter().position(|d| Arc::ptr_eq(d, dir));
        for log in &logs {
            if let Some(info) = index(&log.log_dir()).and_then(|i| infos.get_mut(i)) {
                info.partitions
                    .push((log.topic_partition().clone(), log.size_bytes()));
            }
        }
        for (tp, m) in self.moves.running.lock().iter() {
            let lag = self.partition(tp).map_or(0, |l| {
                l.log_end_offset() - m.copied_to.load(Ordering::SeqCst)
            });
            if let Some(info) = index(&m.target).and_then(|i| infos.get_mut(i)) {
                info.futures.push((
                    tp.clone(),
                    m.copied_bytes.load(Ordering::SeqCst),
                    lag.max(0),
                ));
            }
        }
        for info in &mut infos {
            info.partitions.sort();
            info.futures.sort_by(|a, b| a.0.cmp(&b.0));
        }
        infos
    }

    fn find_log_dir(&self, path: &str) -> Option<Arc<LogDir>> {
        let wanted = Path::new(path);
        let canonical = std::fs::canonicalize(wanted).ok();
        self.shared
            .dirs
            .iter()
            .find(|d| {
                d.path() == wanted
                    || (canonical.is_some() && std::fs::canonicalize(d.path()).ok() == canonical)
            })
            .cloned()
    }

    /// Starts moving the replica of `tp` into the log dir `target` (AlterReplicaLogDirs). Returns
    /// once the move is accepted; the copy runs on a mover thread. Moving a replica to the dir it
    /// is in cancels a move in progress and succeeds (Kafka: a no-op, NONE).
    pub fn alter_replica_log_dir(
        self: &Arc<Self>,
        tp: &TopicPartition,
        target: &str,
    ) -> Result<(), MoveError> {
        let target_dir = self
            .find_log_dir(target)
            .ok_or_else(|| MoveError::LogDirNotFound(target.to_string()))?;
        self.shared.check_running()?;
        target_dir.check_online()?;
        let log = self
            .partition(tp)
            .ok_or_else(|| MoveError::ReplicaNotAvailable(tp.clone()))?;
        // Check and register under one hold of the table, so that two requests for the same
        // partition never start two movers.
        let mut running = self.moves.running.lock();
        loop {
            match running.get(tp) {
                Some(m) if Arc::ptr_eq(&m.target, &target_dir) => return Ok(()),
                Some(m) => {
                    m.cancel.store(true, Ordering::SeqCst);
                    self.moves.ended.wait(&mut running);
                }
                None => break,
            }
        }
        let source = log.log_dir();
        source.check_online()?;
        if Arc::ptr_eq(&source, &target_dir) {
            return Ok(());
        }
        let id = self.moves.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        let m = Move {
            id,
            target: Arc::clone(&target_dir),
            cancel: Arc::new(AtomicBool::new(false)),
            copied_bytes: Arc::new(AtomicU64::new(0)),
            copied_to: Arc::new(AtomicI64::new(log.log_start_offset())),
        };
        let job = MoveJob {
            store: Arc::clone(self),
            log,
            id,
            target: target_dir,
            cancel: Arc::clone(&m.cancel),
            copied_bytes: Arc::clone(&m.copied_bytes),
            copied_to: Arc::clone(&m.copied_to),
        };
        running.insert(tp.clone(), m);
        drop(running);
        let spawned = std::thread::Builder::new()
            .name(format!("millrace-move-{tp}"))
            .spawn(move || job.run());
        if let Err(e) = spawned {
            self.moves.finish(tp, id);
            return Err(StoreError::io("spawn mover thread", e).into());
        }
        Ok(())
    }
}

/// One move, run on its own thread.
struct MoveJob {
    store: Arc<Store>,
    log: Arc<PartitionLog>,
    id: u64,
    target: Arc<LogDir>,
    cancel: Arc<AtomicBool>,
    copied_bytes: Arc<AtomicU64>,
    copied_to: Arc<AtomicI64>,
}

impl MoveJob {
    fn run(self) {
        let tp = self.log.topic_partition().clone();
        let tag = format!("{:x}{:x}", crate::unix_nanos(), self.id);
        let future = self
            .target
            .path()
            .join(format!("{tp}.{tag}{FUTURE_SUFFIX}"));
        match self.copy_and_swap(&future, &tag) {
            Ok(()) => {
                tracing::info!(partition = %tp, log_dir = %self.target.path().display(), "replica moved")
            }
            Err(e) => {
                if !self.cancel.load(Ordering::SeqCst) {
                    tracing::warn!(partition = %tp, error = %e, "replica move failed; the replica stays where it was");
                }
                if future.exists() {
                    if let Err(e) = self.store.shared.storage.remove_dir_all(&future) {
                        tracing::warn!(dir = %future.display(), error = %e, "could not remove the copy of a failed move");
                    }
                }
            }
        }
        self.store.moves.finish(&tp, self.id);
    }

    fn cancelled(&self) -> Result<(), StoreError> {
        if self.cancel.load(Ordering::SeqCst) {
            return Err(StoreError::ShutDown);
        }
        Ok(())
    }

    fn copy_and_swap(&self, future: &Path, tag: &str) -> Result<(), StoreError> {
        let storage = &*self.store.shared.storage;
        let tp = self.log.topic_partition().clone();
        storage
            .create_dir_all(future)
            .map_err(|e| StoreError::io(format!("create {}", future.display()), e))?;
        for _ in 0..MOVE_COPY_ATTEMPTS {
            let mut copied = Copied::new();
            // Two rounds without the lock: the second picks up what was sealed during the first,
            // so the tail copied under the lock stays about one segment.
            let mut plan = self.log.copy_plan();
            for _ in 0..2 {
                for name in &plan.files {
                    self.cancelled()?;
                    let from = plan.source.join(name);
                    if copied.contains_key(name) || !from.exists() {
                        continue;
                    }
                    let id = match copy_file(storage, &from, &future.join(name)) {
                        Ok(id) => id,
                        // Retention or truncation removed it meanwhile: nothing to carry over.
                        Err(_) if !from.exists() => continue,
                        Err(e) => return Err(e),
                    };
                    self.copied_bytes.fetch_add(id.1, Ordering::SeqCst);
                    copied.insert(name.clone(), id);
                }
                self.copied_to.store(plan.sealed_end, Ordering::SeqCst);
                let next = self.log.copy_plan();
                if next.generation != plan.generation || next.source != plan.source {
                    break;
                }
                plan = next;
            }
            self.cancelled()?;
            let _maintenance = self.store.maintenance.lock();
            let moved_name = format!("{tp}.{tag}{MOVED_SUFFIX}");
            match self
                .log
                .swap_into(&plan, &copied, future, &self.target, &moved_name)
            {
                Ok(moved) => {
                    drop(_maintenance);
                    self.remove_old_copy(&moved, &tp, tag);
                    return Ok(());
                }
                Err(SwapError::Stale) => continue,
                Err(SwapError::Failed(e)) => return Err(e),
            }
        }
        Err(StoreError::Io(std::io::Error::other(format!(
            "{tp} kept changing under the copy ({MOVE_COPY_ATTEMPTS} attempts)"
        ))))
    }

    /// Renames the old copy `-delete` and removes it. A failure leaves it for the next open.
    fn remove_old_copy(&self, moved: &Path, tp: &TopicPartition, tag: &str) {
        let storage = &*self.store.shared.storage;
        let Some(parent) = moved.parent() else {
            return;
        };
        let doomed = parent.join(format!("{tp}.{tag}{DELETE_SUFFIX}"));
        let removed = storage
            .rename(moved, &doomed)
            .and_then(|()| storage.remove_dir_all(&doomed));
        if let Err(e) = removed {
            tracing::warn!(dir = %moved.display(), error = %e, "old copy of a moved replica not removed; the next start removes it");
        }
    }
}
