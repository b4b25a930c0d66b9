//! Reading for Fetch: whole stored batches starting with the one that contains the fetch offset,
//! from one segment per call, found through the sparse offset index and read with one `pread`
//! outside the partition lock. Every returned batch passed its CRC here (pair assertion with the
//! append's validation); an index that disagrees with the log is rebuilt from the log once.

use std::sync::Arc;

use bytes::Bytes;

use super::{LogInner, PartitionLog};
use super::{ReadResult, ReadUpperBound};
use crate::batch;
use crate::error::{ReadError, StoreError};
use crate::limits::LOG_OVERHEAD_BYTES;
use crate::segment::ChunkReader;

impl PartitionLog {
    /// Batches starting with the one containing `fetch_offset`; see `API.md`.
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        bound: ReadUpperBound,
        min_one_batch: bool,
    ) -> Result<ReadResult, ReadError> {
        let mut offset = fetch_offset;
        let mut reindexed = false;
        loop {
            let (file, start, expect_base, end, upper, hwm, lso, leo, seg_next) = {
                let mut inner = self.inner.lock();
                let leo = inner.log_end_offset;
                let lso = self.offsets.log_start();
                let hwm = self.offsets.high_watermark();
                let upper = match bound {
                    ReadUpperBound::HighWatermark => hwm,
                    ReadUpperBound::LogEnd => leo,
                };
                if fetch_offset < lso || fetch_offset > upper {
                    return Err(ReadError::OffsetOutOfRange {
                        fetch_offset,
                        log_start_offset: lso,
                        log_end_offset: leo,
                    });
                }
                let empty = ReadResult {
                    records: Bytes::new(),
                    high_watermark: hwm,
                    log_start_offset: lso,
                    log_end_offset: leo,
                };
                if offset >= upper {
                    return Ok(empty);
                }
                let Some(located) = self.locate(&mut inner, offset)? else {
                    return Ok(empty);
                };
                let (file, start, expect_base, end, seg_next) = located;
                (
                    file,
                    start,
                    expect_base,
                    end,
                    upper,
                    hwm,
                    lso,
                    leo,
                    seg_next,
                )
            };
            let records = match read_batches(
                &file,
                start,
                expect_base,
                end,
                offset,
                upper,
                max_bytes,
                min_one_batch,
            ) {
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
                Err(e) => return Err(StoreError::io(format!("read {}", self.tp), e).into()),
            };
            match records {
                Some(records) => {
                    return Ok(ReadResult {
                        records,
                        high_watermark: hwm,
                        log_start_offset: lso,
                        log_end_offset: leo,
                    })
                }
                // Nothing at or after `offset` in this segment (a compacted tail): next segment.
                None if seg_next > offset => offset = seg_next,
                None => {
                    return Ok(ReadResult {
                        records: Bytes::new(),
                        high_watermark: hwm,
                        log_start_offset: lso,
                        log_end_offset: leo,
                    })
                }
            }
        }
    }

    /// Rebuilds the indexes of the segment holding `offset` from its log and rewrites the files.
    fn reindex_segment_containing(&self, offset: i64) -> Result<(), StoreError> {
        let config = self.config();
        let mut inner = self.inner.lock();
        let active_base = inner.active_base();
        let Some((&base, seg)) = inner.segments.range_mut(..=offset).next_back() else {
            return Ok(());
        };
        let path = seg.log_path(&self.dir);
        let file = self
            .shared
            .cache
            .get(&path, false)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        let size_before = seg.size;
        seg.rebuild_indexes(&file, &config)
            .map_err(|e| StoreError::io(format!("reindex {}", path.display()), e))?;
        if seg.size != size_before {
            // The log itself is damaged below what recovery checked: keep serving up to it.
            tracing::error!(partition = %self.tp, segment = base, valid = seg.size, "segment has invalid bytes");
        }
        if base != active_base {
            self.write_index_files(seg)?;
        }
        Ok(())
    }

    /// Finds the segment holding `offset` (or the first after it) → (file, start position from
    /// the index, base offset of the batch there, segment size, offset after the segment).
    #[allow(clippy::type_complexity)]
    fn locate(
        &self,
        inner: &mut LogInner,
        offset: i64,
    ) -> Result<Option<(Arc<std::fs::File>, u64, i64, u64, i64)>, StoreError> {
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
            let entry = seg.indexes.as_ref().map_or(
                crate::index::IndexEntry {
                    offset: seg.base_offset,
                    position: 0,
                },
                |(index, _)| index.lookup(offset),
            );
            let seg_next = next_base.unwrap_or(seg.next_offset);
            return Ok(Some((
                file,
                u64::from(entry.position),
                entry.offset,
                seg.size,
                seg_next,
            )));
        }
    }
}

/// Reads whole batches from `file[start..end)`: skips batches ending before `offset`, then takes
/// batches with base offset < `upper` while they fit `max_bytes` (the first one always, if
/// `min_one_batch`), with one `pread` for the returned region. Each returned batch passed its CRC
/// check here; the data is cut before the first one that does not (so a corrupt batch is never
/// served). `None`: no batch at or after `offset` in the range. `InvalidData`: the batch at `start`
/// does not have base offset `expect_base` (a stale index).
#[allow(clippy::too_many_arguments)]
fn read_batches(
    file: &std::fs::File,
    start: u64,
    expect_base: i64,
    end: u64,
    offset: i64,
    upper: i64,
    max_bytes: usize,
    min_one_batch: bool,
) -> std::io::Result<Option<Bytes>> {
    use std::os::unix::fs::FileExt;
    /// Bytes through lastOffsetDelta.
    const PREFIX: usize = 27;
    let prefix = |h: &[u8]| -> (i64, i64, i64) {
        let base = i64::from_be_bytes(h[0..8].try_into().unwrap_or([0; 8]));
        let len = i32::from_be_bytes(h[8..12].try_into().unwrap_or([0; 4]));
        let delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or([0; 4]));
        (base, i64::from(len), i64::from(delta))
    };
    // Skip to the batch containing `offset`, reading headers only.
    let mut reader = ChunkReader::with_chunk(file, end, crate::limits::READ_SKIP_CHUNK_BYTES);
    let mut pos = start;
    let mut expected = expect_base;
    let (first_pos, first_base, first_total) = loop {
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
            return Ok(None);
        }
        let total = LOG_OVERHEAD_BYTES as u64 + len.max(0) as u64;
        if len < 0 || delta < 0 || pos + total > end {
            return Ok(None);
        }
        let last = base.saturating_add(delta);
        if last >= offset {
            break (pos, base, total as usize);
        }
        expected = last.saturating_add(1);
        pos += total;
    };
    if first_base >= upper || (first_total > max_bytes && !min_one_batch) {
        return Ok(Some(Bytes::new()));
    }
    // One read for the whole answer, then cut it at a batch boundary.
    let want = (end - first_pos).min(max_bytes.max(first_total) as u64) as usize;
    let mut buf = vec![0u8; want];
    file.read_exact_at(&mut buf, first_pos)?;
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
            Err(e) => {
                tracing::error!(error = %e, position = first_pos + cut as u64, "corrupt batch in log; serving up to it");
                break;
            }
        }
        cut += total;
    }
    buf.truncate(cut);
    Ok(Some(Bytes::from(buf)))
}
