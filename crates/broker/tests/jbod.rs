//! Goal: on a 3-node cluster where node 1 has two log dirs, one of them a tmpfs: a replica moved
//! off the tmpfs (AlterReplicaLogDirs, over the wire) under produce load keeps serving; then
//! failing the tmpfs under load (a lazy unmount: every path under it vanishes) takes only that
//! dir's partitions offline on node 1: they get other leaders and node 1 leaves their ISR, the
//! other dir's partitions (the moved one among them) keep node 1 as leader and keep taking writes
//! without an error, DescribeLogDirs and AlterReplicaLogDirs answer the failed dir with
//! KAFKA_STORAGE_ERROR, and every acknowledged record reads back.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::{metadata, topic_name, unique_topic, RawConn};
use kafka_protocol::messages::alter_replica_log_dirs_request::{
    AlterReplicaLogDir, AlterReplicaLogDirTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
};
use kafka_protocol::protocol::StrBytes;
use millrace_store::testing::Tmpfs;
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;

const PARTITIONS: i32 = 6;
const KAFKA_STORAGE_ERROR: i16 = 56;
const LOG_DIR_NOT_FOUND: i16 = 57;
const REPLICA_NOT_AVAILABLE: i16 = 9;
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "auto.leader.rebalance.enable=false",
];

/// The tmpfs's size: above `millrace.log.dir.min.free.bytes` (64 MiB), under which produce is
/// refused.
const TMPFS_BYTES: u64 = 256 * 1024 * 1024;

/// (leader, isr) of every partition of `topic`, as node `addr` shows them.
async fn views(addr: SocketAddr, topic: &str) -> BTreeMap<i32, (i32, Vec<i32>)> {
    let mut conn = RawConn::connect(addr).await;
    let response = metadata(&mut conn, Some(&[topic]), false).await;
    response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            (
                p.partition_index,
                (p.leader_id.0, p.isr_nodes.iter().map(|b| b.0).collect()),
            )
        })
        .collect()
}

async fn wait_views(
    addr: SocketAddr,
    topic: &str,
    what: &str,
    ok: impl Fn(&BTreeMap<i32, (i32, Vec<i32>)>) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        let v = views(addr, topic).await;
        if ok(&v) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < CHANGE_TIMEOUT,
            "{what}: not within {CHANGE_TIMEOUT:?}; last {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_topic(addr: SocketAddr, topic: &str) {
    let mut conn = RawConn::connect(addr).await;
    // Node 1 is every partition's preferred leader.
    let assignments = (0..PARTITIONS)
        .map(|p| {
            let replicas = if p % 2 == 0 { [1, 2, 3] } else { [1, 3, 2] };
            CreatableReplicaAssignment::default()
                .with_partition_index(p)
                .with_broker_ids(replicas.iter().map(|&b| BrokerId(b)).collect())
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(assignments)]);
    let response: CreateTopicsResponse = conn.request(7, &request).await;
    assert_eq!(response.topics[0].error_code, 0, "create {topic}");
}

/// AlterReplicaLogDirs of `topic`-`partition` to `dir` on the broker at `addr`: the error code.
async fn alter_log_dir(addr: SocketAddr, dir: &Path, topic: &str, partition: i32) -> i16 {
    let mut conn = RawConn::connect(addr).await;
    let request =
        AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
            .with_path(StrBytes::from_string(dir.display().to_string()))
            .with_topics(vec![AlterReplicaLogDirTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![partition])])]);
    let response: AlterReplicaLogDirsResponse = conn.request(2, &request).await;
    response.results[0].partitions[0].error_code
}

/// DescribeLogDirs v4 of the broker at `addr`: per dir (as named), its error code and its
/// (partition, is_future) replicas of `topic`.
async fn log_dirs(addr: SocketAddr, topic: &str) -> BTreeMap<String, (i16, Vec<(i32, bool)>)> {
    let mut conn = RawConn::connect(addr).await;
    let response: DescribeLogDirsResponse = conn
        .request(4, &DescribeLogDirsRequest::default().with_topics(None))
        .await;
    response
        .results
        .iter()
        .map(|r| {
            let replicas = r
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == topic)
                .flat_map(|t| t.partitions.iter())
                .map(|p| (p.partition_index, p.is_future_key))
                .collect();
            (r.log_dir.to_string(), (r.error_code, replicas))
        })
        .collect()
}

/// Acknowledged records: (partition, offset) → payload; and delivery errors per partition.
#[derive(Default)]
struct Acks {
    acked: BTreeMap<(i32, i64), String>,
    errors: BTreeMap<i32, Vec<String>>,
    /// Acks per partition since `mark`.
    since_mark: BTreeMap<i32, usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_log_dir_moves_its_partitions_and_the_other_dir_keeps_serving() {
    let base = tempfile::tempdir().expect("tmp");
    let mut tmpfs = Tmpfs::mount(&base.path().join("mnt"), TMPFS_BYTES).expect("mount a tmpfs");
    let second_dir = base.path().join("mnt").join("data");
    let cluster = TestCluster::start_with_log_dirs(3, 0, SETTINGS, &[(1, second_dir.clone())]);
    let topic = unique_topic("jbod");
    create_topic(cluster.addr(1), &topic).await;
    wait_views(cluster.addr(1), &topic, "node 1 leads everything", |v| {
        v.len() == PARTITIONS as usize && v.values().all(|(l, isr)| *l == 1 && isr.len() == 3)
    })
    .await;
    // Placement spread node 1's replicas over its two dirs.
    let (failing, keeping): (Vec<i32>, Vec<i32>) =
        (0..PARTITIONS).partition(|p| second_dir.join(format!("{topic}-{p}")).is_dir());
    assert!(
        !failing.is_empty() && !keeping.is_empty(),
        "placement: {failing:?} on the tmpfs, {keeping:?} in the data dir"
    );

    let acks = Arc::new(Mutex::new(Acks::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let producer = common::producer_at(
            &cluster.bootstrap(),
            &[("linger.ms", "5"), ("message.timeout.ms", "30000")],
        );
        let (acks, stop, topic) = (Arc::clone(&acks), Arc::clone(&stop), topic.clone());
        tokio::spawn(async move {
            let mut i: u64 = 0;
            while !stop.load(Ordering::SeqCst) {
                // A window of sends in flight, one per partition.
                let mut window = Vec::new();
                for p in 0..PARTITIONS {
                    let payload = format!("record-{i}");
                    i += 1;
                    let producer = producer.clone();
                    let topic = topic.clone();
                    window.push(async move {
                        let r = producer
                            .send(
                                FutureRecord::<(), _>::to(&topic)
                                    .partition(p)
                                    .payload(&payload),
                                Duration::from_secs(30),
                            )
                            .await;
                        (p, payload, r)
                    });
                }
                for (p, payload, r) in futures_join(window).await {
                    let mut a = acks.lock().expect("acks");
                    match r {
                        Ok(delivery) => {
                            a.acked.insert((p, delivery.offset), payload);
                            *a.since_mark.entry(p).or_default() += 1;
                        }
                        Err((e, _)) => a.errors.entry(p).or_default().push(e.to_string()),
                    }
                }
            }
        })
    };
    let acked_each = |n: usize| {
        let acks = Arc::clone(&acks);
        move || {
            let a = acks.lock().expect("acks");
            (0..PARTITIONS).all(|p| a.since_mark.get(&p).copied().unwrap_or(0) >= n)
        }
    };
    wait_until("acks before the move", acked_each(20)).await;

    // Move one tmpfs partition to the data dir under load: it must keep serving, then survive.
    let data_dir = cluster.data_dir(1).to_path_buf();
    let moving = failing[0];
    assert_eq!(
        alter_log_dir(cluster.addr(1), Path::new("/nowhere"), &topic, moving).await,
        LOG_DIR_NOT_FOUND
    );
    assert_eq!(
        alter_log_dir(cluster.addr(1), &data_dir, "absent-topic", 0).await,
        REPLICA_NOT_AVAILABLE
    );
    assert_eq!(
        alter_log_dir(cluster.addr(1), &data_dir, &topic, moving).await,
        0
    );
    let started = Instant::now();
    loop {
        let dirs = log_dirs(cluster.addr(1), &topic).await;
        let in_data = dirs
            .get(&data_dir.display().to_string())
            .is_some_and(|(_, r)| r.contains(&(moving, false)));
        let future = dirs.values().any(|(_, r)| r.iter().any(|(_, f)| *f));
        if in_data && !future {
            break;
        }
        assert!(
            started.elapsed() < CHANGE_TIMEOUT,
            "the move did not finish: {dirs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "partition {moving} moved off the tmpfs in {:?} under load",
        started.elapsed()
    );
    let failing: Vec<i32> = failing.into_iter().filter(|p| *p != moving).collect();
    let keeping: Vec<i32> = keeping.into_iter().chain([moving]).collect();
    acks.lock().expect("acks").since_mark.clear();
    wait_until("acks after the move", acked_each(10)).await;

    acks.lock().expect("acks").since_mark.clear();
    tmpfs.fail().expect("umount -l");
    let moved_in = wait_views(
        cluster.addr(2),
        &topic,
        "the failed dir's partitions move off node 1",
        |v| {
            failing.iter().all(|p| {
                v.get(p)
                    .is_some_and(|(l, isr)| *l != 1 && *l >= 0 && !isr.contains(&1))
            })
        },
    )
    .await;
    eprintln!("the failed dir's partitions had new leaders {moved_in:?} after the unmount");
    assert_eq!(cluster.metric(1, "millrace_log_offline_dirs"), Some(1.0));
    assert_eq!(cluster.metric(2, "millrace_log_offline_dirs"), Some(0.0));
    let dirs = log_dirs(cluster.addr(1), &topic).await;
    assert_eq!(
        dirs.get(&second_dir.display().to_string())
            .map(|(code, _)| *code),
        Some(KAFKA_STORAGE_ERROR),
        "{dirs:?}"
    );
    assert_eq!(
        dirs.get(&data_dir.display().to_string())
            .map(|(code, _)| *code),
        Some(0)
    );
    assert_eq!(
        alter_log_dir(cluster.addr(1), &second_dir, &topic, keeping[0]).await,
        KAFKA_STORAGE_ERROR
    );
    // Writes go on everywhere: the moved partitions at their new leaders, the others at node 1.
    wait_until("acks after the failure", acked_each(20)).await;
    stop.store(true, Ordering::SeqCst);
    load.await.expect("producer task");

    let v = views(cluster.addr(1), &topic).await;
    for p in &keeping {
        let (leader, isr) = &v[p];
        assert_eq!(
            *leader, 1,
            "partition {p} of the healthy dir keeps its leader: {v:?}"
        );
        assert!(isr.contains(&1), "partition {p}: {v:?}");
    }
    let acked = {
        let a = acks.lock().expect("acks");
        for p in &keeping {
            assert!(
                !a.errors.contains_key(p),
                "partition {p} of the healthy dir failed writes: {:?}",
                a.errors.get(p)
            );
        }
        a.acked.clone()
    };

    read_back(&cluster.bootstrap(), &topic, &acked).await;
    eprintln!(
        "{} acknowledged records read back; partitions {failing:?} moved, {keeping:?} kept",
        acked.len()
    );
}

/// Every acknowledged record reads back, from wherever its partition is led now.
async fn read_back(bootstrap: &str, topic: &str, acked: &BTreeMap<(i32, i64), String>) {
    let consumer = common::consumer_at(bootstrap, &[]);
    common::assign(
        &consumer,
        topic,
        &(0..PARTITIONS)
            .map(|p| (p, Offset::Beginning))
            .collect::<Vec<_>>(),
    );
    let last: BTreeMap<i32, i64> = acked.keys().fold(BTreeMap::new(), |mut m, (p, o)| {
        let e = m.entry(*p).or_insert(*o);
        *e = (*e).max(*o);
        m
    });
    let mut read: BTreeMap<(i32, i64), String> = BTreeMap::new();
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    while last.iter().any(|(p, o)| !read.contains_key(&(*p, *o))) {
        assert!(
            Instant::now() < deadline,
            "reading back: {} of {} read",
            read.len(),
            acked.len()
        );
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await else {
            continue;
        };
        let payload = m
            .payload()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        read.insert((m.partition(), m.offset()), payload);
    }
    for (key, payload) in acked {
        assert_eq!(
            read.get(key),
            Some(payload),
            "acknowledged record {key:?} lost"
        );
    }
}

async fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {CHANGE_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Awaits every future of `window`, in order.
async fn futures_join<F: std::future::Future>(window: Vec<F>) -> Vec<F::Output> {
    let handles: Vec<_> = window.into_iter().map(Box::pin).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await);
    }
    out
}
