//! `millrace-quorum`: the controller quorum. A Raft-replicated metadata log (openraft `=0.9.25`,
//! storage-v2) behind a small API, so that nothing else in Millrace imports openraft and an
//! upgrade touches this crate only.
//!
//! # Where it sits
//!
//! The controller (the lead's state machine over the metadata image) proposes opaque entries
//! and applies committed ones; the quorum orders, replicates, persists and snapshots them. Kafka's
//! words: the voters are `controller.quorum.voters`; a node with `process.roles=broker` only is an
//! observer that follows the committed log; the Raft leader is the active controller and its term
//! the controller epoch.
//!
//! # API
//!
//! - [`StateMachine`]: the application's replicated state (in memory): `apply(index, payload)`,
//!   `snapshot()`, `restore(last_index, bytes)`.
//! - [`RpcHandler`]: answers application RPCs (broker registration, heartbeats, forwarded admin
//!   requests...) that arrive on the controller listener.
//! - [`QuorumConfig`] and [`Role`]: this node's id, metadata log directory, listener, voters,
//!   timings.
//! - [`Quorum`]: `start`, `propose` (resolves once committed and applied here), `leader`, `watch`
//!   ([`QuorumStatus`]), `call` (an application RPC to another node), `shutdown`.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use millrace_quorum::*;
//! # async fn demo(sm: Arc<dyn StateMachine>, rpc: Arc<dyn RpcHandler>) -> Result<(), Box<dyn std::error::Error>> {
//! let quorum = Quorum::start(QuorumConfig::single_node(1, "data/__cluster_metadata"), sm, rpc).await?;
//! let (index, answer) = quorum.propose(b"a metadata record".to_vec()).await?;
//! # let _ = (index, answer);
//! quorum.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - **Invariant:** a vote is on disk (fdatasync, rename, directory fsync) before it is sent;
//!   entries are on disk (fdatasync) before this node acknowledges them (`log_store`).
//! - **Invariant:** `StateMachine::apply` sees committed entries only, each once per process
//!   lifetime, in log order, on every node in the same order; indexes increase but skip Raft's
//!   own entries (leader blanks, membership changes).
//! - **Invariant:** only the leader accepts proposals; `propose` returns `Ok` only after the entry
//!   is committed (on a majority of voters' disks) and applied locally.
//! - **Invariant:** observers never vote and never lead.
//! - **Invariant:** every length read from the network or disk is checked against `limits` before
//!   allocating; no input from a peer or the disk can panic this crate.
//!
//! Module map: [`config`] (configuration), `quorum` (assembly, bootstrap, API), `log_store`
//! (openraft's log storage and the writer thread), `log_file` (the log file format and
//! recovery), `state_machine` (apply and snapshots), `network` (outbound), `server` (the
//! listener), `wire` (the private protocol), `codec` (encoding and checksummed records),
//! [`disk`] (file operations, swappable for [`testing::MemDisk`]), [`limits`].
//! docs/quorum.md describes the files byte by byte and the recovery rules.

#![forbid(unsafe_code)]

pub mod config;
pub mod disk;
pub mod limits;
pub mod testing;
pub mod tls;

mod codec;
mod describe;
mod error;
mod log_file;
mod log_store;
mod network;
mod pre_vote;
mod quorum;
mod reserve;
mod server;
mod state_machine;
mod types;
mod wire;

use futures::future::BoxFuture;

pub use config::{QuorumConfig, Role};
pub use describe::{QuorumDescription, ReplicaProgress};
pub use error::{ProposeError, QuorumError, RpcError};
pub use quorum::{NodeState, Quorum, QuorumStatus, SpaceState, StartOptions};

// The broker shares one `Quorum` between tasks.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Quorum>();
};

/// The replicated state machine the quorum feeds (the controller implements it over the
/// metadata image).
pub trait StateMachine: Send + Sync + 'static {
    /// Applies one committed entry's payload (opaque bytes, exactly as proposed) at log `index`;
    /// the returned bytes go back to the proposer (on the node that proposed it). Must be
    /// deterministic and fast (in memory): it runs on the quorum's state-machine task.
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8>;
    /// A snapshot of the whole state, after the last applied entry (at most
    /// `limits::SNAPSHOT_BYTES_MAX` bytes); an error fails this snapshot (the log is kept).
    fn snapshot(&self) -> Result<Vec<u8>, String>;
    /// Replaces the whole state with a snapshot taken at `last_index`. An error at start stops
    /// `Quorum::start`; an error while installing a leader's snapshot stops the node.
    fn restore(&self, last_index: u64, snapshot: &[u8]) -> Result<(), String>;
}

/// Answers application RPCs that arrive on the controller listener (broker registration,
/// heartbeats, AlterPartition, forwarded admin requests: opaque bytes to the quorum).
pub trait RpcHandler: Send + Sync + 'static {
    /// Handles one request from node `from` (the id the peer gave at the handshake); the answer
    /// must be at most `limits::APP_RPC_BYTES_MAX` bytes.
    fn handle(&self, from: Option<u64>, payload: Vec<u8>) -> BoxFuture<'static, Vec<u8>>;
}
