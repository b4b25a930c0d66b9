//! Goal: every group API answers every version Millrace advertises with a response that encodes
//! and decodes at that version, with Kafka's error codes for bad input, through `dispatch` itself
//! (bytes in, bytes out) and without a network or a client library.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use millrace_cluster::BrokerConfig;
use millrace_frontend::dispatch::dispatch;
use millrace_frontend::testing::single_node_context;
use millrace_frontend::BrokerContext;
use millrace_groups::{LoadHold, PartitionStatus};
use millrace_store::{Store, StoreConfig};

const TOPIC: &str = "t";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// An OffsetFetch partition as (index, offset, metadata), null metadata read as empty.
fn fetched(index: i32, offset: i64, metadata: Option<&StrBytes>) -> (i32, i64, String) {
    (
        index,
        offset,
        metadata.map(|m| m.to_string()).unwrap_or_default(),
    )
}

struct Harness {
    ctx: Arc<BrokerContext>,
    _dir: tempfile::TempDir,
    correlation: i32,
    /// Keeps the offsets partitions loading while set (`with_load(false)`).
    hold: Option<LoadHold>,
}

impl Harness {
    fn new() -> Self {
        Self::with_load(true)
    }

    /// A broker context whose coordinator leads the 3 offsets partitions in leader epoch 0; with
    /// `load`, waits until they are loaded, else keeps them loading until `finish_loading`.
    fn with_load(load: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig {
            data_dir: dir.path().to_path_buf(),
            extra_log_dirs: Vec::new(),
            flush_policy: millrace_store::FlushPolicy::Batch,
            flush_interval: std::time::Duration::from_millis(2),
            max_open_files: 64,
            high_watermark_follows_durable: false,
        })
        .expect("store");
        let layer: BTreeMap<String, String> = [("num.partitions".to_string(), "2".to_string())]
            .into_iter()
            .collect();
        let config = BrokerConfig::from_layers([&layer]).expect("config");
        let (ctx, hold) = single_node_context(store, dir.path(), config, &[(TOPIC, 2)], !load);
        let mut h = Self {
            ctx,
            _dir: dir,
            correlation: 0,
            hold,
        };
        if load {
            h.finish_loading();
        }
        h
    }

    /// Lets the offsets partitions load and waits (10 s at most) until they are.
    fn finish_loading(&mut self) {
        self.hold = None;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for p in 0..3 {
            while self.ctx.groups.partition_status(p)
                != Some(PartitionStatus::Loaded { leader_epoch: 0 })
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "partition {p} not loaded"
                );
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }

    async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Resp {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(s("wire-test")));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .expect("header");
        request.encode(&mut buf, version).expect("request");
        let peer: SocketAddr = "127.0.0.1:5555".parse().expect("addr");
        let pending = dispatch(
            &self.ctx,
            buf.freeze(),
            &millrace_frontend::session::Session::plaintext(peer),
        )
        .unwrap_or_else(|e| panic!("{key:?} v{version} refused: {e}"));
        let chunks = pending
            .await
            .expect("task")
            .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"))
            .expect("a response");
        let frame: Bytes = chunks
            .into_iter()
            .flat_map(|c| match c {
                millrace_frontend::splice::Chunk::Bytes(b) => b.to_vec(),
                millrace_frontend::splice::Chunk::File(f) => {
                    f.read_to_bytes().expect("slice").to_vec()
                }
            })
            .collect::<Vec<u8>>()
            .into();
        let mut body: Bytes = frame.slice(4..);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .expect("response header");
        assert_eq!(header.correlation_id, self.correlation);
        let response = Resp::decode(&mut body, version)
            .unwrap_or_else(|e| panic!("{key:?} v{version}: undecodable response: {e}"));
        assert!(body.is_empty(), "{key:?} v{version}: trailing bytes");
        response
    }

    /// JoinGroup (with the v4+ handshake) for a lone member; returns (member id, generation).
    async fn join(&mut self, group: &str, version: i16) -> (String, i32) {
        let request = |member: &str| {
            let mut r = JoinGroupRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_session_timeout_ms(10_000)
                .with_member_id(s(member))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(Bytes::from_static(b"meta"))]);
            if version >= 1 {
                r.rebalance_timeout_ms = 20_000;
            }
            r
        };
        let mut r: JoinGroupResponse = self.call(ApiKey::JoinGroup, version, &request("")).await;
        if version >= 4 {
            assert_eq!(r.error_code, 79, "v{version}: MEMBER_ID_REQUIRED");
            assert!(!r.member_id.is_empty());
            let id = r.member_id.to_string();
            r = self.call(ApiKey::JoinGroup, version, &request(&id)).await;
        }
        assert_eq!(r.error_code, 0, "JoinGroup v{version}");
        assert_eq!(r.leader, r.member_id);
        assert_eq!(
            r.protocol_name.as_ref().map(|p| p.to_string()).as_deref(),
            Some("range")
        );
        if version >= 7 {
            assert_eq!(
                r.protocol_type.as_ref().map(|p| p.to_string()).as_deref(),
                Some("consumer")
            );
        }
        assert_eq!(r.members.len(), 1);
        assert_eq!(&r.members[0].metadata[..], b"meta");
        (r.member_id.to_string(), r.generation_id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_api_version_round_trips() {
    let mut h = Harness::new();
    let topic_id = h.ctx.cluster.topic(TOPIC).expect("the test topic").topic_id;
    for join_v in 0..=9i16 {
        let group = format!("group-v{join_v}");
        let (member, generation) = h.join(&group, join_v).await;

        let sync_v = join_v.min(5);
        let mut sync = SyncGroupRequest::default()
            .with_group_id(GroupId(s(&group)))
            .with_generation_id(generation)
            .with_member_id(s(&member))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(s(&member))
                .with_assignment(Bytes::from_static(b"assigned"))]);
        if sync_v >= 5 {
            sync.protocol_type = Some(s("consumer"));
            sync.protocol_name = Some(s("range"));
        }
        let r: SyncGroupResponse = h.call(ApiKey::SyncGroup, sync_v, &sync).await;
        assert_eq!((r.error_code, &r.assignment[..]), (0, &b"assigned"[..]));
        if sync_v >= 5 {
            assert_eq!(
                r.protocol_name.as_ref().map(|p| p.to_string()).as_deref(),
                Some("range")
            );
        }

        let hb_v = join_v.min(4);
        let hb = |generation| {
            HeartbeatRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_generation_id(generation)
                .with_member_id(s(&member))
        };
        let r: HeartbeatResponse = h.call(ApiKey::Heartbeat, hb_v, &hb(generation)).await;
        assert_eq!(r.error_code, 0);
        let r: HeartbeatResponse = h.call(ApiKey::Heartbeat, hb_v, &hb(generation - 1)).await;
        assert_eq!(r.error_code, 22, "ILLEGAL_GENERATION");

        // v10 names topics by id alone: an id nobody knows is UNKNOWN_TOPIC_ID (100).
        let commit_v = 2 + join_v % 9;
        let missing_id = uuid::Uuid::from_u128(0x5eed);
        let mut commit = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(&group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(&member))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(TOPIC)))
                    .with_topic_id(topic_id)
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(1)
                        .with_committed_offset(42)
                        .with_committed_metadata(Some(s("md")))]),
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("missing")))
                    .with_topic_id(missing_id)
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default().with_partition_index(0)
                    ]),
            ]);
        if commit_v <= 4 {
            commit.retention_time_ms = -1;
        }
        let r: OffsetCommitResponse = h.call(ApiKey::OffsetCommit, commit_v, &commit).await;
        assert_eq!(r.topics[0].partitions[0].error_code, 0, "v{commit_v}");
        let unknown = if commit_v >= 10 { 100 } else { 3 };
        assert_eq!(
            r.topics[1].partitions[0].error_code, unknown,
            "unknown topic"
        );
        if commit_v >= 10 {
            assert_eq!(
                (r.topics[0].topic_id, r.topics[1].topic_id),
                (topic_id, missing_id)
            );
        }

        let fetch_v = 1 + join_v % 10;
        let fetched: Vec<(i32, i64, String)> = if fetch_v >= 8 {
            let req =
                OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(&group)))
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s(TOPIC)))
                            .with_topic_id(topic_id)
                            .with_partition_indexes(vec![0, 1]),
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s("missing")))
                            .with_topic_id(missing_id)
                            .with_partition_indexes(vec![0]),
                    ]))]);
            let r: OffsetFetchResponse = h.call(ApiKey::OffsetFetch, fetch_v, &req).await;
            assert_eq!(r.groups[0].error_code, 0);
            let missing = &r.groups[0].topics[1];
            assert_eq!(missing.partitions[0].committed_offset, -1);
            if fetch_v >= 10 {
                assert_eq!(r.groups[0].topics[0].topic_id, topic_id);
                assert_eq!(
                    (missing.topic_id, missing.partitions[0].error_code),
                    (missing_id, 100)
                );
            }
            r.groups[0].topics[0]
                .partitions
                .iter()
                .map(|p| fetched(p.partition_index, p.committed_offset, p.metadata.as_ref()))
                .collect()
        } else {
            let req = OffsetFetchRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s(TOPIC)))
                    .with_partition_indexes(vec![0, 1])]));
            let r: OffsetFetchResponse = h.call(ApiKey::OffsetFetch, fetch_v, &req).await;
            assert_eq!(r.error_code, 0);
            r.topics[0]
                .partitions
                .iter()
                .map(|p| fetched(p.partition_index, p.committed_offset, p.metadata.as_ref()))
                .collect()
        };
        assert_eq!(
            fetched,
            vec![(0, -1, String::new()), (1, 42, "md".to_string())],
            "OffsetFetch v{fetch_v}"
        );

        let describe_v = join_v % 6;
        let r: DescribeGroupsResponse = h
            .call(
                ApiKey::DescribeGroups,
                describe_v,
                &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(&group))]),
            )
            .await;
        assert_eq!(r.groups[0].group_state.as_str(), "Stable");
        assert_eq!(&r.groups[0].members[0].member_assignment[..], b"assigned");

        let leave_v = join_v.min(5);
        let leave = if leave_v >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_members(vec![MemberIdentity::default().with_member_id(s(&member))])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_member_id(s(&member))
        };
        let r: LeaveGroupResponse = h.call(ApiKey::LeaveGroup, leave_v, &leave).await;
        assert_eq!(r.error_code, 0);
        if leave_v >= 3 {
            assert_eq!(r.members[0].error_code, 0);
        }

        let list_v = join_v % 6;
        let mut list = ListGroupsRequest::default();
        if list_v >= 4 {
            list.states_filter = vec![s("empty")];
        }
        let r: ListGroupsResponse = h.call(ApiKey::ListGroups, list_v, &list).await;
        assert!(r.groups.iter().any(|g| g.group_id.as_str() == group));

        let r: OffsetDeleteResponse = h
            .call(
                ApiKey::OffsetDelete,
                0,
                &OffsetDeleteRequest::default()
                    .with_group_id(GroupId(s(&group)))
                    .with_topics(vec![OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(s(TOPIC)))
                        .with_partitions(vec![
                            OffsetDeleteRequestPartition::default().with_partition_index(1)
                        ])]),
            )
            .await;
        assert_eq!((r.error_code, r.topics[0].partitions[0].error_code), (0, 0));

        let delete_v = join_v % 3;
        let r: DeleteGroupsResponse = h
            .call(
                ApiKey::DeleteGroups,
                delete_v,
                &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&group))]),
            )
            .await;
        assert_eq!(r.results[0].error_code, 0);
        let r: DeleteGroupsResponse = h
            .call(
                ApiKey::DeleteGroups,
                delete_v,
                &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&group))]),
            )
            .await;
        assert_eq!(r.results[0].error_code, 69, "GROUP_ID_NOT_FOUND");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_kafkas_error_codes() {
    let mut h = Harness::new();
    let join = |group: &str, session: i32, protocol_type: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(session)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s(protocol_type))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default().with_name(s("range"))
            ])
    };
    let code = |r: JoinGroupResponse| r.error_code;
    assert_eq!(
        code(
            h.call(ApiKey::JoinGroup, 3, &join("", 10_000, "consumer"))
                .await
        ),
        24
    );
    assert_eq!(
        code(
            h.call(ApiKey::JoinGroup, 3, &join("g", 10, "consumer"))
                .await
        ),
        26
    );
    assert_eq!(
        code(h.call(ApiKey::JoinGroup, 3, &join("g", 10_000, "")).await),
        23
    );
    // Refused joins leave no group behind.
    let r: DescribeGroupsResponse = h
        .call(
            ApiKey::DescribeGroups,
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
        )
        .await;
    assert_eq!(r.groups[0].group_state.to_string(), "Dead");
    // A lone v3 member (no handshake) makes the group; another protocol type is refused.
    let first: JoinGroupResponse = h
        .call(ApiKey::JoinGroup, 3, &join("g", 10_000, "consumer"))
        .await;
    assert_eq!(first.error_code, 0);
    assert_eq!(
        code(
            h.call(ApiKey::JoinGroup, 3, &join("g", 10_000, "connect"))
                .await
        ),
        23
    );
    let r: HeartbeatResponse = h
        .call(
            ApiKey::Heartbeat,
            0,
            &HeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(first.generation_id)
                .with_member_id(s("stranger")),
        )
        .await;
    assert_eq!(r.error_code, 25, "UNKNOWN_MEMBER_ID");
    let r: SyncGroupResponse = h
        .call(
            ApiKey::SyncGroup,
            5,
            &SyncGroupRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(first.generation_id)
                .with_member_id(first.member_id.clone())
                .with_protocol_type(Some(s("connect"))),
        )
        .await;
    assert_eq!(r.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");
    let r: DeleteGroupsResponse = h
        .call(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g"))]),
        )
        .await;
    assert_eq!(r.results[0].error_code, 68, "NON_EMPTY_GROUP");
    let r: FindCoordinatorResponse = h
        .call(
            ApiKey::FindCoordinator,
            0,
            &FindCoordinatorRequest::default().with_key(s("g")),
        )
        .await;
    assert_eq!((r.error_code, r.node_id.0), (0, 1));
    // A generation for a group that does not exist: ILLEGAL_GENERATION before v9, then
    // GROUP_ID_NOT_FOUND; generation -1 creates a simple group.
    for (version, generation, expected) in [(8, 5, 22), (9, 5, 69), (9, -1, 0)] {
        let commit = OffsetCommitRequest::default()
            .with_group_id(GroupId(s("nowhere")))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s("m"))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(0)
                ])]);
        let r: OffsetCommitResponse = h.call(ApiKey::OffsetCommit, version, &commit).await;
        assert_eq!(
            r.topics[0].partitions[0].error_code, expected,
            "v{version} gen {generation}"
        );
    }
    // Produce to the internal topic is refused.
    let mut records = BytesMut::new();
    records.put_slice(&[0u8; 61]);
    let r: ProduceResponse = h
        .call(
            ApiKey::Produce,
            9,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(1000)
                .with_topic_data(vec![
                    kafka_protocol::messages::produce_request::TopicProduceData::default()
                        .with_name(TopicName(s("__consumer_offsets")))
                        .with_partition_data(vec![
                        kafka_protocol::messages::produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(records.freeze())),
                    ]),
                ]),
        )
        .await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 17);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_replay_get_coordinator_load_in_progress() {
    let mut h = Harness::with_load(false);
    let r: FindCoordinatorResponse = h
        .call(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")]),
        )
        .await;
    // FindCoordinator answers only Kafka's COORDINATOR_NOT_AVAILABLE while the partition loads;
    // group requests that reach the coordinator meanwhile say it loads.
    assert_eq!(r.coordinators[0].error_code, 15);
    let r: OffsetFetchResponse = h
        .call(
            ApiKey::OffsetFetch,
            7,
            &OffsetFetchRequest::default().with_group_id(GroupId(s("g"))),
        )
        .await;
    assert_eq!(r.error_code, 14);
    let r: ListGroupsResponse = h
        .call(ApiKey::ListGroups, 4, &ListGroupsRequest::default())
        .await;
    assert_eq!(r.error_code, 14);
    h.finish_loading();
    let r: FindCoordinatorResponse = h
        .call(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")]),
        )
        .await;
    assert_eq!(r.coordinators[0].error_code, 0);
}
