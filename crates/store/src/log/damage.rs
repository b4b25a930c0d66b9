//! A log's damaged ranges and their repair: what the scrubber found (`record_damage`), what reads
//! refuse (`damage_bound`) and resume after (`resync_after_damage`), and the rewrite of a sealed
//! segment with a replica's copy of its damaged batches (`repair_segment`), swapped in as the
//! cleaner swaps a cleaned segment.
//!
//! Invariants: a repair never changes which offsets the log holds, its log end, high watermark or
//! log start: the replacement must be valid batches covering exactly each range's `[from, to)`,
//! and the rewritten segment must scan valid from its first byte to its last and end at the same
//! offset, or nothing changes. Ranges are kept per segment; a rescan of a segment replaces its
//! ranges; a truncation or deletion that removes the segment drops them.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::PartitionLog;
use crate::batch;
use crate::damage::DamagedRange;
use crate::error::StoreError;
use crate::index::IndexEntry;
use crate::limits::{COPY_CHUNK_BYTES, LOG_OVERHEAD_BYTES};
use crate::segment::{self, Segment, LOG_SUFFIX};
use crate::storage::Storage;

/// Why a replacement for a damaged range was refused.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The replica's batches do not cover the range exactly, or fail their own check.
    #[error("replacement for offsets [{from}, {to}): {why}")]
    BadReplacement { from: i64, to: i64, why: String },
    /// The segment changed (truncated, cleaned, deleted) since its damage was recorded.
    #[error("segment {0} changed since its damage was recorded")]
    Stale(i64),
    /// Rewriting the segment failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A sealed segment as the scrubber reads it (outside the partition lock).
pub(crate) struct ScrubView {
    pub(crate) base_offset: i64,
    pub(crate) file: Arc<std::fs::File>,
    pub(crate) size: u64,
    /// The offset after the segment (the next segment's base offset).
    pub(crate) end_offset: i64,
    /// The loaded offset index's entries (`None`: not loaded; its file is checked when loaded).
    pub(crate) index: Option<Vec<IndexEntry>>,
    generation: u64,
}

impl PartitionLog {
    /// Base offsets of the sealed segments.
    pub(crate) fn sealed_segment_bases(&self) -> Vec<i64> {
        let inner = self.inner.lock();
        let active = inner.active_base();
        inner.segments.range(..active).map(|(b, _)| *b).collect()
    }

    /// Sealed segment `base` for a scan; `None` if it is gone or active.
    pub(crate) fn scrub_view(&self, base: i64) -> Result<Option<ScrubView>, StoreError> {
        let mut inner = self.inner.lock();
        let active = inner.active_base();
        let generation = inner.generation;
        let end_offset = inner
            .segments
            .range(base + 1..)
            .next()
            .map_or(inner.log_end_offset, |(b, _)| *b);
        let Some(seg) = inner.segments.get_mut(&base).filter(|_| base != active) else {
            return Ok(None);
        };
        let index = seg.indexes.as_ref().map(|(index, _)| index.entries.clone());
        Ok(Some(ScrubView {
            base_offset: base,
            size: seg.size,
            file: self.segment_file(seg, false)?,
            end_offset,
            index,
            generation,
        }))
    }

    /// Records the damage a scan of `view` found, unless the segment changed since (then the scan
    /// says nothing). Whether it was recorded.
    pub(crate) fn record_scan(&self, view: &ScrubView, ranges: &[DamagedRange]) -> bool {
        {
            let inner = self.inner.lock();
            let same = inner.generation == view.generation
                && inner
                    .segments
                    .get(&view.base_offset)
                    .is_some_and(|s| s.size == view.size);
            if !same || self.is_deleted() {
                return false;
            }
        }
        self.record_damage(view.base_offset, ranges);
        true
    }

    /// Replaces the damaged ranges recorded for `segment_base` by `ranges` (a fresh scan of that
    /// segment), counting and logging the new ones. Called by the scrubber.
    pub(crate) fn record_damage(&self, segment_base: i64, ranges: &[DamagedRange]) {
        let mut damage = self.damage.lock();
        let before: Vec<i64> = damage
            .values()
            .filter(|r| r.segment_base == segment_base)
            .map(|r| r.from)
            .collect();
        for from in &before {
            damage.remove(from);
        }
        for r in ranges {
            if !before.contains(&r.from) {
                millrace_metrics::global().log_corrupt_batches.inc();
                tracing::error!(
                    partition = %self.tp,
                    segment = segment_base,
                    from = r.from,
                    to = r.to,
                    position = r.position,
                    bytes = r.len,
                    "damaged batches in a sealed segment: not served until repaired from a replica"
                );
            }
            damage.insert(r.from, *r);
        }
        self.shared.damage.set_damaged(&self.tp, !damage.is_empty());
    }

    /// Drops ranges whose segment is gone or was cut (retention, truncation, deletion).
    pub fn prune_damage(&self) {
        let live: Vec<(i64, u64)> = {
            let inner = self.inner.lock();
            inner.segments.iter().map(|(b, s)| (*b, s.size)).collect()
        };
        let mut damage = self.damage.lock();
        let before = damage.len();
        damage.retain(|_, r| {
            live.iter()
                .any(|(b, size)| *b == r.segment_base && r.position + r.len <= *size)
        });
        if damage.len() != before {
            self.shared.damage.set_damaged(&self.tp, !damage.is_empty());
        }
    }

    /// The damaged ranges of this log, by offset.
    pub fn damaged_ranges(&self) -> Vec<DamagedRange> {
        self.damage.lock().values().copied().collect()
    }

    /// Before a read at `offset`: `Corrupt` if it is damaged, else the first damaged offset after
    /// it (where the read must stop), if any.
    pub(crate) fn damage_bound(&self, offset: i64) -> Result<Option<i64>, StoreError> {
        let damage = self.damage.lock();
        if let Some((_, r)) = damage.range(..=offset).next_back() {
            if r.contains(offset) {
                return Err(StoreError::Corrupt(format!(
                    "{}: offsets [{}, {}) are damaged and await repair from a replica",
                    self.tp, r.from, r.to
                )));
            }
        }
        Ok(damage
            .range(offset.saturating_add(1)..)
            .next()
            .map(|(from, _)| *from))
    }

    /// Where a read of `offset` in segment `segment_base` can start when the offset index would
    /// start it before a damaged range it cannot walk through: just after the last such range
    /// ending at or before `offset`, if that is further on than `start`.
    pub(crate) fn resync_after_damage(
        &self,
        segment_base: i64,
        offset: i64,
        start: IndexEntry,
    ) -> IndexEntry {
        let damage = self.damage.lock();
        damage
            .values()
            .filter(|r| r.segment_base == segment_base && r.to <= offset)
            .map(|r| IndexEntry {
                offset: r.to,
                position: u32::try_from(r.position + r.len).unwrap_or(u32::MAX),
            })
            .filter(|e| e.position > start.position && e.position != u32::MAX)
            .max_by_key(|e| e.position)
            .unwrap_or(start)
    }

    /// Rewrites sealed segment `segment_base` with `replacements` (one per damaged range of that
    /// segment, each the replica's whole batches for exactly its offsets) and swaps it in. Returns
    /// the number of ranges repaired; nothing changes on any error.
    pub fn repair_segment(
        &self,
        segment_base: i64,
        replacements: &[(DamagedRange, Bytes)],
    ) -> Result<usize, RepairError> {
        let mut wanted: Vec<DamagedRange> = self
            .damage
            .lock()
            .values()
            .filter(|r| r.segment_base == segment_base)
            .copied()
            .collect();
        wanted.sort_by_key(|r| r.position);
        let mut given: Vec<&(DamagedRange, Bytes)> = replacements.iter().collect();
        given.sort_by_key(|(r, _)| r.position);
        if wanted.is_empty() || given.iter().map(|(r, _)| *r).ne(wanted.iter().copied()) {
            return Err(RepairError::Stale(segment_base));
        }
        for (range, bytes) in &given {
            check_replacement(range, bytes)?;
        }
        let generation = self.generation();
        let Some((file, size)) = self.sealed_segment_file(segment_base)? else {
            return Err(RepairError::Stale(segment_base));
        };
        // A replica move that changes the dir meanwhile makes the swap below fail (retried).
        let dir = self.dir();
        let log_path = segment::segment_path(&dir, segment_base, LOG_SUFFIX);
        let rewritten = PathBuf::from(format!("{}.cleaned", log_path.display()));
        let storage = &*self.shared.storage;
        let result = self.write_repaired(&file, size, segment_base, &given, &rewritten);
        let fresh = match result {
            Ok(fresh) => fresh,
            Err(e) => {
                let _ = storage.remove_file(&rewritten);
                return Err(e);
            }
        };
        let swapped =
            self.replace_sealed_segment(segment_base, size, generation, fresh, |storage| {
                segment::swap_into_place(storage, &dir, segment_base, &rewritten).map_err(|e| {
                    StoreError::io(format!("swap {} into place", rewritten.display()), e)
                })
            })?;
        if !swapped {
            let _ = storage.remove_file(&rewritten);
            return Err(RepairError::Stale(segment_base));
        }
        storage
            .sync_dir(&dir)
            .map_err(|e| StoreError::io(format!("fsync {}", dir.display()), e))?;
        self.record_damage(segment_base, &[]);
        millrace_metrics::global()
            .log_repaired_batches
            .inc_by(given.len() as u64);
        tracing::info!(partition = %self.tp, segment = segment_base, ranges = given.len(), "repaired damaged batches from a replica");
        Ok(given.len())
    }

    /// Writes `[0, size)` of `file` with each damaged range replaced to `out`, fdatasyncs it and
    /// scans it whole: the segment it holds (indexes built, every byte checked).
    fn write_repaired(
        &self,
        file: &std::fs::File,
        size: u64,
        segment_base: i64,
        given: &[&(DamagedRange, Bytes)],
        out: &std::path::Path,
    ) -> Result<Segment, RepairError> {
        let storage = &*self.shared.storage;
        let io = |what: &str, e| StoreError::io(format!("{what} {}", out.display()), e);
        let out_file = storage.open(out, true).map_err(|e| io("create", e))?;
        storage
            .set_len(&out_file, 0)
            .map_err(|e| io("truncate", e))?;
        let mut written = 0u64;
        let mut copied_to = 0u64;
        for (range, bytes) in given {
            copy_range(
                storage,
                file,
                &out_file,
                copied_to,
                range.position,
                &mut written,
            )
            .map_err(|e| io("write", e))?;
            storage
                .write_at(&out_file, bytes, written)
                .map_err(|e| io("write", e))?;
            written += bytes.len() as u64;
            copied_to = range.position + range.len;
        }
        copy_range(storage, file, &out_file, copied_to, size, &mut written)
            .map_err(|e| io("write", e))?;
        storage.sync(&out_file).map_err(|e| io("fdatasync", e))?;
        let config = self.config();
        let expected_end = self
            .inner
            .lock()
            .segments
            .get(&segment_base)
            .map(|s| s.next_offset);
        let mut fresh = Segment::new_empty(segment_base, &config, super::now_ms());
        let end = segment::scan_batches(
            &out_file,
            0,
            written,
            segment_base,
            segment_base,
            |pos, h, _| fresh.track_batch(pos, h, config.index_interval_bytes),
        )
        .map_err(|e| io("scan", e))?;
        let whole = end.error.is_none() && end.valid_end == written;
        if !whole || expected_end.is_some_and(|e| e != end.next_offset) {
            return Err(RepairError::BadReplacement {
                from: given.first().map_or(segment_base, |(r, _)| r.from),
                to: end.next_offset,
                why: format!(
                    "the repaired segment does not scan whole ({:?}, ends at {})",
                    end.error, end.next_offset
                ),
            });
        }
        fresh.size = written;
        fresh.checked = segment::Checked::prefix(written);
        fresh.finish_time_index();
        Ok(fresh)
    }
}

/// The replacement holds valid batches with contiguous offsets from exactly `range.from` to
/// exactly `range.to`.
fn check_replacement(range: &DamagedRange, bytes: &[u8]) -> Result<(), RepairError> {
    let bad = |why: String| RepairError::BadReplacement {
        from: range.from,
        to: range.to,
        why,
    };
    let mut pos = 0usize;
    let mut next = range.from;
    while pos < bytes.len() {
        let rest = bytes.get(pos..).unwrap_or(&[]);
        let h = batch::validate_stored(rest).map_err(|e| bad(e.to_string()))?;
        if h.base_offset != next {
            return Err(bad(format!(
                "batch at {} where {next} was expected",
                h.base_offset
            )));
        }
        next = h.next_offset();
        pos += h.total_size().max(LOG_OVERHEAD_BYTES);
    }
    if next != range.to {
        return Err(bad(format!("batches end at {next}")));
    }
    Ok(())
}

/// Copies `[from, to)` of `src` to the end (`*written`) of `dst`.
fn copy_range(
    storage: &dyn Storage,
    src: &std::fs::File,
    dst: &std::fs::File,
    from: u64,
    to: u64,
    written: &mut u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut pos = from;
    while pos < to {
        let n = (to - pos).min(COPY_CHUNK_BYTES as u64) as usize;
        let chunk = buf.get_mut(..n).unwrap_or(&mut []);
        src.read_exact_at(chunk, pos)?;
        storage.write_at(dst, chunk, *written)?;
        *written += n as u64;
        pos += n as u64;
    }
    Ok(())
}
