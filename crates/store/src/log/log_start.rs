//! Both ends of the log: `advance_log_start` is the one place the log start offset rises
//! (retention and DeleteRecords call it) and whole sealed segments below it are deleted;
//! `truncate_to` is the one place the log end offset falls (follower truncation). Also the
//! producer-state rebuild both of them (and loading) need.
//!
//! Crash rules (`docs/log-format.md` §7): segments are deleted oldest first by `advance_log_start`
//! and newest first by `truncate_to`, so a crash leaves a contiguous run of segments; the log start
//! offset moves in memory before the files go and is checkpointed after (loading takes
//! max(checkpoint, first segment's base)); truncation lowers the recovery point and rewrites the
//! offset checkpoints before it returns.

use std::sync::atomic::Ordering;

use super::{now_ms, snapshot_path, LogInner, PartitionLog};
use crate::checkpoint;
use crate::config::LogConfig;
use crate::control;
use crate::error::StoreError;
use crate::limits::RETENTION_SEGMENTS_PER_TICK;
use crate::producer_state::ProducerStates;
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};

/// A sealed segment as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetentionSegment {
    pub(crate) base_offset: i64,
    /// Base offset of the segment after it (it is sealed, so there is one).
    pub(crate) next_base_offset: i64,
    pub(crate) size: u64,
    /// Largest timestamp in it (from the time index), if known and asked for.
    pub(crate) max_timestamp: Option<i64>,
    /// When its `.log` was last modified (ms), for segments without timestamps.
    pub(crate) modified_ms: Option<i64>,
}

fn file_mtime_ms(path: &std::path::Path) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(m.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}

impl PartitionLog {
    /// The sealed segments, oldest first (at most `RETENTION_SEGMENTS_PER_TICK + 1`, since one
    /// call never deletes more), with their largest timestamps when `with_timestamps` (loading
    /// their indexes if needed), for retention to choose from.
    pub(crate) fn retention_view(
        &self,
        with_timestamps: bool,
    ) -> Result<Vec<RetentionSegment>, StoreError> {
        let config = self.config();
        let mut inner = self.inner.lock();
        let active = inner.active_base();
        let bases: Vec<i64> = inner
            .segments
            .range(..active)
            .map(|(b, _)| *b)
            .take(RETENTION_SEGMENTS_PER_TICK + 1)
            .collect();
        let mut out = Vec::with_capacity(bases.len());
        for base in bases {
            let next_base_offset = inner
                .segments
                .range(base + 1..)
                .next()
                .map_or(active, |(b, _)| *b);
            let Some(seg) = inner.segments.get_mut(&base) else {
                continue;
            };
            let (max_timestamp, modified_ms) = if with_timestamps {
                self.ensure_loaded(seg, &config)?;
                let ts = (seg.max_timestamp >= 0).then_some(seg.max_timestamp);
                let mtime = if ts.is_none() {
                    file_mtime_ms(&seg.log_path(&self.dir()))
                } else {
                    None
                };
                (ts, mtime)
            } else {
                (None, None)
            };
            out.push(RetentionSegment {
                base_offset: base,
                next_base_offset,
                size: seg.size,
                max_timestamp,
                modified_ms,
            });
        }
        Ok(out)
    }

    /// Raises the log start offset to `offset` (never lowers it, never past the high watermark)
    /// and deletes the sealed segments that lie entirely below it, oldest first, at most
    /// `RETENTION_SEGMENTS_PER_TICK` per call. Producer state of producers whose batches are all
    /// below the new start is forgotten. Returns how many segments were deleted. The caller
    /// checkpoints the new log start (or leaves it to the next maintenance tick).
    pub(crate) fn advance_log_start(&self, offset: i64) -> Result<usize, StoreError> {
        let mut inner = self.inner.lock();
        if self.is_deleted() {
            return Ok(0);
        }
        let target = offset.min(self.high_watermark());
        if target > self.offsets.log_start() {
            self.offsets
                .log_start_atomic()
                .store(target, Ordering::SeqCst);
            inner.producers.remove_before(target);
        }
        let log_start = self.offsets.log_start();
        let mut deleted = 0;
        while deleted < RETENTION_SEGMENTS_PER_TICK {
            let mut bases = inner.segments.keys();
            let (Some(first), Some(next)) = (bases.next().copied(), bases.next().copied()) else {
                break;
            };
            if next > log_start {
                break;
            }
            inner.segments.remove(&first);
            inner.cleaner_point = inner.cleaner_point.max(next);
            self.remove_segment_files(first)?;
            inner.pending.sync_dir = true;
            deleted += 1;
        }
        drop(inner);
        if deleted > 0 {
            self.enqueue_flush();
        }
        Ok(deleted)
    }

    /// Advances the log start offset to `offset` (-1 = high watermark), deleting whole sealed
    /// segments below it. Offsets above the high watermark are clamped to it. Returns the new log
    /// start offset, which is checkpointed before this returns.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, StoreError> {
        self.writable()?;
        let hwm = self.high_watermark();
        let target = if offset < 0 { hwm } else { offset.min(hwm) };
        // Bounded per call; segments left below the new start go at the next maintenance tick.
        self.advance_log_start(target)?;
        match self.log_dir().write_offset_checkpoints() {
            // The segments below are gone already; the log start checkpoint follows at the next
            // maintenance tick (as Kafka checkpoints log start offsets in the background).
            Err(e) if e.is_no_space() => {
                tracing::warn!(partition = %self.tp, error = %e, "log start checkpoint found the disk full; retried later");
            }
            other => other?,
        }
        Ok(self.offsets.log_start())
    }

    /// Deletes the files of one segment (newest-first callers keep the log a prefix on a crash).
    fn remove_segment_files(&self, base: i64) -> Result<(), StoreError> {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let p = segment::segment_path(&self.dir(), base, suffix);
            self.shared.cache.invalidate(&p);
            self.shared
                .storage
                .remove_file(&p)
                .map_err(|e| StoreError::io(format!("remove {}", p.display()), e))?;
        }
        Ok(())
    }

    /// Removes every batch at or after the batch containing `offset` (follower truncation), and
    /// every leader-epoch entry that starts at or past the new log end — also when no batch goes
    /// (`offset` at or past the log end): a replica that began a leader epoch and appended
    /// nothing drops that epoch when a leader says its log diverges there (Kafka's
    /// `UnifiedLog.truncateTo` does the same; found by the simulator, see docs/reliability.md).
    pub fn truncate_to(&self, offset: i64) -> Result<(), StoreError> {
        self.truncate(offset, false)
    }

    /// Removes everything and restarts the log at `offset` (see `truncate_fully_and_start_at`).
    pub(super) fn restart_at(&self, offset: i64) -> Result<(), StoreError> {
        self.truncate(offset, true)
    }

    fn truncate(&self, offset: i64, fully: bool) -> Result<(), StoreError> {
        self.writable()?;
        let mut inner = self.inner.lock();
        if !fully && offset >= inner.log_end_offset {
            let leo = inner.log_end_offset;
            if inner.epochs.truncate_from_end(leo) {
                let (version, entries) = inner.next_epochs();
                self.write_epoch_checkpoint(version, &entries)?;
            }
            return Ok(());
        }
        let log_start = self.offsets.log_start();
        if fully
            && log_start == offset
            && inner.log_end_offset == offset
            && inner.segments.len() == 1
            && inner.segments.contains_key(&offset)
        {
            // Already empty at `offset` (a follower's empty replica told to start over where it
            // is, as every replica of a restarted broker may be): only the epochs go. Removing
            // and recreating the empty segment would cost its file operations and syncs, per
            // partition, for nothing.
            if inner.epochs.truncate_from_end(i64::MIN) {
                let (version, entries) = inner.next_epochs();
                self.write_epoch_checkpoint(version, &entries)?;
            }
            self.offsets
                .high_watermark_atomic()
                .fetch_max(offset, Ordering::SeqCst);
            return Ok(());
        }
        let config = self.config();
        let storage = &*self.shared.storage;
        inner.generation += 1;
        // Nothing above the new end may be claimed as synced, even while the files change.
        self.offsets
            .recovery_point_atomic()
            .fetch_min(offset.max(0), Ordering::SeqCst);
        if fully {
            // The epochs describe records that are all gone.
            inner.epochs.truncate_from_end(i64::MIN);
            inner.stage_epochs();
        }
        let restarted = fully || offset <= log_start;
        if restarted {
            // Everything goes; start over at `offset` (Kafka's truncateFullyAndStartAt).
            let bases: Vec<i64> = inner.segments.keys().rev().copied().collect();
            for base in bases {
                self.remove_segment_files(base)?;
                inner.segments.remove(&base);
            }
            let new_base = offset.max(0);
            let path = segment::segment_path(&self.dir(), new_base, LOG_SUFFIX);
            self.shared
                .cache
                .get(&path, true)
                .map_err(|e| StoreError::io(format!("create {}", path.display()), e))?;
            inner
                .segments
                .insert(new_base, Segment::new_empty(new_base, &config, now_ms()));
            inner.log_end_offset = new_base;
            self.offsets
                .log_start_atomic()
                .store(new_base, Ordering::SeqCst);
            // Restarted past its old end: nothing below the new start exists to wait for.
            self.offsets
                .high_watermark_atomic()
                .fetch_max(new_base, Ordering::SeqCst);
        } else {
            // Newest first, so a crash leaves a prefix of the segments.
            let doomed: Vec<i64> = inner
                .segments
                .range(offset + 1..)
                .rev()
                .map(|(b, _)| *b)
                .collect();
            let keep_first = inner.segments.keys().next().copied().unwrap_or(0);
            for base in doomed {
                if base == keep_first {
                    break;
                }
                self.remove_segment_files(base)?;
                inner.segments.remove(&base);
            }
            let active_base = inner.active_base();
            let Some(seg) = inner.segments.get_mut(&active_base) else {
                return Err(StoreError::Corrupt("no active segment".into()));
            };
            let file = self.segment_file(seg, false)?;
            let path = seg.log_path(&self.dir());
            // Byte position of the first batch whose last offset >= `offset`.
            let mut cut = seg.size;
            segment::scan_batches(
                &file,
                0,
                seg.size,
                seg.base_offset,
                seg.base_offset,
                |pos, h, _| {
                    if cut == seg.size && h.last_offset() >= offset {
                        cut = pos;
                    }
                },
            )
            .map_err(|e| StoreError::io(format!("scan {}", path.display()), e))?;
            storage
                .set_len(&file, cut)
                .map_err(|e| StoreError::io(format!("truncate {}", path.display()), e))?;
            seg.size = cut;
            seg.checked.truncated_to(cut);
            seg.rebuild_indexes(&file, &config, false)
                .map_err(|e| StoreError::io(format!("reindex {}", path.display()), e))?;
            let next = seg.next_offset;
            if let Some(seg) = inner.segments.get(&active_base) {
                self.write_index_files(seg)?;
            }
            inner.log_end_offset = next;
        }
        let leo = inner.log_end_offset;
        self.log_end.store(leo, Ordering::SeqCst);
        self.offsets
            .high_watermark_atomic()
            .fetch_min(leo, Ordering::SeqCst);
        self.offsets
            .recovery_point_atomic()
            .fetch_min(leo, Ordering::SeqCst);
        self.durable.send_modify(|d| d.offset = d.offset.min(leo));
        if inner.epochs.truncate_from_end(leo) {
            inner.stage_epochs();
        }
        // Producer state: drop snapshots past the end (all of them when the log restarted: they
        // describe records that are gone), rebuild from the newest one left.
        for snap in super::list_snapshots(&self.dir()) {
            if restarted || snap > leo {
                let p = snapshot_path(&self.dir(), snap);
                storage
                    .remove_file(&p)
                    .map_err(|e| StoreError::io(format!("remove {}", p.display()), e))?;
            }
        }
        inner.producers = self.rebuild_producer_state(&mut inner, &config)?;
        inner.pending.sync_dir = true;
        inner.pending.flush_active = true;
        inner.cleaner_point = inner.cleaner_point.min(leo);
        drop(inner);
        self.enqueue_flush();
        // The on-disk recovery point must not stay above the new end: data appended after this
        // would otherwise escape validation after a power loss.
        self.log_dir().write_offset_checkpoints()
    }

    /// Producer state as of the log end: newest valid snapshot at or below it, plus the batch
    /// headers after the snapshot. Forgets producers whose batches are all below the log start.
    pub(super) fn rebuild_producer_state(
        &self,
        inner: &mut LogInner,
        config: &LogConfig,
    ) -> Result<ProducerStates, StoreError> {
        let leo = inner.log_end_offset;
        let log_start = self.offsets.log_start();
        let mut snaps = super::list_snapshots(&self.dir());
        snaps.sort_unstable();
        let mut state = ProducerStates::default();
        let mut from = i64::MIN;
        for snap in snaps.into_iter().rev().filter(|s| *s <= leo) {
            let loaded = checkpoint::read_bounded(&snapshot_path(&self.dir(), snap))
                .ok()
                .flatten()
                .and_then(|bytes| {
                    let (version, offset, payload) = checkpoint::decode_snapshot(&bytes)?;
                    (offset == snap)
                        .then(|| ProducerStates::decode(version, payload))
                        .flatten()
                });
            if let Some(s) = loaded {
                state = s;
                from = snap;
                break;
            }
            tracing::warn!(partition = %self.tp, snapshot = snap, "ignoring unreadable producer snapshot");
        }
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        for (i, base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if next_base <= from {
                continue;
            }
            let Some(seg) = inner.segments.get_mut(base) else {
                continue;
            };
            self.ensure_loaded(seg, config)?;
            let file = self.segment_file(seg, false)?;
            let path = seg.log_path(&self.dir());
            let start = match seg.indexes.as_ref() {
                Some((index, _)) if from > seg.base_offset => {
                    u64::from(index.lookup(from).position)
                }
                _ => 0,
            };
            segment::scan_batches(
                &file,
                start,
                seg.size,
                seg.base_offset,
                i64::MIN,
                |_, h, bytes| {
                    if h.base_offset >= from {
                        state.update(h, control::parse_marker(bytes, h));
                    }
                },
            )
            .map_err(|e| StoreError::io(format!("scan {}", path.display()), e))?;
        }
        state.remove_before(log_start);
        Ok(state)
    }
}
