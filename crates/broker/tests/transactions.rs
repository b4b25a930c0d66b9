//! Goal: transactions survive a crash of the broker. A transaction committed before a kill -9 is
//! visible to read_committed consumers after the restart (the coordinator finishes what its log
//! says was decided); one left open across the crash keeps holding the last stable offset until a
//! new instance of its producer fences and aborts it; read_uncommitted sees everything.

mod common;

use std::time::Duration;

use common::*;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::Offset;

const OP_TIMEOUT: Duration = Duration::from_secs(30);
const RECV_TIMEOUT: Duration = Duration::from_secs(30);

fn transactional(broker: &Broker, id: &str) -> FutureProducer {
    let p = producer(
        broker,
        &[
            ("transactional.id", id),
            ("enable.idempotence", "true"),
            ("transaction.timeout.ms", "60000"),
        ],
    );
    p.init_transactions(OP_TIMEOUT).expect("init_transactions");
    p
}

async fn send(p: &FutureProducer, topic: &str, values: &[&str]) {
    for v in values {
        let record: FutureRecord<'_, str, str> = FutureRecord::to(topic).partition(0).payload(v);
        p.send(record, OP_TIMEOUT)
            .await
            .unwrap_or_else(|(e, _)| panic!("send {v}: {e:?}"));
    }
}

/// Every value a consumer at `isolation` reads from the start (the log must end quietly).
async fn values(broker: &Broker, topic: &str, isolation: &str, n: usize) -> Vec<String> {
    let c = consumer(broker, &[("isolation.level", isolation)]);
    assign(&c, topic, &[(0, Offset::Beginning)]);
    let got = recv_n(&c, n, RECV_TIMEOUT).await;
    assert_no_message(&c, Duration::from_millis(1500)).await;
    got.iter()
        .map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
        .collect()
}

/// (low, high) watermarks as a read_committed consumer sees them: high is the last stable offset.
fn stable_watermarks(broker: &Broker, topic: &str) -> (i64, i64) {
    consumer(broker, &[("isolation.level", "read_committed")])
        .fetch_watermarks(topic, 0, OP_TIMEOUT)
        .expect("watermarks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_survive_kill_9() {
    let mut broker = Broker::start_with(&["num.partitions=1"]);
    let topic = unique_topic("txn-crash");
    let id = unique_topic("txn-id");

    let first = transactional(&broker, &id);
    first.begin_transaction().expect("begin");
    send(&first, &topic, &["c0", "c1", "c2"]).await;
    first.commit_transaction(OP_TIMEOUT).expect("commit"); // c0..c2 at 0..2, marker at 3
    first.begin_transaction().expect("begin");
    send(&first, &topic, &["open0", "open1"]).await; // 4..5, left open
    broker.kill9();
    broker.restart();

    // The open transaction holds the last stable offset at its first record after the restart.
    let deadline = tokio::time::Instant::now() + RECV_TIMEOUT;
    loop {
        match stable_watermarks(&broker, &topic) {
            (0, 4) => break,
            other if tokio::time::Instant::now() > deadline => {
                panic!("read_committed watermarks {other:?}, want (0, 4)")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    assert_eq!(
        values(&broker, &topic, "read_committed", 3).await,
        ["c0", "c1", "c2"]
    );

    // A new instance fences the first and aborts its transaction, then commits its own.
    let second = transactional(&broker, &id);
    second.begin_transaction().expect("begin");
    send(&second, &topic, &["after"]).await;
    second.commit_transaction(OP_TIMEOUT).expect("commit");
    assert!(
        first.commit_transaction(Duration::from_secs(10)).is_err(),
        "the fenced instance cannot commit"
    );
    assert_eq!(
        values(&broker, &topic, "read_committed", 4).await,
        ["c0", "c1", "c2", "after"]
    );
    assert_eq!(
        values(&broker, &topic, "read_uncommitted", 6).await,
        ["c0", "c1", "c2", "open0", "open1", "after"]
    );

    // Committed right before a crash: the coordinator finishes it after the restart.
    second.begin_transaction().expect("begin");
    send(&second, &topic, &["late0", "late1"]).await;
    second.commit_transaction(OP_TIMEOUT).expect("commit");
    broker.kill9();
    broker.restart();
    assert_eq!(
        values(&broker, &topic, "read_committed", 6).await,
        ["c0", "c1", "c2", "after", "late0", "late1"]
    );
}
