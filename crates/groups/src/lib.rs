//! Millrace's group coordinator: classic consumer groups (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup), KIP-848 consumer groups (ConsumerGroupHeartbeat, server-side assignors in
//! [`assignor`], the state machine in [`consumer_group`]), KIP-932 share groups
//! (ShareGroupHeartbeat, the `simple` assignor in [`share_assignor`], the state machine in
//! [`share_group`]), committed offsets, and their
//! persistence in the compacted internal topic `__consumer_offsets`, in Kafka's own record
//! formats.
//!
//! Data flow: the front end decodes a group request, converts it into this crate's request
//! structs and calls [`GroupCoordinator`]; the coordinator steps the pure state machine in
//! [`group`], appends records ([`records`], in batches of the store's codec) to
//! `__consumer_offsets` partition `partition_for(group, N)` through the injected [`GroupLog`],
//! and answers once the log says they are committed. The broker tells the coordinator which
//! partitions it leads ([`GroupCoordinator::become_leader`], [`GroupCoordinator::resign`]); a new
//! leader replays the partition (`replay.rs`, after the sled [`snapshot`]) before serving it.
//!
//! **Invariant:** this crate never sees Kafka wire types (`kafka-protocol`) or sockets, and does
//! not depend on the replication crate: replication reaches it only through [`GroupLog`].
//! **Invariant:** the log is the source of truth; the sled snapshot only shortens replay.
//!
//! Types to read first: [`group::Group`], [`coordinator::GroupCoordinator`],
//! [`group_log::GroupLog`], [`records::RecordKey`].

pub mod assignor;
pub mod consumer_group;
pub mod coordinator;
pub mod error;
pub mod group;
pub mod group_log;
pub mod limits;
pub mod records;
mod replay;
mod reply;
pub mod share_assignor;
pub mod share_group;
pub mod snapshot;
mod txn_offsets;

pub use assignor::{Assignment, Assignor};
pub use consumer_group::{
    whole_match_regex, ConsumerGroupConfig, ConsumerGroupDescription, ConsumerGroupState,
    ConsumerMember, ConsumerMemberDescription, GroupTimeouts,
    HeartbeatRequest as ConsumerHeartbeatRequest, HeartbeatResponse as ConsumerHeartbeatResponse,
    TopicInfo, TopicsView,
};
pub use coordinator::{
    partition_for, CommitPartition, CommitRequest, CoordinatorConfig, CoordinatorSnapshot,
    FetchTopics, FetchedOffset, GroupCoordinator, GroupDescription, GroupListing, GroupSnapshot,
    LoadHold, MemberDescription, PartitionStatus, Reply, ShareGroupDeletion,
};
pub use error::GroupError;
pub use group::{
    CommittedOffset, GroupConfig, GroupState, JoinMember, JoinRequest, JoinResponse, Protocol,
    SyncRequest, SyncResponse,
};
pub use group_log::{DurableGroupLog, GroupAppend, GroupLog, GroupLogError};
pub use share_group::{
    InitializedPartitions, ShareGroupConfig, ShareGroupDescription, ShareGroupState,
    ShareHeartbeatRequest, ShareHeartbeatResponse, ShareMember,
};

/// The internal topic holding commits and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
