//! What the leader checks inside a client's batch before storing it (Kafka's `LogValidator`):
//! every record is walked, so that nothing is stored that a consumer cannot read.
//!
//! `batch::validate` has already checked the header (length, magic, CRC, recordCount equal to
//! lastOffsetDelta + 1). Here: no control batch from a client, a sequence with every producer id; the payload decompresses (streaming, through a
//! bounded scratch buffer, at most `DECOMPRESSED_BYTES_MAX` bytes of output, so a decompression
//! bomb costs bounded memory); exactly `recordCount` well-formed records (varints in range, lengths
//! that match, offset deltas 0, 1, 2, …) and nothing after them; and the topic's rules per record —
//! a key on compacted topics, a CreateTime timestamp within `message.timestamp.before.max.ms` /
//! `message.timestamp.after.max.ms` of now — refused with the records' indexes (KIP-467).
//!
//! Keys and values are skipped, never copied. Pure functions over the batch bytes, no I/O.

use std::io::BufRead;

use crate::batch::BatchHeader;
use crate::compression;
use crate::error::AppendError;
use crate::limits::{BATCH_HEADER_BYTES, DECOMPRESSED_BYTES_MAX, RECORD_ERRORS_MAX};

/// A record timestamp meaning "none" (Kafka's `RecordBatch.NO_TIMESTAMP`); never out of range.
const NO_TIMESTAMP: i64 = -1;

/// Bytes: the longest varint encoding (a 64-bit value, 7 bits per byte).
const VARLONG_BYTES_MAX: usize = 10;

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The topic's rules a batch is checked against.
#[derive(Debug, Clone, Copy)]
pub struct RecordRules {
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub require_keys: bool,
    /// For `message.timestamp.type=CreateTime`: the accepted window around now.
    pub timestamps: Option<TimestampWindow>,
}

/// Record timestamps must lie in `[now_ms - before_max_ms, now_ms + after_max_ms]`.
#[derive(Debug, Clone, Copy)]
pub struct TimestampWindow {
    /// The broker's clock, ms since the epoch.
    pub now_ms: i64,
    /// `message.timestamp.before.max.ms`.
    pub before_max_ms: i64,
    /// `message.timestamp.after.max.ms`.
    pub after_max_ms: i64,
}

impl TimestampWindow {
    fn accepts(&self, ts: i64) -> bool {
        // Differences in i128: the bounds are often i64::MAX.
        let diff = i128::from(self.now_ms) - i128::from(ts);
        diff <= i128::from(self.before_max_ms) && -diff <= i128::from(self.after_max_ms)
    }
}

/// What the walk learned about a batch that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The largest record timestamp (CreateTime; `-1` when every record has none). The leader
    /// stores this as the batch's maxTimestamp, as Kafka does, whatever the producer wrote.
    pub max_timestamp: i64,
}

/// Walks every record of the client batch `batch` (its header `h`, already structurally
/// validated) and applies `rules`. Nothing is allocated in proportion to a count read from the
/// batch.
pub fn check_client_batch(
    batch: &[u8],
    h: &BatchHeader,
    rules: &RecordRules,
) -> Result<Checked, AppendError> {
    if h.is_control() {
        return Err(AppendError::InvalidRecord(
            "Clients are not allowed to write control records".into(),
        ));
    }
    if h.has_producer_id() && h.base_sequence < 0 {
        return Err(AppendError::InvalidRecord(format!(
            "Invalid sequence number {} in record batch with producerId {}",
            h.base_sequence, h.producer_id
        )));
    }
    let body = batch
        .get(BATCH_HEADER_BYTES..h.total_size())
        .ok_or_else(|| AppendError::CorruptMessage("batch shorter than batchLength".into()))?;
    let codec = h.compression();
    let walk = if codec == 0 {
        walk_records(Source::new(body, body.len()), h, rules)
    } else {
        let reader = compression::reader(codec, body, DECOMPRESSED_BYTES_MAX).map_err(|e| {
            AppendError::CorruptMessage(format!("compressed records (codec {codec}): {e}"))
        })?;
        walk_records(Source::new(reader, DECOMPRESSED_BYTES_MAX), h, rules)
    };
    walk.map_err(|e| e.into_append_error(codec))
}

/// Why the walk stopped.
enum WalkError {
    /// The records are malformed → INVALID_RECORD.
    Record(String),
    /// The payload could not be decompressed or inflates past the bound → CORRUPT_MESSAGE.
    Codec(compression::DecompressError),
    /// Particular records break the topic's rules.
    Rules {
        timestamp: bool,
        record_errors: Vec<(i32, String)>,
        total: usize,
    },
}

impl WalkError {
    fn into_append_error(self, codec: u8) -> AppendError {
        match self {
            WalkError::Record(m) => AppendError::InvalidRecord(m),
            WalkError::Codec(e) => {
                AppendError::CorruptMessage(format!("compressed records (codec {codec}): {e}"))
            }
            WalkError::Rules {
                timestamp,
                record_errors,
                total,
            } => AppendError::InvalidRecords {
                invalid_timestamp: timestamp,
                record_errors,
                total,
            },
        }
    }
}

fn malformed(s: impl Into<String>) -> WalkError {
    WalkError::Record(s.into())
}

/// Bytes of the (decompressed) record stream, consumed front to back and counted.
struct Source<R: BufRead> {
    r: R,
    consumed: usize,
    limit: usize,
}

impl<R: BufRead> Source<R> {
    fn new(r: R, limit: usize) -> Self {
        Source {
            r,
            consumed: 0,
            limit,
        }
    }

    /// The next buffered bytes; empty at the end of the stream.
    fn fill(&mut self) -> Result<&[u8], WalkError> {
        if self.consumed > self.limit {
            return Err(WalkError::Codec(compression::DecompressError::TooLarge(
                self.limit,
            )));
        }
        self.r
            .fill_buf()
            .map_err(|e| WalkError::Codec(compression::io_to_decompress(e)))
    }

    fn consume(&mut self, n: usize) {
        self.r.consume(n);
        self.consumed += n;
    }

    fn at_end(&mut self) -> Result<bool, WalkError> {
        Ok(self.fill()?.is_empty())
    }

    fn byte(&mut self) -> Result<u8, WalkError> {
        let b = *self
            .fill()?
            .first()
            .ok_or_else(|| malformed("record runs past the end of the batch"))?;
        self.consume(1);
        Ok(b)
    }

    /// A zig-zag varlong of at most `VARLONG_BYTES_MAX` bytes.
    fn varlong(&mut self) -> Result<i64, WalkError> {
        let mut value: u64 = 0;
        let buffered = self.fill()?;
        if buffered.len() >= VARLONG_BYTES_MAX {
            // Fast path: the whole varint is in the buffer.
            for (i, &b) in buffered.iter().take(VARLONG_BYTES_MAX).enumerate() {
                value |= u64::from(b & 0x7f) << (7 * i);
                if b & 0x80 == 0 {
                    self.consume(i + 1);
                    return Ok(zigzag(value));
                }
            }
        } else {
            for i in 0..VARLONG_BYTES_MAX {
                let b = self.byte()?;
                value |= u64::from(b & 0x7f) << (7 * i);
                if b & 0x80 == 0 {
                    return Ok(zigzag(value));
                }
            }
        }
        Err(malformed("varint longer than 10 bytes"))
    }

    /// A zig-zag varint in i32 range.
    fn varint(&mut self) -> Result<i32, WalkError> {
        let v = self.varlong()?;
        i32::try_from(v).map_err(|_| malformed(format!("varint {v} out of i32 range")))
    }

    /// Skips `n` bytes (a key, value or header field).
    fn skip(&mut self, mut n: usize) -> Result<(), WalkError> {
        while n > 0 {
            let available = self.fill()?.len();
            if available == 0 {
                return Err(malformed("record field runs past the end of the batch"));
            }
            let step = available.min(n);
            self.consume(step);
            n -= step;
        }
        Ok(())
    }
}

/// Reads one length-prefixed field (`-1` = null when `nullable`); returns whether it was null.
fn field<R: BufRead>(
    src: &mut Source<R>,
    end: usize,
    nullable: bool,
    what: &str,
) -> Result<bool, WalkError> {
    let len = src.varint()?;
    if len == -1 && nullable {
        return Ok(true);
    }
    let len = usize::try_from(len).map_err(|_| malformed(format!("invalid {what} size {len}")))?;
    if src.consumed.saturating_add(len) > end {
        return Err(malformed(format!(
            "{what} of {len} bytes runs past its record"
        )));
    }
    src.skip(len)?;
    Ok(false)
}

fn walk_records<R: BufRead>(
    mut src: Source<R>,
    h: &BatchHeader,
    rules: &RecordRules,
) -> Result<Checked, WalkError> {
    let declared = usize::try_from(h.record_count)
        .map_err(|_| malformed(format!("invalid record count {}", h.record_count)))?;
    let mut record_errors: Vec<(i32, String)> = Vec::new();
    let mut total_errors = 0usize;
    let mut timestamp_error = false;
    let mut max_timestamp = NO_TIMESTAMP;
    for index in 0..declared {
        if src.at_end()? {
            return Err(malformed(format!(
                "batch declares {declared} records, holds {index}"
            )));
        }
        let len = src.varint()?;
        let len =
            usize::try_from(len).map_err(|_| malformed(format!("invalid record size {len}")))?;
        let start = src.consumed;
        let end = start.saturating_add(len);
        let _attributes = src.byte()?;
        let timestamp_delta = src.varlong()?;
        let offset_delta = src.varint()?;
        if usize::try_from(offset_delta).ok() != Some(index) {
            return Err(malformed(format!(
                "record {index} has offset delta {offset_delta}: inner offsets must be consecutive"
            )));
        }
        let key_is_null = field(&mut src, end, true, "key")?;
        field(&mut src, end, true, "value")?;
        let headers = src.varint()?;
        let headers = usize::try_from(headers)
            .map_err(|_| malformed(format!("invalid header count {headers}")))?;
        for _ in 0..headers {
            // Each header takes at least two bytes, so the record's length bounds this loop.
            if src.consumed >= end {
                return Err(malformed("headers run past their record"));
            }
            field(&mut src, end, false, "header key")?;
            field(&mut src, end, true, "header value")?;
        }
        if src.consumed != end {
            return Err(malformed(format!(
                "invalid record size: expected to read {len} bytes in record payload, read {}",
                src.consumed - start
            )));
        }

        let timestamp = h.base_timestamp.wrapping_add(timestamp_delta);
        let mut error = None;
        if rules.require_keys && key_is_null {
            error = Some("Compacted topic cannot accept message without key".to_string());
        } else if let Some(window) = &rules.timestamps {
            if timestamp != NO_TIMESTAMP && !window.accepts(timestamp) {
                timestamp_error = true;
                error = Some(format!(
                    "Timestamp {timestamp} of message with offset {index} is out of range. The \
                     timestamp should be within [{}, {}]",
                    window.now_ms.saturating_sub(window.before_max_ms),
                    window.now_ms.saturating_add(window.after_max_ms)
                ));
            }
        }
        if let Some(message) = error {
            total_errors += 1;
            if record_errors.len() < RECORD_ERRORS_MAX {
                record_errors.push((i32::try_from(index).unwrap_or(i32::MAX), message));
            }
        }
        max_timestamp = max_timestamp.max(timestamp);
    }
    if !src.at_end()? {
        return Err(malformed(format!(
            "incorrect declared batch size: bytes remain after the declared {declared} records"
        )));
    }
    if total_errors > 0 {
        return Err(WalkError::Rules {
            timestamp: timestamp_error,
            record_errors,
            total: total_errors,
        });
    }
    Ok(Checked { max_timestamp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{self, ATTR_CONTROL};
    use crate::testing::encode_batch;
    use std::io::Read;

    const NOW: i64 = 1_700_000_000_000;

    fn rules() -> RecordRules {
        RecordRules {
            require_keys: false,
            timestamps: Some(TimestampWindow {
                now_ms: NOW,
                before_max_ms: i64::MAX,
                after_max_ms: 3_600_000,
            }),
        }
    }

    fn check(b: &[u8], rules: &RecordRules) -> Result<Checked, AppendError> {
        let h = batch::validate(b).expect("structurally valid");
        check_client_batch(b, &h, rules)
    }

    /// Re-frames `records` (the raw record bytes) as a batch with `count` records and `codec`.
    fn reframe(template: &[u8], records: &[u8], count: i32, codec: u8) -> Vec<u8> {
        let mut b = template[..BATCH_HEADER_BYTES].to_vec();
        let payload = match codec {
            0 => records.to_vec(),
            1 => {
                use std::io::Write;
                let mut gz =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(records).expect("gzip");
                gz.finish().expect("gzip")
            }
            4 => zstd::encode_all(records, 3).expect("zstd"),
            _ => records.to_vec(),
        };
        b.extend_from_slice(&payload);
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let attrs = i16::from_be_bytes([b[21], b[22]]) & !0x07 | i16::from(codec);
        b[21..23].copy_from_slice(&attrs.to_be_bytes());
        b[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        b[57..61].copy_from_slice(&count.to_be_bytes());
        batch::rewrite_crc(&mut b);
        b
    }

    fn three() -> Vec<u8> {
        encode_batch(
            &[
                (Some(b"k0"), Some(b"v0"), NOW),
                (Some(b"k1"), Some(b"v1"), NOW + 1),
                (None, Some(b"v2"), NOW - 5),
            ],
            -1,
            -1,
            -1,
        )
        .to_vec()
    }

    #[test]
    fn well_formed_batches_pass_in_every_codec() {
        let b = three();
        assert_eq!(
            check(&b, &rules()).expect("plain"),
            Checked {
                max_timestamp: NOW + 1
            }
        );
        for codec in [1u8, 4] {
            let c = reframe(&b, &b[BATCH_HEADER_BYTES..], 3, codec);
            assert!(check(&c, &rules()).is_ok(), "codec {codec}");
        }
    }

    #[test]
    fn count_mismatches_are_invalid_records() {
        let b = three();
        let records = &b[BATCH_HEADER_BYTES..];
        for (count, codec) in [(5, 0u8), (5, 1), (2, 0), (2, 4), (i32::MAX, 0)] {
            let c = reframe(&b, records, count, codec);
            assert!(
                matches!(check(&c, &rules()), Err(AppendError::InvalidRecord(_))),
                "count {count} codec {codec}"
            );
        }
    }

    #[test]
    fn garbage_payloads_and_unknown_codecs_are_corrupt() {
        let b = three();
        for codec in [1u8, 2, 3, 4] {
            let c = reframe(&b, b"this is not compressed at all", 3, codec);
            let c = {
                // reframe only compresses 1 and 4; force the codec bits for the rest.
                let mut c = c;
                let attrs = i16::from_be_bytes([c[21], c[22]]) & !0x07 | i16::from(codec);
                c[21..23].copy_from_slice(&attrs.to_be_bytes());
                batch::rewrite_crc(&mut c);
                c
            };
            let got = check(&c, &rules());
            assert!(
                matches!(
                    got,
                    Err(AppendError::CorruptMessage(_)) | Err(AppendError::InvalidRecord(_))
                ),
                "codec {codec}: {got:?}"
            );
        }
        for codec in [5u8, 6, 7] {
            let mut c = b.clone();
            let attrs = i16::from_be_bytes([c[21], c[22]]) & !0x07 | i16::from(codec);
            c[21..23].copy_from_slice(&attrs.to_be_bytes());
            batch::rewrite_crc(&mut c);
            assert!(
                matches!(check(&c, &rules()), Err(AppendError::CorruptMessage(_))),
                "codec {codec}"
            );
        }
    }

    #[test]
    fn control_batches_and_bad_varints_are_refused() {
        let mut b = three();
        let attrs = i16::from_be_bytes([b[21], b[22]]) | ATTR_CONTROL;
        b[21..23].copy_from_slice(&attrs.to_be_bytes());
        batch::rewrite_crc(&mut b);
        assert!(matches!(
            check(&b, &rules()),
            Err(AppendError::InvalidRecord(_))
        ));
        let b = three();
        let mut records = b[BATCH_HEADER_BYTES..].to_vec();
        records[0] = 0xff; // the first record's length becomes an unterminated varint
        records[1] = 0xff;
        records[2] = 0xff;
        records[3] = 0xff;
        records[4] = 0xff;
        let c = reframe(&b, &records, 3, 0);
        assert!(matches!(
            check(&c, &rules()),
            Err(AppendError::InvalidRecord(_))
        ));
        let mut trailing = b[BATCH_HEADER_BYTES..].to_vec();
        trailing.push(0);
        let c = reframe(&b, &trailing, 3, 0);
        assert!(matches!(
            check(&c, &rules()),
            Err(AppendError::InvalidRecord(_))
        ));
    }

    #[test]
    fn rules_name_the_records() {
        let b = three();
        let keyed = RecordRules {
            require_keys: true,
            ..rules()
        };
        match check(&b, &keyed) {
            Err(AppendError::InvalidRecords {
                invalid_timestamp: false,
                record_errors,
                total: 1,
            }) => assert_eq!(record_errors[0].0, 2),
            other => panic!("{other:?}"),
        }
        let late = encode_batch(
            &[
                (None, Some(b"a"), NOW),
                (None, Some(b"b"), NOW + 3_600_001),
                (None, Some(b"c"), NOW - 10_000),
                (None, Some(b"d"), NO_TIMESTAMP),
            ],
            -1,
            -1,
            -1,
        );
        let strict = RecordRules {
            require_keys: false,
            timestamps: Some(TimestampWindow {
                now_ms: NOW,
                before_max_ms: 5_000,
                after_max_ms: 3_600_000,
            }),
        };
        match check(&late, &strict) {
            Err(AppendError::InvalidRecords {
                invalid_timestamp: true,
                record_errors,
                total: 2,
            }) => {
                let idx: Vec<i32> = record_errors.iter().map(|e| e.0).collect();
                assert_eq!(idx, vec![1, 2]);
            }
            other => panic!("{other:?}"),
        }
        let no_window = RecordRules {
            require_keys: false,
            timestamps: None,
        };
        assert!(check(&late, &no_window).is_ok());
    }

    #[test]
    fn a_bomb_is_refused_in_bounded_memory() {
        // One record whose value is 200 MiB of zeros (past DECOMPRESSED_BYTES_MAX), gzip.
        let value_len: usize = 200 << 20;
        let mut head = bytes::BytesMut::new();
        let mut rec = bytes::BytesMut::new();
        rec.extend_from_slice(&[0]); // attributes
        crate::records::write_varlong(&mut rec, 0);
        crate::records::write_varlong(&mut rec, 0);
        crate::records::write_varlong(&mut rec, -1);
        crate::records::write_varlong(&mut rec, value_len as i64);
        crate::records::write_varlong(&mut head, (rec.len() + value_len + 1) as i64);
        head.extend_from_slice(&rec);
        let stream = (&head[..])
            .chain(std::io::repeat(0).take(value_len as u64))
            .chain(&[0u8][..]);
        let mut compressed = Vec::new();
        flate2::read::GzEncoder::new(stream, flate2::Compression::fast())
            .read_to_end(&mut compressed)
            .expect("gzip");
        let b = three();
        let c = reframe(&b, &compressed, 1, 0);
        let mut c = c;
        let attrs = i16::from_be_bytes([c[21], c[22]]) & !0x07 | 1;
        c[21..23].copy_from_slice(&attrs.to_be_bytes());
        batch::rewrite_crc(&mut c);
        match check(&c, &rules()) {
            Err(AppendError::CorruptMessage(m)) => assert!(m.contains("exceeds"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
