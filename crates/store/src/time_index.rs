//! The sparse time index of one segment (`.timeindex`): largest timestamp so far → batch offset.
//!
//! On disk: 12-byte entries, big-endian i64 timestamp and u32 relative offset; timestamps
//! strictly increase, offsets never decrease. An entry (T, o) says: every record before the batch at base offset `o`, and that
//! batch itself, has a timestamp <= T, and T occurs in the batch at `o`. Entries are added at the
//! same points as offset index entries and once more when the segment is sealed, so the last
//! entry holds the segment's largest timestamp (used by retention). In memory a `SparseIndex<TimeEntry>`, with the same
//! I/O rules as `index.rs`.

use crate::index::SparseIndex;

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub(crate) timestamp: i64,
    pub(crate) offset: i64,
}

/// Sparse time index of one segment.
pub(crate) type TimeIndex = SparseIndex<TimeEntry>;

/// Bytes per on-disk entry.
pub(crate) const ENTRY_BYTES: usize = 12;

impl SparseIndex<TimeEntry> {
    /// Adds (timestamp, offset) if both grow and there is room.
    pub(crate) fn maybe_append(&mut self, timestamp: i64, offset: i64) {
        self.push_if(offset, TimeEntry { timestamp, offset }, |l| {
            timestamp > l.timestamp && offset >= l.offset
        });
    }

    /// Where to start scanning for the first record with timestamp >= `ts`: the offset of the last
    /// entry whose timestamp is < `ts` (everything up to and including that batch is older), or the
    /// segment base offset.
    pub(crate) fn lookup(&self, ts: i64) -> i64 {
        let idx = self.entries.partition_point(|e| e.timestamp < ts);
        match idx.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(e) => e.offset,
            None => self.base_offset,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.timestamp.to_be_bytes());
            out.extend_from_slice(&((e.offset - self.base_offset) as u32).to_be_bytes());
        }
        out
    }

    /// Decodes a time index file; `Err` means "rebuild it". Offsets must be below `next_offset`.
    pub(crate) fn decode(
        bytes: &[u8],
        base_offset: i64,
        max_entries: usize,
        next_offset: i64,
    ) -> Result<TimeIndex, String> {
        if !bytes.chunks_exact(ENTRY_BYTES).remainder().is_empty() {
            return Err(format!(
                "time index size {} not a multiple of 12",
                bytes.len()
            ));
        }
        let mut index = TimeIndex::new(base_offset, max_entries.max(bytes.len() / ENTRY_BYTES));
        for chunk in bytes.chunks_exact(ENTRY_BYTES) {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&chunk[..8]);
            let timestamp = i64::from_be_bytes(ts);
            let rel = u32::from_be_bytes([chunk[8], chunk[9], chunk[10], chunk[11]]);
            let offset = base_offset + i64::from(rel);
            if let Some(last) = index.entries.last() {
                if timestamp <= last.timestamp || offset < last.offset {
                    return Err("time index entries not increasing".to_string());
                }
            }
            if offset >= next_offset {
                return Err(format!(
                    "time index offset {offset} beyond log end {next_offset}"
                ));
            }
            index.entries.push(TimeEntry { timestamp, offset });
        }
        index.max_entries = max_entries.max(1);
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_round_trip() {
        let mut t = TimeIndex::new(10, 5);
        assert_eq!(t.lookup(5), 10);
        t.maybe_append(100, 10);
        t.maybe_append(200, 20);
        t.maybe_append(150, 30); // not growing: ignored
        t.maybe_append(300, 30);
        assert_eq!(t.lookup(100), 10);
        assert_eq!(t.lookup(101), 10);
        assert_eq!(t.lookup(250), 20);
        assert_eq!(t.lookup(1000), 30);
        let d = TimeIndex::decode(&t.encode(), 10, 5, 31).expect("decode");
        assert_eq!(
            d.last(),
            Some(TimeEntry {
                timestamp: 300,
                offset: 30
            })
        );
        assert!(TimeIndex::decode(&t.encode(), 10, 5, 30).is_err());
    }
}
