//! `Quorum`: one node of the controller quorum, assembled from the storage, the network and
//! openraft, with the small API the rest of Millrace uses.
//!
//! Start-up order: validate the configuration; open the log (recovering a torn tail), the vote
//! and the snapshot on a blocking thread; restore the application's state machine from the
//! snapshot; bind the controller listener; start openraft (which re-applies committed entries
//! after the snapshot); serve; then bootstrap:
//! - a voter whose log and vote are empty (a first start) initializes the membership to exactly
//!   the configured voter ids, every voter the same (openraft's rule for forming a cluster; safe
//!   under concurrent first starts, see docs/decisions/0020-openraft-quorum.md). A node that is
//!   already initialized, or that heard from a leader first, skips it.
//! - a single voter waits until it leads (a few fsyncs), so `propose` works once `start` returns.
//! - an observer asks the voters, in turn, to add it as a learner until its own log shows it in
//!   the membership.
//!
//! A voter of a quorum of more than one also runs the pre-vote guard (`pre_vote`), which keeps its
//! elections off while a majority of the voters still hears a leader.
//!
//! Shutdown cancels the listener, the connections and the background tasks, stops openraft, and
//! waits for the log writer thread to finish the writes already queued.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, Fatal, InitializeError, RaftError};
use openraft::{RaftMetrics, ServerState};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::describe::{self, QuorumDescription};
use crate::disk::{Disk, OsDisk};
use crate::limits::{
    APP_RPC_BYTES_MAX, ENTRY_PAYLOAD_BYTES_MAX, RESERVE_BYTES, RESERVE_RETRY_INTERVAL_MS,
    SHUTDOWN_WAIT_MS,
};
use crate::log_store::{LogStore, WriterDone};
use crate::network::{self, CallError, NetworkFactory, Peers};
use crate::pre_vote::{self, LeaderContact};
use crate::reserve::Reserve;
use crate::server::Server;
use crate::state_machine::{SmStore, SnapshotFiles};
use crate::types::{Payload, Raft};
use crate::wire::{JoinReply, Reply, Request};
use crate::{ProposeError, QuorumConfig, QuorumError, Role, RpcError, RpcHandler, StateMachine};

/// What a node is doing in the quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// A voter following a leader (or waiting for one).
    Follower,
    /// A voter asking for votes.
    Candidate,
    /// The active controller.
    Leader,
    /// An observer (learner): follows the committed log, never votes.
    Observer,
    /// Stopped (shut down, or openraft stopped on an error: see `QuorumStatus::error`).
    Shutdown,
}

/// A node's view of the quorum, published on `Quorum::watch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    /// This node's id.
    pub node_id: u64,
    /// What this node is doing.
    pub state: NodeState,
    /// The current leader as this node knows it.
    pub leader: Option<u64>,
    /// Whether this node is the leader.
    pub is_leader: bool,
    /// The current Raft term (Kafka's controller epoch).
    pub term: u64,
    /// Index of the last entry known committed here.
    pub committed: Option<u64>,
    /// Index of the last entry applied to the state machine here.
    pub applied: Option<u64>,
    /// The voter ids of the effective membership.
    pub voters: BTreeSet<u64>,
    /// The observer (learner) ids of the effective membership.
    pub observers: BTreeSet<u64>,
    /// Why openraft stopped, if it stopped on an error.
    pub error: Option<String>,
}

impl QuorumStatus {
    fn initial(node_id: u64, role: Role) -> QuorumStatus {
        QuorumStatus {
            node_id,
            state: match role {
                Role::Voter => NodeState::Follower,
                Role::Observer => NodeState::Observer,
            },
            leader: None,
            is_leader: false,
            term: 0,
            committed: None,
            applied: None,
            voters: BTreeSet::new(),
            observers: BTreeSet::new(),
            error: None,
        }
    }

    fn from_metrics(m: &RaftMetrics<u64, openraft::BasicNode>, committed: Option<u64>) -> Self {
        let error = m.running_state.as_ref().err().map(|e| e.to_string());
        let membership = m.membership_config.membership();
        let voter = membership.voter_ids().any(|id| id == m.id);
        let state = match (&error, m.state) {
            (Some(_), _) | (_, ServerState::Shutdown) => NodeState::Shutdown,
            (_, ServerState::Leader) => NodeState::Leader,
            (_, ServerState::Candidate) => NodeState::Candidate,
            // openraft reports Follower before its start-up sorts voters from learners; a node
            // that is not a voter in its own membership is not following as a voter.
            (_, ServerState::Follower) if voter => NodeState::Follower,
            (_, ServerState::Follower) | (_, ServerState::Learner) => NodeState::Observer,
        };
        QuorumStatus {
            node_id: m.id,
            state,
            leader: m.current_leader,
            is_leader: state == NodeState::Leader && m.current_leader == Some(m.id),
            term: m.current_term,
            committed,
            applied: m.last_applied.map(|l| l.index),
            voters: membership.voter_ids().collect(),
            observers: membership.learner_ids().collect(),
            error,
        }
    }
}

/// Extra start options, mostly for tests.
#[derive(Debug, Default)]
pub struct StartOptions {
    /// An already-bound controller listener (used instead of binding `QuorumConfig::listen`).
    pub listener: Option<TcpListener>,
    /// The file system to use (default: the real one).
    pub disk: Option<Arc<dyn Disk>>,
}

/// One node of the controller quorum.
pub struct Quorum {
    node_id: u64,
    raft: Raft,
    peers: Arc<Peers>,
    rpc: Arc<dyn RpcHandler>,
    status: watch::Receiver<QuorumStatus>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    writer_done: Mutex<Option<WriterDone>>,
    propose_timeout: Duration,
    listen_addr: Option<SocketAddr>,
    reserve: Arc<Reserve>,
}

/// The metadata log directory's space, as `/ready` and the metrics report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceState {
    /// Bytes the space reserve holds now (`limits::RESERVE_BYTES` when whole; 0 after a write
    /// found the disk full, until space returns).
    pub reserve_bytes: u64,
    /// A metadata write is waiting for space right now (no reserve left): proposals stall.
    pub waiting_for_space: bool,
}

fn raft_err(e: impl std::fmt::Display) -> QuorumError {
    QuorumError::Raft(e.to_string())
}

impl Quorum {
    /// Starts this node: see the module documentation for the order. `sm` must be empty: it is
    /// restored from the snapshot and the committed log.
    pub async fn start(
        config: QuorumConfig,
        sm: Arc<dyn StateMachine>,
        rpc: Arc<dyn RpcHandler>,
    ) -> Result<Quorum, QuorumError> {
        Quorum::start_with(config, StartOptions::default(), sm, rpc).await
    }

    /// `start` with a pre-bound listener or another file system.
    pub async fn start_with(
        config: QuorumConfig,
        options: StartOptions,
        sm: Arc<dyn StateMachine>,
        rpc: Arc<dyn RpcHandler>,
    ) -> Result<Quorum, QuorumError> {
        config.validate()?;
        let raft_config = Arc::new(config.raft_config()?);
        let disk: Arc<dyn Disk> = options.disk.unwrap_or_else(|| Arc::new(OsDisk));
        let dir = config.dir.clone();
        let (log_store, writer_done, committed_rx, files, reserve) =
            tokio::task::spawn_blocking(move || {
                disk.create_dir_all(&dir)
                    .map_err(|source| QuorumError::Io {
                        context: format!("create {}", dir.display()),
                        source,
                    })?;
                let reserve = Reserve::open(disk.clone(), &dir, RESERVE_BYTES);
                let (log_store, done, committed) =
                    LogStore::open(disk.clone(), &dir, reserve.clone())?;
                let files = SnapshotFiles::load(disk, &dir, reserve.clone())?;
                Ok::<_, QuorumError>((log_store, done, committed, files, reserve))
            })
            .await
            .map_err(raft_err)??;
        if let Some(snap) = files.current() {
            let index = snap.meta.last_log_id.map_or(0, |l| l.index);
            sm.restore(index, &snap.data)
                .map_err(QuorumError::Restore)?;
        }
        let sm_store = SmStore::new(sm, Arc::new(files));

        let listener = match (options.listener, config.listen) {
            (Some(l), _) => Some(l),
            (None, Some(addr)) => {
                Some(
                    TcpListener::bind(addr)
                        .await
                        .map_err(|source| QuorumError::Io {
                            context: format!("bind the controller listener {addr}"),
                            source,
                        })?,
                )
            }
            (None, None) => None,
        };
        let listen_addr = listener.as_ref().and_then(|l| l.local_addr().ok());

        let peers = Arc::new(
            Peers::new(config.node_id, config.voters.clone(), config.tls.clone())
                .map_err(|e| QuorumError::Config(e.to_string()))?,
        );
        let raft = Raft::new(
            config.node_id,
            raft_config,
            NetworkFactory::new(peers.clone()),
            log_store,
            sm_store,
        )
        .await
        .map_err(raft_err)?;

        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let contact = LeaderContact::new(Duration::from_millis(config.election_timeout_min_ms));
        if let Some(listener) = listener {
            let server = Arc::new(Server {
                raft: raft.clone(),
                node_id: config.node_id,
                role: config.role,
                voter_ids: config.voters.keys().copied().collect(),
                rpc: rpc.clone(),
                cancel: cancel.clone(),
                tracker: tracker.clone(),
                contact: contact.clone(),
                tls: config.tls.clone(),
            });
            tracker.spawn(server.serve(listener));
        }
        if config.role == Role::Voter && config.voters.len() > 1 {
            tracker.spawn(pre_vote::guard(
                raft.clone(),
                peers.clone(),
                contact,
                config.node_id,
                Duration::from_millis(config.heartbeat_interval_ms),
                cancel.clone(),
            ));
        }
        let (status_tx, status) =
            watch::channel(QuorumStatus::initial(config.node_id, config.role));
        let status_tx = Arc::new(status_tx);
        tracker.spawn(publish_status(
            raft.metrics(),
            peers.clone(),
            committed_rx.clone(),
            status_tx.clone(),
            cancel.clone(),
        ));
        tracker.spawn(top_up_reserve(reserve.clone(), cancel.clone()));

        let quorum = Quorum {
            node_id: config.node_id,
            raft,
            peers,
            rpc,
            status,
            cancel,
            tracker,
            writer_done: Mutex::new(Some(writer_done)),
            propose_timeout: Duration::from_millis(config.propose_timeout_ms),
            listen_addr,
            reserve,
        };
        if let Err(e) = quorum.bootstrap(&config).await {
            let _ = quorum.shutdown().await;
            return Err(e);
        }
        // What `start` waited for (a sole voter's leadership) is visible as soon as it returns.
        publish(
            &status_tx,
            &quorum.raft.metrics(),
            &committed_rx,
            &quorum.peers,
        );
        Ok(quorum)
    }

    /// The metadata log directory's space reserve and whether a write waits for space.
    pub fn space_state(&self) -> SpaceState {
        SpaceState {
            reserve_bytes: self.reserve.held(),
            waiting_for_space: self.reserve.waiting(),
        }
    }

    async fn bootstrap(&self, config: &QuorumConfig) -> Result<(), QuorumError> {
        match config.role {
            Role::Voter => {
                if !self.raft.is_initialized().await.map_err(raft_err)? {
                    let voters: BTreeSet<u64> = config.voters.keys().copied().collect();
                    match self.raft.initialize(voters).await {
                        Ok(()) => tracing::info!(
                            node_id = self.node_id,
                            voters = ?config.voters.keys().collect::<Vec<_>>(),
                            "metadata quorum initialized"
                        ),
                        // Someone reached this node first (a vote or entries): nothing to do.
                        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                        Err(e) => return Err(raft_err(e)),
                    }
                }
                if config.voters.len() == 1 {
                    let wait = Duration::from_millis(config.election_timeout_max_ms.max(5_000));
                    self.raft
                        .wait(Some(wait))
                        .metrics(
                            |m| m.current_leader == Some(m.id) && m.state == ServerState::Leader,
                            "single voter leads",
                        )
                        .await
                        .map_err(raft_err)?;
                }
            }
            Role::Observer => {
                let addr = config.advertised_addr().unwrap_or_default();
                self.tracker.spawn(join_as_observer(
                    self.raft.clone(),
                    self.peers.clone(),
                    self.node_id,
                    addr,
                    self.cancel.clone(),
                ));
            }
        }
        Ok(())
    }

    /// Proposes one entry; resolves once it is committed and applied here: its log index and the
    /// state machine's answer. Only the leader accepts proposals.
    pub async fn propose(&self, payload: Vec<u8>) -> Result<(u64, Vec<u8>), ProposeError> {
        if payload.len() > ENTRY_PAYLOAD_BYTES_MAX {
            return Err(ProposeError::TooLarge {
                len: payload.len(),
                max: ENTRY_PAYLOAD_BYTES_MAX,
            });
        }
        if self.cancel.is_cancelled() {
            return Err(ProposeError::ShutDown);
        }
        let write = self.raft.client_write(Payload(payload));
        match tokio::time::timeout(self.propose_timeout, write).await {
            Err(_) => Err(ProposeError::Timeout),
            Ok(Ok(resp)) => Ok((resp.log_id.index, resp.data)),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(ProposeError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Ok(Err(RaftError::APIError(e))) => Err(ProposeError::Fatal(e.to_string())),
            Ok(Err(RaftError::Fatal(Fatal::Stopped))) => Err(ProposeError::ShutDown),
            Ok(Err(RaftError::Fatal(e))) => Err(ProposeError::Fatal(e.to_string())),
        }
    }

    /// The current leader as this node knows it.
    pub fn leader(&self) -> Option<u64> {
        self.status.borrow().leader
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The address the controller listener is bound to, if there is one.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen_addr
    }

    /// Status updates: leader, term, committed and applied index, membership.
    pub fn watch(&self) -> watch::Receiver<QuorumStatus> {
        self.status.clone()
    }

    /// DescribeQuorum's view: every voter's and observer's progress; `None` unless this node
    /// leads.
    pub fn describe(&self) -> Option<QuorumDescription> {
        let committed = self.status.borrow().committed;
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        describe::describe(
            &m,
            committed,
            &self.peers.acks(),
            self.peers.voters(),
            network::now_ms(),
        )
    }

    /// Sends an application RPC to node `to` over the controller listener; its `RpcHandler`
    /// answers. A call to this node's own id goes straight to the local handler.
    pub async fn call(
        &self,
        to: u64,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        if payload.len() > APP_RPC_BYTES_MAX {
            return Err(RpcError::TooLarge {
                len: payload.len(),
                max: APP_RPC_BYTES_MAX,
            });
        }
        if self.cancel.is_cancelled() {
            return Err(RpcError::ShutDown);
        }
        if to == self.node_id {
            let local = self.rpc.handle(Some(self.node_id), payload);
            return tokio::time::timeout(timeout, local)
                .await
                .map_err(|_| RpcError::Timeout);
        }
        let addr = match self.peers.voter_addr(to) {
            Some(a) if !a.is_empty() => a.to_string(),
            _ => {
                let metrics = self.raft.metrics();
                let m = metrics.borrow();
                match m.membership_config.membership().get_node(&to) {
                    Some(n) if !n.addr.is_empty() => n.addr.clone(),
                    _ => return Err(RpcError::UnknownNode(to)),
                }
            }
        };
        let req = Request::App(Payload(payload));
        match self.peers.request(to, &addr, &req, timeout).await {
            Ok(Reply::App(p)) => Ok(p.0),
            Ok(Reply::Refused(r)) => Err(RpcError::Refused(r)),
            Ok(other) => Err(RpcError::Network(format!("unexpected reply {other:?}"))),
            Err(CallError::Unreachable(e)) => Err(RpcError::Unreachable(e)),
            Err(CallError::Network(e)) => Err(RpcError::Network(e)),
            Err(CallError::Timeout) => Err(RpcError::Timeout),
            Err(CallError::TooLarge { len }) => Err(RpcError::TooLarge {
                len,
                max: APP_RPC_BYTES_MAX,
            }),
        }
    }

    /// Stops this node: the listener, its connections, openraft and the log writer (after the
    /// writes already queued). Idempotent.
    pub async fn shutdown(&self) -> Result<(), QuorumError> {
        // A write waiting for space gives up (and stops openraft) instead of holding shutdown.
        self.reserve.stop();
        self.cancel.cancel();
        let stopped = self.raft.shutdown().await;
        self.tracker.close();
        let wait = Duration::from_millis(SHUTDOWN_WAIT_MS);
        if tokio::time::timeout(wait, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(node_id = self.node_id, "quorum tasks did not stop in time");
        }
        let done = self.writer_done.lock().take();
        if let Some(done) = done {
            if tokio::time::timeout(wait, done).await.is_err() {
                tracing::warn!(
                    node_id = self.node_id,
                    "the log writer did not stop in time"
                );
            }
        }
        stopped.map_err(raft_err)
    }
}

/// Re-creates a released space reserve once space returns, also while no metadata write comes
/// (the writer tops it up after each write too).
async fn top_up_reserve(reserve: Arc<Reserve>, cancel: CancellationToken) {
    let period = Duration::from_millis(RESERVE_RETRY_INTERVAL_MS);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let r = reserve.clone();
        if tokio::task::spawn_blocking(move || r.top_up())
            .await
            .is_err()
        {
            return;
        }
    }
}

impl Drop for Quorum {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Publishes `QuorumStatus` whenever openraft's metrics or the committed index change.
async fn publish_status(
    mut metrics: watch::Receiver<RaftMetrics<u64, openraft::BasicNode>>,
    peers: Arc<Peers>,
    mut committed: watch::Receiver<Option<u64>>,
    tx: Arc<watch::Sender<QuorumStatus>>,
    cancel: CancellationToken,
) {
    let mut committed_open = true;
    let cancelled = loop {
        publish(&tx, &metrics, &committed, &peers);
        tokio::select! {
            _ = cancel.cancelled() => break true,
            r = metrics.changed() => if r.is_err() { break false },
            r = committed.changed(), if committed_open => committed_open = r.is_ok(),
        }
    };
    tx.send_modify(|s| {
        s.state = NodeState::Shutdown;
        s.is_leader = false;
        if !cancelled && s.error.is_none() {
            // openraft's core ended without being asked to (a panic inside openraft).
            s.error = Some("the Raft core stopped unexpectedly".into());
        }
    });
}

/// Sends the status derived from the current metrics and committed index, if it changed.
fn publish(
    tx: &watch::Sender<QuorumStatus>,
    metrics: &watch::Receiver<RaftMetrics<u64, openraft::BasicNode>>,
    committed: &watch::Receiver<Option<u64>>,
    peers: &Peers,
) {
    let m = metrics.borrow();
    peers.set_log_end(m.last_log_index);
    let status = QuorumStatus::from_metrics(&m, *committed.borrow());
    drop(m);
    tx.send_if_modified(|cur| {
        let changed = *cur != status;
        *cur = status;
        changed
    });
}

/// An observer asks the voters to add it as a learner until its log shows it in the membership.
async fn join_as_observer(
    raft: Raft,
    peers: Arc<Peers>,
    node_id: u64,
    addr: String,
    cancel: CancellationToken,
) {
    let joined = |raft: &Raft| {
        raft.metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&node_id)
            .is_some_and(|n| n.addr == addr)
    };
    let voters: BTreeMap<u64, String> = peers.voters().clone();
    let mut pause = Duration::from_millis(100);
    let mut hint: Option<u64> = None;
    while !joined(&raft) {
        let targets: Vec<u64> = hint
            .take()
            .into_iter()
            .chain(voters.keys().copied())
            .collect();
        for target in targets {
            let Some(voter_addr) = voters.get(&target) else {
                continue;
            };
            let req = Request::Join { addr: addr.clone() };
            let reply = tokio::select! {
                _ = cancel.cancelled() => return,
                r = peers.request(target, voter_addr, &req, Duration::from_secs(5)) => r,
            };
            match reply {
                Ok(Reply::Join(JoinReply::Added)) => {
                    let waiter = raft.wait(Some(Duration::from_secs(5)));
                    let wait = waiter.metrics(
                        |m| {
                            m.membership_config
                                .membership()
                                .get_node(&node_id)
                                .is_some()
                        },
                        "joined",
                    );
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = wait => {}
                    }
                    break;
                }
                Ok(Reply::Join(JoinReply::NotLeader { leader: Some(l) })) if l != target => {
                    hint = Some(l);
                    break;
                }
                Ok(Reply::Join(JoinReply::Refused(reason))) => {
                    tracing::warn!(voter = target, %reason, "metadata quorum refused this observer");
                }
                _ => {}
            }
        }
        if joined(&raft) {
            break;
        }
        // Follow a leader hint almost at once, otherwise back off (never spin).
        let delay = if hint.is_some() {
            Duration::from_millis(10)
        } else {
            let d = pause;
            pause = (pause * 2).min(Duration::from_secs(2));
            d
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    tracing::info!(node_id, "observer follows the metadata log");
}
