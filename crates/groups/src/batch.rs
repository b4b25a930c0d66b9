//! A minimal Kafka v2 record batch codec for `__consumer_offsets`: uncompressed batches written by
//! the coordinator, and the reader that replays them.
//!
//! Layout (offset:size): baseOffset 0:8, batchLength 8:4, partitionLeaderEpoch 12:4, magic 16:1,
//! crc 17:4 (CRC-32C of bytes 21..end), attributes 21:2, lastOffsetDelta 23:4, baseTimestamp 27:8,
//! maxTimestamp 35:8, producerId 43:8, producerEpoch 51:2, baseSequence 53:4, recordCount 57:4,
//! then records: varint length, i8 attributes, varlong timestampDelta, varint offsetDelta,
//! varint key length (-1 = null) + key, varint value length (-1 = null) + value, varint header
//! count + headers. The store assigns baseOffset on append.
//!
//! Replay reads only what Millrace writes: compressed batches are skipped with an error (nobody
//! else may produce to `__consumer_offsets`), control batches are skipped silently.

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::RECORD_BYTES_MAX;

const HEADER_BYTES: usize = 61;
const LOG_OVERHEAD: usize = 12;
const CRC_START: usize = 21;
const ATTR_CODEC_MASK: i16 = 0x07;
const ATTR_CONTROL: i16 = 0x20;

/// One record as replay sees it: its absolute offset and raw key/value (`None` = null).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub offset: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// Why a batch could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("truncated record batch")]
    Truncated,
    #[error("record batch magic {0} is not 2")]
    BadMagic(u8),
    #[error("record batch CRC mismatch")]
    BadCrc,
    #[error("compressed batch (codec {0}) in __consumer_offsets")]
    Compressed(i16),
    #[error("bad length {0} in record batch")]
    BadLength(i64),
}

/// Encodes `records` (key, value) as one uncompressed v2 batch with base offset 0, no producer id,
/// and every record stamped `timestamp_ms`.
pub fn encode(records: &[(Bytes, Option<Bytes>)], timestamp_ms: i64) -> BytesMut {
    let mut body = BytesMut::new();
    for (i, (key, value)) in records.iter().enumerate() {
        let mut r = BytesMut::new();
        r.put_i8(0);
        put_varlong(&mut r, 0);
        put_varint(&mut r, i as i32);
        put_varint(&mut r, key.len() as i32);
        r.put_slice(key);
        match value {
            Some(v) => {
                put_varint(&mut r, v.len() as i32);
                r.put_slice(v);
            }
            None => put_varint(&mut r, -1),
        }
        put_varint(&mut r, 0);
        put_varint(&mut body, r.len() as i32);
        body.put_slice(&r);
    }
    let mut b = BytesMut::with_capacity(HEADER_BYTES + body.len());
    b.put_i64(0);
    b.put_i32((HEADER_BYTES - LOG_OVERHEAD + body.len()) as i32);
    b.put_i32(-1);
    b.put_u8(2);
    b.put_u32(0);
    b.put_i16(0);
    b.put_i32(records.len().saturating_sub(1) as i32);
    b.put_i64(timestamp_ms);
    b.put_i64(timestamp_ms);
    b.put_i64(-1);
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(records.len() as i32);
    b.put_slice(&body);
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Decodes every complete batch in `bytes` (as returned by a log read); a trailing partial batch
/// is ignored. Returns the records and the offset after the last complete batch (`None` if there
/// was none).
pub fn decode(bytes: &[u8]) -> (Vec<RawRecord>, Option<i64>, Vec<BatchError>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut next = None;
    let mut pos = 0usize;
    while let Some(header) = bytes.get(pos..pos + LOG_OVERHEAD) {
        let length = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let Some(end) = usize::try_from(length)
            .ok()
            .and_then(|l| (pos + LOG_OVERHEAD).checked_add(l))
            .filter(|&e| e <= bytes.len())
        else {
            break;
        };
        let batch = &bytes[pos..end];
        match decode_batch(batch, &mut out) {
            Ok(last) => next = Some(last + 1),
            Err(e) => {
                if let Some(last) = batch_last_offset(batch) {
                    next = Some(last + 1);
                }
                errors.push(e);
            }
        }
        pos = end;
    }
    (out, next, errors)
}

fn batch_last_offset(batch: &[u8]) -> Option<i64> {
    let base = i64::from_be_bytes(batch.get(0..8)?.try_into().ok()?);
    let delta = i32::from_be_bytes(batch.get(23..27)?.try_into().ok()?);
    base.checked_add(i64::from(delta))
}

/// Decodes one batch into `out`; returns its last offset.
fn decode_batch(batch: &[u8], out: &mut Vec<RawRecord>) -> Result<i64, BatchError> {
    if batch.len() < HEADER_BYTES {
        return Err(BatchError::Truncated);
    }
    if batch[16] != 2 {
        return Err(BatchError::BadMagic(batch[16]));
    }
    let crc = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
    if crc32c::crc32c(&batch[CRC_START..]) != crc {
        return Err(BatchError::BadCrc);
    }
    let last = batch_last_offset(batch).ok_or(BatchError::Truncated)?;
    let base = i64::from_be_bytes([
        batch[0], batch[1], batch[2], batch[3], batch[4], batch[5], batch[6], batch[7],
    ]);
    let attributes = i16::from_be_bytes([batch[21], batch[22]]);
    if attributes & ATTR_CONTROL != 0 {
        return Ok(last);
    }
    if attributes & ATTR_CODEC_MASK != 0 {
        return Err(BatchError::Compressed(attributes & ATTR_CODEC_MASK));
    }
    let count = i32::from_be_bytes([batch[57], batch[58], batch[59], batch[60]]);
    let mut r = &batch[HEADER_BYTES..];
    for _ in 0..count.max(0) {
        let len = varint(&mut r)?;
        let len = usize::try_from(len).map_err(|_| BatchError::BadLength(len.into()))?;
        if len > r.len() {
            return Err(BatchError::Truncated);
        }
        let (mut rec, rest) = r.split_at(len);
        r = rest;
        take(&mut rec, 1)?;
        varlong(&mut rec)?;
        let offset_delta = varint(&mut rec)?;
        let key = nullable_bytes(&mut rec)?;
        let value = nullable_bytes(&mut rec)?;
        out.push(RawRecord {
            offset: base.saturating_add(i64::from(offset_delta)),
            key,
            value,
        });
    }
    Ok(last)
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], BatchError> {
    if n > r.len() {
        return Err(BatchError::Truncated);
    }
    let (head, tail) = r.split_at(n);
    *r = tail;
    Ok(head)
}

fn nullable_bytes(r: &mut &[u8]) -> Result<Option<Bytes>, BatchError> {
    let len = varint(r)?;
    if len < 0 {
        return Ok(None);
    }
    if len as usize > RECORD_BYTES_MAX {
        return Err(BatchError::BadLength(len.into()));
    }
    Ok(Some(Bytes::copy_from_slice(take(r, len as usize)?)))
}

fn varlong(r: &mut &[u8]) -> Result<i64, BatchError> {
    let mut value: u64 = 0;
    for shift in (0..70).step_by(7) {
        let b = *take(r, 1)?.first().ok_or(BatchError::Truncated)?;
        value |= u64::from(b & 0x7f) << shift.min(63);
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err(BatchError::BadLength(-1))
}

fn varint(r: &mut &[u8]) -> Result<i32, BatchError> {
    let v = varlong(r)?;
    i32::try_from(v).map_err(|_| BatchError::BadLength(v))
}

fn put_varlong(b: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        b.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    b.put_u8(z as u8);
}

fn put_varint(b: &mut BytesMut, v: i32) {
    put_varlong(b, i64::from(v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trips_with_tombstones() {
        let records = vec![
            (Bytes::from_static(b"k1"), Some(Bytes::from_static(b"v1"))),
            (Bytes::from_static(b"k2"), None),
            (
                Bytes::from(vec![7u8; 300]),
                Some(Bytes::from(vec![9u8; 1000])),
            ),
        ];
        let mut b = encode(&records, 1234);
        b[0..8].copy_from_slice(&10i64.to_be_bytes());
        let (decoded, next, errors) = decode(&b);
        assert!(errors.is_empty());
        assert_eq!(next, Some(13));
        assert_eq!(decoded.len(), 3);
        assert_eq!(decoded[1].offset, 11);
        assert_eq!(decoded[1].value, None);
        assert_eq!(decoded[2].key.as_deref(), Some(&[7u8; 300][..]));
    }

    #[test]
    fn corrupt_and_partial_batches() {
        let one = encode(&[(Bytes::from_static(b"k"), None)], 0);
        let mut two = one.clone();
        two.extend_from_slice(&one[..20]);
        let (decoded, next, errors) = decode(&two);
        assert_eq!((decoded.len(), next, errors.len()), (1, Some(1), 0));
        let mut bad = one.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let (decoded, _, errors) = decode(&bad);
        assert!(decoded.is_empty());
        assert_eq!(errors, vec![BatchError::BadCrc]);
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            300,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut b = BytesMut::new();
            put_varlong(&mut b, v);
            let mut r = &b[..];
            assert_eq!(varlong(&mut r), Ok(v));
        }
    }
}
