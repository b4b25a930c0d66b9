//! The Kafka v2 record batch header: parsing, validation and the few patches the broker makes.
//!
//! Byte layout (offset:size, big-endian): baseOffset 0:8 · batchLength 8:4 ·
//! partitionLeaderEpoch 12:4 · magic 16:1 · crc 17:4 (CRC-32C over bytes 21..end) ·
//! attributes 21:2 · lastOffsetDelta 23:4 · baseTimestamp 27:8 · maxTimestamp 35:8 ·
//! producerId 43:8 · producerEpoch 51:2 · baseSequence 53:4 · recordCount 57:4 · records 61:….
//!
//! Invariant: the store changes only baseOffset and partitionLeaderEpoch (not covered by the CRC),
//! plus attributes/maxTimestamp and the CRC for `LogAppendTime` topics, and maxTimestamp and the
//! CRC on CreateTime topics when a producer's maxTimestamp is not its records' largest or it set
//! the LogAppendTime bit (`set_create_time`). Pure functions, no I/O.

use crate::limits::{BATCH_HEADER_BYTES, BATCH_LENGTH_MIN, LOG_OVERHEAD_BYTES};

/// Attribute bits 0-2: compression codec.
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
/// Attribute bit 3: timestamp type (1 = LogAppendTime).
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
/// Attribute bit 4: transactional.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Attribute bit 5: control batch.
pub const ATTR_CONTROL: i16 = 0x20;
/// Attribute bit 6: the batch's baseTimestamp is a delete horizon (set by the cleaner).
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Producer id meaning "not idempotent".
pub const NO_PRODUCER_ID: i64 = -1;

/// Byte of the magic (format version), the same in every format (legacy message sets too).
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const CRC_COVERED_FROM: usize = 21;

/// Why a batch failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than the header or than `batchLength` announces.
    Truncated(String),
    /// `batchLength` out of bounds.
    BadLength(String),
    /// magic != 2.
    BadMagic(i8),
    /// CRC-32C mismatch.
    BadCrc {
        /// CRC stored in the batch.
        stored: u32,
        /// CRC computed over bytes 21..end.
        computed: u32,
    },
    /// Record count inconsistent with lastOffsetDelta.
    BadCount(String),
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Truncated(s) => write!(f, "truncated batch: {s}"),
            BatchError::BadLength(s) => write!(f, "bad batch length: {s}"),
            BatchError::BadMagic(m) => write!(f, "unsupported magic {m} (only v2 is accepted)"),
            BatchError::BadCrc { stored, computed } => {
                write!(
                    f,
                    "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            BatchError::BadCount(s) => write!(f, "bad record count: {s}"),
        }
    }
}

/// What the first 17 bytes of any batch say, whatever its format (v2 batches and legacy v0/v1
/// message-set entries share this prefix): its length and its magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPrefix {
    /// Bytes after the 12-byte prefix (`batchLength`, a legacy entry's `size`).
    pub batch_length: i32,
    /// Format version (2 for record batches).
    pub magic: i8,
}

impl BatchPrefix {
    /// Parses the prefix; `Truncated` if fewer than 17 bytes, `BadLength` if the length is
    /// negative.
    pub fn parse(buf: &[u8]) -> Result<BatchPrefix, BatchError> {
        let Some(&magic) = buf.get(MAGIC_OFFSET) else {
            return Err(BatchError::Truncated(format!(
                "{} bytes, a batch prefix needs {}",
                buf.len(),
                MAGIC_OFFSET + 1
            )));
        };
        let batch_length = be_i32(buf, 8);
        if batch_length < 0 {
            return Err(BatchError::BadLength(format!(
                "batchLength {batch_length} < 0"
            )));
        }
        Ok(BatchPrefix {
            batch_length,
            magic: magic as i8,
        })
    }

    /// Whole batch size in bytes, including the 12-byte prefix.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length.max(0) as usize
    }
}

/// The parsed 61-byte header of a v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// First offset of the batch.
    pub base_offset: i64,
    /// Bytes after the 12-byte prefix.
    pub batch_length: i32,
    /// Leader epoch of the leader that appended it.
    pub partition_leader_epoch: i32,
    /// Format version; 2.
    pub magic: i8,
    /// Stored CRC-32C.
    pub crc: u32,
    /// Attribute bits.
    pub attributes: i16,
    /// Last offset minus base offset.
    pub last_offset_delta: i32,
    /// Timestamp of the first record (or delete horizon).
    pub base_timestamp: i64,
    /// Largest record timestamp (or the append time for LogAppendTime).
    pub max_timestamp: i64,
    /// Idempotent producer id, -1 if none.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Sequence of the first record.
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    i16::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header from the first 61 bytes of `buf`. Checks only that the bytes are there
    /// and that `batchLength` is at least the header size; see `validate` for the rest.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated(format!(
                "{} bytes, header needs {BATCH_HEADER_BYTES}",
                buf.len()
            )));
        }
        let h = BatchHeader {
            base_offset: be_i64(buf, 0),
            batch_length: be_i32(buf, 8),
            partition_leader_epoch: be_i32(buf, 12),
            magic: buf.get(MAGIC_OFFSET).copied().unwrap_or(0) as i8,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, 21),
            last_offset_delta: be_i32(buf, 23),
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, 35),
            producer_id: be_i64(buf, 43),
            producer_epoch: be_i16(buf, 51),
            base_sequence: be_i32(buf, 53),
            record_count: be_i32(buf, 57),
        };
        if h.batch_length < 0 || (h.batch_length as usize) < BATCH_LENGTH_MIN {
            return Err(BatchError::BadLength(format!(
                "batchLength {} < {BATCH_LENGTH_MIN}",
                h.batch_length
            )));
        }
        Ok(h)
    }

    /// Whole batch size in bytes, including the 12-byte prefix.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length.max(0) as usize
    }

    /// Offset of the last record (base + lastOffsetDelta).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta.max(0)))
    }

    /// Offset after the batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> u8 {
        (self.attributes & ATTR_COMPRESSION_MASK) as u8
    }

    /// Control batch (transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Transactional batch.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Timestamps are LogAppendTime.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// Has an idempotent producer id.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id != NO_PRODUCER_ID
    }

    /// Sequence of the last record: baseSequence + lastOffsetDelta, wrapping at i32::MAX to 0
    /// (Kafka's rule; it stays right after the cleaner removed records from the batch).
    pub fn last_sequence(&self) -> i32 {
        sequence_add(self.base_sequence, self.last_offset_delta.max(0))
    }
}

/// `seq + delta` wrapping past i32::MAX to 0 (Kafka's sequence arithmetic).
pub fn sequence_add(seq: i32, delta: i32) -> i32 {
    let modulus = i64::from(i32::MAX) + 1;
    let sum = (i64::from(seq) + i64::from(delta)).rem_euclid(modulus);
    i32::try_from(sum).unwrap_or(0)
}

/// CRC-32C of bytes 21..end of one whole batch.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_COVERED_FROM..).unwrap_or(&[]))
}

/// Validates the first batch in `buf` structurally: enough bytes, length bounds, magic 2, CRC,
/// record count. Returns its header; the batch is `buf[..header.total_size()]`.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    if buf.len() < LOG_OVERHEAD_BYTES {
        return Err(BatchError::Truncated(format!(
            "{} bytes left, need at least {LOG_OVERHEAD_BYTES}",
            buf.len()
        )));
    }
    let len = be_i32(buf, 8);
    if len < 0 || (len as usize) < BATCH_LENGTH_MIN {
        return Err(BatchError::BadLength(format!(
            "batchLength {len} < {BATCH_LENGTH_MIN}"
        )));
    }
    let total = LOG_OVERHEAD_BYTES + len as usize;
    if total > buf.len() {
        return Err(BatchError::Truncated(format!(
            "batchLength {len} runs past the end ({} bytes left)",
            buf.len()
        )));
    }
    let h = BatchHeader::parse(buf)?;
    if h.magic != 2 {
        return Err(BatchError::BadMagic(h.magic));
    }
    let computed = compute_crc(buf.get(..total).unwrap_or(&[]));
    if computed != h.crc {
        return Err(BatchError::BadCrc {
            stored: h.crc,
            computed,
        });
    }
    if h.last_offset_delta < 0 {
        return Err(BatchError::BadCount(format!(
            "lastOffsetDelta {} < 0",
            h.last_offset_delta
        )));
    }
    if !h.is_control() {
        if h.record_count <= 0 {
            return Err(BatchError::BadCount(format!(
                "recordCount {} must be > 0",
                h.record_count
            )));
        }
        if i64::from(h.record_count) != i64::from(h.last_offset_delta) + 1 {
            return Err(BatchError::BadCount(format!(
                "recordCount {} != lastOffsetDelta {} + 1",
                h.record_count, h.last_offset_delta
            )));
        }
    } else if h.record_count < 0 {
        return Err(BatchError::BadCount(format!(
            "recordCount {} < 0",
            h.record_count
        )));
    }
    Ok(h)
}

/// Like `validate` but for batches read back from disk, where the cleaner may have removed
/// records (recordCount <= lastOffsetDelta + 1) and control batches may be empty.
pub fn validate_stored(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    if buf.len() < LOG_OVERHEAD_BYTES {
        return Err(BatchError::Truncated(format!("{} bytes", buf.len())));
    }
    let h = BatchHeader::parse(buf)?;
    let total = h.total_size();
    if total > buf.len() {
        return Err(BatchError::Truncated(format!(
            "batch of {total} bytes, {} left",
            buf.len()
        )));
    }
    if h.magic != 2 {
        return Err(BatchError::BadMagic(h.magic));
    }
    let computed = compute_crc(buf.get(..total).unwrap_or(&[]));
    if computed != h.crc {
        return Err(BatchError::BadCrc {
            stored: h.crc,
            computed,
        });
    }
    if h.last_offset_delta < 0
        || h.record_count < 0
        || i64::from(h.record_count) > i64::from(h.last_offset_delta) + 1
    {
        return Err(BatchError::BadCount(format!(
            "recordCount {} lastOffsetDelta {}",
            h.record_count, h.last_offset_delta
        )));
    }
    Ok(h)
}

/// Writes `baseOffset` (not covered by the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    if let Some(s) = batch.get_mut(0..8) {
        s.copy_from_slice(&base_offset.to_be_bytes());
    }
}

/// Writes `partitionLeaderEpoch` (not covered by the CRC).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    if let Some(s) = batch.get_mut(12..16) {
        s.copy_from_slice(&epoch.to_be_bytes());
    }
}

/// Marks the batch LogAppendTime with `maxTimestamp = now_ms` and recomputes the CRC.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attrs = be_i16(batch, 21) | ATTR_LOG_APPEND_TIME;
    if let Some(s) = batch.get_mut(21..23) {
        s.copy_from_slice(&attrs.to_be_bytes());
    }
    if let Some(s) = batch.get_mut(35..43) {
        s.copy_from_slice(&now_ms.to_be_bytes());
    }
    rewrite_crc(batch);
}

/// Marks the batch CreateTime with `maxTimestamp` = the largest record timestamp (as the leader
/// computed it) and recomputes the CRC; nothing is written when the batch already says so. Kafka
/// does the same: the stored batch carries the topic's timestamp type, whatever the producer set.
pub fn set_create_time(batch: &mut [u8], max_timestamp: i64) {
    let attrs = be_i16(batch, 21);
    if attrs & ATTR_LOG_APPEND_TIME == 0 && be_i64(batch, 35) == max_timestamp {
        return;
    }
    if let Some(s) = batch.get_mut(21..23) {
        s.copy_from_slice(&(attrs & !ATTR_LOG_APPEND_TIME).to_be_bytes());
    }
    if let Some(s) = batch.get_mut(35..43) {
        s.copy_from_slice(&max_timestamp.to_be_bytes());
    }
    rewrite_crc(batch);
}

/// Recomputes and stores the CRC of one whole batch.
pub fn rewrite_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    if let Some(s) = batch.get_mut(CRC_OFFSET..CRC_OFFSET + 4) {
        s.copy_from_slice(&crc.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode_batch;

    fn check(buf: &[u8], expected: Result<(), fn(&BatchError) -> bool>) {
        match (validate(buf), expected) {
            (Ok(_), Ok(())) => {}
            (Err(e), Err(pred)) => assert!(pred(&e), "unexpected error {e}"),
            (got, _) => panic!("unexpected result {got:?}"),
        }
    }

    #[test]
    fn valid_batch_parses() {
        let b = encode_batch(
            &[(Some(b"k"), Some(b"v"), 1000), (None, None, 1005)],
            7,
            1,
            3,
        );
        let h = validate(&b).expect("valid");
        assert_eq!(h.record_count, 2);
        assert_eq!(h.last_offset_delta, 1);
        assert_eq!(h.total_size(), b.len());
        assert_eq!(h.producer_id, 7);
        assert_eq!(h.base_sequence, 3);
        assert_eq!(h.last_sequence(), 4);
        assert_eq!(h.max_timestamp, 1005);
    }

    #[test]
    fn rejects_bad_bytes() {
        let b = encode_batch(&[(Some(b"k"), Some(b"v"), 1000)], -1, -1, -1);
        check(&b[..10], Err(|e| matches!(e, BatchError::Truncated(_))));
        check(
            &b[..b.len() - 1],
            Err(|e| matches!(e, BatchError::Truncated(_))),
        );
        let mut m = b.to_vec();
        m[16] = 1;
        check(&m, Err(|e| matches!(e, BatchError::BadMagic(1))));
        let mut c = b.to_vec();
        let last = c.len() - 1;
        c[last] ^= 0x40;
        check(&c, Err(|e| matches!(e, BatchError::BadCrc { .. })));
        let mut l = b.to_vec();
        l[8..12].copy_from_slice(&10i32.to_be_bytes());
        check(&l, Err(|e| matches!(e, BatchError::BadLength(_))));
        let mut n = b.to_vec();
        n[57..61].copy_from_slice(&5i32.to_be_bytes());
        rewrite_crc(&mut n);
        check(&n, Err(|e| matches!(e, BatchError::BadCount(_))));
    }

    #[test]
    fn patches_keep_crc_valid() {
        let mut b = encode_batch(&[(Some(b"k"), Some(b"v"), 1000)], -1, -1, -1);
        set_base_offset(&mut b, 42);
        set_partition_leader_epoch(&mut b, 9);
        let h = validate(&b).expect("still valid");
        assert_eq!((h.base_offset, h.partition_leader_epoch), (42, 9));
        set_log_append_time(&mut b, 123_456);
        let h = validate(&b).expect("still valid");
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 123_456);
    }

    #[test]
    fn sequences_wrap() {
        assert_eq!(sequence_add(i32::MAX, 1), 0);
        assert_eq!(sequence_add(i32::MAX - 1, 3), 1);
        assert_eq!(sequence_add(5, 0), 5);
    }
}
