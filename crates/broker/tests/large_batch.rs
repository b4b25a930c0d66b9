//! Goal: the largest batch the configured limits accept, acknowledged with acks=all, survives
//! `kill -9` (recovery reads back every batch append accepted), and one byte more is refused with
//! MESSAGE_TOO_LARGE instead of being acknowledged.
//!
//! The limits: `message.max.bytes` set just below the store's bound
//! (`millrace_store::limits::BATCH_BYTES_MAX`, 100 MiB), so that a Produce request carrying the
//! batch still fits the default `socket.request.max.bytes` (also 100 MiB).

mod common;

use bytes::Bytes;
use common::*;
use kafka_protocol::records::RecordBatchDecoder;

/// Kafka's MESSAGE_TOO_LARGE.
const MESSAGE_TOO_LARGE: i16 = 10;
/// Room left in a default-sized request for its headers.
const REQUEST_HEADROOM: usize = 1024;
/// `message.max.bytes` for this test: the largest batch the broker must accept.
const MAX_BATCH: usize = 100 * 1024 * 1024 - REQUEST_HEADROOM;

/// One uncompressed batch of exactly `size` bytes (one record, its value sized to fit).
fn batch_of_size(size: usize) -> Bytes {
    let mut value_len = size - 200;
    for _ in 0..16 {
        let value = vec![b'x'; value_len];
        let b = encode_batch(&[record(None, Some(&value), now_ms())]);
        match b.len().cmp(&size) {
            std::cmp::Ordering::Equal => return b,
            std::cmp::Ordering::Less => value_len += size - b.len(),
            std::cmp::Ordering::Greater => value_len -= b.len() - size,
        }
    }
    panic!("no batch of exactly {size} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_accepted_batch_survives_kill_9() {
    let mut broker = Broker::start_with(&[&format!("message.max.bytes={MAX_BATCH}")]);
    let topic = unique_topic("large");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;

    let too_big = conn
        .request(
            9,
            &produce_request(&topic, 0, batch_of_size(MAX_BATCH + 1), -1),
        )
        .await;
    assert_eq!(
        too_big.responses[0].partition_responses[0].error_code, MESSAGE_TOO_LARGE,
        "one byte over message.max.bytes is refused"
    );
    let largest = produce_batch(&mut conn, &topic, 0, batch_of_size(MAX_BATCH)).await;
    assert_eq!(largest.base_offset, 0, "acknowledged with acks=all");
    let small = produce_batch(
        &mut conn,
        &topic,
        0,
        encode_batch(&[record(None, Some(b"after"), now_ms())]),
    )
    .await;
    assert_eq!(small.base_offset, 1);
    drop(conn);

    broker.kill9();
    broker.restart();

    let mut conn = RawConn::connect(broker.addr()).await;
    let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
    let partition = only_partition(&response);
    assert_eq!(partition.error_code, 0);
    assert_eq!(
        partition.high_watermark,
        2,
        "both acknowledged batches survive recovery; stderr:\n{}",
        broker.stderr_tail(20)
    );
    let mut records = partition.records.clone().expect("records");
    assert!(records.len() >= MAX_BATCH, "the big batch is served whole");
    let sets = RecordBatchDecoder::decode_all(&mut records).expect("valid batches");
    let first = &sets[0].records[0];
    assert_eq!(first.offset, 0);
    let value_len = first.value.as_ref().map_or(0, |v| v.len());
    assert!(value_len > MAX_BATCH - 200, "value of {value_len} bytes");
    let response = conn.request(12, &fetch_request(&topic, 0, 1, 0, 1)).await;
    let after = decode_records(&only_partition(&response).records);
    assert_eq!(after[0].offset, 1);
    assert_eq!(after[0].value.as_deref(), Some(&b"after"[..]));
}
