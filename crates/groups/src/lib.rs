//! Millrace's group coordinator: classic consumer groups (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup), committed offsets, and their persistence in the compacted internal topic
//! `__consumer_offsets`, in Kafka's own record formats.
//!
//! Data flow: the front end decodes a group request, converts it into this crate's request
//! structs and calls [`GroupCoordinator`]; the coordinator steps the pure state machine in
//! [`group`], appends records ([`records`], in batches of the store's codec) to `__consumer_offsets` partition
//! `partition_for(group) % N` through the store, and answers once they are durable. At start,
//! [`GroupCoordinator::load`] replays each partition (after the sled [`snapshot`]) into memory.
//!
//! **Invariant:** this crate never sees Kafka wire types (`kafka-protocol`) or sockets.
//! **Invariant:** the log is the source of truth; the sled snapshot only shortens replay.
//!
//! Types to read first: [`group::Group`], [`coordinator::GroupCoordinator`],
//! [`records::RecordKey`].

pub mod coordinator;
pub mod error;
pub mod group;
pub mod limits;
pub mod records;
pub mod snapshot;

pub use coordinator::{
    partition_for, CommitPartition, CommitRequest, CoordinatorConfig, FetchTopics,
    GroupCoordinator, GroupDescription, GroupListing, MemberDescription, OffsetsPartition, Reply,
};
pub use error::GroupError;
pub use group::{
    CommittedOffset, GroupConfig, GroupState, JoinMember, JoinRequest, JoinResponse, Protocol,
    SyncRequest, SyncResponse,
};

/// The internal topic holding commits and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
