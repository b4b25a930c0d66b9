//! Transaction markers: the control batch that ends a transaction on a partition (Kafka's
//! `EndTransactionMarker`), built only by `PartitionLog::append_marker` and read back wherever the
//! producer state is rebuilt from the log.
//!
//! Layout: a v2 batch with attributes transactional | control (0x30), the producer's id and epoch,
//! baseSequence -1 and one uncompressed record whose key is i16 version 0 · i16 type (0 ABORT,
//! 1 COMMIT) and whose value is i16 version 0 · i32 coordinatorEpoch. Other control types (KRaft's
//! leader change and snapshot records) are not markers and change no transaction.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{self, BatchHeader};
use crate::records::{self, BatchFields, Record};

/// Control record type of an abort marker.
const ABORT_TYPE: i16 = 0;
/// Control record type of a commit marker.
const COMMIT_TYPE: i16 = 1;
/// Version of the control record key and of the marker value Millrace writes.
const MARKER_VERSION: i16 = 0;
/// Bytes: i16 version · i16 type.
const KEY_BYTES: usize = 4;
/// Bytes: i16 version · i32 coordinator epoch.
const VALUE_BYTES: usize = 6;

/// A transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// COMMIT (true) or ABORT (false).
    pub commit: bool,
    /// Epoch of the transaction coordinator that wrote it (fences older coordinators).
    pub coordinator_epoch: i32,
}

/// Encodes the control batch of `marker` for `producer_id`/`producer_epoch`; baseOffset and
/// partitionLeaderEpoch are patched by the append.
pub(crate) fn encode_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    timestamp: i64,
) -> BytesMut {
    let mut key = BytesMut::with_capacity(KEY_BYTES);
    key.put_i16(MARKER_VERSION);
    key.put_i16(if marker.commit {
        COMMIT_TYPE
    } else {
        ABORT_TYPE
    });
    let mut value = BytesMut::with_capacity(VALUE_BYTES);
    value.put_i16(MARKER_VERSION);
    value.put_i32(marker.coordinator_epoch);
    let record = Record {
        offset: 0,
        timestamp,
        key: Some(key.freeze()),
        value: Some(value.freeze()),
        headers: Vec::new(),
    };
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: batch::ATTR_TRANSACTIONAL | batch::ATTR_CONTROL,
        last_offset_delta: 0,
        base_timestamp: timestamp,
        max_timestamp: timestamp,
        producer_id,
        producer_epoch,
        base_sequence: -1,
    };
    records::encode_records(&fields, &[record])
}

/// The marker a stored control batch holds; `None` when `h` is no control batch, its record is
/// unreadable or it is another control type.
pub fn parse_marker(batch_bytes: &[u8], h: &BatchHeader) -> Option<Marker> {
    if !h.is_control() {
        return None;
    }
    let (_, records) = records::decode_records(batch_bytes).ok()?;
    let record = records.first()?;
    let key: &Bytes = record.key.as_ref()?;
    let kind = i16::from_be_bytes(key.get(2..KEY_BYTES)?.try_into().ok()?);
    let commit = match kind {
        ABORT_TYPE => false,
        COMMIT_TYPE => true,
        _ => return None,
    };
    // A marker whose value is missing or short still ends the transaction (coordinator epoch 0).
    let coordinator_epoch = record
        .value
        .as_ref()
        .and_then(|v| v.get(2..VALUE_BYTES))
        .and_then(|b| b.try_into().ok())
        .map_or(0, i32::from_be_bytes);
    Some(Marker {
        commit,
        coordinator_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips() {
        for commit in [true, false] {
            let m = Marker {
                commit,
                coordinator_epoch: 7,
            };
            let b = encode_marker_batch(42, 3, m, 1_000);
            let h = batch::validate_stored(&b).expect("valid batch");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (42, 3, -1)
            );
            assert_eq!(parse_marker(&b, &h), Some(m));
        }
    }

    #[test]
    fn data_batches_are_no_markers() {
        let b = crate::testing::encode_batch(&[(None, Some(&b"v"[..]), 1)], 1, 0, 0);
        let h = batch::validate_stored(&b).expect("valid batch");
        assert_eq!(parse_marker(&b, &h), None);
    }
}
