//! The bytes the coordinator appends to `__consumer_offsets`: one uncompressed v2 batch with the
//! store's codec ([`encode_batch`]), the records of a KIP-848 consumer group
//! ([`encode_group_records`]) and the tombstones of a classic group ([`group_tombstones`]).
//!
//! Pure functions, no locks. The key and value layouts themselves are Kafka's, in
//! [`crate::records`]; reading batches back is replay's (`replay.rs`).

use bytes::{Bytes, BytesMut};
use millrace_store::records::{self as store_records, BatchFields, Record};

use crate::consumer_group::GroupRecord;
use crate::group::Group;
use crate::records::{self, RecordKey};

/// An encoded record: key and value (`None` = tombstone).
pub(super) type Encoded = (Bytes, Option<Bytes>);

/// Encodes `records` (key, value) as one uncompressed v2 batch with the store's codec: base offset
/// 0 (the log assigns offsets), no producer id, every record stamped `timestamp_ms`.
/// One uncompressed batch of `records`; `producer`: the producer id, epoch and base sequence of a
/// transactional batch (TxnOffsetCommit), else none.
pub(super) fn encode_batch(
    records: &[(Bytes, Option<Bytes>)],
    timestamp_ms: i64,
    producer: Option<(i64, i16, i32)>,
) -> BytesMut {
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            offset: i as i64,
            timestamp: timestamp_ms,
            key: Some(key.clone()),
            value: value.clone(),
            headers: Vec::new(),
        })
        .collect();
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: if producer.is_some() {
            millrace_store::batch::ATTR_TRANSACTIONAL
        } else {
            0
        },
        last_offset_delta: i32::try_from(records.len().saturating_sub(1)).unwrap_or(i32::MAX),
        base_timestamp: timestamp_ms,
        max_timestamp: timestamp_ms,
        producer_id: producer.map_or(-1, |p| p.0),
        producer_epoch: producer.map_or(-1, |p| p.1),
        base_sequence: producer.map_or(-1, |p| p.2),
    };
    store_records::encode_records(&fields, &recs)
}

/// Encodes consumer group records for the log.
pub(super) fn encode_group_records(records: Vec<GroupRecord>) -> Vec<Encoded> {
    records
        .into_iter()
        .filter_map(|(k, v)| {
            let value = match &v {
                None => None,
                // Only consumer group values come here; anything else is skipped rather than
                // written as a tombstone.
                Some(v) => Some(records::encode_consumer_value(v)?),
            };
            Some((records::encode_key(&k), value))
        })
        .collect()
}

/// Tombstones for a group's offsets (when `with_offsets`) and its metadata.
pub(super) fn group_tombstones(g: &Group, with_offsets: bool) -> Vec<(Bytes, Option<Bytes>)> {
    let mut out = Vec::new();
    if with_offsets {
        for (topic, partition) in g.offsets.keys() {
            out.push((
                records::encode_key(&RecordKey::Offset {
                    group: g.id().to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                None,
            ));
        }
    }
    out.push((
        records::encode_key(&RecordKey::Group {
            group: g.id().to_string(),
        }),
        None,
    ));
    out
}
