//! Goal: a Fetch parked at the log end (max_wait_ms, min_bytes) returns as soon as data arrives,
//! and an empty Fetch waits about max_wait_ms — neither much less nor much more.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::{FetchResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

/// Produces one record with a raw acks=-1 Produce; returns its offset.
async fn produce_value(conn: &mut RawConn, topic: &str, value: &str) -> i64 {
    let batch = encode_batch(&[record(None, Some(value.as_bytes()), now_ms())]);
    let response = produce_batch(conn, topic, 0, batch).await;
    assert_eq!(response.error_code, 0, "produce error code");
    response.base_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_fetch_returns_promptly_when_a_record_arrives() {
    let broker = Broker::start();
    let topic = unique_topic("long-poll");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut producer_conn = RawConn::connect(broker.addr()).await;
    assert_eq!(produce_value(&mut producer_conn, &topic, "first").await, 0);

    // Park a fetch at the log end offset (1) for up to 10 s.
    let mut fetch_conn = RawConn::connect(broker.addr()).await;
    let request = fetch_request(&topic, 0, 1, 10_000, 1);
    let correlation_id = fetch_conn.send(12, &request).await;
    let parked_at = Instant::now();
    let waiter = tokio::spawn(async move {
        let body = fetch_conn
            .read_frame(Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("no fetch response: {e:?}"));
        (Instant::now(), body, correlation_id)
    });

    // Give the request time to reach the broker and park. This wait is not needed for
    // correctness: if the fetch were not parked yet, it would still be answered.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !waiter.is_finished(),
        "the fetch at the log end returned after {:?}, before any new data (max_wait_ms=10000, min_bytes=1)",
        parked_at.elapsed()
    );

    let produced_at = Instant::now();
    assert_eq!(produce_value(&mut producer_conn, &topic, "second").await, 1);

    let (answered_at, mut body, correlation_id) =
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("fetch answered within 20 s")
            .expect("waiter task");
    let latency = answered_at.saturating_duration_since(produced_at);
    assert!(
        latency < Duration::from_secs(3),
        "parked fetch answered {latency:?} after the produce (must be < 3 s; max_wait_ms was 10 s)"
    );

    let header = ResponseHeader::decode(&mut body, 1).expect("response header v1 (Fetch v12)");
    assert_eq!(header.correlation_id, correlation_id);
    let response = FetchResponse::decode(&mut body, 12).expect("fetch response v12");
    let partition = only_partition(&response);
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 2);
    let records = decode_records(&partition.records);
    let new: Vec<(i64, Option<bytes::Bytes>)> = records
        .iter()
        .filter(|r| r.offset >= 1)
        .map(|r| (r.offset, r.value.clone()))
        .collect();
    assert_eq!(new, vec![(1, Some(bytes::Bytes::from_static(b"second")))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_fetch_waits_about_max_wait_ms() {
    let broker = Broker::start();
    let topic = unique_topic("long-poll-empty");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    // Warm the connection so the measurement is the broker's wait only.
    let _ = api_versions(&mut conn, 3).await;

    for _ in 0..2 {
        let started = Instant::now();
        let response = conn.request(12, &fetch_request(&topic, 0, 0, 500, 1)).await;
        let elapsed = started.elapsed();
        let partition = only_partition(&response);
        assert_eq!(partition.error_code, 0);
        assert_eq!(partition.high_watermark, 0);
        assert!(
            decode_records(&partition.records).is_empty(),
            "an empty log returned records"
        );
        assert!(
            elapsed >= Duration::from_millis(400),
            "empty fetch with max_wait_ms=500 returned after only {elapsed:?}"
        );
        assert!(
            elapsed < Duration::from_millis(2500),
            "empty fetch with max_wait_ms=500 took {elapsed:?}"
        );
    }

    // max_wait_ms=0 answers at once.
    let started = Instant::now();
    let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
    let elapsed = started.elapsed();
    assert_eq!(only_partition(&response).error_code, 0);
    assert!(
        elapsed < Duration::from_millis(300),
        "fetch with max_wait_ms=0 took {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_fetch_does_not_block_other_connections() {
    let broker = Broker::start();
    let topic = unique_topic("long-poll-other");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut parked = RawConn::connect(broker.addr()).await;
    let _ = parked
        .send(12, &fetch_request(&topic, 0, 0, 10_000, 1))
        .await;

    // Meanwhile, other connections are served at once.
    for _ in 0..5 {
        let started = Instant::now();
        let mut other = RawConn::connect(broker.addr()).await;
        let response = api_versions(&mut other, 3).await;
        assert_eq!(response.error_code, 0);
        let m = metadata(&mut other, Some(&[&topic]), false).await;
        assert_eq!(m.topics.len(), 1);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "another connection waited {:?} behind a parked fetch",
            started.elapsed()
        );
    }
    // And the parked fetch is still parked (no data arrived).
    let early = parked.read_frame(Duration::from_millis(300)).await;
    assert!(
        matches!(early, Err(ReadEnd::TimedOut { partial: 0 })),
        "parked fetch answered early: {early:?}"
    );
}
