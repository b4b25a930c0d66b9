//! Client quotas: AlterClientQuotas sets `producer_byte_rate` on a client id and
//! DescribeClientQuotas shows it (Kafka's filters); a produce over the quota is answered at once
//! with `throttle_time_ms` (Kafka's `(rate - quota) / quota × window`), and the connection
//! handles nothing more until that time has passed (KIP-219's muting), while another client id
//! is not throttled; invalid quotas get Kafka's messages; quotas survive a restart. The 1 MB/s
//! figure with librdkafka and the Java client is a benchmark (`crates/bench/quotas.py`), and
//! `compat-tests/python/test_quotas.py` runs kafka-configs.sh and confluent-kafka against
//! Millrace and Apache Kafka.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiVersionsRequest, DescribeClientQuotasRequest, RequestHeader,
};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn set_quota(client_id: &str, key: &str, value: f64) -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(str("client-id"))
            .with_entity_name(Some(str(client_id)))])
        .with_ops(vec![OpData::default().with_key(str(key)).with_value(value)])])
}

/// A request frame with the given client id (the common helpers use `CLIENT_ID`).
fn frame_as<R: Request + Encodable>(client_id: &str, version: i16, id: i32, body: &R) -> Vec<u8> {
    let key = kafka_protocol::messages::ApiKey::try_from(R::KEY).expect("key");
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(id)
        .with_client_id(Some(str(client_id)));
    let mut payload = bytes::BytesMut::new();
    header
        .encode(&mut payload, key.request_header_version(version))
        .expect("header");
    body.encode(&mut payload, version).expect("body");
    length_prefixed(&payload).to_vec()
}

/// The `producer_byte_rate` of the throttled client id.
const QUOTA: f64 = 40_960.0;

/// The size of the produce frame `produce_as` sends (Kafka charges the whole request).
fn produce_frame_bytes(topic: &str) -> usize {
    let value = vec![7u8; 100 * 1024];
    let batch = encode_batch(&[record(None, Some(&value), now_ms())]);
    frame_as("slow", 9, 1, &produce_request(topic, 0, batch, 1)).len() - 4
}

/// Sends a 100 KB produce as `client_id`; the produce answer's throttle time and when it came.
async fn produce_as(conn: &mut RawConn, client_id: &str, topic: &str, id: i32) -> (i32, Instant) {
    let value = vec![7u8; 100 * 1024];
    let batch = encode_batch(&[record(None, Some(&value), now_ms())]);
    let request = produce_request(topic, 0, batch, 1);
    conn.write_all(&frame_as(client_id, 9, id, &request)).await;
    let response = conn
        .recv::<kafka_protocol::messages::ProduceRequest>(9, id)
        .await;
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "{response:?}");
    (response.throttle_time_ms, Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_produce_quota_is_throttled_and_muted() {
    let mut broker = Broker::start();
    let mut admin = RawConn::connect(broker.addr()).await;
    let set = admin
        .request(1, &set_quota("slow", "producer_byte_rate", QUOTA))
        .await;
    assert_eq!(set.entries[0].error_code, 0, "{set:?}");
    let topic = unique_topic("quota");
    let producer = producer(&broker, &[]);
    producer
        .send(
            rdkafka::producer::FutureRecord::to(&topic)
                .key("k")
                .payload("v"),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|(e, _)| panic!("create the topic: {e}"));

    // 40 KB/s over the 10 s minimum window lets ~400 KB through; the fifth 100 KB produce is
    // over it, throttled by Kafka's (rate - quota) / quota × window.
    let mut slow = RawConn::connect(broker.addr()).await;
    let started = Instant::now();
    let mut throttles = Vec::new();
    let mut answered = started;
    for id in 1..=5 {
        let (throttle, at) = produce_as(&mut slow, "slow", &topic, id).await;
        throttles.push(throttle);
        answered = at;
    }
    let sent = 5.0 * produce_frame_bytes(&topic) as f64;
    let window_ms = 10_000.0 + started.elapsed().as_millis() as f64;
    let expected = (sent / (window_ms / 1000.0) - QUOTA) / QUOTA * window_ms;
    let second = *throttles.last().expect("five answers");
    assert_eq!(
        throttles[0], 0,
        "the first 100 KB is within the quota: {throttles:?}"
    );
    assert!(
        (f64::from(second) - expected).abs() <= expected * 0.15,
        "throttle_time_ms {second} is not Kafka's (rate - quota) / quota × window ≈ {expected:.0}: {throttles:?}"
    );
    // Muted: the next request on the connection is handled only once the throttle has passed.
    let id = 100;
    slow.write_all(&frame_as("slow", 3, id, &ApiVersionsRequest::default()))
        .await;
    let _ = slow.recv::<ApiVersionsRequest>(3, id).await;
    let waited = answered.elapsed();
    assert!(
        waited >= Duration::from_millis(u64::try_from(second).unwrap_or(0) * 9 / 10),
        "answered after {waited:?}, throttle {second} ms"
    );

    // Another client id is not throttled.
    let mut fast = RawConn::connect(broker.addr()).await;
    for id in 1..=3 {
        let (t, _) = produce_as(&mut fast, "fast", &topic, id).await;
        assert_eq!(t, 0, "client id without a quota throttled");
    }

    // Described, and kept across a restart.
    let describe =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(str("client-id"))
            .with_match_type(0)
            .with_match(Some(str("slow")))]);
    drop((admin, slow, fast));
    assert!(broker.terminate().success());
    broker.restart();
    let mut admin = RawConn::connect(broker.addr()).await;
    let described = admin.request(1, &describe).await;
    let entries = described.entries.expect("entries");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].values[0].key.as_str(), "producer_byte_rate");
    assert_eq!(entries[0].values[0].value, QUOTA);
}

#[tokio::test]
async fn invalid_quotas_get_kafkas_answers() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let cases = [
        (set_quota("c", "foo", 1.0), "Invalid configuration key foo"),
        (
            set_quota("c", "producer_byte_rate", 0.0),
            "Quota producer_byte_rate must be greater than 0",
        ),
        (
            set_quota("c", "producer_byte_rate", 1.5),
            "producer_byte_rate cannot be a fractional value.",
        ),
    ];
    for (request, message) in cases {
        let answer = conn.request(1, &request).await;
        assert_eq!(answer.entries[0].error_code, 42, "{answer:?}");
        assert_eq!(answer.entries[0].error_message.as_deref(), Some(message));
    }
    // Nothing was stored.
    let all = conn
        .request(1, &DescribeClientQuotasRequest::default())
        .await;
    assert_eq!(all.entries.map(|e| e.len()), Some(0));
}

#[tokio::test]
async fn a_client_over_its_request_quota_is_throttled() {
    let broker = Broker::start();
    let mut admin = RawConn::connect(broker.addr()).await;
    let set = admin
        .request(1, &set_quota("chatty", "request_percentage", 0.01))
        .await;
    assert_eq!(set.entries[0].error_code, 0, "{set:?}");
    let metadata = kafka_protocol::messages::MetadataRequest::default().with_topics(None);
    // 0.01 % of a thread is 1 ms of handling per 10 s: a few hundred Metadata requests exceed it.
    let mut chatty = RawConn::connect(broker.addr()).await;
    let mut throttle = 0;
    for id in 1..=2_000 {
        chatty
            .write_all(&frame_as("chatty", 12, id, &metadata))
            .await;
        let answer = chatty
            .recv::<kafka_protocol::messages::MetadataRequest>(12, id)
            .await;
        if answer.throttle_time_ms > 0 {
            throttle = answer.throttle_time_ms;
            break;
        }
    }
    assert!(
        throttle > 0,
        "2,000 Metadata requests at 0.01 % were never throttled"
    );
    // The same requests under another client id are not.
    let mut quiet = RawConn::connect(broker.addr()).await;
    for id in 1..=200 {
        quiet.write_all(&frame_as("quiet", 12, id, &metadata)).await;
        let answer = quiet
            .recv::<kafka_protocol::messages::MetadataRequest>(12, id)
            .await;
        assert_eq!(
            answer.throttle_time_ms, 0,
            "a client id without a quota throttled"
        );
    }
}
