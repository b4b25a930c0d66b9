//! Millrace's partition replication (Kafka's ISR model): the per-partition replica state machine
//! that owns the high watermark and the ISR proposals ([`replica`]), and — built on it — the
//! replica manager, the followers' fetchers and the leader's `acks=all` purgatory.
//!
//! **Invariant:** `replica.rs` does no I/O and reads no clock; the seeded simulator drives it.

pub mod client;
pub mod divergence;
pub mod driver;
pub mod fetch_session;
pub mod fetcher;
pub mod isr_changes;
pub mod limits;
pub mod manager;
pub mod partition;
pub mod replica;
pub mod store_log;

pub use driver::acks::AckError;
pub use manager::{
    AckWait, FollowerRead, HostedPartition, LeadershipChange, Progress, ReplicaError,
    ReplicaManager, ReplicaManagerConfig,
};
pub use partition::{FetchPosition, FollowerFetchDecision, Partition, PartitionError, ReplicaLog};
pub use replica::{Action, Event, PartitionReplica, PartitionState, ReplicaConfig};
