//! Goal: bad bytes on one connection (truncated, oversized, unknown or unsupported requests,
//! garbage) close only that connection, while the broker keeps serving everyone else; and the
//! framing rules clients depend on hold: ApiVersions fallback, in-order answers, no acks=0 reply.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use common::*;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, MetadataRequest, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message};
use rdkafka::producer::FutureRecord;
use tokio::io::AsyncWriteExt;

const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A request header written by hand, so that any key/version can be sent.
fn raw_header(api_key: i16, api_version: i16, correlation_id: i32, flexible: bool) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i16(api_key);
    b.put_i16(api_version);
    b.put_i32(correlation_id);
    b.put_i16(i16::try_from(CLIENT_ID.len()).expect("short"));
    b.put_slice(CLIENT_ID.as_bytes());
    if flexible {
        b.put_u8(0); // no tagged fields
    }
    b
}

/// Deterministic pseudo-random bytes (xorshift64*).
struct Noise(u64);
impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next().to_le_bytes()[3]).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_then_eof_closes_only_that_connection() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut bytes = BytesMut::new();
    bytes.put_i32(100);
    bytes.put_slice(&[0u8; 10]);
    conn.write_all(&bytes).await;
    conn.stream.shutdown().await.expect("half-close");
    conn.expect_closed(CLOSE_TIMEOUT, "100-byte frame cut after 10 bytes, then EOF")
        .await;
    assert_broker_answers(broker.addr(), "after a truncated frame").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_left_open_does_not_stall_other_clients() {
    let broker = Broker::start();
    let mut stalled = RawConn::connect(broker.addr()).await;
    let mut bytes = BytesMut::new();
    bytes.put_i32(100);
    bytes.put_slice(&[0u8; 10]);
    stalled.write_all(&bytes).await;
    for i in 0..3 {
        let started = Instant::now();
        assert_broker_answers(broker.addr(), "while another connection holds half a frame").await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "round {i}: answering took {:?}",
            started.elapsed()
        );
    }
    // The half-sent frame gets no answer.
    let early = stalled.read_frame(Duration::from_millis(300)).await;
    assert!(
        matches!(early, Err(ReadEnd::TimedOut { partial: 0 })),
        "incomplete frame got: {early:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_or_negative_frame_lengths_close_the_connection() {
    let broker = Broker::start();
    let lengths: [(i32, &str); 4] = [
        (200 * 1024 * 1024, "200 MiB"),
        (104_857_601, "socket.request.max.bytes + 1"),
        (-1, "-1"),
        (i32::MIN, "i32::MIN"),
    ];
    for (len, what) in lengths {
        let mut conn = RawConn::connect(broker.addr()).await;
        let mut bytes = BytesMut::new();
        bytes.put_i32(len);
        bytes.put_slice(&[0u8; 16]);
        conn.write_all(&bytes).await;
        conn.expect_closed(CLOSE_TIMEOUT, &format!("frame length {what}"))
            .await;
        assert_broker_answers(broker.addr(), &format!("after frame length {what}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_request_max_bytes_setting_is_enforced() {
    let broker = Broker::start_with(&["socket.request.max.bytes=1024"]);
    // A small request is fine.
    assert_broker_answers(broker.addr(), "small request under a 1 KiB limit").await;
    // A well-formed 2 KiB ApiVersions request exceeds the limit.
    let mut conn = RawConn::connect(broker.addr()).await;
    let big = ApiVersionsRequest::default()
        .with_client_software_name(kafka_protocol::protocol::StrBytes::from_string(
            "a".repeat(2000),
        ))
        .with_client_software_version(kafka_protocol::protocol::StrBytes::from_static_str("1"));
    let bytes = frame(3, 7, &big);
    assert!(bytes.len() > 2000);
    conn.write_all(&bytes).await;
    conn.expect_closed(
        CLOSE_TIMEOUT,
        "2 KiB request with socket.request.max.bytes=1024",
    )
    .await;
    assert_broker_answers(broker.addr(), "after the oversized request").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_or_unserved_api_keys_close_the_connection() {
    let broker = Broker::start();
    // 9999: no such key. 62 (BrokerRegistration), 63 (BrokerHeartbeat): controller-only keys the
    // broker must not serve to clients.
    for (key, version, flexible) in [(9999i16, 0i16, false), (62, 0, true), (63, 0, true)] {
        let mut conn = RawConn::connect(broker.addr()).await;
        let mut payload = raw_header(key, version, 1, flexible);
        payload.put_slice(&[0u8; 8]);
        conn.write_all(&length_prefixed(&payload)).await;
        conn.expect_closed(CLOSE_TIMEOUT, &format!("api key {key} v{version}"))
            .await;
    }
    assert_broker_answers(broker.addr(), "after unknown api keys").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_versions_close_the_connection() {
    let broker = Broker::start();

    // Metadata v99: flexible header, arbitrary body.
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut payload = raw_header(3, 99, 1, true);
    payload.put_slice(&[0u8; 8]);
    conn.write_all(&length_prefixed(&payload)).await;
    conn.expect_closed(CLOSE_TIMEOUT, "Metadata v99").await;

    // Every served key just above its advertised max, and (where min > 0) just below its min:
    // the header is valid, only the version is not served.
    let mut conn = RawConn::connect(broker.addr()).await;
    let served = advertised(&api_versions(&mut conn, 3).await);
    for (key, min, max) in served.iter().copied().filter(|(k, _, _)| *k != 18) {
        let mut versions = vec![max + 1];
        if min > 0 {
            versions.push(min - 1);
        }
        for version in versions {
            let mut conn = RawConn::connect(broker.addr()).await;
            let flexible = ApiKey::try_from(key)
                .map(|k| k.request_header_version(version) >= 2)
                .unwrap_or(true);
            let mut payload = raw_header(key, version, 1, flexible);
            payload.put_slice(&[0u8; 16]);
            conn.write_all(&length_prefixed(&payload)).await;
            conn.expect_closed(
                CLOSE_TIMEOUT,
                &format!("api key {key} v{version} (served {min}..={max})"),
            )
            .await;
        }
    }

    // A well-formed Fetch one version above the advertised max (when the codec knows it).
    let fetch_max = served
        .iter()
        .find(|(k, _, _)| *k == 1)
        .map(|(_, _, max)| *max)
        .expect("Fetch is advertised");
    if fetch_max < FetchRequest::VERSIONS.max {
        let version = fetch_max + 1;
        let topic = unique_topic("unsupported");
        let topic_id = ensure_topics(broker.addr(), &[&topic]).await.topics[0].topic_id;
        let mut request = fetch_request(&topic, 0, 0, 0, 1);
        if version >= 13 {
            request.topics[0].topic = Default::default();
            request.topics[0].topic_id = topic_id;
        }
        let mut conn = RawConn::connect(broker.addr()).await;
        conn.write_all(&frame(version, 1, &request)).await;
        conn.expect_closed(
            CLOSE_TIMEOUT,
            &format!("well-formed Fetch v{version} (advertised max {fetch_max})"),
        )
        .await;
    }

    assert_broker_answers(broker.addr(), "after unsupported versions").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_v0_to_v2_are_advertised_but_refused() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let served = advertised(&api_versions(&mut conn, 3).await);
    assert!(
        matches!(served.iter().find(|(k, _, _)| *k == 0), Some((_, 0, _))),
        "Produce must be advertised from v0: {served:?}"
    );
    for version in 0..=2i16 {
        // acks=-1, timeout 1000, one topic with one partition and an empty message set: the
        // broker must refuse on the version alone.
        let mut payload = raw_header(0, version, 1, false);
        payload.put_i16(-1);
        payload.put_i32(1000);
        payload.put_i32(1);
        payload.put_i16(1);
        payload.put_slice(b"t");
        payload.put_i32(1);
        payload.put_i32(0);
        payload.put_i32(0);
        let mut conn = RawConn::connect(broker.addr()).await;
        conn.write_all(&length_prefixed(&payload)).await;
        conn.expect_closed(CLOSE_TIMEOUT, &format!("Produce v{version}"))
            .await;
    }
    assert_broker_answers(broker.addr(), "after old Produce versions").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_body_closes_the_connection() {
    let broker = Broker::start();
    // Metadata v12 whose body stops in the middle of the topics array.
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut payload = raw_header(3, 12, 1, true);
    payload.put_u8(5); // compact array: 4 topics follow
    payload.put_slice(&[0u8; 3]); // ...but only 3 bytes do
    conn.write_all(&length_prefixed(&payload)).await;
    conn.expect_closed(CLOSE_TIMEOUT, "truncated Metadata v12 body")
        .await;

    // A header that claims a client id longer than the frame.
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut payload = BytesMut::new();
    payload.put_i16(18);
    payload.put_i16(0);
    payload.put_i32(1);
    payload.put_i16(500);
    payload.put_slice(b"short");
    conn.write_all(&length_prefixed(&payload)).await;
    conn.expect_closed(CLOSE_TIMEOUT, "client id length past the frame end")
        .await;

    assert_broker_answers(broker.addr(), "after malformed bodies").await;
}

/// The (key, min, max) ranges the broker promises at least: each key present, with exactly
/// this min (Produce min 0 matters to old librdkafka) and at least this max.
const CONTRACT: [(i16, i16, i16); 11] = [
    (0, 0, 13), // Produce (v0-2 advertised for old librdkafka, rejected if used; 13 marks 4.1)
    (1, 4, 12), // Fetch
    (2, 1, 10), // ListOffsets
    (3, 0, 12), // Metadata
    (18, 0, 4), // ApiVersions
    (19, 2, 7), // CreateTopics
    (20, 1, 6), // DeleteTopics
    (37, 0, 3), // CreatePartitions
    (55, 0, 2), // DescribeQuorum
    (60, 0, 1), // DescribeCluster
    (74, 0, 1), // ListConfigResources
];

/// Keys only controllers or brokers send each other; a client-facing broker must not advertise
/// them (KRaft, inter-broker replication, broker registration). DescribeQuorum (55) is not one:
/// its schema's listeners are broker and controller, and brokers forward it.
const INTERNAL_KEYS: [i16; 11] = [4, 5, 6, 7, 52, 53, 54, 56, 58, 62, 63];

fn assert_contract(list: &[(i16, i16, i16)], what: &str) {
    for (key, min, max) in CONTRACT {
        let entry = list.iter().find(|(k, _, _)| *k == key);
        assert!(
            matches!(entry, Some((_, m, x)) if *m == min && *x >= max),
            "{what}: api key {key} advertised as {entry:?}, contract is min {min}, max >= {max}"
        );
    }
    for (key, min, max) in list {
        assert!(
            min <= max,
            "{what}: api key {key} has min {min} > max {max}"
        );
        assert!(
            !INTERNAL_KEYS.contains(key),
            "{what}: internal api key {key} advertised"
        );
        let known = ApiKey::try_from(*key);
        assert!(known.is_ok(), "{what}: unknown api key {key} advertised");
    }
    let mut keys: Vec<i16> = list.iter().map(|(k, _, _)| *k).collect();
    keys.dedup();
    assert_eq!(keys.len(), list.len(), "{what}: duplicate api keys");
}

fn advertised(response: &ApiVersionsResponse) -> Vec<(i16, i16, i16)> {
    let mut list: Vec<(i16, i16, i16)> = response
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    list.sort_unstable();
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_advertises_the_contract_ranges() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut first: Option<Vec<(i16, i16, i16)>> = None;
    for version in 0..=4 {
        let response = api_versions(&mut conn, version).await;
        assert_eq!(response.error_code, 0, "ApiVersions v{version}");
        let list = advertised(&response);
        assert_contract(&list, &format!("ApiVersions v{version}"));
        match &first {
            None => first = Some(list),
            Some(f) => assert_eq!(&list, f, "ApiVersions v{version} differs from v0"),
        }
    }

    // v3+: the features as Kafka 4.1.1 sends them (decision 0059): v3 gets only the supported
    // ranges whose minimum is above 0 (KIP-1022), both versions the finalized levels with the
    // metadata offset as epoch; nothing else on the wire, which shows as a frame exactly as long
    // as the re-encoded response.
    let correlation_id = conn.send(3, &api_versions_request()).await;
    let mut body = conn
        .read_frame(IO_TIMEOUT)
        .await
        .expect("ApiVersions v3 frame");
    let frame_len = body.len();
    let header = ResponseHeader::decode(&mut body, 0).expect("ApiVersions uses response header v0");
    assert_eq!(header.correlation_id, correlation_id);
    let response = ApiVersionsResponse::decode(&mut body, 3).expect("ApiVersions v3 body");
    let supported: Vec<(String, i16, i16)> = response
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    assert_eq!(supported, vec![("metadata.version".to_string(), 7, 27)]);
    let finalized: Vec<(String, i16)> = response
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.max_version_level))
        .collect();
    assert!(
        finalized.contains(&("group.version".to_string(), 1))
            && finalized.contains(&("metadata.version".to_string(), 27)),
        "{finalized:?}"
    );
    assert!(response.finalized_features_epoch >= 0);
    assert!(!response.zk_migration_ready);
    let minimal = response.compute_size(3).expect("size");
    assert_eq!(
        frame_len,
        4 + minimal,
        "ApiVersions v3 response carries unknown (tagged) bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_above_max_gets_a_v0_unsupported_version_reply() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut payload = raw_header(18, 99, 4242, true);
    api_versions_request()
        .encode(&mut payload, 4)
        .expect("encode a body");
    conn.write_all(&length_prefixed(&payload)).await;

    let mut body = conn
        .read_frame(IO_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("no reply to ApiVersions v99: {e:?}"));
    let header = ResponseHeader::decode(&mut body, 0).expect("response header v0");
    assert_eq!(header.correlation_id, 4242);
    let response = ApiVersionsResponse::decode(&mut body, 0).expect("ApiVersionsResponse v0 body");
    assert!(
        body.is_empty(),
        "{} bytes after the v0 body: the reply is not encoded at v0",
        body.len()
    );
    assert_eq!(response.error_code, 35, "UNSUPPORTED_VERSION");
    let keys: Vec<i16> = response.api_keys.iter().map(|k| k.api_key).collect();
    assert!(keys.contains(&0), "Produce missing from {keys:?}");
    assert!(keys.contains(&1), "Fetch missing from {keys:?}");
    assert_contract(&advertised(&response), "ApiVersions v99 error reply");
    let mut conn2 = RawConn::connect(broker.addr()).await;
    let normal = api_versions(&mut conn2, 3).await;
    assert_eq!(
        advertised(&response),
        advertised(&normal),
        "the error reply must carry the full list"
    );

    // The connection stays usable: the client retries with a version the broker has.
    let retry = api_versions(&mut conn, 3).await;
    assert_eq!(retry.error_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_closes_its_connection_while_a_producer_keeps_going() {
    let broker = Broker::start();
    let topic = unique_topic("garbage");
    ensure_topics(broker.addr(), &[&topic]).await;

    let stop = Arc::new(AtomicBool::new(false));
    let bootstrap = broker.bootstrap();
    let topic2 = topic.clone();
    let stop2 = stop.clone();
    let producer_task = tokio::spawn(async move {
        let producer = producer_at(&bootstrap, &[("acks", "all")]);
        let mut sent = 0i64;
        let mut failures = Vec::new();
        while !stop2.load(Ordering::Relaxed) {
            let value = format!("steady-{sent}");
            let record: FutureRecord<'_, str, str> = FutureRecord::to(&topic2)
                .partition(0)
                .payload(value.as_str());
            match producer.send(record, Duration::from_secs(10)).await {
                Ok(d) if d.offset == sent => sent += 1,
                Ok(d) => {
                    failures.push(format!("record {sent} acknowledged at offset {}", d.offset));
                    sent += 1;
                }
                Err((e, _)) => failures.push(format!("record {sent}: {e:?}")),
            }
        }
        (sent, failures)
    });

    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    for round in 0..40 {
        let mut conn = RawConn::connect(broker.addr()).await;
        let len = 1 + usize::try_from(noise.next() % 2000).expect("small");
        let bytes = if round % 2 == 0 {
            // Completely random bytes, random "length" included.
            noise.bytes(len)
        } else {
            // A correct length prefix around random bytes.
            length_prefixed(&noise.bytes(len)).to_vec()
        };
        conn.write_all(&bytes).await;
        conn.stream.shutdown().await.expect("half-close");
        conn.expect_closed(
            CLOSE_TIMEOUT,
            &format!("garbage round {round} ({len} bytes)"),
        )
        .await;
    }
    assert_broker_answers(broker.addr(), "after garbage").await;

    stop.store(true, Ordering::Relaxed);
    let (sent, failures) = tokio::time::timeout(Duration::from_secs(30), producer_task)
        .await
        .expect("producer task stops")
        .expect("producer task did not panic");
    assert!(
        failures.is_empty(),
        "producer failures during garbage: {failures:?}"
    );
    assert!(
        sent > 0,
        "the producer made no progress during the garbage rounds"
    );

    let mut conn = RawConn::connect(broker.addr()).await;
    let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
    assert_eq!(only_partition(&response).high_watermark, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_request_order() {
    let broker = Broker::start();
    let topic = unique_topic("pipeline");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;

    let metadata_v12 = MetadataRequest::default().with_topics(Some(vec![
        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(topic_name(&topic))),
    ]));
    let metadata_v1 = metadata_v12.clone();
    // The fetch waits 800 ms on an empty log: a broker that answers whatever is ready first
    // would send the later requests' responses before it.
    let long_fetch = fetch_request(&topic, 0, 0, 800, 1);

    let mut bytes = BytesMut::new();
    bytes.extend_from_slice(&frame(3, 1, &api_versions_request()));
    bytes.extend_from_slice(&frame(12, 2, &metadata_v12));
    bytes.extend_from_slice(&frame(12, 3, &long_fetch));
    bytes.extend_from_slice(&frame(0, 4, &ApiVersionsRequest::default()));
    bytes.extend_from_slice(&frame(1, 5, &metadata_v1));
    bytes.extend_from_slice(&frame(4, 6, &api_versions_request()));
    conn.write_all(&bytes).await;

    let r1 = conn.recv::<ApiVersionsRequest>(3, 1).await;
    assert_eq!(r1.error_code, 0);
    let r2 = conn.recv::<MetadataRequest>(12, 2).await;
    assert_eq!(r2.topics.len(), 1);
    let r3 = conn.recv::<FetchRequest>(12, 3).await;
    assert_eq!(only_partition(&r3).error_code, 0);
    let r4 = conn.recv::<ApiVersionsRequest>(0, 4).await;
    assert_eq!(r4.error_code, 0);
    let r5 = conn.recv::<MetadataRequest>(1, 5).await;
    assert_eq!(r5.topics.len(), 1);
    let r6 = conn.recv::<ApiVersionsRequest>(4, 6).await;
    assert_eq!(r6.error_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_0_produce_gets_no_response() {
    let broker = Broker::start();
    let topic = unique_topic("acks0");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;

    let mut bytes = BytesMut::new();
    for i in 0..3 {
        let value = format!("fire-and-forget-{i}");
        let batch = encode_batch(&[record(None, Some(value.as_bytes()), now_ms())]);
        bytes.extend_from_slice(&frame(9, 100 + i, &produce_request(&topic, 0, batch, 0)));
    }
    bytes.extend_from_slice(&frame(3, 200, &api_versions_request()));
    conn.write_all(&bytes).await;

    // The next frame is the ApiVersions answer: recv checks the correlation id (200).
    let response = conn.recv::<ApiVersionsRequest>(3, 200).await;
    assert_eq!(response.error_code, 0);

    // The acks=0 records were appended all the same.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
        let partition = only_partition(&response);
        if partition.high_watermark == 3 {
            let values: Vec<Option<bytes::Bytes>> = decode_records(&partition.records)
                .into_iter()
                .map(|r| r.value)
                .collect();
            let want: Vec<Option<bytes::Bytes>> = (0..3)
                .map(|i| Some(bytes::Bytes::from(format!("fire-and-forget-{i}"))))
                .collect();
            assert_eq!(values, want);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acks=0 records not visible: high watermark {}",
            partition.high_watermark
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
