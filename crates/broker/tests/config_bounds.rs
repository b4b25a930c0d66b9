//! Goal: a config the broker cannot honour stops it at startup with exit code 2 and one line naming
//! the key (batch size limits above the store's bound, a request budget too small for the largest
//! request, a listener of a security protocol that is not served), and a topic's
//! `max.message.bytes` above the bound is refused with INVALID_CONFIG by CreateTopics, AlterConfigs
//! and IncrementalAlterConfigs, leaving the topic as it was.

mod common;

use common::*;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::incremental_alter_configs_request as incremental;
use kafka_protocol::messages::{
    AlterConfigsRequest, CreateTopicsRequest, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::limits::{
    MESSAGE_MAX_BYTES_MAX, REPLICA_FETCH_MAX_BYTES_MAX, SOCKET_REQUEST_MAX_BYTES_MAX,
};
use millrace_store::limits::BATCH_BYTES_MAX;

const INVALID_CONFIG: i16 = 40;

#[test]
fn the_maxima_are_the_stores_batch_bound() {
    assert_eq!(MESSAGE_MAX_BYTES_MAX, BATCH_BYTES_MAX as i64);
    assert_eq!(REPLICA_FETCH_MAX_BYTES_MAX, BATCH_BYTES_MAX as i64);
    assert!(SOCKET_REQUEST_MAX_BYTES_MAX > BATCH_BYTES_MAX as i64);
}

#[test]
fn batch_size_keys_above_the_store_bound_exit_2_naming_key_and_maximum() {
    let batch_max = MESSAGE_MAX_BYTES_MAX.to_string();
    let socket_max = SOCKET_REQUEST_MAX_BYTES_MAX.to_string();
    let cases = [
        (
            "message.max.bytes",
            MESSAGE_MAX_BYTES_MAX + 1,
            batch_max.as_str(),
        ),
        // Issue 10: any value above the store's bound (recovery reads nothing larger) is refused.
        (
            "message.max.bytes",
            MESSAGE_MAX_BYTES_MAX + 1,
            batch_max.as_str(),
        ),
        (
            "replica.fetch.max.bytes",
            REPLICA_FETCH_MAX_BYTES_MAX + 1,
            batch_max.as_str(),
        ),
        (
            "socket.request.max.bytes",
            SOCKET_REQUEST_MAX_BYTES_MAX + 1,
            socket_max.as_str(),
        ),
    ];
    for (key, value, maximum) in cases {
        let set = format!("{key}={value}");
        // A budget large enough that only the key under test is out of bounds.
        assert_refused(
            &[
                "--listen",
                "127.0.0.1:0",
                "--set",
                &set,
                "--set",
                "queued.max.request.bytes=68719476736",
            ],
            &[key, maximum],
        );
    }
}

#[test]
fn a_request_budget_below_the_largest_request_exits_2() {
    assert_refused(
        &[
            "--listen",
            "127.0.0.1:0",
            "--set",
            "queued.max.request.bytes=104857600",
        ],
        &["queued.max.request.bytes", "socket.request.max.bytes"],
    );
}

#[test]
fn listeners_without_their_security_settings_exit_2() {
    // A SASL listener with Kafka's default mechanism (GSSAPI, not served) or a TLS one with
    // Kafka's default keystore type (JKS, not served) does not start: a listener is never served
    // without the security it names.
    for (args, expect) in [
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--set",
                "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            ][..],
            &["SASL_PLAINTEXT", "sasl.enabled.mechanisms", "GSSAPI"][..],
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--set",
                "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            ][..],
            &["SASL_SSL", "ssl.keystore.type", "JKS"][..],
        ),
    ] {
        assert_refused(args, expect);
    }
    // --listen is the PLAINTEXT listener's address.
    assert_refused(
        &["--listen", "SSL://127.0.0.1:0"],
        &["--listen", "PLAINTEXT"],
    );
    // An advertised listener must be a listener.
    assert_refused(
        &[
            "--listen",
            "127.0.0.1:0",
            "--set",
            "advertised.listeners=SSL://broker.example:9093",
        ],
        &["advertised.listeners", "SSL"],
    );
    // Without a PLAINTEXT listener, the inter-broker one must be named (as in Kafka).
    assert_refused(
        &["--set", "listeners=SSL://127.0.0.1:0"],
        &["security.inter.broker.protocol", "PLAINTEXT"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_max_message_bytes_above_the_bound_is_invalid_config() {
    // A PLAINTEXT listener written Kafka's way is served.
    let broker = Broker::start_with(&["message.max.bytes=67108864"]);
    let mut conn = RawConn::connect(broker.addr()).await;
    let too_big = StrBytes::from_string((MESSAGE_MAX_BYTES_MAX + 1).to_string());
    let at_max = StrBytes::from_string(MESSAGE_MAX_BYTES_MAX.to_string());

    let create = |name: &str, value: &StrBytes| {
        CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(topic_name(name))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(vec![CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("max.message.bytes"))
                    .with_value(Some(value.clone()))])])
    };
    let refused = unique_topic("too-big");
    let response = conn.request(7, &create(&refused, &too_big)).await;
    assert_eq!(response.topics[0].error_code, INVALID_CONFIG);
    let message = response.topics[0]
        .error_message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("max.message.bytes")
            && message.contains(&MESSAGE_MAX_BYTES_MAX.to_string()),
        "error message: {message}"
    );
    let listed = metadata(&mut conn, Some(&[&refused]), false).await;
    assert_ne!(
        listed.topics[0].error_code, 0,
        "the refused topic exists anyway"
    );

    let accepted = unique_topic("at-max");
    let response = conn.request(7, &create(&accepted, &at_max)).await;
    assert_eq!(response.topics[0].error_code, 0, "{:?}", response.topics[0]);

    let resource = || {
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(accepted.clone()))
    };
    let alter = AlterConfigsRequest::default().with_resources(vec![resource().with_configs(vec![
        AlterableConfig::default()
            .with_name(StrBytes::from_static_str("max.message.bytes"))
            .with_value(Some(too_big.clone())),
    ])]);
    let response = conn.request(2, &alter).await;
    assert_eq!(response.responses[0].error_code, INVALID_CONFIG);

    let incremental = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(accepted.clone()))
            .with_configs(vec![incremental::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("max.message.bytes"))
                .with_config_operation(0)
                .with_value(Some(too_big.clone()))]),
    ]);
    let response = conn.request(1, &incremental).await;
    assert_eq!(response.responses[0].error_code, INVALID_CONFIG);

    // The topic keeps the value it was created with.
    let describe =
        kafka_protocol::messages::DescribeConfigsRequest::default().with_resources(vec![
            kafka_protocol::messages::describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(accepted.clone()))
                .with_configuration_keys(Some(vec![StrBytes::from_static_str(
                    "max.message.bytes",
                )])),
        ]);
    let response = conn.request(4, &describe).await;
    let value = response.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "max.message.bytes")
        .and_then(|c| c.value.as_ref())
        .map(|v| v.to_string());
    assert_eq!(value, Some(MESSAGE_MAX_BYTES_MAX.to_string()));
}
