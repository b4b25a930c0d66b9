//! `SeaweedFs`: a real S3 server (SeaweedFS's `weed mini`: master, volume server, filer and S3
//! gateway in one process) started for a test, with its data in a tempdir, on free loopback
//! ports below the ephemeral range, with one S3 identity so credentials are checked. `weed mini` rather than
//! `weed server -s3`: its single-node filer skips the 10 s wait for peer filers, so it is ready
//! in about 4 s, also when restarted on old data (with a 1 s master election timeout).
//! Always compiled so that other crates' integration tests (the broker's tiered-storage tests)
//! can start one.
//!
//! The binary: env `MILLRACE_WEED`, else the path `scripts/seaweedfs.sh` prints (it builds and
//! caches SeaweedFS once per machine). The process's output goes to `weed.log` in its tempdir;
//! a start that fails returns the log's tail.
//!
//! Invariants: `start` returns only once the bucket exists and a signed write, read and delete
//! work (bounded by `READY_TIMEOUT`); `stop` kills the process by its PID and waits for it, so
//! its ports are closed when it returns; `start_again` reuses the ports and the data; `Drop`
//! kills it. Only the process started here is ever signalled.
//!
//! Not done here: TLS, several servers, anything but the S3 API the broker uses.

use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::remote_storage::RemoteStorage;

/// How long a start may take until S3 answers a signed write (`weed mini` needs about 4 s).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between readiness polls.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Timeout of one raw HTTP exchange with the filer or the S3 port while waiting.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);
/// SeaweedFS volume size limit: small, so the tempdir stays small.
const VOLUME_SIZE_LIMIT_MB: u32 = 64;
/// Volumes the volume server may create (at most 8 × 64 MiB of data).
const VOLUMES_MAX: u32 = 8;
/// The master's election timeout: a master restarted on its old data waits this long before it
/// leads again (SeaweedFS's default is 10 s).
const ELECTION_TIMEOUT: &str = "1s";
/// Bytes of the log shown when a start fails.
const LOG_TAIL_BYTES: usize = 4096;
/// The lowest port `free_ports` picks (above the well-known and most registered services).
const FIXED_PORTS_MIN: u16 = 20_000;
/// The fewest ports `free_ports` picks among, should the ephemeral range start low.
const FIXED_PORTS_SPAN_MIN: u16 = 4_096;
/// Candidate ports `free_ports` tries before it gives up.
const FREE_PORT_TRIES: usize = 200;
/// Linux's default first ephemeral port, when `ip_local_port_range` cannot be read.
const EPHEMERAL_FLOOR_DEFAULT: u16 = 32_768;

const ACCESS_KEY: &str = "millrace-test";
const SECRET_KEY: &str = "millrace-test-secret";
const BUCKET: &str = "millrace-test";
const REGION: &str = "us-east-1";

/// The ports one SeaweedFS server listens on.
#[derive(Debug, Clone, Copy)]
struct Ports {
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
    s3: u16,
    s3_grpc: u16,
    admin: u16,
    admin_grpc: u16,
}

/// A running SeaweedFS S3 server for one test.
#[derive(Debug)]
pub struct SeaweedFs {
    binary: PathBuf,
    dir: tempfile::TempDir,
    ports: Ports,
    child: Option<Child>,
}

impl SeaweedFs {
    /// Starts a server with a fresh bucket (`bucket()`), waiting until signed requests work.
    pub fn start() -> Result<SeaweedFs, String> {
        let binary = weed_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("millrace-weed")
            .tempdir()
            .map_err(|e| format!("tempdir for SeaweedFS: {e}"))?;
        std::fs::create_dir_all(dir.path().join("data"))
            .map_err(|e| format!("SeaweedFS data dir: {e}"))?;
        let identities = format!(
            r#"{{"identities":[{{"name":"millrace","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
        );
        std::fs::write(dir.path().join("s3.json"), identities)
            .map_err(|e| format!("SeaweedFS identities: {e}"))?;
        let mut server = SeaweedFs {
            binary,
            dir,
            ports: free_ports()?,
            child: None,
        };
        server.spawn()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        server.wait_until(deadline, "the S3 port answers", |s| {
            http_answers(s.ports.s3)
        })?;
        server.wait_until_writable(deadline)?;
        Ok(server)
    }

    /// `http://127.0.0.1:<s3 port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    pub fn bucket(&self) -> String {
        BUCKET.to_string()
    }

    /// The AWS variables a broker process needs to use this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// `env()` as the lookup `RemoteStorage::from_url` takes.
    pub fn env_lookup(&self) -> impl Fn(&str) -> Option<String> + Send + Sync + 'static {
        let vars = self.env();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// `s3://<bucket>/<prefix>` (`s3://<bucket>` for an empty prefix).
    pub fn url(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("s3://{BUCKET}")
        } else {
            format!("s3://{BUCKET}/{prefix}")
        }
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("weed.log")
    }

    /// Kills the server (SIGKILL, by PID) and waits for it: an outage from now on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Already exited is fine: either way it is gone once `wait` returns.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same ports and data after `stop`, waiting until signed
    /// requests work.
    pub fn start_again(&mut self) -> Result<(), String> {
        self.stop();
        self.spawn()?;
        self.wait_until_writable(Instant::now() + READY_TIMEOUT)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let p = self.ports;
        let dir = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("SeaweedFS log: {e}"))?;
        let log_too = log.try_clone().map_err(|e| format!("SeaweedFS log: {e}"))?;
        let args = [
            "mini".to_string(),
            format!("-dir={}", dir.join("data").display()),
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
            format!("-master.port={}", p.master),
            format!("-master.port.grpc={}", p.master_grpc),
            format!("-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}"),
            format!("-master.electionTimeout={ELECTION_TIMEOUT}"),
            "-master.telemetry=false".to_string(),
            format!("-volume.port={}", p.volume),
            format!("-volume.port.grpc={}", p.volume_grpc),
            format!("-volume.max={VOLUMES_MAX}"),
            format!("-filer.port={}", p.filer),
            format!("-filer.port.grpc={}", p.filer_grpc),
            format!("-filer.localSocket={}", dir.join("filer.sock").display()),
            "-webdav=false".to_string(),
            "-admin.ui=false".to_string(),
            format!("-admin.port={}", p.admin),
            format!("-admin.port.grpc={}", p.admin_grpc),
            "-admin.port.legacy=0".to_string(),
            format!("-bucket={BUCKET}"),
            format!("-s3.port={}", p.s3),
            format!("-s3.port.grpc={}", p.s3_grpc),
            "-s3.port.iceberg=0".to_string(),
            "-s3.port.lance=0".to_string(),
            format!("-s3.localSocket={}", dir.join("s3.sock").display()),
            format!("-s3.config={}", dir.join("s3.json").display()),
        ];
        let child = Command::new(&self.binary)
            .args(&args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_too)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls `ready` until it holds, the deadline passes, or the process exits.
    fn wait_until(
        &mut self,
        deadline: Instant,
        what: &str,
        ready: impl Fn(&SeaweedFs) -> bool,
    ) -> Result<(), String> {
        loop {
            if ready(self) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(self.failure(&format!("SeaweedFS exited ({status}) before {what}")));
                }
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "SeaweedFS: {what} did not happen within {READY_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until a signed write, read and delete through `RemoteStorage` work (the volume
    /// server has registered and a volume is writable).
    fn wait_until_writable(&mut self, deadline: Instant) -> Result<(), String> {
        let url = self.url("");
        let lookup = self.env_lookup();
        let storage = RemoteStorage::from_url(&url, lookup, 0).map_err(|e| e.to_string())?;
        let last_error = std::cell::RefCell::new(String::new());
        self.wait_until(deadline, "a signed write works", |_| {
            match probe_blocking(&storage) {
                Ok(()) => true,
                Err(e) => {
                    *last_error.borrow_mut() = e;
                    false
                }
            }
        })
        .map_err(|e| format!("{e}\nthe last probe failed with: {}", last_error.borrow()))
    }

    fn failure(&mut self, what: &str) -> String {
        self.stop();
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        let tail = &log[log.len().saturating_sub(LOG_TAIL_BYTES)..];
        format!(
            "{what}; its log ({}) ends:\n{}",
            self.log_path().display(),
            String::from_utf8_lossy(tail)
        )
    }

    /// The gRPC unix sockets SeaweedFS makes in /tmp, named by our ports.
    fn grpc_sockets(&self) -> Vec<PathBuf> {
        let p = self.ports;
        [
            ("master", p.master_grpc),
            ("volume", p.volume_grpc),
            ("filer", p.filer_grpc),
            ("s3", p.s3_grpc),
            ("admin", p.admin_grpc),
        ]
        .into_iter()
        .map(|(role, port)| PathBuf::from(format!("/tmp/seaweedfs-{role}-grpc-{port}.sock")))
        .collect()
    }
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        self.stop();
        for socket in self.grpc_sockets() {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// `RemoteStorage::probe` from synchronous code: on a thread of its own with its own runtime,
/// so it works whether or not the caller is inside a Tokio runtime.
fn probe_blocking(storage: &RemoteStorage) -> Result<(), String> {
    let storage = storage.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(storage.probe()).map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "the probe thread panicked".to_string())?
}

/// The `weed` binary: `MILLRACE_WEED`, else what `scripts/seaweedfs.sh` prints.
fn weed_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("MILLRACE_WEED") {
        return Ok(PathBuf::from(path));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/seaweedfs.sh");
    let output = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!("{} failed: {}", script.display(), output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .last()
        .ok_or_else(|| format!("{} printed no path", script.display()))?;
    Ok(PathBuf::from(path.trim()))
}

/// Ten distinct free loopback ports below the ephemeral range, held together while chosen so
/// that they differ. Below it because the kernel hands ephemeral ports to outbound connections
/// and to other processes' `bind(0)`: a port from `bind(0)` released for SeaweedFS to bind a
/// few seconds later could be taken meanwhile (a filer gRPC port was, once, by a test alongside;
/// `weed mini` itself warns about such ports). Chosen at random, so that tests alongside rarely
/// pick the same ones (and `weed mini` moves off one that is taken when it starts).
fn free_ports() -> Result<Ports, String> {
    let floor = ephemeral_floor();
    let low = FIXED_PORTS_MIN.min(floor.saturating_sub(FIXED_PORTS_SPAN_MIN));
    let span = u64::from(floor - low);
    let mut seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(10);
    for _ in 0..FREE_PORT_TRIES {
        if listeners.len() == 10 {
            break;
        }
        // xorshift: enough to spread the candidates over the range.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = low + u16::try_from(seed % span).unwrap_or(0);
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    if listeners.len() < 10 {
        return Err(format!(
            "free ports: found {} of 10 free below {floor} in {FREE_PORT_TRIES} tries",
            listeners.len()
        ));
    }
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("free ports: {e}"))?;
    let [master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin, admin_grpc] =
        ports[..]
    else {
        return Err("free ports: not ten".to_string());
    };
    Ok(Ports {
        master,
        master_grpc,
        volume,
        volume_grpc,
        filer,
        filer_grpc,
        s3,
        s3_grpc,
        admin,
        admin_grpc,
    })
}

/// The first port of the kernel's ephemeral range (`net.ipv4.ip_local_port_range`).
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|&floor: &u16| floor > FIXED_PORTS_SPAN_MIN)
        .unwrap_or(EPHEMERAL_FLOOR_DEFAULT)
}

/// True when an HTTP server answers `GET /` on 127.0.0.1:`port` (any status).
fn http_answers(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT) else {
        return false;
    };
    let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 5];
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).is_ok()
        && stream.set_write_timeout(Some(HTTP_TIMEOUT)).is_ok()
        && stream.write_all(request.as_bytes()).is_ok()
        && stream.read_exact(&mut head).is_ok()
        && &head == b"HTTP/"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_ten_distinct_ones_below_the_ephemeral_range() {
        let p = free_ports().expect("free ports");
        let mut all = vec![
            p.master,
            p.master_grpc,
            p.volume,
            p.volume_grpc,
            p.filer,
            p.filer_grpc,
            p.s3,
            p.s3_grpc,
            p.admin,
            p.admin_grpc,
        ];
        assert!(all.iter().all(|&port| port < ephemeral_floor()), "{all:?}");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 10);
    }
}
