//! A cluster of real `millrace` processes on loopback for the multi-broker tests: node `i` runs
//! with `--node-id i --data-dir Di --listen 127.0.0.1:Ki --controller-listen 127.0.0.1:Ci
//! --controller-voters 1@127.0.0.1:C1,...`, and is up once it printed its `millrace ready` line.
//! Nodes past the voters are broker-only (`process.roles=broker`, observers of the quorum), so a
//! test can stop them without losing the controller majority. Nodes can be stopped (SIGTERM:
//! controlled shutdown), killed (SIGKILL) and restarted on the same ports and data directory.
//!
//! Every wait is bounded; a helper that runs out of time panics with what it waited for and the
//! tail of the node's log. Dropping the cluster kills every process still running.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a node may take to print `millrace ready` (the quorum elects a leader first).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node may take to exit after SIGTERM (controlled shutdown included).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

struct Node {
    id: i32,
    voter: bool,
    client_port: u16,
    controller_port: u16,
    /// `--http-listen` (/metrics).
    http_port: u16,
    data_dir: PathBuf,
    child: Option<Child>,
    starts: usize,
    /// The last `millrace ready` line (its listener list names every listener's address).
    ready_line: String,
}

/// A running cluster; nodes are numbered 1..=n.
pub struct TestCluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    voters: String,
    settings: Vec<String>,
    /// Further log dirs of some nodes (`log.dirs` = data dir, then these).
    extra_log_dirs: Vec<(i32, PathBuf)>,
    /// Environment variables every node gets on top of the test's (tiered storage's AWS_*).
    env: Vec<(String, String)>,
}

/// Ports are picked below Linux's ephemeral range (32768-60999), where no outgoing connection of
/// the nodes themselves can take a port between its choice and the node's bind.
const PORT_RANGE: std::ops::Range<u16> = 20_000..32_000;
/// Attempts at starting a cluster whose ports another process took meanwhile.
const START_ATTEMPTS: usize = 3;

/// Ports handed out in this test process, never handed out twice.
static USED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
static PORT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A port of `PORT_RANGE` that binds now and was not handed out before in this process.
fn free_port() -> u16 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let span = u64::from(PORT_RANGE.end - PORT_RANGE.start);
    for _ in 0..1000 {
        // A mix of (time, pid, counter): concurrent test processes pick different ports.
        let n = PORT_COUNTER.fetch_add(1, Ordering::Relaxed);
        let x = (nanos ^ (u64::from(std::process::id()) << 20) ^ n.wrapping_mul(0x9E37_79B9))
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let port = PORT_RANGE.start + u16::try_from((x >> 33) % span).expect("in range");
        let mut used = USED_PORTS.lock().expect("port set");
        if used.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        used.insert(port);
        return port;
    }
    panic!("no free port in {PORT_RANGE:?}");
}

impl TestCluster {
    /// Starts `n` nodes, all quorum voters, with extra `name=value` broker settings, and waits
    /// until each is ready.
    pub fn start(n: i32, settings: &[&str]) -> TestCluster {
        TestCluster::start_mixed(n, 0, settings)
    }

    /// Starts `voters` quorum voters (ids 1..=voters) and `brokers` broker-only nodes (the ids
    /// after them). A start that loses a port to another process is tried again on new ports.
    pub fn start_mixed(voters: i32, brokers: i32, settings: &[&str]) -> TestCluster {
        TestCluster::start_with_log_dirs(voters, brokers, settings, &[])
    }

    /// As `start_mixed`, where node `id` of each `(id, dir)` also has log dir `dir` (its
    /// `log.dirs` is its data dir followed by these, in order).
    pub fn start_with_log_dirs(
        voters: i32,
        brokers: i32,
        settings: &[&str],
        extra_log_dirs: &[(i32, PathBuf)],
    ) -> TestCluster {
        TestCluster::start_full(voters, brokers, settings, extra_log_dirs, &[])
    }

    /// `n` voters with extra settings and environment variables for every node.
    pub fn start_with_env(n: i32, settings: &[&str], env: &[(String, String)]) -> TestCluster {
        TestCluster::start_full(n, 0, settings, &[], env)
    }

    fn start_full(
        voters: i32,
        brokers: i32,
        settings: &[&str],
        extra_log_dirs: &[(i32, PathBuf)],
        env: &[(String, String)],
    ) -> TestCluster {
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = TestCluster::new(voters, brokers, settings);
            cluster.extra_log_dirs = extra_log_dirs.to_vec();
            cluster.env = env.to_vec();
            match cluster.start_all() {
                Ok(()) => return cluster,
                Err(id) if attempt < START_ATTEMPTS => {
                    eprintln!("node {id} lost a port to another process; starting over");
                }
                Err(id) => panic!(
                    "node {id} could not bind its ports in {START_ATTEMPTS} attempts; log:\n{}",
                    cluster.log_tail(id, 30)
                ),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn new(voters: i32, brokers: i32, settings: &[&str]) -> TestCluster {
        let dir = tempfile::tempdir().expect("cluster dir");
        let nodes: Vec<Node> = (1..=voters + brokers)
            .map(|id| Node {
                id,
                voter: id <= voters,
                client_port: free_port(),
                controller_port: free_port(),
                http_port: free_port(),
                data_dir: dir.path().join(format!("node{id}")),
                child: None,
                starts: 0,
                ready_line: String::new(),
            })
            .collect();
        let voters = nodes
            .iter()
            .filter(|node| node.voter)
            .map(|node| format!("{}@127.0.0.1:{}", node.id, node.controller_port))
            .collect::<Vec<_>>()
            .join(",");
        TestCluster {
            dir,
            nodes,
            voters,
            settings: settings.iter().map(|s| (*s).to_string()).collect(),
            extra_log_dirs: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Starts every node and waits until each is ready; `Err(id)` when node `id` found a port
    /// taken (every node is then killed).
    fn start_all(&mut self) -> Result<(), i32> {
        // A quorum needs a majority: start every process before waiting for any.
        let ids: Vec<i32> = self.nodes.iter().map(|node| node.id).collect();
        let waits: Vec<(i32, mpsc::Receiver<String>)> =
            ids.iter().map(|&id| (id, self.spawn(id))).collect();
        for (id, lines) in waits {
            if let Err(e) = self.try_wait_ready(id, &lines) {
                if self.log_tail(id, 5).contains("Address already in use") {
                    for node in &mut self.nodes {
                        if let Some(mut child) = node.child.take() {
                            let _ = child.kill();
                            let _ = child.wait();
                        }
                    }
                    return Err(id);
                }
                panic!("{e}");
            }
        }
        Ok(())
    }

    fn node(&self, id: i32) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    fn node_mut(&mut self, id: i32) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    fn log_path(&self, id: i32, start: usize) -> PathBuf {
        self.dir.path().join(format!("node{id}-{start}.log"))
    }

    /// Starts node `id`'s process; returns its stdout lines.
    fn spawn(&mut self, id: i32) -> mpsc::Receiver<String> {
        let voters = self.voters.clone();
        let settings = self.settings.clone();
        let start = {
            let node = self.node_mut(id);
            assert!(node.child.is_none(), "node {id} is already running");
            node.starts += 1;
            node.starts
        };
        let log_path = self.log_path(id, start);
        let node = self.node(id);
        let log = File::create(&log_path).expect("create node log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_millrace"));
        let extra: Vec<String> = self
            .extra_log_dirs
            .iter()
            .filter(|(n, _)| *n == id)
            .map(|(_, d)| d.display().to_string())
            .collect();
        command.arg("--node-id").arg(id.to_string());
        if extra.is_empty() {
            command.arg("--data-dir").arg(&node.data_dir);
        } else {
            let dirs = std::iter::once(node.data_dir.display().to_string())
                .chain(extra)
                .collect::<Vec<_>>()
                .join(",");
            command.arg("--set").arg(format!("log.dirs={dirs}"));
        }
        command
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", node.client_port))
            .arg("--controller-listen")
            .arg(format!("127.0.0.1:{}", node.controller_port))
            .arg("--controller-voters")
            .arg(voters)
            .arg("--http-listen")
            .arg(format!("127.0.0.1:{}", node.http_port));
        if !node.voter {
            command.arg("--set").arg("process.roles=broker");
        }
        for s in &settings {
            command.arg("--set").arg(s);
        }
        let mut child = command
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn millrace");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // Keeps draining stdout after the ready line so the node never blocks on it.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        self.node_mut(id).child = Some(child);
        rx
    }

    fn wait_ready(&mut self, id: i32, lines: &mpsc::Receiver<String>) {
        if let Err(e) = self.try_wait_ready(id, lines) {
            panic!("{e}");
        }
    }

    fn try_wait_ready(&mut self, id: i32, lines: &mpsc::Receiver<String>) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.starts_with("millrace ready") => {
                    self.node_mut(id).ready_line = line;
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => {
                    let status = self
                        .node_mut(id)
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten());
                    return Err(format!(
                        "node {id} did not print `millrace ready` within {READY_TIMEOUT:?} ({e:?}; \
                         exit status {status:?}); log:\n{}",
                        self.log_tail(id, 60)
                    ));
                }
            }
        }
    }

    /// The address of node `id`'s listener `name`, from its ready line.
    pub fn listener_addr(&self, id: i32, name: &str) -> SocketAddr {
        let line = &self.node(id).ready_line;
        let prefix = format!("{name}://");
        line.split([',', ' ', ')'])
            .find_map(|t| t.strip_prefix(&prefix))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no listener {name} in node {id}'s {line:?}"))
    }

    /// The node's Kafka listener.
    /// Node `id`'s controller listener.
    pub fn controller_addr(&self, id: i32) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.node(id).controller_port))
    }

    pub fn addr(&self, id: i32) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.node(id).client_port))
    }

    /// `host:port,...` of every node, for `bootstrap.servers`.
    /// The node's `/metrics` text (empty when it cannot be read).
    pub fn metrics(&self, id: i32) -> String {
        use std::io::Write;
        let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", self.node(id).http_port))
        else {
            return String::new();
        };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = conn
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let mut text = String::new();
        let _ = conn.read_to_string(&mut text);
        text
    }

    /// A metric's value in the node's `/metrics` (`name` with its labels, as printed), if served.
    /// Node `id`'s HTTP listener.
    pub fn http_addr(&self, id: i32) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.node(id).http_port))
    }

    pub fn metric(&self, id: i32, name: &str) -> Option<f64> {
        self.metrics(id).lines().find_map(|line| {
            let (n, value) = line.rsplit_once(' ')?;
            (n == name).then(|| value.parse().ok()).flatten()
        })
    }

    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn data_dir(&self, id: i32) -> &Path {
        &self.node(id).data_dir
    }

    pub fn is_running(&self, id: i32) -> bool {
        self.node(id).child.is_some()
    }

    /// The ids of the nodes whose processes run.
    pub fn running(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .filter(|node| node.child.is_some())
            .map(|node| node.id)
            .collect()
    }

    /// SIGTERM (the node moves its leaderships away first), then waits for the exit.
    pub fn stop(&mut self, id: i32) {
        let mut child = self
            .node_mut(id)
            .child
            .take()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("run kill -TERM");
        assert!(status.success(), "kill -TERM failed: {status:?}");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if child.try_wait().expect("try_wait").is_some() {
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "node {id} did not exit within {STOP_TIMEOUT:?} of SIGTERM; log:\n{}",
                    self.log_tail(id, 60)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self, id: i32) {
        let mut child = self
            .node_mut(id)
            .child
            .take()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        child.kill().expect("SIGKILL the node");
        child.wait().expect("reap the node");
    }

    /// Starts a stopped node again (same ports and data) and waits until it is ready.
    pub fn restart(&mut self, id: i32) {
        let lines = self.spawn(id);
        self.wait_ready(id, &lines);
    }

    /// The last `lines` lines of the node's log of its latest start.
    pub fn log_tail(&self, id: i32, lines: usize) -> String {
        let node = self.node(id);
        let mut text = String::new();
        if let Ok(mut f) = File::open(self.log_path(id, node.starts)) {
            let _ = f.read_to_string(&mut text);
        }
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
