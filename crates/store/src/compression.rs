//! Decompression of record batch payloads, always with an output-size limit.
//!
//! Codecs (attribute bits 0-2): 1 gzip (`flate2`), 2 snappy (`snap`, Java/xerial framing or raw),
//! 3 lz4 (`lz4_flex`, LZ4 frame), 4 zstd (`zstd`). Two forms: `reader` streams the payload (the
//! produce-time record walk, `validator`), `decompress` returns it whole (compaction, exact
//! timestamp lookups). Both bound their output.

use std::io::{BufRead, BufReader, Read};

use crate::limits::{DECOMPRESSED_BYTES_MAX, DECOMPRESS_SCRATCH_BYTES};

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
    if codec == 0 {
        if input.len() > limit {
            return Err(DecompressError::TooLarge(limit));
        }
        return Ok(input.to_vec());
    }
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader(codec, input, limit)?
        .take(cap)
        .read_to_end(&mut out)
        .map_err(io_to_decompress)?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge(limit));
    }
    Ok(out)
}

/// A streaming reader of the decompressed payload (codec 0 reads `input` as is), buffered: a
/// reader that only looks at the output and skips most of it (`validator`) copies nothing more.
/// It holds at most one codec window or block plus `DECOMPRESS_SCRATCH_BYTES` in memory, never
/// the whole output; a snappy block larger than `limit` is refused before it is allocated. Callers
/// bound how much they read (at most `limit` bytes make sense); its errors carry a
/// `DecompressError` (see `io_to_decompress`).
pub fn reader<'a>(
    codec: u8,
    input: &'a [u8],
    limit: usize,
) -> Result<Box<dyn BufRead + 'a>, DecompressError> {
    Ok(match codec {
        0 => Box::new(input),
        1 => Box::new(BufReader::with_capacity(
            DECOMPRESS_SCRATCH_BYTES,
            flate2::read::MultiGzDecoder::new(input),
        )),
        // Both buffer their own output block: no second buffer.
        2 => Box::new(SnappyReader::new(input, limit)),
        3 => Box::new(lz4_flex::frame::FrameDecoder::new(input)),
        4 => Box::new(BufReader::with_capacity(
            DECOMPRESS_SCRATCH_BYTES,
            zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| DecompressError::Corrupt(e.to_string()))?,
        )),
        other => return Err(DecompressError::UnknownCodec(other)),
    })
}

/// The `DecompressError` inside an error of a `reader`, or `Corrupt` with its text.
pub fn io_to_decompress(e: std::io::Error) -> DecompressError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<DecompressError>())
    {
        Some(d) => d.clone(),
        None => DecompressError::Corrupt(e.to_string()),
    }
}

/// Snappy as Kafka clients write it: raw snappy (one block, librdkafka) or xerial framing (the
/// Java client: a 16-byte header, then blocks each prefixed with its compressed length). Yields
/// one decompressed block at a time.
struct SnappyReader<'a> {
    /// Compressed input not yet decompressed (blocks only, after the xerial header).
    rest: &'a [u8],
    /// Whether `rest` is xerial blocks (else one raw block).
    xerial: bool,
    /// The current decompressed block and how much of it was read.
    block: Vec<u8>,
    pos: usize,
    /// Output bytes still allowed, of `limit` in all.
    budget: usize,
    limit: usize,
}

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8], limit: usize) -> SnappyReader<'a> {
        let xerial = input.starts_with(XERIAL_MAGIC);
        let rest = if xerial {
            input.get(XERIAL_HEADER_BYTES..).unwrap_or(&[])
        } else {
            input
        };
        SnappyReader {
            rest,
            xerial,
            block: Vec::new(),
            pos: 0,
            budget: limit,
            limit,
        }
    }

    /// Decompresses the next block into `self.block`; false at the end of the input.
    fn next_block(&mut self) -> Result<bool, DecompressError> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        let compressed = if self.xerial {
            let len_bytes: [u8; 4] = self
                .rest
                .get(..4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| DecompressError::Corrupt("truncated xerial block length".into()))?;
            let len = u32::from_be_bytes(len_bytes) as usize;
            let block = self
                .rest
                .get(4..4usize.saturating_add(len))
                .ok_or_else(|| DecompressError::Corrupt("truncated xerial block".into()))?;
            self.rest = self.rest.get(4 + len..).unwrap_or(&[]);
            block
        } else {
            std::mem::take(&mut self.rest)
        };
        let len = snap::raw::decompress_len(compressed)
            .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
        if len > self.budget {
            return Err(DecompressError::TooLarge(self.limit));
        }
        self.budget -= len;
        self.block.clear();
        self.block.resize(len, 0);
        snap::raw::Decoder::new()
            .decompress(compressed, &mut self.block)
            .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), available.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for SnappyReader<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.pos >= self.block.len() {
            if !self.next_block().map_err(std::io::Error::other)? {
                return Ok(&[]);
            }
        }
        Ok(self.block.get(self.pos..).unwrap_or(&[]))
    }

    fn consume(&mut self, amt: usize) {
        self.pos = self.pos.saturating_add(amt).min(self.block.len());
    }
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
