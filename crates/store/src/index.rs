//! The sparse offset index of one segment (`.index`): batch base offset → byte position; and
//! `SparseIndex`, the in-memory index both it and the time index (`time_index.rs`,
//! `SparseIndex<TimeEntry>`) are, with the entry bound and the append rule they share.
//!
//! On disk: 8-byte entries, big-endian u32 relative offset (offset - segment base offset) and u32
//! position, strictly increasing in both. One entry per `index.interval.bytes` of log. In memory
//! the entries are a `Vec` mirror (`SparseIndex<IndexEntry>`, at most `max_entries`); the file is rewritten whole with `pwrite` when the segment is
//! sealed, truncated or the store shuts down (memmap2 would need `unsafe`, which the workspace
//! forbids; see docs/log-format.md). The index is a cache: a missing or inconsistent file is
//! rebuilt from the log. Pure data; the owning `Segment` does the I/O under the partition lock.

/// One entry: the batch starting at `position` has base offset `offset` (absolute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub(crate) offset: i64,
    pub(crate) position: u32,
}

/// A sparse index of one segment, `E` one of its entries: at most `max_entries` of them, each
/// one's offset within the segment's relative-offset range, both keys strictly growing (what
/// "growing" means is the entry type's). The offset index is `SparseIndex<IndexEntry>`, the time
/// index (`time_index.rs`) `SparseIndex<TimeEntry>`.
#[derive(Debug, Clone)]
pub(crate) struct SparseIndex<E> {
    pub(crate) base_offset: i64,
    pub(crate) entries: Vec<E>,
    pub(crate) max_entries: usize,
}

/// Sparse offset index of one segment.
pub(crate) type OffsetIndex = SparseIndex<IndexEntry>;

/// Bytes per on-disk entry.
pub(crate) const ENTRY_BYTES: usize = 8;

impl<E: Copy> SparseIndex<E> {
    pub(crate) fn new(base_offset: i64, max_entries: usize) -> SparseIndex<E> {
        SparseIndex {
            base_offset,
            entries: Vec::new(),
            max_entries: max_entries.max(1),
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub(crate) fn last(&self) -> Option<E> {
        self.entries.last().copied()
    }

    /// Adds `entry`, at `offset`, if it grows past the last entry (`grows`), lies within the
    /// segment's relative-offset range and there is room.
    pub(crate) fn push_if(&mut self, offset: i64, entry: E, grows: impl FnOnce(&E) -> bool) {
        let grows = self.entries.last().is_none_or(grows);
        let rel_ok = offset >= self.base_offset
            && offset - self.base_offset <= crate::limits::SEGMENT_RELATIVE_OFFSET_MAX;
        if grows && rel_ok && !self.is_full() {
            self.entries.push(entry);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl SparseIndex<IndexEntry> {
    /// Adds an entry; ignored unless both offset and position grow and the index has room.
    pub(crate) fn append(&mut self, offset: i64, position: u32) {
        self.push_if(offset, IndexEntry { offset, position }, |l| {
            offset > l.offset && position > l.position
        });
    }

    /// The entry with the largest offset <= `target`, or (base offset, 0).
    pub(crate) fn lookup(&self, target: i64) -> IndexEntry {
        let idx = self.entries.partition_point(|e| e.offset <= target);
        match idx.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(e) => *e,
            None => IndexEntry {
                offset: self.base_offset,
                position: 0,
            },
        }
    }

    /// The last entry with offset < `upper` and position <= `reach` (entries grow in both, so
    /// the entries meeting both bounds are a prefix).
    pub(crate) fn last_within(&self, upper: i64, reach: u64) -> Option<IndexEntry> {
        let n = self
            .entries
            .partition_point(|e| e.offset < upper && u64::from(e.position) <= reach);
        n.checked_sub(1).and_then(|i| self.entries.get(i)).copied()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * ENTRY_BYTES);
        for e in &self.entries {
            let rel = (e.offset - self.base_offset) as u32;
            out.extend_from_slice(&rel.to_be_bytes());
            out.extend_from_slice(&e.position.to_be_bytes());
        }
        out
    }

    /// Decodes an index file, checking every entry: whole entries, strictly increasing, positions
    /// inside a log of `log_size` bytes, at most `max_entries`. `Err` means "rebuild it".
    pub(crate) fn decode(
        bytes: &[u8],
        base_offset: i64,
        max_entries: usize,
        log_size: u64,
    ) -> Result<OffsetIndex, String> {
        if !bytes.chunks_exact(ENTRY_BYTES).remainder().is_empty() {
            return Err(format!("index size {} not a multiple of 8", bytes.len()));
        }
        let mut index = OffsetIndex::new(base_offset, max_entries.max(bytes.len() / ENTRY_BYTES));
        for chunk in bytes.chunks_exact(ENTRY_BYTES) {
            let rel = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let position = u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            let offset = base_offset + i64::from(rel);
            if let Some(last) = index.entries.last() {
                if offset <= last.offset || position <= last.position {
                    return Err("index entries not increasing".to_string());
                }
            }
            if u64::from(position) >= log_size {
                return Err(format!(
                    "index position {position} beyond log size {log_size}"
                ));
            }
            index.entries.push(IndexEntry { offset, position });
        }
        index.max_entries = max_entries.max(1);
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(index: &OffsetIndex, target: i64, expected: (i64, u32)) {
        let e = index.lookup(target);
        assert_eq!((e.offset, e.position), expected, "lookup({target})");
    }

    #[test]
    fn lookup_finds_floor_entry() {
        let mut i = OffsetIndex::new(100, 10);
        check(&i, 100, (100, 0));
        i.append(110, 4000);
        i.append(120, 8000);
        i.append(115, 9000); // not increasing: ignored
        check(&i, 105, (100, 0));
        check(&i, 110, (110, 4000));
        check(&i, 119, (110, 4000));
        check(&i, 500, (120, 8000));
        let bytes = i.encode();
        let d = OffsetIndex::decode(&bytes, 100, 10, 9000).expect("decode");
        check(&d, 119, (110, 4000));
        assert!(OffsetIndex::decode(&bytes, 100, 10, 8000).is_err());
        assert!(OffsetIndex::decode(&bytes[..7], 100, 10, 9000).is_err());
    }

    #[test]
    fn full_index_reports_full() {
        let mut i = OffsetIndex::new(0, 2);
        i.append(1, 1);
        assert!(!i.is_full());
        i.append(2, 2);
        assert!(i.is_full());
        i.append(3, 3);
        assert_eq!(i.len(), 2);
    }

    proptest::proptest! {
        #[test]
        fn lookup_equals_linear_scan(
            steps in proptest::collection::vec((1i64..50, 1u32..5000), 0..200),
            targets in proptest::collection::vec(0i64..20_000, 1..50),
        ) {
            let mut index = OffsetIndex::new(100, 1000);
            let (mut offset, mut position) = (100i64, 0u32);
            for (d_off, d_pos) in steps {
                offset += d_off;
                position += d_pos;
                index.append(offset, position);
            }
            let decoded = OffsetIndex::decode(&index.encode(), 100, 1000, u64::from(position) + 1)
                .expect("decode");
            for t in targets {
                let linear = index
                    .entries
                    .iter()
                    .rev()
                    .find(|e| e.offset <= t)
                    .map_or((100, 0), |e| (e.offset, e.position));
                let got = decoded.lookup(t);
                proptest::prop_assert_eq!((got.offset, got.position), linear);
            }
        }
    }
}
