//! The scrubber: re-reads every sealed segment of every partition at a bounded rate, checking each
//! batch (length bounds, magic, CRC, counts, contiguous offsets — what recovery checks) and that
//! the loaded offset index points at batch starts with the right offsets. What fails is recorded
//! as damaged ranges in the partition's log (`log/damage.rs`): reads stop before them, and
//! replication repairs them from a replica. A full pass starts every `millrace.log.scrub.interval.ms`
//! (the first one interval after the store starts; 0: no periodic passes), reading at most
//! `millrace.log.scrub.max.bytes.per.sec`; a partition in which a read found a bad batch is
//! scanned before anything else, periodic passes or not.
//!
//! Not here: the active segment (it is being written; recovery and the read path check it), what
//! to do about damage (replication), the time index (a cache whose errors only make a timestamp
//! lookup start a little early; it is rebuilt with its segment).
//!
//! Threads: one `millrace-scrubber` thread per store. It reads segment files outside any lock and
//! takes the partition lock only to find a segment and to record what it found; a segment that
//! changed meanwhile (truncated, cleaned, deleted) is not judged on a stale read.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::{self, BatchHeader};
use crate::config::TopicPartition;
use crate::damage::{DamageBoard, DamagedRange};
use crate::index::IndexEntry;
use crate::limits::{BATCH_BYTES_MAX, LOG_OVERHEAD_BYTES, SCRUB_POLL_MS, SCRUB_RATE_WINDOW_MS};
use crate::log::{PartitionLog, ScrubView};
use crate::segment;

/// How the scrubber runs.
#[derive(Debug, Clone, Copy)]
pub struct ScrubSettings {
    /// Time between the starts of two full passes; zero: no periodic passes.
    pub interval: Duration,
    /// Most bytes read per second.
    pub bytes_per_sec: u64,
}

/// Bounds the read rate: sleeps whenever more bytes were read in the current window than the
/// rate allows.
pub(crate) struct Pace {
    bytes_per_sec: u64,
    window_start: Instant,
    window_bytes: u64,
}

impl Pace {
    pub(crate) fn new(bytes_per_sec: u64) -> Pace {
        Pace {
            bytes_per_sec: bytes_per_sec.max(1),
            window_start: Instant::now(),
            window_bytes: 0,
        }
    }

    /// Accounts `n` bytes read, sleeping as long as the rate requires (waking early on `stop`).
    pub(crate) fn consume(&mut self, n: u64, stop: &AtomicBool) {
        millrace_metrics::global().log_scrubbed_bytes.inc_by(n);
        self.window_bytes = self.window_bytes.saturating_add(n);
        let due = Duration::from_secs_f64(self.window_bytes as f64 / self.bytes_per_sec as f64);
        loop {
            let elapsed = self.window_start.elapsed();
            if due <= elapsed || stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep((due - elapsed).min(Duration::from_millis(SCRUB_POLL_MS)));
        }
        if self.window_start.elapsed() > Duration::from_millis(SCRUB_RATE_WINDOW_MS) {
            self.window_start = Instant::now();
            self.window_bytes = 0;
        }
    }
}

/// What a scan of one segment found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) damaged: Vec<DamagedRange>,
    /// The loaded offset index names a position that is not the start of a batch with the entry's
    /// offset.
    pub(crate) index_mismatch: bool,
}

/// Scans `[0, view.size)` of a sealed segment: every batch checked, damaged stretches recorded
/// with the first valid batch after each, the index entries compared with the batches found.
pub(crate) fn scan_segment(
    view: &ScrubView,
    pace: &mut Pace,
    stop: &AtomicBool,
) -> io::Result<Findings> {
    let file = &*view.file;
    let mut findings = Findings::default();
    let entries = view.index.as_deref().unwrap_or(&[]);
    let mut next_entry = 0usize;
    let mut pos = 0u64;
    let mut expected = view.base_offset;
    while pos < view.size && !stop.load(Ordering::Relaxed) {
        let end = segment::scan_batches(
            file,
            pos,
            view.size,
            view.base_offset,
            expected,
            |p, h, bytes| {
                pace.consume(bytes.len() as u64, stop);
                // Entries before this batch that were not at a batch start point inside one.
                while let Some(e) = entries
                    .get(next_entry)
                    .filter(|e| u64::from(e.position) <= p)
                {
                    if u64::from(e.position) < p || e.offset != h.base_offset {
                        findings.index_mismatch = true;
                    }
                    next_entry += 1;
                }
            },
        )?;
        if end.error.is_none() {
            break;
        }
        let (resume_pos, resume_offset) =
            resync(file, end.valid_end, end.next_offset, view, entries)?;
        findings.damaged.push(DamagedRange {
            from: end.next_offset,
            to: resume_offset,
            segment_base: view.base_offset,
            position: end.valid_end,
            len: resume_pos - end.valid_end,
        });
        // Index entries inside the damaged stretch say nothing about the index.
        while entries
            .get(next_entry)
            .is_some_and(|e| u64::from(e.position) < resume_pos)
        {
            next_entry += 1;
        }
        pos = resume_pos;
        expected = resume_offset;
    }
    if entries.len() > next_entry && findings.damaged.is_empty() {
        // Entries past the last batch.
        findings.index_mismatch = true;
    }
    Ok(findings)
}

/// Where the first valid batch after a bad one at `pos` (expected at offset `expected`) starts:
/// after the bad batch's own length if a valid batch with a higher offset is there, else at the
/// first index entry after `pos` whose batch is valid, else the segment's end.
fn resync(
    file: &File,
    pos: u64,
    expected: i64,
    view: &ScrubView,
    entries: &[IndexEntry],
) -> io::Result<(u64, i64)> {
    let mut prefix = [0u8; LOG_OVERHEAD_BYTES];
    if pos + LOG_OVERHEAD_BYTES as u64 <= view.size {
        file.read_exact_at(&mut prefix, pos)?;
        let len = i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        let total = LOG_OVERHEAD_BYTES as u64 + u64::try_from(len).unwrap_or(u64::MAX / 2);
        if total <= BATCH_BYTES_MAX as u64 && pos + total <= view.size {
            let after = pos + total;
            if after == view.size {
                return Ok((view.size, view.end_offset));
            }
            if let Some(h) = valid_batch_at(file, after, view.size)? {
                if h.base_offset > expected {
                    return Ok((after, h.base_offset));
                }
            }
        }
    }
    for e in entries.iter().filter(|e| u64::from(e.position) > pos) {
        let at = u64::from(e.position);
        if let Some(h) = valid_batch_at(file, at, view.size)? {
            if h.base_offset == e.offset && e.offset > expected {
                return Ok((at, e.offset));
            }
        }
    }
    Ok((view.size, view.end_offset))
}

/// The header of the batch at `pos` if it is whole within `size` and valid.
fn valid_batch_at(file: &File, pos: u64, size: u64) -> io::Result<Option<BatchHeader>> {
    let mut prefix = [0u8; LOG_OVERHEAD_BYTES];
    if pos + LOG_OVERHEAD_BYTES as u64 > size {
        return Ok(None);
    }
    file.read_exact_at(&mut prefix, pos)?;
    let len = i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
    let Ok(len) = u64::try_from(len) else {
        return Ok(None);
    };
    let total = LOG_OVERHEAD_BYTES as u64 + len;
    if total > BATCH_BYTES_MAX as u64 || pos + total > size {
        return Ok(None);
    }
    let mut buf = vec![0u8; total as usize];
    file.read_exact_at(&mut buf, pos)?;
    Ok(batch::validate_stored(&buf).ok())
}

/// Scans one sealed segment of `log` and records what it found (unless the segment changed
/// meanwhile); rebuilds an index that disagrees with an undamaged log.
pub(crate) fn scrub_segment(
    log: &PartitionLog,
    base: i64,
    pace: &mut Pace,
    stop: &AtomicBool,
) -> Result<(), crate::error::StoreError> {
    let Some(view) = log.scrub_view(base)? else {
        return Ok(());
    };
    let findings = scan_segment(&view, pace, stop).map_err(|e| {
        crate::error::StoreError::io(format!("scrub {} segment {base}", log.topic_partition()), e)
    })?;
    if stop.load(Ordering::Relaxed) {
        return Ok(());
    }
    let recorded = log.record_scan(&view, &findings.damaged);
    if recorded && findings.index_mismatch && findings.damaged.is_empty() {
        tracing::warn!(partition = %log.topic_partition(), segment = base, "offset index disagrees with its segment; rebuilding it");
        log.reindex_segment_containing(base)?;
    }
    Ok(())
}

/// Scans every sealed segment of `log`.
pub(crate) fn scrub_log(log: &PartitionLog, pace: &mut Pace, stop: &AtomicBool) {
    log.prune_damage();
    for base in log.sealed_segment_bases() {
        if stop.load(Ordering::Relaxed) || log.is_deleted() {
            return;
        }
        if let Err(e) = scrub_segment(log, base, pace, stop) {
            if !log.is_deleted() {
                tracing::warn!(partition = %log.topic_partition(), segment = base, error = %e, "scrubbing a segment failed");
            }
        }
    }
}

/// The scrubber thread's loop, until `stop`: requested scans first, a full pass when one is due.
pub(crate) fn run(
    settings: ScrubSettings,
    board: &DamageBoard,
    logs: impl Fn() -> Vec<Arc<PartitionLog>>,
    log_of: impl Fn(&TopicPartition) -> Option<Arc<PartitionLog>>,
    stop: &AtomicBool,
) {
    let mut pace = Pace::new(settings.bytes_per_sec);
    let periodic = !settings.interval.is_zero();
    let mut next_pass = Instant::now() + settings.interval;
    let requested = || {
        for tp in board.take_scan_requests() {
            if let Some(log) = log_of(&tp) {
                scrub_log(&log, &mut Pace::new(settings.bytes_per_sec), stop);
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        requested();
        if periodic && Instant::now() >= next_pass {
            let started = Instant::now();
            next_pass = started + settings.interval;
            let all = logs();
            for log in &all {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                requested();
                scrub_log(log, &mut pace, stop);
            }
            tracing::info!(
                partitions = all.len(),
                elapsed_ms = started.elapsed().as_millis(),
                "scrub pass finished"
            );
            continue;
        }
        std::thread::sleep(Duration::from_millis(SCRUB_POLL_MS));
    }
}
