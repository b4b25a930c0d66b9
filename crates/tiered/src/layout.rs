//! Where a remote segment lives in the bucket. One folder per partition, one object per file of
//! the segment, named by its base offset (zero-padded, so a listing is in offset order) and the
//! segment id the uploading leader chose (a fresh UUID per upload, so two uploads of the same
//! offsets never share a name):
//!
//! ```text
//! <prefix>/<topic>-<topic id>/<partition>/<base offset, 20 digits>-<segment id>.<kind>
//! ```
//!
//! Kinds: `log` (the segment's batches as stored), `index`, `timeindex`, `snapshot` (producer
//! state at the segment's end), `leader-epoch-checkpoint` (epochs up to its end), `txnindex`
//! (the aborted transactions whose markers lie in it). This is the layout of Kafka's common
//! RemoteStorageManager plugins, so a bucket reads the same to an operator.

use millrace_store::TopicId;
use uuid::Uuid;

/// One file of a remote segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Log,
    Index,
    TimeIndex,
    ProducerSnapshot,
    LeaderEpochs,
    TxnIndex,
}

impl ObjectKind {
    /// Every kind, in upload order (the log first, so a listing that sees any object of a
    /// segment sees its largest one started).
    pub const ALL: [ObjectKind; 6] = [
        ObjectKind::Log,
        ObjectKind::Index,
        ObjectKind::TimeIndex,
        ObjectKind::ProducerSnapshot,
        ObjectKind::LeaderEpochs,
        ObjectKind::TxnIndex,
    ];

    /// The object name's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            ObjectKind::Log => "log",
            ObjectKind::Index => "index",
            ObjectKind::TimeIndex => "timeindex",
            ObjectKind::ProducerSnapshot => "snapshot",
            ObjectKind::LeaderEpochs => "leader-epoch-checkpoint",
            ObjectKind::TxnIndex => "txnindex",
        }
    }

    fn from_suffix(suffix: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.suffix() == suffix)
    }
}

/// The objects of one remote segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentObjects {
    pub topic: String,
    pub topic_id: TopicId,
    pub partition: i32,
    pub base_offset: i64,
    pub segment_id: Uuid,
}

impl SegmentObjects {
    /// The partition's folder, relative to the store's prefix (no trailing slash).
    pub fn partition_folder(topic: &str, topic_id: TopicId, partition: i32) -> String {
        format!("{topic}-{topic_id}/{partition}")
    }

    /// The key of one of its objects, relative to the store's prefix.
    pub fn key(&self, kind: ObjectKind) -> String {
        format!(
            "{}/{:020}-{}.{}",
            Self::partition_folder(&self.topic, self.topic_id, self.partition),
            self.base_offset,
            self.segment_id,
            kind.suffix()
        )
    }

    /// Reads an object's name (the part after the partition folder) back: base offset, segment
    /// id, kind. None for names this layout never writes.
    pub fn parse_name(name: &str) -> Option<(i64, Uuid, ObjectKind)> {
        let (stem, suffix) = name.split_once('.')?;
        let (base, id) = stem.split_once('-')?;
        if base.len() != 20 {
            return None;
        }
        Some((
            base.parse().ok()?,
            Uuid::parse_str(id).ok()?,
            ObjectKind::from_suffix(suffix)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        let objects = SegmentObjects {
            topic: "orders".into(),
            topic_id: TopicId::from_bytes([7; 16]),
            partition: 3,
            base_offset: 4096,
            segment_id: Uuid::from_bytes([9; 16]),
        };
        for kind in ObjectKind::ALL {
            let key = objects.key(kind);
            let folder = SegmentObjects::partition_folder("orders", objects.topic_id, 3);
            let name = key
                .strip_prefix(&format!("{folder}/"))
                .expect("key under its folder");
            assert_eq!(
                SegmentObjects::parse_name(name),
                Some((4096, objects.segment_id, kind))
            );
        }
        assert_eq!(SegmentObjects::parse_name("00000000000000004096.log"), None);
        assert_eq!(SegmentObjects::parse_name("junk"), None);
    }
}
