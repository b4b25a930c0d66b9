//! Goal: ShareFetch and ShareAcknowledge (KIP-932) on the wire as Kafka 4.4 answers them —
//! share sessions and their epochs, records acquired by one member at a time with delivery
//! counts, acknowledgements (accept, release, reject) applied all-or-nothing per partition,
//! records released when a member's connection closes, and share groups off by default
//! (UNSUPPORTED_VERSION, `share.version` not finalized).

mod common;
#[path = "common/share.rs"]
mod share_requests;

use std::time::Instant;

use common::*;
use kafka_protocol::messages::share_fetch_response::PartitionData;
use kafka_protocol::messages::{
    GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const GROUP: &str = "share-group";
const UNSUPPORTED_VERSION: i16 = 35;
const INVALID_REQUEST: i16 = 42;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const REJECT: i8 = 3;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// ShareFetch v1 of partition 0 of `topic_id` for `member` at `epoch`, with `acks` on it.
fn share_fetch(
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: Vec<(i64, i64, i8)>,
    max_wait_ms: i32,
) -> ShareFetchRequest {
    share_requests::share_fetch_request(GROUP, member, epoch, topic_id, &acks, max_wait_ms)
}

fn share_ack(
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: Vec<(i64, i64, i8)>,
) -> ShareAcknowledgeRequest {
    share_requests::share_ack_request(GROUP, member, epoch, topic_id, &acks)
}

fn partition(response: &ShareFetchResponse) -> Option<&PartitionData> {
    response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
}

/// (first, last, delivery count) of each acquired range.
fn acquired(response: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    share_requests::acquired_ranges(response)
}

fn ack_code(response: &ShareAcknowledgeResponse) -> i16 {
    response.responses[0].partitions[0].error_code
}

async fn produce_records(broker: &Broker, topic: &str, n: usize) {
    let mut conn = RawConn::connect(broker.addr()).await;
    let records: Vec<_> = (0..n)
        .map(|i| {
            let value = format!("v{i}");
            record(None, Some(value.as_bytes()), now_ms())
        })
        .collect();
    produce_batch(&mut conn, topic, 0, encode_batch(&records)).await;
}

async fn topic_id(broker: &Broker, topic: &str) -> Uuid {
    let response = ensure_topics(broker.addr(), &[topic]).await;
    response.topics[0].topic_id
}

/// Fetches at `epoch` (advancing it) until something is acquired, within the IO timeout.
async fn fetch_until_acquired(
    conn: &mut RawConn,
    member: &str,
    epoch: &mut i32,
    topic_id: Uuid,
) -> ShareFetchResponse {
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let response: ShareFetchResponse = conn
            .request(1, &share_fetch(member, *epoch, topic_id, vec![], 200))
            .await;
        assert_eq!(response.error_code, 0, "{response:?}");
        *epoch += 1;
        if !acquired(&response).is_empty() {
            return response;
        }
        assert!(
            Instant::now() < deadline,
            "nothing acquired by {member}: {response:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_a_partition_record_by_record() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let topic = unique_topic("share");
    let id = topic_id(&broker, &topic).await;
    let mut a = RawConn::connect(broker.addr()).await;

    // Session rules: acknowledgements cannot open a session; a later epoch needs one.
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("member-a", 0, id, vec![(0, 0, ACCEPT)], 0))
        .await;
    assert_eq!(r.error_code, INVALID_REQUEST, "{r:?}");
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("member-a", 3, id, vec![], 0))
        .await;
    assert_eq!(r.error_code, SHARE_SESSION_NOT_FOUND, "{r:?}");
    let r: ShareAcknowledgeResponse = a.request(1, &share_ack("member-a", 0, id, vec![])).await;
    assert_eq!(r.error_code, INVALID_SHARE_SESSION_EPOCH, "{r:?}");

    // Opening the session makes the share partition at the high watermark (`latest`): the
    // answer names the partition, with no records and a non-null `records`.
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("member-a", 0, id, vec![], 0))
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.acquisition_lock_timeout_ms, 30_000);
    let p = partition(&r).expect("the new partition is answered");
    assert!(p.records.as_ref().is_some_and(|b| b.is_empty()));
    assert!(p.acquired_records.is_empty());
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("member-a", 2, id, vec![], 0))
        .await;
    assert_eq!(r.error_code, INVALID_SHARE_SESSION_EPOCH, "{r:?}");

    produce_records(&broker, &topic, 10).await;
    let mut epoch_a = 1;
    let r = fetch_until_acquired(&mut a, "member-a", &mut epoch_a, id).await;
    assert_eq!(acquired(&r), vec![(0, 9, 1)]);
    assert_eq!(
        decode_records(&partition(&r).expect("records").records).len(),
        10
    );

    // Another member finds nothing to acquire while member A holds the locks.
    let mut b = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = b
        .request(1, &share_fetch("member-b", 0, id, vec![], 0))
        .await;
    assert_eq!(r.error_code, 0);
    let r: ShareFetchResponse = b
        .request(1, &share_fetch("member-b", 1, id, vec![], 300))
        .await;
    assert!(acquired(&r).is_empty(), "{r:?}");
    let mut epoch_b = 2;

    // A partition's acknowledgements are all or nothing: member B cannot accept A's records,
    // and nothing changes.
    let r: ShareAcknowledgeResponse = b
        .request(1, &share_ack("member-b", epoch_b, id, vec![(0, 9, ACCEPT)]))
        .await;
    epoch_b += 1;
    assert_eq!(ack_code(&r), INVALID_RECORD_STATE, "{r:?}");

    // A releases 0..=4, rejects 5 and accepts the rest.
    let r: ShareAcknowledgeResponse = a
        .request(
            1,
            &share_ack(
                "member-a",
                epoch_a,
                id,
                vec![(0, 4, RELEASE), (5, 5, REJECT), (6, 9, ACCEPT)],
            ),
        )
        .await;
    epoch_a += 1;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(ack_code(&r), 0, "{r:?}");

    // B gets the released records, on their second delivery; never the rejected or accepted.
    let r = fetch_until_acquired(&mut b, "member-b", &mut epoch_b, id).await;
    assert_eq!(acquired(&r), vec![(0, 4, 2)]);
    // A's acknowledgement of them now fails: B owns them.
    let r: ShareAcknowledgeResponse = a
        .request(1, &share_ack("member-a", epoch_a, id, vec![(0, 4, ACCEPT)]))
        .await;
    epoch_a += 1;
    assert_eq!(ack_code(&r), INVALID_RECORD_STATE);

    // B's connection closes: its session ends and its records are released to A.
    drop(b);
    let r = fetch_until_acquired(&mut a, "member-a", &mut epoch_a, id).await;
    assert_eq!(acquired(&r), vec![(0, 4, 3)]);

    // Piggybacked on a fetch: accepted; then nothing is left to acquire.
    let r: ShareFetchResponse = a
        .request(
            1,
            &share_fetch("member-a", epoch_a, id, vec![(0, 4, ACCEPT)], 200),
        )
        .await;
    epoch_a += 1;
    let p = partition(&r).expect("the acknowledgement's outcome is answered");
    assert_eq!(p.acknowledge_error_code, 0, "{r:?}");
    assert!(p.acquired_records.is_empty());

    // Closing the session (epoch -1) ends it.
    let r: ShareAcknowledgeResponse = a.request(1, &share_ack("member-a", -1, id, vec![])).await;
    assert_eq!(r.error_code, 0);
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("member-a", epoch_a, id, vec![], 0))
        .await;
    assert_eq!(r.error_code, SHARE_SESSION_NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_released_up_to_the_delivery_limit_is_archived() {
    let http_port = free_port();
    let http_listen = format!("millrace.http.listen=127.0.0.1:{http_port}");
    let broker = Broker::start_with(&[
        "millrace.share.groups.enable=true",
        "group.share.delivery.count.limit=2",
        &http_listen,
    ]);
    let topic = unique_topic("share-limit");
    let id = topic_id(&broker, &topic).await;
    let mut a = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = a.request(1, &share_fetch("m", 0, id, vec![], 0)).await;
    assert_eq!(r.error_code, 0);
    produce_records(&broker, &topic, 1).await;
    let mut epoch = 1;
    let r = fetch_until_acquired(&mut a, "m", &mut epoch, id).await;
    assert_eq!(acquired(&r), vec![(0, 0, 1)]);
    // The release rides on a fetch, applied before it: the same answer acquires it again.
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("m", epoch, id, vec![(0, 0, RELEASE)], 0))
        .await;
    epoch += 1;
    assert_eq!(partition(&r).expect("ack").acknowledge_error_code, 0);
    assert_eq!(acquired(&r), vec![(0, 0, 2)]);
    // The second release reaches the limit: archived, never delivered again.
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("m", epoch, id, vec![(0, 0, RELEASE)], 500))
        .await;
    epoch += 1;
    assert!(acquired(&r).is_empty(), "{r:?}");
    let r: ShareFetchResponse = a
        .request(1, &share_fetch("m", epoch, id, vec![], 500))
        .await;
    assert!(
        acquired(&r).is_empty(),
        "archived record delivered again: {r:?}"
    );

    // The metrics saw one redelivery and one archived record, in one share partition.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let (status, text) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    let metric = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("{name} not in /metrics"))
            .trim()
            .to_string()
    };
    assert_eq!(metric("millrace_share_records_redelivered_total"), "1");
    assert_eq!(metric("millrace_share_records_archived_total"), "1");
    assert_eq!(metric("millrace_share_partitions"), "1");
    assert_eq!(metric("millrace_share_sessions"), "1");
    assert_eq!(metric("millrace_share_acquired_records"), "0");
}

/// A share fetch reads only what the records it may acquire need (it starts small and grows),
/// yet acquires up to `max_records` when they are there: 300 batches of 2 KiB records, far more
/// than the first read holds, all acquired by one fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fetch_acquires_past_its_first_read() {
    let broker = Broker::start();
    let topic = unique_topic("share-big");
    let id = topic_id(&broker, &topic).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = conn.request(1, &share_fetch("big", 0, id, vec![], 0)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut producer = RawConn::connect(broker.addr()).await;
    let value = vec![b'x'; 2048];
    for _ in 0..300 {
        let batch = encode_batch(&[record(None, Some(&value), now_ms())]);
        produce_batch(&mut producer, &topic, 0, batch).await;
    }
    let mut epoch = 1;
    let r = fetch_until_acquired(&mut conn, "big", &mut epoch, id).await;
    assert_eq!(
        acquired(&r),
        vec![(0, 299, 1)],
        "one fetch acquires all 300"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_groups_are_on_by_default() {
    let broker = Broker::start();
    let topic = unique_topic("share-on");
    let _ = topic_id(&broker, &topic).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let versions = api_versions(&mut conn, 4).await;
    let finalized = versions
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "share.version")
        .expect("share.version finalized by default");
    assert_eq!(finalized.max_version_level, 1);
    wait_for_coordinator(&mut conn, GROUP).await;
    let join = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s("member-on-by-default"))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic_name(&topic)]));
    let r: ShareGroupHeartbeatResponse = conn.request(1, &join).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.member_epoch, 1, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_groups_can_be_turned_off() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=false"]);
    let topic = unique_topic("share-off");
    let id = topic_id(&broker, &topic).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let versions = api_versions(&mut conn, 4).await;
    assert!(versions
        .api_keys
        .iter()
        .any(|k| k.api_key == 78 && k.max_version == 2));
    assert!(
        !versions
            .finalized_features
            .iter()
            .any(|f| f.name.as_str() == "share.version"),
        "share.version must not be finalized"
    );
    let r: ShareFetchResponse = conn.request(1, &share_fetch("m", 0, id, vec![], 0)).await;
    assert_eq!(r.error_code, UNSUPPORTED_VERSION);
    let r: ShareAcknowledgeResponse = conn.request(1, &share_ack("m", 1, id, vec![])).await;
    assert_eq!(r.error_code, UNSUPPORTED_VERSION);
    let join = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s("m"))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic_name(&topic)]));
    let r: ShareGroupHeartbeatResponse = conn.request(1, &join).await;
    assert_eq!(r.error_code, UNSUPPORTED_VERSION, "{r:?}");
}
