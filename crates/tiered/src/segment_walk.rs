//! The one pass over a local segment before its upload: every batch from the first offset not yet
//! in the object store is CRC-checked (damaged data is never uploaded), and the remote segment's
//! indexes, leader epochs and largest timestamp are built from the batch headers. The remote
//! indexes are built here rather than copied because an upload may start inside a local segment
//! (a new leader whose segments roll at other offsets than the last leader's): positions are
//! relative to the uploaded slice.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use millrace_store::batch::{self, BatchPrefix};
use millrace_store::limits::LOG_OVERHEAD_BYTES;

use crate::error::TieredError;

/// Bytes of batches between two entries of a remote offset index (a remote read fetches whole
/// chunks of megabytes, so a coarse index costs nothing there and keeps the object small).
pub const REMOTE_INDEX_INTERVAL_BYTES: u64 = 256 * 1024;

/// Bytes: the largest batch the walk accepts (Kafka's `message.max.bytes` upper range).
pub const WALK_BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What an upload sends of one local segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSlice {
    /// Byte range of the local `.log` to upload.
    pub start_pos: u64,
    pub end_pos: u64,
    /// First offset of the first batch uploaded.
    pub first_offset: i64,
    /// Last offset of the last batch (-1 when no batch).
    pub last_offset: i64,
    pub max_timestamp: i64,
    /// (leader epoch, first offset) at each change of `partitionLeaderEpoch`.
    pub epochs: Vec<(i32, i64)>,
    /// (offset, position in the slice) every `REMOTE_INDEX_INTERVAL_BYTES`, from the first batch.
    pub index: Vec<(i64, u64)>,
    /// (largest timestamp so far, offset of the batch that raised it), ascending in both.
    pub time_index: Vec<(i64, i64)>,
}

fn corrupt(path: &Path, pos: u64, detail: impl std::fmt::Display) -> TieredError {
    TieredError::Corrupt {
        key: path.display().to_string(),
        detail: format!("at byte {pos}: {detail}"),
    }
}

/// Walks `path` up to `size` bytes and plans the upload of the batches at or after `from`. A
/// batch that holds `from` without starting at it (the replicas disagree on batch boundaries:
/// never for committed data) is refused.
pub fn plan_upload(path: &Path, size: u64, from: i64) -> Result<SegmentSlice, TieredError> {
    let local = |source| TieredError::Local {
        path: path.display().to_string(),
        source,
    };
    let mut file = BufReader::with_capacity(1 << 20, File::open(path).map_err(local)?);
    file.seek(SeekFrom::Start(0)).map_err(local)?;
    let mut pos = 0u64;
    let mut slice = SegmentSlice {
        start_pos: size,
        end_pos: size,
        first_offset: -1,
        last_offset: -1,
        max_timestamp: -1,
        epochs: Vec::new(),
        index: Vec::new(),
        time_index: Vec::new(),
    };
    let mut started = false;
    let mut last_indexed: Option<u64> = None;
    let mut buf = Vec::new();
    while pos + LOG_OVERHEAD_BYTES as u64 <= size {
        let mut prefix = [0u8; 17];
        let want = (size - pos).min(17) as usize;
        let head = prefix.get_mut(..want).unwrap_or(&mut []);
        file.read_exact(head).map_err(local)?;
        let p = BatchPrefix::parse(head).map_err(|e| corrupt(path, pos, e))?;
        let total = p.total_size();
        if total > WALK_BATCH_BYTES_MAX || pos + total as u64 > size {
            return Err(corrupt(path, pos, format!("batch of {total} bytes")));
        }
        buf.clear();
        buf.extend_from_slice(head);
        buf.resize(total, 0);
        let rest = buf.get_mut(want..).unwrap_or(&mut []);
        file.read_exact(rest).map_err(local)?;
        let h = batch::validate_stored(&buf).map_err(|e| corrupt(path, pos, e))?;
        let last = h.last_offset();
        if last >= from {
            if !started {
                if h.base_offset < from {
                    return Err(corrupt(
                        path,
                        pos,
                        format!(
                            "batch {}..={last} straddles the remote log end {from}",
                            h.base_offset
                        ),
                    ));
                }
                started = true;
                slice.start_pos = pos;
                slice.first_offset = h.base_offset;
            }
            let rel = pos - slice.start_pos;
            if last_indexed.is_none_or(|at| rel >= at + REMOTE_INDEX_INTERVAL_BYTES) {
                slice.index.push((h.base_offset, rel));
                last_indexed = Some(rel);
            }
            if slice
                .epochs
                .last()
                .is_none_or(|(e, _)| *e != h.partition_leader_epoch)
            {
                slice.epochs.push((h.partition_leader_epoch, h.base_offset));
            }
            if h.max_timestamp > slice.max_timestamp {
                slice.max_timestamp = h.max_timestamp;
                slice.time_index.push((h.max_timestamp, h.base_offset));
            }
            slice.last_offset = last;
        }
        pos += total as u64;
    }
    slice.end_pos = pos;
    if !started {
        slice.start_pos = pos;
    }
    Ok(slice)
}

/// Encodes an index as the remote `.index` object: big-endian (offset i64, position u64) pairs.
pub fn encode_pairs(pairs: &[(i64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs.len() * 16);
    for (a, b) in pairs {
        out.extend_from_slice(&a.to_be_bytes());
        out.extend_from_slice(&b.to_be_bytes());
    }
    out
}

/// Decodes `encode_pairs`' bytes; `None` when the length is not a whole number of pairs.
pub fn decode_pairs(bytes: &[u8]) -> Option<Vec<(i64, u64)>> {
    if !bytes.len().is_multiple_of(16) {
        return None;
    }
    bytes
        .chunks_exact(16)
        .map(|c| {
            let a = i64::from_be_bytes(c.get(..8)?.try_into().ok()?);
            let b = u64::from_be_bytes(c.get(8..)?.try_into().ok()?);
            Some((a, b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use millrace_store::testing::encode_filler_batch;

    fn write_segment(dir: &Path, batches: &[(i64, usize)]) -> (std::path::PathBuf, u64) {
        let path = dir.join("00000000000000000000.log");
        let mut bytes = Vec::new();
        for (base, n) in batches {
            let mut b = encode_filler_batch(*n, 10, 1_000 + base);
            batch::set_base_offset(&mut b, *base);
            bytes.extend_from_slice(&b);
        }
        std::fs::write(&path, &bytes).expect("write");
        (path, bytes.len() as u64)
    }

    #[test]
    fn plans_from_a_batch_boundary_and_refuses_a_straddle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, size) = write_segment(dir.path(), &[(0, 3), (3, 2), (5, 4)]);
        let all = plan_upload(&path, size, 0).expect("plan");
        assert_eq!((all.start_pos, all.end_pos), (0, size));
        assert_eq!((all.first_offset, all.last_offset), (0, 8));
        assert_eq!(all.index.first(), Some(&(0, 0)));
        let tail = plan_upload(&path, size, 5).expect("plan");
        assert_eq!(tail.first_offset, 5);
        assert!(tail.start_pos > 0 && tail.end_pos == size);
        assert!(matches!(
            plan_upload(&path, size, 4),
            Err(TieredError::Corrupt { .. })
        ));
        let none = plan_upload(&path, size, 9).expect("plan");
        assert_eq!(none.first_offset, -1);
        assert_eq!(none.start_pos, none.end_pos);
    }

    #[test]
    fn a_flipped_byte_is_never_uploaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, size) = write_segment(dir.path(), &[(0, 3), (3, 2)]);
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).expect("write");
        assert!(matches!(
            plan_upload(&path, size, 0),
            Err(TieredError::Corrupt { .. })
        ));
    }

    #[test]
    fn pairs_round_trip() {
        let pairs = vec![(0, 0), (77, 262_144), (i64::MAX, u64::MAX)];
        assert_eq!(decode_pairs(&encode_pairs(&pairs)), Some(pairs));
        assert_eq!(decode_pairs(&[0; 15]), None);
    }
}
