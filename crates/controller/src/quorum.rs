//! What the controller needs of the metadata quorum, as one small trait: propose an entry, know the
//! leader, call another node, describe its progress. The broker implements it over
//! `millrace-quorum` (openraft); the simulator implements it over a simulated log. Nothing in this
//! crate knows openraft.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;

/// Why a proposal did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node does not lead the quorum (any more).
    #[error("not the quorum leader (leader: {leader:?})")]
    NotLeader { leader: Option<i32> },
    /// Outcome unknown (leadership lost, timeout, shutdown): the entry may or may not commit.
    #[error("proposal outcome unknown: {0}")]
    Unknown(String),
    /// Refused before it reached the log (too large): nothing was appended, and proposing the
    /// same entry again cannot succeed.
    #[error("proposal refused: {0}")]
    Refused(String),
}

/// Why a call to another node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call to node {node} failed: {reason}")]
pub struct CallError {
    pub node: i32,
    pub reason: String,
}

/// The quorum as this node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuorumView {
    /// The leader this node knows of, if any.
    pub leader: Option<i32>,
    /// Whether this node is that leader.
    pub is_leader: bool,
    /// The leader's term (rises at every election).
    pub term: u64,
}

/// One voter's or observer's progress as the quorum leader reports it (DescribeQuorum's
/// `ReplicaState`; -1 = unknown, as Kafka answers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuorumReplica {
    pub node_id: i32,
    pub log_end_offset: i64,
    pub last_fetch_timestamp: i64,
    pub last_caught_up_timestamp: i64,
}

/// The quorum as its leader describes it (DescribeQuorum).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    pub observers: Vec<QuorumReplica>,
    /// Controller listener address (`host:port`) per node, where one is known.
    pub endpoints: Vec<(i32, String)>,
}

/// The metadata quorum.
pub trait MetadataQuorum: Send + Sync + 'static {
    /// Proposes one entry (an encoded `MetadataBatch`); resolves with its log offset once it is
    /// committed and applied to this node's image.
    fn propose(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<u64, ProposeError>>;
    /// Watches leadership.
    fn view(&self) -> watch::Receiver<QuorumView>;
    /// Sends a controller request to node `to` (its controller listener) and returns the answer.
    fn call(
        &self,
        to: i32,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Vec<u8>, CallError>>;
    /// DescribeQuorum's view, answered by the leader only (`None` elsewhere, or where the quorum
    /// keeps no progress, as the simulated one).
    fn describe(&self) -> Option<QuorumDescription> {
        None
    }
}
