//! The one binary encoding of the quorum's files and messages, and the checksummed record frame
//! of its files.
//!
//! Values are encoded with postcard (serde, varint integers, no field names;
//! docs/decisions/0020-openraft-quorum.md says why). A file record is
//! `[u32 BE body length][u32 BE CRC-32C of body][body]`; the log file, the vote file and the
//! snapshot header all use it, so a torn or corrupt record is always detected the same way. The
//! network frame (length prefix only: TCP checksums the bytes) is in `wire`.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Bytes before a record's body: length and CRC-32C.
pub const RECORD_HEADER_BYTES: usize = 8;

/// Why a value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The encoded value is longer than the limit of its place.
    #[error("encoded length {len} exceeds the limit {max}")]
    TooLarge { len: usize, max: usize },
    /// postcard refused the bytes or the value.
    #[error("postcard: {0}")]
    Postcard(#[from] postcard::Error),
}

/// Encodes `value` with postcard (records and frames use `encode_record` and `wire`).
#[cfg(test)]
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(postcard::to_allocvec(value)?)
}

/// Decodes a whole postcard value; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    if !rest.is_empty() {
        return Err(CodecError::Postcard(
            postcard::Error::DeserializeBadEncoding,
        ));
    }
    Ok(value)
}

/// Encodes `value` as one file record (header and body); the body must fit in `max` bytes.
pub fn encode_record<T: Serialize>(value: &T, max: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![0u8; RECORD_HEADER_BYTES];
    let mut out = postcard::to_extend(value, std::mem::take(&mut out))?;
    let len = out.len() - RECORD_HEADER_BYTES;
    if len > max {
        return Err(CodecError::TooLarge { len, max });
    }
    let (head, body) = out.split_at_mut(RECORD_HEADER_BYTES);
    let crc = crc32c::crc32c(body);
    head[..4].copy_from_slice(&(len as u32).to_be_bytes());
    head[4..].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// A record header read from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Body length in bytes.
    pub len: usize,
    /// CRC-32C of the body.
    pub crc: u32,
}

/// Parses a record header; `None` when the length exceeds `max` (a torn or corrupt record).
pub fn parse_record_header(head: [u8; RECORD_HEADER_BYTES], max: usize) -> Option<RecordHeader> {
    let [l0, l1, l2, l3, c0, c1, c2, c3] = head;
    let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    let crc = u32::from_be_bytes([c0, c1, c2, c3]);
    (len <= max).then_some(RecordHeader { len, crc })
}

/// Decodes the record at the start of `bytes`: its value and its total length (header and body).
/// `None` when the record is incomplete, too long, fails its CRC or does not decode.
pub fn decode_record<T: DeserializeOwned>(bytes: &[u8], max: usize) -> Option<(T, usize)> {
    let head: [u8; RECORD_HEADER_BYTES] = bytes.get(..RECORD_HEADER_BYTES)?.try_into().ok()?;
    let header = parse_record_header(head, max)?;
    let end = RECORD_HEADER_BYTES.checked_add(header.len)?;
    let body = bytes.get(RECORD_HEADER_BYTES..end)?;
    if crc32c::crc32c(body) != header.crc {
        return None;
    }
    let value = decode(body).ok()?;
    Some((value, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8], expected: Option<(String, usize)>) {
        assert_eq!(decode_record::<String>(bytes, 64), expected);
    }

    #[test]
    fn records_round_trip_and_damage_is_detected() {
        let rec = encode_record(&"hello".to_string(), 64).unwrap();
        assert_eq!(rec.len(), RECORD_HEADER_BYTES + 6);
        check(&rec, Some(("hello".into(), rec.len())));
        // Trailing bytes after the record are left for the next record.
        let mut two = rec.clone();
        two.extend_from_slice(&rec);
        check(&two, Some(("hello".into(), rec.len())));
        // Torn: any strict prefix.
        for cut in 0..rec.len() {
            check(&rec[..cut], None);
        }
        // A flipped bit anywhere.
        for i in 0..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 0x10;
            check(&bad, None);
        }
        // Longer than the limit.
        assert!(matches!(
            encode_record(&"x".repeat(100), 64),
            Err(CodecError::TooLarge { len: 101, max: 64 })
        ));
        check(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], None);
    }

    #[test]
    fn decode_refuses_trailing_bytes() {
        let mut b = encode(&7u32).unwrap();
        assert_eq!(decode::<u32>(&b).unwrap(), 7);
        b.push(0);
        assert!(decode::<u32>(&b).is_err());
    }
}
