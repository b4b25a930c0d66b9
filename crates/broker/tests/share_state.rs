//! Goal: share-partition state is durable in `__share_group_state` (KIP-932) — after a kill -9
//! and restart, accepted records stay accepted, released ones come back with their delivery
//! count, and records in flight are delivered again — and the share-state RPCs (keys 83–87)
//! and FindCoordinator's share key type answer Kafka's error codes. In a cluster, a write whose
//! commit timed out is in the coordinator's log and commits later: the next read returns it.

#[path = "common/cluster.rs"]
mod cluster;
mod common;
#[path = "common/share.rs"]
mod share_requests;

use std::time::Instant;

use base64::Engine;
use cluster::TestCluster;
use common::*;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    delete_share_group_state_request, initialize_share_group_state_request,
    read_share_group_state_request, read_share_group_state_summary_request,
    write_share_group_state_request, DeleteShareGroupStateRequest, FindCoordinatorRequest,
    InitializeShareGroupStateRequest, ListOffsetsRequest, ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareFetchRequest, ShareFetchResponse, WriteShareGroupStateRequest,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const GROUP: &str = "durable-share-group";
const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const FENCED_LEADER_EPOCH: i16 = 74;
const FENCED_STATE_EPOCH: i16 = 124;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn share_fetch(member: &str, epoch: i32, topic_id: Uuid) -> ShareFetchRequest {
    share_requests::share_fetch_request(GROUP, member, epoch, topic_id, &[], 200)
}

fn share_ack(
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: &[(i64, i64, i8)],
) -> ShareAcknowledgeRequest {
    share_requests::share_ack_request(GROUP, member, epoch, topic_id, acks)
}

/// (first, last, delivery count) of each acquired range.
fn acquired(response: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    share_requests::acquired_ranges(response)
}

/// Fetches from `*epoch` on (advancing it) until something is acquired, within the IO timeout.
async fn fetch_until_acquired(
    conn: &mut RawConn,
    member: &str,
    epoch: &mut i32,
    topic_id: Uuid,
) -> Vec<(i64, i64, i16)> {
    let deadline = Instant::now() + IO_TIMEOUT * 2;
    loop {
        let response: ShareFetchResponse = conn
            .request(1, &share_fetch(member, *epoch, topic_id))
            .await;
        assert_eq!(response.error_code, 0, "{response:?}");
        *epoch += 1;
        let got = acquired(&response);
        if !got.is_empty() {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "nothing acquired by {member}: {response:?}"
        );
    }
}

async fn produce_records(broker: &Broker, topic: &str, n: usize) {
    let mut conn = RawConn::connect(broker.addr()).await;
    let records: Vec<_> = (0..n)
        .map(|i| record(None, Some(format!("v{i}").as_bytes()), now_ms()))
        .collect();
    produce_batch(&mut conn, topic, 0, encode_batch(&records)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_survive_kill9_and_in_flight_records_are_redelivered() {
    let mut broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let topic = unique_topic("durable-share");
    let id = ensure_topics(broker.addr(), &[topic.as_str()]).await.topics[0].topic_id;

    // The share partition is made (and its start, the high watermark 0, persisted) before the
    // records exist.
    let mut a = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = a.request(1, &share_fetch("member-a", 0, id)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    produce_records(&broker, &topic, 10).await;
    let mut epoch = 1;
    assert_eq!(
        fetch_until_acquired(&mut a, "member-a", &mut epoch, id).await,
        vec![(0, 9, 1)]
    );
    // Accept 0..=4, release 5..=6; 7..=9 stay acquired (never written).
    let r: ShareAcknowledgeResponse = a
        .request(
            1,
            &share_ack("member-a", epoch, id, &[(0, 4, ACCEPT), (5, 6, RELEASE)]),
        )
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.responses[0].partitions[0].error_code, 0, "{r:?}");

    // The crash comes while member A's connection is still open: were it closed first, its
    // session's end would release 7..=9 (written in the background), and they would come back
    // on their second delivery instead.
    broker.kill9();
    drop(a);
    broker.restart();

    // A new member after the crash: the accepted records never come back; the released ones
    // come back on their second delivery, the ones in flight as new (count 1).
    let mut b = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = b.request(1, &share_fetch("member-b", 0, id)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut epoch = 1;
    let mut got = acquired(&r);
    if got.is_empty() {
        got = fetch_until_acquired(&mut b, "member-b", &mut epoch, id).await;
    }
    assert_eq!(got, vec![(5, 6, 2), (7, 9, 1)], "after the restart");

    // All accepted now, then restart again: nothing is left to deliver.
    let r: ShareAcknowledgeResponse = b
        .request(1, &share_ack("member-b", epoch, id, &[(5, 9, ACCEPT)]))
        .await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0, "{r:?}");
    drop(b);
    broker.kill9();
    broker.restart();
    produce_records(&broker, &topic, 1).await;
    let mut c = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = c.request(1, &share_fetch("member-c", 0, id)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut epoch = 1;
    let mut got = acquired(&r);
    if got.is_empty() {
        got = fetch_until_acquired(&mut c, "member-c", &mut epoch, id).await;
    }
    assert_eq!(got, vec![(10, 10, 1)], "only the new record is delivered");
}

/// ListOffsets of `__share_group_state` partition 0: (earliest, latest).
async fn state_offsets(conn: &mut RawConn) -> (i64, i64) {
    let mut out = [0i64; 2];
    for (slot, timestamp) in [(0, -2), (1, -1)] {
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name("__share_group_state"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
        let response = conn.request(7, &request).await;
        let p = &response.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "{response:?}");
        out[slot] = p.offset;
    }
    (out[0], out[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_state_is_pruned_and_what_is_left_rebuilds_it() {
    // A snapshot every 2 writes, one state partition, a prune round every 300 ms.
    let mut broker = Broker::start_with(&[
        "millrace.share.groups.enable=true",
        "share.coordinator.snapshot.update.records.per.snapshot=2",
        "share.coordinator.state.topic.num.partitions=1",
        "share.coordinator.state.topic.prune.interval.ms=300",
    ]);
    let topic = unique_topic("pruned-share");
    let id = ensure_topics(broker.addr(), &[topic.as_str()]).await.topics[0].topic_id;
    let mut a = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = a.request(1, &share_fetch("member-a", 0, id)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    produce_records(&broker, &topic, 30).await;
    let mut epoch = 1;
    assert_eq!(
        fetch_until_acquired(&mut a, "member-a", &mut epoch, id).await,
        vec![(0, 29, 1)]
    );
    // 20 acceptances one by one (20 state writes), a release of 20..=24; 25..=29 stay acquired.
    for offset in 0..20 {
        let r: ShareAcknowledgeResponse = a
            .request(
                1,
                &share_ack("member-a", epoch, id, &[(offset, offset, ACCEPT)]),
            )
            .await;
        assert_eq!(r.responses[0].partitions[0].error_code, 0, "{r:?}");
        epoch += 1;
    }
    let r: ShareAcknowledgeResponse = a
        .request(1, &share_ack("member-a", epoch, id, &[(20, 24, RELEASE)]))
        .await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0, "{r:?}");

    // The state partition's log start moves up: its first records are no longer needed.
    let mut admin = RawConn::connect(broker.addr()).await;
    let deadline = Instant::now() + IO_TIMEOUT;
    let (start, end) = loop {
        let (start, end) = state_offsets(&mut admin).await;
        if start > 0 {
            break (start, end);
        }
        assert!(
            Instant::now() < deadline,
            "__share_group_state never pruned: {start}..{end}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(end >= 21, "one record per write: {start}..{end}");

    // What pruning left rebuilds the same state after a crash.
    broker.kill9();
    drop(a);
    drop(admin);
    broker.restart();
    let mut b = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = b.request(1, &share_fetch("member-b", 0, id)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut epoch = 1;
    let mut got = acquired(&r);
    if got.is_empty() {
        got = fetch_until_acquired(&mut b, "member-b", &mut epoch, id).await;
    }
    assert_eq!(
        got,
        vec![(20, 24, 2), (25, 29, 1)],
        "after pruning and a restart"
    );
}

fn coordinator_key(topic_id: Uuid, partition: i32) -> String {
    format!(
        "{GROUP}:{}:{partition}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(topic_id.as_bytes())
    )
}

/// FindCoordinator v6 for a share key until it answers (the topic is created on first use).
async fn find_share_coordinator(conn: &mut RawConn, key: &str) -> i32 {
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let r = conn
            .request(
                6,
                &FindCoordinatorRequest::default()
                    .with_key_type(2)
                    .with_coordinator_keys(vec![s(key)]),
            )
            .await;
        let c = &r.coordinators[0];
        if c.error_code == 0 {
            return c.node_id.0;
        }
        assert_eq!(c.error_code, 15, "{r:?}");
        assert!(Instant::now() < deadline, "no share coordinator: {r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn initialize(
    topic_id: Uuid,
    group: &str,
    state_epoch: i32,
    start: i64,
) -> InitializeShareGroupStateRequest {
    InitializeShareGroupStateRequest::default()
        .with_group_id(s(group))
        .with_topics(vec![
            initialize_share_group_state_request::InitializeStateData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![
                    initialize_share_group_state_request::PartitionData::default()
                        .with_partition(0)
                        .with_state_epoch(state_epoch)
                        .with_start_offset(start),
                ]),
        ])
}

fn read(topic_id: Uuid, leader_epoch: i32) -> ReadShareGroupStateRequest {
    ReadShareGroupStateRequest::default()
        .with_group_id(s(GROUP))
        .with_topics(vec![
            read_share_group_state_request::ReadStateData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![
                    read_share_group_state_request::PartitionData::default()
                        .with_partition(0)
                        .with_leader_epoch(leader_epoch),
                ]),
        ])
}

fn write(topic_id: Uuid, state_epoch: i32, leader_epoch: i32) -> WriteShareGroupStateRequest {
    WriteShareGroupStateRequest::default()
        .with_group_id(s(GROUP))
        .with_topics(vec![
            write_share_group_state_request::WriteStateData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![
                    write_share_group_state_request::PartitionData::default()
                        .with_partition(0)
                        .with_state_epoch(state_epoch)
                        .with_leader_epoch(leader_epoch)
                        .with_start_offset(7)
                        .with_delivery_complete_count(1)
                        .with_state_batches(vec![
                            write_share_group_state_request::StateBatch::default()
                                .with_first_offset(7)
                                .with_last_offset(7)
                                .with_delivery_state(2)
                                .with_delivery_count(1),
                            write_share_group_state_request::StateBatch::default()
                                .with_first_offset(8)
                                .with_last_offset(9)
                                .with_delivery_state(0)
                                .with_delivery_count(2),
                        ]),
                ]),
        ])
}

fn summary(topic_id: Uuid) -> ReadShareGroupStateSummaryRequest {
    ReadShareGroupStateSummaryRequest::default()
        .with_group_id(s(GROUP))
        .with_topics(vec![
            read_share_group_state_summary_request::ReadStateSummaryData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![
                    read_share_group_state_summary_request::PartitionData::default()
                        .with_partition(0)
                        .with_leader_epoch(0),
                ]),
        ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_state_rpcs_answer_kafkas_error_codes() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let topic = unique_topic("share-state-rpc");
    let id = ensure_topics(broker.addr(), &[topic.as_str()]).await.topics[0].topic_id;
    let mut conn = RawConn::connect(broker.addr()).await;

    // FindCoordinator's share key type: only from v6, only a well-formed key.
    let r = conn
        .request(
            6,
            &FindCoordinatorRequest::default()
                .with_key_type(2)
                .with_coordinator_keys(vec![s("no-colons")]),
        )
        .await;
    assert_eq!(r.coordinators[0].error_code, INVALID_REQUEST, "{r:?}");
    let r = conn
        .request(
            5,
            &FindCoordinatorRequest::default()
                .with_key_type(2)
                .with_coordinator_keys(vec![s(&coordinator_key(id, 0))]),
        )
        .await;
    assert_eq!(r.coordinators[0].error_code, INVALID_REQUEST, "{r:?}");
    let node = find_share_coordinator(&mut conn, &coordinator_key(id, 0)).await;
    assert_eq!(node, 1, "the single node leads every state partition");

    // Wait until the coordinator of the key serves: a summary answers without an error, and
    // a key never initialized has start offset -1.
    let deadline = Instant::now() + IO_TIMEOUT;
    let r = loop {
        let r = conn.request(0, &summary(id)).await;
        if r.results[0].partitions[0].error_code == 0 {
            break r;
        }
        assert!(Instant::now() < deadline, "{r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let p = &r.results[0].partitions[0];
    assert_eq!(
        (p.start_offset, p.delivery_complete_count),
        (-1, -1),
        "{r:?}"
    );

    // Read before Initialize: INVALID_REQUEST. An unknown topic id: UNKNOWN_TOPIC_OR_PARTITION.
    let r = conn.request(0, &read(id, 0)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, INVALID_REQUEST,
        "{r:?}"
    );
    let r = conn.request(0, &read(Uuid::from_bytes([9; 16]), 0)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, UNKNOWN_TOPIC_OR_PARTITION,
        "{r:?}"
    );
    let r = conn.request(0, &initialize(id, "", 0, 0)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, INVALID_REQUEST,
        "{r:?}"
    );

    // Initialize at 5 in state epoch 1; a read in leader epoch 3 records it.
    let r = conn.request(0, &initialize(id, GROUP, 1, 5)).await;
    assert_eq!(r.results[0].partitions[0].error_code, 0, "{r:?}");
    let r = conn.request(0, &read(id, 3)).await;
    let p = &r.results[0].partitions[0];
    assert_eq!(
        (p.error_code, p.state_epoch, p.start_offset),
        (0, 1, 5),
        "{r:?}"
    );
    let r = conn.request(0, &read(id, 2)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, FENCED_LEADER_EPOCH,
        "{r:?}"
    );
    let r = conn.request(1, &write(id, 1, 2)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, FENCED_LEADER_EPOCH,
        "{r:?}"
    );
    let r = conn.request(1, &write(id, 0, 3)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, FENCED_STATE_EPOCH,
        "{r:?}"
    );
    let r = conn.request(0, &initialize(id, GROUP, 0, 0)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, FENCED_STATE_EPOCH,
        "{r:?}"
    );

    // A write merges; read and summary show it.
    let r = conn.request(1, &write(id, 1, 3)).await;
    assert_eq!(r.results[0].partitions[0].error_code, 0, "{r:?}");
    let r = conn.request(0, &read(id, 3)).await;
    let p = &r.results[0].partitions[0];
    assert_eq!(p.start_offset, 7, "{r:?}");
    assert_eq!(read_batches(p), vec![(7, 7, 2, 1), (8, 9, 0, 2)]);
    let r = conn.request(1, &summary(id)).await;
    let p = &r.results[0].partitions[0];
    assert_eq!(
        (
            p.error_code,
            p.state_epoch,
            p.leader_epoch,
            p.start_offset,
            p.delivery_complete_count
        ),
        (0, 1, 3, 7, 1),
        "{r:?}"
    );

    // Delete: the key is gone (and deleting again is no error).
    let delete = DeleteShareGroupStateRequest::default()
        .with_group_id(s(GROUP))
        .with_topics(vec![
            delete_share_group_state_request::DeleteStateData::default()
                .with_topic_id(id)
                .with_partitions(vec![
                    delete_share_group_state_request::PartitionData::default().with_partition(0),
                ]),
        ]);
    for _ in 0..2 {
        let r = conn.request(0, &delete).await;
        assert_eq!(r.results[0].partitions[0].error_code, 0, "{r:?}");
    }
    let r = conn.request(0, &summary(id)).await;
    assert_eq!(r.results[0].partitions[0].start_offset, -1, "{r:?}");
    let r = conn.request(0, &read(id, 3)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, INVALID_REQUEST,
        "{r:?}"
    );
}

const REQUEST_TIMED_OUT: i16 = 7;

/// The state batches of a ReadShareGroupState answer's only partition.
fn read_batches(
    p: &kafka_protocol::messages::read_share_group_state_response::PartitionResult,
) -> Vec<(i64, i64, i8, i16)> {
    p.state_batches
        .iter()
        .map(|b| {
            (
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_write_that_commits_after_its_timeout_is_what_the_next_read_returns() {
    // One __share_group_state partition on two of the three nodes, so that killing its follower
    // leaves the quorum up and the coordinator leading.
    let mut cluster = TestCluster::start(
        3,
        &[
            "millrace.share.groups.enable=true",
            "share.coordinator.state.topic.num.partitions=1",
            "share.coordinator.state.topic.replication.factor=2",
            "share.coordinator.state.topic.min.isr=2",
            "share.coordinator.write.timeout.ms=1000",
        ],
    );
    let topic = unique_topic("share-state-late-commit");
    let id = ensure_topics(cluster.addr(1), &[topic.as_str()])
        .await
        .topics[0]
        .topic_id;
    let mut conn = RawConn::connect(cluster.addr(1)).await;
    let coordinator = find_share_coordinator(&mut conn, &coordinator_key(id, 0)).await;
    let mut conn = RawConn::connect(cluster.addr(coordinator)).await;
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let r = conn.request(0, &initialize(id, GROUP, 1, 5)).await;
        if r.results[0].partitions[0].error_code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = conn.request(0, &read(id, 3)).await;
    assert_eq!(r.results[0].partitions[0].start_offset, 5, "{r:?}");
    let state = metadata(&mut conn, Some(&["__share_group_state"]), false).await;
    let replicas: Vec<i32> = state.topics[0].partitions[0]
        .replica_nodes
        .iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(replicas.len(), 2, "{state:?}");
    let follower = *replicas
        .iter()
        .find(|&&n| n != coordinator)
        .expect("a follower");

    // The follower gone (still in the ISR): the write is appended, and times out.
    cluster.kill9(follower);
    let r = conn.request(1, &write(id, 1, 3)).await;
    assert_eq!(
        r.results[0].partitions[0].error_code, REQUEST_TIMED_OUT,
        "{r:?}"
    );

    // Back, it catches up and the write commits: reads return it (after the timed-out answer a
    // read may wait for the commit, or answer REQUEST_TIMED_OUT meanwhile).
    cluster.restart(follower);
    let deadline = Instant::now() + IO_TIMEOUT;
    let r = loop {
        let r = conn.request(0, &read(id, 3)).await;
        let code = r.results[0].partitions[0].error_code;
        if code == 0 {
            break r;
        }
        assert_eq!(code, REQUEST_TIMED_OUT, "{r:?}");
        assert!(Instant::now() < deadline, "{r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let p = &r.results[0].partitions[0];
    assert_eq!(p.start_offset, 7, "the timed-out write counts: {r:?}");
    assert_eq!(read_batches(p), vec![(7, 7, 2, 1), (8, 9, 0, 2)]);
    let state = metadata(&mut conn, Some(&["__share_group_state"]), false).await;
    assert_eq!(
        state.topics[0].partitions[0].leader_id.0, coordinator,
        "the coordinator kept leading, so its own shard answered: {state:?}"
    );
}
