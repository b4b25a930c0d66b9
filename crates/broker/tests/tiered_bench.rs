//! Tiered storage's benchmarks (not part of the test suite: `#[ignore]`; run with
//! `cargo test --release -p millrace-broker --test tiered_bench -- --ignored --nocapture`).
//! One broker tiering to a real SeaweedFS on loopback, measured in one run:
//!
//! - catch-up read throughput of a consumer reading from offset 0 a tiered topic whose data is
//!   almost all in the object store, against the same read of a plain topic from local segments;
//! - produce throughput to a tiered topic while its uploads run, against a plain topic.
//!
//! Prints one line per figure and the ratios, for docs/benchmarks.md.

mod common;

use std::time::{Duration, Instant};

use common::*;
use millrace_tiered::testing::SeaweedFs;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

/// Bytes written to each topic.
const TOTAL_BYTES: usize = 512 * 1024 * 1024;
const VALUE_BYTES: usize = 1024;
const SEGMENT_BYTES: &str = "67108864";
const LOCAL_RETENTION_BYTES: &str = "67108864";
const MIB: f64 = 1024.0 * 1024.0;

async fn create(bootstrap: &str, topic: &str, tiered: bool) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin");
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(1))
        .set("segment.bytes", SEGMENT_BYTES)
        .set("retention.bytes", "-1");
    if tiered {
        new = new
            .set("remote.storage.enable", "true")
            .set("local.retention.bytes", LOCAL_RETENTION_BYTES);
    }
    for r in admin
        .create_topics(&[new], &AdminOptions::new())
        .await
        .expect("create")
    {
        r.expect("topic created");
    }
}

/// Produces TOTAL_BYTES; MB/s.
fn produce(bootstrap: &str, topic: &str) -> f64 {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("batch.size", "1048576")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("acks", "all")
        .create()
        .expect("producer");
    let value = vec![b'v'; VALUE_BYTES];
    let n = TOTAL_BYTES / VALUE_BYTES;
    let started = Instant::now();
    for _ in 0..n {
        loop {
            match producer.send(
                BaseRecord::<(), [u8]>::to(topic)
                    .partition(0)
                    .payload(&value[..]),
            ) {
                Ok(()) => break,
                Err((_, _)) => producer.poll(Duration::from_millis(1)),
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    TOTAL_BYTES as f64 / MIB / started.elapsed().as_secs_f64()
}

/// Reads everything from offset 0; MB/s.
fn consume(bootstrap: &str, topic: &str) -> f64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "8388608")
        .set("queued.max.messages.kbytes", "262144")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let n = TOTAL_BYTES / VALUE_BYTES;
    let mut seen = 0usize;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    while seen < n {
        assert!(
            Instant::now() < deadline,
            "consumer stalled at {seen} of {n}"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(500)) {
            let m = m.expect("message");
            assert_eq!(m.offset(), seen as i64, "in order");
            seen += 1;
        }
    }
    TOTAL_BYTES as f64 / MIB / started.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand (see the top comment)"]
async fn tiered_read_and_produce_throughput() {
    let weed = SeaweedFs::start().expect("SeaweedFS");
    let http_port = free_port();
    let settings = [
        "remote.log.storage.system.enable=true".to_string(),
        format!("millrace.remote.storage.url={}", weed.url("bench")),
        "remote.log.manager.task.interval.ms=1000".into(),
        "millrace.remote.storage.cache.bytes=134217728".into(),
        format!("millrace.http.listen=127.0.0.1:{http_port}"),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let broker = Broker::start_with_env(&settings, &weed.env());
    let bootstrap = broker.bootstrap();
    create(&bootstrap, "plain", false).await;
    create(&bootstrap, "tiered", true).await;
    let produce_plain = produce(&bootstrap, "plain");
    let produce_tiered = produce(&bootstrap, "tiered");
    // Wait until the tiered topic's local tail is within its bound (the rest uploaded).
    let http: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, metrics) = common::http(http, "GET", "/metrics");
        let lag = metrics
            .lines()
            .find(|l| l.starts_with("millrace_remote_upload_lag_bytes "))
            .and_then(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .unwrap_or(f64::MAX);
        if lag == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "uploads did not catch up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let local_tiered: u64 = std::fs::read_dir(broker.data_dir().join("tiered-0"))
        .expect("dir")
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    let read_local = consume(&bootstrap, "plain");
    let read_remote = consume(&bootstrap, "tiered");
    println!(
        "tiered bench ({} MiB per topic, segment.bytes {SEGMENT_BYTES}, local tail {} MiB on disk):",
        TOTAL_BYTES / (1 << 20),
        local_tiered / (1 << 20)
    );
    println!("  produce: plain {produce_plain:.0} MB/s, tiered with uploads {produce_tiered:.0} MB/s, ratio {:.2}", produce_tiered / produce_plain);
    println!("  catch-up read from 0: local {read_local:.0} MB/s, remote (SeaweedFS) {read_remote:.0} MB/s, ratio {:.2}", read_remote / read_local);
}
