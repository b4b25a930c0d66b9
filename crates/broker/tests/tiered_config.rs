//! Goal: tiered storage's configuration surface behaves as Kafka 4's, seen through a real admin
//! client (librdkafka) and raw requests: a broker with `remote.log.storage.system.enable=true` and
//! a `file://` url creates a tiered topic, DescribeConfigs shows the tiered keys with Kafka's values
//! and sources (topic and broker resources), Kafka's rules refuse bad combinations with
//! INVALID_CONFIG and a message naming the key, `local.retention.ms` changes live down to the
//! partition's log, a broker with the system off refuses tiered topics, and the start-up refusal
//! and warning are one line each.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::incremental_alter_configs_request as incremental;
use kafka_protocol::messages::{
    AlterConfigsRequest, CreateTopicsRequest, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigResource, ConfigSource, NewTopic,
    ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;

const INVALID_CONFIG: i16 = 40;
/// Bound on one admin call.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on a committed config reaching the partition's `config.json`.
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);

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
        .request_timeout(Some(Duration::from_secs(10)))
        .operation_timeout(Some(Duration::from_secs(10)))
}

/// A broker with tiered storage on, its object store a `file://` directory (only accepted at this
/// stage), and a broker-level `log.local.retention.bytes`.
fn tiered_broker(store: &Path) -> Broker {
    let url = format!("millrace.remote.storage.url=file://{}", store.display());
    Broker::start_with(&[
        "remote.log.storage.system.enable=true",
        &url,
        "log.local.retention.bytes=1073741824",
    ])
}

/// CreateTopics through librdkafka: the topic's error code, if any.
async fn create(
    admin: &AdminClient<DefaultClientContext>,
    name: &str,
    configs: &[(&str, &str)],
) -> Result<(), RDKafkaErrorCode> {
    let mut topic = NewTopic::new(name, 1, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let results = tokio::time::timeout(ADMIN_TIMEOUT, admin.create_topics(&[topic], &options()))
        .await
        .expect("CreateTopics timed out")
        .expect("CreateTopics failed as a whole");
    match &results[..] {
        [Ok(_)] => Ok(()),
        [Err((_, code))] => Err(*code),
        other => panic!("one result expected: {other:?}"),
    }
}

async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    resource: ResourceSpecifier<'_>,
) -> ConfigResource {
    let mut results = tokio::time::timeout(
        ADMIN_TIMEOUT,
        admin.describe_configs(&[resource], &options()),
    )
    .await
    .expect("DescribeConfigs timed out")
    .expect("DescribeConfigs failed as a whole");
    assert_eq!(results.len(), 1);
    results.remove(0).expect("DescribeConfigs of the resource")
}

/// Asserts `key`'s described value and source.
fn assert_entry(resource: &ConfigResource, key: &str, value: Option<&str>, source: ConfigSource) {
    let entry = resource
        .get(key)
        .unwrap_or_else(|| panic!("{key} is not described"));
    assert_eq!(
        (entry.value.as_deref(), &entry.source),
        (value, &source),
        "{key}"
    );
}

/// CreateTopics v7 on a raw connection: the topic's error code and message.
async fn create_raw(conn: &mut RawConn, name: &str, configs: &[(&str, &str)]) -> (i16, String) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )]);
    let response = conn.request(7, &request).await;
    let topic = &response.topics[0];
    let message = topic
        .error_message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    (topic.error_code, message)
}

/// Asserts INVALID_CONFIG with a message containing every piece of `expect`.
fn assert_invalid_config((code, message): (i16, String), expect: &[&str]) {
    assert_eq!(code, INVALID_CONFIG, "message: {message}");
    for piece in expect {
        assert!(message.contains(piece), "'{piece}' missing from: {message}");
    }
}

/// Polls the partition's `config.json` until its `local_retention_ms` is `expected`.
async fn wait_for_local_retention_ms(broker: &Broker, topic: &str, expected: i64) {
    let path = broker
        .data_dir()
        .join(format!("{topic}-0"))
        .join("config.json");
    let deadline = Instant::now() + APPLY_TIMEOUT;
    let mut last = None;
    while Instant::now() < deadline {
        last = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|v| v.get("local_retention_ms").and_then(|m| m.as_i64()));
        if last == Some(expected) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{}: local_retention_ms is {last:?}, not {expected}, after {APPLY_TIMEOUT:?}",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_topic_is_created_described_refused_and_altered_as_in_kafka() {
    let store = tempfile::tempdir().expect("object store dir");
    let broker = tiered_broker(store.path());
    let admin = admin(&broker);

    // Created with remote storage; the broker's log.local.retention.bytes is inherited.
    let topic = unique_topic("tiered");
    let tiered = [
        ("remote.storage.enable", "true"),
        ("retention.ms", "3600000"),
        ("local.retention.ms", "60000"),
    ];
    assert_eq!(create(&admin, &topic, &tiered).await, Ok(()));
    let described = describe(&admin, ResourceSpecifier::Topic(&topic)).await;
    assert_entry(
        &described,
        "remote.storage.enable",
        Some("true"),
        ConfigSource::DynamicTopic,
    );
    assert_entry(
        &described,
        "local.retention.ms",
        Some("60000"),
        ConfigSource::DynamicTopic,
    );
    assert_entry(
        &described,
        "local.retention.bytes",
        Some("1073741824"),
        ConfigSource::StaticBroker,
    );
    for key in ["remote.log.copy.disable", "remote.log.delete.on.disable"] {
        assert_entry(&described, key, Some("false"), ConfigSource::Default);
    }
    wait_for_local_retention_ms(&broker, &topic, 60_000).await;

    // The broker resource: what was set, and Millrace's and Kafka's defaults.
    let node = describe(&admin, ResourceSpecifier::Broker(1)).await;
    let url = format!("file://{}", store.path().display());
    for (key, value, source) in [
        (
            "remote.log.storage.system.enable",
            "true",
            ConfigSource::StaticBroker,
        ),
        (
            "millrace.remote.storage.url",
            &url,
            ConfigSource::StaticBroker,
        ),
        (
            "log.local.retention.bytes",
            "1073741824",
            ConfigSource::StaticBroker,
        ),
        ("log.local.retention.ms", "-2", ConfigSource::Default),
        (
            "millrace.remote.storage.max.pending.bytes",
            "10737418240",
            ConfigSource::Default,
        ),
        (
            "millrace.remote.storage.cache.bytes",
            "67108864",
            ConfigSource::Default,
        ),
        (
            "millrace.remote.storage.orphan.grace.ms",
            "600000",
            ConfigSource::Default,
        ),
        (
            "remote.log.manager.task.interval.ms",
            "30000",
            ConfigSource::Default,
        ),
        ("remote.fetch.max.wait.ms", "500", ConfigSource::Default),
    ] {
        assert_entry(&node, key, Some(value), source);
    }

    // Kafka's rules, through librdkafka (the code) and a raw request (the message).
    let mut conn = RawConn::connect(broker.addr()).await;
    let too_much_local = [
        ("remote.storage.enable", "true"),
        ("retention.bytes", "1000"),
        ("local.retention.bytes", "2000"),
    ];
    let compacted = [
        ("remote.storage.enable", "true"),
        ("cleanup.policy", "compact"),
    ];
    for (configs, expect) in [
        (
            &too_much_local[..],
            &["local.retention.bytes", "retention.bytes (1000)"][..],
        ),
        (&compacted[..], &["cleanup.policy", "compacted"][..]),
    ] {
        let refused = unique_topic("refused");
        assert_eq!(
            create(&admin, &refused, configs).await,
            Err(RDKafkaErrorCode::InvalidConfig),
            "{configs:?}"
        );
        assert_invalid_config(create_raw(&mut conn, &refused, configs).await, expect);
        let listed = metadata(&mut conn, Some(&[&refused]), false).await;
        assert_ne!(listed.topics[0].error_code, 0, "{refused} exists anyway");
    }

    // local.retention.ms altered live (AlterConfigs replaces the whole set, as in Kafka). The
    // client's Ok proves nothing (rust-rdkafka 0.39 never reports an AlterConfigs resource's
    // error); DescribeConfigs and the log's config.json do.
    let alter = AlterConfig::new(ResourceSpecifier::Topic(&topic))
        .set("remote.storage.enable", "true")
        .set("retention.ms", "3600000")
        .set("local.retention.ms", "120000");
    let altered = tokio::time::timeout(ADMIN_TIMEOUT, admin.alter_configs(&[alter], &options()))
        .await
        .expect("AlterConfigs timed out")
        .expect("AlterConfigs");
    assert!(altered.iter().all(Result::is_ok), "{altered:?}");
    let described = describe(&admin, ResourceSpecifier::Topic(&topic)).await;
    assert_entry(
        &described,
        "local.retention.ms",
        Some("120000"),
        ConfigSource::DynamicTopic,
    );
    wait_for_local_retention_ms(&broker, &topic, 120_000).await;

    // Above retention.ms, or turning remote storage off without deleting: refused, unchanged.
    let incremental_set = |pairs: &[(&str, &str)]| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topic.clone()))
                .with_configs(
                    pairs
                        .iter()
                        .map(|(k, v)| {
                            incremental::AlterableConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_config_operation(0)
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                ),
        ])
    };
    for (pairs, expect) in [
        (
            &[("local.retention.ms", "7200000")][..],
            &["local.retention.ms", "retention.ms (3600000)"][..],
        ),
        (
            &[("remote.storage.enable", "false")][..],
            &["remote.storage.enable", "remote.log.delete.on.disable=true"][..],
        ),
    ] {
        let response = conn.request(1, &incremental_set(pairs)).await;
        let r = &response.responses[0];
        let message = r
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default();
        assert_invalid_config((r.error_code, message), expect);
    }
    let described = describe(&admin, ResourceSpecifier::Topic(&topic)).await;
    assert_entry(
        &described,
        "local.retention.ms",
        Some("120000"),
        ConfigSource::DynamicTopic,
    );
    assert_entry(
        &described,
        "remote.storage.enable",
        Some("true"),
        ConfigSource::DynamicTopic,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_tiered_storage_refuses_tiered_topics() {
    let broker = Broker::start();
    let admin = admin(&broker);
    let mut conn = RawConn::connect(broker.addr()).await;
    let tiered = [("remote.storage.enable", "true")];
    let refused = unique_topic("untiered");
    assert_eq!(
        create(&admin, &refused, &tiered).await,
        Err(RDKafkaErrorCode::InvalidConfig)
    );
    assert_invalid_config(
        create_raw(&mut conn, &refused, &tiered).await,
        &[
            "remote.storage.enable",
            "remote.log.storage.system.enable=false",
        ],
    );
    // Nor can an existing topic be switched to it; its other keys are still fine.
    let plain = unique_topic("plain");
    assert_eq!(
        create(&admin, &plain, &[("local.retention.ms", "1000")]).await,
        Ok(())
    );
    // AlterConfigs on a raw connection: rust-rdkafka 0.39 answers Ok for every AlterConfigs
    // resource whatever its error code, so it cannot show a refusal.
    let alter =
        AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(plain.clone()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_static_str("remote.storage.enable"))
                .with_value(Some(StrBytes::from_static_str("true")))])]);
    let response = conn.request(2, &alter).await;
    let r = &response.responses[0];
    let message = r
        .error_message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert_invalid_config(
        (r.error_code, message),
        &[
            "remote.storage.enable",
            "remote.log.storage.system.enable=false",
        ],
    );
    let described = describe(&admin, ResourceSpecifier::Topic(&plain)).await;
    assert_entry(
        &described,
        "remote.storage.enable",
        Some("false"),
        ConfigSource::Default,
    );
    assert_entry(
        &described,
        "local.retention.ms",
        Some("1000"),
        ConfigSource::DynamicTopic,
    );
    let node = describe(&admin, ResourceSpecifier::Broker(1)).await;
    assert_entry(
        &node,
        "remote.log.storage.system.enable",
        Some("false"),
        ConfigSource::Default,
    );
    assert_entry(
        &node,
        "millrace.remote.storage.url",
        None,
        ConfigSource::Default,
    );
}

#[test]
fn the_system_without_a_url_exits_2_and_a_url_alone_warns() {
    assert_refused(
        &[
            "--listen",
            "127.0.0.1:0",
            "--set",
            "remote.log.storage.system.enable=true",
        ],
        &[
            "millrace.remote.storage.url",
            "remote.log.storage.system.enable=true",
        ],
    );
    let store = tempfile::tempdir().expect("object store dir");
    let url = format!(
        "millrace.remote.storage.url=file://{}",
        store.path().display()
    );
    let broker = Broker::start_with(&[&url]);
    let log = broker.stderr_tail(200);
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("millrace.remote.storage.url"))
        .collect();
    assert!(
        matches!(&warnings[..], [line] if line.contains("remote.log.storage.system.enable")),
        "{log}"
    );
}
