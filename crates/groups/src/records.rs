//! The `__consumer_offsets` record formats, byte for byte as Kafka writes them, so that the topic
//! could be read by Kafka's tools and Kafka's could be read by ours.
//!
//! Keys start with an i16 record type: 0 or 1 = OffsetCommitKey (group, topic, partition),
//! 2 = GroupMetadataKey (group), and the KIP-848 consumer group records 3 = ConsumerGroupMetadata
//! (group epoch), 5 = ConsumerGroupMemberMetadata (subscription), 6 =
//! ConsumerGroupTargetAssignmentMetadata (assignment epoch), 7 =
//! ConsumerGroupTargetAssignmentMember, 8 = ConsumerGroupCurrentMemberAssignment, and the KIP-932
//! share group records 10 = ShareGroupMemberMetadata, 11 = ShareGroupMetadata, 12 =
//! ShareGroupTargetAssignmentMetadata, 13 = ShareGroupTargetAssignmentMember, 14 =
//! ShareGroupCurrentMemberAssignment, 15 = ShareGroupStatePartitionMetadata; other types (4,
//! partition metadata, which Kafka 4.1 no longer writes; regexes; streams groups) are skipped. Values start with an i16 version. Millrace writes OffsetCommitValue v3 and
//! GroupMetadataValue v3 and reads v0-v3 of both (v4 is flexible and unused by classic groups);
//! the consumer and share group values are v0, in the flexible encoding (compact strings and arrays,
//! tagged fields, which are skipped on read). A record with a null value is a tombstone. Keys'
//! strings are i16-length-prefixed UTF-8 (-1 = null), bytes are i32-length-prefixed.
//! Layouts: apache/kafka `group-coordinator/src/main/resources/common/message/*.json`.

use std::ops::RangeInclusive;

use bytes::{BufMut, Bytes, BytesMut};

use millrace_store::reader::{Reader, ReaderError};

use crate::limits::{RECORD_ARRAY_MAX, RECORD_BYTES_MAX};

/// Key record type of an offset commit (Kafka writes 1; 0 is the same layout).
pub const OFFSET_COMMIT_KEY_TYPE: i16 = 1;
/// Key record type of a group's metadata.
pub const GROUP_METADATA_KEY_TYPE: i16 = 2;
/// Value version Millrace writes for offsets (adds leaderEpoch, drops expireTimestamp).
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// Value version Millrace writes for group metadata (adds groupInstanceId).
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// Key record types of the KIP-848 consumer group records.
pub const CONSUMER_GROUP_METADATA_KEY_TYPE: i16 = 3;
pub const CONSUMER_MEMBER_METADATA_KEY_TYPE: i16 = 5;
pub const CONSUMER_TARGET_METADATA_KEY_TYPE: i16 = 6;
pub const CONSUMER_TARGET_MEMBER_KEY_TYPE: i16 = 7;
pub const CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE: i16 = 8;

/// Key record types of the KIP-932 share group records.
pub const SHARE_MEMBER_METADATA_KEY_TYPE: i16 = 10;
pub const SHARE_GROUP_METADATA_KEY_TYPE: i16 = 11;
pub const SHARE_TARGET_METADATA_KEY_TYPE: i16 = 12;
pub const SHARE_TARGET_MEMBER_KEY_TYPE: i16 = 13;
pub const SHARE_CURRENT_ASSIGNMENT_KEY_TYPE: i16 = 14;
pub const SHARE_STATE_PARTITION_METADATA_KEY_TYPE: i16 = 15;

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
    /// ConsumerGroupMetadataKey: the consumer group's epoch.
    ConsumerGroup {
        group: String,
    },
    /// ConsumerGroupMemberMetadataKey: a member's subscription.
    ConsumerMember {
        group: String,
        member: String,
    },
    /// ConsumerGroupTargetAssignmentMetadataKey: the assignment epoch.
    ConsumerTargetEpoch {
        group: String,
    },
    /// ConsumerGroupTargetAssignmentMemberKey: a member's target assignment.
    ConsumerTarget {
        group: String,
        member: String,
    },
    /// ConsumerGroupCurrentMemberAssignmentKey: a member's epoch and current assignment.
    ConsumerCurrent {
        group: String,
        member: String,
    },
    /// ShareGroupMetadataKey: the share group's epoch.
    ShareGroup {
        group: String,
    },
    /// ShareGroupMemberMetadataKey: a share group member's subscription.
    ShareMember {
        group: String,
        member: String,
    },
    /// ShareGroupTargetAssignmentMetadataKey: the share group's assignment epoch.
    ShareTargetEpoch {
        group: String,
    },
    /// ShareGroupTargetAssignmentMemberKey: a share group member's target assignment.
    ShareTarget {
        group: String,
        member: String,
    },
    /// ShareGroupCurrentMemberAssignmentKey: a share group member's epoch and assignment.
    ShareCurrent {
        group: String,
        member: String,
    },
    /// ShareGroupStatePartitionMetadataKey: which share partitions of the group have state.
    ShareStatePartitions {
        group: String,
    },
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. }
            | RecordKey::Group { group }
            | RecordKey::ConsumerGroup { group }
            | RecordKey::ConsumerMember { group, .. }
            | RecordKey::ConsumerTargetEpoch { group }
            | RecordKey::ConsumerTarget { group, .. }
            | RecordKey::ConsumerCurrent { group, .. }
            | RecordKey::ShareGroup { group }
            | RecordKey::ShareMember { group, .. }
            | RecordKey::ShareTargetEpoch { group }
            | RecordKey::ShareTarget { group, .. }
            | RecordKey::ShareCurrent { group, .. }
            | RecordKey::ShareStatePartitions { group } => group,
        }
    }
}

/// Partitions by topic id, as the consumer group records carry them.
pub type TopicPartitions = Vec<(uuid::Uuid, Vec<i32>)>;

/// ConsumerGroupMemberMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerMemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// ConsumerGroupCurrentMemberAssignmentValue. `state`: 0 stable, 1 unrevoked partitions,
/// 2 unreleased partitions (Kafka's `MemberState`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerCurrentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: i8,
    pub assigned: TopicPartitions,
    pub pending_revocation: TopicPartitions,
}

/// ShareGroupMemberMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareMemberValue {
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
}

/// ShareGroupCurrentMemberAssignmentValue. `state` is always 0 (stable): share group members
/// have no revocation phase.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareCurrentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: i8,
    pub assigned: TopicPartitions,
}

/// One topic of ShareGroupStatePartitionMetadataValue: its id, name and partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartitionsInfo {
    pub topic_id: uuid::Uuid,
    pub topic_name: String,
    pub partitions: Vec<i32>,
}

/// ShareGroupStatePartitionMetadataValue: the share partitions whose state is being
/// initialized, is initialized, and the topics whose state is being deleted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareStatePartitionsValue {
    pub initializing: Vec<SharePartitionsInfo>,
    pub initialized: Vec<SharePartitionsInfo>,
    /// (topic id, topic name).
    pub deleting: Vec<(uuid::Uuid, String)>,
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

/// A decoded value; a record whose value is `None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    Offset(OffsetValue),
    Group(GroupValue),
    /// ConsumerGroupMetadataValue: the group epoch and the hash of the subscribed topics'
    /// metadata when it was last computed (tagged field 0, KIP-1101; 0 = none). Millrace's hash
    /// is its own (FNV-1a); a Kafka-written one simply does not match once, which costs one
    /// epoch bump.
    ConsumerGroup {
        epoch: i32,
        metadata_hash: i64,
    },
    ConsumerMember(ConsumerMemberValue),
    /// ConsumerGroupTargetAssignmentMetadataValue: the assignment epoch.
    ConsumerTargetEpoch {
        assignment_epoch: i32,
    },
    /// ConsumerGroupTargetAssignmentMemberValue.
    ConsumerTarget(TopicPartitions),
    ConsumerCurrent(ConsumerCurrentValue),
    /// ShareGroupMetadataValue: the group epoch and the hash of its subscribed topics' metadata
    /// (a plain field here, unlike the consumer group's tagged one; Millrace's own FNV-1a hash).
    ShareGroup {
        epoch: i32,
        metadata_hash: i64,
    },
    ShareMember(ShareMemberValue),
    /// ShareGroupTargetAssignmentMetadataValue: the assignment epoch and (tagged field 0,
    /// KIP-1263) when the assignment was computed; 0 = not written.
    ShareTargetEpoch {
        assignment_epoch: i32,
        assignment_timestamp_ms: i64,
    },
    /// ShareGroupTargetAssignmentMemberValue.
    ShareTarget(TopicPartitions),
    ShareCurrent(ShareCurrentValue),
    ShareStatePartitions(ShareStatePartitionsValue),
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
        RecordKey::ConsumerGroup { group } => {
            b.put_i16(CONSUMER_GROUP_METADATA_KEY_TYPE);
            put_string(&mut b, group);
        }
        RecordKey::ConsumerTargetEpoch { group } => {
            b.put_i16(CONSUMER_TARGET_METADATA_KEY_TYPE);
            put_string(&mut b, group);
        }
        RecordKey::ShareGroup { group } => {
            b.put_i16(SHARE_GROUP_METADATA_KEY_TYPE);
            put_string(&mut b, group);
        }
        RecordKey::ShareTargetEpoch { group } => {
            b.put_i16(SHARE_TARGET_METADATA_KEY_TYPE);
            put_string(&mut b, group);
        }
        RecordKey::ShareStatePartitions { group } => {
            b.put_i16(SHARE_STATE_PARTITION_METADATA_KEY_TYPE);
            put_string(&mut b, group);
        }
        RecordKey::ConsumerMember { group, member }
        | RecordKey::ConsumerTarget { group, member }
        | RecordKey::ConsumerCurrent { group, member }
        | RecordKey::ShareMember { group, member }
        | RecordKey::ShareTarget { group, member }
        | RecordKey::ShareCurrent { group, member } => {
            b.put_i16(match key {
                RecordKey::ConsumerMember { .. } => CONSUMER_MEMBER_METADATA_KEY_TYPE,
                RecordKey::ConsumerTarget { .. } => CONSUMER_TARGET_MEMBER_KEY_TYPE,
                RecordKey::ShareMember { .. } => SHARE_MEMBER_METADATA_KEY_TYPE,
                RecordKey::ShareTarget { .. } => SHARE_TARGET_MEMBER_KEY_TYPE,
                RecordKey::ShareCurrent { .. } => SHARE_CURRENT_ASSIGNMENT_KEY_TYPE,
                _ => CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE,
            });
            put_string(&mut b, group);
            put_string(&mut b, member);
        }
    }
    b.freeze()
}

/// Value version of every consumer and share group record Millrace writes (flexible).
const CONSUMER_VALUE_VERSION: i16 = 0;

/// Encodes a KIP-848 consumer group or KIP-932 share group value (the flexible v0 layouts);
/// `None` for the classic values, which have their own encoders.
pub fn encode_consumer_value(v: &RecordValue) -> Option<Bytes> {
    let mut b = BytesMut::new();
    b.put_i16(CONSUMER_VALUE_VERSION);
    match v {
        RecordValue::Offset(_) | RecordValue::Group(_) => return None,
        RecordValue::ConsumerGroup {
            epoch,
            metadata_hash,
        } => {
            b.put_i32(*epoch);
            if *metadata_hash != 0 {
                // One tagged field: tag 0, 8 bytes.
                put_uvarint(&mut b, 1);
                put_uvarint(&mut b, 0);
                put_uvarint(&mut b, 8);
                b.put_i64(*metadata_hash);
                return Some(b.freeze());
            }
        }
        RecordValue::ConsumerTargetEpoch { assignment_epoch } => b.put_i32(*assignment_epoch),
        RecordValue::ConsumerMember(m) => {
            put_compact_nullable_string(&mut b, m.instance_id.as_deref());
            put_compact_nullable_string(&mut b, m.rack_id.as_deref());
            put_compact_nullable_string(&mut b, Some(&m.client_id));
            put_compact_nullable_string(&mut b, Some(&m.client_host));
            put_uvarint(&mut b, m.subscribed_topic_names.len() as u64 + 1);
            for name in &m.subscribed_topic_names {
                put_compact_nullable_string(&mut b, Some(name));
            }
            put_compact_nullable_string(&mut b, m.subscribed_topic_regex.as_deref());
            b.put_i32(m.rebalance_timeout_ms);
            put_compact_nullable_string(&mut b, m.server_assignor.as_deref());
        }
        RecordValue::ConsumerTarget(tps) => put_topic_partitions(&mut b, tps),
        RecordValue::ConsumerCurrent(c) => {
            b.put_i32(c.member_epoch);
            b.put_i32(c.previous_member_epoch);
            b.put_i8(c.state);
            put_topic_partitions(&mut b, &c.assigned);
            put_topic_partitions(&mut b, &c.pending_revocation);
        }
        RecordValue::ShareGroup {
            epoch,
            metadata_hash,
        } => {
            b.put_i32(*epoch);
            b.put_i64(*metadata_hash);
        }
        RecordValue::ShareMember(m) => {
            put_compact_nullable_string(&mut b, m.rack_id.as_deref());
            put_compact_nullable_string(&mut b, Some(&m.client_id));
            put_compact_nullable_string(&mut b, Some(&m.client_host));
            put_uvarint(&mut b, m.subscribed_topic_names.len() as u64 + 1);
            for name in &m.subscribed_topic_names {
                put_compact_nullable_string(&mut b, Some(name));
            }
        }
        RecordValue::ShareTargetEpoch {
            assignment_epoch,
            assignment_timestamp_ms,
        } => {
            b.put_i32(*assignment_epoch);
            if *assignment_timestamp_ms != 0 {
                // One tagged field: tag 0, 8 bytes.
                put_uvarint(&mut b, 1);
                put_uvarint(&mut b, 0);
                put_uvarint(&mut b, 8);
                b.put_i64(*assignment_timestamp_ms);
                return Some(b.freeze());
            }
        }
        RecordValue::ShareTarget(tps) => put_topic_partitions(&mut b, tps),
        RecordValue::ShareCurrent(c) => {
            b.put_i32(c.member_epoch);
            b.put_i32(c.previous_member_epoch);
            b.put_i8(c.state);
            put_topic_partitions(&mut b, &c.assigned);
        }
        RecordValue::ShareStatePartitions(v) => {
            for infos in [&v.initializing, &v.initialized] {
                put_uvarint(&mut b, infos.len() as u64 + 1);
                for info in infos {
                    b.put_slice(info.topic_id.as_bytes());
                    put_compact_nullable_string(&mut b, Some(&info.topic_name));
                    put_uvarint(&mut b, info.partitions.len() as u64 + 1);
                    for p in &info.partitions {
                        b.put_i32(*p);
                    }
                    put_uvarint(&mut b, 0);
                }
            }
            put_uvarint(&mut b, v.deleting.len() as u64 + 1);
            for (id, name) in &v.deleting {
                b.put_slice(id.as_bytes());
                put_compact_nullable_string(&mut b, Some(name));
                put_uvarint(&mut b, 0);
            }
        }
    }
    // No tagged fields.
    put_uvarint(&mut b, 0);
    Some(b.freeze())
}

fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_compact_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        None => put_uvarint(b, 0),
        Some(s) => {
            put_uvarint(b, s.len() as u64 + 1);
            b.put_slice(s.as_bytes());
        }
    }
}

fn put_topic_partitions(b: &mut BytesMut, tps: &TopicPartitions) {
    put_uvarint(b, tps.len() as u64 + 1);
    for (topic, partitions) in tps {
        b.put_slice(topic.as_bytes());
        put_uvarint(b, partitions.len() as u64 + 1);
        for p in partitions {
            b.put_i32(*p);
        }
        put_uvarint(b, 0);
    }
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
    let mut r = Reader::with_long_varints(bytes);
    let key = match r.i16()? {
        0 | 1 => RecordKey::Offset {
            group: r.string()?,
            topic: r.string()?,
            partition: r.i32()?,
        },
        2 => RecordKey::Group { group: r.string()? },
        CONSUMER_GROUP_METADATA_KEY_TYPE => RecordKey::ConsumerGroup { group: r.string()? },
        CONSUMER_TARGET_METADATA_KEY_TYPE => RecordKey::ConsumerTargetEpoch { group: r.string()? },
        CONSUMER_MEMBER_METADATA_KEY_TYPE => RecordKey::ConsumerMember {
            group: r.string()?,
            member: r.string()?,
        },
        CONSUMER_TARGET_MEMBER_KEY_TYPE => RecordKey::ConsumerTarget {
            group: r.string()?,
            member: r.string()?,
        },
        CONSUMER_CURRENT_ASSIGNMENT_KEY_TYPE => RecordKey::ConsumerCurrent {
            group: r.string()?,
            member: r.string()?,
        },
        SHARE_GROUP_METADATA_KEY_TYPE => RecordKey::ShareGroup { group: r.string()? },
        SHARE_TARGET_METADATA_KEY_TYPE => RecordKey::ShareTargetEpoch { group: r.string()? },
        SHARE_STATE_PARTITION_METADATA_KEY_TYPE => {
            RecordKey::ShareStatePartitions { group: r.string()? }
        }
        SHARE_MEMBER_METADATA_KEY_TYPE => RecordKey::ShareMember {
            group: r.string()?,
            member: r.string()?,
        },
        SHARE_TARGET_MEMBER_KEY_TYPE => RecordKey::ShareTarget {
            group: r.string()?,
            member: r.string()?,
        },
        SHARE_CURRENT_ASSIGNMENT_KEY_TYPE => RecordKey::ShareCurrent {
            group: r.string()?,
            member: r.string()?,
        },
        _ => return Ok(None),
    };
    r.finish()?;
    Ok(Some(key))
}

/// Decodes the value that goes with `key`.
pub fn decode_value(key: &RecordKey, bytes: &[u8]) -> Result<RecordValue, RecordError> {
    let mut r = Reader::with_long_varints(bytes);
    let version = r.i16()?;
    let versions = |what: &'static str, read: RangeInclusive<i16>| -> Result<(), RecordError> {
        if read.contains(&version) {
            Ok(())
        } else {
            Err(RecordError::UnsupportedVersion { what, version })
        }
    };
    let consumer =
        |what: &'static str| versions(what, CONSUMER_VALUE_VERSION..=CONSUMER_VALUE_VERSION);
    let value = match key {
        RecordKey::ConsumerGroup { .. } => {
            consumer("ConsumerGroupMetadataValue")?;
            let epoch = r.i32()?;
            let metadata_hash = match r.tagged_fields()? {
                Some(b) if b.len() == 8 => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    i64::from_be_bytes(a)
                }
                _ => 0,
            };
            RecordValue::ConsumerGroup {
                epoch,
                metadata_hash,
            }
        }
        RecordKey::ConsumerTargetEpoch { .. } => {
            consumer("ConsumerGroupTargetAssignmentMetadataValue")?;
            let assignment_epoch = r.i32()?;
            r.tagged_fields()?;
            RecordValue::ConsumerTargetEpoch { assignment_epoch }
        }
        RecordKey::ConsumerMember { .. } => {
            consumer("ConsumerGroupMemberMetadataValue")?;
            let instance_id = r.compact_nullable_string(RECORD_BYTES_MAX)?;
            let rack_id = r.compact_nullable_string(RECORD_BYTES_MAX)?;
            let client_id = r
                .compact_nullable_string(RECORD_BYTES_MAX)?
                .unwrap_or_default();
            let client_host = r
                .compact_nullable_string(RECORD_BYTES_MAX)?
                .unwrap_or_default();
            let count = r.compact_array_len()?;
            let mut subscribed_topic_names = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                subscribed_topic_names.push(
                    r.compact_nullable_string(RECORD_BYTES_MAX)?
                        .unwrap_or_default(),
                );
            }
            let subscribed_topic_regex = r.compact_nullable_string(RECORD_BYTES_MAX)?;
            let rebalance_timeout_ms = r.i32()?;
            let server_assignor = r.compact_nullable_string(RECORD_BYTES_MAX)?;
            r.tagged_fields()?;
            RecordValue::ConsumerMember(ConsumerMemberValue {
                instance_id,
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names,
                subscribed_topic_regex,
                rebalance_timeout_ms,
                server_assignor,
            })
        }
        RecordKey::ConsumerTarget { .. } => {
            consumer("ConsumerGroupTargetAssignmentMemberValue")?;
            let tps = r.topic_partitions()?;
            r.tagged_fields()?;
            RecordValue::ConsumerTarget(tps)
        }
        RecordKey::ConsumerCurrent { .. } => {
            consumer("ConsumerGroupCurrentMemberAssignmentValue")?;
            let member_epoch = r.i32()?;
            let previous_member_epoch = r.i32()?;
            let state = r.i8()?;
            let assigned = r.topic_partitions()?;
            let pending_revocation = r.topic_partitions()?;
            r.tagged_fields()?;
            RecordValue::ConsumerCurrent(ConsumerCurrentValue {
                member_epoch,
                previous_member_epoch,
                state,
                assigned,
                pending_revocation,
            })
        }
        RecordKey::ShareGroup { .. }
        | RecordKey::ShareMember { .. }
        | RecordKey::ShareTargetEpoch { .. }
        | RecordKey::ShareTarget { .. }
        | RecordKey::ShareCurrent { .. }
        | RecordKey::ShareStatePartitions { .. } => {
            if version != CONSUMER_VALUE_VERSION {
                return Err(RecordError::UnsupportedVersion {
                    what: "share group value",
                    version,
                });
            }
            decode_share_value(key, &mut r)?
        }
        RecordKey::Offset { .. } => {
            versions("OffsetCommitValue", 0..=3)?;
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
            versions("GroupMetadataValue", 0..=3)?;
            let protocol_type = r.string()?;
            let generation = r.i32()?;
            let protocol = r.nullable_string(STRING_BYTES_MAX)?;
            let leader = r.nullable_string(STRING_BYTES_MAX)?;
            let current_state_timestamp_ms = if version >= 2 { r.i64()? } else { -1 };
            let count = r.array_len()?;
            let mut members = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let member_id = r.string()?;
                let group_instance_id = if version >= 3 {
                    r.nullable_string(STRING_BYTES_MAX)?
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

/// The value of a KIP-932 share group record (v0, flexible), after its version.
fn decode_share_value(key: &RecordKey, r: &mut Reader<'_>) -> Result<RecordValue, RecordError> {
    Ok(match key {
        RecordKey::ShareGroup { .. } => {
            // ShareGroupMetadataValue
            let epoch = r.i32()?;
            let metadata_hash = r.i64()?;
            r.tagged_fields()?;
            RecordValue::ShareGroup {
                epoch,
                metadata_hash,
            }
        }
        RecordKey::ShareMember { .. } => {
            // ShareGroupMemberMetadataValue
            let rack_id = r.compact_nullable_string(RECORD_BYTES_MAX)?;
            let client_id = r
                .compact_nullable_string(RECORD_BYTES_MAX)?
                .unwrap_or_default();
            let client_host = r
                .compact_nullable_string(RECORD_BYTES_MAX)?
                .unwrap_or_default();
            let count = r.compact_array_len()?;
            let mut subscribed_topic_names = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                subscribed_topic_names.push(
                    r.compact_nullable_string(RECORD_BYTES_MAX)?
                        .unwrap_or_default(),
                );
            }
            r.tagged_fields()?;
            RecordValue::ShareMember(ShareMemberValue {
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names,
            })
        }
        RecordKey::ShareTargetEpoch { .. } => {
            // ShareGroupTargetAssignmentMetadataValue
            let assignment_epoch = r.i32()?;
            let assignment_timestamp_ms = match r.tagged_fields()? {
                Some(b) if b.len() == 8 => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    i64::from_be_bytes(a)
                }
                _ => 0,
            };
            RecordValue::ShareTargetEpoch {
                assignment_epoch,
                assignment_timestamp_ms,
            }
        }
        RecordKey::ShareTarget { .. } => {
            // ShareGroupTargetAssignmentMemberValue
            let tps = r.topic_partitions()?;
            r.tagged_fields()?;
            RecordValue::ShareTarget(tps)
        }
        RecordKey::ShareCurrent { .. } => {
            // ShareGroupCurrentMemberAssignmentValue
            let member_epoch = r.i32()?;
            let previous_member_epoch = r.i32()?;
            let state = r.i8()?;
            let assigned = r.topic_partitions()?;
            r.tagged_fields()?;
            RecordValue::ShareCurrent(ShareCurrentValue {
                member_epoch,
                previous_member_epoch,
                state,
                assigned,
            })
        }
        RecordKey::ShareStatePartitions { .. } => {
            // ShareGroupStatePartitionMetadataValue
            let initializing = r.share_partitions_infos()?;
            let initialized = r.share_partitions_infos()?;
            let count = r.compact_array_len()?;
            let mut deleting = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let id = r.uuid()?;
                let name = r
                    .compact_nullable_string(RECORD_BYTES_MAX)?
                    .unwrap_or_default();
                r.tagged_fields()?;
                deleting.push((id, name));
            }
            r.tagged_fields()?;
            RecordValue::ShareStatePartitions(ShareStatePartitionsValue {
                initializing,
                initialized,
                deleting,
            })
        }
        _ => {
            return Err(RecordError::UnsupportedVersion {
                what: "share group key",
                version: -1,
            })
        }
    })
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

/// An i16-length string is bounded by its length alone.
const STRING_BYTES_MAX: usize = i16::MAX as usize;

/// The `__consumer_offsets` fields built from the store's primitive [`Reader`].
trait ReadExt<'a> {
    fn compact_array_len(&mut self) -> Result<usize, RecordError>;
    fn tagged_fields(&mut self) -> Result<Option<&'a [u8]>, RecordError>;
    fn uuid(&mut self) -> Result<uuid::Uuid, RecordError>;
    fn topic_partitions(&mut self) -> Result<TopicPartitions, RecordError>;
    fn share_partitions_infos(&mut self) -> Result<Vec<SharePartitionsInfo>, RecordError>;
    fn string(&mut self) -> Result<String, RecordError>;
    fn bytes(&mut self) -> Result<Bytes, RecordError>;
    fn array_len(&mut self) -> Result<usize, RecordError>;
}

impl<'a> ReadExt<'a> for Reader<'a> {
    fn compact_array_len(&mut self) -> Result<usize, RecordError> {
        Ok(self.compact_len(RECORD_ARRAY_MAX)?.unwrap_or(0))
    }

    /// Reads a tagged-field section (a count, then per field a tag, a size and that many bytes)
    /// and returns tag 0's bytes, the only tagged field Millrace reads.
    fn tagged_fields(&mut self) -> Result<Option<&'a [u8]>, RecordError> {
        let count = self.uvarint()?;
        if count > RECORD_ARRAY_MAX as u64 {
            return Err(RecordError::BadLength(
                i64::try_from(count).unwrap_or(i64::MAX),
            ));
        }
        let mut tag0 = None;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            let size = usize::try_from(size)
                .ok()
                .filter(|s| *s <= RECORD_BYTES_MAX)
                .ok_or(RecordError::BadLength(-1))?;
            let data = self.take(size)?;
            if tag == 0 {
                tag0 = Some(data);
            }
        }
        Ok(tag0)
    }

    fn uuid(&mut self) -> Result<uuid::Uuid, RecordError> {
        Ok(uuid::Uuid::from_bytes(self.array()?))
    }

    fn topic_partitions(&mut self) -> Result<TopicPartitions, RecordError> {
        let count = self.compact_array_len()?;
        let mut out = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let topic = self.uuid()?;
            let n = self.compact_array_len()?;
            let mut partitions = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                partitions.push(self.i32()?);
            }
            self.tagged_fields()?;
            out.push((topic, partitions));
        }
        Ok(out)
    }

    fn share_partitions_infos(&mut self) -> Result<Vec<SharePartitionsInfo>, RecordError> {
        let count = self.compact_array_len()?;
        let mut out = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let topic_id = self.uuid()?;
            let topic_name = self
                .compact_nullable_string(RECORD_BYTES_MAX)?
                .unwrap_or_default();
            let n = self.compact_array_len()?;
            let mut partitions = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                partitions.push(self.i32()?);
            }
            self.tagged_fields()?;
            out.push(SharePartitionsInfo {
                topic_id,
                topic_name,
                partitions,
            });
        }
        Ok(out)
    }

    fn string(&mut self) -> Result<String, RecordError> {
        self.nullable_string(STRING_BYTES_MAX)?
            .ok_or(RecordError::BadLength(-1))
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
    fn consumer_group_records_round_trip() {
        let t = uuid::Uuid::from_bytes([7; 16]);
        let cases = [
            (
                RecordKey::ConsumerGroup { group: "g".into() },
                RecordValue::ConsumerGroup {
                    epoch: 12,
                    metadata_hash: -77,
                },
            ),
            (
                RecordKey::ConsumerTargetEpoch { group: "g".into() },
                RecordValue::ConsumerTargetEpoch {
                    assignment_epoch: 11,
                },
            ),
            (
                RecordKey::ConsumerMember {
                    group: "g".into(),
                    member: "m".into(),
                },
                RecordValue::ConsumerMember(ConsumerMemberValue {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["a".into(), "b".into()],
                    subscribed_topic_regex: None,
                    rebalance_timeout_ms: 300_000,
                    server_assignor: Some("uniform".into()),
                }),
            ),
            (
                RecordKey::ConsumerTarget {
                    group: "g".into(),
                    member: "m".into(),
                },
                RecordValue::ConsumerTarget(vec![(t, vec![0, 2])]),
            ),
            (
                RecordKey::ConsumerCurrent {
                    group: "g".into(),
                    member: "m".into(),
                },
                RecordValue::ConsumerCurrent(ConsumerCurrentValue {
                    member_epoch: 11,
                    previous_member_epoch: 10,
                    state: 1,
                    assigned: vec![(t, vec![0])],
                    pending_revocation: vec![(t, vec![1])],
                }),
            ),
        ];
        for (key, value) in cases {
            let k = encode_key(&key);
            assert_eq!(decode_key(&k), Ok(Some(key.clone())));
            let v = encode_consumer_value(&value).expect("consumer value");
            assert_eq!(decode_value(&key, &v), Ok(value));
        }
        // Kafka's layout: key type, i16 strings; value version 0, then the fields.
        let key = encode_key(&RecordKey::ConsumerCurrent {
            group: "g".into(),
            member: "m".into(),
        });
        assert_eq!(&key[..], &[0, 8, 0, 1, b'g', 0, 1, b'm']);
        let v = encode_consumer_value(&RecordValue::ConsumerGroup {
            epoch: 5,
            metadata_hash: 0,
        })
        .expect("v");
        assert_eq!(&v[..], &[0, 0, 0, 0, 0, 5, 0]);
        // Kafka 4.1's MetadataHash (tag 0) is read; another tag is skipped.
        let tagged = [
            0, 0, 0, 0, 0, 5, 2, 0, 8, 0, 0, 0, 0, 0, 0, 1, 2, 1, 3, 1, 2, 3,
        ];
        assert_eq!(
            decode_value(&RecordKey::ConsumerGroup { group: "g".into() }, &tagged),
            Ok(RecordValue::ConsumerGroup {
                epoch: 5,
                metadata_hash: 0x102,
            })
        );
        // Hostile: a huge compact array length fails cleanly.
        let bad = [0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(decode_value(
            &RecordKey::ConsumerTarget {
                group: "g".into(),
                member: "m".into()
            },
            &bad
        )
        .is_err());
    }

    #[test]
    fn share_group_records_round_trip_in_kafkas_layout() {
        let t = uuid::Uuid::from_bytes([9; 16]);
        let member = |group: &str| (group.to_string(), "m".to_string());
        let (g, m) = member("g");
        let cases = [
            (
                RecordKey::ShareGroup { group: g.clone() },
                RecordValue::ShareGroup {
                    epoch: 4,
                    metadata_hash: -5,
                },
            ),
            (
                RecordKey::ShareMember {
                    group: g.clone(),
                    member: m.clone(),
                },
                RecordValue::ShareMember(ShareMemberValue {
                    rack_id: Some("r1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["a".into()],
                }),
            ),
            (
                RecordKey::ShareTargetEpoch { group: g.clone() },
                RecordValue::ShareTargetEpoch {
                    assignment_epoch: 4,
                    assignment_timestamp_ms: 1_700_000_000_000,
                },
            ),
            (
                RecordKey::ShareTarget {
                    group: g.clone(),
                    member: m.clone(),
                },
                RecordValue::ShareTarget(vec![(t, vec![0, 1])]),
            ),
            (
                RecordKey::ShareCurrent {
                    group: g.clone(),
                    member: m.clone(),
                },
                RecordValue::ShareCurrent(ShareCurrentValue {
                    member_epoch: 4,
                    previous_member_epoch: 3,
                    state: 0,
                    assigned: vec![(t, vec![1])],
                }),
            ),
            (
                RecordKey::ShareStatePartitions { group: g.clone() },
                RecordValue::ShareStatePartitions(ShareStatePartitionsValue {
                    initializing: vec![],
                    initialized: vec![SharePartitionsInfo {
                        topic_id: t,
                        topic_name: "a".into(),
                        partitions: vec![0, 1],
                    }],
                    deleting: vec![(t, "a".into())],
                }),
            ),
        ];
        for (key, value) in cases {
            let k = encode_key(&key);
            assert_eq!(decode_key(&k), Ok(Some(key.clone())));
            let v = encode_consumer_value(&value).expect("share value");
            assert_eq!(decode_value(&key, &v), Ok(value));
        }
        // Kafka's record types 10..=15 and value layouts.
        assert_eq!(
            &encode_key(&RecordKey::ShareMember {
                group: "g".into(),
                member: "m".into()
            })[..],
            &[0, 10, 0, 1, b'g', 0, 1, b'm']
        );
        assert_eq!(
            &encode_key(&RecordKey::ShareGroup { group: "g".into() })[..],
            &[0, 11, 0, 1, b'g']
        );
        assert_eq!(
            &encode_key(&RecordKey::ShareStatePartitions { group: "g".into() })[..],
            &[0, 15, 0, 1, b'g']
        );
        let v = encode_consumer_value(&RecordValue::ShareGroup {
            epoch: 5,
            metadata_hash: 7,
        })
        .expect("v");
        assert_eq!(&v[..], &[0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 7, 0]);
        let v = encode_consumer_value(&RecordValue::ShareCurrent(ShareCurrentValue {
            member_epoch: 2,
            previous_member_epoch: 1,
            state: 0,
            assigned: vec![],
        }))
        .expect("v");
        assert_eq!(&v[..], &[0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 1, 0]);
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
