//! What the cleaner (`cleaner.rs`) may see of a log and the two changes it may make: swap a sealed
//! segment for its cleaned copy, and move the cleaner point. The cleaner reads sealed segments
//! outside the partition lock (they are immutable) and decides what to keep; the log checks, under
//! its lock, that the segment is still the one the cleaner read before it lets the swap commit.

use std::sync::Arc;

use super::PartitionLog;
use crate::config::LogConfig;
use crate::error::StoreError;
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::storage::Storage;

/// One sealed segment as the cleaner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SealedSegment {
    pub(crate) base_offset: i64,
    pub(crate) size: u64,
    /// Largest timestamp (-1 if unknown or not loaded).
    pub(crate) max_timestamp: i64,
}

/// The sealed segments of a log, its cleaner point and generation, read under one lock.
pub(crate) struct CleanerView {
    pub(crate) segments: Vec<SealedSegment>,
    pub(crate) cleaner_point: i64,
    pub(crate) generation: u64,
    pub(crate) active_base_offset: i64,
    /// The cleaner may only use records below this offset, both to decide what to keep and to
    /// rewrite: the last stable offset (Kafka's rule: what consumers may not have seen yet, and
    /// transactions not yet decided, stay)
    /// and the recovery point (a record that a power cut may take back must not be the reason
    /// an older, durable record of its key is deleted).
    pub(crate) clean_below: i64,
}

impl CleanerView {
    /// Offset after sealed segment `i` (the next one's base, or the active segment's).
    pub(crate) fn segment_end(&self, i: usize) -> i64 {
        self.segments
            .get(i + 1)
            .map_or(self.active_base_offset, |s| s.base_offset)
    }
}

impl PartitionLog {
    /// The sealed segments (with their largest timestamps when `with_timestamps`, loading their
    /// indexes if needed), the cleaner point and the generation.
    pub(crate) fn cleaner_view(
        &self,
        config: &LogConfig,
        with_timestamps: bool,
    ) -> Result<CleanerView, StoreError> {
        let mut inner = self.inner.lock();
        let active = inner.active_base();
        let bases: Vec<i64> = inner.segments.range(..active).map(|(b, _)| *b).collect();
        let mut segments = Vec::with_capacity(bases.len());
        for base in bases {
            let Some(seg) = inner.segments.get_mut(&base) else {
                continue;
            };
            if with_timestamps {
                self.ensure_loaded(seg, config)?;
            }
            segments.push(SealedSegment {
                base_offset: base,
                size: seg.size,
                max_timestamp: seg.max_timestamp,
            });
        }
        let stable = self.last_stable_locked(&mut inner);
        Ok(CleanerView {
            segments,
            cleaner_point: inner.cleaner_point,
            generation: inner.generation,
            active_base_offset: active,
            clean_below: active.min(stable).min(self.offsets.recovery_point()),
        })
    }

    /// Base offset of the active segment (the one appends go to; never cleaned or deleted).
    pub fn active_segment_base_offset(&self) -> i64 {
        self.inner.lock().active_base()
    }

    /// Bumped by every truncation; a cleaning pass started at another generation is stale.
    pub(crate) fn generation(&self) -> u64 {
        self.inner.lock().generation
    }

    /// The open `.log` of sealed segment `base` and its size; `None` if it is gone or active.
    pub(crate) fn sealed_segment_file(
        &self,
        base: i64,
    ) -> Result<Option<(Arc<std::fs::File>, u64)>, StoreError> {
        let mut inner = self.inner.lock();
        let active = inner.active_base();
        match inner.segments.get_mut(&base) {
            Some(seg) if base != active => {
                let size = seg.size;
                Ok(Some((self.segment_file(seg, false)?, size)))
            }
            _ => Ok(None),
        }
    }

    /// Replaces sealed segment `base` by `cleaned` if it is still the segment of `size` bytes the
    /// cleaner read at `generation`: under the partition lock runs `commit` (the cleaner's renames,
    /// which put the cleaned file in place as `base`'s `.log` and remove its index files), then
    /// installs `cleaned` and writes its index files (synced by the flusher). Returns false, doing
    /// nothing, if the segment changed meanwhile. The caller fsyncs the directory.
    pub(crate) fn replace_sealed_segment(
        &self,
        base: i64,
        size: u64,
        generation: u64,
        mut cleaned: Segment,
        commit: impl FnOnce(&dyn Storage) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let mut inner = self.inner.lock();
        let still_there = !self.is_deleted()
            && inner.generation == generation
            && base != inner.active_base()
            && inner.segments.get(&base).is_some_and(|s| s.size == size);
        if !still_there {
            return Ok(false);
        }
        commit(&*self.shared.storage)?;
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            self.shared
                .cache
                .invalidate(&segment::segment_path(&self.dir(), base, suffix));
        }
        cleaned.created_ms = inner
            .segments
            .get(&base)
            .map_or(cleaned.created_ms, |s| s.created_ms);
        let written = self.write_index_files(&cleaned)?;
        inner
            .pending
            .sync_paths
            .extend(written.into_iter().map(|(p, _)| p));
        inner.segments.insert(base, cleaned);
        drop(inner);
        self.enqueue_flush();
        Ok(true)
    }

    /// Moves the cleaner point up to `offset` unless a truncation happened since `generation`.
    pub(crate) fn advance_cleaner_point(&self, generation: u64, offset: i64) -> bool {
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return false;
        }
        inner.cleaner_point = inner.cleaner_point.max(offset);
        true
    }
}
