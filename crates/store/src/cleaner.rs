//! Log compaction (Kafka's log cleaner) for `cleanup.policy=compact` and `compact,delete`.
//!
//! A pass over one partition: (1) build an offset map key → latest offset over the dirty range,
//! sealed segments from the cleaner point up to `dirty_end` (stopping early at
//! `min.compaction.lag.ms`, `CLEANER_KEYS_MAX` / `CLEANER_MAP_BYTES_MAX` or the tick budget);
//! (2) rewrite every sealed segment below `dirty_end`, one at a time, keeping a record iff no later
//! record has its key (keyless records, markers and the batches of aborted transactions are kept,
//! and aborted records supersede none: decision 0064); (3) move the cleaner point
//! to `dirty_end` and checkpoint it (`cleaner-offset-checkpoint`).
//!
//! Output: one batch per input batch that keeps records, same baseOffset, lastOffsetDelta,
//! producer id/epoch/baseSequence and leader epoch, uncompressed; an input batch kept whole and
//! unchanged is copied byte for byte. A run of batches that lost all their records becomes one
//! empty batch spanning the run (carrying the last one's producer fields), so offsets stay
//! contiguous inside every segment — recovery relies on that to catch damaged offsets.
//! Tombstones (null value) survive `delete.retention.ms` after the pass that first saw them: that
//! pass stamps the batch with a delete horizon (attribute bit 6, baseTimestamp = now +
//! delete.retention.ms, record timestamps re-based so they are unchanged, as in KIP-534), and a
//! later pass after the horizon drops them.
//!
//! Crash safety (swap protocol, see docs/log-format.md): write `B.log.cleaned`, fdatasync, then
//! under the partition lock re-check the segment is still there, rename to `B.log.swap` (the commit
//! point), delete `B.index`/`B.timeindex`, rename `B.log.swap` → `B.log`, then fsync the dir outside
//! the lock. Loading finishes a committed swap (`finish_interrupted_swaps`) and deletes `.cleaned`.
//!
//! Locking: reading and writing segment data happens outside the partition lock (sealed segments
//! are immutable); the log takes its lock to hand out segment lists and files, and around the
//! renames (`PartitionLog::replace_sealed_segment`). A truncation during a pass (generation
//! change) or a deleted partition aborts the pass. This module never touches the log's insides:
//! it decides what to keep, the log applies the swap and the cleaner point.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{self, BatchHeader, ATTR_DELETE_HORIZON};
use crate::checkpoint;
use crate::config::LogConfig;
use crate::error::StoreError;
use crate::limits::{
    CLEANER_BYTES_PER_TICK, CLEANER_KEYS_MAX, CLEANER_MAP_BYTES_MAX, CLEANER_PASSES_PER_TICK,
    CLEANER_WRITE_CHUNK_BYTES, SEGMENT_BYTES_MAX,
};
use crate::log::{PartitionLog, SealedSegment};
use crate::records::{self, BatchFields, Record};
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::shared::StoreShared;
use crate::storage::Storage;

/// Partition file holding the cleaner point (one decimal offset).
pub(crate) const CLEANER_POINT_FILE: &str = "cleaner-offset-checkpoint";

fn io(what: impl std::fmt::Display, e: std::io::Error) -> StoreError {
    StoreError::io(what, e)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Completes a cleaner swap interrupted by a crash: a `B.log.swap` is a committed cleaned segment
/// and replaces `B.log` (its possibly stale indexes are deleted); other `.swap` files are removed.
pub(crate) fn finish_interrupted_swaps(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<(), StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io(format!("list {}", dir.display()), e))?;
    let mut touched = false;
    for entry in entries {
        let entry = entry.map_err(|e| io(format!("list {}", dir.display()), e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".swap") else {
            continue;
        };
        touched = true;
        match segment::parse_segment_name(stem) {
            Some((base, LOG_SUFFIX)) => {
                for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                    let p = segment::segment_path(dir, base, suffix);
                    storage
                        .remove_file(&p)
                        .map_err(|e| io(format!("remove {}", p.display()), e))?;
                }
                let target = segment::segment_path(dir, base, LOG_SUFFIX);
                storage
                    .rename(&entry.path(), &target)
                    .map_err(|e| io(format!("rename {}", entry.path().display()), e))?;
            }
            _ => storage
                .remove_file(&entry.path())
                .map_err(|e| io(format!("remove {}", entry.path().display()), e))?,
        }
    }
    if touched {
        storage
            .sync_dir(dir)
            .map_err(|e| io(format!("fsync {}", dir.display()), e))?;
    }
    Ok(())
}

/// The persisted cleaner point of a partition, if any.
pub(crate) fn read_cleaner_point(dir: &Path) -> Option<i64> {
    let bytes = checkpoint::read_bounded(&dir.join(CLEANER_POINT_FILE)).ok()??;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// One cleaning pass in progress.
struct Pass {
    log: Arc<PartitionLog>,
    generation: u64,
    map: HashMap<Box<[u8]>, i64>,
    aborted: Aborted,
    dirty_end: i64,
    remaining: VecDeque<i64>,
}

/// The aborted transactions of a log, by producer: which batches belong to one.
struct Aborted(HashMap<i64, Vec<(i64, i64)>>);

impl Aborted {
    fn of(log: &PartitionLog) -> Aborted {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for t in log.aborted_transactions(0, i64::MAX) {
            by_producer
                .entry(t.producer_id)
                .or_default()
                .push((t.first_offset, t.last_offset));
        }
        Aborted(by_producer)
    }

    /// Whether `h` is a data batch of an aborted transaction.
    fn holds(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && !h.is_control()
            && self.0.get(&h.producer_id).is_some_and(|ranges| {
                ranges
                    .iter()
                    .any(|(first, last)| *first <= h.base_offset && h.base_offset <= *last)
            })
    }
}

/// Cursor of the cleaner across maintenance ticks.
#[derive(Default)]
pub(crate) struct CleanerState {
    pass: Option<Pass>,
}

impl std::fmt::Debug for CleanerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanerState")
            .field(
                "in_pass",
                &self
                    .pass
                    .as_ref()
                    .map(|p| p.log.topic_partition().to_string()),
            )
            .finish()
    }
}

impl CleanerState {
    /// Cleans what is due within this tick's budget → (passes finished, bytes read).
    pub(crate) fn run(
        &mut self,
        shared: &StoreShared,
        logs: &[Arc<PartitionLog>],
        now_ms: i64,
    ) -> Result<(usize, u64), StoreError> {
        let mut budget = CLEANER_BYTES_PER_TICK;
        let mut finished = 0usize;
        let mut bytes = 0u64;
        let mut started = 0usize;
        while budget > 0 {
            if self.pass.is_none() {
                if started >= CLEANER_PASSES_PER_TICK {
                    break;
                }
                started += 1;
                let Some(log) = choose(logs, now_ms) else {
                    break;
                };
                let (pass, read) = match start_pass(Arc::clone(&log), now_ms, budget) {
                    Ok(r) => r,
                    Err(_) if log.is_deleted() => (None, 0),
                    Err(e) => return Err(e),
                };
                budget = budget.saturating_sub(read);
                bytes += read;
                if pass.is_none() {
                    // Nothing cleanable after all (e.g. min.compaction.lag.ms): done for now.
                    break;
                }
                self.pass = pass;
                continue;
            }
            let Some(pass) = self.pass.as_mut() else {
                break;
            };
            if pass.log.is_deleted() || pass.log.generation() != pass.generation {
                self.pass = None;
                continue;
            }
            match pass.remaining.pop_front() {
                Some(base) => {
                    let read = match clean_segment(shared, pass, base, now_ms) {
                        Ok(read) => read,
                        Err(_) if pass.log.is_deleted() => {
                            self.pass = None;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    budget = budget.saturating_sub(read.max(1));
                    bytes += read;
                }
                None => {
                    finish_pass(shared, pass)?;
                    finished += 1;
                    self.pass = None;
                }
            }
        }
        Ok((finished, bytes))
    }
}

/// Whether `min.compaction.lag.ms` lets the cleaner touch `seg`.
fn lag_passed(config: &LogConfig, seg: &SealedSegment, now_ms: i64) -> bool {
    config.min_compaction_lag_ms <= 0
        || seg.max_timestamp <= now_ms.saturating_sub(config.min_compaction_lag_ms)
}

/// The compacted partition with the highest dirty ratio at or above its threshold.
fn choose(logs: &[Arc<PartitionLog>], now_ms: i64) -> Option<Arc<PartitionLog>> {
    let mut best: Option<(f64, &Arc<PartitionLog>)> = None;
    for log in logs {
        let config = log.config();
        if !config.cleanup_policy.compact || log.is_deleted() {
            continue;
        }
        let Ok(view) = log.cleaner_view(&config, config.min_compaction_lag_ms > 0) else {
            continue;
        };
        let (mut clean, mut dirty) = (0u64, 0u64);
        for (i, seg) in view.segments.iter().enumerate() {
            if seg.base_offset < view.cleaner_point {
                clean += seg.size;
            } else if lag_passed(&config, seg, now_ms) && view.segment_end(i) <= view.clean_below {
                dirty += seg.size;
            } else {
                break;
            }
        }
        if dirty == 0 {
            continue;
        }
        let ratio = dirty as f64 / (clean + dirty) as f64;
        if ratio >= config.min_cleanable_dirty_ratio && best.is_none_or(|(r, _)| ratio > r) {
            best = Some((ratio, log));
        }
    }
    best.map(|(_, l)| Arc::clone(l))
}

/// Builds the offset map over the dirty range → (pass, bytes read).
fn start_pass(
    log: Arc<PartitionLog>,
    now_ms: i64,
    budget: u64,
) -> Result<(Option<Pass>, u64), StoreError> {
    let config = log.config();
    let view = log.cleaner_view(&config, config.min_compaction_lag_ms > 0)?;
    let cleaner_point = view.cleaner_point;
    let mut map: HashMap<Box<[u8]>, i64> = HashMap::new();
    let aborted = Aborted::of(&log);
    let mut map_bytes = 0usize;
    let mut read = 0u64;
    let mut dirty_end = cleaner_point;
    for (i, seg) in view.segments.iter().enumerate() {
        if seg.base_offset < cleaner_point {
            continue;
        }
        let full =
            map.len() >= CLEANER_KEYS_MAX || map_bytes >= CLEANER_MAP_BYTES_MAX || read >= budget;
        let seg_end = view.segment_end(i);
        if !lag_passed(&config, seg, now_ms)
            || seg_end > view.clean_below
            || (full && dirty_end > cleaner_point)
        {
            break;
        }
        let base = seg.base_offset;
        let Some((file, size)) = log.sealed_segment_file(base)? else {
            break;
        };
        let mut error = None;
        segment::scan_batches(&file, 0, size, base, base, |_, h, bytes| {
            // Records of aborted transactions supersede nothing (decision 0064).
            if h.is_control() || aborted.holds(h) || error.is_some() {
                return;
            }
            match records::decode_records(bytes) {
                Ok((_, recs)) => {
                    for r in recs {
                        if let Some(k) = r.key {
                            if map.insert(k.as_ref().into(), r.offset).is_none() {
                                map_bytes += k.len();
                            }
                        }
                    }
                }
                Err(e) => error = Some(e.to_string()),
            }
        })
        .map_err(|e| {
            io(
                format!("scan segment {base} of {}", log.topic_partition()),
                e,
            )
        })?;
        if let Some(e) = error {
            tracing::warn!(partition = %log.topic_partition(), segment = base, error = %e, "cleaner cannot decode a batch; stopping the pass before it");
            break;
        }
        read += size;
        dirty_end = seg_end;
    }
    if dirty_end <= cleaner_point {
        return Ok((None, read));
    }
    let remaining = view
        .segments
        .iter()
        .map(|s| s.base_offset)
        .filter(|b| *b < dirty_end)
        .collect();
    Ok((
        Some(Pass {
            log,
            generation: view.generation,
            map,
            aborted,
            dirty_end,
            remaining,
        }),
        read,
    ))
}

/// Output of cleaning one segment, built incrementally.
struct Output<'a> {
    storage: &'a dyn Storage,
    file: std::fs::File,
    buf: Vec<u8>,
    written: u64,
    segment: Segment,
    interval: u32,
}

impl Output<'_> {
    fn push(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let h = BatchHeader::parse(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let position = self.written + self.buf.len() as u64;
        if position + bytes.len() as u64 > SEGMENT_BYTES_MAX {
            return Err(StoreError::Corrupt(
                "cleaned segment would exceed the segment size limit".into(),
            ));
        }
        self.segment.track_batch(position, &h, self.interval);
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CLEANER_WRITE_CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if !self.buf.is_empty() {
            self.storage
                .write_at(&self.file, &self.buf, self.written)
                .map_err(|e| io("write cleaned segment", e))?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

/// An empty batch covering `[base, last.last_offset()]` with `last`'s producer fields.
fn filler(base: i64, last: &BatchHeader) -> bytes::BytesMut {
    let span = last.last_offset() - base;
    let fields = BatchFields {
        base_offset: base,
        partition_leader_epoch: last.partition_leader_epoch,
        attributes: last.attributes & !(batch::ATTR_COMPRESSION_MASK | ATTR_DELETE_HORIZON),
        last_offset_delta: i32::try_from(span).unwrap_or(i32::MAX),
        base_timestamp: last.max_timestamp,
        max_timestamp: last.max_timestamp,
        producer_id: last.producer_id,
        producer_epoch: last.producer_epoch,
        base_sequence: if last.base_sequence < 0 {
            last.base_sequence
        } else {
            batch::sequence_add(
                last.base_sequence,
                -i32::try_from(last.base_offset - base).unwrap_or(0),
            )
        },
    };
    records::encode_records(&fields, &[])
}

/// Rewrites one sealed segment → bytes read.
fn clean_segment(
    shared: &StoreShared,
    pass: &mut Pass,
    base: i64,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let log = Arc::clone(&pass.log);
    let config = log.config();
    let storage = &*shared.storage;
    let Some((file, size)) = log.sealed_segment_file(base)? else {
        return Ok(0);
    };
    let log_path = segment::segment_path(&log.dir(), base, LOG_SUFFIX);
    let cleaned_path = with_suffix(&log_path, ".cleaned");
    let out_file = storage
        .open(&cleaned_path, true)
        .map_err(|e| io(format!("create {}", cleaned_path.display()), e))?;
    storage
        .set_len(&out_file, 0)
        .map_err(|e| io(format!("truncate {}", cleaned_path.display()), e))?;
    let mut out = Output {
        storage,
        file: out_file,
        buf: Vec::new(),
        written: 0,
        segment: Segment::new_empty(base, &config, now_ms),
        interval: config.index_interval_bytes,
    };
    let mut run: Option<(i64, BatchHeader)> = None; // removed batches not yet covered
    let mut failure: Option<StoreError> = None;
    let mut changed = false;
    let scan = segment::scan_batches(&file, 0, size, base, base, |_, h, bytes| {
        if failure.is_some() {
            return;
        }
        let result = (|| -> Result<(), StoreError> {
            // Markers and aborted transactions' batches are kept whole (decision 0064).
            let kept = if h.is_control() || pass.aborted.holds(h) {
                Some(Bytes::copy_from_slice(bytes))
            } else {
                filter_batch(h, bytes, &pass.map, &config, now_ms, &mut changed)?
            };
            match kept {
                None => {
                    changed = true;
                    let start = run.map_or(h.base_offset, |(s, _)| s);
                    run = Some((start, *h));
                }
                Some(b) => {
                    if let Some((start, last)) = run.take() {
                        out.push(&filler(start, &last))?;
                    }
                    out.push(&b)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            failure = Some(e);
        }
    })
    .map_err(|e| io(format!("scan {}", log_path.display()), e))?;
    let abandon = |storage: &dyn Storage| {
        let _ = storage.remove_file(&cleaned_path);
    };
    if let Some(e) = failure {
        abandon(storage);
        tracing::warn!(partition = %log.topic_partition(), segment = base, error = %e, "skipping segment in cleaning");
        return Ok(size);
    }
    if scan.valid_end != size || !changed {
        abandon(storage);
        return Ok(size);
    }
    if let Some((start, last)) = run.take() {
        out.push(&filler(start, &last))?;
    }
    out.flush()?;
    storage
        .sync(&out.file)
        .map_err(|e| io(format!("fdatasync {}", cleaned_path.display()), e))?;
    out.segment.size = out.written;
    out.segment.finish_time_index();

    // Swap under the log's lock, which re-checks that nothing replaced or removed the segment
    // meanwhile. The rename to `.swap` is the commit point (see the module comment).
    let cleaned = std::mem::replace(&mut out.segment, Segment::new_empty(base, &config, now_ms));
    let dir = log.dir();
    let swapped = log.replace_sealed_segment(base, size, pass.generation, cleaned, |storage| {
        segment::swap_into_place(storage, &dir, base, &cleaned_path)
            .map_err(|e| io(format!("swap {} into place", cleaned_path.display()), e))
    })?;
    if !swapped {
        abandon(storage);
        return Ok(size);
    }
    storage
        .sync_dir(&dir)
        .map_err(|e| io(format!("fsync {}", dir.display()), e))?;
    Ok(size)
}

/// The records of one data batch that survive → `None` if none, `Some(bytes)` for the batch to
/// write (the input bytes if nothing changed).
fn filter_batch(
    h: &BatchHeader,
    bytes: &[u8],
    map: &HashMap<Box<[u8]>, i64>,
    config: &LogConfig,
    now_ms: i64,
    changed: &mut bool,
) -> Result<Option<Bytes>, StoreError> {
    let (_, recs) =
        records::decode_records(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let has_horizon = h.attributes & ATTR_DELETE_HORIZON != 0;
    let horizon_passed = has_horizon && now_ms > h.base_timestamp;
    let total = recs.len();
    let kept: Vec<Record> = recs
        .into_iter()
        .filter(|r| {
            let latest = match &r.key {
                Some(k) => map.get(k.as_ref()).is_none_or(|latest| r.offset >= *latest),
                None => true,
            };
            latest && !(r.value.is_none() && horizon_passed)
        })
        .collect();
    if kept.is_empty() {
        return Ok(None);
    }
    let tombstones = kept.iter().any(|r| r.value.is_none());
    let needs_horizon = tombstones && !has_horizon;
    if kept.len() == total && !needs_horizon && h.compression() == 0 {
        return Ok(Some(Bytes::copy_from_slice(bytes)));
    }
    *changed = true;
    let (attributes, base_timestamp) = if tombstones {
        let horizon = if has_horizon {
            h.base_timestamp
        } else {
            now_ms.saturating_add(config.delete_retention_ms.max(0))
        };
        (h.attributes | ATTR_DELETE_HORIZON, horizon)
    } else {
        let first_ts = kept
            .iter()
            .map(|r| r.timestamp)
            .min()
            .unwrap_or(h.base_timestamp);
        (h.attributes & !ATTR_DELETE_HORIZON, first_ts)
    };
    let max_timestamp = if h.is_log_append_time() {
        h.max_timestamp
    } else {
        kept.iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(h.max_timestamp)
    };
    let fields = BatchFields {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        attributes,
        last_offset_delta: h.last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        base_sequence: h.base_sequence,
    };
    Ok(Some(records::encode_records(&fields, &kept).freeze()))
}

/// Moves the cleaner point to the end of the pass and checkpoints it.
fn finish_pass(shared: &StoreShared, pass: &Pass) -> Result<(), StoreError> {
    let log = &pass.log;
    if !log.advance_cleaner_point(pass.generation, pass.dirty_end) {
        return Ok(());
    }
    let path = log.dir().join(CLEANER_POINT_FILE);
    checkpoint::write_atomic(
        &*shared.storage,
        &path,
        pass.dirty_end.to_string().as_bytes(),
    )
    .map_err(|e| io(format!("write {}", path.display()), e))
}
