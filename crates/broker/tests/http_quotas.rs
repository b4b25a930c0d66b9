//! Goal: the HTTP API honours client quotas as a Kafka client's connection does (issue 32): with a
//! `producer_byte_rate` on the HTTP API's client id (`millrace-rest`), produce over HTTP slows to
//! the quota — each answer is held back for the throttle time the produce handler computed —
//! while the same requests without the quota go through at once.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::AlterClientQuotasRequest;
use kafka_protocol::protocol::StrBytes;

/// The quota: 40 KB/s. Kafka's rate is measured over at least its 10 s sample window, so the
/// first ~400 KB pass unthrottled.
const QUOTA: f64 = 40_960.0;
/// Records of 50 KB, one per request, 10 requests: the 9th and 10th are over the quota, held
/// back by Kafka's (rate - quota) / quota × window ≈ 1.25 s and 2.5 s.
const RECORD_BYTES: usize = 50 * 1024;
const REQUESTS: usize = 10;

fn set_quota(value: f64) -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("client-id"))
            .with_entity_name(Some(StrBytes::from_static_str("millrace-rest")))])
        .with_ops(vec![OpData::default()
            .with_key(StrBytes::from_static_str("producer_byte_rate"))
            .with_value(value)])])
}

/// Produces the requests over HTTP; how long they took.
fn produce_over_http(http: SocketAddr, topic: &str) -> Duration {
    let value = base64::engine::general_purpose::STANDARD.encode(vec![7u8; RECORD_BYTES]);
    let body = format!(r#"{{"records":[{{"value":"{value}","partition":0}}]}}"#);
    let started = Instant::now();
    for _ in 0..REQUESTS {
        let (status, answer) = http_with_body(
            http,
            "POST",
            &format!("/topics/{topic}"),
            "application/vnd.kafka.binary.v2+json",
            &body,
        );
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("\"offset\""), "{answer}");
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_over_http_slows_to_the_client_ids_quota() {
    let http_port = free_port();
    let broker = Broker::start_with(&[&format!("millrace.http.listen=127.0.0.1:{http_port}")]);
    let http = SocketAddr::from(([127, 0, 0, 1], http_port));
    let topic = unique_topic("http-quota");
    ensure_topics(broker.addr(), &[&topic]).await;

    let free = produce_over_http(http, &topic);
    let mut admin = RawConn::connect(broker.addr()).await;
    let answer = admin.request(1, &set_quota(QUOTA)).await;
    assert!(
        answer.entries.iter().all(|e| e.error_code == 0),
        "{answer:?}"
    );
    let throttled = produce_over_http(http, &topic);
    assert!(
        throttled >= Duration::from_secs(2),
        "500 KB over a 40 KB/s quota took only {throttled:?}"
    );
    // The throttles (~3.75 s) come on top of the requests' own time, however slow the machine.
    assert!(
        throttled >= free + Duration::from_secs(2),
        "with the quota {throttled:?}, without {free:?}"
    );
}
