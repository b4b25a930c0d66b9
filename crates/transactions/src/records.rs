//! The `__transaction_state` record formats, byte for byte as Apache Kafka 4.1 writes them, so
//! that the topic could be read by Kafka's tools and Kafka's could be read by ours.
//!
//! One record per transactional id and state change; the log is compacted by key.
//!
//! Key: i16 version 0 (in Kafka 4.x the coordinator record type of TransactionLogKey, the same
//! bytes), then TransactionLogKey v0 { TransactionalId: string } (i16 length, UTF-8).
//!
//! Value: i16 version, then TransactionLogValue. Version 0 is non-flexible: ProducerId i64,
//! ProducerEpoch i16, TransactionTimeoutMs i32, TransactionStatus i8 (see [`TxnStatus`]),
//! TransactionPartitions as a nullable i32-counted array of { Topic: i16-length string,
//! PartitionIds: i32-counted array of i32 }, TransactionLastUpdateTimestampMs i64,
//! TransactionStartTimestampMs i64. Version 1 (flexible) has the same fields in the same order,
//! with compact (uvarint n+1, 0 = null) strings and arrays, an empty tagged-field section after
//! each partition entry, and a tagged-field section at the end of the value: tag 0
//! PreviousProducerId i64 (default -1), 1 NextProducerId i64 (default -1), 2
//! ClientTransactionVersion i16 (default 0), 3 NextProducerEpoch i16 (default -1). A tagged field
//! is written only when it is not its default, in tag order; unknown tags are skipped on read.
//!
//! Kafka 4.1 writes v1 when the cluster's `transaction.version` feature is 1 or more (the default
//! of a cluster formatted by 4.x) and v0 under `transaction.version` 0. Its 4.1.1 writer sets only
//! ClientTransactionVersion of the tagged fields (PreviousProducerId, NextProducerId and
//! NextProducerEpoch stay at their defaults and are never written); it reads them all. The
//! partition list is null for an Empty transaction and ignored on read when the status is Empty.
//! A record with a null value is a tombstone: the transactional id expired.
//!
//! Kafka groups partitions by topic in hash order; Millrace keeps them sorted
//! ([`TxnPartitions`]), so re-encoding a Kafka value with several topics or partitions can order
//! them differently (Kafka's reader turns the list into a set and does not care).
//!
//! Layouts: apache/kafka `transaction-coordinator/src/main/resources/common/message/
//! TransactionLogKey.json` and `TransactionLogValue.json`, checked against the 4.1.1 jars.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use millrace_store::reader::{Reader, ReaderError};

use crate::limits::{
    RECORD_BYTES_MAX, TAGGED_FIELDS_MAX, TOPIC_NAME_BYTES_MAX, TRANSACTIONAL_ID_BYTES_MAX,
    VALUE_PARTITIONS_MAX, VALUE_TOPICS_MAX,
};
use crate::state::TxnStatus;

/// Key version (TransactionLogKey v0; Kafka 4.x calls it the coordinator record type, also 0).
pub const TRANSACTION_LOG_KEY_VERSION: i16 = 0;
/// Value version Millrace writes: TransactionLogValue v1, as Kafka 4.1 does with
/// `transaction.version` >= 1.
pub const TRANSACTION_LOG_VALUE_VERSION: i16 = 1;
/// The non-flexible value version (Kafka before 4.0, or `transaction.version` 0).
const VALUE_V0: i16 = 0;

/// Tags of TransactionLogValue v1's tagged fields.
const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;
const TAG_NEXT_PRODUCER_EPOCH: u32 = 3;

/// The partitions a transaction has written to, by topic.
pub type TxnPartitions = BTreeMap<String, BTreeSet<i32>>;

/// TransactionLogValue: what the coordinator knows about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionLogValue {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Producer id of the last committed transaction (tag 0, v1 only); -1 = none.
    pub previous_producer_id: i64,
    /// Producer id handed to the producer when the epoch ran out (tag 1, v1 only); -1 = none.
    pub next_producer_id: i64,
    /// Epoch that goes with `next_producer_id` (tag 3, v1 only); -1 = none.
    pub next_producer_epoch: i16,
    pub timeout_ms: i32,
    pub status: TxnStatus,
    /// Empty (and not written) when `status` is Empty.
    pub partitions: TxnPartitions,
    pub last_update_ms: i64,
    /// -1 when no transaction has started.
    pub start_ms: i64,
    /// The `transaction.version` the client's requests used (tag 2, v1 only): 0 before KIP-890,
    /// 2 for a transactions-v2 client.
    pub client_transaction_version: i16,
}

impl Default for TransactionLogValue {
    /// An Empty transactional id with no producer, every tagged field at Kafka's default.
    fn default() -> Self {
        Self {
            producer_id: -1,
            producer_epoch: -1,
            previous_producer_id: -1,
            next_producer_id: -1,
            next_producer_epoch: -1,
            timeout_ms: 0,
            status: TxnStatus::Empty,
            partitions: TxnPartitions::new(),
            last_update_ms: -1,
            start_ms: -1,
            client_transaction_version: 0,
        }
    }
}

/// One decoded `__transaction_state` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub transactional_id: String,
    /// `None`: a tombstone (the transactional id expired).
    pub value: Option<TransactionLogValue>,
}

/// Why bytes could not be read as a `__transaction_state` record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record truncated")]
    Truncated,
    #[error("invalid length {0}")]
    BadLength(i64),
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("non-nullable {0} is null")]
    Null(&'static str),
    #[error("unsupported {what} version {version}")]
    UnsupportedVersion { what: &'static str, version: i16 },
    #[error("unknown transaction status {0}")]
    UnknownStatus(i8),
    #[error("tagged field {tag} has {size} bytes")]
    BadTaggedField { tag: u32, size: usize },
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Encodes the key of `transactional_id`'s records. The id must be at most
/// [`TRANSACTIONAL_ID_BYTES_MAX`] bytes, as every Kafka request's strings are; a longer one is
/// written with that length and fails to decode (never decodes as another id).
pub fn encode_key(transactional_id: &str) -> Bytes {
    debug_assert!(transactional_id.len() <= TRANSACTIONAL_ID_BYTES_MAX);
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(TRANSACTION_LOG_KEY_VERSION);
    put_string(&mut b, transactional_id);
    b.freeze()
}

/// Encodes `value` as Kafka 4.1 does ([`TRANSACTION_LOG_VALUE_VERSION`]).
pub fn encode_value(value: &TransactionLogValue) -> Bytes {
    encode_v(value, true)
}

/// Encodes `value` as TransactionLogValue `version` (0 or 1). Version 0 has no tagged fields:
/// the previous and next producer ids, the next epoch and the client's transaction version are
/// not written (a reader takes their defaults).
pub fn encode_value_version(
    value: &TransactionLogValue,
    version: i16,
) -> Result<Bytes, RecordError> {
    match version {
        VALUE_V0 => Ok(encode_v(value, false)),
        TRANSACTION_LOG_VALUE_VERSION => Ok(encode_v(value, true)),
        _ => Err(RecordError::UnsupportedVersion {
            what: "TransactionLogValue",
            version,
        }),
    }
}

fn encode_v(v: &TransactionLogValue, flexible: bool) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(if flexible {
        TRANSACTION_LOG_VALUE_VERSION
    } else {
        VALUE_V0
    });
    b.put_i64(v.producer_id);
    b.put_i16(v.producer_epoch);
    b.put_i32(v.timeout_ms);
    b.put_i8(v.status.as_i8());
    if v.status == TxnStatus::Empty {
        // Null, as Kafka writes it for an Empty transaction.
        if flexible {
            put_uvarint(&mut b, 0);
        } else {
            b.put_i32(-1);
        }
    } else {
        put_array_len(&mut b, v.partitions.len(), flexible);
        for (topic, partitions) in &v.partitions {
            if flexible {
                put_compact_string(&mut b, topic);
            } else {
                put_string(&mut b, topic);
            }
            put_array_len(&mut b, partitions.len(), flexible);
            for p in partitions {
                b.put_i32(*p);
            }
            if flexible {
                // No tagged fields in a partition entry.
                put_uvarint(&mut b, 0);
            }
        }
    }
    b.put_i64(v.last_update_ms);
    b.put_i64(v.start_ms);
    if flexible {
        let mut tagged: Vec<(u32, Vec<u8>)> = Vec::new();
        if v.previous_producer_id != -1 {
            let data = v.previous_producer_id.to_be_bytes().to_vec();
            tagged.push((TAG_PREVIOUS_PRODUCER_ID, data));
        }
        if v.next_producer_id != -1 {
            let data = v.next_producer_id.to_be_bytes().to_vec();
            tagged.push((TAG_NEXT_PRODUCER_ID, data));
        }
        if v.client_transaction_version != 0 {
            let data = v.client_transaction_version.to_be_bytes().to_vec();
            tagged.push((TAG_CLIENT_TRANSACTION_VERSION, data));
        }
        if v.next_producer_epoch != -1 {
            let data = v.next_producer_epoch.to_be_bytes().to_vec();
            tagged.push((TAG_NEXT_PRODUCER_EPOCH, data));
        }
        put_uvarint(&mut b, tagged.len() as u64);
        for (tag, data) in tagged {
            put_uvarint(&mut b, tag.into());
            put_uvarint(&mut b, data.len() as u64);
            b.put_slice(&data);
        }
    }
    b.freeze()
}

fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// An i16-length string; see [`encode_key`] for one longer than i16::MAX.
fn put_string(b: &mut BytesMut, s: &str) {
    b.put_i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
    b.put_slice(s.as_bytes());
}

fn put_compact_string(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u64 + 1);
    b.put_slice(s.as_bytes());
}

fn put_array_len(b: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(b, len as u64 + 1);
    } else {
        b.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
    }
}

/// Decodes a key into its transactional id.
pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    check_size(bytes)?;
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != TRANSACTION_LOG_KEY_VERSION {
        return Err(RecordError::UnsupportedVersion {
            what: "TransactionLogKey",
            version,
        });
    }
    let id = r
        .nullable_string(TRANSACTIONAL_ID_BYTES_MAX)?
        .ok_or(RecordError::Null("TransactionalId"))?;
    r.finish()?;
    Ok(id)
}

/// Decodes a (non-null) value, v0 or v1.
pub fn decode_value(bytes: &[u8]) -> Result<TransactionLogValue, RecordError> {
    check_size(bytes)?;
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    let flexible = match version {
        VALUE_V0 => false,
        TRANSACTION_LOG_VALUE_VERSION => true,
        _ => {
            return Err(RecordError::UnsupportedVersion {
                what: "TransactionLogValue",
                version,
            })
        }
    };
    let mut v = TransactionLogValue {
        producer_id: r.i64()?,
        producer_epoch: r.i16()?,
        timeout_ms: r.i32()?,
        ..TransactionLogValue::default()
    };
    let status = r.i8()?;
    v.status = TxnStatus::from_i8(status).ok_or(RecordError::UnknownStatus(status))?;
    v.partitions = r.partitions(flexible)?;
    v.last_update_ms = r.i64()?;
    v.start_ms = r.i64()?;
    if flexible {
        let count = r.tagged_count()?;
        for _ in 0..count {
            let (tag, data) = r.tagged_field()?;
            match tag {
                TAG_PREVIOUS_PRODUCER_ID => v.previous_producer_id = i64_field(tag, data)?,
                TAG_NEXT_PRODUCER_ID => v.next_producer_id = i64_field(tag, data)?,
                TAG_CLIENT_TRANSACTION_VERSION => {
                    v.client_transaction_version = i16_field(tag, data)?
                }
                TAG_NEXT_PRODUCER_EPOCH => v.next_producer_epoch = i16_field(tag, data)?,
                _ => {}
            }
        }
    }
    r.finish()?;
    if v.status == TxnStatus::Empty {
        // Kafka's reader ignores the partitions of an Empty transaction.
        v.partitions.clear();
    }
    Ok(v)
}

/// Decodes one record; `value` is `None` for a tombstone.
pub fn decode_record(key: &[u8], value: Option<&[u8]>) -> Result<TxnRecord, RecordError> {
    Ok(TxnRecord {
        transactional_id: decode_key(key)?,
        value: value.map(decode_value).transpose()?,
    })
}

fn check_size(bytes: &[u8]) -> Result<(), RecordError> {
    if bytes.len() > RECORD_BYTES_MAX {
        return Err(RecordError::BadLength(
            i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        ));
    }
    Ok(())
}

fn i64_field(tag: u32, data: &[u8]) -> Result<i64, RecordError> {
    <[u8; 8]>::try_from(data)
        .map(i64::from_be_bytes)
        .map_err(|_| RecordError::BadTaggedField {
            tag,
            size: data.len(),
        })
}

fn i16_field(tag: u32, data: &[u8]) -> Result<i16, RecordError> {
    <[u8; 2]>::try_from(data)
        .map(i16::from_be_bytes)
        .map_err(|_| RecordError::BadTaggedField {
            tag,
            size: data.len(),
        })
}

impl From<ReaderError> for RecordError {
    fn from(e: ReaderError) -> Self {
        match e {
            ReaderError::Truncated => RecordError::Truncated,
            ReaderError::BadLength(n) => RecordError::BadLength(n),
            ReaderError::NotUtf8 => RecordError::NotUtf8,
            ReaderError::Trailing(n) => RecordError::Trailing(n),
        }
    }
}

/// The `__transaction_state` fields built from the store's primitive [`Reader`].
trait ReadExt<'a> {
    fn array_len(&mut self, flexible: bool, max: usize) -> Result<Option<usize>, RecordError>;
    fn partitions(&mut self, flexible: bool) -> Result<TxnPartitions, RecordError>;
    fn tagged_count(&mut self) -> Result<usize, RecordError>;
    fn tagged_field(&mut self) -> Result<(u32, &'a [u8]), RecordError>;
}

impl<'a> ReadExt<'a> for Reader<'a> {
    /// An array length (i32, negative = null; or compact), at most `max`.
    fn array_len(&mut self, flexible: bool, max: usize) -> Result<Option<usize>, RecordError> {
        if flexible {
            return Ok(self.compact_len(max)?);
        }
        let len = self.i32()?;
        let Ok(len) = usize::try_from(len) else {
            return Ok(None);
        };
        if len > max {
            return Err(RecordError::BadLength(len as i64));
        }
        Ok(Some(len))
    }

    /// TransactionPartitions; null reads as none.
    fn partitions(&mut self, flexible: bool) -> Result<TxnPartitions, RecordError> {
        let mut out = TxnPartitions::new();
        let Some(topics) = self.array_len(flexible, VALUE_TOPICS_MAX)? else {
            return Ok(out);
        };
        let mut total = 0usize;
        for _ in 0..topics {
            let topic = if flexible {
                self.compact_nullable_string(TOPIC_NAME_BYTES_MAX)?
            } else {
                self.nullable_string(TOPIC_NAME_BYTES_MAX)?
            }
            .ok_or(RecordError::Null("Topic"))?;
            let n = self
                .array_len(flexible, VALUE_PARTITIONS_MAX)?
                .ok_or(RecordError::Null("PartitionIds"))?;
            total = total.saturating_add(n);
            if total > VALUE_PARTITIONS_MAX {
                return Err(RecordError::BadLength(total as i64));
            }
            // The ids must all be there before any is kept.
            if n.saturating_mul(4) > self.remaining() {
                return Err(RecordError::Truncated);
            }
            let ids = out.entry(topic).or_default();
            for _ in 0..n {
                ids.insert(self.i32()?);
            }
            if flexible {
                let count = self.tagged_count()?;
                for _ in 0..count {
                    self.tagged_field()?;
                }
            }
        }
        Ok(out)
    }

    /// The count of a tagged-field section.
    fn tagged_count(&mut self) -> Result<usize, RecordError> {
        let count = self.uvarint()?;
        usize::try_from(count)
            .ok()
            .filter(|c| *c <= TAGGED_FIELDS_MAX)
            .ok_or(RecordError::BadLength(
                i64::try_from(count).unwrap_or(i64::MAX),
            ))
    }

    /// One tagged field: its tag and its bytes.
    fn tagged_field(&mut self) -> Result<(u32, &'a [u8]), RecordError> {
        // Kafka's varints (`Reader::new`) are at most u32::MAX.
        let tag = u32::try_from(self.uvarint()?).map_err(|_| RecordError::BadLength(-1))?;
        let size = self.uvarint()?;
        let size = usize::try_from(size).map_err(|_| RecordError::BadLength(-1))?;
        Ok((tag, self.take(size)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(entries: &[(&str, &[i32])]) -> TxnPartitions {
        entries
            .iter()
            .map(|(t, ps)| (t.to_string(), ps.iter().copied().collect()))
            .collect()
    }

    fn ongoing() -> TransactionLogValue {
        TransactionLogValue {
            producer_id: 1000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            status: TxnStatus::Ongoing,
            partitions: parts(&[("a", &[0, 2]), ("b", &[1])]),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            client_transaction_version: 2,
            ..TransactionLogValue::default()
        }
    }

    #[test]
    fn key_layout_is_kafkas() {
        let k = encode_key("txn-1");
        assert_eq!(&k[..], b"\x00\x00\x00\x05txn-1");
        assert_eq!(decode_key(&k), Ok("txn-1".to_string()));
        assert_eq!(decode_key(b"\x00\x00\x00\x00"), Ok(String::new()));
    }

    #[test]
    fn key_errors() {
        assert_eq!(decode_key(&[0]), Err(RecordError::Truncated));
        assert_eq!(decode_key(&[0, 0, 0, 5, b'a']), Err(RecordError::Truncated));
        assert_eq!(
            decode_key(&[0, 1, 0, 1, b'a']),
            Err(RecordError::UnsupportedVersion {
                what: "TransactionLogKey",
                version: 1
            })
        );
        assert_eq!(
            decode_key(&[0, 0, 0xff, 0xff]),
            Err(RecordError::Null("TransactionalId"))
        );
        assert_eq!(decode_key(&[0, 0, 0, 1, 0xff]), Err(RecordError::NotUtf8));
        assert_eq!(
            decode_key(&[0, 0, 0, 1, b'a', b'b']),
            Err(RecordError::Trailing(1))
        );
    }

    #[test]
    fn value_round_trips_in_both_versions() {
        let mut v = ongoing();
        v.previous_producer_id = 999;
        v.next_producer_id = 1001;
        v.next_producer_epoch = 0;
        let bytes = encode_value(&v);
        assert_eq!(&bytes[..2], &[0, 1]);
        assert_eq!(decode_value(&bytes), Ok(v.clone()));
        // v0 drops the tagged fields.
        let bytes = encode_value_version(&v, 0).expect("v0");
        assert_eq!(&bytes[..2], &[0, 0]);
        let back = decode_value(&bytes).expect("decode v0");
        assert_eq!(
            back,
            TransactionLogValue {
                previous_producer_id: -1,
                next_producer_id: -1,
                next_producer_epoch: -1,
                client_transaction_version: 0,
                ..v
            }
        );
        assert!(matches!(
            encode_value_version(&back, 2),
            Err(RecordError::UnsupportedVersion { version: 2, .. })
        ));
    }

    /// A v1 value built by hand from TransactionLogValue.json.
    #[test]
    fn v1_layout_is_kafkas() {
        let mut b = vec![0, 1]; // version 1
        b.extend_from_slice(&1000i64.to_be_bytes()); // ProducerId
        b.extend_from_slice(&3i16.to_be_bytes()); // ProducerEpoch
        b.extend_from_slice(&60_000i32.to_be_bytes()); // TransactionTimeoutMs
        b.push(1); // TransactionStatus: Ongoing
        b.push(3); // TransactionPartitions: 2 entries
        b.extend_from_slice(&[2, b'a', 3, 0, 0, 0, 0, 0, 0, 0, 2, 0]); // "a" [0, 2], no tags
        b.extend_from_slice(&[2, b'b', 2, 0, 0, 0, 1, 0]); // "b" [1], no tags
        b.extend_from_slice(&1_700_000_000_123i64.to_be_bytes()); // LastUpdateTimestampMs
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // StartTimestampMs
        b.extend_from_slice(&[1, 2, 2, 0, 2]); // tagged: ClientTransactionVersion = 2
        assert_eq!(decode_value(&b), Ok(ongoing()));
        assert_eq!(&encode_value(&ongoing())[..], &b[..]);

        // Every known tag, plus unknown tags 4 and 200 (two-byte varint), which are skipped.
        let head = b.len() - 5;
        let mut t = b[..head].to_vec();
        t.push(6);
        t.extend_from_slice(&[0, 8]);
        t.extend_from_slice(&999i64.to_be_bytes());
        t.extend_from_slice(&[1, 8]);
        t.extend_from_slice(&1001i64.to_be_bytes());
        t.extend_from_slice(&[2, 2, 0, 2]);
        t.extend_from_slice(&[3, 2, 0, 7]);
        t.extend_from_slice(&[4, 3, 9, 9, 9]);
        t.extend_from_slice(&[0xc8, 0x01, 0]);
        let expected = TransactionLogValue {
            previous_producer_id: 999,
            next_producer_id: 1001,
            next_producer_epoch: 7,
            ..ongoing()
        };
        assert_eq!(decode_value(&t), Ok(expected.clone()));
        // Re-encoding drops the unknown tags and keeps Kafka's tag order.
        let mut canonical = t[..head + 1].to_vec();
        canonical[head] = 4;
        canonical.extend_from_slice(&t[head + 1..head + 1 + 10 + 10 + 4 + 4]);
        assert_eq!(&encode_value(&expected)[..], &canonical[..]);

        // An unknown tagged field inside a partition entry is skipped too.
        let mut p = b.clone();
        let at = 2 + 8 + 2 + 4 + 1 + 1 + 12 - 1; // the first entry's tag count
        p.splice(at..=at, [1, 9, 1, 0xaa]);
        assert_eq!(decode_value(&p), Ok(ongoing()));
    }

    /// A v0 value built by hand, as Kafka 3.x and `transaction.version` 0 write it.
    #[test]
    fn v0_layout_is_kafkas() {
        let mut b = vec![0, 0];
        b.extend_from_slice(&7i64.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&30_000i32.to_be_bytes());
        b.push(2); // PrepareCommit
        b.extend_from_slice(&1i32.to_be_bytes()); // one topic
        b.extend_from_slice(&[0, 3, b'x', b'y', b'z']);
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 1]); // [4, 1]: Kafka's order, not sorted
        b.extend_from_slice(&20i64.to_be_bytes());
        b.extend_from_slice(&10i64.to_be_bytes());
        let v = TransactionLogValue {
            producer_id: 7,
            producer_epoch: 0,
            timeout_ms: 30_000,
            status: TxnStatus::PrepareCommit,
            partitions: parts(&[("xyz", &[1, 4])]),
            last_update_ms: 20,
            start_ms: 10,
            ..TransactionLogValue::default()
        };
        assert_eq!(decode_value(&b), Ok(v.clone()));
        // Re-encoded sorted.
        let mut sorted = b.clone();
        sorted[30..38].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 4]);
        assert_eq!(&encode_value_version(&v, 0).expect("v0")[..], &sorted[..]);
    }

    #[test]
    fn empty_writes_null_partitions_and_ignores_them_on_read() {
        let v = TransactionLogValue {
            producer_id: 5,
            producer_epoch: 1,
            timeout_ms: 100,
            last_update_ms: 9,
            ..TransactionLogValue::default()
        };
        let b = encode_value(&v);
        assert_eq!(b[2 + 8 + 2 + 4 + 1], 0, "null compact array");
        assert_eq!(decode_value(&b), Ok(v.clone()));
        let b0 = encode_value_version(&v, 0).expect("v0");
        assert_eq!(&b0[17..21], &[0xff; 4], "null array");
        assert_eq!(decode_value(&b0), Ok(v.clone()));
        // Partitions listed under Empty are dropped, as Kafka's reader does.
        let with = TransactionLogValue {
            status: TxnStatus::Ongoing,
            partitions: parts(&[("t", &[0])]),
            ..v.clone()
        };
        let mut b = encode_value(&with).to_vec();
        b[2 + 8 + 2 + 4] = 0;
        assert_eq!(decode_value(&b), Ok(v));
        // A non-Empty transaction with no partitions writes an empty array, not null.
        let none = TransactionLogValue {
            status: TxnStatus::CompleteCommit,
            ..TransactionLogValue::default()
        };
        assert_eq!(encode_value(&none)[2 + 8 + 2 + 4 + 1], 1);
    }

    #[test]
    fn tombstone_is_a_record_without_value() {
        let key = encode_key("t");
        assert_eq!(
            decode_record(&key, None),
            Ok(TxnRecord {
                transactional_id: "t".into(),
                value: None
            })
        );
        let v = ongoing();
        assert_eq!(
            decode_record(&key, Some(&encode_value(&v))),
            Ok(TxnRecord {
                transactional_id: "t".into(),
                value: Some(v)
            })
        );
        assert_eq!(
            decode_record(&key, Some(&[0, 1])),
            Err(RecordError::Truncated)
        );
    }

    #[test]
    fn hostile_values_fail_cleanly() {
        let good = encode_value(&ongoing());
        for n in 0..good.len() {
            assert!(decode_value(&good[..n]).is_err(), "prefix of {n} bytes");
        }
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(decode_value(&long), Err(RecordError::Trailing(1)));
        assert!(matches!(
            decode_value(&[0, 2]),
            Err(RecordError::UnsupportedVersion { version: 2, .. })
        ));
        let mut bad_status = good.to_vec();
        bad_status[16] = 8;
        assert_eq!(
            decode_value(&bad_status),
            Err(RecordError::UnknownStatus(8))
        );

        let head = |flexible: bool| {
            let mut b = vec![0, u8::from(flexible)];
            b.extend_from_slice(&[0; 14]);
            b.push(1); // Ongoing
            b
        };
        // Huge array counts fail before anything is allocated.
        let mut b = head(true);
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(decode_value(&b), Err(RecordError::BadLength(_))));
        let mut b = head(false);
        b.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(decode_value(&b), Err(RecordError::BadLength(_))));
        let mut b = head(true);
        b.extend_from_slice(&[2, 2, b't', 0xff, 0xff, 0x3f]); // 1M partitions, no bytes
        assert_eq!(decode_value(&b), Err(RecordError::Truncated));
        // A varint longer than 5 bytes.
        let mut b = head(true);
        b.extend_from_slice(&[0x80; 6]);
        assert!(matches!(decode_value(&b), Err(RecordError::BadLength(_))));
        // Null topic, null partition list.
        let mut b = head(true);
        b.extend_from_slice(&[2, 0]);
        assert_eq!(decode_value(&b), Err(RecordError::Null("Topic")));
        let mut b = head(false);
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode_value(&b), Err(RecordError::Null("PartitionIds")));
        // A known tag with the wrong size.
        let mut b = good[..good.len() - 5].to_vec();
        b.extend_from_slice(&[1, 0, 2, 0, 1]);
        assert_eq!(
            decode_value(&b),
            Err(RecordError::BadTaggedField { tag: 0, size: 2 })
        );
        // A tagged field claiming more bytes than there are.
        let mut b = good[..good.len() - 5].to_vec();
        b.extend_from_slice(&[1, 9, 0xff, 0xff, 0x03, 1]);
        assert_eq!(decode_value(&b), Err(RecordError::Truncated));
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// Records Apache Kafka 4.1.1 wrote (single-node KRaft via compat-tests/reference/
    /// kafka-shim.sh, metadata.version 4.1-IV1, transaction.version 2), copied out of
    /// `__transaction_state-*/00000000000000000000.log`. "fid-txn": a confluent-kafka 2.16.1
    /// (librdkafka 2.16.0) producer, transaction.timeout.ms 45000, committed one transaction to
    /// fid-t partitions 0 and 1; librdkafka's requests are transactions v1, so no
    /// ClientTransactionVersion tag. "fid-java": the Java client 4.1.1 (transactions v2: tag 2 =
    /// 2, epoch bumped at each end), timeout 30000, committed to fid-t-1 and aborted on fid-t-0.
    #[test]
    fn kafka_4_1_records_decode_and_re_encode_byte_for_byte() {
        let fid_txn = "000000076669642d74786e";
        let fid_java = "000000086669642d6a617661";
        let cases = [
            // fid-txn, offset 0: InitProducerId -> Empty, partitions null, start -1.
            (
                fid_txn,
                "0001000000000000000000000000afc80000000001a23693fe43ffffffffffffffff00",
                TransactionLogValue {
                    producer_id: 0,
                    producer_epoch: 0,
                    timeout_ms: 45_000,
                    status: TxnStatus::Empty,
                    last_update_ms: 1_796_211_998_275,
                    start_ms: -1,
                    ..TransactionLogValue::default()
                },
            ),
            // fid-txn, offset 1: Ongoing on fid-t [0, 1].
            (
                fid_txn,
                "0001000000000000000000000000afc80102066669642d74030000000000000001\
                 00000001a23693fe9f000001a23693fe9f00",
                TransactionLogValue {
                    producer_id: 0,
                    producer_epoch: 0,
                    timeout_ms: 45_000,
                    status: TxnStatus::Ongoing,
                    partitions: parts(&[("fid-t", &[0, 1])]),
                    last_update_ms: 1_796_211_998_367,
                    start_ms: 1_796_211_998_367,
                    ..TransactionLogValue::default()
                },
            ),
            // fid-txn, offset 3: CompleteCommit, an empty (not null) partition list.
            (
                fid_txn,
                "0001000000000000000000000000afc80401000001a23693ff73000001a23693fe9f00",
                TransactionLogValue {
                    producer_id: 0,
                    producer_epoch: 0,
                    timeout_ms: 45_000,
                    status: TxnStatus::CompleteCommit,
                    last_update_ms: 1_796_211_998_579,
                    start_ms: 1_796_211_998_367,
                    ..TransactionLogValue::default()
                },
            ),
            // fid-java, offset 2: PrepareCommit on fid-t [1], epoch bumped 0 -> 1, tag 2 = 2.
            (
                fid_java,
                "000100000000000000010001000075300202066669642d74020000000100000001\
                 a2369417d5000001a2369417290102020002",
                TransactionLogValue {
                    producer_id: 1,
                    producer_epoch: 1,
                    timeout_ms: 30_000,
                    status: TxnStatus::PrepareCommit,
                    partitions: parts(&[("fid-t", &[1])]),
                    last_update_ms: 1_796_212_004_821,
                    start_ms: 1_796_212_004_649,
                    client_transaction_version: 2,
                    ..TransactionLogValue::default()
                },
            ),
            // fid-java, offset 5: PrepareAbort on fid-t [0], epoch 2.
            (
                fid_java,
                "000100000000000000010002000075300302066669642d74020000000000000001\
                 a236941841000001a2369418200102020002",
                TransactionLogValue {
                    producer_id: 1,
                    producer_epoch: 2,
                    timeout_ms: 30_000,
                    status: TxnStatus::PrepareAbort,
                    partitions: parts(&[("fid-t", &[0])]),
                    last_update_ms: 1_796_212_004_929,
                    start_ms: 1_796_212_004_896,
                    client_transaction_version: 2,
                    ..TransactionLogValue::default()
                },
            ),
            // fid-java, offset 6: CompleteAbort.
            (
                fid_java,
                "000100000000000000010002000075300501000001a236941845000001a2369418200102020002",
                TransactionLogValue {
                    producer_id: 1,
                    producer_epoch: 2,
                    timeout_ms: 30_000,
                    status: TxnStatus::CompleteAbort,
                    last_update_ms: 1_796_212_004_933,
                    start_ms: 1_796_212_004_896,
                    client_transaction_version: 2,
                    ..TransactionLogValue::default()
                },
            ),
        ];
        for (key_hex, value_hex, expected) in cases {
            let key = unhex(key_hex);
            let value = unhex(value_hex);
            let id = decode_key(&key).expect("key");
            assert!(id == "fid-txn" || id == "fid-java", "{id}");
            assert_eq!(&encode_key(&id)[..], &key[..]);
            assert_eq!(decode_value(&value).as_ref(), Ok(&expected), "{value_hex}");
            assert_eq!(&encode_value(&expected)[..], &value[..], "{value_hex}");
        }
        // Expiry (same broker, transactional.id.expiration.ms 2000, the Java client's Empty id
        // left idle): Kafka wrote the key with a null value right after the Empty record; the
        // Dead status stays in memory and is never written.
        assert_eq!(
            decode_record(&unhex(fid_java), None),
            Ok(TxnRecord {
                transactional_id: "fid-java".into(),
                value: None
            })
        );
    }

    fn arb_value() -> impl Strategy<Value = TransactionLogValue> {
        let partitions = prop::collection::btree_map(
            "[a-z._-]{1,12}",
            prop::collection::btree_set(any::<i32>(), 0..5),
            0..4,
        );
        (
            (
                any::<i64>(),
                any::<i16>(),
                any::<i64>(),
                any::<i64>(),
                any::<i16>(),
            ),
            (any::<i32>(), 0..8i8, partitions),
            (any::<i64>(), any::<i64>(), any::<i16>()),
        )
            .prop_map(
                |(
                    (pid, epoch, prev, next, next_epoch),
                    (timeout, status, partitions),
                    (last, start, ctv),
                )| {
                    let status = TxnStatus::from_i8(status).unwrap_or(TxnStatus::Ongoing);
                    TransactionLogValue {
                        producer_id: pid,
                        producer_epoch: epoch,
                        previous_producer_id: prev,
                        next_producer_id: next,
                        next_producer_epoch: next_epoch,
                        timeout_ms: timeout,
                        status,
                        partitions: if status == TxnStatus::Empty {
                            TxnPartitions::new()
                        } else {
                            partitions
                        },
                        last_update_ms: last,
                        start_ms: start,
                        client_transaction_version: ctv,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_key(&bytes);
            let _ = decode_value(&bytes);
            // Past the version, so the field decoders see arbitrary bytes too.
            for version in [0u8, 1] {
                let mut b = vec![0, version];
                b.extend_from_slice(&bytes);
                let _ = decode_value(&b);
            }
        }

        #[test]
        fn values_round_trip(v in arb_value()) {
            let b = encode_value(&v);
            prop_assert_eq!(decode_value(&b), Ok(v.clone()));
            // Re-encoding what was decoded gives the same bytes.
            prop_assert_eq!(encode_value(&decode_value(&b).expect("decode")), b);
        }

        #[test]
        fn keys_round_trip(id in "\\PC{0,40}") {
            prop_assert_eq!(decode_key(&encode_key(&id)), Ok(id));
        }

        #[test]
        fn corrupted_values_fail_or_decode(v in arb_value(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut b = encode_value(&v).to_vec();
            let i = at.index(b.len());
            b[i] = byte;
            let _ = decode_value(&b);
        }
    }
}
