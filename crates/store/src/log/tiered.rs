//! What tiered storage (decision 0073) needs of a partition log: the sealed segments to upload,
//! their leader epochs and aborted transactions, the producer state to upload beside them, the
//! offset below which the object store holds the data (`remote_copied_end`, set from the
//! metadata image on leaders and followers alike), and the upload backlog bound on produce.
//!
//! **Invariant:** on a log with `remote.storage.enable`, retention deletes a local segment only
//! once every offset in it is below `remote_copied_end` (committed in the metadata log), and
//! only under the local retention settings (`retention.rs`): local data goes only once a
//! replicated copy exists elsewhere.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::PartitionLog;
use crate::error::StoreError;
use crate::producer_state::AbortedTxn;

/// `remote_copied_end` of a log with nothing in the object store.
pub const NOTHING_COPIED: i64 = i64::MIN;

/// A sealed segment as the remote log manager sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSegment {
    pub base_offset: i64,
    /// Base offset of the next segment (this one's last offset + 1 or more).
    pub next_base_offset: i64,
    /// Its `.log` file (read while the partition lock is not held; retention does not delete
    /// it before it is copied).
    pub log_path: PathBuf,
    /// Bytes of valid batches in it.
    pub size: u64,
}

impl PartitionLog {
    /// Offsets below this are in the object store (committed remote segments); `NOTHING_COPIED`
    /// when none are. Retention of a tiered log deletes only segments entirely below it.
    pub fn remote_copied_end(&self) -> i64 {
        self.remote_copied_end.load(Ordering::Acquire)
    }

    /// Sets what `remote_copied_end` returns (from the metadata image).
    pub fn set_remote_copied_end(&self, end: i64) {
        self.remote_copied_end.store(end, Ordering::Release);
    }

    /// Sets whether client produce is refused because too many bytes wait for upload
    /// (`millrace.remote.storage.max.pending.bytes`): `Some((pending, bound))` refuses.
    pub fn set_upload_backlog(&self, backlog: Option<(u64, u64)>) {
        let (pending, bound) = backlog.unwrap_or((0, 0));
        self.upload_backlog.store(pending, Ordering::Release);
        self.upload_backlog_bound.store(bound, Ordering::Release);
    }

    /// `Err(StoreError::UploadBacklog)` while the upload backlog is over its bound. Asked by the
    /// produce path before a client append, like `check_free_space`.
    pub fn check_upload_backlog(&self) -> Result<(), StoreError> {
        let bound = self.upload_backlog_bound.load(Ordering::Acquire);
        if bound == 0 {
            return Ok(());
        }
        Err(StoreError::UploadBacklog {
            pending: self.upload_backlog.load(Ordering::Acquire),
            bound,
        })
    }

    /// Up to `max` sealed segments that hold `from` or lie after it and end at or below `upper`
    /// (the last stable offset: an upload never carries undecided or uncommitted data), oldest
    /// first.
    pub fn sealed_segments_from(&self, from: i64, upper: i64, max: usize) -> Vec<TierSegment> {
        let dir = self.dir();
        let inner = self.inner.lock();
        let active = inner.active_base();
        let bases: Vec<(i64, u64)> = inner
            .segments
            .range(..active)
            .map(|(b, s)| (*b, s.size))
            .collect();
        let mut out = Vec::new();
        for (i, (base, size)) in bases.iter().enumerate() {
            let next = bases.get(i + 1).map_or(active, |(b, _)| *b);
            if next <= from || next > upper {
                continue;
            }
            if out.len() >= max {
                break;
            }
            let Some(seg) = inner.segments.get(base) else {
                continue;
            };
            out.push(TierSegment {
                base_offset: *base,
                next_base_offset: next,
                log_path: seg.log_path(&dir),
                size: *size,
            });
        }
        out
    }

    /// (segments, bytes) of the sealed segments that hold `from` or lie after it: what waits
    /// for upload when `from` is the remote log's end.
    pub fn sealed_from(&self, from: i64) -> (u64, u64) {
        let inner = self.inner.lock();
        let active = inner.active_base();
        let mut sealed = inner.segments.range(..active).peekable();
        let (mut count, mut bytes) = (0u64, 0u64);
        while let Some((_, seg)) = sealed.next() {
            let next = sealed.peek().map_or(active, |(b, _)| **b);
            if next > from {
                count += 1;
                bytes += seg.size;
            }
        }
        (count, bytes)
    }

    /// The leader-epoch entries (epoch, start offset), ascending.
    pub fn leader_epoch_entries(&self) -> Vec<(i32, i64)> {
        self.inner.lock().epochs.entries().to_vec()
    }

    /// The producer state now, encoded as a producer snapshot file holds it, with the log end
    /// offset it reflects.
    pub fn producer_snapshot(&self) -> (i64, Vec<u8>) {
        let inner = self.inner.lock();
        (
            inner.log_end_offset,
            crate::checkpoint::encode_snapshot(inner.log_end_offset, &inner.producers.encode()),
        )
    }

    /// The aborted transactions whose ABORT marker is at or after `from` and that began before
    /// `upper` (what a segment `[from, upper)` uploads as its transaction index).
    pub fn aborted_in(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.aborted_transactions(from, upper)
    }
}
