//! The operator's view of a real broker process: `--log-format json` writes one JSON object per
//! stderr line, and the HTTP listener answers `/health`, `/ready`, `/metrics` and refuses what it
//! does not serve (the metric values themselves are checked with real clients in
//! compat-tests/python/test_metrics.py).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{free_port, http, Broker};

#[test]
fn json_logs_and_the_http_endpoints() {
    let port = free_port();
    let broker = Broker::start_with_args(&[
        "--log-format".to_string(),
        "json".to_string(),
        "--http-listen".to_string(),
        format!("127.0.0.1:{port}"),
    ]);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");

    assert_eq!(http(addr, "GET", "/health"), (200, "ok\n".to_string()));
    // Ready once the ready line is out and nothing is left to load (no group has been used yet).
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let answer = http(addr, "GET", "/ready");
        if answer.0 == 200 || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready, (200, "ready\n".to_string()));
    let (status, metrics) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("\nmillrace_ready 1\n"), "{metrics}");
    assert!(metrics.contains("# TYPE millrace_log_flush_duration_seconds histogram"));
    assert_eq!(http(addr, "GET", "/nope").0, 404);
    assert_eq!(http(addr, "POST", "/metrics").0, 405);

    let stderr = broker.stderr_tail(1_000);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 5, "{stderr}");
    for line in &lines {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        assert!(
            event.get("timestamp").is_some() && event.get("level").is_some(),
            "{line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"message\":\"store opened\"")),
        "{stderr}"
    );
}

#[test]
fn a_bad_http_listen_address_is_a_settings_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_millrace"))
        .args(["--http-listen", "nowhere", "--data-dir"])
        .arg(tempfile::tempdir().expect("dir").path())
        .output()
        .expect("run millrace");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("millrace.http.listen"), "{stderr}");
}

/// `millrace_requests_in_flight` as /metrics shows it.
fn in_flight(addr: SocketAddr) -> Option<i64> {
    let (_, metrics) = http(addr, "GET", "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("millrace_requests_in_flight "))
        .and_then(|v| v.trim().parse().ok())
}

fn wait_in_flight(addr: SocketAddr, want: i64, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let now = in_flight(addr);
        if now == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: millrace_requests_in_flight is {now:?}, expected {want} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A client that goes away leaves no work behind: its long poll (25 s here) is dropped when the
/// connection closes, not finished for no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_clients_parked_fetch_is_dropped() {
    let port = free_port();
    let broker =
        Broker::start_with_args(&["--http-listen".to_string(), format!("127.0.0.1:{port}")]);
    let http_addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let topic = common::unique_topic("gone");
    common::ensure_topics(broker.addr(), &[&topic]).await;
    let idle = Duration::from_secs(10);
    tokio::task::spawn_blocking(move || wait_in_flight(http_addr, 0, idle, "before the fetch"))
        .await
        .expect("poll");

    let mut conn = common::RawConn::connect(broker.addr()).await;
    conn.send(12, &common::fetch_request(&topic, 0, 0, 25_000, 1))
        .await;
    tokio::task::spawn_blocking(move || {
        wait_in_flight(http_addr, 1, Duration::from_secs(10), "fetch parked")
    })
    .await
    .expect("poll");

    drop(conn);
    // Well under the fetch's 25 s: the work is dropped with the connection.
    tokio::task::spawn_blocking(move || {
        wait_in_flight(
            http_addr,
            0,
            Duration::from_secs(5),
            "after the client left",
        )
    })
    .await
    .expect("poll");
}
