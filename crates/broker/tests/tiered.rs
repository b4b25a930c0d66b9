//! Goal: tiered storage (issue 31, decision 0073) against a real S3 server (SeaweedFS) and real
//! clients (librdkafka, raw requests). A tiered topic written far past its `local.retention.bytes`
//! keeps its local disk under that bound while every record reads back from offset 0 — the old
//! ones from the object store; ListOffsets answers -2 (remote start), -4 (local start) and -5
//! (last uploaded offset) as Kafka does; a kill -9 loses nothing and the remote log stays
//! contiguous on every node of a cluster whose leader is killed during uploads; an object store
//! outage holds uploads, refuses produce once `millrace.remote.storage.max.pending.bytes` is
//! reached (KAFKA_STORAGE_ERROR, retriable) and catches up when the store returns; a deleted
//! remote object fails the read with KAFKA_STORAGE_ERROR and a metric, never a silent gap.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::*;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::ListOffsetsRequest;
use millrace_tiered::testing::SeaweedFs;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::FutureRecord;
use rdkafka::Message;
use rdkafka::Offset;

/// Bytes: the tiered topic's segments and its local tail.
const SEGMENT_BYTES: u64 = 16 * 1024;
const LOCAL_RETENTION_BYTES: u64 = 48 * 1024;
/// Bytes of each record's value.
const VALUE_BYTES: usize = 1000;
/// Bound on uploads catching up.
const CATCH_UP: Duration = Duration::from_secs(60);
const KAFKA_STORAGE_ERROR: i16 = 56;

fn tiered_settings(weed: &SeaweedFs, prefix: &str, http: u16) -> Vec<String> {
    vec![
        "remote.log.storage.system.enable=true".into(),
        format!("millrace.remote.storage.url={}", weed.url(prefix)),
        "remote.log.manager.task.interval.ms=200".into(),
        "millrace.remote.storage.orphan.grace.ms=1000".into(),
        format!("millrace.http.listen=127.0.0.1:{http}"),
    ]
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

async fn create_tiered_topic(bootstrap: &str, topic: &str, replication: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let segment = SEGMENT_BYTES.to_string();
    let local = LOCAL_RETENTION_BYTES.to_string();
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication))
        .set("remote.storage.enable", "true")
        .set("segment.bytes", &segment)
        .set("local.retention.bytes", &local)
        .set("retention.bytes", "-1");
    let results = admin
        .create_topics(
            &[new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(20))),
        )
        .await
        .expect("create topics");
    for r in results {
        r.expect("tiered topic created");
    }
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("record-{i:08}-").into_bytes();
    v.resize(VALUE_BYTES, b'x');
    v
}

/// Produces records `from..to` with acks=all, each acknowledged before the next batch of 100.
async fn produce(bootstrap: &str, topic: &str, from: usize, to: usize) {
    let producer = producer_at(
        bootstrap,
        &[("linger.ms", "5"), ("message.timeout.ms", "60000")],
    );
    for chunk_start in (from..to).step_by(100) {
        let chunk_end = (chunk_start + 100).min(to);
        let values: Vec<Vec<u8>> = (chunk_start..chunk_end).map(value).collect();
        let mut pending = Vec::new();
        for v in &values {
            let record = FutureRecord::<(), [u8]>::to(topic)
                .partition(0)
                .payload(&v[..]);
            pending.push(producer.send(record, Duration::from_secs(60)));
        }
        for p in pending {
            p.await.expect("record acknowledged");
        }
    }
}

/// Reads `n` records from offset 0 and checks each is the one written there.
async fn read_all_from_zero(bootstrap: &str, topic: &str, n: usize) {
    let consumer = consumer_at(bootstrap, &[("fetch.max.bytes", "1048576")]);
    consumer_assign(&consumer, topic, Offset::Beginning);
    let messages = recv_n(&consumer, n, Duration::from_secs(90)).await;
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.offset(), i as i64, "offsets read back in order from 0");
        assert_eq!(
            m.payload().map(<[u8]>::to_vec),
            Some(value(i)),
            "record {i} reads back as written"
        );
    }
}

fn consumer_assign(consumer: &rdkafka::consumer::StreamConsumer, topic: &str, at: Offset) {
    assign(consumer, topic, &[(0, at)]);
}

/// (ListOffsets -2, -4, -5) of partition 0, with v9.
async fn tiered_offsets(addr: SocketAddr, topic: &str) -> (i64, i64, i64) {
    let out = list_offsets(addr, topic, &[-2, -4, -5]).await;
    (out[0], out[1], out[2])
}

/// ListOffsets v9 of partition 0 for each of `timestamps`.
async fn list_offsets(addr: SocketAddr, topic: &str, timestamps: &[i64]) -> Vec<i64> {
    list_offsets_at(addr, topic, 9, timestamps).await
}

/// ListOffsets at `version` of partition 0 for each of `timestamps`.
async fn list_offsets_at(
    addr: SocketAddr,
    topic: &str,
    version: i16,
    timestamps: &[i64],
) -> Vec<i64> {
    let mut conn = RawConn::connect(addr).await;
    let mut out = Vec::new();
    for &timestamp in timestamps {
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_string(topic.to_string()),
                ))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
        let response = conn.request(version, &request).await;
        let p = &response.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "ListOffsets {timestamp} answers");
        out.push(p.offset);
    }
    out
}

/// Bytes of the partition's local `.log` files.
fn local_log_bytes(data_dir: &Path, topic: &str) -> u64 {
    let dir = data_dir.join(format!("{topic}-0"));
    std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The committed remote segments of `topic`-0 as (base, end) from `/remote-log`.
fn remote_segments(http_addr: SocketAddr, topic: &str) -> Vec<(i64, i64)> {
    let (status, body) = http(http_addr, "GET", "/remote-log");
    assert_eq!(status, 200, "/remote-log answers: {body}");
    let logs: serde_json::Value = serde_json::from_str(&body).expect("/remote-log is JSON");
    logs.as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topic"] == topic && l["partition"] == 0)
        .flat_map(|l| l["segments"].as_array().cloned().unwrap_or_default())
        .map(|s| {
            (
                s["base_offset"].as_i64().expect("base"),
                s["end_offset"].as_i64().expect("end"),
            )
        })
        .collect()
}

/// The base offset of the partition's first local segment (from its `.log` file names).
fn first_local_offset(data_dir: &Path, topic: &str) -> Option<i64> {
    std::fs::read_dir(data_dir.join(format!("{topic}-0")))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")?.parse::<i64>().ok()
        })
        .min()
}

fn assert_contiguous(segments: &[(i64, i64)]) {
    for pair in segments.windows(2) {
        assert_eq!(
            pair[1].0,
            pair[0].1 + 1,
            "remote segments are contiguous and never overlap: {segments:?}"
        );
    }
}

/// Waits until the remote log holds everything below `upto` minus the local tail and the local
/// disk is within its bound.
async fn wait_tiered(
    http_addr: SocketAddr,
    data_dir: &Path,
    topic: &str,
    upto: i64,
) -> Vec<(i64, i64)> {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let segments = remote_segments(http_addr, topic);
        let local = local_log_bytes(data_dir, topic);
        let covered = segments.last().map_or(0, |s| s.1 + 1);
        let tail_records = (LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES) as i64 / VALUE_BYTES as i64;
        if covered >= upto - tail_records && local <= LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES {
            return segments;
        }
        assert!(
            Instant::now() < deadline,
            "uploads did not catch up within {CATCH_UP:?}: remote covers [0, {covered}) of {upto}, local {local} bytes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One broker: 100 × local.retention.bytes written; the local disk stays under its bound; every
/// record reads back from 0; ListOffsets -2/-4/-5 as Kafka means them; kill -9 loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_topic_keeps_a_small_local_tail_and_reads_everything_back() {
    let started = Instant::now();
    let weed = SeaweedFs::start().expect("SeaweedFS starts");
    let http_port = free_port();
    let settings = tiered_settings(&weed, "one", http_port);
    let mut broker = Broker::start_with_env(&as_strs(&settings), &weed.env());
    let http_addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let topic = unique_topic("tiered");
    create_tiered_topic(&broker.bootstrap(), &topic, 1).await;
    let records = (100 * LOCAL_RETENTION_BYTES as usize) / VALUE_BYTES;
    // The local disk is sampled while producing: it never holds much more than its bound.
    let mut peak_local = 0;
    for part in 0..4 {
        produce(
            &broker.bootstrap(),
            &topic,
            part * records / 4,
            (part + 1) * records / 4,
        )
        .await;
        peak_local = peak_local.max(local_log_bytes(broker.data_dir(), &topic));
    }
    let segments = wait_tiered(http_addr, broker.data_dir(), &topic, records as i64).await;
    assert_contiguous(&segments);
    assert_eq!(
        segments.first().map(|s| s.0),
        Some(0),
        "the remote log starts at 0"
    );
    let local = local_log_bytes(broker.data_dir(), &topic);
    println!(
        "wrote {} bytes; local tail {local} bytes (bound {LOCAL_RETENTION_BYTES}), peak while writing {peak_local}; {} remote segments",
        records * VALUE_BYTES,
        segments.len()
    );
    let (earliest, earliest_local, latest_tiered) = tiered_offsets(broker.addr(), &topic).await;
    // -6 (v11, KIP-1023) after -5: one past an uploaded segment's end, at or after -5's.
    let pending = list_offsets_at(broker.addr(), &topic, 11, &[-6]).await[0];
    assert_eq!(earliest, 0, "EARLIEST (-2) is the remote log's start");
    assert!(
        earliest_local > 0,
        "EARLIEST_LOCAL (-4) is the local log's start: {earliest_local}"
    );
    // Uploads may still go on: -5 lies between the remote log's end before and after the ask.
    let after = remote_segments(http_addr, &topic);
    let (before_end, after_end) = (
        segments.last().map_or(-1, |s| s.1),
        after.last().map_or(-1, |s| s.1),
    );
    assert!(
        (before_end..=after_end).contains(&latest_tiered)
            && after.iter().any(|s| s.1 == latest_tiered),
        "LATEST_TIERED (-5) {latest_tiered} is the last uploaded offset ({before_end}..={after_end})"
    );
    assert!(
        latest_tiered + 1 >= earliest_local,
        "no gap between the remote and the local log"
    );
    assert!(
        pending > latest_tiered && after.iter().any(|s| s.1 + 1 == pending),
        "EARLIEST_PENDING_UPLOAD (-6) {pending} is one past an uploaded segment's end, after -5's {latest_tiered}"
    );
    // A lookup by timestamp finds the first record, which only the remote log holds.
    assert_eq!(
        list_offsets(broker.addr(), &topic, &[0]).await,
        vec![0],
        "a timestamp lookup searches the remote log first"
    );
    read_all_from_zero(&broker.bootstrap(), &topic, records).await;

    // kill -9: the remote log is in the metadata log; nothing acknowledged is lost.
    broker.kill9();
    broker.restart();
    read_all_from_zero(&broker.bootstrap(), &topic, records).await;
    assert_contiguous(&remote_segments(http_addr, &topic));
    println!("single-broker tiered test took {:?}", started.elapsed());
}

/// Three nodes, replication factor 3, 100 × local.retention.bytes written: the leader is killed -9
/// while uploads run; afterwards every node's remote log is the same and contiguous (no segment
/// owned twice), every record reads back from 0, each node's local disk stays under its bound, and
/// the leader answers ListOffsets -2/-4/-5 as Kafka means them. Then a follower that lost the
/// partition's directory rebuilds it from the leader's local tail, not from offset 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_keeps_one_remote_log_through_a_leader_kill() {
    let started = Instant::now();
    let weed = SeaweedFs::start().expect("SeaweedFS starts");
    let settings = vec![
        "remote.log.storage.system.enable=true".to_string(),
        format!("millrace.remote.storage.url={}", weed.url("cluster")),
        "remote.log.manager.task.interval.ms=200".into(),
        "millrace.remote.storage.orphan.grace.ms=1000".into(),
    ];
    let mut cluster = TestCluster::start_with_env(3, &as_strs(&settings), &weed.env());
    let topic = unique_topic("tiered3");
    create_tiered_topic(&cluster.bootstrap(), &topic, 3).await;
    let records = (100 * LOCAL_RETENTION_BYTES as usize) / VALUE_BYTES;
    produce(&cluster.bootstrap(), &topic, 0, records / 2).await;
    // Kill the partition's leader while it uploads (its remote log manager runs every 200 ms).
    let leader = leader_of(&cluster, &topic).await;
    cluster.kill9(leader);
    produce(&cluster.bootstrap(), &topic, records / 2, records).await;
    cluster.restart(leader);
    let mut views = Vec::new();
    for id in 1..=3 {
        let segments = wait_tiered(
            cluster.http_addr(id),
            cluster.data_dir(id),
            &topic,
            records as i64,
        )
        .await;
        assert_contiguous(&segments);
        views.push(segments);
    }
    let last = cluster_remote_segments(&cluster, &topic);
    for id in 1..=3 {
        assert_eq!(
            remote_segments(cluster.http_addr(id), &topic),
            last,
            "node {id} sees the same remote log"
        );
    }
    let leader = leader_of(&cluster, &topic).await;
    let (earliest, earliest_local, latest_tiered) =
        tiered_offsets(cluster.addr(leader), &topic).await;
    assert_eq!(earliest, 0, "EARLIEST (-2) is the remote log's start");
    assert!(
        earliest_local > 0,
        "EARLIEST_LOCAL (-4) is the leader's local start"
    );
    assert!(
        last.iter().any(|s| s.1 == latest_tiered)
            || latest_tiered > last.last().map_or(-1, |s| s.1),
        "LATEST_TIERED (-5) {latest_tiered} is an uploaded segment's end"
    );
    assert!(
        latest_tiered + 1 >= earliest_local,
        "no gap between remote and local"
    );
    read_all_from_zero(&cluster.bootstrap(), &topic, records).await;

    // A follower loses its disk (the partition's directory is gone): it rebuilds from the
    // leader's local tail only — its log starts at the leader's local start, the older records
    // stay in the object store — and rejoins with every record readable.
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    cluster.stop(follower);
    let dir = cluster.data_dir(follower).join(format!("{topic}-0"));
    std::fs::remove_dir_all(&dir).expect("remove the follower's partition directory");
    cluster.restart(follower);
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let local = local_log_bytes(cluster.data_dir(follower), &topic);
        let first = first_local_offset(cluster.data_dir(follower), &topic);
        if local > 0 && first.is_some_and(|f| f > 0) {
            assert!(
                local <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES,
                "the rebuilt replica holds only the tail: {local} bytes"
            );
            println!(
                "lost-disk follower {follower} rebuilt from offset {first:?} with {local} local bytes"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower did not rebuild its replica (local {local} bytes, first offset {first:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    read_all_from_zero(&cluster.bootstrap(), &topic, records).await;
    println!(
        "3-node tiered test: {} remote segments, took {:?}",
        last.len(),
        started.elapsed()
    );
}

fn cluster_remote_segments(cluster: &TestCluster, topic: &str) -> Vec<(i64, i64)> {
    // Let the metadata settle on every node: the same answer twice in a row.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = remote_segments(cluster.http_addr(1), topic);
        let same = (2..=3).all(|id| remote_segments(cluster.http_addr(id), topic) == a);
        if same || Instant::now() > deadline {
            return a;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn leader_of(cluster: &TestCluster, topic: &str) -> i32 {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .create()
        .expect("admin client");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()
            .and_then(|m| {
                m.topics()
                    .first()
                    .and_then(|t| t.partitions().first().map(|p| p.leader()))
            })
            .filter(|l| *l > 0);
        if let Some(leader) = leader {
            return leader;
        }
        assert!(Instant::now() < deadline, "no leader for {topic}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An object store outage: uploads wait, produce is refused with KAFKA_STORAGE_ERROR once the
/// backlog passes `millrace.remote.storage.max.pending.bytes` (and `/ready` says so), and
/// everything catches up and reads back once the store returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_holds_uploads_then_refuses_produce_then_catches_up() {
    let mut weed = SeaweedFs::start().expect("SeaweedFS starts");
    let http_port = free_port();
    let mut settings = tiered_settings(&weed, "outage", http_port);
    settings.push("millrace.remote.storage.max.pending.bytes=131072".into());
    let broker = Broker::start_with_env(&as_strs(&settings), &weed.env());
    let http_addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let topic = unique_topic("outage");
    create_tiered_topic(&broker.bootstrap(), &topic, 1).await;
    produce(&broker.bootstrap(), &topic, 0, 200).await;
    wait_tiered(http_addr, broker.data_dir(), &topic, 200).await;

    weed.stop();
    // Produce until refused: the backlog passes 128 KiB within a few hundred records.
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut written = 200usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let code = produce_one(&mut conn, &topic, written).await;
        if code == KAFKA_STORAGE_ERROR {
            break true;
        }
        assert_eq!(code, 0, "produce succeeds until the backlog bound");
        written += 1;
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(
        refused,
        "produce was never refused during the outage ({written} records)"
    );
    let (_, ready) = http(http_addr, "GET", "/ready");
    assert!(
        ready.contains("degraded: tiered storage"),
        "/ready names the upload backlog: {ready}"
    );
    weed.start_again().expect("SeaweedFS restarts");
    // Uploads catch up; produce is accepted again.
    let deadline = Instant::now() + CATCH_UP;
    loop {
        if produce_one(&mut conn, &topic, written).await == 0 {
            written += 1;
            break;
        }
        assert!(
            Instant::now() < deadline,
            "produce still refused after the store returned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_tiered(http_addr, broker.data_dir(), &topic, written as i64).await;
    read_all_from_zero(&broker.bootstrap(), &topic, written).await;
}

/// Produces record `i` (acks=all, Produce v9); the partition's error code.
async fn produce_one(conn: &mut RawConn, topic: &str, i: usize) -> i16 {
    let batch =
        millrace_store::testing::encode_batch(&[(None, Some(&value(i)[..]), now_ms())], -1, -1, -1)
            .freeze();
    let response = conn.request(9, &produce_request(topic, 0, batch, -1)).await;
    response.responses[0].partition_responses[0].error_code
}

/// A remote object deleted behind the broker's back: the read fails with KAFKA_STORAGE_ERROR and
/// the remote error metric counts it; reads of the local tail still work. Deleting the topic then
/// empties its folder in the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_remote_object_fails_the_read_loudly() {
    let weed = SeaweedFs::start().expect("SeaweedFS starts");
    let http_port = free_port();
    let settings = tiered_settings(&weed, "lost", http_port);
    let broker = Broker::start_with_env(&as_strs(&settings), &weed.env());
    let http_addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let topic = unique_topic("lost");
    create_tiered_topic(&broker.bootstrap(), &topic, 1).await;
    let records = 400;
    produce(&broker.bootstrap(), &topic, 0, records).await;
    wait_tiered(http_addr, broker.data_dir(), &topic, records as i64).await;
    // Delete every object of the partition's first remote segment.
    let storage =
        millrace_tiered::RemoteStorage::from_url(&weed.url("lost"), weed.env_lookup(), 1 << 20)
            .expect("store");
    let all = storage.list("").await.expect("list the bucket prefix");
    let first = all
        .iter()
        .filter(|o| {
            o.name.contains(&format!("{topic}-")) && o.name.contains("/0/00000000000000000000-")
        })
        .map(|o| o.name.clone())
        .collect::<Vec<_>>();
    assert!(
        !first.is_empty(),
        "the first segment's objects are in the bucket: {all:?}"
    );
    for name in &first {
        storage.delete(name).await.expect("delete");
    }
    let mut conn = RawConn::connect(broker.addr()).await;
    let code = fetch_error(&mut conn, &topic, 0).await;
    assert_eq!(
        code, KAFKA_STORAGE_ERROR,
        "a read of a lost remote segment fails"
    );
    let (_, metrics) = http(http_addr, "GET", "/metrics");
    let errors: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("millrace_remote_errors_total{") && l.contains("op=\"read\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum();
    assert!(errors >= 1.0, "the failed remote read is counted");
    let (_, earliest_local, _) = tiered_offsets(broker.addr(), &topic).await;
    assert_eq!(
        fetch_error(&mut conn, &topic, earliest_local).await,
        0,
        "the local tail still reads"
    );
    // Deleting the topic deletes its remote objects too (the lowest-numbered broker purges them).
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("admin client");
    for r in admin
        .delete_topics(&[&topic], &AdminOptions::new())
        .await
        .expect("delete topics")
    {
        r.expect("topic deleted");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = storage
            .list("")
            .await
            .expect("list")
            .into_iter()
            .filter(|o| o.name.contains(&format!("{topic}-")))
            .count();
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} objects of the deleted topic are still in the bucket"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The error code of a consumer Fetch v12 of partition 0 at `offset`.
async fn fetch_error(conn: &mut RawConn, topic: &str, offset: i64) -> i16 {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::FetchRequest;
    let request = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(100)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(kafka_protocol::messages::TopicName(
                kafka_protocol::protocol::StrBytes::from_string(topic.to_string()),
            ))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let response = conn.request(12, &request).await;
    response.responses[0].partitions[0].error_code
}

/// read_committed across the boundary: transactions committed and aborted in turn on a tiered
/// topic; once most of it is in the object store, a read_committed consumer from 0 gets exactly
/// the committed records (the aborted transactions travel in the remote `.txnindex`) and a
/// read_uncommitted one gets all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_is_exact_across_the_remote_boundary() {
    use rdkafka::producer::Producer;
    let weed = SeaweedFs::start().expect("SeaweedFS starts");
    let http_port = free_port();
    let settings = tiered_settings(&weed, "txn", http_port);
    let broker = Broker::start_with_env(&as_strs(&settings), &weed.env());
    let http_addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let topic = unique_topic("tieredtxn");
    create_tiered_topic(&broker.bootstrap(), &topic, 1).await;
    let producer = producer_at(
        &broker.bootstrap(),
        &[
            ("transactional.id", "tiered-txn"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
        ],
    );
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init_transactions");
    // 40 transactions of 20 records: even ones commit, odd ones abort.
    let (transactions, per) = (40usize, 20usize);
    let mut committed = Vec::new();
    for t in 0..transactions {
        producer.begin_transaction().expect("begin");
        let values: Vec<Vec<u8>> = (0..per).map(|i| value(t * per + i)).collect();
        let mut pending = Vec::new();
        for v in &values {
            let record = FutureRecord::<(), [u8]>::to(&topic)
                .partition(0)
                .payload(&v[..]);
            pending.push(producer.send(record, Duration::from_secs(30)));
        }
        for p in pending {
            p.await.expect("acknowledged");
        }
        if t % 2 == 0 {
            producer
                .commit_transaction(Duration::from_secs(30))
                .expect("commit");
            committed.extend(values);
        } else {
            producer
                .abort_transaction(Duration::from_secs(30))
                .expect("abort");
        }
    }
    // Each transaction's records and its marker: 21 offsets.
    let end = (transactions * (per + 1)) as i64;
    wait_tiered(http_addr, broker.data_dir(), &topic, end).await;
    let (_, earliest_local, _) = tiered_offsets(broker.addr(), &topic).await;
    assert!(
        earliest_local > end / 2,
        "most of the log is remote: local start {earliest_local} of {end}"
    );
    for (isolation, expect) in [
        ("read_committed", committed.clone()),
        (
            "read_uncommitted",
            (0..transactions * per).map(value).collect(),
        ),
    ] {
        let consumer = consumer_at(&broker.bootstrap(), &[("isolation.level", isolation)]);
        consumer_assign(&consumer, &topic, Offset::Beginning);
        let got = recv_n(&consumer, expect.len(), Duration::from_secs(60)).await;
        assert_no_message(&consumer, Duration::from_millis(1500)).await;
        let got: Vec<Vec<u8>> = got
            .iter()
            .map(|m| m.payload().map(<[u8]>::to_vec).unwrap_or_default())
            .collect();
        assert_eq!(got, expect, "{isolation} reads exactly its records");
    }
}
