//! Retention: which whole sealed segments `retention.ms` (a segment's largest timestamp) and
//! `retention.bytes` let go, and below the log start offset (DeleteRecords). A policy only: it
//! reads the log's sealed segments (`PartitionLog::retention_view`) and asks the log to move its
//! start offset (`PartitionLog::advance_log_start`), which deletes the segments.
//!
//! A tiered log (`remote.storage.enable`, decision 0073) keeps its local tail by
//! `local.retention.ms` / `local.retention.bytes`, and deletes a segment only once the object
//! store holds all of it (`PartitionLog::remote_copied_end`); the whole log's retention is the
//! remote log manager's.
//!
//! Invariants: the active segment is never deleted; only segments that lie entirely below the
//! high watermark go (Kafka's rule: consumers may not have seen the rest); segments go oldest
//! first, so a crash at any point leaves a contiguous suffix of the log.
//! Bounded: at most `RETENTION_SEGMENTS_PER_TICK` segments per call.
//! Locking: none of its own; the log's methods take the partition lock.

use crate::error::StoreError;
use crate::log::PartitionLog;

/// Applies `retention.ms` and `retention.bytes` to sealed segments, and deletes segments left
/// below the log start offset. Returns segments deleted.
pub(crate) fn apply_retention(log: &PartitionLog, now_ms: i64) -> Result<usize, StoreError> {
    if log.is_deleted() {
        return Ok(0);
    }
    let config = log.config();
    let (retention_ms, retention_bytes) =
        (config.local_retention_ms(), config.local_retention_bytes());
    // A tiered log keeps what is not yet copied, whatever retention says.
    let copied_end = if config.remote_storage_enable {
        log.remote_copied_end()
    } else {
        i64::MAX
    };
    let by_time = retention_ms >= 0;
    let mut new_start = log.log_start_offset();
    if config.cleanup_policy.delete {
        let segments = log.retention_view(by_time)?;
        let high_watermark = log.high_watermark();
        let mut total = log.size_bytes();
        for seg in segments {
            let by_size = retention_bytes >= 0
                && total.saturating_sub(seg.size) >= retention_bytes as u64
                && total > retention_bytes as u64;
            let expired = by_time
                && seg
                    .max_timestamp
                    .or(seg.modified_ms)
                    .is_some_and(|largest| now_ms.saturating_sub(largest) > retention_ms);
            if !(by_size || expired)
                || seg.next_base_offset > high_watermark
                || seg.next_base_offset > copied_end
            {
                break;
            }
            total = total.saturating_sub(seg.size);
            new_start = new_start.max(seg.next_base_offset);
        }
    }
    log.advance_log_start(new_start)
}
