//! Records between the HTTP API and Kafka's record batches: a produce request's records become
//! one uncompressed v2 batch (no producer id, CreateTime), and a fetch's batches become records
//! again — whole batches decompressed and walked with the store's record codec
//! ([`millrace_store::records`]), so keys, values and every header (duplicates included) come back
//! exactly as a Kafka client wrote them. Control batches (transaction markers) are never records.

use bytes::{Buf, Bytes};
use millrace_store::batch::BatchHeader;
use millrace_store::records::{self, BatchFields};

/// A record to produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Headers in order; a key may repeat, as in Kafka.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
    /// CreateTime in ms; `None`: now.
    pub timestamp: Option<i64>,
}

/// A record read back, with its offset and timestamp.
pub type FetchedRecord = records::Record;

/// Why fetched bytes could not be read as records.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("no records to produce")]
    Empty,
    #[error("too many records in one batch: {0}")]
    TooMany(usize),
    #[error(transparent)]
    Malformed(#[from] records::RecordsError),
}

/// Records in one batch at most (Kafka's limit is the batch size; this bounds the deltas).
const RECORDS_PER_BATCH_MAX: usize = 100_000;
/// Bytes before a batch's length field ends (baseOffset i64, batchLength i32).
const LENGTH_END: usize = 12;

/// One uncompressed v2 batch holding `records` in order, timestamps defaulting to `now_ms`.
pub fn encode_batch(records: &[OutgoingRecord], now_ms: i64) -> Result<Bytes, RecordsError> {
    if records.is_empty() {
        return Err(RecordsError::Empty);
    }
    if records.len() > RECORDS_PER_BATCH_MAX {
        return Err(RecordsError::TooMany(records.len()));
    }
    let stamped: Vec<FetchedRecord> = records
        .iter()
        .enumerate()
        .map(|(i, r)| FetchedRecord {
            offset: i as i64,
            timestamp: r.timestamp.unwrap_or(now_ms),
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
        })
        .collect();
    let base_timestamp = stamped.iter().map(|r| r.timestamp).min().unwrap_or(now_ms);
    let max_timestamp = stamped.iter().map(|r| r.timestamp).max().unwrap_or(now_ms);
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta: i32::try_from(stamped.len() - 1)
            .map_err(|_| RecordsError::TooMany(stamped.len()))?,
        base_timestamp,
        max_timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
    Ok(records::encode_records(&fields, &stamped).freeze())
}

/// The data records of fetched `batches` at offsets from `from_offset` on, in order; stops at a
/// partial batch at the end (a fetch may cut the last one). Control batches are skipped.
pub fn decode_batches(
    mut batches: Bytes,
    from_offset: i64,
) -> Result<Vec<FetchedRecord>, RecordsError> {
    let mut out = Vec::new();
    while batches.len() >= LENGTH_END {
        let length = i32::from_be_bytes([batches[8], batches[9], batches[10], batches[11]]);
        let Some(total) = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(LENGTH_END))
        else {
            break;
        };
        if total > batches.len() {
            break;
        }
        let batch = batches.split_to(total);
        let header = BatchHeader::parse(&batch)
            .map_err(|e| records::RecordsError::Malformed(e.to_string()))?;
        if header.is_control() || header.next_offset() <= from_offset {
            continue;
        }
        let (_, decoded) = records::decode_records(&batch)?;
        out.extend(decoded.into_iter().filter(|r| r.offset >= from_offset));
    }
    batches.advance(batches.len());
    Ok(out)
}

/// The offset after `batches`' last whole batch (`None` when there is none): where the next
/// fetch starts even when every record in them was skipped (control batches, compacted gaps).
pub fn next_offset(batches: &Bytes) -> Option<i64> {
    let mut rest: &[u8] = batches;
    let mut next = None;
    while rest.len() >= LENGTH_END {
        let length = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let Some(total) = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(LENGTH_END))
        else {
            break;
        };
        let Some(batch) = rest.get(..total) else {
            break;
        };
        if let Ok(header) = BatchHeader::parse(batch) {
            next = Some(header.next_offset());
        }
        rest = &rest[total..];
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_decodes_to_the_records_it_was_made_of() {
        let records = vec![
            OutgoingRecord {
                key: Some(Bytes::from_static(b"k")),
                value: Some(Bytes::from_static(b"v1")),
                headers: vec![
                    (Bytes::from_static(b"h"), Some(Bytes::from_static(b"1"))),
                    (Bytes::from_static(b"h"), None),
                ],
                timestamp: Some(1_000),
            },
            OutgoingRecord {
                value: None,
                ..OutgoingRecord::default()
            },
        ];
        let batch = encode_batch(&records, 2_000).expect("encode");
        millrace_store::batch::validate(&batch).expect("a valid batch");
        let decoded = decode_batches(batch.clone(), 0).expect("decode");
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[0].key, records[0].key);
        assert_eq!(decoded[0].headers, records[0].headers);
        assert_eq!(decoded[0].timestamp, 1_000);
        assert_eq!(decoded[1].offset, 1);
        assert_eq!(decoded[1].timestamp, 2_000);
        assert_eq!(decoded[1].value, None);
        assert_eq!(next_offset(&batch), Some(2));
        assert_eq!(decode_batches(batch, 1).expect("decode").len(), 1);
    }

    #[test]
    fn a_cut_last_batch_is_left_for_the_next_fetch() {
        let batch = encode_batch(&[OutgoingRecord::default()], 0).expect("encode");
        let cut = batch.slice(..batch.len() - 3);
        assert!(decode_batches(cut.clone(), 0).expect("decode").is_empty());
        assert_eq!(next_offset(&cut), None);
    }
}
