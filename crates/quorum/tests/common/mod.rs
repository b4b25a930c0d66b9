//! Shared helpers for the quorum's integration tests: a recording state machine, an echoing RPC
//! handler, nodes on free loopback ports, and bounded waits.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use millrace_quorum::disk::Disk;
use millrace_quorum::testing::MemDisk;
use millrace_quorum::{
    NodeState, Quorum, QuorumConfig, QuorumStatus, Role, RpcHandler, StartOptions, StateMachine,
};
use parking_lot::Mutex;
use tokio::net::TcpListener;

/// Records every applied entry; the snapshot is the whole list.
#[derive(Default)]
pub struct RecordingSm {
    pub applied: Mutex<Vec<(u64, Vec<u8>)>>,
    pub restores: AtomicU64,
}

impl RecordingSm {
    pub fn entries(&self) -> Vec<(u64, Vec<u8>)> {
        self.applied.lock().clone()
    }
    pub fn payloads(&self) -> Vec<Vec<u8>> {
        self.applied.lock().iter().map(|(_, p)| p.clone()).collect()
    }
    pub fn restores(&self) -> u64 {
        self.restores.load(Ordering::SeqCst)
    }
}

impl StateMachine for RecordingSm {
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8> {
        let mut applied = self.applied.lock();
        if let Some((last, _)) = applied.last() {
            assert!(index > *last, "apply went backwards: {index} after {last}");
        }
        applied.push((index, payload.to_vec()));
        format!("applied:{index}").into_bytes()
    }
    fn snapshot(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for (i, p) in self.applied.lock().iter() {
            out.extend_from_slice(&i.to_be_bytes());
            out.extend_from_slice(&(p.len() as u32).to_be_bytes());
            out.extend_from_slice(p);
        }
        Ok(out)
    }
    fn restore(&self, _last_index: u64, mut snap: &[u8]) -> Result<(), String> {
        let mut entries = Vec::new();
        while !snap.is_empty() {
            if snap.len() < 12 {
                return Err("short".into());
            }
            let i = u64::from_be_bytes(snap[..8].try_into().expect("8 bytes"));
            let n = u32::from_be_bytes(snap[8..12].try_into().expect("4 bytes")) as usize;
            let p = snap.get(12..12 + n).ok_or("short payload")?;
            entries.push((i, p.to_vec()));
            snap = &snap[12 + n..];
        }
        *self.applied.lock() = entries;
        self.restores.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Answers `from:<id>:<payload>`; a payload `sleep` sleeps 5 s first.
pub struct EchoRpc;

impl RpcHandler for EchoRpc {
    fn handle(&self, from: Option<u64>, payload: Vec<u8>) -> BoxFuture<'static, Vec<u8>> {
        Box::pin(async move {
            if payload == b"sleep" {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            let mut out = format!("from:{}:", from.unwrap_or(0)).into_bytes();
            out.extend_from_slice(&payload);
            out
        })
    }
}

/// Timings fast enough for tests, slow enough for a loaded 2-core machine.
pub fn fast(mut c: QuorumConfig) -> QuorumConfig {
    c.election_timeout_min_ms = 500;
    c.election_timeout_max_ms = 1000;
    c.heartbeat_interval_ms = 100;
    c.propose_timeout_ms = 10_000;
    c
}

/// One node of a test cluster.
pub struct Node {
    pub id: u64,
    pub dir: PathBuf,
    pub addr: SocketAddr,
    pub role: Role,
    pub sm: Arc<RecordingSm>,
    pub quorum: Option<Quorum>,
}

impl Node {
    pub fn q(&self) -> &Quorum {
        self.quorum.as_ref().expect("node is running")
    }
    pub fn status(&self) -> QuorumStatus {
        self.q().watch().borrow().clone()
    }
}

/// A set of nodes sharing a voter map, each on its own free loopback port and directory.
pub struct Cluster {
    pub root: tempfile::TempDir,
    /// When set, each node runs on its own in-memory disk (for crash models).
    pub mem: Option<BTreeMap<u64, MemDisk>>,
    pub voters: BTreeMap<u64, String>,
    /// Per node, the voter addresses it dials instead of `voters` (a proxy in between).
    pub voter_views: BTreeMap<u64, BTreeMap<u64, String>>,
    pub nodes: BTreeMap<u64, Node>,
    pub tweak: fn(QuorumConfig) -> QuorumConfig,
}

pub async fn free_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free loopback port")
}

impl Cluster {
    /// Reserves ports for voters `voter_ids` and observers `observer_ids` (nothing started).
    pub async fn new(
        voter_ids: &[u64],
        observer_ids: &[u64],
        tweak: fn(QuorumConfig) -> QuorumConfig,
    ) -> (Cluster, BTreeMap<u64, TcpListener>) {
        init_tracing();
        let root = tempfile::tempdir().expect("create a temp dir");
        let mut listeners = BTreeMap::new();
        let mut voters = BTreeMap::new();
        let mut nodes = BTreeMap::new();
        for &id in voter_ids.iter().chain(observer_ids) {
            let l = free_listener().await;
            let addr = l.local_addr().expect("listener address");
            let role = if voter_ids.contains(&id) {
                Role::Voter
            } else {
                Role::Observer
            };
            if role == Role::Voter {
                voters.insert(id, addr.to_string());
            }
            listeners.insert(id, l);
            nodes.insert(
                id,
                Node {
                    id,
                    dir: root.path().join(format!("node-{id}")),
                    addr,
                    role,
                    sm: Arc::new(RecordingSm::default()),
                    quorum: None,
                },
            );
        }
        (
            Cluster {
                root,
                mem: None,
                voters,
                voter_views: BTreeMap::new(),
                nodes,
                tweak,
            },
            listeners,
        )
    }

    /// Gives every node its own in-memory disk.
    pub fn use_mem_disks(&mut self) {
        self.mem = Some(self.nodes.keys().map(|id| (*id, MemDisk::new())).collect());
    }

    fn disk(&self, id: u64) -> Option<Arc<dyn Disk>> {
        let mem = self.mem.as_ref()?.get(&id)?.clone();
        Some(Arc::new(mem))
    }

    pub fn config(&self, id: u64) -> QuorumConfig {
        let n = &self.nodes[&id];
        (self.tweak)(QuorumConfig::new(
            id,
            n.dir.clone(),
            n.role,
            self.voter_views.get(&id).unwrap_or(&self.voters).clone(),
            Some(n.addr),
        ))
    }

    /// Starts node `id` with a fresh state machine (on `listener`, or binding its address again).
    pub async fn start(&mut self, id: u64, listener: Option<TcpListener>) {
        let config = self.config(id);
        let sm = Arc::new(RecordingSm::default());
        let disk = self.disk(id);
        let q = Quorum::start_with(
            config,
            StartOptions { listener, disk },
            sm.clone(),
            Arc::new(EchoRpc),
        )
        .await
        .expect("start node");
        let n = self.nodes.get_mut(&id).expect("known node");
        n.sm = sm;
        n.quorum = Some(q);
    }

    /// Starts every node concurrently on its reserved listener.
    pub async fn start_all(&mut self, mut listeners: BTreeMap<u64, TcpListener>) {
        let mut starts = Vec::new();
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            let config = self.config(id);
            let sm = Arc::new(RecordingSm::default());
            let listener = listeners.remove(&id);
            let disk = self.disk(id);
            starts.push(async move {
                let q = Quorum::start_with(
                    config,
                    StartOptions { listener, disk },
                    sm.clone(),
                    Arc::new(EchoRpc),
                )
                .await
                .expect("start node");
                (id, q, sm)
            });
        }
        for (id, q, sm) in futures::future::join_all(starts).await {
            let n = self.nodes.get_mut(&id).expect("known node");
            n.sm = sm;
            n.quorum = Some(q);
        }
    }

    pub async fn stop(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).expect("known node");
        let q = node.quorum.take().expect("node is running");
        q.shutdown().await.expect("clean shutdown");
    }

    pub fn running(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values().filter(|n| n.quorum.is_some())
    }

    /// Waits until every running voter agrees on one leader (itself a running voter) and
    /// term; returns the leader's id.
    pub async fn agreed_leader(&self, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            let statuses: Vec<QuorumStatus> = self.running().map(|n| n.status()).collect();
            let leader = statuses.first().and_then(|s| s.leader);
            let term = statuses.first().map(|s| s.term);
            if let Some(l) = leader {
                let leader_running = self.nodes.get(&l).is_some_and(|n| n.quorum.is_some());
                let leaders = statuses
                    .iter()
                    .filter(|s| s.state == NodeState::Leader)
                    .count();
                if leader_running
                    && leaders == 1
                    && statuses
                        .iter()
                        .all(|s| s.leader == Some(l) && Some(s.term) == term)
                    && self.nodes[&l].status().is_leader
                {
                    return l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within {within:?}: {statuses:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every running node has applied exactly `expected` payloads (in order).
    pub async fn all_applied(&self, expected: &[Vec<u8>], within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let all = self.running().all(|n| n.sm.payloads() == expected);
            if all {
                return;
            }
            if Instant::now() >= deadline {
                for n in self.running() {
                    eprintln!(
                        "node {}: {} applied, status {:?}",
                        n.id,
                        n.sm.payloads().len(),
                        n.status()
                    );
                }
                panic!(
                    "not every node applied the {} expected entries within {within:?}",
                    expected.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Logs to the test's output when `RUST_LOG` is set (e.g. `RUST_LOG=openraft=debug`).
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
pub async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a single voter on `disk` (no listener).
pub async fn start_single(
    id: u64,
    dir: &Path,
    disk: Option<Arc<dyn Disk>>,
    sm: Arc<RecordingSm>,
) -> Result<Quorum, millrace_quorum::QuorumError> {
    Quorum::start_with(
        QuorumConfig::single_node(id, dir),
        StartOptions {
            listener: None,
            disk,
        },
        sm,
        Arc::new(EchoRpc),
    )
    .await
}
