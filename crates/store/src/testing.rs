//! Test fixtures: a small hand-written v2 batch encoder (no `kafka-protocol`), public so the front
//! end can build batches for its tests too.

use bytes::BytesMut;

use crate::records::{encode_records, BatchFields, Record};

/// One test record: (key, value, timestamp); `None` is null.
pub type TestRecord<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, i64);

/// Encodes one uncompressed v2 batch with baseOffset 0, partitionLeaderEpoch -1, CreateTime.
/// `records` are (key, value, timestamp); a `None` value is a tombstone.
pub fn encode_batch(
    records: &[TestRecord<'_>],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> BytesMut {
    let base_timestamp = records.first().map(|r| r.2).unwrap_or(-1);
    let max_timestamp = records.iter().map(|r| r.2).max().unwrap_or(-1);
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v, ts))| Record {
            offset: i as i64,
            timestamp: *ts,
            key: k.map(bytes::Bytes::copy_from_slice),
            value: v.map(bytes::Bytes::copy_from_slice),
            headers: Vec::new(),
        })
        .collect();
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta: (records.len() as i32 - 1).max(0),
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    };
    encode_records(&fields, &recs)
}

/// Encodes a batch of `count` records each with a `value_bytes`-byte value (for benchmarks).
pub fn encode_filler_batch(count: usize, value_bytes: usize, timestamp: i64) -> BytesMut {
    let value = vec![b'x'; value_bytes];
    let recs: Vec<TestRecord<'_>> = (0..count)
        .map(|_| (None, Some(&value[..]), timestamp))
        .collect();
    encode_batch(&recs, -1, -1, -1)
}
