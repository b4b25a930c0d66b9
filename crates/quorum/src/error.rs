//! The quorum's error types, one per operation. The broker maps them to Kafka error codes at the
//! edge (e.g. `ProposeError::NotLeader` → NOT_CONTROLLER); nothing here knows Kafka's codes.

use std::io;
use std::path::PathBuf;

/// Why the quorum could not start (or stop cleanly).
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// The configuration is inconsistent (the message names the setting).
    #[error("invalid quorum configuration: {0}")]
    Config(String),
    /// A file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file that is only ever replaced atomically (the log header, the vote, the snapshot)
    /// fails its checks. Starting anyway could vote twice or lose committed entries, so the
    /// operator must look (docs/quorum.md, "Recovery").
    #[error("{}: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `StateMachine::restore` refused the snapshot found at start.
    #[error("the state machine refused the snapshot: {0}")]
    Restore(String),
    /// openraft refused to start or failed while running.
    #[error("raft: {0}")]
    Raft(String),
}

/// Why a proposal did not commit.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ProposeError {
    /// This node is not the leader; `leader` is the leader it knows of, if any. Nothing was
    /// appended.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The current leader as this node knows it.
        leader: Option<u64>,
    },
    /// The payload exceeds `ENTRY_PAYLOAD_BYTES_MAX`. Nothing was appended.
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Payload length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// No outcome within `propose_timeout_ms`: the entry may still commit (or not).
    #[error("no outcome within the proposal timeout; the entry may still commit")]
    Timeout,
    /// The quorum was shut down.
    #[error("the quorum is shut down")]
    ShutDown,
    /// openraft stopped with an error (a storage failure: the node needs a restart).
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// Why an application RPC (`Quorum::call`) failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RpcError {
    /// No address is known for that node (not a configured voter, not a joined observer).
    #[error("no address known for node {0}")]
    UnknownNode(u64),
    /// Could not connect (or the peer is in its reconnect backoff). The request was not sent.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The connection failed after the request may have been sent.
    #[error("network: {0}")]
    Network(String),
    /// No answer within the timeout; the peer may still have handled the request.
    #[error("timed out")]
    Timeout,
    /// The request exceeds `APP_RPC_BYTES_MAX`.
    #[error("request of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Request length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The peer refused the request (the reason says why).
    #[error("refused: {0}")]
    Refused(String),
    /// The quorum was shut down.
    #[error("the quorum is shut down")]
    ShutDown,
}
