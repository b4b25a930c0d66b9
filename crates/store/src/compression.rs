//! Decompression of record batch payloads, always with an output-size limit.
//!
//! Codecs (attribute bits 0-2): 1 gzip (`flate2`), 2 snappy (`snap`, Java/xerial framing or raw),
//! 3 lz4 (`lz4_flex`, LZ4 frame), 4 zstd (`zstd`). Used only where the store must look inside
//! records: compaction (keys) and exact timestamp lookups. Never on the produce path.

use std::io::Read;

use crate::limits::DECOMPRESSED_BYTES_MAX;

/// Xerial snappy framing magic used by the Java client.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = 16;

/// Why a payload could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    /// Unknown codec id.
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
    /// Output would exceed the limit.
    #[error("decompressed size exceeds {0} bytes")]
    TooLarge(usize),
    /// The codec reported corrupt input.
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
}

/// Decompresses `input` with codec `codec` into at most `DECOMPRESSED_BYTES_MAX` bytes.
pub fn decompress(codec: u8, input: &[u8]) -> Result<Vec<u8>, DecompressError> {
    decompress_limited(codec, input, DECOMPRESSED_BYTES_MAX)
}

/// Like `decompress` with an explicit output limit in bytes.
pub fn decompress_limited(
    codec: u8,
    input: &[u8],
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    match codec {
        0 => {
            if input.len() > limit {
                return Err(DecompressError::TooLarge(limit));
            }
            Ok(input.to_vec())
        }
        1 => read_limited(flate2::read::MultiGzDecoder::new(input), limit),
        2 => snappy(input, limit),
        3 => read_limited(lz4_flex::frame::FrameDecoder::new(input), limit),
        4 => {
            let dec = zstd::stream::read::Decoder::new(input)
                .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
            read_limited(dec, limit)
        }
        other => Err(DecompressError::UnknownCodec(other)),
    }
}

fn read_limited(reader: impl Read, limit: usize) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge(limit));
    }
    Ok(out)
}

fn snappy_raw(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), DecompressError> {
    let len =
        snap::raw::decompress_len(input).map_err(|e| DecompressError::Corrupt(e.to_string()))?;
    if out.len().saturating_add(len) > limit {
        return Err(DecompressError::TooLarge(limit));
    }
    let start = out.len();
    out.resize(start + len, 0);
    let dst = out.get_mut(start..).unwrap_or(&mut []);
    snap::raw::Decoder::new()
        .decompress(input, dst)
        .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
    Ok(())
}

fn snappy(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    if !input.starts_with(XERIAL_MAGIC) {
        snappy_raw(input, limit, &mut out)?;
        return Ok(out);
    }
    let mut rest = input.get(XERIAL_HEADER_BYTES..).unwrap_or(&[]);
    while !rest.is_empty() {
        let len_bytes: [u8; 4] = rest
            .get(..4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| DecompressError::Corrupt("truncated xerial block length".into()))?;
        let len = u32::from_be_bytes(len_bytes) as usize;
        let block = rest
            .get(4..4usize.saturating_add(len))
            .ok_or_else(|| DecompressError::Corrupt("truncated xerial block".into()))?;
        snappy_raw(block, limit, &mut out)?;
        rest = rest.get(4 + len..).unwrap_or(&[]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn check(codec: u8, compressed: &[u8], expected: &[u8]) {
        assert_eq!(decompress(codec, compressed).as_deref(), Ok(expected));
        if !expected.is_empty() {
            assert!(matches!(
                decompress_limited(codec, compressed, expected.len() - 1),
                Err(DecompressError::TooLarge(_))
            ));
        }
    }

    #[test]
    fn all_codecs_round_trip_with_limit() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&data).expect("gzip");
        check(1, &gz.finish().expect("gzip"), &data);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("snappy");
        check(2, &raw, &data);
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for chunk in data.chunks(3000) {
            let c = snap::raw::Encoder::new()
                .compress_vec(chunk)
                .expect("snappy");
            xerial.extend_from_slice(&(c.len() as u32).to_be_bytes());
            xerial.extend_from_slice(&c);
        }
        check(2, &xerial, &data);
        let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz.write_all(&data).expect("lz4");
        check(3, &lz.finish().expect("lz4"), &data);
        check(4, &zstd::encode_all(&data[..], 3).expect("zstd"), &data);
        assert!(matches!(
            decompress(7, &data),
            Err(DecompressError::UnknownCodec(7))
        ));
        assert!(decompress(4, b"garbage").is_err());
    }
}
