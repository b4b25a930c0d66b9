//! Timestamp lookups for ListOffsets: the first record at or after a timestamp (exact: the batch
//! found through the time index is decompressed), and the record with the largest timestamp.

use super::PartitionLog;
use crate::error::StoreError;
use crate::records;
use crate::segment;

impl PartitionLog {
    /// First record with timestamp >= `ts` → (offset, timestamp). Exact: decompresses the batch.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>, StoreError> {
        let mut inner = self.inner.lock();
        let config = self.config();
        let log_start = self.offsets.log_start();
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        for base in bases {
            let Some(seg) = inner.segments.get_mut(&base) else {
                continue;
            };
            self.ensure_loaded(seg, &config)?;
            let file = self.segment_file(seg, false)?;
            let path = seg.log_path(&self.dir());
            if seg.max_timestamp < ts || seg.next_offset <= log_start {
                continue;
            }
            let Some((index, time_index)) = seg.indexes.as_ref() else {
                continue;
            };
            let start_offset = time_index.lookup(ts).max(log_start);
            let start = u64::from(index.lookup(start_offset).position);
            let mut found: Option<(i64, i64)> = None;
            let mut decode_error: Option<String> = None;
            segment::scan_batches(
                &file,
                start,
                seg.size,
                seg.base_offset,
                i64::MIN,
                |_, h, bytes| {
                    if found.is_some()
                        || decode_error.is_some()
                        || h.max_timestamp < ts
                        || h.last_offset() < log_start
                    {
                        return;
                    }
                    match records::decode_records(bytes) {
                        Ok((_, recs)) => {
                            found = recs
                                .iter()
                                .find(|r| r.timestamp >= ts && r.offset >= log_start)
                                .map(|r| (r.offset, r.timestamp));
                        }
                        Err(e) => decode_error = Some(e.to_string()),
                    }
                },
            )
            .map_err(|e| StoreError::io(format!("scan {}", path.display()), e))?;
            if let Some(e) = decode_error {
                return Err(StoreError::Corrupt(format!("{}: {e}", self.tp)));
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// (offset, timestamp) of the first record with the largest timestamp; `None` if empty.
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>, StoreError> {
        let mut inner = self.inner.lock();
        let config = self.config();
        let log_start = self.offsets.log_start();
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        let mut best: Option<(i64, i64, i64)> = None; // (timestamp, batch base offset, segment)
        for base in bases {
            let Some(seg) = inner.segments.get_mut(&base) else {
                continue;
            };
            self.ensure_loaded(seg, &config)?;
            if seg.size > 0
                && seg.next_offset > log_start
                && best.is_none_or(|(t, _, _)| seg.max_timestamp > t)
            {
                best = Some((seg.max_timestamp, seg.offset_of_max_timestamp, base));
            }
        }
        let Some((max_ts, batch_offset, base)) = best else {
            return Ok(None);
        };
        let Some(seg) = inner.segments.get_mut(&base) else {
            return Ok(None);
        };
        let file = self.segment_file(seg, false)?;
        let start = seg
            .indexes
            .as_ref()
            .map_or(0, |(i, _)| u64::from(i.lookup(batch_offset).position));
        let mut found = None;
        segment::scan_batches(
            &file,
            start,
            seg.size,
            seg.base_offset,
            i64::MIN,
            |_, h, bytes| {
                if found.is_some() || h.base_offset != batch_offset {
                    return;
                }
                found = match records::decode_records(bytes) {
                    Ok((_, recs)) => recs
                        .iter()
                        .find(|r| r.timestamp == max_ts && r.offset >= log_start)
                        .map(|r| (r.offset, r.timestamp))
                        .or(Some((h.last_offset(), max_ts))),
                    Err(_) => Some((h.last_offset(), max_ts)),
                };
            },
        )
        .map_err(|e| StoreError::io("scan segment", e))?;
        Ok(found.or(Some((batch_offset, max_ts))))
    }
}
