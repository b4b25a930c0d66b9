//! Retention: deleting whole sealed segments by `retention.ms` (segment's largest timestamp),
//! `retention.bytes`, and below the log start offset (DeleteRecords).
//!
//! Invariants: the active segment is never deleted; segments go oldest first, so a crash at any
//! point leaves a contiguous suffix of the log; the log start offset moves before the files go
//! (in memory) and is checkpointed after, and loading takes max(checkpoint, first segment base).
//! Bounded: at most `RETENTION_SEGMENTS_PER_TICK` segments per call.
//! Locking: runs under the partition mutex (deletes are unlinks; no fsync under the lock).

use std::sync::atomic::Ordering;

use crate::error::StoreError;
use crate::limits::RETENTION_SEGMENTS_PER_TICK;
use crate::log::{LogInner, PartitionLog};

/// Deletes sealed segments lying entirely below the log start offset. Returns how many.
pub(crate) fn delete_segments_below_log_start(
    log: &PartitionLog,
    inner: &mut LogInner,
) -> Result<usize, StoreError> {
    let lso = log.log_start.load(Ordering::SeqCst);
    let mut deleted = 0;
    while deleted < RETENTION_SEGMENTS_PER_TICK {
        let mut it = inner.segments.keys();
        let (Some(first), Some(next)) = (it.next().copied(), it.next().copied()) else {
            break;
        };
        if next > lso {
            break;
        }
        delete_oldest(log, inner, first)?;
        deleted += 1;
    }
    Ok(deleted)
}

fn delete_oldest(log: &PartitionLog, inner: &mut LogInner, base: i64) -> Result<(), StoreError> {
    inner.segments.remove(&base);
    let new_start = inner
        .segments
        .keys()
        .next()
        .copied()
        .unwrap_or(inner.log_end_offset);
    if log.log_start.fetch_max(new_start, Ordering::SeqCst) < new_start {
        inner.producers.remove_before(new_start);
    }
    inner.cleaner_point = inner.cleaner_point.max(new_start);
    log.remove_segment_files(base)?;
    inner.pending.sync_dir = true;
    Ok(())
}

/// Applies `retention.ms` and `retention.bytes` to sealed segments. Returns segments deleted.
pub(crate) fn apply_retention(log: &PartitionLog, now_ms: i64) -> Result<usize, StoreError> {
    let config = log.config();
    let mut inner = log.inner.lock();
    if log.deleted.load(Ordering::SeqCst) {
        return Ok(0);
    }
    let mut deleted = delete_segments_below_log_start(log, &mut inner)?;
    if !config.cleanup_policy.delete {
        return Ok(deleted);
    }
    let mut total: u64 = inner.segments.values().map(|s| s.size).sum();
    while deleted < RETENTION_SEGMENTS_PER_TICK && inner.segments.len() > 1 {
        let Some((&base, seg)) = inner.segments.iter_mut().next() else {
            break;
        };
        let by_size = config.retention_bytes >= 0
            && total.saturating_sub(seg.size) >= config.retention_bytes as u64
            && total > config.retention_bytes as u64;
        let by_time = config.retention_ms >= 0 && {
            let path = seg.log_path(&log.dir);
            let file = log
                .shared
                .cache
                .get(&path, false)
                .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
            seg.ensure_loaded(&log.dir, &file, &config)
                .map_err(|e| StoreError::io(format!("load {}", path.display()), e))?;
            let largest = if seg.max_timestamp >= 0 {
                seg.max_timestamp
            } else {
                file_mtime_ms(&path).unwrap_or(now_ms)
            };
            now_ms.saturating_sub(largest) > config.retention_ms
        };
        if !(by_size || by_time) {
            break;
        }
        total = total.saturating_sub(seg.size);
        delete_oldest(log, &mut inner, base)?;
        deleted += 1;
    }
    drop(inner);
    if deleted > 0 {
        log.enqueue_flush();
    }
    Ok(deleted)
}

fn file_mtime_ms(path: &std::path::Path) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(m.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}
