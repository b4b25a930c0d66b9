//! Goal: on a 3-node cluster, bytes flipped in a follower's and in the leader's closed segments
//! (different batches, so one good copy of each remains) are found by the scrubber and replaced
//! with an in-sync replica's copy within two scrub intervals: the replicas then hold the same
//! batches, byte for byte, at the same offsets below the high watermark, no offset moved, and a
//! consumer that checks CRCs reads every record intact. The leader repairs from a follower, which
//! serves it as Kafka followers serve consumers (Fetch v11+). A single node, with no replica to
//! repair from, reports the damage (metrics, a `degraded:` line in `/ready`) and serves nothing
//! damaged: the damaged offsets get KAFKA_STORAGE_ERROR, the records before them are served.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::{
    consumer_at, decode_records, fetch_request, producer_at, recv_n, unique_topic, Broker, RawConn,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

/// Scrub pass interval of the test cluster.
const SCRUB_INTERVAL: Duration = Duration::from_secs(3);
const RECORDS: usize = 3_000;
const KAFKA_STORAGE_ERROR: i16 = 56;

fn settings() -> Vec<String> {
    vec![
        "broker.session.timeout.ms=3000".into(),
        "broker.heartbeat.interval.ms=500".into(),
        "auto.leader.rebalance.enable=false".into(),
        format!(
            "millrace.log.scrub.interval.ms={}",
            SCRUB_INTERVAL.as_millis()
        ),
    ]
}

/// offset → batch bytes, for every batch of a replica's closed and active segments.
fn batches(dir: &Path) -> BTreeMap<i64, Vec<u8>> {
    let mut out = BTreeMap::new();
    for file in segment_files(dir) {
        let bytes = std::fs::read(&file).expect("read segment");
        let mut pos = 0usize;
        while pos + 61 <= bytes.len() {
            let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().expect("4 bytes"));
            let total = 12 + len.max(0) as usize;
            let Some(batch) = bytes.get(pos..pos + total) else {
                break;
            };
            let base = i64::from_be_bytes(batch[..8].try_into().expect("8 bytes"));
            out.insert(base, batch.to_vec());
            pos += total;
        }
    }
    out
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list partition dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

/// (position, base offset) of the batches of one segment file.
fn positions(file: &Path) -> Vec<(u64, i64)> {
    let bytes = std::fs::read(file).expect("read segment");
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 61 <= bytes.len() {
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().expect("4 bytes"));
        out.push((
            pos as u64,
            i64::from_be_bytes(bytes[pos..pos + 8].try_into().expect("8 bytes")),
        ));
        pos += 12 + len.max(0) as usize;
    }
    out
}

/// Flips one byte inside the records of the `nth` batch of `file`; the batch's base offset.
fn flip_in_batch(file: &Path, nth: usize) -> i64 {
    let (pos, base) = positions(file)[nth];
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .expect("open segment");
    let at = pos + 70;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read byte");
    f.write_all_at(&[b[0] ^ 0x5a], at).expect("flip byte");
    base
}

/// The value of record `i`.
fn value_of(i: usize) -> String {
    format!("record-{i:06}-{}", "x".repeat(60))
}

/// Creates `topic` (one partition, `rf` replicas, small segments and `extra` configs) and
/// produces `count` records to it, each acknowledged.
async fn create_and_fill(
    bootstrap: &str,
    topic: &str,
    rf: i32,
    extra: &[(&str, &str)],
    count: usize,
) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin");
    let mut new =
        NewTopic::new(topic, 1, TopicReplication::Fixed(rf)).set("segment.bytes", "16384");
    for (k, v) in extra {
        new = new.set(k, v);
    }
    let created = admin
        .create_topics([&new], &AdminOptions::new())
        .await
        .expect("create topics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let producer = producer_at(
        bootstrap,
        &[("acks", "all"), ("linger.ms", "2"), ("batch.size", "2000")],
    );
    for i in 0..count {
        let value = value_of(i);
        producer
            .send(
                FutureRecord::<(), _>::to(topic)
                    .partition(0)
                    .payload(&value),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce {i}: {e}"));
    }
}

async fn leader_of(addr: std::net::SocketAddr, topic: &str) -> i32 {
    let mut conn = RawConn::connect(addr).await;
    let response = common::metadata(&mut conn, Some(&[topic]), false).await;
    response.topics[0].partitions[0].leader_id.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bytes_in_leader_and_follower_are_repaired_from_a_replica() {
    let settings = settings();
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let cluster = TestCluster::start(3, &refs);
    let topic = unique_topic("scrub");
    create_and_fill(
        &cluster.bootstrap(),
        &topic,
        3,
        &[("min.insync.replicas", "2")],
        RECORDS,
    )
    .await;

    // Every replica holds every batch (acks=all: the ISR had them all).
    let dirs: Vec<PathBuf> = (1..=3)
        .map(|id| cluster.data_dir(id).join(format!("{topic}-0")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let reference = loop {
        let all: Vec<_> = dirs.iter().map(|d| batches(d)).collect();
        if all.iter().all(|b| b == &all[0]) && all[0].len() > 20 {
            break all[0].clone();
        }
        assert!(Instant::now() < deadline, "replicas never converged");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let leader = leader_of(cluster.addr(1), &topic).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let closed = |id: i32| {
        let files = segment_files(&dirs[(id - 1) as usize]);
        assert!(files.len() >= 4, "want closed segments: {files:?}");
        files
    };
    let follower_damaged = flip_in_batch(&closed(follower)[1], 1);
    let leader_damaged = flip_in_batch(&closed(leader)[2], 2);
    assert_ne!(follower_damaged, leader_damaged);
    let flipped = Instant::now();

    // Within two scrub intervals (plus a repair's round trip), every replica is whole again.
    let within = SCRUB_INTERVAL * 2 + Duration::from_secs(5);
    loop {
        let all: Vec<_> = dirs.iter().map(|d| batches(d)).collect();
        if all.iter().all(|b| b == &reference) {
            break;
        }
        assert!(
            flipped.elapsed() < within,
            "not repaired within {within:?}; leader {leader} log:\n{}\nfollower {follower} log:\n{}",
            cluster.log_tail(leader, 20),
            cluster.log_tail(follower, 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "repaired {} ms after the flips",
        flipped.elapsed().as_millis()
    );
    for id in [leader, follower] {
        let found = cluster
            .metric(id, "millrace_log_corrupt_batches_total")
            .unwrap_or(0.0);
        let repaired = cluster
            .metric(id, "millrace_log_repaired_batches_total")
            .unwrap_or(0.0);
        assert!(
            found >= 1.0 && repaired >= 1.0,
            "node {id}: found {found}, repaired {repaired}"
        );
    }

    // A consumer checking CRCs reads every record, intact and in order.
    let consumer = consumer_at(
        &cluster.bootstrap(),
        &[("check.crcs", "true"), ("group.id", &unique_topic("g"))],
    );
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Beginning)
        .expect("assign");
    rdkafka::consumer::Consumer::assign(&consumer, &assignment).expect("assign");
    let messages = recv_n(&consumer, RECORDS, Duration::from_secs(60)).await;
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.offset(), i as i64);
        assert_eq!(m.payload(), Some(value_of(i).as_bytes()), "offset {i}");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One HTTP/1.1 GET; (status code, body).
fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_reports_damage_and_serves_nothing_damaged() {
    let port = free_port();
    let http: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let broker = Broker::start_with_args(&[
        "--http-listen".to_string(),
        http.to_string(),
        "--set".to_string(),
        "millrace.log.scrub.interval.ms=1000".to_string(),
    ]);
    let topic = unique_topic("scrub1");
    create_and_fill(&broker.bootstrap(), &topic, 1, &[], 1_000).await;
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let files = segment_files(&dir);
    assert!(files.len() >= 3, "want closed segments: {files:?}");
    let damaged = flip_in_batch(&files[1], 1);
    let next = positions(&files[1])[2].1;

    // The scrubber reports it: a degraded line in /ready (still 200), the metrics.
    let line = format!("degraded: {topic}-0 offsets [{damaged}, {next}) damaged");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = http_get(http, "/ready");
        if status == 200 && body.contains(&line) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no {line:?} in /ready: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, metrics) = http_get(http, "/metrics");
    assert!(
        metrics.contains("\nmillrace_log_damaged_ranges 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nmillrace_log_corrupt_batches_total 1\n"),
        "{metrics}"
    );

    // The damaged offsets are refused; the records before them are served, and stop short.
    let mut conn = RawConn::connect(broker.addr()).await;
    let answer = conn
        .request(12, &fetch_request(&topic, 0, damaged, 0, 1))
        .await;
    assert_eq!(
        answer.responses[0].partitions[0].error_code,
        KAFKA_STORAGE_ERROR
    );
    let before_damage = positions(&files[1])[0].1;
    let answer = conn
        .request(12, &fetch_request(&topic, 0, before_damage, 0, 1))
        .await;
    let part = &answer.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let records = decode_records(&part.records);
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|r| r.offset < damaged),
        "served past the damage"
    );
    let after = conn
        .request(12, &fetch_request(&topic, 0, next, 0, 1))
        .await;
    assert_eq!(after.responses[0].partitions[0].error_code, 0);
    assert_eq!(
        decode_records(&after.responses[0].partitions[0].records)[0].offset,
        next
    );
}
