//! Goal: a JoinGroup/SyncGroup answer never reports success for a group whose metadata record did
//! not become durable: with the disk refusing to fdatasync `__consumer_offsets` (the broker's
//! `MILLRACE_TEST_FAIL_SYNC` knob, which swaps in the store's failing `Storage`), the SyncGroup
//! that completes a rebalance gets COORDINATOR_NOT_AVAILABLE, never an assignment, and the group
//! goes back to rebalancing (or, its log dir now offline, is no longer served by this broker).
//!
//! This file holds one test only: the knob travels in this process's environment to the broker.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, JoinGroupRequest, JoinGroupResponse,
    SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

/// Kafka's COORDINATOR_NOT_AVAILABLE.
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// Kafka's NOT_COORDINATOR.
const NOT_COORDINATOR: i16 = 16;
const GROUP: &str = "durable-or-not";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_group_is_not_acknowledged_when_the_group_record_cannot_be_synced() {
    // One offsets partition, so the group's record lands in __consumer_offsets-0; only its
    // segment files fail to sync (creating the partition syncs its config files, not them).
    std::env::set_var(
        "MILLRACE_TEST_FAIL_SYNC",
        "__consumer_offsets-0/00000000000000000000.log",
    );
    let broker = Broker::start_with(&[
        "offsets.topic.num.partitions=1",
        "group.initial.rebalance.delay.ms=0",
    ]);
    let mut conn = RawConn::connect(broker.addr()).await;
    wait_for_coordinator(&mut conn, GROUP).await;

    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(Bytes::from_static(b"meta"))]);
    let joined: JoinGroupResponse = conn.request(3, &join).await;
    assert_eq!(
        joined.error_code, 0,
        "JoinGroup writes no record: {joined:?}"
    );
    let member = joined.member_id.as_str().to_string();
    assert_eq!(joined.leader.as_str(), member, "the only member leads");

    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id(joined.generation_id)
        .with_member_id(s(&member))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(s(&member))
            .with_assignment(Bytes::from_static(b"assigned"))]);
    let synced: SyncGroupResponse = conn.request(3, &sync).await;
    assert_eq!(
        synced.error_code, COORDINATOR_NOT_AVAILABLE,
        "the group's record was never synced, so the SyncGroup must not succeed: {synced:?}"
    );
    assert!(
        synced.assignment.is_empty(),
        "no assignment without a durable record"
    );

    // The group left Stable: its members must rejoin. The failed sync also takes the log dir
    // offline, so the coordinator may already have given up `__consumer_offsets-0` (and the group
    // with it) by the time we ask: NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE sends members to
    // find a new coordinator and rejoin there, which is as good as PreparingRebalance here.
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let described: DescribeGroupsResponse = conn
            .request(
                3,
                &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
            )
            .await;
        let group = &described.groups[0];
        let state = group.group_state.as_str().to_string();
        assert!(
            !(group.error_code == 0 && state == "Stable"),
            "the group must not stay Stable without a durable record: {group:?}"
        );
        if group.error_code == 0 && state == "PreparingRebalance" {
            break;
        }
        if [COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR].contains(&group.error_code) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "group {group:?}, expected PreparingRebalance or the coordinator gone; stderr:\n{}",
            broker.stderr_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        broker
            .stderr_tail(200)
            .contains("group metadata did not become durable"),
        "the broker says why; stderr:\n{}",
        broker.stderr_tail(30)
    );
}
