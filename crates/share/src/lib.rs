//! Millrace's share groups (KIP-932): the share-partition state machine that the partition
//! leader keeps for each share-partition (group, topic, partition), and its persisted form in
//! `__share_group_state`.
//!
//! Where it sits: the front end's ShareFetch/ShareAcknowledge handlers call a
//! [`SharePartition`] with the log batches they read and the acknowledgements they received; the
//! `StateChange`s it returns are written (as Kafka's share coordinator writes them) with the
//! codec in [`records`] before an acknowledgement is answered.
//!
//! **Invariant:** this crate has no wire types (no `kafka-protocol`), no sockets, no I/O and no
//! clock reads: time comes in as `now_ms: i64` arguments, log data as offset ranges, and
//! persistence goes out as values for the caller to write.
//!
//! The share coordinator's state of a `__share_group_state` partition and the share-state RPCs'
//! rules are [`coordinator`] (pure too: the broker appends the records it returns).
//!
//! Types to read first: [`SharePartition`], [`PersistedState`], [`records::ShareStateRecord`],
//! [`ShareCoordinatorShard`].

#![forbid(unsafe_code)]

pub mod coordinator;
pub mod error;
mod in_flight;
pub mod limits;
pub mod partition;
pub mod records;
pub mod state;

pub use coordinator::{
    CoordinatorError, ShareCoordinatorShard, StateSummary, StateWrite, SHARE_GROUP_STATE_TOPIC,
    UPDATES_PER_SNAPSHOT_DEFAULT,
};
pub use error::ShareError;
pub use partition::{
    AckBatch, AckType, AcquireMode, AcquiredRange, LogBatch, SharePartition, SharePartitionConfig,
    SharePartitionMetrics, StateChange,
};
pub use state::{combine, DeliveredRange, PersistedState, RecordState, StateBatch};
