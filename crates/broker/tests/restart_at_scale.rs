//! Goal: a broker hosting 10,000 partitions, alone or as one of three nodes that each hold a
//! replica of every partition, comes back after kill -9 (issue 39): it prints its ready line
//! again, every partition is led again (in the cluster, with the restarted node back in every
//! ISR), and records acknowledged with acks=all before the crash read back unchanged.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::{
    decode_records, encode_batch, fetch_request, metadata, now_ms, only_partition, produce_request,
    record, topic_name, unique_topic, Broker, RawConn,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, FetchResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Request};

/// Kafka error codes the tests tell apart.
const NONE: i16 = 0;
const LEADER_NOT_AVAILABLE: i16 = 5;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// Partitions of the one topic each test creates (`PARTITIONS_PER_TOPIC_MAX`).
const PARTITIONS: i32 = 10_000;
/// Partitions one CreateTopics / CreatePartitions adds: each step is one controller decision far
/// below the metadata entry bound even without large-decision support, so the tests reach the
/// restart — the path under test — on any controller.
const STEP: i32 = 2_000;
/// Partitions that get one acknowledged record before the crash.
const PRODUCED: &[i32] = &[0, 1, 2, 4_999, 9_998, 9_999];
/// Bound on one CreateTopics / CreatePartitions step (a debug build on a small machine).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on every partition being led (and, in the cluster, every ISR being full), before the
/// crash and after the restart's ready line.
const LEAD_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound on the single broker's ready line after kill -9 (the harness's `STARTUP_TIMEOUT` is
/// for an ordinary start; this one recovers and leads 10,000 partitions: 9-12 s in a debug build
/// on two cores, 29 s on a loaded machine).
const RESTART_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound on reading back one acknowledged record.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between two polls of a condition.
const POLL: Duration = Duration::from_millis(200);

/// Held by each test for its whole run: the CI's `--test-threads=2` would otherwise run a
/// 10,000-partition broker and a 30,000-replica cluster at once on two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// No automatic leader rebalance: leaderships move only because of the crash and the restart.
/// Session and heartbeat settings stay at their defaults: the restarted node's store recovery
/// (seconds, at this scale) outlasts its old session anyway, and shorter sessions only add
/// fencing on a loaded machine.
const CLUSTER_SETTINGS: &[&str] = &["auto.leader.rebalance.enable=false"];

/// One partition as Metadata shows it.
#[derive(Debug, Clone)]
struct Part {
    error: i16,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

/// A topic's partitions by index, and the `controller_id` of the same Metadata answer.
struct View {
    controller: i32,
    parts: BTreeMap<i32, Part>,
}

/// Metadata v12 for `topic` (no auto-creation), asked of `addr` on a new connection.
async fn view(addr: SocketAddr, topic: &str) -> View {
    let mut conn = RawConn::connect(addr).await;
    let response = metadata(&mut conn, Some(&[topic]), false).await;
    let parts = response
        .topics
        .iter()
        .filter(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic) && t.error_code == 0)
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            (
                p.partition_index,
                Part {
                    error: p.error_code,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                },
            )
        })
        .collect();
    View {
        controller: response.controller_id.0,
        parts,
    }
}

/// Polls Metadata from `addr` until all `PARTITIONS` partitions of `topic` satisfy `ok`; that
/// view, or after `within` what was seen: how many did and a few that did not.
async fn try_wait_every_partition(
    addr: SocketAddr,
    topic: &str,
    what: &str,
    within: Duration,
    ok: impl Fn(i32, &Part) -> bool,
) -> Result<View, String> {
    let deadline = Instant::now() + within;
    loop {
        let v = view(addr, topic).await;
        let expected = usize::try_from(PARTITIONS).expect("positive");
        let good = v.parts.iter().filter(|(i, p)| ok(**i, p)).count();
        if v.parts.len() == expected && good == expected {
            return Ok(v);
        }
        if Instant::now() > deadline {
            let bad: Vec<_> = v
                .parts
                .iter()
                .filter(|(i, p)| !ok(**i, p))
                .take(5)
                .collect();
            return Err(format!(
                "{topic} at {addr}: {what} not within {within:?}: {good} of {} partitions shown \
                 (of {PARTITIONS}) satisfy it; some that do not: {bad:?}",
                v.parts.len()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `try_wait_every_partition` on a single broker, whose log tail its drop prints on a panic.
async fn wait_every_partition(
    addr: SocketAddr,
    topic: &str,
    what: &str,
    within: Duration,
    ok: impl Fn(i32, &Part) -> bool,
) -> View {
    try_wait_every_partition(addr, topic, what, within, ok)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `try_wait_every_partition` on a cluster node; a panic shows every node's log tail.
async fn wait_every_partition_in(
    cluster: &TestCluster,
    id: i32,
    topic: &str,
    what: &str,
    within: Duration,
    ok: impl Fn(i32, &Part) -> bool,
) -> View {
    match try_wait_every_partition(cluster.addr(id), topic, what, within, ok).await {
        Ok(v) => v,
        Err(e) => panic!("{e}\n{}", log_tails(cluster)),
    }
}

/// The last lines of every node's log, without the per-partition leader/follower lines that
/// thousands of partitions bury everything else under.
fn log_tails(cluster: &TestCluster) -> String {
    (1..=3)
        .map(|id| {
            let log = cluster.log_tail(id, 50_000);
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| !l.contains("became leader") && !l.contains("became follower"))
                .collect();
            format!(
                "---- node {id} log (tail, per-partition lines left out) ----\n{}",
                lines[lines.len().saturating_sub(30)..].join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Sends `body` and waits up to `within` for its response (`RawConn::request` allows
/// `IO_TIMEOUT`, which one step of thousands of partitions may need more than in a debug build).
async fn request_within<R: Request>(
    conn: &mut RawConn,
    version: i16,
    body: &R,
    within: Duration,
) -> R::Response {
    let correlation_id = conn.send(version, body).await;
    let mut frame = conn
        .read_frame(within)
        .await
        .unwrap_or_else(|e| panic!("no answer to api key {} within {within:?}: {e:?}", R::KEY));
    let key = ApiKey::try_from(R::KEY).expect("known key");
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
        .expect("decode response header");
    assert_eq!(header.correlation_id, correlation_id, "correlation id");
    R::Response::decode(&mut frame, version).expect("decode response body")
}

fn timeout_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).expect("timeout fits i32")
}

/// Creates `topic` with `PARTITIONS` partitions of `replication_factor` replicas: `STEP` by
/// CreateTopics, then grown by CreatePartitions `STEP` at a time.
async fn create_in_steps(addr: SocketAddr, topic: &str, replication_factor: i16) {
    let mut conn = RawConn::connect(addr).await;
    // The broker's answer comes within timeout_ms; the read allows a little more.
    let read_within = ADMIN_TIMEOUT + Duration::from_secs(10);
    let first = STEP.min(PARTITIONS);
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(timeout_ms(ADMIN_TIMEOUT))
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(first)
            .with_replication_factor(replication_factor)]);
    let started = Instant::now();
    let response: CreateTopicsResponse = request_within(&mut conn, 7, &create, read_within).await;
    let result = &response.topics[0];
    assert_eq!(
        result.error_code, 0,
        "CreateTopics {topic} with {first} partitions (RF {replication_factor}): {:?}",
        result.error_message
    );
    let mut count = first;
    while count < PARTITIONS {
        count = (count + STEP).min(PARTITIONS);
        let grow = CreatePartitionsRequest::default()
            .with_timeout_ms(timeout_ms(ADMIN_TIMEOUT))
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(count)
                .with_assignments(None)]);
        let response: CreatePartitionsResponse =
            request_within(&mut conn, 3, &grow, read_within).await;
        let result = &response.results[0];
        assert_eq!(
            result.error_code, 0,
            "CreatePartitions {topic} to {count}: {:?}",
            result.error_message
        );
    }
    eprintln!(
        "{topic}: {PARTITIONS} partitions (RF {replication_factor}) created in {:?}",
        started.elapsed()
    );
}

/// The record value written to `partition`.
fn value_of(partition: i32) -> String {
    format!("acked-before-kill-9-{partition}")
}

/// Produces one record with acks=all to each of `PRODUCED`, on its leader in `v`; each is
/// acknowledged at offset 0. Metadata shows a leader as soon as the metadata image does; the
/// leader's replica acts on it later (seconds later, with thousands of partitions just created),
/// so NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE (the record was not appended) are asked
/// again, as clients do, for up to `LEAD_TIMEOUT`.
async fn produce_acked(v: &View, topic: &str, addr_of: impl Fn(i32) -> SocketAddr) {
    for &p in PRODUCED {
        let addr = addr_of(v.parts[&p].leader);
        let value = value_of(p);
        let acked = eventually(
            &format!("{topic}/{p}: one record acknowledged (acks=all) by {addr}"),
            LEAD_TIMEOUT,
            || {
                let value = value.clone();
                async move {
                    let mut conn = RawConn::connect(addr).await;
                    let batch = encode_batch(&[record(None, Some(value.as_bytes()), now_ms())]);
                    let response = conn.request(9, &produce_request(topic, p, batch, -1)).await;
                    let part = response
                        .responses
                        .iter()
                        .flat_map(|t| t.partition_responses.iter())
                        .find(|r| r.index == p)
                        .cloned()
                        .expect("the partition in the produce response");
                    match part.error_code {
                        NONE => Ok(part),
                        LEADER_NOT_AVAILABLE | NOT_LEADER_OR_FOLLOWER => {
                            Err(format!("error {}", part.error_code))
                        }
                        e => panic!(
                            "{topic}/{p}: Produce acks=-1 failed with error {e}: {:?}",
                            part.error_message
                        ),
                    }
                }
            },
        )
        .await;
        assert_eq!(acked.base_offset, 0, "{topic}/{p}: first record's offset");
    }
}

/// Polls `check` until it returns `Ok`, at most `within`; panics with the last `Err`.
async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not within {within:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Reads each of `PRODUCED` from offset 0 on its leader in `v` and asserts it holds exactly the
/// record acknowledged before the crash.
async fn assert_acked_readable(v: &View, topic: &str, addr_of: impl Fn(i32) -> SocketAddr) {
    for &p in PRODUCED {
        let addr = addr_of(v.parts[&p].leader);
        let records = eventually(
            &format!("{topic}/{p}: the acknowledged record readable at {addr}"),
            READ_TIMEOUT,
            || async move {
                let mut conn = RawConn::connect(addr).await;
                let response: FetchResponse =
                    conn.request(12, &fetch_request(topic, p, 0, 0, 1)).await;
                let part = only_partition(&response);
                let records = decode_records(&part.records);
                if part.error_code == 0 && !records.is_empty() {
                    Ok(records)
                } else {
                    Err(format!(
                        "error {}, high watermark {}, {} records",
                        part.error_code,
                        part.high_watermark,
                        records.len()
                    ))
                }
            },
        )
        .await;
        let got: Vec<(i64, Option<Vec<u8>>)> = records
            .iter()
            .map(|r| (r.offset, r.value.as_ref().map(|b| b.to_vec())))
            .collect();
        assert_eq!(
            got,
            vec![(0, Some(value_of(p).into_bytes()))],
            "{topic}/{p}: records after the restart"
        );
    }
}

/// The node id named by a `millrace ready: node N listening on …` line.
fn node_id_of(ready_line: &str) -> i32 {
    ready_line
        .strip_prefix("millrace ready: node ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no node id in the ready line {ready_line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_with_10000_partitions_comes_back_after_kill_9() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let test_started = Instant::now();
    let mut broker = Broker::start();
    let node = node_id_of(broker.ready_line());
    let topic = unique_topic("scale-single");
    create_in_steps(broker.addr(), &topic, 1).await;
    let before = wait_every_partition(
        broker.addr(),
        &topic,
        "every partition led by this node",
        LEAD_TIMEOUT,
        |_, p| p.error == 0 && p.leader == node,
    )
    .await;
    let addr = broker.addr();
    produce_acked(&before, &topic, |_| addr).await;
    eprintln!(
        "single node: {PARTITIONS} partitions led, {} records acknowledged, {:?} into the test",
        PRODUCED.len(),
        test_started.elapsed()
    );

    broker.kill9();
    let restarted = Instant::now();
    // Without its ready line the broker never registered (or never led its replicas): the
    // panic after RESTART_TIMEOUT shows its log.
    broker.restart_within(RESTART_TIMEOUT);
    let to_ready = restarted.elapsed();
    assert_eq!(
        node_id_of(broker.ready_line()),
        node,
        "the restarted broker's ready line: {}",
        broker.ready_line()
    );
    eprintln!("single node: restart -> ready line in {to_ready:?}");
    let after = wait_every_partition(
        broker.addr(),
        &topic,
        "every partition led by this node after kill -9",
        LEAD_TIMEOUT,
        |_, p| p.error == 0 && p.leader == node,
    )
    .await;
    let to_led = restarted.elapsed();
    eprintln!("single node: restart -> every partition led in {to_led:?}");

    assert_acked_readable(&after, &topic, |_| addr).await;
    eprintln!(
        "single node: restart -> acknowledged records read back in {:?}; whole test {:?}",
        restarted.elapsed(),
        test_started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_of_three_holding_10000_replicas_comes_back_after_kill_9() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let test_started = Instant::now();
    let mut cluster = TestCluster::start(3, CLUSTER_SETTINGS);
    let topic = unique_topic("scale-cluster");
    create_in_steps(cluster.addr(1), &topic, 3).await;
    let full = |_: i32, p: &Part| {
        p.error == 0 && p.leader >= 0 && p.replicas.len() == 3 && p.isr.len() == 3
    };
    let before = wait_every_partition_in(
        &cluster,
        1,
        &topic,
        "every partition led with a full ISR",
        LEAD_TIMEOUT,
        full,
    )
    .await;
    let addr_of = {
        let addrs: BTreeMap<i32, SocketAddr> = (1..=3).map(|id| (id, cluster.addr(id))).collect();
        move |id: i32| addrs[&id]
    };
    produce_acked(&before, &topic, &addr_of).await;

    // Metadata's controller_id names the active controller: the victim is another node, so the
    // quorum keeps its leader and only the broker side of the restart is under test.
    let controller = before.controller;
    let victim = (1..=3)
        .rev()
        .find(|&id| id != controller)
        .expect("two of three nodes are not the controller");
    let survivor = (1..=3)
        .find(|&id| id != victim)
        .expect("another node survives");
    let victim_led: BTreeMap<i32, i32> = before
        .parts
        .iter()
        .filter(|(_, p)| p.leader == victim)
        .map(|(&i, p)| (i, p.leader_epoch))
        .collect();
    eprintln!(
        "cluster: {PARTITIONS} partitions x RF 3 led with full ISRs, {:?} into the test; \
         controller {controller}, killing node {victim} (leader of {} partitions)",
        test_started.elapsed(),
        victim_led.len()
    );

    cluster.kill9(victim);
    let restarted = Instant::now();
    // Bounded by the harness (READY_TIMEOUT); the panic shows the node's log.
    cluster.restart(victim);
    let to_ready = restarted.elapsed();
    eprintln!("cluster: restart of node {victim} -> ready line in {to_ready:?}");

    // Every partition the victim led has a new leader epoch: the view is from after the crash,
    // not a stale copy of the one before it.
    let led = |i: i32, p: &Part| {
        p.error == 0
            && p.leader >= 0
            && victim_led
                .get(&i)
                .is_none_or(|&epoch| p.leader_epoch > epoch)
    };
    wait_every_partition_in(
        &cluster,
        survivor,
        &topic,
        "every partition led after the restart",
        LEAD_TIMEOUT,
        led,
    )
    .await;
    let to_led = restarted.elapsed();
    eprintln!("cluster: restart of node {victim} -> every partition led in {to_led:?}");

    let rejoined = |i: i32, p: &Part| led(i, p) && full(i, p) && p.isr.contains(&victim);
    let after = wait_every_partition_in(
        &cluster,
        survivor,
        &topic,
        "every partition led with the restarted node back in its ISR",
        LEAD_TIMEOUT,
        rejoined,
    )
    .await;
    let to_isr = restarted.elapsed();
    eprintln!("cluster: restart of node {victim} -> node back in every ISR in {to_isr:?}");
    // The restarted node's own image agrees.
    wait_every_partition_in(
        &cluster,
        victim,
        &topic,
        "the restarted node's own Metadata: every partition led with a full ISR",
        LEAD_TIMEOUT,
        rejoined,
    )
    .await;

    assert_acked_readable(&after, &topic, &addr_of).await;
    eprintln!(
        "cluster: restart -> acknowledged records read back in {:?}; whole test {:?}",
        restarted.elapsed(),
        test_started.elapsed()
    );
}
