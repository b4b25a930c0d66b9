//! Durability: what is fsynced when, and the offsets that follow it. The flusher calls
//! `flush_pending` (fsyncs outside the partition lock, then publishes); the durable offset, the
//! recovery point and (when the store owns it) the high watermark only move after the fsyncs that
//! justify them; `wait_durable` resolves once the durable offset passes an offset, or fails when
//! the data dir goes offline, the store shuts down or the partition is deleted.
//!
//! Crash model (`docs/log-format.md` §6-7): the recovery point covers the segment files below it,
//! their index files and the leader-epoch checkpoint; the durable offset covers the log bytes only.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::{now_ms, Failure, PartitionLog};
use crate::checkpoint::{self, LEADER_EPOCH_FILE, SNAPSHOT_SUFFIX};
use crate::config::FlushPolicy;
use crate::error::StoreError;
use crate::flusher::FlushTarget;
use crate::limits::PRODUCER_SNAPSHOTS_KEPT;
use crate::segment::{self, LOG_SUFFIX};

pub(crate) fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    segment::segment_path(dir, offset, SNAPSHOT_SUFFIX)
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

/// A partition's durability work taken from it under its lock, done outside it.
struct FlushWork {
    pending: super::Pending,
    active_path: PathBuf,
    target: i64,
    generation: u64,
    relocations: u64,
    /// The partition directory when the work was taken (a move may change it).
    taken_from: PathBuf,
    active_base: i64,
    sync_active: bool,
}

impl FlushTarget for PartitionLog {
    /// One flusher step for this partition: fsync sealed files, the directory and (per policy)
    /// the active segment outside the lock; write snapshots and the epoch checkpoint; then publish
    /// the recovery point and (Batch) the durable offset.
    fn flush_pending(&self) {
        let work = self.take_flush_work();
        let synced = self.sync_files(&work);
        self.finish_flush(work, synced);
    }

    /// The grouped form: the work is taken now, and finished by the returned step once one
    /// `syncfs` of the data directory, started after every partition of the round was taken, has
    /// made the files' data and directory entries durable in place of the per-file syncs.
    fn begin_grouped_flush(self: std::sync::Arc<Self>) -> crate::flusher::FinishFlush {
        let work = self.take_flush_work();
        Box::new(move |synced: &std::io::Result<()>| {
            let synced = match synced {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::io(
                    format!("syncfs for {}", self.tp),
                    std::io::Error::new(e.kind(), e.to_string()),
                )),
            };
            self.finish_flush(work, synced);
        })
    }
}

impl PartitionLog {
    fn take_flush_work(&self) -> FlushWork {
        self.queued.store(false, Ordering::SeqCst);
        let policy = self.shared.config.flush_policy;
        let mut inner = self.inner.lock();
        let pending = std::mem::take(&mut inner.pending);
        let active_base = inner.active_base();
        let sync_active = policy == FlushPolicy::Batch || pending.flush_active;
        FlushWork {
            pending,
            active_path: segment::segment_path(&self.dir(), active_base, LOG_SUFFIX),
            target: inner.log_end_offset,
            generation: inner.generation,
            relocations: inner.relocations,
            taken_from: self.dir(),
            active_base,
            sync_active,
        }
    }

    /// The per-file syncs of `work` (sealed segments, the active one per policy, the directory).
    fn sync_files(&self, work: &FlushWork) -> Result<(), StoreError> {
        let storage = &*self.shared.storage;
        for path in &work.pending.sync_paths {
            match self.shared.cache.get(path, false) {
                Ok(f) => storage
                    .sync(&f)
                    .map_err(|e| StoreError::io(format!("fdatasync {}", path.display()), e))?,
                // Deleted meanwhile (retention, truncation): nothing to sync.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
            }
        }
        if work.sync_active {
            let path = &work.active_path;
            let f = self
                .shared
                .cache
                .get(path, false)
                .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
            storage
                .sync(&f)
                .map_err(|e| StoreError::io(format!("fdatasync {}", path.display()), e))?;
        }
        if work.pending.sync_dir {
            storage
                .sync_dir(&self.dir())
                .map_err(|e| StoreError::io(format!("fsync {}", self.dir().display()), e))?;
        }
        Ok(())
    }

    /// After the files are synced (`synced`): writes snapshots and the epoch checkpoint, then
    /// publishes the recovery point and (Batch) the durable offset. On any failure nothing of
    /// this round counts as synced.
    fn finish_flush(&self, work: FlushWork, synced: Result<(), StoreError>) {
        let FlushWork {
            pending,
            target,
            generation,
            relocations,
            taken_from,
            active_base,
            sync_active,
            ..
        } = work;
        let policy = self.shared.config.flush_policy;
        let synced_ok = synced.is_ok();
        let result = synced.and_then(|()| {
            for (offset, payload) in &pending.snapshots {
                self.write_snapshot(*offset, payload)?;
            }
            if let Some((version, entries)) = &pending.epochs {
                self.write_epoch_checkpoint(*version, entries)?;
            }
            Ok(())
        });
        let mut inner = self.inner.lock();
        if result.is_err() && inner.relocations != relocations {
            // The log moved to another dir meanwhile (its files were copied and fsynced there):
            // the failure was on the old paths, not the disk's. The work stays owed, in the new
            // place, for the next round.
            let mut pending = pending;
            let dir = self.dir();
            for path in &mut pending.sync_paths {
                if let Ok(rest) = path.strip_prefix(&taken_from) {
                    *path = dir.join(rest);
                }
            }
            inner.pending.take_back(pending);
            drop(inner);
            self.enqueue_flush();
            return;
        }
        if let Err(e) = result {
            // The files synced but a snapshot or the epoch checkpoint found the disk full: that
            // write went through a temporary and left the old file as it was, so the outcome is
            // known. Retried by the next round (`maybe_flush_for_time` re-queues the work each
            // maintenance tick); the log bytes are durable, so the durable offset may move.
            let no_space = synced_ok && e.is_no_space();
            if !no_space && !self.is_deleted() {
                self.log_dir().mark_offline(e.to_string());
            }
            // Nothing of this round counts as synced: its work stays pending, so that no later
            // round claims it (a round with nothing to sync would otherwise raise the recovery
            // point past the segments this one failed to sync).
            inner.pending.take_back(pending);
            if no_space {
                // Debug only: every partition retries each maintenance tick while the disk is
                // full; the tick's own warning (and /ready) says so once.
                tracing::debug!(partition = %self.tp, error = %e, "checkpoint write found the disk full; retried later");
                if policy == FlushPolicy::Batch && inner.generation == generation {
                    self.publish_durable(target);
                    drop(inner);
                    self.shared.notify_durable(&self.tp);
                }
            }
            return;
        }
        if inner.generation != generation || self.log_dir().offline_reason().is_some() {
            return;
        }
        let synced_to = if sync_active {
            target
        } else {
            active_base.min(target)
        };
        self.offsets
            .recovery_point_atomic()
            .fetch_max(synced_to, Ordering::SeqCst);
        if sync_active {
            inner.messages_since_flush = 0;
            inner.last_flush_ms = now_ms();
        }
        if policy == FlushPolicy::Batch {
            self.publish_durable(target);
            drop(inner);
            // Outside every store lock: the listener (replication) takes its own.
            self.shared.notify_durable(&self.tp);
        }
    }
}

impl PartitionLog {
    /// Raises the durable offset (never beyond the log end) and, when the store owns it, the
    /// high watermark; wakes long-polling fetches. The high watermark moves first: whoever waits
    /// on `durable` (a Produce about to be acknowledged) must find its data already visible.
    pub(super) fn publish_durable(&self, offset: i64) {
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
        if self
            .offsets
            .high_watermark_atomic()
            .fetch_max(offset, Ordering::SeqCst)
            < offset
        {
            self.high_watermark_watchers.wake();
        }
    }

    /// Sets the high watermark (replication); clamped to `[log start, log end]`.
    pub fn set_high_watermark(&self, offset: i64) {
        let _inner = self.inner.lock();
        let offset = offset
            .min(self.log_end.load(Ordering::SeqCst))
            .max(self.offsets.log_start());
        let old = self
            .offsets
            .high_watermark_atomic()
            .swap(offset, Ordering::SeqCst);
        if offset > old {
            self.high_watermark_watchers.wake();
        }
    }

    /// The recovery point: everything below it has been fsynced (segment files, their indexes,
    /// the leader-epoch checkpoint), whatever the flush policy. Recovery after a crash validates
    /// only from the segment that holds it.
    pub fn recovery_point(&self) -> i64 {
        self.offsets.recovery_point()
    }

    /// Everything below this offset is as durable as the flush policy promises.
    pub fn durable_offset(&self) -> i64 {
        self.durable.borrow().offset
    }

    /// Resolves once `durable_offset() >= offset`. Errors if the log dir went offline, the store
    /// shut down first or the partition was deleted.
    pub async fn wait_durable(&self, offset: i64) -> Result<(), StoreError> {
        let mut durable = self.durable.subscribe();
        let mut offline = self.log_dir().offline_watch();
        loop {
            let d = *durable.borrow_and_update();
            if d.offset >= offset {
                return Ok(());
            }
            match d.failure {
                Some(Failure::Deleted) => {
                    return Err(StoreError::UnknownPartition(self.tp.clone()))
                }
                Some(Failure::ShutDown) => return Err(StoreError::ShutDown),
                None => {}
            }
            if *offline.borrow_and_update() {
                return Err(StoreError::Offline(
                    self.log_dir().offline_reason().unwrap_or_default(),
                ));
            }
            tokio::select! {
                changed = durable.changed() => {
                    if changed.is_err() {
                        return Err(StoreError::ShutDown);
                    }
                }
                changed = offline.changed() => {
                    if changed.is_err() {
                        return Err(StoreError::ShutDown);
                    }
                }
            }
        }
    }

    /// Releases every `wait_durable` with `failure`.
    pub(crate) fn fail_waiters(&self, failure: Failure) {
        self.durable.send_modify(|d| d.failure = Some(failure));
    }

    pub(super) fn enqueue_flush(&self) {
        if !self.queued.swap(true, Ordering::SeqCst) {
            if let Some(me) = self.me.upgrade() {
                self.shared.flusher.push(me);
            }
        }
    }

    /// Writes a producer snapshot at `offset` and deletes all but the newest few.
    fn write_snapshot(&self, offset: i64, payload: &[u8]) -> Result<(), StoreError> {
        let path = snapshot_path(&self.dir(), offset);
        let bytes = checkpoint::encode_snapshot(offset, payload);
        checkpoint::write_atomic(&*self.shared.storage, &path, &bytes)
            .map_err(|e| StoreError::io(format!("write {}", path.display()), e))?;
        let mut snapshots = list_snapshots(&self.dir());
        snapshots.sort_unstable();
        let excess = snapshots.len().saturating_sub(PRODUCER_SNAPSHOTS_KEPT);
        for old in snapshots.iter().take(excess) {
            let p = snapshot_path(&self.dir(), *old);
            self.shared
                .storage
                .remove_file(&p)
                .map_err(|e| StoreError::io(format!("remove {}", p.display()), e))?;
        }
        Ok(())
    }

    /// `write_snapshot`, unless the snapshot file at `offset` already holds exactly these bytes
    /// (nothing changed since it was written, as for an idle partition that was opened and is
    /// closed again): then it is fdatasynced where it is, so that closing an idle partition
    /// creates, renames and deletes no file. Either way the snapshot is durable on return, but for
    /// its directory entry, which `close` fsyncs next.
    fn write_snapshot_unless_on_disk(&self, offset: i64, payload: &[u8]) -> Result<(), StoreError> {
        let path = snapshot_path(&self.dir(), offset);
        let same = match checkpoint::read_bounded(&path) {
            Ok(Some(on_disk)) => on_disk == checkpoint::encode_snapshot(offset, payload),
            // Missing, or unreadable (the write below reports what is wrong).
            Ok(None) | Err(_) => false,
        };
        if !same {
            return self.write_snapshot(offset, payload);
        }
        let storage = &*self.shared.storage;
        let file = storage
            .open(&path, false)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        storage
            .sync(&file)
            .map_err(|e| StoreError::io(format!("fdatasync {}", path.display()), e))
    }

    /// Writes version `version` of the leader-epoch entries to the checkpoint durably (file,
    /// rename, directory), unless the file already holds that version or a newer one. Two
    /// writers race: `begin_leader_epoch` (and truncation at the log end) write a new version at
    /// once, while a flush round already under way may hold an older version queued by an
    /// append. The version check keeps that older list from replacing the newer one on disk (a
    /// crash before the next round would then lose the epoch just begun).
    pub(super) fn write_epoch_checkpoint(
        &self,
        version: u64,
        entries: &[(i32, i64)],
    ) -> Result<(), StoreError> {
        let mut on_disk = self.epoch_checkpoint.lock();
        if on_disk.is_some_and(|written| written >= version) {
            return Ok(());
        }
        *on_disk = None;
        let path = self.dir().join(LEADER_EPOCH_FILE);
        let bytes = checkpoint::encode_epochs(entries);
        checkpoint::write_atomic(&*self.shared.storage, &path, &bytes)
            .map_err(|e| StoreError::io(format!("write {}", path.display()), e))?;
        *on_disk = Some(version);
        Ok(())
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
        if let Some((version, entries)) = &pending.epochs {
            self.write_epoch_checkpoint(*version, entries)?;
        }
        if let Some(seg) = inner.segments.get_mut(&active_base) {
            seg.finish_time_index();
        }
        if let Some(seg) = inner.segments.get(&active_base) {
            for (p, f) in self.write_index_files(seg)? {
                storage
                    .sync(&f)
                    .map_err(|e| StoreError::io(format!("fdatasync {}", p.display()), e))?;
            }
            let path = seg.log_path(&self.dir());
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
        self.write_snapshot_unless_on_disk(leo, &inner.producers.encode())?;
        storage
            .sync_dir(&self.dir())
            .map_err(|e| StoreError::io(format!("fsync {}", self.dir().display()), e))?;
        self.offsets
            .recovery_point_atomic()
            .store(leo, Ordering::SeqCst);
        self.publish_durable(leo);
        Ok(())
    }

    /// `flush.ms`: under `Never`, queue an fsync of the active segment when it is due.
    pub(crate) fn maybe_flush_for_time(&self, now: i64) {
        let flush_ms = self.config.read().flush_ms;
        let mut inner = self.inner.lock();
        let due = flush_ms != i64::MAX
            && now.saturating_sub(inner.last_flush_ms) >= flush_ms
            && self.offsets.recovery_point() < inner.log_end_offset;
        if due {
            inner.pending.flush_active = true;
        }
        // Work left by a round that found the disk full is retried here (a no-op while queued).
        if due || !inner.pending.is_empty() {
            drop(inner);
            self.enqueue_flush();
        }
    }
}
