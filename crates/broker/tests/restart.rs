//! Goal: every record the broker acknowledged with acks=all survives a clean stop (SIGTERM, exit
//! code 0) and a crash (SIGKILL), and the cluster id and topic ids stay the same across restarts.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::MetadataResponse;
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;

const PARTITIONS: i32 = 3;
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
const RECV_TIMEOUT: Duration = Duration::from_secs(30);

/// Produces `count` records (acks=all) spread over the partitions; returns, per partition, the
/// acknowledged (offset, value) pairs.
async fn produce_acked(
    broker: &Broker,
    topic: &str,
    tag: &str,
    count: usize,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    let producer = producer(broker, &[("acks", "all"), ("linger.ms", "5")]);
    let values: Vec<String> = (0..count).map(|i| format!("{tag}-{i}")).collect();
    let mut futures = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let partition = i32::try_from(i).expect("small") % PARTITIONS;
        let record: FutureRecord<'_, str, str> = FutureRecord::to(topic)
            .partition(partition)
            .key(v.as_str())
            .payload(v.as_str());
        futures.push(producer.send_result(record).expect("enqueue"));
    }
    let mut acked: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for (i, f) in futures.into_iter().enumerate() {
        let d = tokio::time::timeout(SEND_TIMEOUT, f)
            .await
            .unwrap_or_else(|_| panic!("delivery #{i} timed out"))
            .expect("not cancelled")
            .unwrap_or_else(|(e, _)| panic!("delivery #{i} failed: {e:?}"));
        acked
            .entry(d.partition)
            .or_default()
            .push((d.offset, values[i].clone()));
    }
    for records in acked.values_mut() {
        records.sort();
    }
    acked
}

/// Reads every partition from the beginning and asserts it holds exactly `expected`.
async fn assert_log_is(broker: &Broker, topic: &str, expected: &BTreeMap<i32, Vec<(i64, String)>>) {
    let consumer = consumer(broker, &[]);
    let parts: Vec<(i32, Offset)> = (0..PARTITIONS).map(|p| (p, Offset::Beginning)).collect();
    assign(&consumer, topic, &parts);
    let total: usize = expected.values().map(Vec::len).sum();
    let got = recv_n(&consumer, total, RECV_TIMEOUT).await;
    let mut actual: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for m in &got {
        let v = String::from_utf8(m.payload().expect("value").to_vec()).expect("utf8");
        actual
            .entry(m.partition())
            .or_default()
            .push((m.offset(), v));
    }
    for records in actual.values_mut() {
        records.sort();
    }
    assert_eq!(&actual, expected, "log contents after restart");
    assert_no_message(&consumer, Duration::from_millis(500)).await;
}

fn merge(a: &mut BTreeMap<i32, Vec<(i64, String)>>, b: BTreeMap<i32, Vec<(i64, String)>>) {
    for (p, mut records) in b {
        a.entry(p).or_default().append(&mut records);
    }
}

/// Asserts each partition's offsets are 0..n with no gap or duplicate.
fn assert_dense(acked: &BTreeMap<i32, Vec<(i64, String)>>) {
    for (p, records) in acked {
        let offsets: Vec<i64> = records.iter().map(|(o, _)| *o).collect();
        let want: Vec<i64> = (0..i64::try_from(records.len()).expect("small")).collect();
        assert_eq!(offsets, want, "acknowledged offsets of partition {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_a_clean_stop() {
    let mut broker = Broker::start_with(&["num.partitions=3"]);
    let topic = unique_topic("restart-clean");
    let mut acked = produce_acked(&broker, &topic, "before", 300).await;
    assert_dense(&acked);

    let status = broker.terminate();
    assert!(
        status.success(),
        "SIGTERM must stop the broker with exit code 0, got {status:?}; stderr:\n{}",
        broker.stderr_tail(40)
    );
    broker.restart();
    assert_log_is(&broker, &topic, &acked).await;

    // Appends continue right after the recovered log end.
    merge(
        &mut acked,
        produce_acked(&broker, &topic, "after", 30).await,
    );
    assert_dense(&acked);
    assert_log_is(&broker, &topic, &acked).await;

    // A second clean cycle keeps both generations of records.
    let status = broker.terminate();
    assert!(status.success(), "second SIGTERM: {status:?}");
    broker.restart();
    assert_log_is(&broker, &topic, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_kill_9() {
    let mut broker = Broker::start_with(&["num.partitions=3"]);
    let topic = unique_topic("restart-kill");
    let mut acked = produce_acked(&broker, &topic, "before", 300).await;
    assert_dense(&acked);

    broker.kill9();
    broker.restart();
    assert_log_is(&broker, &topic, &acked).await;

    merge(
        &mut acked,
        produce_acked(&broker, &topic, "after", 30).await,
    );
    assert_dense(&acked);

    broker.kill9();
    broker.restart();
    assert_log_is(&broker, &topic, &acked).await;
}

/// The broker is killed while a producer is still sending: whatever was acknowledged must be
/// there afterwards, as a dense prefix of each partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_produce_keeps_every_acknowledged_record() {
    let mut broker = Broker::start_with(&["num.partitions=3"]);
    let topic = unique_topic("restart-midflight");
    let mut acked = produce_acked(&broker, &topic, "warmup", 30).await;

    let bootstrap = broker.bootstrap();
    let topic2 = topic.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sender = tokio::spawn(async move {
        let producer = producer_at(
            &bootstrap,
            &[
                ("acks", "all"),
                ("message.timeout.ms", "5000"),
                ("retries", "0"),
            ],
        );
        let mut acked: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
        let mut i = 0usize;
        loop {
            if stop_rx.try_recv().is_ok() {
                break;
            }
            let v = format!("inflight-{i}");
            let partition = i32::try_from(i).expect("small") % PARTITIONS;
            let record: FutureRecord<'_, str, str> = FutureRecord::to(&topic2)
                .partition(partition)
                .payload(v.as_str());
            match tokio::time::timeout(
                Duration::from_secs(10),
                producer.send(record, Duration::from_secs(0)),
            )
            .await
            {
                Ok(Ok(d)) => acked.entry(d.partition).or_default().push((d.offset, v)),
                Ok(Err(_)) | Err(_) => break,
            }
            i += 1;
        }
        acked
    });

    // Let some records through, then kill the broker under the producer.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut conn = RawConn::connect(broker.addr()).await;
    loop {
        let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
        let hwm = only_partition(&response).high_watermark;
        if hwm >= 40 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "producer made no progress (hwm {hwm})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.kill9();
    let _ = stop_tx.send(());
    let inflight = tokio::time::timeout(Duration::from_secs(30), sender)
        .await
        .expect("sender task finishes")
        .expect("sender task did not panic");
    assert!(
        inflight.values().map(Vec::len).sum::<usize>() > 0,
        "no in-flight record was acknowledged"
    );
    merge(&mut acked, inflight);
    for records in acked.values_mut() {
        records.sort();
    }
    assert_dense(&acked);

    broker.restart();
    // Acknowledged records must be a prefix of each partition; unacknowledged ones may or may not
    // have been kept, so each partition is read only as far as its acknowledged records.
    for (p, want) in &acked {
        let consumer = consumer(&broker, &[]);
        assign(&consumer, &topic, &[(*p, Offset::Beginning)]);
        let got = recv_n(&consumer, want.len(), RECV_TIMEOUT).await;
        let have: Vec<(i64, String)> = got
            .iter()
            .map(|m| {
                (
                    m.offset(),
                    String::from_utf8(m.payload().expect("value").to_vec()).expect("utf8"),
                )
            })
            .collect();
        assert_eq!(&have, want, "acknowledged prefix of partition {p}");
    }
}

fn ids(response: &MetadataResponse) -> (Option<String>, BTreeMap<String, String>) {
    let cluster = response.cluster_id.as_ref().map(|c| c.as_str().to_string());
    let topics = response
        .topics
        .iter()
        .map(|t| {
            (
                t.name
                    .as_ref()
                    .map(|n| n.0.as_str().to_string())
                    .unwrap_or_default(),
                t.topic_id.to_string(),
            )
        })
        .collect();
    (cluster, topics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_id_and_topic_ids_are_stable_across_restarts() {
    let mut broker = Broker::start();
    let a = unique_topic("ids-a");
    let b = unique_topic("ids-b");
    let first = ensure_topics(broker.addr(), &[&a, &b]).await;
    let (cluster, topics) = ids(&first);
    let cluster_id = cluster.expect("cluster_id must be set");
    assert!(!cluster_id.is_empty(), "cluster_id must not be empty");
    assert_eq!(topics.len(), 2);
    for t in &first.topics {
        assert!(!t.topic_id.is_nil(), "topic id of {:?} is nil", t.name);
    }
    assert_ne!(
        first.topics[0].topic_id, first.topics[1].topic_id,
        "topic ids must differ"
    );

    let status = broker.terminate();
    assert!(status.success(), "SIGTERM exit status {status:?}");
    broker.restart();
    let mut conn = RawConn::connect(broker.addr()).await;
    let after_clean = metadata(&mut conn, Some(&[&a, &b]), false).await;
    assert_eq!(
        ids(&after_clean),
        (Some(cluster_id.clone()), topics.clone()),
        "ids after a clean restart"
    );

    broker.kill9();
    broker.restart_on_new_port();
    let mut conn = RawConn::connect(broker.addr()).await;
    let after_kill = metadata(&mut conn, Some(&[&a, &b]), false).await;
    assert_eq!(
        ids(&after_kill),
        (Some(cluster_id), topics),
        "ids after kill -9"
    );
    // The advertised address follows the new port.
    assert_eq!(after_kill.brokers.len(), 1);
    assert_eq!(after_kill.brokers[0].host.as_str(), "127.0.0.1");
    assert_eq!(after_kill.brokers[0].port, i32::from(broker.addr().port()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_busy_clients_stops_promptly_and_cleanly() {
    let mut broker = Broker::start();
    let topic = unique_topic("restart-busy");
    ensure_topics(broker.addr(), &[&topic]).await;
    // A fetch parked for 30 s, an idle connection, and a connection holding half a frame.
    let mut parked = RawConn::connect(broker.addr()).await;
    let _ = parked
        .send(12, &fetch_request(&topic, 0, 0, 30_000, 1))
        .await;
    let _idle = RawConn::connect(broker.addr()).await;
    let mut half = RawConn::connect(broker.addr()).await;
    half.write_all(&[0, 0, 0, 100, 0, 1]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let status = broker.terminate();
    let took = started.elapsed();
    assert!(
        status.success(),
        "SIGTERM with open connections: exit status {status:?}; stderr:\n{}",
        broker.stderr_tail(40)
    );
    assert!(
        took < Duration::from_secs(10),
        "SIGTERM took {took:?} with a parked fetch (max_wait 30 s) open"
    );
    broker.restart();
    assert_broker_answers(broker.addr(), "after restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_have_different_cluster_ids() {
    let one = Broker::start();
    let two = Broker::start();
    let mut c1 = RawConn::connect(one.addr()).await;
    let mut c2 = RawConn::connect(two.addr()).await;
    let m1 = metadata(&mut c1, Some(&[]), false).await;
    let m2 = metadata(&mut c2, Some(&[]), false).await;
    assert!(m1.cluster_id.is_some() && m2.cluster_id.is_some());
    assert_ne!(
        m1.cluster_id, m2.cluster_id,
        "fresh data dirs must get distinct cluster ids"
    );
}

/// A port that was free a moment ago (for a quorum voter that is never started).
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// A SIGTERM that arrives before the broker is ready still stops it cleanly and promptly: exit
/// 0, no ready line, the clean-shutdown marker written. Here the node is one of two controller
/// voters and the other is never started, so no controller is ever elected, the broker cannot
/// register and is never ready; it leads nothing, so no controlled shutdown is waited for.
#[test]
fn sigterm_before_ready_stops_cleanly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let log_path = dir.path().join("broker.log");
    let log = std::fs::File::create(&log_path).expect("create log file");
    let (controller, absent) = (unused_port(), unused_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_millrace"))
        .arg("--node-id")
        .arg("1")
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--listen", "127.0.0.1:0"])
        .arg("--controller-listen")
        .arg(format!("127.0.0.1:{controller}"))
        .arg("--controller-voters")
        .arg(format!("1@127.0.0.1:{controller},2@127.0.0.1:{absent}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(log))
        .spawn()
        .expect("spawn millrace");
    let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    while !log_text().contains("metadata quorum initialized") {
        assert!(
            Instant::now() < deadline,
            "the broker never started its quorum; stderr:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("run kill -TERM");
    assert!(status.success(), "kill -TERM failed: {status:?}");
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait on broker") {
            break status;
        }
        if started.elapsed() > SHUTDOWN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no exit {SHUTDOWN_TIMEOUT:?} after SIGTERM; stderr:\n{}",
                log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let mut stdout = String::new();
    let _ =
        std::io::Read::read_to_string(&mut child.stdout.take().expect("piped stdout"), &mut stdout);
    assert!(
        status.success(),
        "SIGTERM before ready: exit status {status:?}; stderr:\n{}",
        log_text()
    );
    assert!(!stdout.contains("millrace ready"), "stdout: {stdout}");
    assert!(
        took < Duration::from_secs(5),
        "SIGTERM before ready took {took:?}"
    );
    assert!(
        log_text().contains("stopped before ready"),
        "stderr:\n{}",
        log_text()
    );
    assert!(data_dir.join(".clean-shutdown").exists());
}
