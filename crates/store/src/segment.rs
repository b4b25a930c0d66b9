//! One log segment: `<base offset, 20 digits>.log` plus its `.index` and `.timeindex`.
//!
//! Invariants: the `.log` holds whole v2 batches back to back from byte 0 to `size`, with strictly
//! increasing offsets, all in `[base_offset, next_offset)` and `last offset - base_offset <=
//! i32::MAX`. Bytes past `size` (a torn append) are never read and are cut by recovery. The
//! in-memory indexes describe exactly the batches in `[0, size)`. Only the active (last) segment
//! of a partition is appended to; sealed segments change only through truncation, retention
//! (whole-file delete) and the cleaner (whole-file swap).
//!
//! Locking: a `Segment` lives inside its partition's mutex (`log/`); the scanning helpers here
//! take a plain `&File` and may run outside it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::batch::{self, BatchHeader};
use crate::config::LogConfig;
use crate::index::OffsetIndex;
use crate::limits::{
    BATCH_BYTES_MAX, LOG_OVERHEAD_BYTES, SCAN_CHUNK_BYTES, SEGMENT_RELATIVE_OFFSET_MAX,
};
use crate::time_index::TimeIndex;

/// File name suffixes.
pub(crate) const LOG_SUFFIX: &str = "log";
pub(crate) const INDEX_SUFFIX: &str = "index";
pub(crate) const TIME_INDEX_SUFFIX: &str = "timeindex";

/// `<dir>/<base:020>.<suffix>`.
pub(crate) fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}"))
}

/// Parses `<20 digits>.<suffix>` → (base offset, suffix).
pub(crate) fn parse_segment_name(name: &str) -> Option<(i64, &str)> {
    let (stem, suffix) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, suffix))
}

/// Reads a file region through a reusable window, so scanning many small batches costs one
/// `pread` per `SCAN_CHUNK_BYTES` rather than one per batch.
pub(crate) struct ChunkReader<'a> {
    file: &'a File,
    end: u64,
    buf: Vec<u8>,
    buf_pos: u64,
    chunk: usize,
}

impl<'a> ChunkReader<'a> {
    pub(crate) fn new(file: &'a File, end: u64) -> ChunkReader<'a> {
        ChunkReader::with_chunk(file, end, SCAN_CHUNK_BYTES)
    }

    /// A reader fetching `chunk` bytes per `pread`.
    pub(crate) fn with_chunk(file: &'a File, end: u64, chunk: usize) -> ChunkReader<'a> {
        ChunkReader {
            file,
            end,
            buf: Vec::new(),
            buf_pos: 0,
            chunk: chunk.max(crate::limits::BATCH_HEADER_BYTES),
        }
    }

    /// `len` bytes at `pos`, or `None` if they run past `end`.
    pub(crate) fn bytes_at(&mut self, pos: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let want_end = pos.saturating_add(len as u64);
        if want_end > self.end {
            return Ok(None);
        }
        let buf_end = self.buf_pos + self.buf.len() as u64;
        if pos < self.buf_pos || want_end > buf_end {
            let n = (self.end - pos).min(len.max(self.chunk) as u64) as usize;
            self.buf.resize(n, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_pos = pos;
        }
        let from = (pos - self.buf_pos) as usize;
        Ok(self.buf.get(from..from + len))
    }
}

/// Where and why a scan stopped.
#[derive(Debug, Clone)]
pub(crate) struct ScanEnd {
    /// Byte position after the last valid batch.
    pub(crate) valid_end: u64,
    /// Offset after the last valid batch (the `first_offset` given if there was none).
    pub(crate) next_offset: i64,
    /// Why the scan stopped before `end`, if it did.
    pub(crate) error: Option<String>,
}

/// Validates batches in `file[start..end)` one by one (length bounds, magic, CRC, counts, each
/// batch starting exactly where the previous one ended, the first at `first_offset` unless that is
/// `i64::MIN`, relative offsets within `base_offset + i32::MAX`),
/// calling `f(position, header, bytes)` for each valid one. Stops at the first invalid byte.
pub(crate) fn scan_batches(
    file: &File,
    start: u64,
    end: u64,
    base_offset: i64,
    first_offset: i64,
    mut f: impl FnMut(u64, &BatchHeader, &[u8]),
) -> io::Result<ScanEnd> {
    let mut reader = ChunkReader::new(file, end);
    let mut pos = start;
    let mut next = first_offset;
    let stop = |pos, next, why: String| ScanEnd {
        valid_end: pos,
        next_offset: next,
        error: Some(why),
    };
    while pos < end {
        let Some(prefix) = reader.bytes_at(pos, LOG_OVERHEAD_BYTES)? else {
            return Ok(stop(pos, next, "truncated batch prefix".into()));
        };
        let len = i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        let total = LOG_OVERHEAD_BYTES as i64 + i64::from(len);
        if len < 0 || total > BATCH_BYTES_MAX as i64 {
            return Ok(stop(pos, next, format!("batch length {len} out of bounds")));
        }
        let Some(bytes) = reader.bytes_at(pos, total as usize)? else {
            return Ok(stop(
                pos,
                next,
                "batch runs past the end of the file".into(),
            ));
        };
        let h = match batch::validate_stored(bytes) {
            Ok(h) => h,
            Err(e) => return Ok(stop(pos, next, e.to_string())),
        };
        // Offsets are contiguous inside a segment: appends assign them back to back and the
        // cleaner keeps each batch's [base, last] span, so a flipped baseOffset is caught too.
        if (next != i64::MIN && h.base_offset != next) || h.base_offset < base_offset {
            let why = format!("batch offset {} where {next} was expected", h.base_offset);
            return Ok(stop(pos, next, why));
        }
        if h.last_offset() - base_offset > SEGMENT_RELATIVE_OFFSET_MAX {
            return Ok(stop(pos, next, "offset overflows the segment".into()));
        }
        f(pos, &h, bytes);
        next = h.next_offset();
        pos += total as u64;
    }
    Ok(ScanEnd {
        valid_end: pos,
        next_offset: next,
        error: None,
    })
}

/// In-memory state of one segment.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: i64,
    /// Bytes of valid batches in the `.log`.
    pub(crate) size: u64,
    /// Offset after the last batch (== `base_offset` when empty). For a sealed segment that was
    /// loaded lazily this is the next segment's base offset until the indexes are loaded.
    pub(crate) next_offset: i64,
    /// Loaded indexes; `None` until first needed (sealed segments are loaded lazily).
    pub(crate) indexes: Option<(OffsetIndex, TimeIndex)>,
    /// Largest batch maxTimestamp and the base offset of that batch (-1, -1 if none/unknown).
    pub(crate) max_timestamp: i64,
    pub(crate) offset_of_max_timestamp: i64,
    /// Wall-clock creation time, for `segment.ms`.
    pub(crate) created_ms: i64,
    /// Log bytes appended since the last offset index entry.
    pub(crate) bytes_since_index: u64,
    /// The open `.log` while the file cache holds it (saves a cache lookup per append/read).
    pub(crate) file: std::sync::Weak<File>,
    /// Which bytes of the `.log` have passed a CRC check in this process.
    pub(crate) checked: Arc<Checked>,
}

/// Which bytes of a segment's `.log` have passed a CRC check in this process, so that a read may
/// send them straight from the file (`sendfile`) without reading them again: bytes an append
/// wrote (checked on their way in: `batch::validate` for the leader, `validate_stored` for a
/// follower), and a prefix checked by a reindex or by earlier reads. Bytes found on disk start
/// unchecked. Shared with reads that run outside the partition lock; both marks only ever make
/// the claim smaller when the file shrinks, so a stale load errs on the side of checking again.
#[derive(Debug)]
pub(crate) struct Checked {
    /// `[0, below)` was checked.
    below: AtomicU64,
    /// `[appended_from, size)` was written by an append of this process (`u64::MAX`: nothing).
    appended_from: AtomicU64,
}

impl Checked {
    /// Nothing checked yet.
    pub(crate) fn none() -> Arc<Checked> {
        Checked::prefix(0)
    }

    /// `[0, below)` checked.
    pub(crate) fn prefix(below: u64) -> Arc<Checked> {
        Arc::new(Checked {
            below: AtomicU64::new(below),
            appended_from: AtomicU64::new(u64::MAX),
        })
    }

    /// Whether every byte of `[from, to)` was checked.
    pub(crate) fn covers(&self, from: u64, to: u64) -> bool {
        to <= self.below.load(Ordering::Acquire)
            || from >= self.appended_from.load(Ordering::Acquire)
    }

    /// An append wrote checked batches from `position` on (called under the partition lock,
    /// before the bytes become readable).
    pub(crate) fn appended_at(&self, position: u64) {
        self.appended_from.fetch_min(position, Ordering::AcqRel);
    }

    /// A read checked `[from, to)`; it extends the checked prefix when it starts inside it.
    pub(crate) fn read_checked(&self, from: u64, to: u64) {
        if from <= self.below.load(Ordering::Acquire) {
            self.below.fetch_max(to, Ordering::AcqRel);
        }
    }

    /// The file was cut to `size` bytes (what is appended later is checked by its append).
    pub(crate) fn truncated_to(&self, size: u64) {
        self.below.fetch_min(size, Ordering::AcqRel);
    }
}

impl Segment {
    /// A new, empty, loaded segment.
    pub(crate) fn new_empty(base_offset: i64, config: &LogConfig, now_ms: i64) -> Segment {
        Segment {
            base_offset,
            size: 0,
            next_offset: base_offset,
            indexes: Some((
                OffsetIndex::new(base_offset, config.max_index_entries()),
                TimeIndex::new(base_offset, config.max_time_index_entries()),
            )),
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            created_ms: now_ms,
            bytes_since_index: 0,
            file: std::sync::Weak::new(),
            checked: Checked::none(),
        }
    }

    /// Unloaded sealed segment of `size` bytes; `next_offset` is an upper bound until loaded.
    pub(crate) fn new_unloaded(
        base_offset: i64,
        size: u64,
        next_offset: i64,
        now_ms: i64,
    ) -> Segment {
        Segment {
            base_offset,
            size,
            next_offset,
            indexes: None,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            created_ms: now_ms,
            bytes_since_index: 0,
            file: std::sync::Weak::new(),
            checked: Checked::none(),
        }
    }

    pub(crate) fn log_path(&self, dir: &Path) -> PathBuf {
        segment_path(dir, self.base_offset, LOG_SUFFIX)
    }

    /// Records one batch appended (or found) at `position` in the indexes and timestamps.
    pub(crate) fn track_batch(
        &mut self,
        position: u64,
        h: &BatchHeader,
        index_interval_bytes: u32,
    ) {
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.base_offset;
        }
        if let Some((index, time_index)) = self.indexes.as_mut() {
            if self.bytes_since_index > u64::from(index_interval_bytes) {
                if let Ok(pos) = u32::try_from(position) {
                    index.append(h.base_offset, pos);
                }
                if self.max_timestamp >= 0 {
                    time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
                }
                self.bytes_since_index = 0;
            }
        }
        self.bytes_since_index += h.total_size() as u64;
        self.next_offset = h.next_offset();
        self.size = position + h.total_size() as u64;
    }

    /// Whether an index is full (forces a roll).
    pub(crate) fn indexes_full(&self) -> bool {
        self.indexes
            .as_ref()
            .is_some_and(|(i, t)| i.is_full() || t.is_full())
    }

    /// Adds the final time index entry (the segment's largest timestamp), as at seal.
    pub(crate) fn finish_time_index(&mut self) {
        if let Some((_, time_index)) = self.indexes.as_mut() {
            if self.max_timestamp >= 0 {
                time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
            }
        }
    }

    /// Rebuilds both indexes and the timestamps by scanning `[0, size)` of the log. With
    /// `keep_extent`, a segment with an invalid batch keeps its size and end offset (bit rot in a
    /// sealed segment is repaired, never cut off: see `scrub.rs`), the indexes covering the
    /// batches before it; otherwise it ends before that batch. The result says where the scan
    /// stopped.
    pub(crate) fn rebuild_indexes(
        &mut self,
        file: &File,
        config: &LogConfig,
        keep_extent: bool,
    ) -> io::Result<ScanEnd> {
        let mut fresh = Segment::new_empty(self.base_offset, config, self.created_ms);
        let end = scan_batches(
            file,
            0,
            self.size,
            self.base_offset,
            self.base_offset,
            |pos, h, _| {
                fresh.track_batch(pos, h, config.index_interval_bytes);
            },
        )?;
        if end.error.is_none() || !keep_extent {
            fresh.size = end.valid_end;
            fresh.next_offset = end.next_offset;
        } else {
            fresh.size = self.size;
            fresh.next_offset = self.next_offset.max(end.next_offset);
        }
        fresh.checked = Checked::prefix(end.valid_end);
        fresh.finish_time_index();
        *self = fresh;
        Ok(end)
    }

    /// Loads the indexes from their files if valid, else rebuilds them from the log. The log must
    /// be `[0, size)` valid already (true for segments below the recovery point or recovered).
    pub(crate) fn ensure_loaded(
        &mut self,
        dir: &Path,
        file: &File,
        config: &LogConfig,
    ) -> io::Result<()> {
        if self.indexes.is_some() {
            return Ok(());
        }
        match self.load_index_files(dir, file, config) {
            Ok(()) => Ok(()),
            Err(why) => {
                tracing::info!(dir = %dir.display(), base = self.base_offset, %why, "rebuilding segment indexes");
                self.rebuild_indexes(file, config, true).map(|_| ())
            }
        }
    }

    fn load_index_files(
        &mut self,
        dir: &Path,
        file: &File,
        config: &LogConfig,
    ) -> Result<(), String> {
        let max_bytes = config
            .segment_index_bytes
            .max(crate::limits::SEGMENT_INDEX_BYTES_MIN);
        let read = |suffix: &str| -> Result<Vec<u8>, String> {
            let path = segment_path(dir, self.base_offset, suffix);
            let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.len() > max_bytes.saturating_mul(2) {
                return Err(format!(
                    "{} is larger than segment.index.bytes",
                    path.display()
                ));
            }
            std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let index = OffsetIndex::decode(
            &read(INDEX_SUFFIX)?,
            self.base_offset,
            config.max_index_entries(),
            self.size,
        )?;
        // Pair assertion: the last entry must point at a batch with exactly that base offset.
        let scan_from = match index.last() {
            Some(e) => {
                let mut header = [0u8; 8];
                file.read_exact_at(&mut header, u64::from(e.position))
                    .map_err(|e| e.to_string())?;
                if i64::from_be_bytes(header) != e.offset {
                    return Err("last index entry does not point at its batch".into());
                }
                e
            }
            None => crate::index::IndexEntry {
                offset: self.base_offset,
                position: 0,
            },
        };
        // The offset after the last batch: scan the tail after the last index entry.
        let mut last_batch: Option<BatchHeader> = None;
        let end = scan_batches(
            file,
            u64::from(scan_from.position),
            self.size,
            self.base_offset,
            scan_from.offset,
            |_, h, _| {
                last_batch = Some(*h);
            },
        )
        .map_err(|e| e.to_string())?;
        if end.error.is_some() || end.valid_end != self.size {
            return Err(format!("log tail invalid: {:?}", end.error));
        }
        let next_offset = last_batch.map_or(self.base_offset, |h| h.next_offset());
        let time_index = TimeIndex::decode(
            &read(TIME_INDEX_SUFFIX)?,
            self.base_offset,
            config.max_time_index_entries(),
            next_offset,
        )?;
        if self.size > 0
            && time_index.last().is_none()
            && last_batch.is_some_and(|h| h.max_timestamp >= 0)
        {
            return Err("time index empty for a non-empty segment".into());
        }
        if let Some(t) = time_index.last() {
            self.max_timestamp = t.timestamp;
            self.offset_of_max_timestamp = t.offset;
        }
        self.next_offset = next_offset;
        self.bytes_since_index = self.size.saturating_sub(u64::from(scan_from.position));
        self.indexes = Some((index, time_index));
        Ok(())
    }

    /// Encoded index and time index files.
    pub(crate) fn encoded_indexes(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.indexes.as_ref().map(|(i, t)| (i.encode(), t.encode()))
    }
}

/// The commit of a segment rewrite (the cleaner's swap protocol, docs/log-format.md): renames the
/// fdatasynced copy `rewritten` to `B.log.swap` (the commit point), removes `B`'s index files
/// (rebuilt by the caller) and renames `B.log.swap` to `B.log`. Loading finishes a swap that a
/// crash interrupted after the commit point and deletes a copy left before it. The caller holds
/// the partition lock and fsyncs the directory afterwards.
pub(crate) fn swap_into_place(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    base_offset: i64,
    rewritten: &Path,
) -> io::Result<()> {
    let log_path = segment_path(dir, base_offset, LOG_SUFFIX);
    let swap_path = dir.join(format!("{base_offset:020}.{LOG_SUFFIX}.swap"));
    storage.rename(rewritten, &swap_path)?;
    for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        storage.remove_file(&segment_path(dir, base_offset, suffix))?;
    }
    storage.rename(&swap_path, &log_path)
}

/// Writes a whole index file in place (create, truncate, pwrite). Not atomic: index files are
/// caches validated on load and are synced before the recovery point passes their segment.
pub(crate) fn write_index_file(
    storage: &dyn crate::storage::Storage,
    path: &Path,
    bytes: &[u8],
) -> io::Result<File> {
    let file = storage.open(path, true)?;
    storage.set_len(&file, 0)?;
    if !bytes.is_empty() {
        storage.write_at(&file, bytes, 0)?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode_batch;
    use std::io::Write;

    fn log_of(batches: usize) -> (tempfile::NamedTempFile, Vec<(u64, i64)>) {
        let mut f = tempfile::NamedTempFile::new().expect("tmp");
        let mut pos = 0u64;
        let mut out = Vec::new();
        for i in 0..batches {
            let mut b = encode_batch(
                &[
                    (Some(b"k"), Some(&[7u8; 100]), 1000 + i as i64),
                    (None, None, 5),
                ],
                -1,
                -1,
                -1,
            );
            crate::batch::set_base_offset(&mut b, i as i64 * 2);
            f.write_all(&b).expect("write");
            out.push((pos, i as i64 * 2));
            pos += b.len() as u64;
        }
        (f, out)
    }

    #[test]
    fn scan_stops_at_first_invalid_byte() {
        let (f, batches) = log_of(5);
        let size = f.as_file().metadata().expect("meta").len();
        let mut seen = Vec::new();
        let end = scan_batches(f.as_file(), 0, size, 0, 0, |pos, h, _| {
            seen.push((pos, h.base_offset))
        })
        .expect("scan");
        assert_eq!(seen, batches);
        assert_eq!(end.valid_end, size);
        assert_eq!(end.next_offset, 10);
        let end = scan_batches(f.as_file(), 0, size - 1, 0, 0, |_, _, _| {}).expect("scan");
        assert_eq!(end.valid_end, batches[4].0);
        assert!(end.error.is_some());
    }

    #[test]
    fn names_parse() {
        assert_eq!(
            parse_segment_name("00000000000000000042.log"),
            Some((42, "log"))
        );
        assert_eq!(
            parse_segment_name("00000000000000000042.log.swap"),
            Some((42, "log.swap"))
        );
        assert_eq!(parse_segment_name("42.log"), None);
        assert_eq!(parse_segment_name("leader-epoch-checkpoint"), None);
    }

    #[test]
    fn rebuild_indexes_tracks_max_timestamp() {
        let (f, _) = log_of(50);
        let size = f.as_file().metadata().expect("meta").len();
        let config = LogConfig {
            index_interval_bytes: 300,
            ..LogConfig::default()
        };
        let mut seg = Segment::new_unloaded(0, size, 100, 0);
        seg.rebuild_indexes(f.as_file(), &config, true)
            .expect("rebuild");
        assert_eq!(seg.next_offset, 100);
        assert_eq!(seg.max_timestamp, 1049);
        assert_eq!(seg.offset_of_max_timestamp, 98);
        let (index, _) = seg.indexes.as_ref().expect("loaded");
        assert!(index.len() > 5);
    }
}
