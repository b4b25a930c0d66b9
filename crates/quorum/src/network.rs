//! The client side of the controller listener protocol: connection pools per peer, reconnect
//! backoff, timeouts, and openraft's `RaftNetwork` over them.
//!
//! Each call takes an idle connection to the peer (or connects and shakes hands, see `wire`),
//! sends one request, reads one reply within the caller's deadline and returns the connection to
//! the pool. A connection that failed or timed out is dropped, never reused. A peer that cannot
//! be reached is not dialled again before its backoff (`RECONNECT_BACKOFF_MS_*`, doubling) has
//! passed; calls meanwhile fail at once as unreachable, which openraft answers with its own
//! backoff (`RaftNetwork::backoff`).
//!
//! Addresses: a voter is reached at the address this node's `controller.quorum.voters` gives
//! (per node, so it may be a proxy); an observer at the address it registered when it joined
//! (its `BasicNode::addr` in the membership).
//!
//! Follower progress for DescribeQuorum: while this node leads, every AppendEntries a follower or
//! observer answers is its "fetch" (Raft pushes where Kafka's followers pull); one that covered the
//! leader's last entry as the status last published it makes the node caught up at that moment.
//!
//! Locking: the pool map, each pool's idle list and backoff state, and the acks map are short
//! mutexes, never held across an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::codec::CodecError;
use crate::limits::{
    APPEND_ENTRIES_BYTES_MAX, CONNECT_TIMEOUT_MS, IDLE_CONNECTIONS_PER_PEER_MAX,
    OUTBOUND_IDLE_MS_MAX, RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN,
};
use crate::tls::{server_name, Conn, ControllerTlsHandle};
use crate::types::TypeConfig;
use crate::wire::{self, Hello, HelloReply, Reply, Request, PROTOCOL_VERSION};

/// Why a call to a peer failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// Could not connect or shake hands (or the peer is in its reconnect backoff).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The connection failed after the request may have been sent.
    #[error("network: {0}")]
    Network(String),
    /// No reply before the deadline.
    #[error("timed out")]
    Timeout,
    /// The request does not fit in a frame.
    #[error("request of {len} bytes exceeds FRAME_BYTES_MAX")]
    TooLarge { len: usize },
}

#[derive(Debug, Default)]
struct BackoffState {
    failures: u32,
    retry_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Pool {
    idle: Mutex<Vec<(Conn, Instant)>>,
    backoff: Mutex<BackoffState>,
}

impl Pool {
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock();
        let max_idle = Duration::from_millis(OUTBOUND_IDLE_MS_MAX);
        while let Some((conn, since)) = idle.pop() {
            // A connection the peer closed (or wrote to unasked) while it sat idle is stale:
            // sending on it would fail after the request may look sent.
            let mut probe = [0u8; 1];
            let open = matches!(conn.tcp().try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            if open && since.elapsed() < max_idle {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: Conn) {
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_CONNECTIONS_PER_PEER_MAX {
            idle.push((conn, Instant::now()));
        }
    }

    fn in_backoff(&self) -> bool {
        self.backoff
            .lock()
            .retry_at
            .is_some_and(|t| Instant::now() < t)
    }

    fn failed(&self) {
        let mut b = self.backoff.lock();
        b.failures = b.failures.saturating_add(1);
        let ms = RECONNECT_BACKOFF_MS_MIN
            .saturating_mul(1u64 << b.failures.min(16).saturating_sub(1))
            .min(RECONNECT_BACKOFF_MS_MAX);
        b.retry_at = Some(Instant::now() + Duration::from_millis(ms));
    }

    fn succeeded(&self) {
        *self.backoff.lock() = BackoffState::default();
    }
}

/// Outbound connections to every peer of this node.
#[derive(Debug)]
pub struct Peers {
    self_id: u64,
    hello: Vec<u8>,
    voters: BTreeMap<u64, String>,
    pools: Mutex<HashMap<(u64, String), Arc<Pool>>>,
    /// Per peer, what the last AppendEntries it answered told this node.
    acks: Mutex<HashMap<u64, FollowerAck>>,
    /// This node's last log index + 1 as last published (0: an empty log).
    log_end: AtomicU64,
    /// Mutual TLS before the handshake, when the controller listeners are SSL ones.
    tls: Option<ControllerTlsHandle>,
}

/// What a leader last heard from one follower or observer (Kafka's `ReplicaState` times).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FollowerAck {
    /// When it last answered an AppendEntries (ms since the epoch).
    pub last_ack_ms: i64,
    /// When an answer last showed it holding the leader's last entry; `None`: never.
    pub last_caught_up_ms: Option<i64>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Peers {
    /// Peers of node `self_id`, with the configured voter addresses.
    pub fn new(
        self_id: u64,
        voters: BTreeMap<u64, String>,
        tls: Option<ControllerTlsHandle>,
    ) -> Result<Peers, CodecError> {
        let hello = wire::encode_frame(&Hello {
            version: PROTOCOL_VERSION,
            from: self_id,
            voters: voters.keys().copied().collect(),
        })?;
        Ok(Peers {
            self_id,
            hello,
            voters,
            pools: Mutex::new(HashMap::new()),
            acks: Mutex::new(HashMap::new()),
            log_end: AtomicU64::new(0),
            tls,
        })
    }

    /// This node's log now ends after index `last` (`None`: empty).
    pub fn set_log_end(&self, last: Option<u64>) {
        let end = last.map_or(0, |i| i.saturating_add(1));
        self.log_end.store(end, Ordering::Relaxed);
    }

    /// Peer `target` answered an AppendEntries; `holds` = the index its log now matches the
    /// leader's up to, when the answer says so.
    fn note_ack(&self, target: u64, holds: Option<u64>) {
        let now = now_ms();
        let caught_up =
            holds.map_or(0, |i| i.saturating_add(1)) >= self.log_end.load(Ordering::Relaxed);
        let mut acks = self.acks.lock();
        let ack = acks.entry(target).or_default();
        ack.last_ack_ms = now;
        if caught_up {
            ack.last_caught_up_ms = Some(now);
        }
    }

    /// What each peer last told this node.
    pub fn acks(&self) -> HashMap<u64, FollowerAck> {
        self.acks.lock().clone()
    }

    /// The configured address of voter `id`.
    pub fn voter_addr(&self, id: u64) -> Option<&str> {
        self.voters.get(&id).map(String::as_str)
    }

    /// The configured voters.
    pub fn voters(&self) -> &BTreeMap<u64, String> {
        &self.voters
    }

    fn pool(&self, target: u64, addr: &str) -> Arc<Pool> {
        self.pools
            .lock()
            .entry((target, addr.to_string()))
            .or_default()
            .clone()
    }

    /// Sends `req` to node `target` at `addr` and waits for its reply, all within `timeout`.
    pub async fn request(
        &self,
        target: u64,
        addr: &str,
        req: &Request,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        let frame = wire::encode_frame(req).map_err(|e| match e {
            CodecError::TooLarge { len, .. } => CallError::TooLarge { len },
            e => CallError::Network(e.to_string()),
        })?;
        match tokio::time::timeout(timeout, self.exchange(target, addr, &frame)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout),
        }
    }

    async fn exchange(&self, target: u64, addr: &str, frame: &[u8]) -> Result<Reply, CallError> {
        let pool = self.pool(target, addr);
        let mut conn = match pool.take_idle() {
            Some(c) => c,
            None => self.connect(target, addr, &pool).await?,
        };
        let net = |e: &dyn std::fmt::Display| CallError::Network(format!("{addr}: {e}"));
        wire::write_frame(&mut conn, frame)
            .await
            .map_err(|e| net(&e))?;
        let reply = wire::read_frame::<Reply, _>(&mut conn)
            .await
            .map_err(|e| net(&e))?
            .ok_or_else(|| net(&"connection closed before the reply"))?;
        pool.put_idle(conn);
        Ok(reply)
    }

    async fn connect(&self, target: u64, addr: &str, pool: &Pool) -> Result<Conn, CallError> {
        if pool.in_backoff() {
            return Err(CallError::Unreachable(format!(
                "node {target} at {addr}: waiting before reconnecting"
            )));
        }
        let r = tokio::time::timeout(
            Duration::from_millis(CONNECT_TIMEOUT_MS),
            self.handshake(target, addr),
        )
        .await
        .unwrap_or_else(|_| Err("connect and handshake timed out".to_string()));
        match r {
            Ok(conn) => {
                pool.succeeded();
                Ok(conn)
            }
            Err(e) => {
                pool.failed();
                Err(CallError::Unreachable(format!(
                    "node {target} at {addr}: {e}"
                )))
            }
        }
    }

    async fn handshake(&self, target: u64, addr: &str) -> Result<Conn, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let mut conn = match &self.tls {
            None => Conn::Plain(tcp),
            Some(tls) => {
                let connector = tls.0.connector()?;
                let stream = connector
                    .connect(server_name(addr)?, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                Conn::Client(Box::new(stream))
            }
        };
        wire::write_frame(&mut conn, &self.hello)
            .await
            .map_err(|e| e.to_string())?;
        match wire::read_frame::<HelloReply, _>(&mut conn).await {
            Ok(Some(HelloReply::Accepted { node_id })) if node_id == target => Ok(conn),
            Ok(Some(HelloReply::Accepted { node_id })) => Err(format!(
                "reached node {node_id}, not node {target} (check controller.quorum.voters)"
            )),
            Ok(Some(HelloReply::Refused { reason })) => Err(format!("refused: {reason}")),
            Ok(None) => Err("closed during the handshake".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Creates one `PeerClient` per replication target for openraft.
#[derive(Clone)]
pub struct NetworkFactory {
    peers: Arc<Peers>,
}

impl NetworkFactory {
    /// A factory over `peers`.
    pub fn new(peers: Arc<Peers>) -> NetworkFactory {
        NetworkFactory { peers }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        let addr = match self.peers.voter_addr(target) {
            Some(a) => Some(a.to_string()),
            None if !node.addr.is_empty() => Some(node.addr.clone()),
            None => None,
        };
        PeerClient {
            peers: self.peers.clone(),
            target,
            addr,
        }
    }
}

/// openraft's network to one target node.
pub struct PeerClient {
    peers: Arc<Peers>,
    target: u64,
    addr: Option<String>,
}

type RpcErr<E = openraft::error::Infallible> = RPCError<u64, BasicNode, RaftError<u64, E>>;

impl PeerClient {
    async fn send(&self, req: &Request, ttl: Duration) -> Result<Reply, CallError> {
        let Some(addr) = &self.addr else {
            return Err(CallError::Unreachable(format!(
                "no address known for node {}",
                self.target
            )));
        };
        self.peers.request(self.target, addr, req, ttl).await
    }

    fn rpc_error<E: std::error::Error>(
        &self,
        action: RPCTypes,
        ttl: Duration,
        e: CallError,
    ) -> RpcErr<E> {
        match e {
            CallError::Timeout => RPCError::Timeout(Timeout {
                action,
                id: self.peers.self_id,
                target: self.target,
                timeout: ttl,
            }),
            e @ CallError::Unreachable(_) => RPCError::Unreachable(Unreachable::new(&e)),
            e => RPCError::Network(NetworkError::new(&e)),
        }
    }

    fn unexpected<E: std::error::Error>(reply: Reply) -> RpcErr<E> {
        let e = match reply {
            Reply::Refused(reason) => std::io::Error::other(format!("refused: {reason}")),
            other => std::io::Error::other(format!("unexpected reply {other:?}")),
        };
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcErr> {
        let entries = rpc.entries.len() as u64;
        let sent_up_to = rpc
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(rpc.prev_log_id.map(|l| l.index));
        let ttl = option.hard_ttl();
        let req = Request::AppendEntries(rpc);
        if entries > 1 {
            let len = wire::encoded_len(&req).unwrap_or(usize::MAX);
            if len > APPEND_ENTRIES_BYTES_MAX {
                // Ask openraft to resend fewer entries: as many as would fit, at most half.
                let fit = (entries as u128 * APPEND_ENTRIES_BYTES_MAX as u128 / len.max(1) as u128)
                    as u64;
                let hint = fit.clamp(1, entries / 2);
                return Err(PayloadTooLarge::new_entries_hint(hint).into());
            }
        }
        match self.send(&req, ttl).await {
            Ok(Reply::AppendEntries(Ok(r))) => {
                let holds = match &r {
                    AppendEntriesResponse::Success => sent_up_to,
                    AppendEntriesResponse::PartialSuccess(matching) => matching.map(|l| l.index),
                    AppendEntriesResponse::Conflict | AppendEntriesResponse::HigherVote(_) => None,
                };
                self.peers.note_ack(self.target, holds);
                Ok(r)
            }
            Ok(Reply::AppendEntries(Err(e))) => Err(RemoteError::new(self.target, e).into()),
            Ok(other) => Err(Self::unexpected(other)),
            Err(e) => Err(self.rpc_error(RPCTypes::AppendEntries, ttl, e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcErr<InstallSnapshotError>> {
        let ttl = option.hard_ttl();
        match self.send(&Request::InstallSnapshot(rpc), ttl).await {
            Ok(Reply::InstallSnapshot(Ok(r))) => Ok(r),
            Ok(Reply::InstallSnapshot(Err(e))) => Err(RemoteError::new(self.target, e).into()),
            Ok(other) => Err(Self::unexpected(other)),
            Err(e) => Err(self.rpc_error(RPCTypes::InstallSnapshot, ttl, e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcErr> {
        let ttl = option.hard_ttl();
        match self.send(&Request::Vote(rpc), ttl).await {
            Ok(Reply::Vote(Ok(r))) => Ok(r),
            Ok(Reply::Vote(Err(e))) => Err(RemoteError::new(self.target, e).into()),
            Ok(other) => Err(Self::unexpected(other)),
            Err(e) => Err(self.rpc_error(RPCTypes::Vote, ttl, e)),
        }
    }

    fn backoff(&self) -> Backoff {
        let mut ms = RECONNECT_BACKOFF_MS_MIN;
        Backoff::new(std::iter::from_fn(move || {
            let d = Duration::from_millis(ms);
            ms = ms.saturating_mul(2).min(RECONNECT_BACKOFF_MS_MAX);
            Some(d)
        }))
    }
}
