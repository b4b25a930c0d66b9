//! Millrace's partition replication (Kafka's ISR model): the per-partition replica state machine
//! that owns the high watermark and the ISR proposals ([`replica`]), one hosted partition's logic
//! over a log trait ([`partition`]), and — built on them — the replication [`driver`] (hosted
//! replicas, the leader's `acks=all` waits, follower fetching) with the ISR change sender
//! ([`isr_changes`]). The broker executes the driver over tokio and the store ([`manager`],
//! [`fetcher`], [`store_log`]); the seeded simulator (`millrace-sim`) executes the same driver.
//!
//! **Invariant:** `replica.rs`, `divergence.rs` and `driver/` do no I/O and read no clock; the
//! seeded simulator drives them.

pub mod client;
pub mod client_security;
pub mod divergence;
pub mod driver;
pub mod fetch_session;
pub mod fetcher;
pub mod isr_changes;
pub mod limits;
pub mod manager;
pub mod partition;
pub mod repair;
pub mod replica;
pub mod store_log;
pub mod throttle;

pub use driver::acks::AckError;
pub use manager::{
    AckWait, FollowerRead, HostedPartition, LeadershipChange, Progress, ReplicaError,
    ReplicaManager, ReplicaManagerConfig,
};
pub use partition::{FetchPosition, FollowerFetchDecision, Partition, PartitionError, ReplicaLog};
pub use replica::{Action, Event, PartitionReplica, PartitionState, ReplicaConfig};
