//! Incremental fetch sessions (KIP-227) over raw Fetch v12: a session answers only the partitions
//! with something new, keeps positions it was not told again, forgets and re-adds partitions
//! mid-session, and refuses a wrong epoch or an unknown session with Kafka's codes.

mod common;

use common::*;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse};

const FETCH_VERSION: i16 = 12;
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

fn session_fetch(
    topic: &str,
    session_id: i32,
    epoch: i32,
    positions: &[(i32, i64)],
    forgotten: &[i32],
) -> FetchRequest {
    let mut request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_session_id(session_id)
        .with_session_epoch(epoch);
    if !positions.is_empty() {
        request.topics = vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(
                positions
                    .iter()
                    .map(|&(partition, offset)| {
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(1024 * 1024)
                    })
                    .collect(),
            )];
    }
    if !forgotten.is_empty() {
        request.forgotten_topics_data = vec![ForgottenTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(forgotten.to_vec())];
    }
    request
}

/// (partition, high watermark, values of the records returned) for each partition answered.
fn answered(response: &FetchResponse) -> Vec<(i32, i64, Vec<String>)> {
    assert_eq!(response.error_code, 0, "top-level error");
    let mut out: Vec<(i32, i64, Vec<String>)> = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            assert_eq!(p.error_code, 0, "partition {} error", p.partition_index);
            let values = decode_records(&p.records)
                .into_iter()
                .map(|r| String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned())
                .collect();
            (p.partition_index, p.high_watermark, values)
        })
        .collect();
    out.sort();
    out
}

async fn produce(conn: &mut RawConn, topic: &str, partition: i32, value: &str) {
    let batch = encode_batch(&[record(None, Some(value.as_bytes()), now_ms())]);
    let response = produce_batch(conn, topic, partition, batch).await;
    assert_eq!(response.error_code, 0, "produce to {partition}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_what_changed_and_forgets_and_re_adds_partitions() {
    let broker = Broker::start_with(&["num.partitions=3"]);
    let topic = unique_topic("sessions");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut producer = RawConn::connect(broker.addr()).await;
    produce(&mut producer, &topic, 0, "a0").await;
    produce(&mut producer, &topic, 1, "b0").await;

    let mut conn = RawConn::connect(broker.addr()).await;
    // Epoch 0: a new session, a full answer.
    let full = conn
        .request(
            FETCH_VERSION,
            &session_fetch(&topic, 0, 0, &[(0, 0), (1, 0), (2, 0)], &[]),
        )
        .await;
    let id = full.session_id;
    assert_ne!(id, 0, "the broker made a session");
    assert_eq!(
        answered(&full),
        vec![
            (0, 1, vec!["a0".to_string()]),
            (1, 1, vec!["b0".to_string()]),
            (2, 0, vec![]),
        ]
    );

    // Epoch 1: the client moved past what it read; nothing is new, so nothing is answered.
    let quiet = conn
        .request(
            FETCH_VERSION,
            &session_fetch(&topic, id, 1, &[(0, 1), (1, 1)], &[]),
        )
        .await;
    assert_eq!(quiet.session_id, id);
    assert_eq!(answered(&quiet), vec![]);

    // Epoch 2 names no partition: the session still reads all three from where it was told.
    produce(&mut producer, &topic, 2, "c0").await;
    produce(&mut producer, &topic, 0, "a1").await;
    let news = conn
        .request(FETCH_VERSION, &session_fetch(&topic, id, 2, &[], &[]))
        .await;
    assert_eq!(
        answered(&news),
        vec![
            (0, 2, vec!["a1".to_string()]),
            (2, 1, vec!["c0".to_string()])
        ]
    );

    // Epoch 3: forget partition 1; new records there are no longer answered.
    let forget = conn
        .request(
            FETCH_VERSION,
            &session_fetch(&topic, id, 3, &[(0, 2), (2, 1)], &[1]),
        )
        .await;
    assert_eq!(answered(&forget), vec![]);
    produce(&mut producer, &topic, 1, "b1").await;
    let without = conn
        .request(FETCH_VERSION, &session_fetch(&topic, id, 4, &[], &[]))
        .await;
    assert_eq!(answered(&without), vec![], "partition 1 was forgotten");

    // Epoch 5: re-add partition 1 from the start.
    let again = conn
        .request(FETCH_VERSION, &session_fetch(&topic, id, 5, &[(1, 0)], &[]))
        .await;
    assert_eq!(
        answered(&again),
        vec![(1, 2, vec!["b0".to_string(), "b1".to_string()])]
    );

    // A replayed epoch, and a session the broker does not have.
    let replay = conn
        .request(FETCH_VERSION, &session_fetch(&topic, id, 5, &[], &[]))
        .await;
    assert_eq!(replay.error_code, INVALID_FETCH_SESSION_EPOCH);
    let unknown = conn
        .request(
            FETCH_VERSION,
            &session_fetch(&topic, id ^ 0x5555, 1, &[], &[]),
        )
        .await;
    assert_eq!(unknown.error_code, FETCH_SESSION_ID_NOT_FOUND);

    // The session went on at epoch 6 despite the refusals (the client moves past what it read;
    // a position it does not send again stays where it was); epoch -1 closes it.
    let next = conn
        .request(FETCH_VERSION, &session_fetch(&topic, id, 6, &[(1, 2)], &[]))
        .await;
    assert_eq!(answered(&next), vec![]);
    let closed = conn
        .request(
            FETCH_VERSION,
            &session_fetch(&topic, id, -1, &[(0, 0)], &[]),
        )
        .await;
    assert_eq!(closed.session_id, 0, "a sessionless answer");
    assert_eq!(
        answered(&closed),
        vec![(0, 2, vec!["a0".into(), "a1".into()])]
    );
    let gone = conn
        .request(FETCH_VERSION, &session_fetch(&topic, id, 7, &[], &[]))
        .await;
    assert_eq!(gone.error_code, FETCH_SESSION_ID_NOT_FOUND);
}

/// A parked incremental fetch wakes for a partition it did not name in this request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_long_poll_waits_on_every_partition_of_the_session() {
    let broker = Broker::start_with(&["num.partitions=2"]);
    let topic = unique_topic("session-poll");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let full = conn
        .request(
            FETCH_VERSION,
            &session_fetch(&topic, 0, 0, &[(0, 0), (1, 0)], &[]),
        )
        .await;
    let id = full.session_id;
    assert_ne!(id, 0);

    let mut poll = session_fetch(&topic, id, 1, &[], &[]);
    poll.max_wait_ms = 20_000;
    let correlation_id = conn.send(FETCH_VERSION, &poll).await;
    let mut producer = RawConn::connect(broker.addr()).await;
    produce(&mut producer, &topic, 1, "late").await;
    let response: FetchResponse = conn
        .recv::<FetchRequest>(FETCH_VERSION, correlation_id)
        .await;
    assert_eq!(answered(&response), vec![(1, 1, vec!["late".to_string()])]);
}
