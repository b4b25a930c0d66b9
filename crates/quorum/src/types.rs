//! The openraft type configuration and the entry payload type: the one place that names
//! openraft's generic parameters.
//!
//! Node ids are `u64` (Kafka's `node.id`). A node's membership data is `BasicNode { addr }`:
//! empty for voters (each node reaches the voters through its own `controller.quorum.voters`, so
//! the initial membership entry is byte-identical on every voter) and the observer's controller
//! address for observers, which join at run time. Entry payloads are opaque bytes.

use std::fmt;
use std::io::Cursor;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

openraft::declare_raft_types!(
    /// openraft's type configuration for the controller quorum.
    pub TypeConfig:
        D = Payload,
        R = Vec<u8>,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One log entry of the quorum.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (leader term and node, index).
pub type LogId = openraft::LogId<u64>;
/// A persisted vote.
pub type Vote = openraft::Vote<u64>;
/// A membership as stored in the log or a snapshot.
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
/// The storage error openraft expects.
pub type StorageError = openraft::StorageError<u64>;
/// The openraft handle.
pub type Raft = openraft::Raft<TypeConfig>;

/// The bytes of one proposed entry, exactly as `Quorum::propose` received them. Encoded as a
/// byte string (one length, then the bytes), not as a sequence of numbers.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Payload(pub Vec<u8>);

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.0.len())
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Payload, D::Error> {
        struct BytesVisitor;
        impl<'de> Visitor<'de> for BytesVisitor {
            type Value = Payload;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Payload, E> {
                Ok(Payload(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Payload, E> {
                Ok(Payload(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Payload, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Payload(v))
            }
        }
        d.deserialize_byte_buf(BytesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_a_byte_string() {
        let p = Payload(vec![1, 200, 3]);
        let bytes = postcard::to_allocvec(&p).unwrap();
        assert_eq!(bytes, vec![3, 1, 200, 3]);
        let back: Payload = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, p);
        // A length past the end is an error, not an allocation.
        assert!(postcard::from_bytes::<Payload>(&[0xff, 0xff, 0xff, 0x7f, 1]).is_err());
    }
}
