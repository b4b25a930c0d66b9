//! Records inside a v2 batch: decoding (for compaction and exact timestamp lookups) and encoding
//! (for the cleaner's rewritten batches and for test fixtures).
//!
//! Record layout: length varint · attributes i8 · timestampDelta varlong · offsetDelta varint ·
//! keyLength varint (-1 = null) · key · valueLength varint (-1 = null) · value · headerCount varint ·
//! headers (keyLength varint, key, valueLength varint, value). Varints are zig-zag encoded.
//! Pure functions; every length is checked before slicing.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{self, BatchHeader};
use crate::compression;
use crate::limits::{BATCH_HEADER_BYTES, HEADERS_PER_RECORD_MAX, RECORDS_PER_BATCH_MAX};

/// One decoded record, with absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset (batch base offset + offsetDelta).
    pub offset: i64,
    /// Absolute timestamp (batch base timestamp + timestampDelta; maxTimestamp for LogAppendTime).
    pub timestamp: i64,
    /// Key, `None` if null.
    pub key: Option<Bytes>,
    /// Value, `None` for a tombstone.
    pub value: Option<Bytes>,
    /// Headers, as (key, value) pairs.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// Why records could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    /// Malformed record bytes.
    #[error("malformed record: {0}")]
    Malformed(String),
    /// Decompression failed.
    #[error(transparent)]
    Decompress(#[from] compression::DecompressError),
}

fn malformed(s: &str) -> RecordsError {
    RecordsError::Malformed(s.to_string())
}

/// Reads a zig-zag varlong, advancing `pos`.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, RecordsError> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos).ok_or_else(|| malformed("varint past end"))?;
        *pos += 1;
        if shift > 63 {
            return Err(malformed("varint too long"));
        }
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, RecordsError> {
    i32::try_from(read_varlong(buf, pos)?).map_err(|_| malformed("varint out of i32 range"))
}

/// Writes a zig-zag varlong.
pub fn write_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn read_bytes(buf: &[u8], pos: &mut usize, data: &Bytes) -> Result<Option<Bytes>, RecordsError> {
    let len = read_varint(buf, pos)?;
    if len < 0 {
        return Ok(None);
    }
    let end = pos
        .checked_add(len as usize)
        .filter(|e| *e <= buf.len())
        .ok_or_else(|| malformed("field past end"))?;
    let out = data.slice(*pos..end);
    *pos = end;
    Ok(Some(out))
}

/// Decodes every record of one whole batch (decompressing if needed). Control batches decode too.
pub fn decode_records(batch_bytes: &[u8]) -> Result<(BatchHeader, Vec<Record>), RecordsError> {
    let h = BatchHeader::parse(batch_bytes).map_err(|e| RecordsError::Malformed(e.to_string()))?;
    let body = batch_bytes
        .get(BATCH_HEADER_BYTES..h.total_size())
        .ok_or_else(|| malformed("batch shorter than batchLength"))?;
    let data = Bytes::from(compression::decompress(h.compression(), body)?);
    let count = usize::try_from(h.record_count).map_err(|_| malformed("negative record count"))?;
    if count > RECORDS_PER_BATCH_MAX {
        return Err(malformed("too many records"));
    }
    let mut records = Vec::with_capacity(count.min(4096));
    let buf: &[u8] = &data;
    let mut pos = 0usize;
    for _ in 0..count {
        let len = read_varint(buf, &mut pos)?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|e| *e <= buf.len())
            .ok_or_else(|| malformed("record length past end"))?;
        let rec = buf.get(..end).ok_or_else(|| malformed("record past end"))?;
        pos += 1; // attributes
        let ts_delta = read_varlong(rec, &mut pos)?;
        let off_delta = read_varint(rec, &mut pos)?;
        let key = read_bytes(rec, &mut pos, &data)?;
        let value = read_bytes(rec, &mut pos, &data)?;
        let n_headers = read_varint(rec, &mut pos)?;
        let n_headers =
            usize::try_from(n_headers).map_err(|_| malformed("negative header count"))?;
        if n_headers > HEADERS_PER_RECORD_MAX {
            return Err(malformed("too many headers"));
        }
        let mut headers = Vec::with_capacity(n_headers.min(16));
        for _ in 0..n_headers {
            let hk =
                read_bytes(rec, &mut pos, &data)?.ok_or_else(|| malformed("null header key"))?;
            let hv = read_bytes(rec, &mut pos, &data)?;
            headers.push((hk, hv));
        }
        if pos != end {
            return Err(malformed("record length mismatch"));
        }
        let timestamp = if h.is_log_append_time() {
            h.max_timestamp
        } else {
            h.base_timestamp.wrapping_add(ts_delta)
        };
        records.push(Record {
            offset: h.base_offset.wrapping_add(i64::from(off_delta)),
            timestamp,
            key,
            value,
            headers,
        });
    }
    Ok((h, records))
}

/// Fields of a batch to encode with `encode_records`.
#[derive(Debug, Clone, Copy)]
pub struct BatchFields {
    /// baseOffset to write.
    pub base_offset: i64,
    /// partitionLeaderEpoch.
    pub partition_leader_epoch: i32,
    /// Attributes (compression bits must be 0: the encoder writes uncompressed records).
    pub attributes: i16,
    /// lastOffsetDelta (may exceed the record count when the cleaner dropped records).
    pub last_offset_delta: i32,
    /// baseTimestamp.
    pub base_timestamp: i64,
    /// maxTimestamp.
    pub max_timestamp: i64,
    /// producerId.
    pub producer_id: i64,
    /// producerEpoch.
    pub producer_epoch: i16,
    /// baseSequence.
    pub base_sequence: i32,
}

/// Encodes an uncompressed v2 batch holding `records` (offsets and timestamps are absolute; deltas
/// are computed against `fields.base_offset` / `fields.base_timestamp`). The CRC is computed.
pub fn encode_records(fields: &BatchFields, records: &[Record]) -> BytesMut {
    // Every record's length is known before it is written, so the batch is written once, in
    // place, with no per-record buffer and no second copy of the keys and values.
    let lengths: Vec<usize> = records.iter().map(|r| record_len(fields, r)).collect();
    let body_len: usize = lengths
        .iter()
        .map(|&len| varlong_len(len as i64) + len)
        .sum();
    let mut out = BytesMut::with_capacity(BATCH_HEADER_BYTES + body_len);
    out.put_i64(fields.base_offset);
    out.put_i32((BATCH_HEADER_BYTES - 12 + body_len) as i32);
    out.put_i32(fields.partition_leader_epoch);
    out.put_i8(2);
    out.put_u32(0);
    out.put_i16(fields.attributes & !batch::ATTR_COMPRESSION_MASK);
    out.put_i32(fields.last_offset_delta);
    out.put_i64(fields.base_timestamp);
    out.put_i64(fields.max_timestamp);
    out.put_i64(fields.producer_id);
    out.put_i16(fields.producer_epoch);
    out.put_i32(fields.base_sequence);
    out.put_i32(records.len() as i32);
    for (r, len) in records.iter().zip(lengths) {
        write_varlong(&mut out, len as i64);
        out.put_i8(0);
        write_varlong(&mut out, r.timestamp.wrapping_sub(fields.base_timestamp));
        write_varlong(&mut out, r.offset.wrapping_sub(fields.base_offset));
        put_field(&mut out, r.key.as_deref());
        put_field(&mut out, r.value.as_deref());
        write_varlong(&mut out, r.headers.len() as i64);
        for (k, v) in &r.headers {
            put_field(&mut out, Some(k));
            put_field(&mut out, v.as_deref());
        }
    }
    batch::rewrite_crc(&mut out);
    out
}

/// The bytes of one record after its length prefix, as `encode_records` writes it.
fn record_len(fields: &BatchFields, r: &Record) -> usize {
    1 + varlong_len(r.timestamp.wrapping_sub(fields.base_timestamp))
        + varlong_len(r.offset.wrapping_sub(fields.base_offset))
        + field_len(r.key.as_deref())
        + field_len(r.value.as_deref())
        + varlong_len(r.headers.len() as i64)
        + r.headers
            .iter()
            .map(|(k, v)| field_len(Some(k)) + field_len(v.as_deref()))
            .sum::<usize>()
}

/// The bytes `write_varlong` writes for `v`.
fn varlong_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// The bytes `put_field` writes for `v`.
fn field_len(v: Option<&[u8]>) -> usize {
    match v {
        None => varlong_len(-1),
        Some(b) => varlong_len(b.len() as i64) + b.len(),
    }
}

fn put_field(out: &mut BytesMut, v: Option<&[u8]>) {
    match v {
        None => write_varlong(out, -1),
        Some(b) => {
            write_varlong(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode_batch;

    #[test]
    fn varlong_len_is_what_write_varlong_writes() {
        for v in [0i64, 1, -1, 63, -64, 64, 300, 1 << 20, i64::MAX, i64::MIN] {
            let mut out = BytesMut::new();
            write_varlong(&mut out, v);
            assert_eq!(varlong_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            i64::MAX,
            i64::MIN,
            i32::MIN as i64,
        ] {
            let mut b = BytesMut::new();
            write_varlong(&mut b, v);
            let mut pos = 0;
            assert_eq!(read_varlong(&b, &mut pos), Ok(v));
            assert_eq!(pos, b.len());
        }
        assert!(read_varlong(&[0x80; 11], &mut 0).is_err());
    }

    #[test]
    fn batch_round_trips_records() {
        let b = encode_batch(
            &[
                (Some(b"a"), Some(b"1"), 100),
                (None, None, 90),
                (Some(b"c"), None, 150),
            ],
            -1,
            -1,
            -1,
        );
        let (h, recs) = decode_records(&b).expect("decode");
        assert_eq!(h.record_count, 3);
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(recs[1].key, None);
        assert_eq!(recs[1].timestamp, 90);
        assert_eq!(recs[2].value, None);
        assert_eq!(recs[2].offset, 2);
        assert_eq!(h.max_timestamp, 150);
    }

    #[test]
    fn malformed_records_are_errors() {
        let mut b = encode_batch(&[(Some(b"a"), Some(b"1"), 100)], -1, -1, -1);
        b[61] = 0x7e; // record length 63: runs past the end
        assert!(decode_records(&b).is_err());
    }

    fn record_strategy() -> impl proptest::strategy::Strategy<Value = Record> {
        use proptest::prelude::*;
        let bytes = || proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40));
        (
            0i64..1000,
            any::<i64>(),
            bytes(),
            bytes(),
            proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..8), bytes()),
                0..3,
            ),
        )
            .prop_map(|(offset, timestamp, key, value, headers)| Record {
                offset,
                timestamp,
                key: key.map(Bytes::from),
                value: value.map(Bytes::from),
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (Bytes::from(k), v.map(Bytes::from)))
                    .collect(),
            })
    }

    proptest::proptest! {
        #[test]
        fn encode_decode_round_trip(
            mut recs in proptest::collection::vec(record_strategy(), 0..20),
            base in 0i64..1_000_000,
            base_ts in -1_000_000i64..1_000_000,
        ) {
            recs.sort_by_key(|r| r.offset);
            recs.dedup_by_key(|r| r.offset);
            let recs: Vec<Record> = recs
                .into_iter()
                .map(|mut r| {
                    r.offset += base;
                    r
                })
                .collect();
            let fields = BatchFields {
                base_offset: base,
                partition_leader_epoch: 3,
                attributes: 0,
                last_offset_delta: recs.last().map_or(0, |r| (r.offset - base) as i32),
                base_timestamp: base_ts,
                max_timestamp: recs.iter().map(|r| r.timestamp).max().unwrap_or(-1),
                producer_id: 9,
                producer_epoch: 1,
                base_sequence: 5,
            };
            let encoded = encode_records(&fields, &recs);
            let h = batch::validate_stored(&encoded).map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(h.record_count as usize, recs.len());
            let (_, decoded) = decode_records(&encoded).map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(decoded, recs);
        }

        /// Arbitrary bytes never panic the header parser, the validator or the record decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), flip in 0usize..300) {
            let _ = batch::validate(&bytes);
            let _ = batch::validate_stored(&bytes);
            let _ = decode_records(&bytes);
            // A valid batch with one byte changed: same, and a changed CRC-covered byte is caught.
            let mut b = crate::testing::encode_batch(&[(Some(b"k"), Some(&bytes), 7)], -1, -1, -1).to_vec();
            let i = flip % b.len();
            b[i] ^= 0x5a;
            let verdict = batch::validate(&b);
            if i >= 21 {
                proptest::prop_assert!(verdict.is_err());
            }
            let _ = decode_records(&b);
        }
    }
}
