//! Shared helpers for the broker integration tests: a `Broker` process handle, rdkafka client
//! builders, and a raw Kafka-protocol connection for byte-level tests.
//!
//! Every wait here is bounded; a helper that runs out of time panics with what it was waiting for.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a broker may take to print its `listening on` line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a broker may take to exit after SIGTERM.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a broker given a config it cannot honour may take to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// Default bound on one request/response exchange in the tests.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

static TOPIC_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A topic name no other test (or earlier run) uses.
pub fn unique_topic(prefix: &str) -> String {
    let n = TOPIC_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis();
    i64::try_from(ms).expect("ms fits i64")
}

/// A running `millrace` process with its own data directory, kept across restarts.
pub struct Broker {
    child: Option<Child>,
    data_dir: tempfile::TempDir,
    log_dir: tempfile::TempDir,
    addr: SocketAddr,
    ready_line: String,
    extra_args: Vec<String>,
    starts: usize,
    /// Environment variables the process gets on top of the test's (tiered storage's AWS_*).
    env: Vec<(String, String)>,
}

impl Broker {
    /// Starts a broker with extra `--set name=value` settings and environment variables.
    pub fn start_with_env(settings: &[&str], env: &[(String, String)]) -> Broker {
        let args: Vec<String> = settings
            .iter()
            .flat_map(|s| ["--set".to_string(), (*s).to_string()])
            .collect();
        let data_dir = tempfile::tempdir().expect("create data dir");
        Broker::start_in_env(data_dir, &args, env)
    }

    /// Starts a broker on a fresh data directory and a free port.
    pub fn start() -> Broker {
        Broker::start_with(&[])
    }

    /// Starts a broker with extra `--set name=value` settings (given as `name=value`).
    pub fn start_with(settings: &[&str]) -> Broker {
        let args: Vec<String> = settings
            .iter()
            .flat_map(|s| ["--set".to_string(), (*s).to_string()])
            .collect();
        Broker::start_with_args(&args)
    }

    /// Starts a broker with extra command-line arguments.
    pub fn start_with_args(args: &[String]) -> Broker {
        let data_dir = tempfile::tempdir().expect("create data dir");
        Broker::start_in(data_dir, args)
    }

    /// Starts a broker on `data_dir` (e.g. one made inside a test's own file system) with extra
    /// command-line arguments.
    pub fn start_in(data_dir: tempfile::TempDir, args: &[String]) -> Broker {
        Broker::start_in_env(data_dir, args, &[])
    }

    fn start_in_env(
        data_dir: tempfile::TempDir,
        args: &[String],
        env: &[(String, String)],
    ) -> Broker {
        let log_dir = tempfile::tempdir().expect("create log dir");
        let extra_args = args.to_vec();
        let mut broker = Broker {
            child: None,
            data_dir,
            log_dir,
            addr: "127.0.0.1:0".parse().expect("literal addr"),
            ready_line: String::new(),
            extra_args,
            starts: 0,
            env: env.to_vec(),
        };
        broker.spawn("127.0.0.1:0");
        broker
    }

    fn spawn(&mut self, listen: &str) {
        self.spawn_within(listen, STARTUP_TIMEOUT);
    }

    /// Starts the process and waits up to `within` for its `listening on` line.
    fn spawn_within(&mut self, listen: &str, within: Duration) {
        self.starts += 1;
        let log_path = self.log_path(self.starts);
        let log = File::create(&log_path).expect("create broker log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_millrace"))
            .arg("--data-dir")
            .arg(self.data_dir.path())
            .arg("--listen")
            .arg(listen)
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn millrace");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // The reader keeps draining stdout after the ready line so the broker never blocks on it.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Nobody listens any more; keep draining.
                }
            }
        });
        let deadline = Instant::now() + within;
        let (addr, ready_line) = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = parse_listening_line(&line) {
                        break (addr, line);
                    }
                }
                Err(e) => {
                    let status = child.try_wait().ok().flatten();
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "broker did not print `listening on 127.0.0.1:PORT` within {within:?} \
                         ({e:?}; exit status {status:?}); stderr:\n{}",
                        tail_of(&log_path, 60)
                    );
                }
            }
        };
        self.addr = addr;
        self.ready_line = ready_line;
        self.child = Some(child);
    }

    fn log_path(&self, start: usize) -> PathBuf {
        self.log_dir.path().join(format!("broker-{start}.log"))
    }

    /// The bound (and advertised) address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The broker's ready line (`millrace ready: … listening on …`).
    pub fn ready_line(&self) -> &str {
        &self.ready_line
    }

    /// The bound address of listener `name`, from the ready line's listener list.
    pub fn listener_addr(&self, name: &str) -> SocketAddr {
        let prefix = format!("{name}://");
        self.ready_line
            .split([',', ' ', ')'])
            .find_map(|t| t.strip_prefix(&prefix))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.ready_line))
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker is running").id()
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("broker is running");
        child.kill().expect("SIGKILL the broker");
        child.wait().expect("reap the broker");
    }

    /// SIGTERM, then wait (bounded) for the exit; returns the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("broker is running");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("run kill -TERM");
        assert!(status.success(), "kill -TERM failed: {status:?}");
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait on broker") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "broker did not exit within {SHUTDOWN_TIMEOUT:?} after SIGTERM; stderr:\n{}",
                    self.stderr_tail(60)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the broker again on the same data directory and the same port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the broker before restart()");
        let old = self.addr;
        self.spawn(&old.to_string());
        assert_eq!(
            self.addr, old,
            "restarted broker must listen on the requested port"
        );
    }

    /// `restart()`, waiting up to `within` (not `STARTUP_TIMEOUT`) for the ready line: for a
    /// broker that recovers thousands of partitions after a crash.
    pub fn restart_within(&mut self, within: Duration) {
        assert!(self.child.is_none(), "stop the broker before restart()");
        let old = self.addr;
        self.spawn_within(&old.to_string(), within);
        assert_eq!(
            self.addr, old,
            "restarted broker must listen on the requested port"
        );
    }

    /// Starts the broker again on the same data directory and a new free port.
    pub fn restart_on_new_port(&mut self) {
        assert!(self.child.is_none(), "stop the broker before restart()");
        self.spawn("127.0.0.1:0");
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().expect("try_wait on broker").is_none(),
            None => false,
        }
    }

    /// The last `lines` lines of the current run's stderr.
    pub fn stderr_tail(&self, lines: usize) -> String {
        tail_of(&self.log_path(self.starts), lines)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- broker stderr (last run, tail) ----\n{}",
                self.stderr_tail(80)
            );
        }
    }
}

fn parse_listening_line(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on ").nth(1)?;
    let token = rest.split_whitespace().next()?;
    token
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// Runs `millrace` with `args` on a scratch data directory; returns its exit code and stderr.
pub fn run_broker(args: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("data dir");
    run_broker_on(dir.path(), args)
}

/// Runs `millrace` with `args` on `data_dir` until it exits; its exit code and stderr. Panics if
/// it is still running after `EXIT_TIMEOUT` (it accepted what it should have refused).
pub fn run_broker_on(data_dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_millrace"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn millrace");
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "millrace {args:?} still running after {EXIT_TIMEOUT:?}: it accepted the config"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().expect("stderr");
    (
        status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Asserts exit code 2 and a stderr of one line containing every word of `expect`.
pub fn assert_refused(args: &[&str], expect: &[&str]) {
    let (code, stderr) = run_broker(args);
    assert_eq!(
        code,
        Some(2),
        "millrace {args:?}: exit code; stderr:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "millrace {args:?}: expected one line, got:\n{stderr}"
    );
    for word in expect {
        assert!(
            lines[0].contains(word),
            "millrace {args:?}: '{word}' missing from: {}",
            lines[0]
        );
    }
}

fn tail_of(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// rdkafka helpers
// ---------------------------------------------------------------------------------------------

/// A non-idempotent producer (idempotence has its own raw tests in `idempotence.rs`).
pub fn producer(broker: &Broker, extra: &[(&str, &str)]) -> FutureProducer {
    producer_at(&broker.bootstrap(), extra)
}

pub fn producer_at(bootstrap: &str, extra: &[(&str, &str)]) -> FutureProducer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", "20000")
        .set("socket.timeout.ms", "10000")
        .set("acks", "all");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    config.create().expect("create producer")
}

/// A consumer meant for `assign()`: a group id is set but never used for subscribe or commit.
pub fn consumer(broker: &Broker, extra: &[(&str, &str)]) -> StreamConsumer {
    consumer_at(&broker.bootstrap(), extra)
}

pub fn consumer_at(bootstrap: &str, extra: &[(&str, &str)]) -> StreamConsumer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_topic("it-group"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("socket.timeout.ms", "10000")
        .set("fetch.wait.max.ms", "100");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    config.create().expect("create consumer")
}

/// Assigns `(partition, offset)` pairs of one topic.
pub fn assign(consumer: &StreamConsumer, topic: &str, partitions: &[(i32, Offset)]) {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in partitions {
        tpl.add_partition_offset(topic, *p, *o)
            .expect("add partition offset");
    }
    consumer.assign(&tpl).expect("assign");
}

/// Receives exactly `n` messages (panics on a consumer error or when `within` runs out).
pub async fn recv_n(consumer: &StreamConsumer, n: usize, within: Duration) -> Vec<OwnedMessage> {
    let deadline = tokio::time::Instant::now() + within;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => out.push(m.detach()),
            Ok(Err(e)) => panic!("consumer error after {} of {n} messages: {e:?}", out.len()),
            Err(_) => panic!(
                "only {} of {n} messages arrived within {within:?}; last: {:?}",
                out.len(),
                out.last().map(|m| (m.partition(), m.offset()))
            ),
        }
    }
    out
}

/// Asserts that no message arrives within `quiet`.
pub async fn assert_no_message(consumer: &StreamConsumer, quiet: Duration) {
    if let Ok(r) = tokio::time::timeout(quiet, consumer.recv()).await {
        match r {
            Ok(m) => panic!(
                "unexpected message at {}/{}: {:?}",
                m.partition(),
                m.offset(),
                m.payload()
            ),
            Err(e) => panic!("unexpected consumer error: {e:?}"),
        }
    }
}

/// (VmRSS, VmHWM) of `pid` in bytes.
pub fn rss_and_peak(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<usize>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| panic!("{name} missing from /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

// ---------------------------------------------------------------------------------------------
// Raw protocol helpers
// ---------------------------------------------------------------------------------------------

pub const CLIENT_ID: &str = "millrace-it";

/// Encodes `[len][header][body]` for `R` at `version`.
pub fn frame<R: Request>(version: i16, correlation_id: i32, body: &R) -> BytesMut {
    let key = ApiKey::try_from(R::KEY).expect("known key");
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut payload = BytesMut::new();
    header
        .encode(&mut payload, key.request_header_version(version))
        .expect("encode request header");
    body.encode(&mut payload, version)
        .expect("encode request body");
    length_prefixed(&payload)
}

/// Prefixes `payload` with its 4-byte big-endian length.
pub fn length_prefixed(payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(payload.len() + 4);
    out.put_i32(i32::try_from(payload.len()).expect("frame fits i32"));
    out.put_slice(payload);
    out
}

/// How a raw read ended when no full frame arrived.
#[derive(Debug)]
pub enum ReadEnd {
    /// The peer closed (EOF or reset) after `partial` bytes of an unfinished frame.
    Closed { partial: usize },
    /// Nothing (complete) arrived within the timeout.
    TimedOut { partial: usize },
}

/// A byte stream a [`RawConn`] speaks over: TCP, or TLS over TCP.
pub trait ByteStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> ByteStream for T {}

/// One connection that speaks raw frames.
pub struct RawConn {
    pub stream: Box<dyn ByteStream>,
    next_correlation_id: i32,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> RawConn {
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect timed out")
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        RawConn::over(Box::new(stream))
    }

    /// A connection over an established stream (a TLS session, say).
    pub fn over(stream: Box<dyn ByteStream>) -> RawConn {
        RawConn {
            stream,
            next_correlation_id: 1000,
        }
    }

    pub fn next_correlation_id(&mut self) -> i32 {
        self.next_correlation_id += 1;
        self.next_correlation_id
    }

    pub async fn write_all(&mut self, bytes: &[u8]) {
        tokio::time::timeout(IO_TIMEOUT, self.stream.write_all(bytes))
            .await
            .expect("write timed out")
            .expect("write");
    }

    /// Sends one request; returns its correlation id.
    pub async fn send<R: Request>(&mut self, version: i16, body: &R) -> i32 {
        let correlation_id = self.next_correlation_id();
        let bytes = frame(version, correlation_id, body);
        self.write_all(&bytes).await;
        correlation_id
    }

    /// Reads one frame body (without its length prefix).
    pub async fn read_frame(&mut self, within: Duration) -> Result<Bytes, ReadEnd> {
        let mut got = 0usize;
        let fut = async {
            let mut len_buf = [0u8; 4];
            while got < 4 {
                match self.stream.read(&mut len_buf[got..]).await {
                    Ok(0) | Err(_) => return Err(ReadEnd::Closed { partial: got }),
                    Ok(n) => got += n,
                }
            }
            let len = usize::try_from(i32::from_be_bytes(len_buf)).expect("non-negative length");
            let mut body = vec![0u8; len];
            let mut read = 0usize;
            while read < len {
                match self.stream.read(&mut body[read..]).await {
                    Ok(0) | Err(_) => return Err(ReadEnd::Closed { partial: 4 + read }),
                    Ok(n) => {
                        read += n;
                        got = 4 + read;
                    }
                }
            }
            Ok(Bytes::from(body))
        };
        match tokio::time::timeout(within, fut).await {
            Ok(r) => r,
            Err(_) => Err(ReadEnd::TimedOut { partial: got }),
        }
    }

    /// Reads the next frame and decodes it as the response to `R` at `version`, checking the
    /// correlation id.
    pub async fn recv<R: Request>(&mut self, version: i16, correlation_id: i32) -> R::Response {
        let mut body = self
            .read_frame(IO_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("no response to api key {} v{version}: {e:?}", R::KEY));
        let key = ApiKey::try_from(R::KEY).expect("known key");
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .expect("decode response header");
        assert_eq!(
            header.correlation_id,
            correlation_id,
            "response correlation id (api key {} v{version})",
            R::KEY
        );
        let response = R::Response::decode(&mut body, version).expect("decode response body");
        assert!(
            !body.has_remaining(),
            "{} trailing bytes after the response body (api key {} v{version})",
            body.remaining(),
            R::KEY
        );
        response
    }

    /// Sends `body` and waits for its response.
    pub async fn request<R: Request>(&mut self, version: i16, body: &R) -> R::Response {
        let correlation_id = self.send(version, body).await;
        self.recv::<R>(version, correlation_id).await
    }

    /// Asserts that the broker closes this connection within `within` without sending a frame.
    pub async fn expect_closed(&mut self, within: Duration, what: &str) {
        let mut buf = [0u8; 4096];
        let mut received = 0usize;
        let result = tokio::time::timeout(within, async {
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => received += n,
                }
            }
        })
        .await;
        assert!(
            result.is_ok(),
            "{what}: the broker did not close the connection within {within:?} \
             (received {received} bytes meanwhile)"
        );
        assert_eq!(
            received, 0,
            "{what}: the broker sent {received} bytes before closing, expected none"
        );
    }
}

/// ApiVersions v3 on a new connection; panics unless the broker answers with error 0.
pub async fn assert_broker_answers(addr: SocketAddr, what: &str) {
    let mut conn = tokio::time::timeout(IO_TIMEOUT, RawConn::connect(addr))
        .await
        .unwrap_or_else(|_| panic!("{what}: connect timed out"));
    let response = api_versions(&mut conn, 3).await;
    assert_eq!(response.error_code, 0, "{what}: ApiVersions error code");
}

pub fn api_versions_request() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("millrace-it"))
        .with_client_software_version(StrBytes::from_static_str("0.1.0"))
}

pub async fn api_versions(conn: &mut RawConn, version: i16) -> ApiVersionsResponse {
    conn.request(version, &api_versions_request()).await
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Metadata v12 for the given topics (`None` = all topics).
pub async fn metadata(
    conn: &mut RawConn,
    topics: Option<&[&str]>,
    allow_auto_topic_creation: bool,
) -> MetadataResponse {
    let request = MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(allow_auto_topic_creation);
    conn.request(12, &request).await
}

/// Polls Metadata (auto-creating) until every topic reports error 0 and at least one
/// partition; returns the last response.
pub async fn ensure_topics(addr: SocketAddr, topics: &[&str]) -> MetadataResponse {
    let mut conn = RawConn::connect(addr).await;
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let response = metadata(&mut conn, Some(topics), true).await;
        let ready = topics.iter().all(|t| {
            response.topics.iter().any(|rt| {
                rt.name.as_ref().map(|n| n.0.as_str()) == Some(*t)
                    && rt.error_code == 0
                    && !rt.partitions.is_empty()
                    && rt.partitions.iter().all(|p| p.error_code == 0)
            })
        });
        if ready {
            return response;
        }
        assert!(
            Instant::now() < deadline,
            "topics {topics:?} not ready within {IO_TIMEOUT:?}: {:?}",
            response.topics
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A record with a creation timestamp and no headers.
pub fn record(key: Option<&[u8]>, value: Option<&[u8]>, timestamp: i64) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp,
        key: key.map(Bytes::copy_from_slice),
        value: value.map(Bytes::copy_from_slice),
        headers: IndexMap::new(),
    }
}

/// Sets a record's relative offset for `RecordBatchEncoder`, which starts a new batch wherever
/// `offset - sequence` changes: keeping `sequence = offset - 1` keeps one batch whose
/// baseSequence is -1, as a non-idempotent producer writes it.
pub fn set_offset(record: &mut Record, offset: i64) {
    record.offset = offset;
    record.sequence = i32::try_from(offset).expect("small offset") - 1;
}

/// Encodes `records` (offsets 0..n relative) into one uncompressed v2 batch.
pub fn encode_batch(records: &[Record]) -> Bytes {
    let mut records = records.to_vec();
    for (i, r) in records.iter_mut().enumerate() {
        set_offset(r, i64::try_from(i).expect("small index"));
    }
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode batch");
    let batch = buf.freeze();
    let infos = RecordBatchDecoder::decode_batch_info(&mut batch.clone()).expect("batch info");
    assert_eq!(
        infos.len(),
        1,
        "encode_batch must produce exactly one batch"
    );
    batch
}

pub fn produce_request(topic: &str, partition: i32, batch: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])])
}

/// Produce v9 (acks=-1) of one batch; panics unless it succeeds; returns the partition response.
pub async fn produce_batch(
    conn: &mut RawConn,
    topic: &str,
    partition: i32,
    batch: Bytes,
) -> PartitionProduceResponse {
    let response = conn
        .request(9, &produce_request(topic, partition, batch, -1))
        .await;
    assert_eq!(
        response.responses.len(),
        1,
        "one topic in the produce response"
    );
    let topic_response = &response.responses[0];
    assert_eq!(topic_response.name.0.as_str(), topic);
    assert_eq!(topic_response.partition_responses.len(), 1);
    let partition_response = topic_response.partition_responses[0].clone();
    assert_eq!(
        partition_response.error_code, 0,
        "Produce v9 acks=-1 to {topic}/{partition} failed: error_message {:?}, record_errors {:?}",
        partition_response.error_message, partition_response.record_errors
    );
    partition_response
}

pub fn fetch_request(
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(50 * 1024 * 1024)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(10 * 1024 * 1024)])])
}

/// The single partition of a one-topic, one-partition Fetch response.
pub fn only_partition(
    response: &FetchResponse,
) -> &kafka_protocol::messages::fetch_response::PartitionData {
    assert_eq!(response.error_code, 0, "fetch top-level error code");
    assert_eq!(
        response.responses.len(),
        1,
        "one topic in the fetch response"
    );
    assert_eq!(response.responses[0].partitions.len(), 1, "one partition");
    &response.responses[0].partitions[0]
}

/// Decodes all (uncompressed) batches of a fetched `records` field.
pub fn decode_records(records: &Option<Bytes>) -> Vec<Record> {
    let Some(bytes) = records else {
        return Vec::new();
    };
    let mut bytes = bytes.clone();
    let sets = RecordBatchDecoder::decode_all(&mut bytes).expect("decode fetched batches");
    sets.into_iter().flat_map(|s| s.records).collect()
}

/// Headers as an ordered list for comparisons.
pub fn header_list(record: &Record) -> Vec<(String, Option<Bytes>)> {
    record
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.clone()))
        .collect()
}

/// An empty tagged-fields map (for struct literals).
pub fn no_tags() -> BTreeMap<i32, Bytes> {
    BTreeMap::new()
}

/// A zstd frame of raw (stored) blocks: magic, single-segment header with a 4-byte content size,
/// then blocks of at most 128 KiB.
pub fn zstd_stored_frame(data: &[u8]) -> Vec<u8> {
    const BLOCK_MAX: usize = 128 * 1024;
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&0xFD2F_B528u32.to_le_bytes());
    out.push(0xA0);
    out.extend_from_slice(&u32::try_from(data.len()).expect("fits").to_le_bytes());
    let mut chunks: Vec<&[u8]> = data.chunks(BLOCK_MAX).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let last = u32::from(i + 1 == n);
        let header = last | (u32::try_from(chunk.len()).expect("fits") << 3);
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(chunk);
    }
    out
}

/// Reverses `zstd_stored_frame` (also accepts RLE blocks). Panics on compressed blocks: the broker
/// must serve stored batches unchanged, so a recompressed batch is a finding.
pub fn zstd_stored_unframe(frame: &[u8]) -> Vec<u8> {
    assert!(frame.len() >= 5, "zstd frame too short");
    assert_eq!(&frame[..4], &0xFD2F_B528u32.to_le_bytes(), "zstd magic");
    let fhd = frame[4];
    let fcs_flag = fhd >> 6;
    let single_segment = fhd & 0x20 != 0;
    let dict_flag = fhd & 0x03;
    let checksum = fhd & 0x04 != 0;
    let mut at = 5 + usize::from(!single_segment);
    at += [0usize, 1, 2, 4][usize::from(dict_flag)];
    at += match (fcs_flag, single_segment) {
        (0, true) => 1,
        (0, false) => 0,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let mut out = Vec::new();
    loop {
        let h =
            u32::from(frame[at]) | u32::from(frame[at + 1]) << 8 | u32::from(frame[at + 2]) << 16;
        at += 3;
        let last = h & 1 == 1;
        let kind = (h >> 1) & 3;
        let size = usize::try_from(h >> 3).expect("fits");
        match kind {
            0 => {
                out.extend_from_slice(&frame[at..at + size]);
                at += size;
            }
            1 => {
                out.extend(std::iter::repeat_n(frame[at], size));
                at += 1;
            }
            _ => {
                panic!("fetched zstd batch holds a compressed block: the broker rewrote the batch")
            }
        }
        if last {
            break;
        }
    }
    if checksum {
        at += 4;
    }
    assert_eq!(at, frame.len(), "bytes after the zstd frame");
    out
}

/// Encodes `records` (offsets 0..n relative) into one v2 batch with the zstd codec bit, its
/// payload a stored-block zstd frame.
pub fn encode_zstd_batch(records: &[Record]) -> Bytes {
    let mut records = records.to_vec();
    for (i, r) in records.iter_mut().enumerate() {
        set_offset(r, i64::try_from(i).expect("small index"));
    }
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode_with_custom_compression(
        &mut batch,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Zstd,
        },
        Some(|raw: &mut BytesMut, out: &mut BytesMut, c: Compression| {
            assert_eq!(c, Compression::Zstd);
            out.put_slice(&zstd_stored_frame(raw));
            Ok(())
        }),
    )
    .expect("encode zstd batch");
    let batch = batch.freeze();
    let infos = RecordBatchDecoder::decode_batch_info(&mut batch.clone()).expect("batch info");
    assert_eq!(
        infos.len(),
        1,
        "encode_zstd_batch must produce exactly one batch"
    );
    batch
}

/// Asks FindCoordinator for `group` until the coordinator is ready (what clients do before any
/// group request: the first call also creates `__consumer_offsets`).
pub async fn wait_for_coordinator(conn: &mut RawConn, group: &str) {
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let request = kafka_protocol::messages::FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_string()))
            .with_key_type(0);
        let response: kafka_protocol::messages::FindCoordinatorResponse =
            conn.request(2, &request).await;
        // A named coordinator serves; checked once more with a group request, which would
        // answer COORDINATOR_LOAD_IN_PROGRESS (14) if its partition were still loading.
        let loaded = if response.error_code == 0 {
            let describe =
                kafka_protocol::messages::DescribeGroupsRequest::default().with_groups(vec![
                    kafka_protocol::messages::GroupId(StrBytes::from_string(group.to_string())),
                ]);
            let described: kafka_protocol::messages::DescribeGroupsResponse =
                conn.request(3, &describe).await;
            described.groups.first().map(|g| g.error_code) == Some(0)
        } else {
            false
        };
        if loaded {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no loaded coordinator for {group} within {IO_TIMEOUT:?}: {response:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The HTTP listener (`--http-listen`)
// ---------------------------------------------------------------------------------------------

/// A free TCP port on 127.0.0.1 (for `--http-listen`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One HTTP/1.1 request; (status code, body).
pub fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read the answer");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// One HTTP/1.1 request with a body (`content_type` and `body`; no body when `body` is empty);
/// (status code, body). Chunked answers are de-chunked.
pub fn http_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    http_with_headers(addr, method, path, &[("Content-Type", content_type)], body)
}

/// One HTTP/1.1 request with extra `headers` and a body; (status code, body), de-chunked.
pub fn http_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

/// The body of a chunked HTTP/1.1 answer.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}
