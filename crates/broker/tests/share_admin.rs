//! Goal: the share-group admin APIs (KIP-932) — DescribeShareGroupOffsets (90),
//! AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92) and DeleteGroups of a share group —
//! answer Kafka 4.4's results and error codes on a real broker, and what they change is what the
//! next share consumer gets: an altered start offset is where fetching resumes, deleted state
//! starts again at `share.auto.offset.reset`. On three nodes, with the group coordinator, the
//! share coordinator and the partition leader apart, through the share-state RPCs between brokers.

#[path = "common/cluster.rs"]
mod cluster;
mod common;
#[path = "common/share.rs"]
mod share_requests;

use std::time::Instant;

use common::*;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DeleteGroupsRequest, DeleteGroupsResponse,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareFetchRequest, ShareFetchResponse, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const ACCEPT: i8 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_COORDINATOR: i16 = 16;
const INVALID_GROUP_ID: i16 = 24;
const UNSUPPORTED_VERSION: i16 = 35;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn share_fetch(group: &str, member: &str, epoch: i32, topic_id: Uuid) -> ShareFetchRequest {
    share_requests::share_fetch_request(group, member, epoch, topic_id, &[], 200)
}

/// Accepts `first..=last` and closes the session (epoch -1).
fn accept_and_close(
    group: &str,
    member: &str,
    topic_id: Uuid,
    first: i64,
    last: i64,
) -> ShareAcknowledgeRequest {
    share_requests::share_ack_request(group, member, -1, topic_id, &[(first, last, ACCEPT)])
}

/// (first, last, delivery count) of each acquired range.
fn acquired(response: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    share_requests::acquired_ranges(response)
}

/// Opens a session for `member` and fetches until something is acquired; returns it.
async fn consume(
    conn: &mut RawConn,
    group: &str,
    member: &str,
    topic_id: Uuid,
) -> Vec<(i64, i64, i16)> {
    let deadline = Instant::now() + IO_TIMEOUT * 2;
    let mut epoch = 0;
    loop {
        let response: ShareFetchResponse = conn
            .request(1, &share_fetch(group, member, epoch, topic_id))
            .await;
        assert_eq!(response.error_code, 0, "{response:?}");
        epoch += 1;
        let got = acquired(&response);
        if !got.is_empty() {
            return got;
        }
        assert!(Instant::now() < deadline, "nothing acquired: {response:?}");
    }
}

async fn produce_records(broker: &Broker, topic: &str, n: usize) {
    let mut conn = RawConn::connect(broker.addr()).await;
    let records: Vec<_> = (0..n)
        .map(|i| record(None, Some(format!("v{i}").as_bytes()), now_ms()))
        .collect();
    produce_batch(&mut conn, topic, 0, encode_batch(&records)).await;
}

async fn describe(
    conn: &mut RawConn,
    version: i16,
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> DescribeShareGroupOffsetsResponseGroup {
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|(name, ps)| {
                        DescribeShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(topic_name(name))
                            .with_partitions(ps.to_vec())
                    })
                    .collect()
            })),
    ]);
    let response: DescribeShareGroupOffsetsResponse = conn.request(version, &request).await;
    response
        .groups
        .into_iter()
        .next()
        .expect("one group answered")
}

/// (topic, partition, start offset, leader epoch, lag, error) of each described partition.
fn described(g: &DescribeShareGroupOffsetsResponseGroup) -> Vec<(String, i32, i64, i32, i64, i16)> {
    g.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.topic_name.0.to_string(),
                    p.partition_index,
                    p.start_offset,
                    p.leader_epoch,
                    p.lag,
                    p.error_code,
                )
            })
        })
        .collect()
}

async fn alter(
    conn: &mut RawConn,
    group: &str,
    topics: &[(&str, &[(i32, i64)])],
) -> AlterShareGroupOffsetsResponse {
    let request = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(
            topics
                .iter()
                .map(|(name, ps)| {
                    AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic_name(name))
                        .with_partitions(
                            ps.iter()
                                .map(|(p, o)| {
                                    AlterShareGroupOffsetsRequestPartition::default()
                                        .with_partition_index(*p)
                                        .with_start_offset(*o)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    conn.request(0, &request).await
}

/// (topic, partition, error) of each altered partition.
fn altered(r: &AlterShareGroupOffsetsResponse) -> Vec<(String, i32, i16)> {
    r.responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic_name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

async fn delete_offsets(
    conn: &mut RawConn,
    group: &str,
    topics: &[&str],
) -> DeleteShareGroupOffsetsResponse {
    let request = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(
            topics
                .iter()
                .map(|t| {
                    DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(topic_name(t))
                })
                .collect(),
        );
    conn.request(0, &request).await
}

async fn delete_group(conn: &mut RawConn, group: &str) -> i16 {
    let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
    let response: DeleteGroupsResponse = conn.request(2, &request).await;
    response.results[0].error_code
}

async fn join(
    conn: &mut RawConn,
    group: &str,
    member: &str,
    topic: &str,
) -> ShareGroupHeartbeatResponse {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic_name(topic)]));
    let response: ShareGroupHeartbeatResponse = conn.request(1, &request).await;
    assert_eq!(response.error_code, 0, "{response:?}");
    response
}

async fn leave(conn: &mut RawConn, group: &str, member: &str) {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(-1);
    let response: ShareGroupHeartbeatResponse = conn.request(1, &request).await;
    assert_eq!(response.error_code, 0, "{response:?}");
}

/// Alter, describe and delete offsets of one share group, with Kafka's error codes, and the
/// share consumer resuming where the admin APIs put it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_offsets_are_described_altered_and_deleted() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let topic = unique_topic("share-admin");
    let topic_id = ensure_topics(broker.addr(), &[&topic]).await.topics[0].topic_id;
    let group = unique_topic("g");
    let mut admin = RawConn::connect(broker.addr()).await;
    wait_for_coordinator(&mut admin, &group).await;

    // A group that does not exist: no topics and no error; a named topic that does not exist:
    // start offset -1, the zero topic id, no error.
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!((g.error_code, g.topics.len()), (0, 0), "{g:?}");
    let g = describe(&mut admin, 1, &group, Some(&[("no-such-topic", &[0])])).await;
    assert_eq!(
        described(&g),
        vec![("no-such-topic".into(), 0, -1, 0, -1, 0)]
    );
    assert_eq!(g.topics[0].topic_id, Uuid::nil());

    // A member reads the topic: its share partition starts at the high watermark (latest).
    produce_records(&broker, &topic, 10).await;
    let member = Uuid::new_v4().to_string();
    let mut consumer = RawConn::connect(broker.addr()).await;
    join(&mut consumer, &group, &member, &topic).await;
    let got = {
        let r: ShareFetchResponse = consumer
            .request(1, &share_fetch(&group, &member, 0, topic_id))
            .await;
        assert_eq!(r.error_code, 0, "{r:?}");
        acquired(&r)
    };
    assert!(got.is_empty(), "latest: nothing old is delivered: {got:?}");
    produce_records(&broker, &topic, 5).await;
    let got = {
        let deadline = Instant::now() + IO_TIMEOUT * 2;
        let mut epoch = 1;
        loop {
            let r: ShareFetchResponse = consumer
                .request(1, &share_fetch(&group, &member, epoch, topic_id))
                .await;
            epoch += 1;
            let got = acquired(&r);
            if !got.is_empty() {
                break got;
            }
            assert!(Instant::now() < deadline, "nothing acquired: {r:?}");
        }
    };
    assert_eq!(got, vec![(10, 14, 1)]);
    let r: ShareAcknowledgeResponse = consumer
        .request(1, &accept_and_close(&group, &member, topic_id, 10, 12))
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");

    // With a member in the group, its offsets can be neither altered nor deleted, nor the group.
    let r = alter(&mut admin, &group, &[(&topic, &[(0, 0)])]).await;
    assert_eq!(r.error_code, NON_EMPTY_GROUP, "{r:?}");
    let r = delete_offsets(&mut admin, &group, &[&topic]).await;
    assert_eq!(r.error_code, NON_EMPTY_GROUP, "{r:?}");
    assert_eq!(delete_group(&mut admin, &group).await, NON_EMPTY_GROUP);

    // Describe: records 10..=12 accepted, 13 and 14 released when the session closed: the start
    // offset is 13; lag = 15 − 13 − 0 (v1; v0 has no lag).
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, 13, 0, 2, 0)],
        "{g:?}"
    );
    assert_eq!(g.topics[0].topic_id, topic_id);
    let g = describe(&mut admin, 0, &group, None).await;
    assert_eq!(described(&g)[0].2, 13, "{g:?}");

    // The member leaves; the group is Empty: alter to offset 3 (and two bad partitions).
    leave(&mut consumer, &group, &member).await;
    let r = alter(
        &mut admin,
        &group,
        &[(&topic, &[(0, 3), (7, 0)]), ("no-such-topic", &[(0, 0)])],
    )
    .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(
        altered(&r),
        vec![
            (topic.clone(), 0, 0),
            (topic.clone(), 7, UNKNOWN_TOPIC_OR_PARTITION),
            ("no-such-topic".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, 3, 0, 12, 0)],
        "{g:?}"
    );

    // The next consumer starts at 3 (the share partition held before was dropped): 3..=14, the
    // accepted 10..=12 included, on a first delivery.
    let again = Uuid::new_v4().to_string();
    let mut consumer = RawConn::connect(broker.addr()).await;
    let got = consume(&mut consumer, &group, &again, topic_id).await;
    assert_eq!(got, vec![(3, 14, 1)]);
    let r: ShareAcknowledgeResponse = consumer
        .request(1, &accept_and_close(&group, &again, topic_id, 3, 14))
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, 15, 0, 0, 0)],
        "{g:?}"
    );

    // Delete the topic's offsets: an unknown topic is UNKNOWN_TOPIC_OR_PARTITION; then the group
    // lists no partitions and the state is gone.
    let r = delete_offsets(&mut admin, &group, &[&topic, "no-such-topic"]).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let codes: Vec<_> = r
        .responses
        .iter()
        .map(|t| (t.topic_name.0.to_string(), t.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (topic.clone(), 0),
            ("no-such-topic".to_string(), UNKNOWN_TOPIC_OR_PARTITION)
        ]
    );
    assert_eq!(r.responses[0].topic_id, topic_id);
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!((g.error_code, g.topics.len()), (0, 0), "{g:?}");
    let g = describe(&mut admin, 1, &group, Some(&[(&topic, &[0])])).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, -1, 0, -1, 0)],
        "{g:?}"
    );
    // Deleting again: nothing is left to delete.
    let r = delete_offsets(&mut admin, &group, &[&topic]).await;
    assert_eq!(
        r.responses[0].error_code, UNKNOWN_TOPIC_OR_PARTITION,
        "{r:?}"
    );

    // A consumer now starts afresh at latest: nothing old comes back; a new record does.
    let third = Uuid::new_v4().to_string();
    let mut consumer = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = consumer
        .request(1, &share_fetch(&group, &third, 0, topic_id))
        .await;
    assert!(acquired(&r).is_empty(), "{r:?}");
    produce_records(&broker, &topic, 1).await;
    let deadline = Instant::now() + IO_TIMEOUT * 2;
    let mut epoch = 1;
    let got = loop {
        let r: ShareFetchResponse = consumer
            .request(1, &share_fetch(&group, &third, epoch, topic_id))
            .await;
        epoch += 1;
        let got = acquired(&r);
        if !got.is_empty() {
            break got;
        }
        assert!(Instant::now() < deadline, "nothing acquired: {r:?}");
    };
    assert_eq!(got, vec![(15, 15, 1)]);
    drop(consumer);

    // Errors: an empty group id; a missing group for DeleteShareGroupOffsets; a missing group is
    // created by AlterShareGroupOffsets.
    let r = alter(&mut admin, "", &[(&topic, &[(0, 0)])]).await;
    assert_eq!(r.error_code, INVALID_GROUP_ID, "{r:?}");
    let r = delete_offsets(&mut admin, "", &[&topic]).await;
    assert_eq!(r.error_code, INVALID_GROUP_ID, "{r:?}");
    let missing = unique_topic("missing");
    let r = delete_offsets(&mut admin, &missing, &[&topic]).await;
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND, "{r:?}");
    let created = unique_topic("created");
    let r = alter(&mut admin, &created, &[(&topic, &[(0, 1)])]).await;
    assert_eq!(
        (r.error_code, altered(&r)),
        (0, vec![(topic.clone(), 0, 0)]),
        "{r:?}"
    );
    let g = describe(&mut admin, 1, &created, None).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, 1, 0, 15, 0)],
        "{g:?}"
    );
}

/// DeleteGroups of a share group deletes its share state first: a group made again with the
/// same id starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_share_group_deletes_its_share_state() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=true"]);
    let topic = unique_topic("share-del");
    let topic_id = ensure_topics(broker.addr(), &[&topic]).await.topics[0].topic_id;
    let group = unique_topic("g");
    let mut admin = RawConn::connect(broker.addr()).await;
    wait_for_coordinator(&mut admin, &group).await;
    produce_records(&broker, &topic, 4).await;
    // The first use of `__share_group_state` creates it: the persister waits for it.
    let r = alter(&mut admin, &group, &[(&topic, &[(0, 0)])]).await;
    assert_eq!(
        (r.error_code, altered(&r)),
        (0, vec![(topic.clone(), 0, 0)]),
        "{r:?}"
    );
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!(described(&g), vec![(topic.clone(), 0, 0, 0, 4, 0)], "{g:?}");

    assert_eq!(delete_group(&mut admin, &group).await, 0);
    assert_eq!(delete_group(&mut admin, &group).await, GROUP_ID_NOT_FOUND);
    let g = describe(&mut admin, 1, &group, Some(&[(&topic, &[0])])).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, -1, 0, -1, 0)],
        "{g:?}"
    );

    // A consumer of a group with the same id starts at latest, not at the deleted offset 0.
    let member = Uuid::new_v4().to_string();
    let mut consumer = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = consumer
        .request(1, &share_fetch(&group, &member, 0, topic_id))
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert!(acquired(&r).is_empty(), "deleted state came back: {r:?}");
}

/// With share groups off (`millrace.share.groups.enable=false`), the admin APIs answer UNSUPPORTED_VERSION, as Kafka with `share.version` 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_admin_apis_answer_unsupported_when_share_groups_are_off() {
    let broker = Broker::start_with(&["millrace.share.groups.enable=false"]);
    let mut admin = RawConn::connect(broker.addr()).await;
    let g = describe(&mut admin, 1, "g", None).await;
    assert_eq!(g.error_code, UNSUPPORTED_VERSION, "{g:?}");
    let r = alter(&mut admin, "g", &[("t", &[(0, 0)])]).await;
    assert_eq!(r.error_code, UNSUPPORTED_VERSION, "{r:?}");
    let r = delete_offsets(&mut admin, "g", &["t"]).await;
    assert_eq!(r.error_code, UNSUPPORTED_VERSION, "{r:?}");
}

/// FindCoordinator v6 of `key` (key type 0 group, 2 share partition) until a node answers.
async fn find_coordinator(conn: &mut RawConn, key_type: i8, key: &str) -> i32 {
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let request = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![s(key)]);
        let r: FindCoordinatorResponse = conn.request(6, &request).await;
        let c = &r.coordinators[0];
        if c.error_code == 0 {
            return c.node_id.0;
        }
        assert!(Instant::now() < deadline, "no coordinator for {key}: {r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Kafka's share-partition coordinator key: "group:topicId:partition", the id in base64.
fn share_key(group: &str, topic_id: Uuid, partition: i32) -> String {
    use base64::Engine;
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(topic_id.as_bytes());
    format!("{group}:{id}:{partition}")
}

/// The admin APIs across brokers: the group's coordinator answers them (NOT_COORDINATOR
/// elsewhere), reaches the share state on another broker (keys 83, 86, 87) and the partition's
/// high watermark on a third (ListOffsets), and the partition leader loads what was altered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_admin_apis_span_brokers() {
    let c = cluster::TestCluster::start(3, &["millrace.share.groups.enable=true"]);
    let leader = 3;
    let topic = unique_topic("share-admin-3");
    let mut conn = RawConn::connect(c.addr(1)).await;
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(&topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(leader)])])]);
    let created: CreateTopicsResponse = conn.request(7, &create).await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let deadline = Instant::now() + IO_TIMEOUT;
    let topic_id = loop {
        let m = metadata(&mut conn, Some(&[&topic]), false).await;
        let t = &m.topics[0];
        if t.error_code == 0
            && t.partitions
                .first()
                .is_some_and(|p| p.leader_id.0 == leader)
        {
            break t.topic_id;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} not led by {leader}: {m:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };

    // A group whose coordinator is neither the partition leader nor the share coordinator.
    let mut chosen = None;
    for i in 0..60 {
        let group = format!("{topic}-g{i}");
        let coordinator = find_coordinator(&mut conn, 0, &group).await;
        let share = find_coordinator(&mut conn, 2, &share_key(&group, topic_id, 0)).await;
        if coordinator != leader && share != coordinator {
            chosen = Some((group, coordinator, share));
            break;
        }
    }
    let (group, coordinator, share) = chosen.expect("a group with its coordinators apart");
    let elsewhere = (1..=3).find(|n| *n != coordinator).expect("another node");
    eprintln!("group coordinator {coordinator}, share coordinator {share}, leader {leader}");
    let mut admin = RawConn::connect(c.addr(coordinator)).await;
    wait_for_coordinator(&mut admin, &group).await;
    let mut other = RawConn::connect(c.addr(elsewhere)).await;

    let mut producer = RawConn::connect(c.addr(leader)).await;
    let records: Vec<_> = (0..6)
        .map(|i| record(None, Some(format!("v{i}").as_bytes()), now_ms()))
        .collect();
    produce_batch(&mut producer, &topic, 0, encode_batch(&records)).await;

    // Only the coordinator answers.
    let g = describe(&mut other, 1, &group, None).await;
    assert_eq!(g.error_code, NOT_COORDINATOR, "{g:?}");
    let r = alter(&mut other, &group, &[(&topic, &[(0, 2)])]).await;
    assert_eq!(r.error_code, NOT_COORDINATOR, "{r:?}");
    let r = delete_offsets(&mut other, &group, &[&topic]).await;
    assert_eq!(r.error_code, NOT_COORDINATOR, "{r:?}");
    assert_eq!(delete_group(&mut other, &group).await, NOT_COORDINATOR);

    // Altered through the share coordinator on another broker; the lag needs the leader's high
    // watermark from a third.
    let r = alter(&mut admin, &group, &[(&topic, &[(0, 2)])]).await;
    assert_eq!(
        (r.error_code, altered(&r)),
        (0, vec![(topic.clone(), 0, 0)]),
        "{r:?}"
    );
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!(described(&g), vec![(topic.clone(), 0, 2, 0, 4, 0)], "{g:?}");

    // The leader loads the altered state.
    let member = Uuid::new_v4().to_string();
    let mut consumer = RawConn::connect(c.addr(leader)).await;
    let got = consume(&mut consumer, &group, &member, topic_id).await;
    assert_eq!(got, vec![(2, 5, 1)]);
    let r: ShareAcknowledgeResponse = consumer
        .request(1, &accept_and_close(&group, &member, topic_id, 2, 5))
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let g = describe(&mut admin, 1, &group, None).await;
    assert_eq!(described(&g), vec![(topic.clone(), 0, 6, 0, 0, 0)], "{g:?}");

    // Deleting the group deletes its state on the share coordinator.
    assert_eq!(delete_group(&mut admin, &group).await, 0);
    let g = describe(&mut admin, 1, &group, Some(&[(&topic, &[0])])).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, -1, 0, -1, 0)],
        "{g:?}"
    );
}

/// `/metrics` shows each share partition's lag where it is held (the leader): the high watermark
/// minus the start offset and the records acknowledged above it, and the group's sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_lag_is_a_metric() {
    let http_port = free_port();
    let http_listen = format!("millrace.http.listen=127.0.0.1:{http_port}");
    let broker = Broker::start_with(&["millrace.share.groups.enable=true", &http_listen]);
    let topic = unique_topic("share-lag");
    let topic_id = ensure_topics(broker.addr(), &[&topic]).await.topics[0].topic_id;
    let group = unique_topic("g");
    let member = Uuid::new_v4().to_string();
    let mut consumer = RawConn::connect(broker.addr()).await;
    let r: ShareFetchResponse = consumer
        .request(1, &share_fetch(&group, &member, 0, topic_id))
        .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    produce_records(&broker, &topic, 10).await;
    let deadline = Instant::now() + IO_TIMEOUT * 2;
    let mut epoch = 1;
    let got = loop {
        let r: ShareFetchResponse = consumer
            .request(1, &share_fetch(&group, &member, epoch, topic_id))
            .await;
        epoch += 1;
        let got = acquired(&r);
        if !got.is_empty() {
            break got;
        }
        assert!(Instant::now() < deadline, "nothing acquired: {r:?}");
    };
    assert_eq!(got, vec![(0, 9, 1)]);
    // Accept 0..=1 and 5..=6 (the session stays open, so the share partition stays held): the
    // start moves to 2, two records above it are complete; lag = 10 − 2 − 2.
    for (first, last) in [(0, 1), (5, 6)] {
        let mut request = accept_and_close(&group, &member, topic_id, first, last);
        request.share_session_epoch = epoch;
        epoch += 1;
        let r: ShareAcknowledgeResponse = consumer.request(1, &request).await;
        assert_eq!(r.error_code, 0, "{r:?}");
    }
    let addr: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("addr");
    let (status, text) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    let lag = format!(
        "millrace_share_group_lag{{group=\"{group}\",topic=\"{topic}\",partition=\"0\"}} 6"
    );
    let sum = format!("millrace_share_group_lag_sum{{group=\"{group}\"}} 6");
    assert!(text.lines().any(|l| l == lag), "{lag} not in:\n{text}");
    assert!(text.lines().any(|l| l == sum), "{sum} not in:\n{text}");
}

/// A raw connection authenticated with SASL/PLAIN as `user` (password `<user>-secret`).
async fn as_user(addr: std::net::SocketAddr, user: &str) -> RawConn {
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    let mut conn = RawConn::connect(addr).await;
    let handshake = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
    assert_eq!(conn.request(1, &handshake).await.error_code, 0);
    let token = SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(
        format!("\0{user}\0{user}-secret").into_bytes(),
    ));
    let answer = conn.request(2, &token).await;
    assert_eq!(answer.error_code, 0, "authenticate {user}: {answer:?}");
    conn
}

/// An ALLOW ACL for `User:alice`: `operation` on the literal resource (`resource_type`, `name`).
async fn grant_alice(admin: &mut RawConn, resource_type: i8, name: &str, operation: i8) {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::CreateAclsRequest;
    const LITERAL: i8 = 3;
    const ALLOW: i8 = 3;
    let request = CreateAclsRequest::default().with_creations(vec![AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(name))
        .with_resource_pattern_type(LITERAL)
        .with_principal(s("User:alice"))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(ALLOW)]);
    let created = admin.request(3, &request).await;
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
}

/// Kafka's ACLs on the admin APIs: DESCRIBE (90), READ (91) and DELETE (92) on the group, or
/// GROUP_AUTHORIZATION_FAILED for the whole request; READ or DESCRIBE on the topic, or
/// TOPIC_AUTHORIZATION_FAILED for its partitions (90, 91) or the topic (92).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_admin_apis_check_kafkas_acls() {
    const TOPIC: i8 = 2;
    const GROUP: i8 = 3;
    const READ: i8 = 3;
    const DELETE: i8 = 6;
    const DESCRIBE: i8 = 8;
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    let jaas = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
                org.apache.kafka.common.security.plain.PlainLoginModule required \
                user_admin=\"admin-secret\" user_alice=\"alice-secret\";";
    let broker = Broker::start_with(&[
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        jaas,
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "millrace.share.groups.enable=true",
    ]);
    let addr = broker.listener_addr("SASL_PLAINTEXT");
    let topic = unique_topic("share-acl");
    let group = unique_topic("g");
    let mut admin = as_user(addr, "admin").await;
    let _ = metadata(&mut admin, Some(&[&topic]), true).await;
    wait_for_coordinator(&mut admin, &group).await;
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let r = alter(&mut admin, &group, &[(&topic, &[(0, 0)])]).await;
        if r.error_code == 0 && altered(&r) == vec![(topic.clone(), 0, 0)] {
            break;
        }
        assert!(Instant::now() < deadline, "admin cannot alter: {r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Nothing on the group: every API is refused as a whole.
    let mut alice = as_user(addr, "alice").await;
    let g = describe(&mut alice, 1, &group, None).await;
    assert_eq!(g.error_code, GROUP_AUTHORIZATION_FAILED, "{g:?}");
    let r = alter(&mut alice, &group, &[(&topic, &[(0, 0)])]).await;
    assert_eq!(r.error_code, GROUP_AUTHORIZATION_FAILED, "{r:?}");
    let r = delete_offsets(&mut alice, &group, &[&topic]).await;
    assert_eq!(r.error_code, GROUP_AUTHORIZATION_FAILED, "{r:?}");

    // The group, not the topic: the topic's partitions are refused (and left out of a describe
    // of every partition).
    for operation in [DESCRIBE, READ, DELETE] {
        grant_alice(&mut admin, GROUP, &group, operation).await;
    }
    let deadline = Instant::now() + IO_TIMEOUT;
    let g = loop {
        let g = describe(&mut alice, 1, &group, None).await;
        if g.error_code != GROUP_AUTHORIZATION_FAILED {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "the group ACLs never applied: {g:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!((g.error_code, g.topics.len()), (0, 0), "{g:?}");
    let g = describe(&mut alice, 1, &group, Some(&[(&topic, &[0])])).await;
    assert_eq!(described(&g)[0].5, TOPIC_AUTHORIZATION_FAILED, "{g:?}");
    let r = alter(&mut alice, &group, &[(&topic, &[(0, 0)])]).await;
    assert_eq!(
        (r.error_code, altered(&r)),
        (0, vec![(topic.clone(), 0, TOPIC_AUTHORIZATION_FAILED)]),
        "{r:?}"
    );
    let r = delete_offsets(&mut alice, &group, &[&topic]).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(
        r.responses[0].error_code, TOPIC_AUTHORIZATION_FAILED,
        "{r:?}"
    );

    // READ on the topic too (it implies DESCRIBE): everything is answered.
    grant_alice(&mut admin, TOPIC, &topic, READ).await;
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let g = describe(&mut alice, 1, &group, None).await;
        if !g.topics.is_empty() {
            assert_eq!(described(&g), vec![(topic.clone(), 0, 0, 0, 0, 0)], "{g:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the topic ACL never applied: {g:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = alter(&mut alice, &group, &[(&topic, &[(0, 0)])]).await;
    assert_eq!(
        (r.error_code, altered(&r)),
        (0, vec![(topic.clone(), 0, 0)]),
        "{r:?}"
    );
    let r = delete_offsets(&mut alice, &group, &[&topic]).await;
    assert_eq!((r.error_code, r.responses[0].error_code), (0, 0), "{r:?}");
}

/// DeleteGroups of a share group whose share state cannot be deleted (its `__share_group_state`
/// partition has one replica, on a stopped broker) answers the persister's error and keeps the
/// group, as Kafka 4.4 does; once the broker is back, the deletion goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_whose_state_cannot_be_deleted_stays() {
    use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse};
    const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    let mut c = cluster::TestCluster::start(
        3,
        &[
            "millrace.share.groups.enable=true",
            "share.coordinator.state.topic.replication.factor=1",
            "broker.session.timeout.ms=3000",
            "broker.heartbeat.interval.ms=500",
        ],
    );
    let topic = unique_topic("share-del-fail");
    let mut conn = RawConn::connect(c.addr(1)).await;
    let topic_id = {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            let m = metadata(&mut conn, Some(&[&topic]), true).await;
            let t = &m.topics[0];
            if t.error_code == 0 && t.partitions.first().is_some_and(|p| p.leader_id.0 > 0) {
                break t.topic_id;
            }
            assert!(Instant::now() < deadline, "{topic} not ready: {m:?}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let mut chosen = None;
    for i in 0..60 {
        let group = format!("{topic}-g{i}");
        let coordinator = find_coordinator(&mut conn, 0, &group).await;
        let share = find_coordinator(&mut conn, 2, &share_key(&group, topic_id, 0)).await;
        if share != coordinator {
            chosen = Some((group, coordinator, share));
            break;
        }
    }
    let (group, coordinator, share) = chosen.expect("a group with its coordinators apart");
    let mut admin = RawConn::connect(c.addr(coordinator)).await;
    wait_for_coordinator(&mut admin, &group).await;
    let r = alter(&mut admin, &group, &[(&topic, &[(0, 0)])]).await;
    assert_eq!(
        (r.error_code, altered(&r)),
        (0, vec![(topic.clone(), 0, 0)]),
        "{r:?}"
    );

    // The share coordinator's broker stops: its partition has no other replica.
    c.stop(share);
    assert_eq!(
        delete_group(&mut admin, &group).await,
        COORDINATOR_NOT_AVAILABLE
    );
    let group_described: ShareGroupDescribeResponse = admin
        .request(
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(&group))]),
        )
        .await;
    assert_eq!(
        group_described.groups[0].error_code, 0,
        "the group went: {group_described:?}"
    );

    c.restart(share);
    let deadline = Instant::now() + IO_TIMEOUT * 3;
    loop {
        let code = delete_group(&mut admin, &group).await;
        if code == 0 {
            break;
        }
        assert_eq!(code, COORDINATOR_NOT_AVAILABLE);
        assert!(Instant::now() < deadline, "the group was never deleted");
    }
    let g = describe(&mut admin, 1, &group, Some(&[(&topic, &[0])])).await;
    assert_eq!(
        described(&g),
        vec![(topic.clone(), 0, -1, 0, -1, 0)],
        "{g:?}"
    );
}
