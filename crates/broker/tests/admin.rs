//! Goal: topic administration through a real AdminClient (librdkafka) creates, validates, grows
//! and deletes topics the way Kafka does, as seen in Metadata, in produce/consume, and on disk.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication, TopicResult,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::Message;
use rdkafka::metadata::{Metadata, MetadataTopic};
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;

const ADMIN_TIMEOUT: Duration = Duration::from_secs(20);
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

fn admin(broker: &Broker) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("socket.timeout.ms", "10000")
        // rdkafka's AdminClient is a producer-type handle, whose Metadata requests would
        // otherwise auto-create the topics they ask about.
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("create admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(10)))
        .operation_timeout(Some(Duration::from_secs(10)))
}

async fn create(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[NewTopic<'_>],
    opts: &AdminOptions,
) -> Vec<TopicResult> {
    tokio::time::timeout(ADMIN_TIMEOUT, admin.create_topics(topics, opts))
        .await
        .expect("CreateTopics timed out")
        .expect("CreateTopics request failed as a whole")
}

async fn create_one(
    admin: &AdminClient<DefaultClientContext>,
    name: &str,
    partitions: i32,
    replication: i32,
) -> TopicResult {
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(replication));
    let mut results = create(admin, &[topic], &options()).await;
    assert_eq!(results.len(), 1, "one result per topic");
    results.remove(0)
}

fn fetch_metadata(admin: &AdminClient<DefaultClientContext>, topic: &str) -> Metadata {
    admin
        .inner()
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .unwrap_or_else(|e| panic!("metadata for {topic}: {e:?}"))
}

fn topic_of<'m>(metadata: &'m Metadata, topic: &str) -> Option<&'m MetadataTopic> {
    metadata.topics().iter().find(|t| t.name() == topic)
}

/// Polls metadata until `topic` exists without error and has `partitions` partitions.
async fn wait_for_partitions(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    partitions: usize,
) -> Metadata {
    let deadline = Instant::now() + METADATA_TIMEOUT;
    loop {
        let metadata = fetch_metadata(admin, topic);
        if let Some(t) = topic_of(&metadata, topic) {
            if t.error().is_none() && t.partitions().len() == partitions {
                return metadata;
            }
        }
        assert!(
            Instant::now() < deadline,
            "metadata never showed {topic} with {partitions} partitions: {:?}",
            topic_of(&metadata, topic).map(|t| (t.error(), t.partitions().len()))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// True when metadata reports the topic absent or UNKNOWN_TOPIC_OR_PARTITION.
fn topic_absent(metadata: &Metadata, topic: &str) -> bool {
    match topic_of(metadata, topic) {
        None => true,
        Some(t) => matches!(
            t.error().map(RDKafkaErrorCode::from),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition)
        ),
    }
}

/// Every path under `dir` whose file name contains `needle`.
fn paths_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().contains(needle) {
                found.push(path.clone());
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found
}

async fn produce_one(broker: &Broker, topic: &str, partition: i32, value: &str) -> i64 {
    let producer = producer(broker, &[]);
    let record: FutureRecord<'_, str, str> =
        FutureRecord::to(topic).partition(partition).payload(value);
    producer
        .send(record, Duration::from_secs(20))
        .await
        .unwrap_or_else(|(e, _)| panic!("produce to {topic}/{partition}: {e:?}"))
        .offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_topic_shows_its_partitions_in_metadata() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-create");
    let result = create_one(&admin, &topic, 5, 1).await;
    assert_eq!(result, Ok(topic.clone()));

    let md = wait_for_partitions(&admin, &topic, 5).await;
    assert_eq!(md.brokers().len(), 1, "one broker in metadata");
    let b = &md.brokers()[0];
    assert_eq!(b.host(), "127.0.0.1", "advertised host");
    assert_eq!(b.port(), i32::from(broker.addr().port()), "advertised port");
    let t = topic_of(&md, &topic).expect("topic in metadata");
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    for p in t.partitions() {
        assert!(
            p.error().is_none(),
            "partition {} error {:?}",
            p.id(),
            p.error()
        );
        assert_eq!(p.leader(), b.id(), "leader of partition {}", p.id());
        assert_eq!(p.replicas(), &[b.id()], "replicas of partition {}", p.id());
        assert_eq!(p.isr(), &[b.id()], "isr of partition {}", p.id());
    }

    // The raw view carries a real topic id.
    let mut conn = RawConn::connect(broker.addr()).await;
    let raw = metadata(&mut conn, Some(&[&topic]), false).await;
    assert_eq!(raw.topics.len(), 1);
    assert_eq!(raw.topics[0].error_code, 0);
    assert!(!raw.topics[0].topic_id.is_nil(), "topic id must not be nil");
    assert_eq!(raw.topics[0].partitions.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_partitions_and_replication_factor_are_accepted() {
    let broker = Broker::start_with(&["num.partitions=2"]);
    let admin = admin(&broker);
    let topic = unique_topic("admin-defaults");
    // -1 / -1: "use the broker defaults" (CreateTopics v4+).
    let result = create_one(&admin, &topic, -1, -1).await;
    assert_eq!(result, Ok(topic.clone()));
    wait_for_partitions(&admin, &topic, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_an_existing_topic_is_topic_already_exists() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-exists");
    assert_eq!(create_one(&admin, &topic, 2, 1).await, Ok(topic.clone()));
    let again = create_one(&admin, &topic, 2, 1).await;
    assert!(
        matches!(&again, Err((name, RDKafkaErrorCode::TopicAlreadyExists)) if name == &topic),
        "second create: {again:?}"
    );
    // The failed create must not have changed the topic.
    wait_for_partitions(&admin, &topic, 2).await;

    // A topic that came into being by auto-creation counts as existing too.
    let auto = unique_topic("admin-auto");
    produce_one(&broker, &auto, 0, "x").await;
    let result = create_one(&admin, &auto, 1, 1).await;
    assert!(
        matches!(&result, Err((_, RDKafkaErrorCode::TopicAlreadyExists))),
        "create after auto-create: {result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_topic_names_are_invalid_topic() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let too_long = "x".repeat(250);
    for name in [
        "bad/name",
        "has space",
        "..",
        ".",
        "semi;colon",
        too_long.as_str(),
    ] {
        let result = create_one(&admin, name, 1, 1).await;
        assert!(
            matches!(&result, Err((_, RDKafkaErrorCode::InvalidTopic))),
            "create {name:?}: expected InvalidTopic, got {result:?}"
        );
    }
    // None of them may have been created.
    let all = admin
        .inner()
        .fetch_metadata(None, METADATA_TIMEOUT)
        .expect("metadata for all topics");
    let names: Vec<&str> = all.topics().iter().map(|t| t.name()).collect();
    for bad in ["bad/name", "has space", "..", ".", "semi;colon"] {
        assert!(
            !names.contains(&bad),
            "{bad:?} appears in metadata: {names:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_factor_above_broker_count_is_invalid_replication_factor() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-rf3");
    let result = create_one(&admin, &topic, 1, 3).await;
    assert!(
        matches!(
            &result,
            Err((_, RDKafkaErrorCode::InvalidReplicationFactor))
        ),
        "replication factor 3 on one broker: {result:?}"
    );
    let metadata = fetch_metadata(&admin, &topic);
    assert!(
        topic_absent(&metadata, &topic),
        "rejected topic must not exist"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_partitions_is_invalid_partitions() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-zero");
    let result = create_one(&admin, &topic, 0, 1).await;
    assert!(
        matches!(&result, Err((_, RDKafkaErrorCode::InvalidPartitions))),
        "0 partitions: {result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_only_creates_nothing() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-validate");
    let new_topic = NewTopic::new(&topic, 3, TopicReplication::Fixed(1));
    let results = create(&admin, &[new_topic], &options().validate_only(true)).await;
    assert_eq!(results, vec![Ok(topic.clone())], "validate_only result");
    let metadata = fetch_metadata(&admin, &topic);
    assert!(
        topic_absent(&metadata, &topic),
        "validate_only CreateTopics created the topic: {:?}",
        topic_of(&metadata, &topic).map(|t| t.partitions().len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_topic_leaves_metadata_and_disk() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-delete");
    assert_eq!(create_one(&admin, &topic, 2, 1).await, Ok(topic.clone()));
    wait_for_partitions(&admin, &topic, 2).await;
    for p in 0..2 {
        produce_one(&broker, &topic, p, "before delete").await;
    }
    let on_disk = paths_containing(broker.data_dir(), &topic);
    assert!(
        !on_disk.is_empty(),
        "expected the topic's data under {} (an entry whose name contains the topic name)",
        broker.data_dir().display()
    );

    let results = tokio::time::timeout(ADMIN_TIMEOUT, admin.delete_topics(&[&topic], &options()))
        .await
        .expect("DeleteTopics timed out")
        .expect("DeleteTopics request");
    assert_eq!(results, vec![Ok(topic.clone())]);

    let deadline = Instant::now() + METADATA_TIMEOUT;
    loop {
        let metadata = fetch_metadata(&admin, &topic);
        if topic_absent(&metadata, &topic) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} still in metadata after delete"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + METADATA_TIMEOUT;
    loop {
        let left = paths_containing(broker.data_dir(), &topic);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "topic data still on disk {METADATA_TIMEOUT:?} after delete: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The name is free again, and the new topic starts empty.
    assert_eq!(create_one(&admin, &topic, 1, 1).await, Ok(topic.clone()));
    wait_for_partitions(&admin, &topic, 1).await;
    let offset = produce_one(&broker, &topic, 0, "after recreate").await;
    assert_eq!(offset, 0, "recreated topic must start at offset 0");
    let consumer = consumer(&broker, &[]);
    assign(&consumer, &topic, &[(0, Offset::Beginning)]);
    let got = recv_n(&consumer, 1, Duration::from_secs(20)).await;
    assert_eq!(got[0].payload(), Some(&b"after recreate"[..]));
    assert_no_message(&consumer, Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_unknown_topic_is_unknown_topic_or_partition() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-missing");
    let results = tokio::time::timeout(ADMIN_TIMEOUT, admin.delete_topics(&[&topic], &options()))
        .await
        .expect("DeleteTopics timed out")
        .expect("DeleteTopics request");
    assert_eq!(results.len(), 1);
    assert!(
        matches!(
            &results[0],
            Err((_, RDKafkaErrorCode::UnknownTopicOrPartition))
        ),
        "delete of a missing topic: {:?}",
        results[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_partitions_grow_the_topic_and_are_usable() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let topic = unique_topic("admin-grow");
    assert_eq!(create_one(&admin, &topic, 2, 1).await, Ok(topic.clone()));
    wait_for_partitions(&admin, &topic, 2).await;
    assert_eq!(produce_one(&broker, &topic, 1, "old partition").await, 0);

    let grow = NewPartitions::new(&topic, 4);
    let results = tokio::time::timeout(ADMIN_TIMEOUT, admin.create_partitions(&[grow], &options()))
        .await
        .expect("CreatePartitions timed out")
        .expect("CreatePartitions request");
    assert_eq!(results, vec![Ok(topic.clone())]);
    wait_for_partitions(&admin, &topic, 4).await;

    // A fresh producer learns about the new partitions and can write to them.
    for p in 2..4 {
        let offset = produce_one(&broker, &topic, p, &format!("new partition {p}")).await;
        assert_eq!(offset, 0, "first offset in new partition {p}");
    }
    let consumer = consumer(&broker, &[]);
    assign(
        &consumer,
        &topic,
        &[(2, Offset::Beginning), (3, Offset::Beginning)],
    );
    let mut got: Vec<(i32, Vec<u8>)> = recv_n(&consumer, 2, Duration::from_secs(20))
        .await
        .iter()
        .map(|m| (m.partition(), m.payload().expect("value").to_vec()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (2, b"new partition 2".to_vec()),
            (3, b"new partition 3".to_vec())
        ]
    );
    // The old partition kept its data.
    let old = consumer_at(&broker.bootstrap(), &[]);
    assign(&old, &topic, &[(1, Offset::Beginning)]);
    let got = recv_n(&old, 1, Duration::from_secs(20)).await;
    assert_eq!(got[0].payload(), Some(&b"old partition"[..]));

    // Shrinking, or "growing" to the same count, is INVALID_PARTITIONS.
    for count in [3usize, 4] {
        let request = NewPartitions::new(&topic, count);
        let results = tokio::time::timeout(
            ADMIN_TIMEOUT,
            admin.create_partitions(&[request], &options()),
        )
        .await
        .expect("CreatePartitions timed out")
        .expect("CreatePartitions request");
        assert!(
            matches!(
                &results[..],
                [Err((_, RDKafkaErrorCode::InvalidPartitions))]
            ),
            "CreatePartitions to {count} of a 4-partition topic: {results:?}"
        );
    }
    wait_for_partitions(&admin, &topic, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_configs_are_validated_at_creation() {
    let broker = Broker::start();
    let admin = admin(&broker);

    let good = unique_topic("admin-config-ok");
    let topic = NewTopic::new(&good, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("retention.ms", "3600000");
    let results = create(&admin, &[topic], &options()).await;
    assert_eq!(results, vec![Ok(good.clone())], "valid topic configs");

    let cases = [
        ("no.such.config", "1"),
        ("cleanup.policy", "bogus"),
        ("retention.ms", "not-a-number"),
    ];
    for (key, value) in cases {
        let name = unique_topic("admin-config-bad");
        let topic = NewTopic::new(&name, 1, TopicReplication::Fixed(1)).set(key, value);
        let results = create(&admin, &[topic], &options()).await;
        assert!(
            matches!(&results[..], [Err((_, RDKafkaErrorCode::InvalidConfig))]),
            "{key}={value}: expected InvalidConfig, got {results:?}"
        );
        let metadata = fetch_metadata(&admin, &name);
        assert!(
            topic_absent(&metadata, &name),
            "{key}={value}: topic was created anyway"
        );
    }
}
