//! Goal: group configs (GROUP config resources, KIP-848/KIP-932) as Kafka 4.4 serves them — set
//! with IncrementalAlterConfigs and AlterConfigs, described with their sources and synonyms,
//! listed, refused with Kafka's messages, kept across a kill -9 — and obeyed: a consumer group's
//! heartbeat interval; a share group's heartbeat interval, record lock duration, delivery-count
//! limit, in-flight window, where a new share partition starts (`earliest`, `by_duration`), and
//! read_committed consumption that never delivers an aborted transaction's records and waits at
//! an open one.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as OwnedPartitions;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::incremental_alter_configs_request as incremental;
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    AlterConfigsRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    DescribeConfigsRequest, GroupId, IncrementalAlterConfigsRequest, ListConfigResourcesRequest,
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use uuid::Uuid;

const GROUP_RESOURCE: i8 = 32;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const SOURCE_GROUP: i8 = 8;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SET: i8 = 0;
const DELETE: i8 = 1;
const RELEASE: i8 = 2;
const OP_TIMEOUT: Duration = Duration::from_secs(30);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// IncrementalAlterConfigs v1 of one group: (name, op, value) each; its (error code, message).
async fn alter(
    conn: &mut RawConn,
    group: &str,
    changes: &[(&str, i8, Option<&str>)],
) -> (i16, Option<String>) {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental::AlterConfigsResource::default()
            .with_resource_type(GROUP_RESOURCE)
            .with_resource_name(s(group))
            .with_configs(
                changes
                    .iter()
                    .map(|(name, op, value)| {
                        incremental::AlterableConfig::default()
                            .with_name(s(name))
                            .with_config_operation(*op)
                            .with_value(value.map(s))
                    })
                    .collect(),
            ),
    ]);
    let response = conn.request(1, &request).await;
    let r = &response.responses[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// Sets each (name, value) on `group`, expecting success.
async fn set(conn: &mut RawConn, group: &str, pairs: &[(&str, &str)]) {
    let changes: Vec<_> = pairs.iter().map(|(k, v)| (*k, SET, Some(*v))).collect();
    let (code, message) = alter(conn, group, &changes).await;
    assert_eq!(code, 0, "{pairs:?}: {message:?}");
}

/// DescribeConfigs v4 of one group, with synonyms.
async fn describe(conn: &mut RawConn, group: &str) -> (i16, Vec<DescribeConfigsResourceResult>) {
    let request = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(GROUP_RESOURCE)
            .with_resource_name(s(group))
            .with_configuration_keys(None)]);
    let response = conn.request(4, &request).await;
    let r = &response.results[0];
    (r.error_code, r.configs.clone())
}

fn entry<'a>(
    configs: &'a [DescribeConfigsResourceResult],
    name: &str,
) -> &'a DescribeConfigsResourceResult {
    configs
        .iter()
        .find(|c| c.name.as_str() == name)
        .unwrap_or_else(|| panic!("{name} not described: {configs:?}"))
}

fn value_and_source(configs: &[DescribeConfigsResourceResult], name: &str) -> (String, i8) {
    let e = entry(configs, name);
    (
        e.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        e.config_source,
    )
}

/// The groups ListConfigResources v1 lists.
async fn groups_with_configs(conn: &mut RawConn) -> Vec<String> {
    let request = ListConfigResourcesRequest::default().with_resource_types(vec![GROUP_RESOURCE]);
    let response = conn.request(1, &request).await;
    assert_eq!(response.error_code, 0, "{response:?}");
    response
        .config_resources
        .iter()
        .map(|r| r.resource_name.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_are_altered_described_listed_and_refused_as_kafka_does() {
    let broker = Broker::start_with(&["group.share.delivery.count.limit=4"]);
    let mut conn = RawConn::connect(broker.addr()).await;
    let group = "configured-before-it-exists";

    // No configs yet: the broker's values, with where they come from.
    let (code, configs) = describe(&mut conn, group).await;
    assert_eq!(code, 0);
    assert_eq!(
        value_and_source(&configs, "share.record.lock.duration.ms"),
        ("30000".into(), SOURCE_DEFAULT)
    );
    assert_eq!(
        value_and_source(&configs, "share.delivery.count.limit"),
        ("4".into(), SOURCE_STATIC_BROKER)
    );
    let synonyms: Vec<_> = entry(&configs, "share.delivery.count.limit")
        .synonyms
        .iter()
        .map(|s| (s.name.to_string(), s.source))
        .collect();
    assert_eq!(
        synonyms,
        vec![
            (
                "group.share.delivery.count.limit".into(),
                SOURCE_STATIC_BROKER
            ),
            ("group.share.delivery.count.limit".into(), SOURCE_DEFAULT),
        ]
    );
    assert_eq!(
        value_and_source(&configs, "share.auto.offset.reset"),
        ("latest".into(), SOURCE_DEFAULT)
    );
    assert!(
        !configs
            .iter()
            .any(|c| c.name.as_str() == "share.assignor.offload.enable"),
        "internal keys are described only when set"
    );
    assert!(groups_with_configs(&mut conn).await.is_empty());

    // Set before the group exists; described and listed from every request on.
    set(
        &mut conn,
        group,
        &[
            ("share.record.lock.duration.ms", "15000"),
            ("share.auto.offset.reset", "by_duration:PT1H"),
            ("consumer.session.timeout.ms", "50000"),
            ("streams.num.standby.replicas", "1"),
        ],
    )
    .await;
    let (_, configs) = describe(&mut conn, group).await;
    assert_eq!(
        value_and_source(&configs, "share.record.lock.duration.ms"),
        ("15000".into(), SOURCE_GROUP)
    );
    assert_eq!(
        value_and_source(&configs, "share.auto.offset.reset"),
        ("by_duration:PT1H".into(), SOURCE_GROUP)
    );
    assert_eq!(
        value_and_source(&configs, "consumer.session.timeout.ms"),
        ("50000".into(), SOURCE_GROUP)
    );
    assert_eq!(
        groups_with_configs(&mut conn).await,
        vec![group.to_string()]
    );

    // Kafka's refusals, word for word; nothing changes.
    for (changes, code, message) in [
        (
            vec![("share.record.lock.duration.ms", SET, Some("14999"))],
            INVALID_CONFIG,
            "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.",
        ),
        (
            vec![("share.record.lock.duration.ms", SET, Some("abc"))],
            INVALID_CONFIG,
            "Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type INT",
        ),
        (
            vec![("no.such.config", SET, Some("1"))],
            INVALID_CONFIG,
            "Unknown group config name: no.such.config",
        ),
        (
            vec![("share.isolation.level", SET, Some("serializable"))],
            INVALID_CONFIG,
            "Invalid value serializable for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted",
        ),
        (
            vec![("streams.num.standby.replicas", SET, Some("3"))],
            INVALID_CONFIG,
            "streams.num.standby.replicas must be less than or equal to 2",
        ),
        (
            vec![("share.delivery.count.limit", 2, Some("3"))],
            INVALID_CONFIG,
            "Can't APPEND to key share.delivery.count.limit because its type is not LIST.",
        ),
    ] {
        assert_eq!(
            alter(&mut conn, group, &changes).await,
            (code, Some(message.to_string())),
            "{changes:?}"
        );
    }
    assert_eq!(
        alter(
            &mut conn,
            group,
            &[("share.delivery.count.limit", SET, None)]
        )
        .await,
        (
            INVALID_REQUEST,
            Some("Null value not supported for : share.delivery.count.limit".into())
        )
    );
    assert_eq!(
        alter(&mut conn, group, &[("no.such.config", DELETE, None)]).await,
        (0, None),
        "deleting a key that is not set changes nothing, as in Kafka"
    );
    assert_eq!(
        alter(
            &mut conn,
            "",
            &[("share.delivery.count.limit", SET, Some("3"))]
        )
        .await,
        (
            INVALID_REQUEST,
            Some("Default group resources are not allowed.".into())
        )
    );
    let (code, _) = describe(&mut conn, "").await;
    assert_eq!(code, INVALID_REQUEST);
    let (_, configs) = describe(&mut conn, group).await;
    assert_eq!(
        value_and_source(&configs, "share.record.lock.duration.ms"),
        ("15000".into(), SOURCE_GROUP)
    );

    // AlterConfigs (legacy) replaces the whole set, as Kafka 4.4's does for groups.
    let legacy =
        AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(GROUP_RESOURCE)
            .with_resource_name(s(group))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("share.isolation.level"))
                .with_value(Some(s("read_committed")))])]);
    let response = conn.request(2, &legacy).await;
    assert_eq!(response.responses[0].error_code, 0, "{response:?}");
    let (_, configs) = describe(&mut conn, group).await;
    assert_eq!(
        value_and_source(&configs, "share.isolation.level"),
        ("read_committed".into(), SOURCE_GROUP)
    );
    assert_eq!(
        value_and_source(&configs, "share.record.lock.duration.ms"),
        ("30000".into(), SOURCE_DEFAULT)
    );

    // Deleting the last key leaves the group without configs: no longer listed.
    let (code, _) = alter(&mut conn, group, &[("share.isolation.level", DELETE, None)]).await;
    assert_eq!(code, 0);
    assert!(groups_with_configs(&mut conn).await.is_empty());
}

/// Group configs live in the metadata log: a kill -9 and a restart keep them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_survive_a_kill_9() {
    let mut broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    set(&mut conn, "durable", &[("share.delivery.count.limit", "3")]).await;
    broker.kill9();
    broker.restart();
    let mut conn = RawConn::connect(broker.addr()).await;
    let (code, configs) = describe(&mut conn, "durable").await;
    assert_eq!(code, 0);
    assert_eq!(
        value_and_source(&configs, "share.delivery.count.limit"),
        ("3".into(), SOURCE_GROUP)
    );
    assert_eq!(
        groups_with_configs(&mut conn).await,
        vec!["durable".to_string()]
    );
}

// --- share groups obeying their configs ------------------------------------------------------

/// ShareFetch v1 of partition 0; `max_records` 0 only opens or continues the session.
fn share_fetch(
    group: &str,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    wait_ms: i32,
    max_records: i32,
) -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(max_records)
        .with_batch_size(max_records)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![
                FetchPartition::default().with_partition_index(0)
            ])])
}

/// (first, last, delivery count) of each acquired range.
fn acquired(response: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .flat_map(|p| p.acquired_records.iter())
        .map(|r| (r.first_offset, r.last_offset, r.delivery_count))
        .collect()
}

/// One member of a share group on its own connection, fetching partition 0 of one topic.
struct Member {
    conn: RawConn,
    group: String,
    id: String,
    epoch: i32,
    topic_id: Uuid,
}

impl Member {
    async fn open(broker: &Broker, group: &str, topic_id: Uuid) -> Member {
        let mut m = Member {
            conn: RawConn::connect(broker.addr()).await,
            group: group.into(),
            id: format!("{group}-member"),
            epoch: 0,
            topic_id,
        };
        // Opens the session without fetching: the share partition is initialized at the next.
        m.fetch_at_most(0, 0).await;
        m
    }

    async fn fetch(&mut self, wait_ms: i32) -> ShareFetchResponse {
        self.fetch_at_most(wait_ms, 500).await
    }

    async fn fetch_at_most(&mut self, wait_ms: i32, max_records: i32) -> ShareFetchResponse {
        let request = share_fetch(
            &self.group,
            &self.id,
            self.epoch,
            self.topic_id,
            wait_ms,
            max_records,
        );
        let response: ShareFetchResponse = self.conn.request(1, &request).await;
        assert_eq!(response.error_code, 0, "{response:?}");
        self.epoch += 1;
        response
    }

    /// Fetches until something is acquired (within `within`): the answer.
    async fn fetch_until_acquired(&mut self, within: Duration) -> ShareFetchResponse {
        let deadline = Instant::now() + within;
        loop {
            let response = self.fetch(200).await;
            if !acquired(&response).is_empty() {
                return response;
            }
            assert!(Instant::now() < deadline, "nothing acquired: {response:?}");
        }
    }

    /// Every offset acquired until `last` is (within `within`), each with its delivery count.
    async fn acquire_through(&mut self, last: i64, within: Duration) -> Vec<(i64, i16)> {
        let deadline = Instant::now() + within;
        let mut offsets = Vec::new();
        let mut response = ShareFetchResponse::default();
        while offsets.last().is_none_or(|(o, _)| *o < last) {
            assert!(
                Instant::now() < deadline,
                "acquired only {offsets:?}; last answer {response:?}"
            );
            response = self.fetch(200).await;
            for (first, end, count) in acquired(&response) {
                offsets.extend((first..=end).map(|o| (o, count)));
            }
        }
        offsets
    }

    async fn release(&mut self, first: i64, last: i64) {
        let request = ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(s(&self.group))))
            .with_member_id(Some(s(&self.id)))
            .with_share_session_epoch(self.epoch)
            .with_topics(vec![AcknowledgeTopic::default()
                .with_topic_id(self.topic_id)
                .with_partitions(vec![AcknowledgePartition::default()
                    .with_partition_index(0)
                    .with_acknowledgement_batches(vec![AckBatch::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_acknowledge_types(vec![RELEASE])])])]);
        let response: ShareAcknowledgeResponse = self.conn.request(1, &request).await;
        self.epoch += 1;
        assert_eq!(response.error_code, 0, "{response:?}");
        assert_eq!(
            response.responses[0].partitions[0].error_code, 0,
            "{response:?}"
        );
    }
}

async fn produce_at(broker: &Broker, topic: &str, n: usize, timestamp: i64) {
    let mut conn = RawConn::connect(broker.addr()).await;
    let records: Vec<_> = (0..n)
        .map(|i| record(None, Some(format!("v{i}").as_bytes()), timestamp))
        .collect();
    produce_batch(&mut conn, topic, 0, encode_batch(&records)).await;
}

async fn new_topic(broker: &Broker, prefix: &str) -> (String, Uuid) {
    let topic = unique_topic(prefix);
    let response = ensure_topics(broker.addr(), &[&topic]).await;
    (topic, response.topics[0].topic_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_obeys_its_heartbeat_lock_duration_and_delivery_limit() {
    // The broker's own lock stays 30 s; its lower bound lets a group go down to 1 s.
    let broker = Broker::start_with(&[
        "millrace.share.groups.enable=true",
        "group.share.min.record.lock.duration.ms=1000",
    ]);
    let mut admin = RawConn::connect(broker.addr()).await;
    let (topic, topic_id) = new_topic(&broker, "gcfg-locks").await;
    let group = "short-locks";
    set(
        &mut admin,
        group,
        &[
            ("share.record.lock.duration.ms", "1000"),
            ("share.delivery.count.limit", "2"),
            ("share.heartbeat.interval.ms", "7000"),
            ("share.auto.offset.reset", "earliest"),
        ],
    )
    .await;

    let join = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(&Uuid::new_v4().to_string()))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic_name(&topic)]));
    wait_for_coordinator(&mut admin, group).await;
    let r: ShareGroupHeartbeatResponse = admin.request(1, &join).await;
    assert_eq!((r.error_code, r.heartbeat_interval_ms), (0, 7_000), "{r:?}");

    produce_at(&broker, &topic, 3, now_ms()).await;
    let mut m = Member::open(&broker, group, topic_id).await;
    let first = m.fetch_until_acquired(IO_TIMEOUT).await;
    assert_eq!(first.acquisition_lock_timeout_ms, 1_000);
    assert_eq!(acquired(&first), vec![(0, 2, 1)]);
    // Not acknowledged: the 1 s lock ends and the records come back with delivery count 2.
    let started = Instant::now();
    let second = m.fetch_until_acquired(IO_TIMEOUT).await;
    assert_eq!(acquired(&second), vec![(0, 2, 2)]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "redelivered after the group's lock, not the broker's 30 s"
    );
    // Released at the group's limit of 2 deliveries: archived, never delivered again.
    m.release(0, 2).await;
    produce_at(&broker, &topic, 1, now_ms()).await;
    let third = m.fetch_until_acquired(IO_TIMEOUT).await;
    assert_eq!(acquired(&third), vec![(3, 3, 1)]);
}

/// A KIP-848 consumer group is told its own heartbeat interval; another group the broker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_is_told_its_own_heartbeat_interval() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let (topic, _) = new_topic(&broker, "gcfg-consumer").await;
    set(
        &mut conn,
        "cg-configured",
        &[
            ("consumer.heartbeat.interval.ms", "6000"),
            ("consumer.session.timeout.ms", "50000"),
        ],
    )
    .await;
    for (group, interval) in [("cg-configured", 6_000), ("cg-plain", 5_000)] {
        wait_for_coordinator(&mut conn, group).await;
        let join = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(&Uuid::new_v4().to_string()))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![topic_name(&topic)]))
            .with_topic_partitions(Some(Vec::<OwnedPartitions>::new()));
        let r: ConsumerGroupHeartbeatResponse = conn.request(1, &join).await;
        assert_eq!(
            (r.error_code, r.heartbeat_interval_ms),
            (0, interval),
            "{group}: {r:?}"
        );
    }
}

/// `share.partition.max.record.locks` bounds what a group's members hold in flight (rounded up
/// to a log batch); another group on the same partition keeps the broker's 2000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_holds_at_most_its_own_record_locks() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let mut admin = RawConn::connect(broker.addr()).await;
    let (topic, topic_id) = new_topic(&broker, "gcfg-window").await;
    for _ in 0..30 {
        produce_at(&broker, &topic, 10, now_ms()).await;
    }
    for group in ["narrow", "wide"] {
        set(
            &mut admin,
            group,
            &[("share.auto.offset.reset", "earliest")],
        )
        .await;
    }
    set(
        &mut admin,
        "narrow",
        &[("share.partition.max.record.locks", "100")],
    )
    .await;
    let count =
        |r: &ShareFetchResponse| -> i64 { acquired(r).iter().map(|(f, l, _)| l - f + 1).sum() };
    let mut narrow = Member::open(&broker, "narrow", topic_id).await;
    let first = narrow.fetch_until_acquired(IO_TIMEOUT).await;
    assert_eq!(count(&first), 100, "{:?}", acquired(&first));
    assert!(
        acquired(&narrow.fetch(300).await).is_empty(),
        "the window is full until something is acknowledged"
    );
    let mut wide = Member::open(&broker, "wide", topic_id).await;
    assert_eq!(count(&wide.fetch_until_acquired(IO_TIMEOUT).await), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_share_partition_starts_where_the_groups_reset_points() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let mut admin = RawConn::connect(broker.addr()).await;
    let (topic, topic_id) = new_topic(&broker, "gcfg-reset").await;
    let two_hours_ago = now_ms() - 2 * 3_600_000;
    produce_at(&broker, &topic, 4, two_hours_ago).await;
    produce_at(&broker, &topic, 3, now_ms()).await;

    set(
        &mut admin,
        "from-earliest",
        &[("share.auto.offset.reset", "earliest")],
    )
    .await;
    set(
        &mut admin,
        "last-hour",
        &[("share.auto.offset.reset", "by_duration:PT1H")],
    )
    .await;

    let mut earliest = Member::open(&broker, "from-earliest", topic_id).await;
    assert_eq!(
        earliest.acquire_through(6, IO_TIMEOUT).await.first(),
        Some(&(0, 1))
    );
    let mut recent = Member::open(&broker, "last-hour", topic_id).await;
    let got = recent.acquire_through(6, IO_TIMEOUT).await;
    assert_eq!(got.first(), Some(&(4, 1)), "{got:?}");
    // Without a config the group starts at the high watermark (`latest`).
    let mut latest = Member::open(&broker, "plain", topic_id).await;
    assert!(acquired(&latest.fetch(300).await).is_empty());
}

fn transactional(broker: &Broker, id: &str) -> FutureProducer {
    let p = producer(
        broker,
        &[
            ("transactional.id", id),
            ("enable.idempotence", "true"),
            ("transaction.timeout.ms", "60000"),
        ],
    );
    p.init_transactions(OP_TIMEOUT).expect("init_transactions");
    p
}

async fn send(p: &FutureProducer, topic: &str, n: usize) {
    for i in 0..n {
        let value = format!("v{i}");
        let record: FutureRecord<'_, str, str> =
            FutureRecord::to(topic).partition(0).payload(&value);
        p.send(record, OP_TIMEOUT)
            .await
            .unwrap_or_else(|(e, _)| panic!("send: {e:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_share_groups_skip_aborted_transactions_and_wait_at_open_ones() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true", "num.partitions=1"]);
    let mut admin = RawConn::connect(broker.addr()).await;
    let (topic, topic_id) = new_topic(&broker, "gcfg-txn").await;
    set(
        &mut admin,
        "committed-only",
        &[
            ("share.isolation.level", "read_committed"),
            ("share.auto.offset.reset", "earliest"),
        ],
    )
    .await;
    set(
        &mut admin,
        "everything",
        &[("share.auto.offset.reset", "earliest")],
    )
    .await;

    // Offsets 0-2 aborted (marker 3), 4-5 committed (marker 6).
    let p = transactional(&broker, "gcfg-txn");
    p.begin_transaction().expect("begin");
    send(&p, &topic, 3).await;
    p.abort_transaction(OP_TIMEOUT).expect("abort");
    p.begin_transaction().expect("begin");
    send(&p, &topic, 2).await;
    p.commit_transaction(OP_TIMEOUT).expect("commit");

    let mut committed = Member::open(&broker, "committed-only", topic_id).await;
    let got = committed.acquire_through(5, IO_TIMEOUT).await;
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert!(
        offsets.iter().all(|o| !(0..=2).contains(o)),
        "an aborted record was delivered: {offsets:?}"
    );
    assert!(offsets.contains(&4) && offsets.contains(&5), "{offsets:?}");
    // read_uncommitted (the default) delivers the aborted records too.
    let mut everything = Member::open(&broker, "everything", topic_id).await;
    let got = everything.acquire_through(5, IO_TIMEOUT).await;
    assert_eq!(got.first(), Some(&(0, 1)), "{got:?}");

    // An open transaction (7-8) holds read_committed at its first offset until it commits.
    p.begin_transaction().expect("begin");
    send(&p, &topic, 2).await;
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        let r = committed.fetch(300).await;
        assert!(
            acquired(&r).iter().all(|(_, last, _)| *last < 7),
            "acquired past an open transaction: {r:?}"
        );
    }
    let got = everything.acquire_through(8, IO_TIMEOUT).await;
    assert!(got.iter().any(|(o, _)| *o == 7), "{got:?}");
    p.commit_transaction(OP_TIMEOUT).expect("commit");
    let got = committed.acquire_through(8, IO_TIMEOUT).await;
    assert!(got.iter().any(|(o, _)| *o == 7), "{got:?}");
}
