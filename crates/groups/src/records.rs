//! The `__consumer_offsets` record formats, byte for byte as Kafka writes them, so that the topic
//! could be read by Kafka's tools and Kafka's could be read by ours.
//!
//! Keys start with an i16 record type: 0 or 1 = OffsetCommitKey (group, topic, partition),
//! 2 = GroupMetadataKey (group); 3 and up are KIP-848 records, which are skipped. Values start
//! with an i16 version. Millrace writes OffsetCommitValue v3 and GroupMetadataValue v3 and reads
//! v0-v3 of both (v4 is flexible and unused by classic groups). A record with a null value is a
//! tombstone. Strings are i16-length-prefixed UTF-8 (-1 = null), bytes are i32-length-prefixed.
//! Layouts: apache/kafka `group-coordinator/src/main/resources/common/message/*.json`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::{RECORD_ARRAY_MAX, RECORD_BYTES_MAX};

/// Key record type of an offset commit (Kafka writes 1; 0 is the same layout).
pub const OFFSET_COMMIT_KEY_TYPE: i16 = 1;
/// Key record type of a group's metadata.
pub const GROUP_METADATA_KEY_TYPE: i16 = 2;
/// Value version Millrace writes for offsets (adds leaderEpoch, drops expireTimestamp).
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// Value version Millrace writes for group metadata (adds groupInstanceId).
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// What a record in `__consumer_offsets` is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. } | RecordKey::Group { group } => group,
        }
    }
}

/// OffsetCommitValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when unknown (v0-v2 values, or the client did not send one).
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only v1 values carry it; -1 otherwise.
    pub expire_timestamp_ms: i64,
}

/// One member inside GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's selected protocol (opaque).
    pub subscription: Bytes,
    /// The member's assignment (opaque).
    pub assignment: Bytes,
}

/// GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

/// A decoded value; `None` in [`Record::value`] is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    Offset(OffsetValue),
    Group(GroupValue),
}

/// Why bytes could not be read as a coordinator record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record truncated")]
    Truncated,
    #[error("invalid length {0}")]
    BadLength(i64),
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("unsupported {what} version {version}")]
    UnsupportedVersion { what: &'static str, version: i16 },
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut b = BytesMut::new();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            b.put_i16(OFFSET_COMMIT_KEY_TYPE);
            put_string(&mut b, group);
            put_string(&mut b, topic);
            b.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            b.put_i16(GROUP_METADATA_KEY_TYPE);
            put_string(&mut b, group);
        }
    }
    b.freeze()
}

pub fn encode_offset_value(v: &OffsetValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(OFFSET_COMMIT_VALUE_VERSION);
    b.put_i64(v.offset);
    b.put_i32(v.leader_epoch);
    put_string(&mut b, &v.metadata);
    b.put_i64(v.commit_timestamp_ms);
    b.freeze()
}

pub fn encode_group_value(v: &GroupValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(GROUP_METADATA_VALUE_VERSION);
    put_string(&mut b, &v.protocol_type);
    b.put_i32(v.generation);
    put_nullable_string(&mut b, v.protocol.as_deref());
    put_nullable_string(&mut b, v.leader.as_deref());
    b.put_i64(v.current_state_timestamp_ms);
    b.put_i32(v.members.len() as i32);
    for m in &v.members {
        put_string(&mut b, &m.member_id);
        put_nullable_string(&mut b, m.group_instance_id.as_deref());
        put_string(&mut b, &m.client_id);
        put_string(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

/// Decodes a key; `Ok(None)` for record types that classic groups do not use (KIP-848, share
/// groups), which replay skips.
pub fn decode_key(bytes: &[u8]) -> Result<Option<RecordKey>, RecordError> {
    let mut r = Reader::new(bytes);
    let key = match r.i16()? {
        0 | 1 => RecordKey::Offset {
            group: r.string()?,
            topic: r.string()?,
            partition: r.i32()?,
        },
        2 => RecordKey::Group { group: r.string()? },
        _ => return Ok(None),
    };
    r.finish()?;
    Ok(Some(key))
}

/// Decodes the value that goes with `key`.
pub fn decode_value(key: &RecordKey, bytes: &[u8]) -> Result<RecordValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    let value = match key {
        RecordKey::Offset { .. } => {
            if !(0..=3).contains(&version) {
                return Err(RecordError::UnsupportedVersion {
                    what: "OffsetCommitValue",
                    version,
                });
            }
            let offset = r.i64()?;
            let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
            let metadata = r.string()?;
            let commit_timestamp_ms = r.i64()?;
            let expire_timestamp_ms = if version == 1 { r.i64()? } else { -1 };
            RecordValue::Offset(OffsetValue {
                offset,
                leader_epoch,
                metadata,
                commit_timestamp_ms,
                expire_timestamp_ms,
            })
        }
        RecordKey::Group { .. } => {
            if !(0..=3).contains(&version) {
                return Err(RecordError::UnsupportedVersion {
                    what: "GroupMetadataValue",
                    version,
                });
            }
            let protocol_type = r.string()?;
            let generation = r.i32()?;
            let protocol = r.nullable_string()?;
            let leader = r.nullable_string()?;
            let current_state_timestamp_ms = if version >= 2 { r.i64()? } else { -1 };
            let count = r.array_len()?;
            let mut members = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let member_id = r.string()?;
                let group_instance_id = if version >= 3 {
                    r.nullable_string()?
                } else {
                    None
                };
                let client_id = r.string()?;
                let client_host = r.string()?;
                let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
                let session_timeout_ms = r.i32()?;
                let subscription = r.bytes()?;
                let assignment = r.bytes()?;
                let rebalance_timeout_ms = if rebalance_timeout_ms < 0 {
                    session_timeout_ms
                } else {
                    rebalance_timeout_ms
                };
                members.push(MemberValue {
                    member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    subscription,
                    assignment,
                });
            }
            RecordValue::Group(GroupValue {
                protocol_type,
                generation,
                protocol,
                leader,
                current_state_timestamp_ms,
                members,
            })
        }
    };
    r.finish()?;
    Ok(value)
}

fn put_string(b: &mut BytesMut, s: &str) {
    // Callers bound every string to GROUP_ID_BYTES_MAX or less; a longer one is cut rather than
    // written with a wrapped length.
    let bytes = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    b.put_i16(bytes.len() as i16);
    b.put_slice(bytes);
}

fn put_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, bytes: &[u8]) {
    b.put_i32(bytes.len() as i32);
    b.put_slice(bytes);
}

/// A bounds-checked cursor; every read fails cleanly on truncated or hostile input.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if n > self.buf.len() {
            return Err(RecordError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, RecordError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, RecordError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i64(&mut self) -> Result<i64, RecordError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn nullable_string(&mut self) -> Result<Option<String>, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| RecordError::NotUtf8)
    }

    fn string(&mut self) -> Result<String, RecordError> {
        self.nullable_string()?.ok_or(RecordError::BadLength(-1))
    }

    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        if len as usize > RECORD_BYTES_MAX {
            return Err(RecordError::BadLength(len.into()));
        }
        Ok(Bytes::copy_from_slice(self.take(len as usize)?))
    }

    fn array_len(&mut self) -> Result<usize, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(0);
        }
        if len as usize > RECORD_ARRAY_MAX {
            return Err(RecordError::BadLength(len.into()));
        }
        Ok(len as usize)
    }

    fn finish(&self) -> Result<(), RecordError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(RecordError::Trailing(self.buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_key(key: RecordKey, expected_bytes: &[u8]) {
        let encoded = encode_key(&key);
        assert_eq!(&encoded[..], expected_bytes);
        assert_eq!(decode_key(&encoded), Ok(Some(key)));
    }

    #[test]
    fn offset_key_layout_is_kafkas() {
        check_key(
            RecordKey::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
            },
            &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3],
        );
        check_key(
            RecordKey::Group { group: "gg".into() },
            &[0, 2, 0, 2, b'g', b'g'],
        );
    }

    #[test]
    fn offset_value_round_trips() {
        let key = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
        };
        let v = OffsetValue {
            offset: 42,
            leader_epoch: 7,
            metadata: "meta data".into(),
            commit_timestamp_ms: 1_700_000_000_000,
            expire_timestamp_ms: -1,
        };
        let bytes = encode_offset_value(&v);
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(bytes.len(), 2 + 8 + 4 + 2 + 9 + 8);
        assert_eq!(decode_value(&key, &bytes), Ok(RecordValue::Offset(v)));
    }

    #[test]
    fn offset_value_v1_has_expire_timestamp() {
        let key = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
        };
        let mut b = BytesMut::new();
        b.put_i16(1);
        b.put_i64(5);
        put_string(&mut b, "");
        b.put_i64(10);
        b.put_i64(20);
        assert!(matches!(
            decode_value(&key, &b),
            Ok(RecordValue::Offset(OffsetValue {
                offset: 5,
                leader_epoch: -1,
                commit_timestamp_ms: 10,
                expire_timestamp_ms: 20,
                ..
            }))
        ));
    }

    #[test]
    fn group_value_round_trips() {
        let key = RecordKey::Group { group: "g".into() };
        let v = GroupValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 99,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"\x00\x01sub"),
                assignment: Bytes::from_static(b"assign"),
            }],
        };
        let bytes = encode_group_value(&v);
        assert_eq!(decode_value(&key, &bytes), Ok(RecordValue::Group(v)));
    }

    #[test]
    fn hostile_input_fails_cleanly() {
        let key = RecordKey::Group { group: "g".into() };
        assert_eq!(decode_key(&[0]), Err(RecordError::Truncated));
        assert_eq!(decode_key(&[0, 9, 1]), Ok(None));
        assert!(decode_value(&key, &[0, 3, 0x7f, 0xff]).is_err());
        let mut b = BytesMut::new();
        b.put_i16(3);
        put_string(&mut b, "consumer");
        b.put_i32(1);
        b.put_i16(-1);
        b.put_i16(-1);
        b.put_i64(0);
        b.put_i32(i32::MAX);
        assert!(matches!(
            decode_value(&key, &b),
            Err(RecordError::BadLength(_))
        ));
        assert!(matches!(
            decode_value(&key, &[0, 7]),
            Err(RecordError::UnsupportedVersion { .. })
        ));
    }
}
