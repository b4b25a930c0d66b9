//! The `__share_group_state` record codec, byte-compatible with Kafka 4.4's share coordinator
//! (`ShareSnapshotKey/Value`, `ShareUpdateKey/Value` in kafka-share-coordinator's
//! `common/message/*.json`), and the replay that folds a key's records into a `PersistedState`.
//!
//! Layout (big-endian, Kafka's generated-message encoding):
//! - key: int16 record type (0 snapshot, 1 update), then version 0 of the non-flexible key
//!   struct {GroupId: int16 length + UTF-8, TopicId: 16 bytes, Partition: int32};
//! - value: int16 version (0), then the flexible struct. ShareSnapshot: SnapshotEpoch i32,
//!   StateEpoch i32, LeaderEpoch i32, StartOffset i64, CreateTimestamp i64, WriteTimestamp i64,
//!   StateBatches; ShareUpdate: SnapshotEpoch i32, LeaderEpoch i32, StartOffset i64 (-1 =
//!   unchanged), StateBatches. StateBatches is a compact array (unsigned varint count + 1) of
//!   {FirstOffset i64, LastOffset i64, DeliveryState i8, DeliveryCount i16, tagged fields}; the
//!   struct ends with its tagged fields, where tag 0 is DeliveryCompleteCount (int32, written
//!   only when not -1);
//! - tombstone: the snapshot key with no value (the share partition's state was deleted).
//!
//! Invariant: decoding never panics and never allocates from a count it has not checked against
//! the bytes present; a truncated, over-long or unknown record is `ShareError::CorruptRecord`.

use bytes::{BufMut, BytesMut};

use crate::error::ShareError;
use crate::limits::{GROUP_ID_BYTES_MAX, STATE_BATCH_BYTES_MIN, TAGGED_FIELDS_MAX};
use crate::state::{PersistedState, StateBatch};

/// Record type of a ShareSnapshot key (Kafka's `ShareSnapshotKey` apiKey).
pub const SNAPSHOT_RECORD_TYPE: i16 = 0;
/// Record type of a ShareUpdate key (Kafka's `ShareUpdateKey` apiKey).
pub const UPDATE_RECORD_TYPE: i16 = 1;
/// The only value version Kafka 4.4 writes and reads.
const VALUE_VERSION: i16 = 0;
/// Tag of DeliveryCompleteCount in both values' top-level tagged fields.
const DELIVERY_COMPLETE_COUNT_TAG: u32 = 0;
/// DeliveryCompleteCount's default: not written as a tagged field.
const DELIVERY_COMPLETE_COUNT_DEFAULT: i32 = -1;

/// Which share-partition a record is about (the key struct of both record types).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShareStateKey {
    pub group_id: String,
    pub topic_id: [u8; 16],
    pub partition: i32,
}

/// A full snapshot of a share-partition's state (record type 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSnapshotValue {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// -1 when unknown (then not written).
    pub delivery_complete_count: i32,
    pub create_timestamp_ms: i64,
    pub write_timestamp_ms: i64,
    pub state_batches: Vec<StateBatch>,
}

/// An incremental update on top of the last snapshot (record type 1): only the changed ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUpdateValue {
    pub snapshot_epoch: i32,
    pub leader_epoch: i32,
    /// -1 when the start offset did not change.
    pub start_offset: i64,
    /// -1 when unknown (then not written).
    pub delivery_complete_count: i32,
    pub state_batches: Vec<StateBatch>,
}

/// One decoded `__share_group_state` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareStateRecord {
    Snapshot(ShareStateKey, ShareSnapshotValue),
    Update(ShareStateKey, ShareUpdateValue),
    /// The snapshot key with no value: the share partition's state was deleted.
    Tombstone(ShareStateKey),
}

impl ShareSnapshotValue {
    /// The snapshot that records `state` as a whole.
    pub fn from_state(
        state: &PersistedState,
        snapshot_epoch: i32,
        create_timestamp_ms: i64,
        write_timestamp_ms: i64,
    ) -> ShareSnapshotValue {
        ShareSnapshotValue {
            snapshot_epoch,
            state_epoch: state.state_epoch,
            leader_epoch: state.leader_epoch,
            start_offset: state.start_offset,
            delivery_complete_count: state.delivery_complete_count,
            create_timestamp_ms,
            write_timestamp_ms,
            state_batches: state.batches.clone(),
        }
    }

    /// The state this snapshot records.
    pub fn to_state(&self) -> PersistedState {
        PersistedState {
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: self.start_offset,
            delivery_complete_count: self.delivery_complete_count,
            batches: self.state_batches.clone(),
        }
    }
}

/// Encodes a record key: the int16 record type, then the key struct.
pub fn encode_key(
    record_type: i16,
    key: &ShareStateKey,
    out: &mut BytesMut,
) -> Result<(), ShareError> {
    let group = key.group_id.as_bytes();
    let len = i16::try_from(group.len())
        .ok()
        .filter(|_| group.len() <= GROUP_ID_BYTES_MAX)
        .ok_or_else(|| {
            ShareError::CorruptRecord(format!("group id of {} bytes is too long", group.len()))
        })?;
    out.reserve(2 + 2 + group.len() + 16 + 4);
    out.put_i16(record_type);
    out.put_i16(len);
    out.put_slice(group);
    out.put_slice(&key.topic_id);
    out.put_i32(key.partition);
    Ok(())
}

/// Encodes a ShareSnapshot value (version-prefixed).
pub fn encode_snapshot_value(value: &ShareSnapshotValue, out: &mut BytesMut) {
    out.put_i16(VALUE_VERSION);
    out.put_i32(value.snapshot_epoch);
    out.put_i32(value.state_epoch);
    out.put_i32(value.leader_epoch);
    out.put_i64(value.start_offset);
    out.put_i64(value.create_timestamp_ms);
    out.put_i64(value.write_timestamp_ms);
    put_state_batches(&value.state_batches, out);
    put_delivery_complete_count(value.delivery_complete_count, out);
}

/// Encodes a ShareUpdate value (version-prefixed).
pub fn encode_update_value(value: &ShareUpdateValue, out: &mut BytesMut) {
    out.put_i16(VALUE_VERSION);
    out.put_i32(value.snapshot_epoch);
    out.put_i32(value.leader_epoch);
    out.put_i64(value.start_offset);
    put_state_batches(&value.state_batches, out);
    put_delivery_complete_count(value.delivery_complete_count, out);
}

/// Encodes a whole record: key bytes and value bytes (`None` for a tombstone).
pub fn encode_record(
    record: &ShareStateRecord,
) -> Result<(BytesMut, Option<BytesMut>), ShareError> {
    let mut key = BytesMut::new();
    let mut value = BytesMut::new();
    match record {
        ShareStateRecord::Snapshot(k, v) => {
            encode_key(SNAPSHOT_RECORD_TYPE, k, &mut key)?;
            encode_snapshot_value(v, &mut value);
        }
        ShareStateRecord::Update(k, v) => {
            encode_key(UPDATE_RECORD_TYPE, k, &mut key)?;
            encode_update_value(v, &mut value);
        }
        ShareStateRecord::Tombstone(k) => {
            encode_key(SNAPSHOT_RECORD_TYPE, k, &mut key)?;
            return Ok((key, None));
        }
    }
    Ok((key, Some(value)))
}

/// Decodes a record key into its record type and key struct.
pub fn decode_key(bytes: &[u8]) -> Result<(i16, ShareStateKey), ShareError> {
    let mut r = Reader::new(bytes);
    let record_type = r.i16()?;
    if record_type != SNAPSHOT_RECORD_TYPE && record_type != UPDATE_RECORD_TYPE {
        return Err(corrupt(format!("unknown record type {record_type}")));
    }
    let len = r.i16()?;
    let len =
        usize::try_from(len).map_err(|_| corrupt(format!("negative group id length {len}")))?;
    let group_id = String::from_utf8(r.bytes(len)?.to_vec())
        .map_err(|_| corrupt("group id is not UTF-8".into()))?;
    let mut topic_id = [0u8; 16];
    topic_id.copy_from_slice(r.bytes(16)?);
    let partition = r.i32()?;
    r.finish("key")?;
    Ok((
        record_type,
        ShareStateKey {
            group_id,
            topic_id,
            partition,
        },
    ))
}

/// Decodes a whole record from its key and value bytes (`None` value: a tombstone, valid only
/// with a snapshot key).
pub fn decode_record(key: &[u8], value: Option<&[u8]>) -> Result<ShareStateRecord, ShareError> {
    let (record_type, key) = decode_key(key)?;
    let Some(value) = value else {
        if record_type == SNAPSHOT_RECORD_TYPE {
            return Ok(ShareStateRecord::Tombstone(key));
        }
        return Err(corrupt("an update key without a value".into()));
    };
    let mut r = Reader::new(value);
    let version = r.i16()?;
    if version != VALUE_VERSION {
        return Err(corrupt(format!("unknown value version {version}")));
    }
    let record = if record_type == SNAPSHOT_RECORD_TYPE {
        let snapshot_epoch = r.i32()?;
        let state_epoch = r.i32()?;
        let leader_epoch = r.i32()?;
        let start_offset = r.i64()?;
        let create_timestamp_ms = r.i64()?;
        let write_timestamp_ms = r.i64()?;
        let state_batches = r.state_batches()?;
        let delivery_complete_count = r.top_level_tags()?;
        ShareStateRecord::Snapshot(
            key,
            ShareSnapshotValue {
                snapshot_epoch,
                state_epoch,
                leader_epoch,
                start_offset,
                delivery_complete_count,
                create_timestamp_ms,
                write_timestamp_ms,
                state_batches,
            },
        )
    } else {
        let snapshot_epoch = r.i32()?;
        let leader_epoch = r.i32()?;
        let start_offset = r.i64()?;
        let state_batches = r.state_batches()?;
        let delivery_complete_count = r.top_level_tags()?;
        ShareStateRecord::Update(
            key,
            ShareUpdateValue {
                snapshot_epoch,
                leader_epoch,
                start_offset,
                delivery_complete_count,
                state_batches,
            },
        )
    };
    r.finish("value")?;
    Ok(record)
}

/// Folds one key's records, in log order, into its state (the share coordinator's replay): a
/// snapshot replaces the state, an update is combined into it ([`PersistedState::apply_update`]),
/// a tombstone deletes it. `None`: no state (never written, or deleted). An update with no
/// snapshot before it is corrupt: Kafka always writes a snapshot first.
pub fn replay<'a>(
    records: impl IntoIterator<Item = &'a ShareStateRecord>,
) -> Result<Option<PersistedState>, ShareError> {
    let mut state: Option<PersistedState> = None;
    for record in records {
        match record {
            ShareStateRecord::Snapshot(_, v) => state = Some(v.to_state()),
            ShareStateRecord::Tombstone(_) => state = None,
            ShareStateRecord::Update(_, v) => {
                let Some(s) = state.as_mut() else {
                    return Err(corrupt("an update with no snapshot before it".into()));
                };
                s.apply_update(
                    v.leader_epoch,
                    v.start_offset,
                    v.delivery_complete_count,
                    &v.state_batches,
                );
            }
        }
    }
    Ok(state)
}

fn corrupt(msg: String) -> ShareError {
    ShareError::CorruptRecord(msg)
}

fn put_unsigned_varint(mut v: u32, out: &mut BytesMut) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn put_state_batches(batches: &[StateBatch], out: &mut BytesMut) {
    // A compact array's length is count + 1; a Vec longer than u32::MAX - 1 cannot be built from
    // a share partition's bounded in-flight state, so saturate rather than wrap.
    put_unsigned_varint(
        u32::try_from(batches.len()).map_or(u32::MAX, |n| n.saturating_add(1)),
        out,
    );
    out.reserve(batches.len() * STATE_BATCH_BYTES_MIN);
    for b in batches {
        out.put_i64(b.first);
        out.put_i64(b.last);
        out.put_u8(b.state);
        out.put_i16(b.delivery_count);
        out.put_u8(0); // no tagged fields
    }
}

fn put_delivery_complete_count(count: i32, out: &mut BytesMut) {
    if count == DELIVERY_COMPLETE_COUNT_DEFAULT {
        out.put_u8(0);
        return;
    }
    out.put_u8(1);
    put_unsigned_varint(DELIVERY_COMPLETE_COUNT_TAG, out);
    put_unsigned_varint(4, out);
    out.put_i32(count);
}

/// A bounds-checked cursor over a record's bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], ShareError> {
        if self.buf.len() < n {
            return Err(corrupt(format!(
                "truncated: {n} bytes wanted, {} left",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ShareError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, ShareError> {
        Ok(self.array::<1>()?[0])
    }

    fn i16(&mut self) -> Result<i16, ShareError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, ShareError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, ShareError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn unsigned_varint(&mut self) -> Result<u32, ShareError> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.u8()?;
            v |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 28 && b > 0x0f {
                    return Err(corrupt("varint overflows 32 bits".into()));
                }
                return Ok(v);
            }
        }
        Err(corrupt("varint longer than 5 bytes".into()))
    }

    fn state_batches(&mut self) -> Result<Vec<StateBatch>, ShareError> {
        let n = self.unsigned_varint()?;
        let Some(count) = n.checked_sub(1) else {
            return Err(corrupt("null StateBatches".into()));
        };
        let count = usize::try_from(count).map_err(|_| corrupt("StateBatches count".into()))?;
        if count > self.buf.len() / STATE_BATCH_BYTES_MIN {
            return Err(corrupt(format!(
                "{count} state batches in {} bytes",
                self.buf.len()
            )));
        }
        let mut batches = Vec::with_capacity(count);
        for _ in 0..count {
            let first = self.i64()?;
            let last = self.i64()?;
            let state = self.u8()?;
            let delivery_count = self.i16()?;
            self.skip_tags()?;
            batches.push(StateBatch {
                first,
                last,
                state,
                delivery_count,
            });
        }
        Ok(batches)
    }

    /// Reads a struct's tagged fields, skipping unknown ones (Kafka keeps them as raw fields).
    fn skip_tags(&mut self) -> Result<(), ShareError> {
        let n = self.tag_count()?;
        for _ in 0..n {
            let _tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()?;
            self.bytes(usize::try_from(size).map_err(|_| corrupt("tag size".into()))?)?;
        }
        Ok(())
    }

    /// Reads the value's top-level tagged fields: DeliveryCompleteCount (tag 0) or its default.
    fn top_level_tags(&mut self) -> Result<i32, ShareError> {
        let n = self.tag_count()?;
        let mut delivery_complete_count = DELIVERY_COMPLETE_COUNT_DEFAULT;
        for _ in 0..n {
            let tag = self.unsigned_varint()?;
            let size =
                usize::try_from(self.unsigned_varint()?).map_err(|_| corrupt("tag size".into()))?;
            let data = self.bytes(size)?;
            if tag == DELIVERY_COMPLETE_COUNT_TAG {
                let Ok(raw) = <[u8; 4]>::try_from(data) else {
                    return Err(corrupt(format!("DeliveryCompleteCount of {size} bytes")));
                };
                delivery_complete_count = i32::from_be_bytes(raw);
            }
        }
        Ok(delivery_complete_count)
    }

    fn tag_count(&mut self) -> Result<u32, ShareError> {
        let n = self.unsigned_varint()?;
        if n > TAGGED_FIELDS_MAX {
            return Err(corrupt(format!("{n} tagged fields")));
        }
        Ok(n)
    }

    fn finish(&self, what: &str) -> Result<(), ShareError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(corrupt(format!(
                "{} trailing bytes after the {what}",
                self.buf.len()
            )))
        }
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
