//! Millrace's controller: the node that leads the metadata quorum decides every metadata change —
//! broker registration, heartbeats and fencing, controlled shutdown, topic creation and deletion,
//! replica placement, leader election, ISR/ELR changes from AlterPartition, producer-id blocks —
//! and commits it as records to the metadata log that every broker applies.
//!
//! Where it sits: brokers send [`messages::ControllerRequest`]s over the controller listener (the
//! front end forwards admin requests the same way); the service on the active controller steps the
//! pure [`controller::Controller`] and commits its records through the quorum.
//!
//! **Invariant:** the decision logic (`controller.rs`, `partition_change.rs`, `placement.rs`) does
//! no I/O and reads no clock, so a seeded simulator can drive it.
//!
//! Read first: [`controller::Controller`], [`partition_change::PartitionChange`].

pub mod client;
pub mod controller;
pub mod entries;
pub mod lifecycle;
pub mod limits;
pub mod messages;
pub mod partition_change;
pub mod placement;
pub mod producer_ids;
pub mod quorum;
pub mod raft;
pub mod remote_log;
pub mod service;

pub use client::ControllerClient;
pub use controller::{Controller, ControllerConfig, Decision};
pub use entries::{activation_records, entries_of, SplitError};
pub use lifecycle::{BrokerInfo, BrokerLifecycle, Registration};
pub use messages::{ControllerError, ControllerRequest, ControllerResponse};
pub use producer_ids::ProducerIdAllocator;
pub use quorum::{
    CallError, MetadataQuorum, ProposeError, QuorumDescription, QuorumReplica, QuorumView,
};
pub use service::ControllerService;
