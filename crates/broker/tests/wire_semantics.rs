//! Goal: the per-request rules of the wire protocol that clients act on — Produce validation
//! errors, Metadata topic selection and auto-creation, ListOffsets special timestamps, Fetch
//! response fields and KIP-74, DescribeCluster — match Kafka's, checked with raw requests.

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::*;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::ListOffsetsPartitionResponse;
use kafka_protocol::messages::{DescribeClusterRequest, ListOffsetsRequest, MetadataResponse};
use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};

/// Produces with acks=-1 at `version`, returning the single partition's error code.
async fn produce_error(
    conn: &mut RawConn,
    version: i16,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> i16 {
    let response = conn
        .request(version, &produce_request(topic, partition, records, -1))
        .await;
    assert_eq!(response.responses.len(), 1);
    assert_eq!(response.responses[0].partition_responses.len(), 1);
    response.responses[0].partition_responses[0].error_code
}

async fn high_watermark(conn: &mut RawConn, topic: &str) -> i64 {
    let response = conn.request(12, &fetch_request(topic, 0, 0, 0, 1)).await;
    only_partition(&response).high_watermark
}

fn values(n: usize, tag: &str) -> Vec<kafka_protocol::records::Record> {
    (0..n)
        .map(|i| {
            record(
                None,
                Some(format!("{tag}-{i}").as_bytes()),
                1_700_000_000_000,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_produce_requests_get_kafkas_error_codes_and_append_nothing() {
    let broker = Broker::start();
    let topic = unique_topic("produce-errors");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let good = encode_batch(&values(2, "good"));
    produce_batch(&mut conn, &topic, 0, good.clone()).await;
    assert_eq!(high_watermark(&mut conn, &topic).await, 2);

    // Two batches in one partition's records (v3+ allows exactly one): INVALID_RECORD.
    let mut two = BytesMut::new();
    two.extend_from_slice(&good);
    two.extend_from_slice(&good);
    let code = produce_error(&mut conn, 9, &topic, 0, two.freeze()).await;
    assert_eq!(
        code, 87,
        "two batches in one Produce partition: expected INVALID_RECORD"
    );

    // A flipped byte inside the CRC-covered part: CORRUPT_MESSAGE.
    let mut corrupt = BytesMut::from(&good[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xFF;
    let code = produce_error(&mut conn, 9, &topic, 0, corrupt.freeze()).await;
    assert_eq!(code, 2, "batch with a bad CRC: expected CORRUPT_MESSAGE");

    // Magic 1 (a message set, not a v2 batch): INVALID_RECORD.
    let mut magic1 = BytesMut::from(&good[..]);
    magic1[16] = 1;
    let code = produce_error(&mut conn, 9, &topic, 0, magic1.freeze()).await;
    assert_eq!(code, 87, "magic 1 on Produce v9: expected INVALID_RECORD");

    // zstd below Produce v7: UNSUPPORTED_COMPRESSION_TYPE.
    let mut zstd = BytesMut::new();
    RecordBatchEncoder::encode_with_custom_compression(
        &mut zstd,
        values(1, "zstd").iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Zstd,
        },
        Some(|_raw: &mut BytesMut, out: &mut BytesMut, _c: Compression| {
            // The broker must refuse on the codec bit alone; the payload is never read.
            out.extend_from_slice(b"not really zstd");
            Ok(())
        }),
    )
    .expect("encode");
    let code = produce_error(&mut conn, 6, &topic, 0, zstd.freeze()).await;
    assert_eq!(
        code, 76,
        "zstd on Produce v6: expected UNSUPPORTED_COMPRESSION_TYPE"
    );

    // A partition that does not exist, and a topic that does not exist.
    let code = produce_error(&mut conn, 9, &topic, 5, good.clone()).await;
    assert_eq!(code, 3, "partition 5 of a 1-partition topic");
    let missing = unique_topic("produce-missing");
    let code = produce_error(&mut conn, 9, &missing, 0, good.clone()).await;
    assert_eq!(
        code, 3,
        "Produce to a missing topic (Produce never auto-creates)"
    );
    let m = metadata(&mut conn, Some(&[&missing]), false).await;
    assert_eq!(
        m.topics[0].error_code, 3,
        "Produce must not have created {missing}"
    );

    // None of the rejected requests appended anything.
    assert_eq!(high_watermark(&mut conn, &topic).await, 2);
    // And the connection is still fine.
    let ok = produce_batch(&mut conn, &topic, 0, good).await;
    assert_eq!(ok.base_offset, 2);
}

fn topic_names(response: &MetadataResponse) -> Vec<String> {
    response
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str().to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_selects_topics_and_auto_creates_only_when_asked() {
    let broker = Broker::start();
    let a = unique_topic("md-a");
    let b = unique_topic("md-b");
    ensure_topics(broker.addr(), &[&a, &b]).await;
    let mut conn = RawConn::connect(broker.addr()).await;

    // [] → no topics; null → all topics.
    let none = metadata(&mut conn, Some(&[]), true).await;
    assert!(
        none.topics.is_empty(),
        "topics=[] returned {:?}",
        topic_names(&none)
    );
    let all = metadata(&mut conn, None, false).await;
    let names = topic_names(&all);
    assert!(
        names.contains(&a) && names.contains(&b),
        "topics=null returned {names:?}"
    );

    // The cluster view: one live broker, which is also the controller.
    assert_eq!(all.brokers.len(), 1);
    let node = all.brokers[0].node_id;
    assert_eq!(
        all.controller_id, node,
        "controller_id must be the live broker"
    );
    assert_eq!(all.brokers[0].port, i32::from(broker.addr().port()));
    assert!(all.cluster_id.as_ref().is_some_and(|c| !c.is_empty()));
    for t in &all.topics {
        for p in &t.partitions {
            assert_eq!(
                p.leader_id, node,
                "leader of {:?}/{}",
                t.name, p.partition_index
            );
            assert_eq!(p.replica_nodes, vec![node]);
            assert_eq!(p.isr_nodes, vec![node]);
        }
    }

    // Unknown topic without auto-creation: UNKNOWN_TOPIC_OR_PARTITION, and it stays unknown.
    let c = unique_topic("md-c");
    for _ in 0..2 {
        let m = metadata(&mut conn, Some(&[&c]), false).await;
        assert_eq!(m.topics.len(), 1);
        assert_eq!(
            m.topics[0].error_code, 3,
            "unknown topic without auto-create"
        );
    }
    // With auto-creation it appears (possibly after LEADER_NOT_AVAILABLE).
    ensure_topics(broker.addr(), &[&c]).await;

    // An invalid name is INVALID_TOPIC_EXCEPTION even with auto-creation on.
    let m = metadata(&mut conn, Some(&["bad/name"]), true).await;
    assert_eq!(m.topics.len(), 1);
    assert_eq!(
        m.topics[0].error_code, 17,
        "Metadata for an invalid topic name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_create_can_be_switched_off() {
    let broker = Broker::start_with(&["auto.create.topics.enable=false"]);
    let topic = unique_topic("no-auto");
    let mut conn = RawConn::connect(broker.addr()).await;
    for _ in 0..3 {
        let m = metadata(&mut conn, Some(&[&topic]), true).await;
        assert_eq!(m.topics.len(), 1);
        assert_eq!(
            m.topics[0].error_code, 3,
            "auto.create.topics.enable=false: Metadata(allow_auto_topic_creation) must not create"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn list_offset(
    conn: &mut RawConn,
    version: i16,
    topic: &str,
    timestamp: i64,
) -> ListOffsetsPartitionResponse {
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let response = conn.request(version, &request).await;
    assert_eq!(response.topics.len(), 1);
    assert_eq!(response.topics[0].partitions.len(), 1);
    response.topics[0].partitions[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_answers_earliest_latest_max_timestamp_and_by_time() {
    let broker = Broker::start();
    let topic = unique_topic("list-offsets");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;

    let empty_latest = list_offset(&mut conn, 7, &topic, -1).await;
    assert_eq!(
        (empty_latest.error_code, empty_latest.offset),
        (0, 0),
        "latest of an empty log"
    );

    // One batch with timestamps out of order: 10, 50, 20, 40, 30 (relative to t0).
    let t0 = now_ms() - 60_000;
    let records: Vec<_> = [10, 50, 20, 40, 30]
        .iter()
        .map(|d| record(None, Some(b"v"), t0 + d))
        .collect();
    produce_batch(&mut conn, &topic, 0, encode_batch(&records)).await;

    for version in [1i16, 4, 7] {
        let earliest = list_offset(&mut conn, version, &topic, -2).await;
        assert_eq!(
            (earliest.error_code, earliest.offset),
            (0, 0),
            "v{version} earliest"
        );
        let latest = list_offset(&mut conn, version, &topic, -1).await;
        assert_eq!(
            (latest.error_code, latest.offset),
            (0, 5),
            "v{version} latest"
        );
    }

    // -3 (v7+): the record with the largest timestamp.
    let max = list_offset(&mut conn, 7, &topic, -3).await;
    assert_eq!(max.error_code, 0);
    assert_eq!((max.offset, max.timestamp), (1, t0 + 50), "max timestamp");

    // By time: the first offset whose timestamp is >= the target.
    for (target, offset, timestamp) in [
        (t0, 0, t0 + 10),
        (t0 + 15, 1, t0 + 50),
        (t0 + 35, 1, t0 + 50),
        (t0 + 50, 1, t0 + 50),
    ] {
        let r = list_offset(&mut conn, 7, &topic, target).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(
            (r.offset, r.timestamp),
            (offset, timestamp),
            "by time t0+{}",
            target - t0
        );
    }
    let after = list_offset(&mut conn, 7, &topic, t0 + 51).await;
    assert_eq!(after.error_code, 0);
    assert_eq!(
        (after.offset, after.timestamp),
        (-1, -1),
        "no record at or after t0+51"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_fills_the_fields_clients_read_and_returns_whole_batches() {
    let broker = Broker::start();
    let topic = unique_topic("fetch-fields");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    // A ~20 KiB first batch, then a small one.
    let big: Vec<_> = (0..20)
        .map(|i| record(None, Some(&[b'a' + (i % 26); 1024][..]), now_ms()))
        .collect();
    produce_batch(&mut conn, &topic, 0, encode_batch(&big)).await;
    produce_batch(&mut conn, &topic, 0, encode_batch(&values(3, "small"))).await;

    let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
    let p = only_partition(&response);
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 23);
    assert_eq!(
        p.last_stable_offset, 23,
        "last_stable_offset = high watermark without transactions"
    );
    assert_eq!(p.log_start_offset, 0, "log_start_offset");
    assert_eq!(p.preferred_read_replica, -1, "preferred_read_replica");
    assert!(
        matches!(p.aborted_transactions.as_deref(), None | Some([])),
        "aborted_transactions for a non-transactional log"
    );
    assert_eq!(decode_records(&p.records).len(), 23);

    // KIP-74: limits smaller than the first batch still return that whole batch.
    let mut small = fetch_request(&topic, 0, 0, 0, 1);
    small.max_bytes = 100;
    small.topics[0].partitions[0].partition_max_bytes = 100;
    let response = conn.request(12, &small).await;
    let p = only_partition(&response);
    assert_eq!(p.error_code, 0);
    let got = decode_records(&p.records);
    assert_eq!(got.len(), 20, "exactly the whole first batch, nothing more");

    // Unknown partition and unknown topic.
    let response = conn.request(12, &fetch_request(&topic, 7, 0, 0, 1)).await;
    assert_eq!(
        only_partition(&response).error_code,
        3,
        "fetch from partition 7"
    );
    let missing = unique_topic("fetch-missing");
    let response = conn.request(12, &fetch_request(&missing, 0, 0, 0, 1)).await;
    assert_eq!(
        only_partition(&response).error_code,
        3,
        "fetch from a missing topic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_by_topic_id_up_to_v18() {
    let broker = Broker::start();
    let topic = unique_topic("fetch-v18");
    let id = ensure_topics(broker.addr(), &[&topic]).await.topics[0].topic_id;
    let mut conn = RawConn::connect(broker.addr()).await;
    produce_batch(&mut conn, &topic, 0, encode_batch(&values(3, "v18"))).await;
    // v13+ names the topic by id (KIP-516); v18 adds the follower's high watermark (KIP-1166,
    // tagged, a replica's field: a consumer leaves it at its default).
    for version in [13i16, 17, 18] {
        let mut request = fetch_request(&topic, 0, 0, 0, 1);
        request.topics[0].topic = Default::default();
        request.topics[0].topic_id = id;
        let response = conn.request(version, &request).await;
        assert_eq!(response.responses[0].topic_id, id, "v{version}");
        let p = only_partition(&response);
        assert_eq!((p.error_code, p.high_watermark), (0, 3), "v{version}");
        assert_eq!(decode_records(&p.records).len(), 3, "v{version}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_agrees_with_metadata() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let md = metadata(&mut conn, Some(&[]), false).await;
    for version in [0i16, 1] {
        let response = conn
            .request(version, &DescribeClusterRequest::default())
            .await;
        assert_eq!(response.error_code, 0, "DescribeCluster v{version}");
        assert_eq!(
            Some(response.cluster_id.clone()),
            md.cluster_id,
            "DescribeCluster v{version} cluster_id vs Metadata"
        );
        assert_eq!(response.controller_id, md.controller_id);
        assert_eq!(response.brokers.len(), 1);
        assert_eq!(response.brokers[0].broker_id, md.brokers[0].node_id);
        assert_eq!(response.brokers[0].host.as_str(), "127.0.0.1");
        assert_eq!(response.brokers[0].port, i32::from(broker.addr().port()));
    }
}

/// Kafka advances the high watermark before it answers an acks=-1 Produce on a single replica,
/// so a Fetch sent after the answer must see the records (read-your-writes), whatever the codec,
/// including the first Produce to a topic that was just created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_produce_is_visible_to_the_next_fetch() {
    const TOPICS: i64 = 150;
    const ROUNDS: i64 = 2;
    let broker = Broker::start();
    let mut stale = Vec::new();
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut other = RawConn::connect(broker.addr()).await;
    for codec in ["none", "zstd"] {
        for t in 0..TOPICS {
            let topic = unique_topic(&format!("read-your-writes-{codec}"));
            ensure_topics(broker.addr(), &[&topic]).await;
            for round in 0..ROUNDS {
                let records = values(5, "ryw");
                let batch = if codec == "zstd" {
                    encode_zstd_batch(&records)
                } else {
                    encode_batch(&records)
                };
                let produced = produce_batch(&mut conn, &topic, 0, batch).await;
                assert_eq!(
                    produced.base_offset,
                    round * 5,
                    "{codec} topic {t} round {round}"
                );
                let want = round * 5 + 5;
                // Same connection, then another connection.
                let same = high_watermark(&mut conn, &topic).await;
                let elsewhere = high_watermark(&mut other, &topic).await;
                if same != want || elsewhere != want {
                    stale.push((codec, t, round, want, same, elsewhere));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "{} of {} Fetches right after an acknowledged Produce saw a stale high watermark \
         (codec, topic#, round, expected, same connection, other connection): {:?}",
        stale.len(),
        2 * TOPICS * ROUNDS,
        &stale[..stale.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_message_max_bytes_is_message_too_large() {
    let broker = Broker::start_with(&["message.max.bytes=10000"]);
    let topic = unique_topic("too-large");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let big = encode_batch(&[record(None, Some(&[7u8; 20_000]), now_ms())]);
    let code = produce_error(&mut conn, 9, &topic, 0, big).await;
    assert_eq!(
        code, 10,
        "20 KB batch with message.max.bytes=10000: expected MESSAGE_TOO_LARGE"
    );
    let small = encode_batch(&[record(None, Some(&[7u8; 5_000]), now_ms())]);
    let ok = produce_batch(&mut conn, &topic, 0, small).await;
    assert_eq!(
        ok.base_offset, 0,
        "the rejected batch must not have taken an offset"
    );
}

/// KIP-467: a keyless record on a compacted topic refuses the batch with INVALID_RECORD and names
/// the record in `record_errors`, so the client fails only that record; nothing is appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_record_on_a_compacted_topic_is_named_in_record_errors() {
    let broker = Broker::start_with(&["log.cleanup.policy=compact"]);
    let topic = unique_topic("compacted");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let batch = encode_batch(&[
        record(Some(b"k0"), Some(b"v0"), now_ms()),
        record(None, Some(b"v1"), now_ms()),
        record(Some(b"k2"), Some(b"v2"), now_ms()),
        record(None, Some(b"v3"), now_ms()),
    ]);
    let response = conn
        .request(9, &produce_request(&topic, 0, batch, -1))
        .await;
    let p = &response.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 87, "INVALID_RECORD");
    let named: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(named, vec![1, 3], "the keyless records are named");
    assert!(p
        .record_errors
        .iter()
        .all(|e| e.batch_index_error_message.is_some()));
    let keyed = encode_batch(&[record(Some(b"k"), Some(b"v"), now_ms())]);
    let ok = produce_batch(&mut conn, &topic, 0, keyed).await;
    assert_eq!(ok.base_offset, 0, "the refused batch appended nothing");
}
