//! Goal: KIP-932 share group membership on the wire, as Kafka 4.4 answers it: ShareGroupHeartbeat
//! (join, heartbeat, assignment by topic id, several members on one partition, fencing, leave,
//! group.share.max.size, session timeout), ShareGroupDescribe, ListGroups' type filter,
//! DeleteGroups, the GROUP_ID_NOT_FOUND between group types, and membership kept across a broker
//! restart (the share group records replayed from `__consumer_offsets`).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as OwnedPartitions;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, GroupId, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const FENCED_MEMBER_EPOCH: i16 = 110;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_REQUEST: i16 = 42;
const GROUP_MAX_SIZE_REACHED: i16 = 81;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn join(group: &str, member: &str, topics: &[&str]) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(topics.iter().map(|t| topic_name(t)).collect()))
}

fn beat(group: &str, member: &str, epoch: i32) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
}

async fn heartbeat(
    conn: &mut RawConn,
    request: &ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    conn.request(1, request).await
}

async fn describe(conn: &mut RawConn, groups: &[&str]) -> ShareGroupDescribeResponse {
    let request = ShareGroupDescribeRequest::default()
        .with_group_ids(groups.iter().map(|g| GroupId(s(g))).collect());
    conn.request(1, &request).await
}

/// (topic id, partitions) pairs of a heartbeat's assignment.
fn assigned(r: &ShareGroupHeartbeatResponse) -> BTreeSet<(Uuid, i32)> {
    r.assignment
        .as_ref()
        .map(|a| {
            a.topic_partitions
                .iter()
                .flat_map(|tp| tp.partitions.iter().map(move |p| (tp.topic_id, *p)))
                .collect()
        })
        .unwrap_or_default()
}

/// Creates `topic` with `partitions` partitions and returns its topic id.
async fn create_topic(conn: &mut RawConn, topic: &str, partitions: i32) -> Uuid {
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let created: CreateTopicsResponse = conn.request(7, &create).await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let m = metadata(conn, Some(&[topic]), false).await;
        if let Some(t) = m
            .topics
            .iter()
            .find(|t| t.error_code == 0 && t.partitions.len() == partitions as usize)
        {
            return t.topic_id;
        }
        assert!(Instant::now() < deadline, "topic {topic} not ready: {m:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn member_id() -> String {
    Uuid::new_v4().to_string()
}

/// Join, heartbeat, assignment by topic id, sharing, fencing, validation, max size, describe,
/// list, delete and the cross-type answers, on one broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_membership_on_the_wire() {
    let broker = Broker::start_with(&[
        "millrace.share.groups.enable=true",
        "offsets.topic.num.partitions=1",
        "group.share.max.size=3",
    ]);
    let mut conn = RawConn::connect(broker.addr()).await;
    let wide = unique_topic("share-wide");
    let narrow = unique_topic("share-narrow");
    let wide_id = create_topic(&mut conn, &wide, 3).await;
    let narrow_id = create_topic(&mut conn, &narrow, 1).await;
    let (group, shared) = ("share-g", "share-shared");
    wait_for_coordinator(&mut conn, group).await;

    // A join gets epoch 1 and every partition, by topic id, with the heartbeat interval.
    let m1 = member_id();
    let r = heartbeat(&mut conn, &join(group, &m1, &[&wide])).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.member_id.as_ref().map(|m| m.as_str()), Some(m1.as_str()));
    assert_eq!((r.member_epoch, r.heartbeat_interval_ms), (1, 5_000));
    assert_eq!(assigned(&r), (0..3).map(|p| (wide_id, p)).collect());
    // A plain heartbeat: same epoch, no assignment.
    let r = heartbeat(&mut conn, &beat(group, &m1, 1)).await;
    assert_eq!((r.error_code, r.member_epoch), (0, 1), "{r:?}");
    assert!(r.assignment.is_none(), "nothing changed: {r:?}");
    // Fencing and unknown members.
    let r = heartbeat(&mut conn, &beat(group, &m1, 5)).await;
    assert_eq!(r.error_code, FENCED_MEMBER_EPOCH, "{r:?}");
    let r = heartbeat(&mut conn, &beat(group, &member_id(), 1)).await;
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID, "{r:?}");
    let r = heartbeat(&mut conn, &beat("no-such-share-group", &m1, 1)).await;
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND, "{r:?}");
    // Kafka's field checks.
    let r = heartbeat(&mut conn, &join(group, &"x".repeat(37), &[&wide])).await;
    assert_eq!(r.error_code, INVALID_REQUEST, "{r:?}");
    let r = heartbeat(&mut conn, &join(group, &member_id(), &[])).await;
    assert_eq!(r.error_code, INVALID_REQUEST, "{r:?}");

    // Three members on a one-partition topic: all are assigned partition 0.
    let members: Vec<String> = (0..3).map(|_| member_id()).collect();
    let mut epochs = Vec::new();
    for m in &members {
        let r = heartbeat(&mut conn, &join(shared, m, &[&narrow])).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(assigned(&r), BTreeSet::from([(narrow_id, 0)]), "{r:?}");
        epochs.push(r.member_epoch);
    }
    assert_eq!(epochs, vec![1, 2, 3]);
    // The earlier members move to epoch 3; their partition did not change, so no Assignment.
    for (m, epoch) in members.iter().zip(&epochs) {
        let r = heartbeat(&mut conn, &beat(shared, m, *epoch)).await;
        assert_eq!((r.error_code, r.member_epoch), (0, 3), "{r:?}");
        assert!(r.assignment.is_none(), "{r:?}");
    }
    // group.share.max.size=3: a fourth member is refused.
    let r = heartbeat(&mut conn, &join(shared, &member_id(), &[&narrow])).await;
    assert_eq!(r.error_code, GROUP_MAX_SIZE_REACHED, "{r:?}");

    // ShareGroupDescribe.
    let d = describe(&mut conn, &[shared, "no-such-share-group"]).await;
    let g = &d.groups[0];
    assert_eq!(g.error_code, 0, "{g:?}");
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!((g.group_epoch, g.assignment_epoch), (3, 3));
    assert_eq!(g.assignor_name.as_str(), "simple");
    assert_eq!(g.authorized_operations, i32::MIN);
    assert_eq!(g.members.len(), 3);
    for m in &g.members {
        assert_eq!(m.member_epoch, 3);
        assert_eq!(m.client_host.as_str(), "/127.0.0.1");
        assert_eq!(m.subscribed_topic_names, vec![topic_name(&narrow)]);
        let tp = &m.assignment.topic_partitions;
        assert_eq!(tp.len(), 1, "{m:?}");
        assert_eq!(
            (
                tp[0].topic_id,
                tp[0].topic_name.0.as_str(),
                &tp[0].partitions[..]
            ),
            (narrow_id, narrow.as_str(), &[0][..])
        );
    }
    assert_eq!(d.groups[1].error_code, GROUP_ID_NOT_FOUND, "{d:?}");

    // ListGroups v5: the type filter is case-insensitive.
    let listed: ListGroupsResponse = conn
        .request(
            5,
            &ListGroupsRequest::default().with_types_filter(vec![s("Share")]),
        )
        .await;
    let found = listed
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == shared)
        .unwrap_or_else(|| panic!("{shared} listed: {listed:?}"));
    assert_eq!(
        (
            found.group_type.as_str(),
            found.protocol_type.as_str(),
            found.group_state.as_str()
        ),
        // Kafka's `GroupType` names the type "Share"; the protocol type is "share".
        ("Share", "share", "Stable")
    );
    let listed: ListGroupsResponse = conn
        .request(
            5,
            &ListGroupsRequest::default().with_types_filter(vec![s("consumer")]),
        )
        .await;
    assert!(listed
        .groups
        .iter()
        .all(|g| g.group_id.0.as_str() != shared));
    // DescribeGroups (v5) on a share group: Dead, no error, as Kafka below v6.
    let described: DescribeGroupsResponse = conn
        .request(
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(shared))]),
        )
        .await;
    assert_eq!(
        (
            described.groups[0].error_code,
            described.groups[0].group_state.as_str()
        ),
        (0, "Dead")
    );

    // A share group id in OffsetCommit, a consumer group id in ShareGroupHeartbeat: 69.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(shared)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(&narrow))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(1)])]);
    let committed: OffsetCommitResponse = conn.request(9, &commit).await;
    assert_eq!(
        committed.topics[0].partitions[0].error_code, GROUP_ID_NOT_FOUND,
        "{committed:?}"
    );
    let consumer_group = "classic-or-consumer";
    let cg = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(consumer_group)))
        .with_member_id(s(&member_id()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic_name(&wide)]))
        .with_topic_partitions(Some(Vec::<OwnedPartitions>::new()));
    let joined: ConsumerGroupHeartbeatResponse = conn.request(1, &cg).await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let r = heartbeat(&mut conn, &join(consumer_group, &member_id(), &[&wide])).await;
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND, "{r:?}");
    assert_eq!(
        r.error_message.as_ref().map(|m| m.as_str()),
        Some(format!("Group {consumer_group} is not a share group.").as_str())
    );

    // DeleteGroups: refused while members are in, done once they left.
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(shared))]);
    let deleted: DeleteGroupsResponse = conn.request(2, &delete).await;
    assert_eq!(
        deleted.results[0].error_code, NON_EMPTY_GROUP,
        "{deleted:?}"
    );
    for m in &members {
        let r = heartbeat(&mut conn, &beat(shared, m, -1)).await;
        assert_eq!((r.error_code, r.member_epoch), (0, -1), "{r:?}");
        assert_eq!(r.member_id.as_ref().map(|x| x.as_str()), Some(m.as_str()));
    }
    let d = describe(&mut conn, &[shared]).await;
    assert_eq!(
        (d.groups[0].group_state.as_str(), d.groups[0].members.len()),
        ("Empty", 0)
    );
    let deleted: DeleteGroupsResponse = conn.request(2, &delete).await;
    assert_eq!(deleted.results[0].error_code, 0, "{deleted:?}");
    let d = describe(&mut conn, &[shared]).await;
    assert_eq!(d.groups[0].error_code, GROUP_ID_NOT_FOUND, "{d:?}");
}

/// A member that stops heartbeating is removed after group.share.session.timeout.ms; the other
/// member then gets its partitions, and the silent one is told it is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_is_removed_after_its_session_timeout() {
    let broker = Broker::start_with(&[
        "millrace.share.groups.enable=true",
        "offsets.topic.num.partitions=1",
        "group.share.min.session.timeout.ms=1000",
        "group.share.session.timeout.ms=1500",
        "group.share.min.heartbeat.interval.ms=100",
        "group.share.heartbeat.interval.ms=200",
    ]);
    let mut conn = RawConn::connect(broker.addr()).await;
    let topic = unique_topic("share-timeout");
    let topic_id = create_topic(&mut conn, &topic, 2).await;
    let group = "share-timeout-g";
    wait_for_coordinator(&mut conn, group).await;
    let (alive, silent) = (member_id(), member_id());
    let r = heartbeat(&mut conn, &join(group, &alive, &[&topic])).await;
    assert_eq!((r.error_code, r.heartbeat_interval_ms), (0, 200), "{r:?}");
    let r = heartbeat(&mut conn, &join(group, &silent, &[&topic])).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut epoch = 1;
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let r = heartbeat(&mut conn, &beat(group, &alive, epoch)).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        epoch = r.member_epoch;
        let d = describe(&mut conn, &[group]).await;
        if d.groups[0].members.len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "silent member still in: {d:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = heartbeat(&mut conn, &beat(group, &alive, epoch)).await;
    let r = if r.assignment.is_some() {
        r
    } else {
        heartbeat(&mut conn, &join(group, &alive, &[&topic])).await
    };
    assert_eq!(assigned(&r), BTreeSet::from([(topic_id, 0), (topic_id, 1)]));
    let r = heartbeat(&mut conn, &beat(group, &silent, 2)).await;
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID, "{r:?}");
}

/// Members, epochs and assignments come back after a restart: the share group records are
/// replayed from `__consumer_offsets`, and members carry on with their epochs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_membership_survives_a_restart() {
    let mut broker = Broker::start_with(&[
        "millrace.share.groups.enable=true",
        "offsets.topic.num.partitions=1",
    ]);
    let topic = unique_topic("share-restart");
    let group = "share-restart-g";
    let (m1, m2) = (member_id(), member_id());
    let topic_id;
    {
        let mut conn = RawConn::connect(broker.addr()).await;
        topic_id = create_topic(&mut conn, &topic, 4).await;
        wait_for_coordinator(&mut conn, group).await;
        assert_eq!(
            heartbeat(&mut conn, &join(group, &m1, &[&topic]))
                .await
                .error_code,
            0
        );
        assert_eq!(
            heartbeat(&mut conn, &join(group, &m2, &[&topic]))
                .await
                .error_code,
            0
        );
        let r = heartbeat(&mut conn, &beat(group, &m1, 1)).await;
        assert_eq!((r.error_code, r.member_epoch), (0, 2), "{r:?}");
    }
    assert!(broker.terminate().success(), "clean shutdown");
    broker.restart();
    let mut conn = RawConn::connect(broker.addr()).await;
    wait_for_coordinator(&mut conn, group).await;
    let d = describe(&mut conn, &[group]).await;
    let g = &d.groups[0];
    assert_eq!(
        (g.error_code, g.group_epoch, g.members.len()),
        (0, 2, 2),
        "{d:?}"
    );
    // Both carry on at epoch 2 (no rejoin), each with two of the four partitions.
    let mut all = BTreeSet::new();
    for m in [&m1, &m2] {
        let r = heartbeat(&mut conn, &beat(group, m, 2)).await;
        assert_eq!((r.error_code, r.member_epoch), (0, 2), "{r:?}");
        let mine = assigned(&r);
        assert_eq!(mine.len(), 2, "{r:?}");
        all.extend(mine);
    }
    assert_eq!(all, (0..4).map(|p| (topic_id, p)).collect());
}
