//! Goal: on a real cluster of `millrace` processes, ElectLeaders, the automatic leader rebalance
//! and partition reassignment (AlterPartitionReassignments / ListPartitionReassignments) work over
//! the wire with Kafka's answers, and records produced before a reassignment — also one that a
//! broker's death interrupts — are read back unchanged from the new replicas. Followers replicate
//! through incremental fetch sessions (KIP-227) with their leader.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::{
    decode_records, encode_batch, fetch_request, metadata, produce_request, record, topic_name,
    unique_topic, RawConn,
};
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    CreateTopicsRequest, CreateTopicsResponse, DescribeClusterRequest, ElectLeadersRequest,
    ElectLeadersResponse, FetchResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, UnregisterBrokerRequest, UnregisterBrokerResponse,
};

/// Kafka error codes the tests expect.
const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_REQUEST: i16 = 42;
const ELECTION_NOT_NEEDED: i16 = 84;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
const BROKER_ID_NOT_REGISTERED: i16 = 102;

/// ElectLeaders election types.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// How long a cluster-wide change (failover, catch-up, reassignment) may take.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Fast failure detection, and no automatic rebalance unless a test asks for it.
const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "auto.leader.rebalance.enable=false",
];

/// A partition as Metadata shows it.
#[derive(Debug, Clone, PartialEq)]
struct View {
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

async fn view(addr: SocketAddr, topic: &str, partition: i32) -> Option<View> {
    let mut conn = RawConn::connect(addr).await;
    let response = metadata(&mut conn, Some(&[topic]), false).await;
    let t = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))?;
    let p = t
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)?;
    Some(View {
        leader: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
    })
}

/// Polls `check` until it returns `Some`, at most `within`.
async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until Metadata from `addr` shows the partition satisfying `ok`.
async fn wait_view(
    addr: SocketAddr,
    topic: &str,
    partition: i32,
    what: &str,
    ok: impl Fn(&View) -> bool,
) -> View {
    let mut last = None;
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    loop {
        let v = view(addr, topic, partition).await;
        if let Some(v) = &v {
            if ok(v) {
                return v.clone();
            }
        }
        last = v.or(last);
        assert!(
            Instant::now() < deadline,
            "{topic}-{partition}: {what} not within {CHANGE_TIMEOUT:?}; last seen {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `topic` with partition i on `assignment[i]` (first = preferred leader).
async fn create_topic(addr: SocketAddr, topic: &str, assignment: &[&[i32]]) {
    let mut conn = RawConn::connect(addr).await;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(
                assignment
                    .iter()
                    .enumerate()
                    .map(|(i, replicas)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(i32::try_from(i).expect("small"))
                            .with_broker_ids(replicas.iter().map(|&b| BrokerId(b)).collect())
                    })
                    .collect(),
            )]);
    let response: CreateTopicsResponse = conn.request(7, &request).await;
    assert_eq!(
        response.topics[0].error_code, NONE,
        "create {topic}: {:?}",
        response.topics[0].error_message
    );
    for (i, replicas) in assignment.iter().enumerate() {
        let preferred = replicas[0];
        wait_view(
            addr,
            topic,
            i32::try_from(i).expect("small"),
            "created",
            |v| v.leader == preferred && v.isr.len() == replicas.len(),
        )
        .await;
    }
}

async fn elect(
    addr: SocketAddr,
    version: i16,
    election_type: i8,
    partitions: Option<&[(&str, &[i32])]>,
) -> ElectLeadersResponse {
    let mut conn = RawConn::connect(addr).await;
    let request = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_timeout_ms(30_000)
        .with_topic_partitions(partitions.map(|list| {
            list.iter()
                .map(|(t, ps)| {
                    TopicPartitions::default()
                        .with_topic(topic_name(t))
                        .with_partitions(ps.to_vec())
                })
                .collect()
        }));
    conn.request(version, &request).await
}

/// (topic, partition, error code) of every result, in response order.
fn election_codes(response: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
    response
        .replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(|p| (t.topic.0.to_string(), p.partition_id, p.error_code))
        })
        .collect()
}

/// A partition and its target replicas (`None`: cancel its reassignment).
type Target<'a> = (i32, Option<&'a [i32]>);

async fn reassign(
    addr: SocketAddr,
    topics: &[(&str, &[Target<'_>])],
) -> AlterPartitionReassignmentsResponse {
    let mut conn = RawConn::connect(addr).await;
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            topics
                .iter()
                .map(|(t, partitions)| {
                    ReassignableTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|(p, target)| {
                                    ReassignablePartition::default()
                                        .with_partition_index(*p)
                                        .with_replicas(target.map(|list| {
                                            list.iter().map(|&b| BrokerId(b)).collect()
                                        }))
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    conn.request(0, &request).await
}

/// (topic, partition, error code) of every result, in response order.
fn reassign_codes(response: &AlterPartitionReassignmentsResponse) -> Vec<(String, i32, i16)> {
    response
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

/// (topic, partition, replicas, adding, removing) of every reassignment in progress.
type Ongoing = Vec<(String, i32, Vec<i32>, Vec<i32>, Vec<i32>)>;

async fn list_reassignments(addr: SocketAddr, topics: Option<&[(&str, &[i32])]>) -> Ongoing {
    let mut conn = RawConn::connect(addr).await;
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(topics.map(|list| {
            list.iter()
                .map(|(t, ps)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(t))
                        .with_partition_indexes(ps.to_vec())
                })
                .collect()
        }));
    let response: ListPartitionReassignmentsResponse = conn.request(0, &request).await;
    assert_eq!(response.error_code, NONE, "{:?}", response.error_message);
    let ids = |l: &[BrokerId]| l.iter().map(|b| b.0).collect::<Vec<_>>();
    response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    ids(&p.replicas),
                    ids(&p.adding_replicas),
                    ids(&p.removing_replicas),
                )
            })
        })
        .collect()
}

async fn assert_no_reassignment(addr: SocketAddr) {
    let ongoing = list_reassignments(addr, None).await;
    assert!(ongoing.is_empty(), "reassignments in progress: {ongoing:?}");
}

/// Produces `count` records `v{first}..` in batches of 25 to the partition's leader (acks=all).
/// A batch refused before it was appended (the node does not lead yet, or not yet with enough
/// in-sync replicas) is sent again, bounded; anything else fails the test.
async fn produce(addr: SocketAddr, topic: &str, partition: i32, first: usize, count: usize) {
    const RETRIABLE_BEFORE_APPEND: [i16; 4] = [3, 5, 6, 19];
    let mut conn = RawConn::connect(addr).await;
    let values: Vec<String> = (first..first + count).map(|i| format!("v{i}")).collect();
    for chunk in values.chunks(25) {
        let records: Vec<_> = chunk
            .iter()
            .map(|v| record(Some(b"k"), Some(v.as_bytes()), common::now_ms()))
            .collect();
        let batch = encode_batch(&records);
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        loop {
            let response = conn
                .request(9, &produce_request(topic, partition, batch.clone(), -1))
                .await;
            let p = &response.responses[0].partition_responses[0];
            if p.error_code == NONE {
                break;
            }
            assert!(
                RETRIABLE_BEFORE_APPEND.contains(&p.error_code) && Instant::now() < deadline,
                "produce to {topic}-{partition} at {addr}: error {} {:?}",
                p.error_code,
                p.error_message
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Reads (offset, value) of every record from offset 0 until `count` arrived (bounded).
async fn read_all(
    addr: SocketAddr,
    topic: &str,
    partition: i32,
    count: usize,
) -> Vec<(i64, String)> {
    let mut conn = RawConn::connect(addr).await;
    let mut out: Vec<(i64, String)> = Vec::new();
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    while out.len() < count {
        let offset = out.last().map_or(0, |(o, _)| o + 1);
        let response: FetchResponse = conn
            .request(12, &fetch_request(topic, partition, offset, 500, 1))
            .await;
        let p = &response.responses[0].partitions[0];
        if p.error_code == NONE {
            for r in decode_records(&p.records) {
                if r.offset >= offset {
                    let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
                    out.push((r.offset, value.into_owned()));
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{topic}-{partition} at {addr}: {} of {count} records within {CHANGE_TIMEOUT:?} (last error {})",
            out.len(),
            p.error_code
        );
    }
    out
}

fn expected(count: usize) -> Vec<(i64, String)> {
    (0..count)
        .map(|i| (i64::try_from(i).expect("small"), format!("v{i}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leaders_answers_as_kafka_and_moves_leadership_back() {
    let mut c = TestCluster::start(3, SETTINGS);
    let topic = unique_topic("elect");
    let t = topic.as_str();
    create_topic(c.addr(1), t, &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]).await;

    // Every preferred replica leads: an all-partitions election lists nothing.
    let r = elect(c.addr(1), 2, PREFERRED, None).await;
    assert_eq!(r.error_code, NONE);
    assert!(election_codes(&r).is_empty(), "{r:?}");
    // Named partitions are answered one by one, in request order.
    let r = elect(
        c.addr(2),
        2,
        PREFERRED,
        Some(&[(t, &[0, 7]), ("no-such-topic", &[0])]),
    )
    .await;
    assert_eq!(
        election_codes(&r),
        vec![
            (topic.clone(), 0, ELECTION_NOT_NEEDED),
            (topic.clone(), 7, UNKNOWN_TOPIC_OR_PARTITION),
            ("no-such-topic".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    // v0 has no election type: preferred. A partition with a leader needs no unclean election.
    let r = elect(c.addr(3), 0, PREFERRED, Some(&[(t, &[1])])).await;
    assert_eq!(
        election_codes(&r),
        vec![(topic.clone(), 1, ELECTION_NOT_NEEDED)]
    );
    let r = elect(c.addr(3), 1, UNCLEAN, Some(&[(t, &[1])])).await;
    assert_eq!(
        election_codes(&r),
        vec![(topic.clone(), 1, ELECTION_NOT_NEEDED)]
    );
    // An unknown election type is refused as a whole.
    let r = elect(c.addr(1), 2, 7, Some(&[(t, &[1])])).await;
    assert_eq!(r.error_code, INVALID_REQUEST);
    assert_eq!(
        election_codes(&r),
        vec![(topic.clone(), 1, INVALID_REQUEST)]
    );

    // Node 2 stops (its leadership moves to 3) and comes back in sync: 3 keeps leading.
    c.stop(2);
    wait_view(c.addr(1), t, 1, "leader 3 after 2 stopped", |v| {
        v.leader == 3
    })
    .await;
    c.restart(2);
    let before = wait_view(c.addr(1), t, 1, "2 back in the ISR", |v| v.isr.contains(&2)).await;
    assert_eq!(before.leader, 3, "moved back without an election");

    // A preferred election for every partition moves exactly that one back.
    let r = elect(c.addr(1), 2, PREFERRED, None).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(election_codes(&r), vec![(topic.clone(), 1, NONE)]);
    // The answering broker's metadata already shows it.
    let after = view(c.addr(1), t, 1).await.expect("partition 1");
    assert_eq!(after.leader, 2, "{after:?}");
    assert!(
        after.leader_epoch > before.leader_epoch,
        "{before:?} -> {after:?}"
    );
    let r = elect(c.addr(1), 2, PREFERRED, Some(&[(t, &[1])])).await;
    assert_eq!(
        election_codes(&r),
        vec![(topic.clone(), 1, ELECTION_NOT_NEEDED)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_automatic_rebalance_moves_leadership_back_to_the_preferred_replica() {
    let settings = [
        "broker.session.timeout.ms=3000",
        "broker.heartbeat.interval.ms=500",
        "auto.leader.rebalance.enable=true",
        "leader.imbalance.check.interval.seconds=1",
    ];
    let mut c = TestCluster::start(3, &settings);
    let topic = unique_topic("rebalance");
    let t = topic.as_str();
    create_topic(c.addr(1), t, &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]).await;
    c.stop(3);
    let moved = wait_view(c.addr(1), t, 2, "leader moved off 3", |v| v.leader != 3).await;
    c.restart(3);
    // No ElectLeaders: the controller's imbalance check elects 3 once it is back in the ISR.
    let back = wait_view(c.addr(1), t, 2, "leader back on 3", |v| v.leader == 3).await;
    assert!(
        back.leader_epoch > moved.leader_epoch,
        "{moved:?} -> {back:?}"
    );
    for p in 0..3 {
        let v = view(c.addr(2), t, p).await.expect("partition");
        assert_eq!(v.leader, v.replicas[0], "partition {p}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reassignment_moves_the_records_to_the_new_replicas() {
    let mut c = TestCluster::start(3, SETTINGS);
    let topic = unique_topic("reassign");
    let t = topic.as_str();
    create_topic(c.addr(1), t, &[&[1]]).await;
    produce(c.addr(1), t, 0, 0, 200).await;
    let old = c.data_dir(1).join(format!("{t}-0"));
    assert!(old.is_dir(), "node 1 hosts {old:?}");

    let r = reassign(c.addr(3), &[(t, &[(0, Some(&[2, 3]))])]).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(reassign_codes(&r), vec![(topic.clone(), 0, NONE)]);
    // The new replicas catch up, join the ISR, and the reassignment completes: 1 leaves.
    let done = wait_view(c.addr(3), t, 0, "replicas [2, 3]", |v| {
        v.replicas == [2, 3] && v.isr.len() == 2
    })
    .await;
    assert_eq!(
        done.leader, 2,
        "the first in-sync replica of the target leads"
    );
    assert_no_reassignment(c.addr(1)).await;
    // Node 1 deletes the log it no longer hosts.
    eventually("node 1 deletes its log", CHANGE_TIMEOUT, || async {
        (!old.exists()).then_some(())
    })
    .await;

    // Every record, at its offset, from the new leader ...
    assert_eq!(read_all(c.addr(2), t, 0, 200).await, expected(200));
    // ... and from the other new replica once it leads.
    c.stop(2);
    wait_view(c.addr(1), t, 0, "leader 3", |v| v.leader == 3).await;
    assert_eq!(read_all(c.addr(3), t, 0, 200).await, expected(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassignments_are_listed_cancelled_and_checked() {
    let mut c = TestCluster::start(3, SETTINGS);
    let topic = unique_topic("cancel");
    let t = topic.as_str();
    create_topic(c.addr(1), t, &[&[1], &[2]]).await;
    // Node 3 is down (registered, fenced): a reassignment onto it cannot complete.
    c.stop(3);
    let r = reassign(c.addr(1), &[(t, &[(0, Some(&[1, 3]))])]).await;
    assert_eq!(reassign_codes(&r), vec![(topic.clone(), 0, NONE)]);
    let ongoing = vec![(topic.clone(), 0, vec![1, 3], vec![3], vec![])];
    assert_eq!(list_reassignments(c.addr(2), None).await, ongoing);
    assert_eq!(
        list_reassignments(c.addr(2), Some(&[(t, &[0, 1, 9]), ("no-such-topic", &[0])])).await,
        ongoing
    );
    let v = view(c.addr(1), t, 0).await.expect("partition 0");
    assert_eq!((v.leader, v.replicas.as_slice()), (1, &[1, 3][..]));

    // Cancel: back to the original replicas; a second cancel finds nothing to cancel.
    let r = reassign(c.addr(2), &[(t, &[(0, None), (1, None)])]).await;
    assert_eq!(
        reassign_codes(&r),
        vec![
            (topic.clone(), 0, NONE),
            (topic.clone(), 1, NO_REASSIGNMENT_IN_PROGRESS)
        ]
    );
    assert_no_reassignment(c.addr(1)).await;
    let v = view(c.addr(2), t, 0).await.expect("partition 0");
    assert_eq!((v.leader, v.replicas.as_slice()), (1, &[1][..]));

    // Invalid targets are refused per partition, in request order; nothing changes.
    let r = reassign(
        c.addr(1),
        &[
            (
                t,
                &[
                    (0, Some(&[])),
                    (1, Some(&[2, 2])),
                    (0, Some(&[9])),
                    (5, Some(&[1])),
                ],
            ),
            ("no-such-topic", &[(0, Some(&[1]))]),
        ],
    )
    .await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        reassign_codes(&r),
        vec![
            (topic.clone(), 0, INVALID_REPLICA_ASSIGNMENT),
            (topic.clone(), 1, INVALID_REPLICA_ASSIGNMENT),
            (topic.clone(), 0, INVALID_REPLICA_ASSIGNMENT),
            (topic.clone(), 5, UNKNOWN_TOPIC_OR_PARTITION),
            ("no-such-topic".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    assert_no_reassignment(c.addr(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_dying_midway_through_a_reassignment_loses_no_record() {
    // Voters 1-3 keep the controller majority; node 4 (broker-only) leads the partition.
    let mut c = TestCluster::start_mixed(3, 1, SETTINGS);
    let topic = unique_topic("midway");
    let t = topic.as_str();
    create_topic(c.addr(1), t, &[&[4, 2]]).await;
    produce(c.addr(4), t, 0, 0, 100).await;
    let old = c.data_dir(4).join(format!("{t}-0"));
    assert!(old.is_dir(), "node 4 hosts {old:?}");
    // The replica being added is down: the reassignment waits for it.
    c.stop(3);
    let r = reassign(c.addr(1), &[(t, &[(0, Some(&[2, 3]))])]).await;
    assert_eq!(reassign_codes(&r), vec![(topic.clone(), 0, NONE)]);
    assert_eq!(
        list_reassignments(c.addr(1), None).await,
        vec![(topic.clone(), 0, vec![2, 3, 4], vec![3], vec![4])]
    );
    // The leader being removed dies (kill -9): 2, in sync, takes over; the reassignment goes on.
    c.kill9(4);
    wait_view(c.addr(1), t, 0, "leader 2 after 4 died", |v| v.leader == 2).await;
    produce(c.addr(2), t, 0, 100, 100).await;
    // 3 comes back, catches up from 2, and the reassignment completes without 4.
    c.restart(3);
    let done = wait_view(c.addr(1), t, 0, "replicas [2, 3]", |v| {
        v.replicas == [2, 3] && v.isr.len() == 2
    })
    .await;
    assert_eq!(done.leader, 2);
    assert_no_reassignment(c.addr(1)).await;
    // Every record on both new replicas.
    assert_eq!(read_all(c.addr(2), t, 0, 200).await, expected(200));
    c.stop(2);
    wait_view(c.addr(1), t, 0, "leader 3", |v| v.leader == 3).await;
    assert_eq!(read_all(c.addr(3), t, 0, 200).await, expected(200));
    // 4 comes back: no longer a replica, it leads nothing and drops its log.
    c.restart(4);
    let v = view(c.addr(4), t, 0).await.expect("partition 0");
    assert_eq!((v.leader, v.replicas.as_slice()), (3, &[2, 3][..]));
    eventually("node 4 deletes its log", CHANGE_TIMEOUT, || async {
        (!old.exists()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_replicate_through_incremental_fetch_sessions() {
    let mut c = TestCluster::start(3, SETTINGS);
    let topic = unique_topic("sessions");
    let t = topic.as_str();
    // Three partitions led by node 1 and followed by nodes 2 and 3.
    create_topic(c.addr(1), t, &[&[1, 2, 3], &[1, 2, 3], &[1, 3, 2]]).await;
    for p in 0..3 {
        produce(c.addr(1), t, p, 0, 100).await;
    }
    // No consumer fetches here: the leader's sessions are its followers', one each, holding the
    // partitions they follow (sessionless followers would leave the cache empty).
    eventually(
        "a fetch session per follower on the leader",
        CHANGE_TIMEOUT,
        || async {
            let sessions = c.metric(1, "millrace_fetch_sessions")?;
            let partitions = c.metric(1, "millrace_fetch_session_partitions")?;
            (sessions >= 2.0 && partitions >= 6.0).then_some(())
        },
    )
    .await;
    // Every record reached the followers: each partition, read from its new leader.
    c.stop(1);
    for p in 0..3 {
        let v = wait_view(c.addr(2), t, p, "a new leader", |v| {
            v.leader == 2 || v.leader == 3
        })
        .await;
        assert_eq!(
            read_all(c.addr(v.leader), t, p, 100).await,
            expected(100),
            "partition {p} from node {}",
            v.leader
        );
    }
}

/// UnregisterBroker (key 64, v0) of broker `id`, sent to `addr`.
async fn unregister(addr: SocketAddr, id: i32) -> UnregisterBrokerResponse {
    let mut conn = RawConn::connect(addr).await;
    conn.request(
        0,
        &UnregisterBrokerRequest::default().with_broker_id(BrokerId(id)),
    )
    .await
}

/// (broker id, fenced) of each broker DescribeCluster v2 from `addr` lists.
async fn described_brokers(addr: SocketAddr, include_fenced: bool) -> Vec<(i32, bool)> {
    let mut conn = RawConn::connect(addr).await;
    let request = DescribeClusterRequest::default()
        .with_endpoint_type(1)
        .with_include_fenced_brokers(include_fenced);
    let mut listed: Vec<(i32, bool)> = conn
        .request(2, &request)
        .await
        .brokers
        .iter()
        .map(|b| (b.broker_id.0, b.is_fenced))
        .collect();
    listed.sort_unstable();
    listed
}

/// The broker ids Metadata from `addr` lists.
async fn brokers(addr: SocketAddr) -> Vec<i32> {
    let mut conn = RawConn::connect(addr).await;
    let mut ids: Vec<i32> = metadata(&mut conn, Some(&[]), false)
        .await
        .brokers
        .iter()
        .map(|b| b.node_id.0)
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregistered_broker_leaves_the_cluster_until_it_registers_again() {
    let mut cluster = TestCluster::start(3, SETTINGS);
    let (a1, a2) = (cluster.addr(1), cluster.addr(2));
    let topic = unique_topic("unregister");
    create_topic(a1, &topic, &[&[3, 1, 2]]).await;
    wait_view(a1, &topic, 0, "led by 3, all in sync", |v| {
        v.leader == 3 && v.isr.len() == 3
    })
    .await;

    // A broker taken out of the cluster: stopped (fenced: DescribeCluster v2 lists it only when
    // asked to include fenced brokers, KIP-1073), then unregistered through another node.
    cluster.stop(3);
    eventually("broker 3 fenced", CHANGE_TIMEOUT, || async {
        (described_brokers(a1, true).await == vec![(1, false), (2, false), (3, true)]).then_some(())
    })
    .await;
    assert_eq!(
        described_brokers(a1, false).await,
        vec![(1, false), (2, false)]
    );
    let r = unregister(a1, 3).await;
    assert_eq!((r.error_code, r.error_message), (NONE, None));
    assert_eq!(
        brokers(a1).await,
        vec![1, 2],
        "answered once node 1's image dropped it"
    );
    assert_eq!(
        described_brokers(a1, true).await,
        vec![(1, false), (2, false)],
        "no longer registered, not even fenced"
    );
    eventually("node 2 to drop broker 3", CHANGE_TIMEOUT, || async {
        (brokers(a2).await == vec![1, 2]).then_some(())
    })
    .await;
    let v = wait_view(a2, &topic, 0, "a leader and ISR without 3", |v| {
        v.leader != 3 && !v.isr.contains(&3)
    })
    .await;
    assert_eq!(v.replicas, vec![3, 1, 2], "its replica stays assigned");

    // Kafka's refusal for an id with no registration.
    let r = unregister(a2, 3).await;
    assert_eq!(r.error_code, BROKER_ID_NOT_REGISTERED);
    assert_eq!(
        r.error_message.as_deref().map(|m| m.to_string()),
        Some("Broker ID 3 is not currently registered".to_string())
    );
    assert_eq!(unregister(a1, 9).await.error_code, BROKER_ID_NOT_REGISTERED);

    // Started again, it registers as new and catches up.
    cluster.restart(3);
    eventually("broker 3 to register again", CHANGE_TIMEOUT, || async {
        (brokers(a1).await == vec![1, 2, 3]).then_some(())
    })
    .await;
    wait_view(a1, &topic, 0, "3 back in the ISR", |v| v.isr.contains(&3)).await;

    // A live broker unregistered registers again at its next heartbeat.
    assert_eq!(unregister(a1, 2).await.error_code, NONE);
    eventually(
        "live broker 2 to register again",
        CHANGE_TIMEOUT,
        || async { (brokers(a1).await == vec![1, 2, 3]).then_some(()) },
    )
    .await;
}
