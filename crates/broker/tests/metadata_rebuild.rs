//! Goal: missing metadata is never a reason to delete data: after a clean stop and the removal of
//! the metadata log (`__cluster_metadata/`), the broker seeds a new one from the partition
//! directories and still serves the topic, its topic id and every one of its 1,000 acknowledged
//! records; a single-node data directory from before the metadata log (a `cluster-metadata.json`
//! and no log) is upgraded in place, keeping its cluster id, topics and records; where the
//! directories contradict each other the broker refuses to start (exit 2, one line naming the
//! file) and leaves every file as it was.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;

const METADATA_FILE: &str = "cluster-metadata.json";
const METADATA_LOG_DIR: &str = "__cluster_metadata";
const RECORDS: usize = 1000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Produces `RECORDS` records with acks=all to partition 0 of `topic`; returns (offset, value).
async fn produce_acked(broker: &Broker, topic: &str) -> Vec<(i64, String)> {
    let producer = producer(broker, &[("acks", "all"), ("linger.ms", "5")]);
    let values: Vec<String> = (0..RECORDS).map(|i| format!("keep-{i}")).collect();
    let mut futures = Vec::new();
    for v in &values {
        let record: FutureRecord<'_, str, str> = FutureRecord::to(topic)
            .partition(0)
            .key(v.as_str())
            .payload(v.as_str());
        futures.push(producer.send_result(record).expect("enqueue"));
    }
    let mut acked = Vec::new();
    for (i, f) in futures.into_iter().enumerate() {
        let d = tokio::time::timeout(TIMEOUT, f)
            .await
            .unwrap_or_else(|_| panic!("delivery #{i} timed out"))
            .expect("not cancelled")
            .unwrap_or_else(|(e, _)| panic!("delivery #{i} failed: {e:?}"));
        acked.push((d.offset, values[i].clone()));
    }
    acked.sort();
    acked
}

/// The topic id the broker reports for `topic`.
async fn topic_id(broker: &Broker, topic: &str) -> String {
    let response = ensure_topics(broker.addr(), &[topic]).await;
    response
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
        .map(|t| t.topic_id.to_string())
        .expect("topic in metadata")
}

/// Every file under `dir` with its bytes, to compare before and after a refused start.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("ls") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_metadata_file_keeps_the_topic_and_its_records() {
    let mut broker = Broker::start_with(&["num.partitions=1"]);
    let topic = "keep";
    let acked = produce_acked(&broker, topic).await;
    let offsets: Vec<i64> = acked.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..RECORDS as i64).collect::<Vec<_>>());
    let id_before = topic_id(&broker, topic).await;

    let status = broker.terminate();
    assert!(status.success(), "clean stop: {status:?}");
    std::fs::remove_dir_all(broker.data_dir().join(METADATA_LOG_DIR))
        .expect("remove the metadata log");
    broker.restart();

    assert!(
        broker
            .stderr_tail(200)
            .contains("seeding the metadata log from the partition directories"),
        "one line says the metadata was rebuilt; stderr:\n{}",
        broker.stderr_tail(40)
    );
    assert!(
        broker.data_dir().join(format!("{topic}-0")).is_dir(),
        "the partition directory is still there"
    );
    assert_eq!(
        topic_id(&broker, topic).await,
        id_before,
        "the topic id survives"
    );
    let consumer = consumer(&broker, &[]);
    assign(&consumer, topic, &[(0, Offset::Beginning)]);
    let got = recv_n(&consumer, RECORDS, TIMEOUT).await;
    let served: Vec<(i64, String)> = got
        .iter()
        .map(|m| {
            let v = String::from_utf8(m.payload().expect("value").to_vec()).expect("utf8");
            (m.offset(), v)
        })
        .collect();
    assert_eq!(
        served, acked,
        "every acknowledged record is served after the rebuild"
    );
    assert_no_message(&consumer, Duration::from_millis(500)).await;

    // The rebuilt metadata is in a new metadata log: the next restart is an ordinary one.
    assert!(broker.data_dir().join(METADATA_LOG_DIR).is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_data_dir_from_before_the_metadata_log_is_upgraded_in_place() {
    let mut broker = Broker::start_with(&["num.partitions=1"]);
    let topic = "legacy";
    let acked = produce_acked(&broker, topic).await;
    let id_before = topic_id(&broker, topic).await;
    let status = broker.terminate();
    assert!(status.success(), "clean stop: {status:?}");
    // What the single-node broker of before wrote: the metadata file, no metadata log.
    let data = broker.data_dir().to_path_buf();
    std::fs::remove_dir_all(data.join(METADATA_LOG_DIR)).expect("remove the metadata log");
    let legacy = format!(
        r#"{{"cluster_id":"LegacyClusterId0000001","topics":{{"{topic}":{{"name":"{topic}","topic_id":"{id_before}","partitions":1,"replication_factor":1,"configs":{{}}}}}},"next_producer_id":7000,"deleting":{{}}}}"#
    );
    std::fs::write(data.join(METADATA_FILE), legacy).expect("legacy metadata file");
    broker.restart();
    assert!(
        broker
            .stderr_tail(200)
            .contains("seeding the metadata log from the legacy metadata file"),
        "stderr:\n{}",
        broker.stderr_tail(40)
    );
    let response = ensure_topics(broker.addr(), &[topic]).await;
    assert_eq!(
        response.cluster_id.as_ref().map(|c| c.as_str()),
        Some("LegacyClusterId0000001"),
        "the cluster id is kept"
    );
    assert_eq!(
        topic_id(&broker, topic).await,
        id_before,
        "the topic id is kept"
    );
    let consumer = consumer(&broker, &[]);
    assign(&consumer, topic, &[(0, Offset::Beginning)]);
    let got = recv_n(&consumer, RECORDS, TIMEOUT).await;
    let served: Vec<(i64, String)> = got
        .iter()
        .map(|m| {
            let v = String::from_utf8(m.payload().expect("value").to_vec()).expect("utf8");
            (m.offset(), v)
        })
        .collect();
    assert_eq!(served, acked, "every record is served after the upgrade");
    assert!(
        !data.join(METADATA_FILE).exists(),
        "the legacy file is retired"
    );
    assert!(data.join(format!("{METADATA_FILE}.migrated")).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contradicting_partition_directories_refuse_to_start_and_change_nothing() {
    let mut broker = Broker::start_with(&["num.partitions=2"]);
    let topic = "split";
    ensure_topics(broker.addr(), &[topic]).await;
    let status = broker.terminate();
    assert!(status.success(), "clean stop: {status:?}");
    let data = broker.data_dir().to_path_buf();
    // Partition 1 now claims another topic id than partition 0, and the image is gone.
    std::fs::write(
        data.join(format!("{topic}-1")).join("partition.metadata"),
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
    )
    .expect("rewrite partition.metadata");
    std::fs::remove_dir_all(data.join(METADATA_LOG_DIR)).expect("remove the metadata log");
    let before = snapshot(&data);

    let (code, stderr) = run_broker_on(&data, &["--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "exit 2; stderr:\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("millrace: "))
        .unwrap_or_else(|| panic!("one line for the operator; stderr:\n{stderr}"));
    assert!(
        line.contains(METADATA_FILE)
            && line.contains("different topic ids")
            && line.contains("restore"),
        "names the file, the contradiction and what to do: {line}"
    );
    assert_eq!(snapshot(&data), before, "a refused start changes no file");
}
