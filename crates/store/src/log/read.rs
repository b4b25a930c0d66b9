//! Reading for Fetch: whole stored batches starting with the one that contains the fetch offset,
//! from one segment per call, found through the sparse offset index, outside the partition lock.
//! Every returned batch has passed its CRC check in this process: either here, read into memory
//! with one `pread` (pair assertion with the append's validation), or earlier (the append that
//! wrote it, a reindex, a previous read: [`Checked`]), in which case [`PartitionLog::read_records`]
//! returns the file region itself for the connection to `sendfile`, walking only batch headers to
//! find where to cut (from the offset index entry nearest the cut). That trust holds only in the
//! active segment: a sealed segment's bytes may have left the page cache and come back from the
//! disk changed, so every read of them checks them again — in a buffer the thread reuses — before
//! sending them from the file (decision 0072). Damaged batches the
//! scrubber recorded are refused, and a read stops before them. An index that disagrees with the
//! log is rebuilt from the log once.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use super::{LogInner, PartitionLog};
use super::{ReadResult, ReadUpperBound};
use crate::batch;
use crate::error::{ReadError, StoreError};
use crate::limits::LOG_OVERHEAD_BYTES;
use crate::segment::{Checked, ChunkReader};

/// Where a read's record bytes are.
#[derive(Debug, Clone)]
pub enum Records {
    /// Read into memory (and checked) by this read.
    Memory(Bytes),
    /// Whole batches of a segment file, each CRC-checked earlier in this process, to be sent
    /// from the file as they are.
    File(FileSlice),
}

impl Records {
    /// Bytes of record batches.
    pub fn len(&self) -> usize {
        match self {
            Records::Memory(b) => b.len(),
            Records::File(f) => f.len,
        }
    }

    /// No batches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in memory (a `pread` for a file slice).
    pub fn into_bytes(self) -> std::io::Result<Bytes> {
        match self {
            Records::Memory(b) => Ok(b),
            Records::File(f) => f.read_to_bytes(),
        }
    }
}

/// `len` bytes at `position` of a segment file. The open file keeps the bytes reachable even if
/// the segment is deleted meanwhile; a file cut shorter meanwhile (a follower's truncation) makes
/// sending it fail, never send other bytes in its place short of an append at the cut.
#[derive(Debug, Clone)]
pub struct FileSlice {
    /// The segment's `.log`.
    pub file: Arc<File>,
    /// Byte position of the first batch.
    pub position: u64,
    /// Length in bytes (whole batches).
    pub len: usize,
}

impl FileSlice {
    /// Reads the slice into memory.
    pub fn read_to_bytes(&self) -> std::io::Result<Bytes> {
        let mut buf = vec![0u8; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(Bytes::from(buf))
    }
}

impl PartitionLog {
    /// Batches starting with the one containing `fetch_offset`, in memory; see `API.md`.
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        bound: ReadUpperBound,
        min_one_batch: bool,
    ) -> Result<ReadResult, ReadError> {
        let read = self.read_from(fetch_offset, max_bytes, bound, min_one_batch, false)?;
        let records = read
            .records
            .into_bytes()
            .map_err(|e| StoreError::io(format!("read {}", self.tp), e))?;
        Ok(ReadResult {
            records,
            high_watermark: read.high_watermark,
            log_start_offset: read.log_start_offset,
            log_end_offset: read.log_end_offset,
            last_stable_offset: read.last_stable_offset,
            aborted_transactions: read.aborted_transactions,
        })
    }

    /// As [`read`](Self::read), but batches that already passed their CRC check in this process
    /// come back as a slice of the segment file ([`Records::File`]) rather than read into memory.
    pub fn read_records(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        bound: ReadUpperBound,
        min_one_batch: bool,
    ) -> Result<ReadResult<Records>, ReadError> {
        self.read_from(fetch_offset, max_bytes, bound, min_one_batch, true)
    }

    fn read_from(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        bound: ReadUpperBound,
        min_one_batch: bool,
        from_file: bool,
    ) -> Result<ReadResult<Records>, ReadError> {
        let mut offset = fetch_offset;
        let mut reindexed = false;
        loop {
            let (located, upper, hwm, log_start, leo, stable, aborted) = {
                let mut inner = self.inner.lock();
                let leo = inner.log_end_offset;
                let log_start = self.offsets.log_start();
                let hwm = self.offsets.high_watermark();
                let stable = self.last_stable_locked(&mut inner);
                // Out of range is only outside the log (Kafka's `LocalLog.read`): an offset past
                // the high watermark or the last stable offset but within the log reads nothing,
                // as a new leader's or a follower's high watermark may be behind what a consumer
                // has read already.
                let upper = match bound {
                    ReadUpperBound::HighWatermark => hwm,
                    ReadUpperBound::LogEnd => leo,
                    ReadUpperBound::LastStable => stable,
                };
                if fetch_offset < log_start || fetch_offset > leo {
                    return Err(ReadError::OffsetOutOfRange {
                        fetch_offset,
                        log_start_offset: log_start,
                        log_end_offset: leo,
                    });
                }
                let empty = ReadResult {
                    records: Records::Memory(Bytes::new()),
                    high_watermark: hwm,
                    log_start_offset: log_start,
                    log_end_offset: leo,
                    last_stable_offset: stable,
                    aborted_transactions: Vec::new(),
                };
                // Damaged batches are refused, and a read stops before the next ones.
                let upper = match self.damage_bound(offset)? {
                    Some(damaged) => upper.min(damaged),
                    None => upper,
                };
                if offset >= upper {
                    return Ok(empty);
                }
                let Some(located) = self.locate(&mut inner, offset, upper, max_bytes)? else {
                    return Ok(empty);
                };
                // Under the same lock as the read's bounds: the aborted transactions of what this
                // read may return (up to the end of its segment), which retention cannot take
                // away meanwhile.
                let aborted = if bound == ReadUpperBound::LastStable {
                    inner
                        .producers
                        .aborted_between(fetch_offset, upper.min(located.seg_next))
                } else {
                    Vec::new()
                };
                (located, upper, hwm, log_start, leo, stable, aborted)
            };
            let seg_next = located.seg_next;
            let window = Window {
                offset,
                upper,
                max_bytes,
                min_one_batch,
            };
            let records = match read_batches(&located, window, from_file) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData && !reindexed => {
                    // The index disagrees with the log: rebuild it from the log and retry once.
                    tracing::warn!(partition = %self.tp, error = %e, "offset index inconsistent; rebuilding");
                    reindexed = true;
                    self.reindex_segment_containing(offset)?;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(StoreError::Corrupt(format!("{}: {e}", self.tp)).into())
                }
                Err(e) if e.kind() == DAMAGED => {
                    // Found before the scrubber did: it scans this partition next, and repair
                    // follows; meanwhile the read fails (retriable) rather than skip records.
                    tracing::error!(partition = %self.tp, offset, error = %e, "damaged batch found by a read");
                    self.shared.damage.request_scan(&self.tp);
                    return Err(StoreError::Corrupt(format!("{}: {e}", self.tp)).into());
                }
                Err(e) => return Err(StoreError::io(format!("read {}", self.tp), e).into()),
            };
            let result = |records| ReadResult {
                records,
                high_watermark: hwm,
                log_start_offset: log_start,
                log_end_offset: leo,
                last_stable_offset: stable,
                aborted_transactions: aborted.clone(),
            };
            match records {
                Some(records) => return Ok(result(records)),
                // Nothing at or after `offset` in this segment (a compacted tail): next segment.
                None if seg_next > offset => offset = seg_next,
                None => return Ok(result(Records::Memory(Bytes::new()))),
            }
        }
    }

    /// Rebuilds the indexes of the segment holding `offset` from its log and rewrites the files.
    pub(crate) fn reindex_segment_containing(&self, offset: i64) -> Result<(), StoreError> {
        let config = self.config();
        let mut inner = self.inner.lock();
        let active_base = inner.active_base();
        let Some((&base, seg)) = inner.segments.range_mut(..=offset).next_back() else {
            return Ok(());
        };
        let path = seg.log_path(&self.dir());
        let file = self
            .shared
            .cache
            .get(&path, false)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        let end = seg
            .rebuild_indexes(&file, &config, true)
            .map_err(|e| StoreError::io(format!("reindex {}", path.display()), e))?;
        if end.error.is_some() {
            // The log itself is damaged below what recovery checked: reads stop before the bad
            // batch, and the scrubber records it for repair.
            tracing::error!(partition = %self.tp, segment = base, valid = end.valid_end, "segment has invalid bytes");
            self.shared.damage.request_scan(&self.tp);
        }
        if base != active_base {
            self.write_index_files(seg)?;
        }
        Ok(())
    }

    /// Finds the segment holding `offset` (or the first after it), with the offset index entries
    /// a read starts from and may cut near.
    fn locate(
        &self,
        inner: &mut LogInner,
        offset: i64,
        upper: i64,
        max_bytes: usize,
    ) -> Result<Option<Located>, StoreError> {
        use std::ops::Bound::{Excluded, Unbounded};
        let floor = inner
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b)
            .or_else(|| inner.segments.keys().next().copied());
        let Some(mut cursor) = floor else {
            return Ok(None);
        };
        loop {
            let next_base = inner
                .segments
                .range((Excluded(cursor), Unbounded))
                .next()
                .map(|(b, _)| *b);
            let Some(seg) = inner.segments.get_mut(&cursor) else {
                return Ok(None);
            };
            let file = self.segment_file(seg, false)?;
            if seg.indexes.is_none() {
                let config = self.config();
                self.ensure_loaded(seg, &config)?;
            }
            if seg.next_offset <= offset {
                match next_base {
                    Some(n) => {
                        cursor = n;
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let start = seg.indexes.as_ref().map_or(
                crate::index::IndexEntry {
                    offset: seg.base_offset,
                    position: 0,
                },
                |(index, _)| index.lookup(offset),
            );
            let start = self.resync_after_damage(seg.base_offset, offset, start);
            // Any batch starting at or below `start + max_bytes` ends no later than a read from
            // `start` may: a safe place to resume the header walk that finds the cut.
            let near_cut = seg.indexes.as_ref().and_then(|(index, _)| {
                let reach = u64::from(start.position).saturating_add(max_bytes as u64);
                index.last_within(upper, reach)
            });
            return Ok(Some(Located {
                file,
                start,
                near_cut,
                end: seg.size,
                seg_next: next_base.unwrap_or(seg.next_offset),
                checked: Arc::clone(&seg.checked),
                sealed: next_base.is_some(),
            }));
        }
    }
}

/// A segment as a read found it under the partition lock.
struct Located {
    file: Arc<File>,
    /// The index entry at or below the fetch offset.
    start: crate::index::IndexEntry,
    /// The last index entry below the read's upper bound within `max_bytes` of `start`.
    near_cut: Option<crate::index::IndexEntry>,
    /// The segment's size.
    end: u64,
    /// The offset after the segment.
    seg_next: i64,
    checked: Arc<Checked>,
    /// Not the active segment: its bytes may have left the page cache since they were checked,
    /// and come back from the disk changed (bit rot), so reads check them again before sending
    /// them (decision 0072).
    sealed: bool,
}

/// What a read may return: batches containing or after `offset`, with base offset below `upper`,
/// within `max_bytes` (the first one whole if `min_one_batch`).
#[derive(Clone, Copy)]
struct Window {
    offset: i64,
    upper: i64,
    max_bytes: usize,
    min_one_batch: bool,
}

/// The error kind `read_batches` reports a damaged batch with (a bad header in the middle of a
/// segment, or a first batch that fails its check).
const DAMAGED: std::io::ErrorKind = std::io::ErrorKind::InvalidInput;

fn damaged(what: String) -> std::io::Error {
    std::io::Error::new(DAMAGED, what)
}

/// Bytes of a batch header through lastOffsetDelta.
const PREFIX: usize = 27;

/// (base offset, batch length, last offset delta) from a batch header's first `PREFIX` bytes.
fn prefix(h: &[u8]) -> (i64, i64, i64) {
    let base = i64::from_be_bytes(
        h.get(0..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    );
    let len = i32::from_be_bytes(
        h.get(8..12)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 4]),
    );
    let delta = i32::from_be_bytes(
        h.get(23..27)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 4]),
    );
    (base, i64::from(len), i64::from(delta))
}

/// Reads whole batches from the located segment: skips batches ending before `window.offset`,
/// then takes batches with base offset < `upper` while they fit `max_bytes` (the first one always,
/// if `min_one_batch`). With `from_file`, when every batch to return was checked before, the
/// answer is the file region (found by walking headers only); otherwise one `pread` for the
/// region, each batch checked here and the data cut before the first one that fails (so a corrupt
/// batch is never served). `None`: no batch at or after `offset` in the segment. `InvalidData`:
/// the batch at the index position does not have the index's base offset (a stale index).
/// [`DAMAGED`]: a header on the way is impossible, or the first batch to return fails its check.
fn read_batches(at: &Located, window: Window, from_file: bool) -> std::io::Result<Option<Records>> {
    let Window {
        offset,
        upper,
        max_bytes,
        min_one_batch,
    } = window;
    let (start, end) = (u64::from(at.start.position), at.end);
    // Skip to the batch containing `offset`, reading headers only.
    let mut reader = ChunkReader::with_chunk(&at.file, end, crate::limits::READ_SKIP_CHUNK_BYTES);
    let mut pos = start;
    let mut expected = at.start.offset;
    let (first_pos, first_base, first_total, first_next) = loop {
        let Some(h) = reader.bytes_at(pos, PREFIX)? else {
            return Ok(None);
        };
        let (base, len, delta) = prefix(h);
        if base != expected {
            if pos == start {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("batch at position {pos} has offset {base}, expected {expected}"),
                ));
            }
            return Err(damaged(format!(
                "batch at position {pos} has offset {base}, expected {expected}"
            )));
        }
        let total = LOG_OVERHEAD_BYTES as u64 + len.max(0) as u64;
        if len < 0 || delta < 0 || pos + total > end {
            return Err(damaged(format!(
                "batch at position {pos} has length {len} and last offset delta {delta}"
            )));
        }
        let last = base.saturating_add(delta);
        if last >= offset {
            break (pos, base, total as usize, last.saturating_add(1));
        }
        expected = last.saturating_add(1);
        pos += total;
    };
    if first_base >= upper || (first_total > max_bytes && !min_one_batch) {
        return Ok(Some(Records::Memory(Bytes::new())));
    }
    if from_file {
        let len = walk_to_cut(&mut reader, at, window, first_pos, first_total, first_next)?;
        // The active segment's bytes checked earlier are still the page cache's; a sealed
        // segment's are checked now, in a reused buffer, and then sent from the file.
        let sendable = if at.sealed {
            checks_in_scratch(&at.file, first_pos, len, first_base)?
        } else {
            at.checked.covers(first_pos, first_pos + len as u64)
        };
        if sendable {
            return Ok(Some(Records::File(FileSlice {
                file: Arc::clone(&at.file),
                position: first_pos,
                len,
            })));
        }
    }
    // One read for the whole answer, then cut it at a batch boundary.
    let want = (end - first_pos).min(max_bytes.max(first_total) as u64) as usize;
    let mut buf = vec![0u8; want];
    at.file.read_exact_at(&mut buf, first_pos)?;
    let mut cut = 0usize;
    let mut expected = first_base;
    while let Some(h) = buf.get(cut..cut + PREFIX) {
        let (base, len, _) = prefix(h);
        let total = LOG_OVERHEAD_BYTES + len.max(0) as usize;
        if base != expected
            || (cut > 0 && (base >= upper || cut + total > max_bytes))
            || cut + total > buf.len()
        {
            break;
        }
        // Pair assertion: validate what we are about to serve.
        match batch::validate_stored(buf.get(cut..cut + total).unwrap_or(&[])) {
            Ok(h) => expected = h.next_offset(),
            Err(e) if cut == 0 => {
                return Err(damaged(format!("batch at position {first_pos}: {e}")))
            }
            Err(e) => {
                tracing::error!(error = %e, position = first_pos + cut as u64, "corrupt batch in log; serving up to it");
                break;
            }
        }
        cut += total;
    }
    at.checked.read_checked(first_pos, first_pos + cut as u64);
    buf.truncate(cut);
    Ok(Some(Records::Memory(Bytes::from(buf))))
}

thread_local! {
    /// The buffer a thread checks sealed-segment regions in before they are sent from the file.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether `[pos, pos + len)` of `file` holds whole valid batches with contiguous offsets from
/// `first_base`: read into this thread's reused buffer (no fresh allocation per read) and each
/// batch's CRC checked. A `false` sends the read through the in-memory path, which serves up to
/// the bad batch and reports it.
fn checks_in_scratch(file: &File, pos: u64, len: usize, first_base: i64) -> std::io::Result<bool> {
    SCRATCH.with(|scratch| {
        let mut buf = scratch.borrow_mut();
        buf.resize(len, 0);
        file.read_exact_at(&mut buf, pos)?;
        let mut at = 0usize;
        let mut expected = first_base;
        let mut whole = true;
        while at < len {
            match batch::validate_stored(buf.get(at..).unwrap_or(&[])) {
                Ok(h) if h.base_offset == expected => {
                    expected = h.next_offset();
                    at += h.total_size();
                }
                _ => {
                    whole = false;
                    break;
                }
            }
        }
        if buf.capacity() > crate::limits::READ_SCRATCH_RETAIN_BYTES {
            *buf = Vec::new();
        }
        Ok(whole && at == len)
    })
}

/// The length of the region a read returns from `first_pos` (the first batch, `first_total`
/// bytes, is always in it), walking batch headers only — from the index entry nearest the cut
/// when that is further on, so the walk covers about one index interval whatever `max_bytes` is.
/// The same rules as the in-memory cut: consecutive offsets, base offset below `upper`, within
/// `max_bytes` and the segment.
fn walk_to_cut(
    reader: &mut ChunkReader<'_>,
    at: &Located,
    window: Window,
    first_pos: u64,
    first_total: usize,
    first_next: i64,
) -> std::io::Result<usize> {
    let limit = first_pos.saturating_add(window.max_bytes.max(first_total) as u64);
    let mut pos = first_pos + first_total as u64;
    let mut expected = first_next;
    if let Some(e) = at.near_cut {
        // Jump only to where the index says a batch starts and the log agrees (an entry that
        // disagrees would end the walk off a batch boundary).
        let target = u64::from(e.position);
        if target > pos && e.offset > expected {
            let agrees = reader
                .bytes_at(target, PREFIX)?
                .is_some_and(|h| prefix(h).0 == e.offset);
            if agrees {
                pos = target;
                expected = e.offset;
            }
        }
    }
    while let Some(h) = reader.bytes_at(pos, PREFIX)? {
        let (base, len, delta) = prefix(h);
        let total = LOG_OVERHEAD_BYTES as u64 + len.max(0) as u64;
        if base != expected
            || len < 0
            || delta < 0
            || base >= window.upper
            || pos + total > limit
            || pos + total > at.end
        {
            break;
        }
        expected = base.saturating_add(delta).saturating_add(1);
        pos += total;
    }
    Ok((pos - first_pos) as usize)
}
