//! Goal: memory for requests is bounded by `queued.max.request.bytes`: 20 connections that each
//! send the start of a 100 MiB request and stall raise the broker's peak RSS by no more than the
//! budget, a normal client keeps producing meanwhile, the stalled connections are closed by
//! `connections.max.idle.ms`, and the budget is free again afterwards.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use common::*;
use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;
use tokio::io::AsyncWriteExt;

const MIB: usize = 1024 * 1024;
/// The budget under test (`queued.max.request.bytes`).
const BUDGET: usize = 256 * MIB;
/// Each staller declares a request of `socket.request.max.bytes` (its default, 100 MiB).
const DECLARED: usize = 100 * MIB;
const STALLERS: usize = 20;
/// `connections.max.idle.ms` for this test.
const IDLE_MS: u64 = 10_000;
/// Allocator and bookkeeping noise allowed on top of the budget.
const SLACK: usize = 48 * MIB;
/// A write that makes no progress for this long means the broker stopped reading.
const STALL: Duration = Duration::from_secs(3);

/// Opens a connection, sends the size and header of a `DECLARED`-byte Produce request, then body
/// bytes until the broker stops reading (or one byte short of the whole request). Returns the
/// connection, still open, and how many bytes went out.
async fn stall(addr: SocketAddr) -> (RawConn, usize) {
    let mut conn = RawConn::connect(addr).await;
    let mut head = BytesMut::new();
    head.put_i32(i32::try_from(DECLARED).expect("fits"));
    head.put_i16(0); // Produce
    head.put_i16(9);
    head.put_i32(1);
    head.put_i16(5);
    head.put_slice(b"stall");
    head.put_u8(0); // no tagged fields
    conn.write_all(&head).await;
    let chunk = vec![0u8; MIB];
    let mut sent = head.len();
    let end = DECLARED + 4 - 1;
    while sent < end {
        let n = chunk.len().min(end - sent);
        match tokio::time::timeout(STALL, conn.stream.write_all(&chunk[..n])).await {
            Ok(Ok(())) => sent += n,
            Ok(Err(e)) => panic!("staller write failed after {sent} bytes: {e}"),
            Err(_) => break, // the broker is not reading this connection
        }
    }
    (conn, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_large_requests_stay_within_the_budget_and_others_keep_working() {
    let budget = format!("queued.max.request.bytes={BUDGET}");
    let idle = format!("connections.max.idle.ms={IDLE_MS}");
    let broker = Broker::start_with(&[&budget, &idle]);
    let topic = unique_topic("budget");
    ensure_topics(broker.addr(), &[&topic]).await;
    let producer = producer(&broker, &[("acks", "all")]);
    let send = |i: usize| {
        let value = format!("steady-{i}");
        let producer = &producer;
        let topic = &topic;
        async move {
            let record: FutureRecord<'_, str, str> =
                FutureRecord::to(topic).partition(0).payload(value.as_str());
            producer
                .send(record, Duration::from_secs(10))
                .await
                .map(|d| d.offset)
                .map_err(|(e, _)| e)
        }
    };
    assert_eq!(send(0).await.expect("first record"), 0);
    let (idle_rss, _) = rss_and_peak(broker.pid());

    let started = Instant::now();
    let stallers: Vec<_> = (0..STALLERS)
        .map(|_| tokio::spawn(stall(broker.addr())))
        .collect();
    let (mut conns, mut sent) = (Vec::new(), Vec::new());
    for s in stallers {
        let (conn, bytes) = s.await.expect("staller task");
        sent.push(bytes);
        conns.push(conn);
    }
    let sent_total: usize = sent.iter().sum();
    // Whole but for the last byte: the broker read all the staller offered.
    let read_whole = sent.iter().filter(|b| **b == DECLARED + 4 - 1).count();
    let stalled_in = started.elapsed();

    // A normal client keeps working while the stallers hold what they could get.
    for i in 1..=20 {
        let offset = tokio::time::timeout(Duration::from_secs(5), send(i))
            .await
            .unwrap_or_else(|_| panic!("record {i} not acknowledged within 5 s during the stall"))
            .unwrap_or_else(|e| panic!("record {i}: {e:?}"));
        assert_eq!(offset, i64::try_from(i).expect("small"));
    }
    assert_broker_answers(broker.addr(), "during the stall").await;

    let (rss, peak) = rss_and_peak(broker.pid());
    eprintln!(
        "idle RSS {} MiB, RSS {} MiB, peak {} MiB; stallers sent {} MiB in {stalled_in:?}",
        idle_rss / MIB,
        rss / MIB,
        peak / MIB,
        sent_total / MIB
    );
    assert!(
        (1..=BUDGET / DECLARED).contains(&read_whole),
        "{read_whole} stallers were read whole, expected 1..={} with a {} MiB budget: {sent:?}",
        BUDGET / DECLARED,
        BUDGET / MIB
    );
    assert!(
        peak.saturating_sub(idle_rss) <= BUDGET + SLACK,
        "peak RSS grew by {} MiB with a budget of {} MiB (idle {} MiB, peak {} MiB)",
        peak.saturating_sub(idle_rss) / MIB,
        BUDGET / MIB,
        idle_rss / MIB,
        peak / MIB
    );

    // connections.max.idle.ms closes every half-sent request.
    let deadline = Duration::from_millis(IDLE_MS) + Duration::from_secs(10);
    for (i, conn) in conns.iter_mut().enumerate() {
        conn.expect_closed(deadline, &format!("staller {i}")).await;
    }

    // The budget is free again: a well-formed request of 90 MiB is read and answered.
    let big = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_string("a".repeat(90 * MIB)))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let mut conn = RawConn::connect(broker.addr()).await;
    let correlation_id = conn.send(3, &big).await;
    let response = conn.recv::<ApiVersionsRequest>(3, correlation_id).await;
    // Kafka refuses a software name that long with INVALID_REQUEST, but answers.
    assert!(
        response.error_code == 0 || response.error_code == 42,
        "error code {}",
        response.error_code
    );
    let mut broker = broker;
    assert!(broker.is_running(), "broker exited");
}
