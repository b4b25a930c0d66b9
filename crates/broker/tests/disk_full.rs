//! Goal: a full disk never stops the broker (issue 30). The data dir lives on a 64 MiB tmpfs
//! mounted by the test; acks=all produce fills it until produce is refused with
//! KAFKA_STORAGE_ERROR. Then, with the disk still full: Metadata and Fetch keep answering, every
//! acknowledged record reads back, DeleteTopics on a ballast topic succeeds (the metadata quorum
//! writes through its space reserve), and produce resumes with no restart. Finally the disk is
//! filled to the last byte, the broker is killed with SIGKILL and restarted on the full disk: it
//! starts, serves reads, and produce resumes once a file is deleted.
//!
//! A second test sets `millrace.log.dir.min.free.bytes` and checks that produce stops at the
//! low-water mark while offset commits go on.
//!
//! Needs root (mount). Every wait is bounded; the mount is undone by a drop guard, also when the
//! test fails.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use millrace_store::testing::Tmpfs;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// The test file system's size.
const FS_BYTES: u64 = 64 * 1024 * 1024;
/// One record's value (incompressible enough: produced without compression).
const VALUE_BYTES: usize = 8 * 1024;
/// Records of the ballast topic: 12 MiB.
const BALLAST_RECORDS: usize = 1536;
/// Upper bound on fill records (the disk holds far fewer).
const FILL_RECORDS_MAX: usize = 3 * (FS_BYTES as usize) / VALUE_BYTES;
/// Records in flight at once while filling.
const IN_FLIGHT: usize = 32;
const WAIT: Duration = Duration::from_secs(30);

fn admin(broker: &Broker) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("socket.timeout.ms", "10000")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("create admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(20)))
        .operation_timeout(Some(Duration::from_secs(20)))
}

/// A producer that reports a refused batch at once instead of retrying it.
fn eager_producer(broker: &Broker) -> FutureProducer {
    producer(
        broker,
        &[
            ("retries", "0"),
            ("message.timeout.ms", "10000"),
            ("linger.ms", "2"),
            ("compression.type", "none"),
        ],
    )
}

fn value(topic_tag: u8, id: usize) -> Vec<u8> {
    let mut v = format!("{topic_tag}:{id:08}:").into_bytes();
    // Pseudo-random filler, so that nothing on the way compresses it.
    let mut x = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < VALUE_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

fn is_storage_error(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::KafkaStorageError)
}

/// Produces records with ids from `first` on, `IN_FLIGHT` at a time, until one is refused with
/// KAFKA_STORAGE_ERROR (or `max` were sent). Returns the acknowledged (offset → id).
async fn produce_until_refused(
    producer: &FutureProducer,
    topic: &str,
    first: usize,
    max: usize,
) -> (BTreeMap<i64, usize>, bool) {
    let mut acked = BTreeMap::new();
    let mut id = first;
    let mut refused = false;
    while id < first + max && !refused {
        let mut sends = Vec::new();
        for _ in 0..IN_FLIGHT {
            let v = value(1, id);
            let record = FutureRecord::<(), _>::to(topic).payload(&v).partition(0);
            let send = producer.send_result(record).expect("queue a record");
            sends.push((id, send));
            id += 1;
        }
        for (id, send) in sends {
            match send.await.expect("delivery report") {
                Ok(delivery) => {
                    acked.insert(delivery.offset, id);
                }
                Err((e, _)) if is_storage_error(&e) => refused = true,
                Err((e, _)) => panic!("record {id}: unexpected error {e:?}"),
            }
        }
    }
    (acked, refused)
}

/// Produces one record, retrying for up to `WAIT` while it is refused for lack of space.
async fn produce_one_when_space(producer: &FutureProducer, topic: &str, id: usize) -> i64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = value(2, id);
        let record = FutureRecord::<(), _>::to(topic).payload(&v).partition(0);
        match producer.send(record, Duration::from_secs(10)).await {
            Ok(delivery) => return delivery.offset,
            Err((e, _)) if is_storage_error(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err((e, _)) => panic!("produce did not resume within {WAIT:?}: {e:?}"),
        }
    }
}

/// Reads `topic`/0 from the start up to `end` and checks each acknowledged offset holds its id.
async fn assert_acked_read_back(broker: &Broker, topic: &str, acked: &BTreeMap<i64, usize>) {
    let Some((&last, _)) = acked.iter().next_back() else {
        return;
    };
    let consumer = consumer(broker, &[("fetch.max.bytes", "4194304")]);
    assign(&consumer, topic, &[(0, Offset::Beginning)]);
    let deadline = Instant::now() + WAIT;
    let mut seen = 0usize;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = tokio::time::timeout(left, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("read back stopped at {seen} of {} acked", acked.len()))
            .expect("consume");
        if let Some(id) = acked.get(&m.offset()) {
            assert_eq!(
                m.payload(),
                Some(&value(1, *id)[..]),
                "offset {}",
                m.offset()
            );
            seen += 1;
        }
        if m.offset() >= last {
            break;
        }
    }
    assert_eq!(seen, acked.len(), "every acknowledged record reads back");
}

/// Writes `path` until the file system is full, to the last 4 KiB.
fn fill_to_the_brim(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).expect("create the filler file");
    let mut written = 0u64;
    for chunk in [1024 * 1024, 64 * 1024, 4096] {
        let bytes = vec![0xA5u8; chunk];
        while file.write_all(&bytes).is_ok() {
            written += chunk as u64;
        }
    }
    let _ = file.sync_all();
    written
}

fn free_bytes(dir: &Path) -> u64 {
    millrace_store::free_space::free_bytes(dir).expect("statvfs")
}

/// `GET path` on the broker's HTTP listener at 127.0.0.1:`port`; (status code, body).
fn http_get(port: u16, path: &str) -> (u16, String) {
    http(([127, 0, 0, 1], port).into(), "GET", path)
}

fn data_dir_in(fs: &Tmpfs) -> tempfile::TempDir {
    tempfile::tempdir_in(fs.path()).expect("data dir on the tmpfs")
}

fn filler_path(fs: &Tmpfs) -> PathBuf {
    fs.path().join("filler")
}

/// Free bytes on the test file system, polled until they rose by `by` (bounded by `WAIT`).
async fn wait_for_freed(fs: &Tmpfs, before: u64, by: u64, what: &str) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = free_bytes(fs.path());
        if now >= before + by {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what} freed {} of the {by} bytes expected within {WAIT:?}",
            now.saturating_sub(before)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the topics: `ballast` (deleted later), `fill` and `aged` with 1 MiB segments (so that
/// DeleteRecords and retention have whole segments to delete).
async fn create_topics(admin: &AdminClient<DefaultClientContext>) {
    let small_segments = [("segment.bytes", "1048576")];
    let mut fill = NewTopic::new("fill", 1, TopicReplication::Fixed(1));
    let mut aged = NewTopic::new("aged", 1, TopicReplication::Fixed(1));
    for (k, v) in small_segments {
        fill = fill.set(k, v);
        aged = aged.set(k, v);
    }
    let topics = [
        NewTopic::new("ballast", 1, TopicReplication::Fixed(1)),
        fill,
        aged,
    ];
    let created = admin
        .create_topics(&topics, &options())
        .await
        .expect("CreateTopics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

/// With the disk full: /ready is 200 with a degraded line, the gauge shows a nearly full disk.
fn assert_degraded_not_unready(http: u16) {
    let (status, body) = http_get(http, "/ready");
    assert_eq!(status, 200, "{body}");
    // (The first consumer made the broker create __consumer_offsets on the full disk, which the
    // metadata log wrote through its reserve: the reserve line is there, the dir's maybe not.)
    assert!(
        body.starts_with("ready\n") && body.contains("degraded: "),
        "{body}"
    );
    let (_, metrics) = http_get(http, "/metrics");
    let free_line = metrics
        .lines()
        .find(|l| l.starts_with("millrace_log_dir_free_bytes{"))
        .unwrap_or_else(|| panic!("no free-space gauge in {metrics}"));
    let free: u64 = free_line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(free < FS_BYTES / 4, "{free_line}");
}

/// The low watermark of `topic`/0, polled until it passes 0 (bounded by `WAIT`).
async fn wait_for_log_start_above_zero(broker: &Broker, topic: &str) -> i64 {
    let consumer = consumer(broker, &[]);
    let deadline = Instant::now() + WAIT;
    loop {
        let (low, _) = consumer
            .fetch_watermarks(topic, 0, Duration::from_secs(10))
            .expect("ListOffsets");
        if low > 0 {
            return low;
        }
        assert!(
            Instant::now() < deadline,
            "retention never moved {topic}'s log start"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The three ways to free space, each with the disk full: lower retention.bytes, DeleteRecords,
/// DeleteTopics. Each must do what it promises, and together they free the disk.
async fn free_space_with_the_disk_full(
    admin: &AdminClient<DefaultClientContext>,
    broker: &Broker,
    fs: &Tmpfs,
    middle: i64,
) {
    let before = free_bytes(fs.path());
    let alter = AlterConfig::new(ResourceSpecifier::Topic("aged"))
        .set("retention.bytes", "1048576")
        .set("segment.bytes", "1048576");
    let altered = tokio::time::timeout(WAIT, admin.alter_configs(&[alter], &options()))
        .await
        .expect("AlterConfigs on a full disk timed out")
        .expect("AlterConfigs");
    assert!(altered.iter().all(Result::is_ok), "{altered:?}");
    let low = wait_for_log_start_above_zero(broker, "aged").await;
    eprintln!("retention.bytes moved aged's log start to {low}");

    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("fill", 0, Offset::Offset(middle))
        .expect("offset");
    let result = tokio::time::timeout(WAIT, admin.delete_records(&tpl, &options()))
        .await
        .expect("DeleteRecords on a full disk timed out")
        .expect("DeleteRecords");
    let element = result
        .elements()
        .first()
        .map(|e| (e.error().is_ok(), e.offset()));
    assert_eq!(element, Some((true, Offset::Offset(middle))), "{result:?}");

    let deleted = tokio::time::timeout(WAIT, admin.delete_topics(&["ballast"], &options()))
        .await
        .expect("DeleteTopics on a full disk timed out")
        .expect("DeleteTopics");
    assert_eq!(deleted, vec![Ok("ballast".to_string())]);
    // 12 MiB of ballast, half of the fill's segments, 3 MiB of aged: far more than the at most
    // 8 MiB the metadata reserve takes back meanwhile.
    let after = wait_for_freed(fs, before, 16 * 1024 * 1024, "the three deletes").await;
    eprintln!("the deletes freed {} bytes", after - before);
    assert!(
        broker.stderr_tail(400).contains("space reserve released"),
        "the metadata log wrote through its space reserve"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_keeps_serving_frees_space_and_resumes() {
    let started = Instant::now();
    let fs = Tmpfs::mount_fresh(FS_BYTES).expect("mount a tmpfs");
    // `min.free.bytes` 0: the test drives the store to a real ENOSPC, the hard case.
    let http = free_port();
    let mut broker = Broker::start_in(
        data_dir_in(&fs),
        &[
            "--set".to_string(),
            "millrace.log.dir.min.free.bytes=0".to_string(),
            "--set".to_string(),
            "log.retention.check.interval.ms=500".to_string(),
            "--http-listen".to_string(),
            format!("127.0.0.1:{http}"),
        ],
    );
    let admin = admin(&broker);
    create_topics(&admin).await;

    let producer = eager_producer(&broker);
    let (ballast, refused) = produce_until_refused(&producer, "ballast", 0, BALLAST_RECORDS).await;
    assert!(
        !refused && ballast.len() == BALLAST_RECORDS,
        "12 MiB of ballast fit"
    );
    let (aged, refused) = produce_until_refused(&producer, "aged", 0, BALLAST_RECORDS / 3).await;
    assert!(
        !refused && aged.len() == BALLAST_RECORDS / 3,
        "4 MiB of aged fit"
    );

    // Fill the disk.
    let (acked, refused) = produce_until_refused(&producer, "fill", 0, FILL_RECORDS_MAX).await;
    assert!(refused, "produce was refused once the disk filled");
    assert!(acked.len() > 1000, "only {} records fit", acked.len());
    eprintln!(
        "disk full after {} fill records ({} bytes free), {:?}",
        acked.len(),
        free_bytes(fs.path()),
        started.elapsed()
    );
    // Now to the last byte: the metadata quorum has nothing but its reserve.
    fill_to_the_brim(&fs.path().join("filler-1"));

    // Still serving: Metadata, and every acknowledged record reads back.
    let metadata = admin
        .inner()
        .fetch_metadata(Some("fill"), Duration::from_secs(10))
        .expect("Metadata on a full disk");
    assert_eq!(metadata.topics().len(), 1);
    assert_acked_read_back(&broker, "fill", &acked).await;
    assert_degraded_not_unready(http);

    let middle = offset_of_middle(&acked);
    free_space_with_the_disk_full(&admin, &broker, &fs, middle).await;

    // Produce resumes by itself.
    let offset = produce_one_when_space(&producer, "fill", 0).await;
    assert!(offset > *acked.keys().next_back().unwrap_or(&0));
    eprintln!(
        "produce resumed at offset {offset}, {:?}",
        started.elapsed()
    );

    // The reserve comes back with the space (up to half of what is free), without a restart.
    // (Once at the first start, once more after space was freed.)
    let deadline = Instant::now() + WAIT;
    while broker
        .stderr_tail(400)
        .matches("space reserve in place")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the space reserve was not re-created"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Full to the last byte, then SIGKILL and a restart on the full disk.
    let filled = fill_to_the_brim(&filler_path(&fs));
    eprintln!(
        "filler of {filled} bytes, {} bytes free",
        free_bytes(fs.path())
    );
    drop(producer);
    broker.kill9();
    broker.restart_within(Duration::from_secs(60));
    let admin = self::admin(&broker);
    admin
        .inner()
        .fetch_metadata(Some("fill"), Duration::from_secs(10))
        .expect("Metadata after a restart on a full disk");
    // Everything acknowledged from the DeleteRecords offset on.
    let kept: BTreeMap<i64, usize> = acked.range(middle..).map(|(o, i)| (*o, *i)).collect();
    assert_acked_read_back(&broker, "fill", &kept).await;

    std::fs::remove_file(filler_path(&fs)).expect("remove the filler");
    std::fs::remove_file(fs.path().join("filler-1")).expect("remove the first filler");
    let producer = eager_producer(&broker);
    produce_one_when_space(&producer, "fill", 1).await;
    eprintln!("done in {:?}", started.elapsed());
    drop(broker);
}

fn offset_of_middle(acked: &BTreeMap<i64, usize>) -> i64 {
    acked.keys().nth(acked.len() / 2).copied().unwrap_or(0)
}

/// `millrace.log.dir.min.free.bytes`: produce is refused (KAFKA_STORAGE_ERROR) while the disk
/// still has that much free, consumer groups go on committing offsets, `/ready` stays 200 and
/// names the dir; produce resumes once space is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_low_water_mark_refuses_produce_before_the_disk_is_full() {
    const MIN_FREE: u64 = 40 * 1024 * 1024;
    let fs = Tmpfs::mount_fresh(FS_BYTES).expect("mount a tmpfs");
    let http = free_port();
    let broker = Broker::start_in(
        data_dir_in(&fs),
        &[
            "--set".to_string(),
            format!("millrace.log.dir.min.free.bytes={MIN_FREE}"),
            "--http-listen".to_string(),
            format!("127.0.0.1:{http}"),
        ],
    );
    let producer = eager_producer(&broker);
    let (acked, refused) = produce_until_refused(&producer, "low", 0, FILL_RECORDS_MAX).await;
    let free = free_bytes(fs.path());
    assert!(refused, "produce was refused at the low-water mark");
    // Refused with far more than nothing free: at the mark, less what was in flight
    // (`IN_FLIGHT` records of 8 KiB).
    assert!(
        free > MIN_FREE - 2 * 1024 * 1024,
        "{free} bytes free when refused"
    );
    assert!(!acked.is_empty());
    eprintln!(
        "refused after {} records with {free} bytes free",
        acked.len()
    );

    // Consumer groups are not held to the mark: an offset commit succeeds.
    let group = consumer(&broker, &[("group.id", "low-water-group")]);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("low", 0, Offset::Offset(1))
        .expect("offset");
    let deadline = Instant::now() + WAIT;
    loop {
        match group.commit(&tpl, rdkafka::consumer::CommitMode::Sync) {
            Ok(()) => break,
            // The coordinator is loading or being created at first.
            Err(e) if Instant::now() < deadline => {
                eprintln!("commit: {e:?}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("offset commit below the low-water mark: {e:?}"),
        }
    }

    let (status, body) = http_get(http, "/ready");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("degraded: log dir") && body.contains("min.free.bytes"),
        "{body}"
    );

    // Free space (delete the topic), and produce resumes by itself.
    let admin = admin(&broker);
    let deleted = admin
        .delete_topics(&["low"], &options())
        .await
        .expect("DeleteTopics");
    assert_eq!(deleted, vec![Ok("low".to_string())]);
    produce_one_when_space(&producer, "low", 0).await;
}

/// `metadata.log.dir` on a file system of its own, and only that one fills: produce and reads go
/// on; metadata changes go through the reserve, then (the reserve spent, the disk full to the last
/// byte) wait for space rather than fail the quorum, and commit once space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_metadata_disk_fills() {
    let meta_fs = Tmpfs::mount_fresh(16 * 1024 * 1024).expect("mount a tmpfs");
    let meta_root = meta_fs.path().join("meta");
    let data = tempfile::tempdir().expect("data dir");
    let data_path = data.path().to_path_buf();
    let http = free_port();
    let broker = Broker::start_in(
        data,
        &[
            "--set".to_string(),
            format!("metadata.log.dir={}", meta_root.display()),
            "--http-listen".to_string(),
            format!("127.0.0.1:{http}"),
        ],
    );
    assert!(meta_root.join("__cluster_metadata").is_dir());
    assert!(!data_path.join("__cluster_metadata").exists());
    let admin = admin(&broker);
    let create = |name: &'static str| {
        let admin = &admin;
        async move {
            let topic = NewTopic::new(name, 1, TopicReplication::Fixed(1));
            let opts = AdminOptions::new()
                .request_timeout(Some(Duration::from_secs(5)))
                .operation_timeout(Some(Duration::from_secs(3)));
            admin.create_topics(&[topic], &opts).await
        }
    };

    // Only the metadata disk is full: topics are created (the metadata log's last page has some
    // room; then the reserve is released for it), produce works.
    fill_to_the_brim(&meta_fs.path().join("filler-1"));
    let mut i = 0;
    while !broker.stderr_tail(400).contains("space reserve released") {
        assert!(i < 300, "300 topics created without touching the reserve");
        let name: &'static str = Box::leak(format!("meta-a{i}").into_boxed_str());
        let created = create(name).await.expect("CreateTopics");
        assert!(created.iter().all(Result::is_ok), "{created:?}");
        i += 1;
    }
    eprintln!("the reserve was released at the {i}th topic");
    let producer = eager_producer(&broker);
    produce_one_when_space(&producer, "meta-a0", 0).await;
    let (_, body) = http_get(http, "/ready");
    assert!(
        body.contains("degraded: metadata log: space reserve"),
        "{body}"
    );

    // The reserve spent and the disk full again: a metadata change waits, and the broker keeps
    // serving meanwhile.
    fill_to_the_brim(&meta_fs.path().join("filler-2"));
    let mut stalled = None;
    for i in 0..300 {
        let name: &'static str = Box::leak(format!("meta-b{i}").into_boxed_str());
        let created = create(name).await;
        if !matches!(&created, Ok(r) if r.iter().all(Result::is_ok)) {
            eprintln!("CreateTopics {name} with no space and no reserve: {created:?}");
            stalled = Some(name);
            break;
        }
    }
    let stalled = stalled.expect("a metadata change stalls once the reserve is spent");
    produce_one_when_space(&producer, "meta-a0", 1).await;
    let (status, body) = http_get(http, "/ready");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("metadata log: a write is waiting for space"),
        "{body}"
    );

    // Space returns: the waiting write commits, metadata changes go on.
    std::fs::remove_file(meta_fs.path().join("filler-2")).expect("free space");
    let deadline = Instant::now() + WAIT;
    loop {
        let metadata = admin
            .inner()
            .fetch_metadata(Some(stalled), Duration::from_secs(5))
            .expect("Metadata");
        let ok = metadata
            .topics()
            .iter()
            .any(|t| t.name() == stalled && t.error().is_none() && !t.partitions().is_empty());
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "{stalled} never appeared");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let created = create("meta-c").await.expect("CreateTopics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}
