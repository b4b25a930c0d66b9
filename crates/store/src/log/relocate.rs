//! Moving a log to another log dir in place (AlterReplicaLogDirs): what the mover may copy
//! without the partition lock, and the swap under it. The copy itself and its bookkeeping are in
//! `replica_move`; this file is the part that must see `LogInner`.
//!
//! The swap, under the partition lock (appends, truncation and flush publication wait): the
//! files that changed since the lock-free copy are copied again (the active segment, segments
//! sealed since, every small file), files gone from the source are removed from the copy, every
//! file and the copy's directory are fsynced, the source is renamed `<tp>.<id>-moved`, the copy
//! `<tp>`, and the log's `Location` changes. The `PartitionLog` object stays the same, so every
//! holder of it (replication, group and transaction coordinators) follows the move. A flush
//! round that took its work before the swap may fail on a path that no longer exists: the
//! `relocations` count it took tells it that the failure was the move's, not the disk's.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Location, PartitionLog};
use crate::error::StoreError;
use crate::shared::LogDir;
use crate::storage::Storage;

/// What the mover copies without the lock: the sealed segments' files as of `generation`.
pub(crate) struct CopyPlan {
    /// The partition directory when the plan was made.
    pub(crate) source: PathBuf,
    /// Names of the sealed segments' files (`.log`, `.index`, `.timeindex`).
    pub(crate) files: Vec<String>,
    pub(crate) generation: u64,
    /// Log end offset of the last sealed segment (how far the copy will have got).
    pub(crate) sealed_end: i64,
}

/// The identity of a copied file: inode and length at the time of the copy.
pub(crate) type Copied = HashMap<String, (u64, u64)>;

/// Why a swap did not happen.
#[derive(Debug)]
pub(crate) enum SwapError {
    /// The log was truncated since the plan (its sealed files may have changed): copy again.
    Stale,
    /// The swap failed; the source is still the live copy (unless its dir went offline).
    Failed(StoreError),
}

/// Identity of a file for `Copied` (`None`: gone).
pub(crate) fn identity(path: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.len()))
}

/// Copies `from` into a new `to` through `storage`, in chunks of `COPY_CHUNK_BYTES`; returns
/// the source's identity before the copy (the caller compares it under the lock later).
pub(crate) fn copy_file(
    storage: &dyn Storage,
    from: &Path,
    to: &Path,
) -> Result<(u64, u64), StoreError> {
    use std::io::Read;
    let io = |what: &str, p: &Path, e| StoreError::io(format!("{what} {}", p.display()), e);
    let before = std::fs::metadata(from).map_err(|e| io("stat", from, e))?;
    let mut source = std::fs::File::open(from).map_err(|e| io("open", from, e))?;
    if to.exists() {
        storage.remove_file(to).map_err(|e| io("remove", to, e))?;
    }
    let target = storage.open(to, true).map_err(|e| io("create", to, e))?;
    let mut buf = vec![0u8; crate::limits::COPY_CHUNK_BYTES];
    let mut at = 0u64;
    loop {
        let n = source.read(&mut buf).map_err(|e| io("read", from, e))?;
        let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
            break;
        };
        storage
            .write_at(&target, chunk, at)
            .map_err(|e| io("write", to, e))?;
        at += n as u64;
    }
    Ok((before.ino(), before.len()))
}

fn list_files(dir: &Path) -> Result<HashSet<String>, StoreError> {
    let io = |e| StoreError::io(format!("list {}", dir.display()), e);
    let mut names = HashSet::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_type().map_err(io)?.is_file() {
            if let Some(name) = entry.file_name().to_str() {
                names.insert(name.to_string());
            }
        }
    }
    Ok(names)
}

impl PartitionLog {
    /// The sealed segments' files, to copy without the lock.
    pub(crate) fn copy_plan(&self) -> CopyPlan {
        let inner = self.inner.lock();
        let active = inner.active_base();
        let mut files = Vec::new();
        let mut sealed_end = self.log_start_offset();
        for seg in inner.segments.values().filter(|s| s.base_offset != active) {
            for suffix in [
                crate::segment::LOG_SUFFIX,
                crate::segment::INDEX_SUFFIX,
                crate::segment::TIME_INDEX_SUFFIX,
            ] {
                let path = crate::segment::segment_path(Path::new(""), seg.base_offset, suffix);
                files.push(path.to_string_lossy().into_owned());
            }
            sealed_end = seg.next_offset;
        }
        CopyPlan {
            source: self.dir(),
            files,
            generation: inner.generation,
            sealed_end,
        }
    }

    /// Finishes a move under the partition lock (see the module comment). `copied` holds the
    /// files the mover copied into `future` without the lock. Returns the source's new path
    /// (`<tp>.<id>-moved`), for the caller to remove once the lock is released.
    pub(crate) fn swap_into(
        &self,
        plan: &CopyPlan,
        copied: &Copied,
        future: &Path,
        target: &Arc<LogDir>,
        moved_name: &str,
    ) -> Result<PathBuf, SwapError> {
        let storage = &*self.shared.storage;
        let mut inner = self.inner.lock();
        // No leader-epoch checkpoint write (which runs outside `inner`) while the files move.
        let _epochs = self.epoch_checkpoint.lock();
        if inner.generation != plan.generation || self.dir() != plan.source {
            return Err(SwapError::Stale);
        }
        if self.is_deleted() {
            return Err(SwapError::Failed(StoreError::UnknownPartition(
                self.tp.clone(),
            )));
        }
        let old = self.location();
        old.log_dir.check_online().map_err(SwapError::Failed)?;
        target.check_online().map_err(SwapError::Failed)?;
        let fail = |what: &str, p: &Path, e| {
            SwapError::Failed(StoreError::io(format!("{what} {}", p.display()), e))
        };
        let source_files = list_files(&old.dir).map_err(SwapError::Failed)?;
        for name in &source_files {
            let from = old.dir.join(name);
            let unchanged = copied
                .get(name)
                .is_some_and(|id| identity(&from) == Some(*id));
            if unchanged {
                continue;
            }
            match copy_file(storage, &from, &future.join(name)) {
                // A producer snapshot the flusher replaced meanwhile (it writes them outside the
                // partition lock): snapshots only save recovery work.
                Err(_) if !from.exists() => {}
                other => {
                    other.map_err(SwapError::Failed)?;
                }
            }
        }
        for name in list_files(future).map_err(SwapError::Failed)? {
            if !source_files.contains(&name) {
                let p = future.join(&name);
                storage.remove_file(&p).map_err(|e| fail("remove", &p, e))?;
            }
        }
        for name in list_files(future).map_err(SwapError::Failed)? {
            let p = future.join(&name);
            let f = storage.open(&p, false).map_err(|e| fail("open", &p, e))?;
            storage.sync(&f).map_err(|e| fail("fdatasync", &p, e))?;
        }
        storage
            .sync_dir(future)
            .map_err(|e| fail("fsync", future, e))?;
        // The two renames, each made durable before the next: a crash between them leaves
        // `-moved` and `-future`, which the next open resolves (`log_dirs::resolve_moves`), and
        // never two live copies (the copy is live only once the source no longer is).
        let moved = old.log_dir.path().join(moved_name);
        storage
            .rename(&old.dir, &moved)
            .and_then(|()| storage.sync_dir(old.log_dir.path()))
            .map_err(|e| fail("rename", &old.dir, e))?;
        let dir = target.path().join(self.tp.to_string());
        let renamed = match storage.rename(future, &dir) {
            Err(e) => Err(fail("rename", future, e)),
            Ok(()) => storage.sync_dir(target.path()).map_err(|e| {
                // The target's directory fsync failed: its state is unknown (the dir goes
                // offline) and the copy must not stay live beside the source.
                target.mark_offline(format!("fsync {}: {e}", target.path().display()));
                let _ = storage.rename(&dir, future);
                fail("fsync", target.path(), e)
            }),
        };
        if let Err(e) = renamed {
            // Put the source back; if even that fails its dir is in doubt.
            if let Err(back) = storage.rename(&moved, &old.dir) {
                old.log_dir
                    .mark_offline(format!("undo of a replica move failed: {back}"));
            }
            return Err(e);
        }
        old.log_dir.unregister_offsets(&self.tp);
        target.register_offsets(&self.tp, Arc::clone(&self.offsets));
        *self.location.write() = Location {
            dir: dir.clone(),
            log_dir: Arc::clone(target),
        };
        for seg in inner.segments.values_mut() {
            seg.file = std::sync::Weak::new();
        }
        let old_dir = old.dir.clone();
        for path in &mut inner.pending.sync_paths {
            if let Ok(rest) = path.strip_prefix(&old_dir) {
                *path = dir.join(rest);
            }
        }
        inner.relocations += 1;
        drop(_epochs);
        // Every segment file was fsynced in its new place: all of the log's data is durable
        // there. (The recovery point stays: pending leader-epoch entries are not written yet;
        // the next flush round, queued below, raises it.)
        let log_end = inner.log_end_offset;
        let batch = self.shared.config.flush_policy == crate::config::FlushPolicy::Batch;
        if batch {
            self.publish_durable(log_end);
        }
        let queue = !inner.pending.is_empty();
        drop(inner);
        self.shared.cache.invalidate_dir(&old_dir);
        if batch {
            self.shared.notify_durable(&self.tp);
        }
        if queue {
            self.enqueue_flush();
        }
        Ok(moved)
    }
}
