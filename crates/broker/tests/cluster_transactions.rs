//! Goal: transactions work across the brokers of a real 3-node cluster. The transaction
//! coordinator writes the markers of partitions led by other brokers through WriteTxnMarkers, so a
//! read_committed consumer sees exactly the committed transactions on every partition, and
//! offsets sent to a transaction become the group's committed offsets only when it commits. When
//! the coordinator's broker is killed with a transaction open, the coordinator that takes over
//! (another broker, from the replicated `__transaction_state`) fences and aborts it for the
//! producer's next instance.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::{assert_no_message, consumer_at, producer_at, recv_n, unique_topic, RawConn};
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 6;
const OP_TIMEOUT: Duration = Duration::from_secs(60);
const RECV_TIMEOUT: Duration = Duration::from_secs(60);

/// Fast failure detection; every internal topic replicated three ways.
const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "auto.leader.rebalance.enable=false",
    "offsets.topic.num.partitions=6",
    "transaction.state.log.num.partitions=6",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "min.insync.replicas=2",
];

fn transactional(bootstrap: &str, id: &str) -> FutureProducer {
    let p = producer_at(
        bootstrap,
        &[
            ("transactional.id", id),
            ("enable.idempotence", "true"),
            ("transaction.timeout.ms", "60000"),
        ],
    );
    p.init_transactions(OP_TIMEOUT).expect("init_transactions");
    p
}

/// One record per partition, valued `{prefix}-{partition}`.
async fn send_all(p: &FutureProducer, topic: &str, prefix: &str) {
    for partition in 0..PARTITIONS {
        let value = format!("{prefix}-{partition}");
        let record: FutureRecord<'_, str, str> =
            FutureRecord::to(topic).partition(partition).payload(&value);
        p.send(record, OP_TIMEOUT)
            .await
            .unwrap_or_else(|(e, _)| panic!("send {value}: {e:?}"));
    }
}

/// Every value a consumer at `isolation` reads from the start of every partition.
async fn values(bootstrap: &str, topic: &str, isolation: &str, n: usize) -> BTreeSet<String> {
    let c: StreamConsumer = consumer_at(bootstrap, &[("isolation.level", isolation)]);
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("add partition");
    }
    c.assign(&tpl).expect("assign");
    let got = recv_n(&c, n, RECV_TIMEOUT).await;
    assert_no_message(&c, Duration::from_millis(1500)).await;
    got.iter()
        .map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
        .collect()
}

fn expected(prefixes: &[&str]) -> BTreeSet<String> {
    prefixes
        .iter()
        .flat_map(|prefix| (0..PARTITIONS).map(move |p| format!("{prefix}-{p}")))
        .collect()
}

/// The node coordinating transactional id `id`, asked of every running node until one answers.
async fn coordinator(cluster: &TestCluster, id: &str) -> i32 {
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        for node in cluster.running() {
            let mut conn = RawConn::connect(cluster.addr(node)).await;
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(id.to_string()))
                .with_key_type(1);
            let correlation_id = conn.send(3, &request).await;
            let response = conn.recv::<FindCoordinatorRequest>(3, correlation_id).await;
            if response.error_code == 0 {
                return response.node_id.0;
            }
        }
        assert!(Instant::now() < deadline, "no coordinator for {id}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many WriteTxnMarkers requests `node` has served.
fn markers_served(cluster: &TestCluster, node: i32) -> f64 {
    cluster
        .metric(
            node,
            "millrace_requests_total{api=\"WriteTxnMarkers\",version=\"1\"}",
        )
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_and_abort_across_brokers_and_survive_a_coordinator_kill() {
    let mut cluster = TestCluster::start(3, SETTINGS);
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("txn-cluster");
    let input = unique_topic("txn-cluster-in");
    let id = unique_topic("txn-cluster-id");
    let group = unique_topic("txn-cluster-group");

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("admin client");
    for name in [&topic, &input] {
        let created = admin
            .create_topics(
                &[NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(3))],
                &AdminOptions::new().operation_timeout(Some(OP_TIMEOUT)),
            )
            .await
            .expect("create topics");
        assert!(created.iter().all(Result::is_ok), "{created:?}");
    }

    let producer = transactional(&bootstrap, &id);
    producer.begin_transaction().expect("begin");
    send_all(&producer, &topic, "committed").await;
    // Offsets of the input topic sent to the transaction: the group's once it commits.
    let group_consumer: StreamConsumer = consumer_at(
        &bootstrap,
        &[
            ("group.id", group.as_str()),
            ("enable.auto.commit", "false"),
        ],
    );
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(&input, 0, Offset::Offset(42))
        .expect("offset");
    producer
        .send_offsets_to_transaction(
            &offsets,
            &group_consumer.group_metadata().expect("group metadata"),
            OP_TIMEOUT,
        )
        .expect("send_offsets_to_transaction");
    producer.commit_transaction(OP_TIMEOUT).expect("commit");

    producer.begin_transaction().expect("begin");
    send_all(&producer, &topic, "aborted").await;
    producer.abort_transaction(OP_TIMEOUT).expect("abort");

    // Partitions are led by all three brokers, so markers went to the other two.
    let txn_coordinator = coordinator(&cluster, &id).await;
    let others: Vec<i32> = (1..=3).filter(|&n| n != txn_coordinator).collect();
    let served: f64 = others.iter().map(|&n| markers_served(&cluster, n)).sum();
    assert!(
        served > 0.0,
        "no WriteTxnMarkers served by nodes {others:?} (coordinator {txn_coordinator})"
    );

    assert_eq!(
        values(&bootstrap, &topic, "read_committed", PARTITIONS as usize).await,
        expected(&["committed"])
    );
    assert_eq!(
        values(
            &bootstrap,
            &topic,
            "read_uncommitted",
            2 * PARTITIONS as usize
        )
        .await,
        expected(&["committed", "aborted"])
    );
    let mut wanted = TopicPartitionList::new();
    wanted.add_partition(&input, 0);
    let committed = group_consumer
        .committed_offsets(wanted, OP_TIMEOUT)
        .expect("committed offsets");
    let offset = committed
        .find_partition(&input, 0)
        .map(|e| e.offset())
        .expect("input-0 in the answer");
    assert_eq!(offset, Offset::Offset(42));

    // A transaction left open when its coordinator's broker dies: the next coordinator fences it
    // when the producer's next instance starts, and aborts it.
    producer.begin_transaction().expect("begin");
    send_all(&producer, &topic, "orphaned").await;
    cluster.kill9(txn_coordinator);
    let survivor = *others.first().expect("another node");
    let bootstrap_alive = cluster.addr(survivor).to_string();
    let next = transactional(&bootstrap_alive, &id);
    let new_coordinator = coordinator(&cluster, &id).await;
    assert_ne!(new_coordinator, txn_coordinator);
    next.begin_transaction().expect("begin");
    send_all(&next, &topic, "after").await;
    next.commit_transaction(OP_TIMEOUT).expect("commit");
    assert_eq!(
        values(
            &bootstrap_alive,
            &topic,
            "read_committed",
            2 * PARTITIONS as usize
        )
        .await,
        expected(&["committed", "after"])
    );
    cluster.restart(txn_coordinator);
    assert_eq!(
        values(
            &cluster.bootstrap(),
            &topic,
            "read_committed",
            2 * PARTITIONS as usize
        )
        .await,
        expected(&["committed", "after"])
    );
}
