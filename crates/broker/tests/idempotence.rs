//! Goal: the broker's idempotent-producer rules, with raw requests: InitProducerId hands out fresh
//! producer ids; the same batch sent twice gets the same offset and is stored once (also after a
//! kill -9); a sequence gap gets OUT_OF_ORDER_SEQUENCE_NUMBER; a new producer epoch must start at
//! sequence 0; an older producer epoch gets INVALID_PRODUCER_EPOCH.

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::*;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{InitProducerIdRequest, ListOffsetsRequest, ProducerId};
use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};

const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;

/// One uncompressed batch of `count` records from producer (`id`, `epoch`) starting at
/// `base_sequence`.
fn idempotent_batch(id: i64, epoch: i16, base_sequence: i32, count: i32, tag: &str) -> Bytes {
    let records: Vec<_> = (0..count)
        .map(|i| {
            let value = format!("{tag}-{i}");
            let mut r = record(None, Some(value.as_bytes()), now_ms());
            r.producer_id = id;
            r.producer_epoch = epoch;
            r.offset = i64::from(i);
            r.sequence = base_sequence + i;
            r
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode");
    buf.freeze()
}

async fn init_producer_id(conn: &mut RawConn) -> (i64, i16) {
    let response = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await;
    assert_eq!(response.error_code, 0, "InitProducerId failed");
    assert!(response.producer_id.0 >= 0, "a real producer id");
    (response.producer_id.0, response.producer_epoch)
}

/// (error code, base offset) of a Produce v9 acks=-1 of one batch.
async fn produce(conn: &mut RawConn, topic: &str, batch: Bytes) -> (i16, i64) {
    let response = conn.request(9, &produce_request(topic, 0, batch, -1)).await;
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

async fn log_end(conn: &mut RawConn, topic: &str) -> i64 {
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let response = conn.request(7, &request).await;
    response.topics[0].partitions[0].offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_ids_are_fresh() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let (a, epoch_a) = init_producer_id(&mut conn).await;
    let (b, _) = init_producer_id(&mut conn).await;
    assert_ne!(a, b, "every InitProducerId gets a new producer id");
    assert_eq!(epoch_a, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_are_stored_once_and_gaps_are_refused() {
    let mut broker = Broker::start();
    let topic = unique_topic("idem");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let (id, epoch) = init_producer_id(&mut conn).await;

    let first = idempotent_batch(id, epoch, 0, 3, "a");
    assert_eq!(produce(&mut conn, &topic, first.clone()).await, (0, 0));
    assert_eq!(
        produce(&mut conn, &topic, first.clone()).await,
        (0, 0),
        "a duplicate gets its original offset"
    );
    assert_eq!(
        log_end(&mut conn, &topic).await,
        3,
        "the duplicate was not stored again"
    );

    let second = idempotent_batch(id, epoch, 3, 2, "b");
    assert_eq!(produce(&mut conn, &topic, second.clone()).await, (0, 3));

    let gap = idempotent_batch(id, epoch, 10, 1, "gap");
    assert_eq!(
        produce(&mut conn, &topic, gap).await.0,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(
        log_end(&mut conn, &topic).await,
        5,
        "nothing appended on a gap"
    );

    let new_epoch_not_zero = idempotent_batch(id, epoch + 1, 5, 1, "e1");
    assert_eq!(
        produce(&mut conn, &topic, new_epoch_not_zero).await.0,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    let new_epoch = idempotent_batch(id, epoch + 1, 0, 1, "e1");
    assert_eq!(produce(&mut conn, &topic, new_epoch).await, (0, 5));
    let fenced = idempotent_batch(id, epoch, 5, 1, "old");
    assert_eq!(
        produce(&mut conn, &topic, fenced).await.0,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(log_end(&mut conn, &topic).await, 6);

    // The producer state survives a crash: the retry of an acknowledged batch is still a duplicate.
    let last = idempotent_batch(id, epoch + 1, 1, 2, "last");
    assert_eq!(produce(&mut conn, &topic, last.clone()).await, (0, 6));
    drop(conn);
    broker.kill9();
    broker.restart();
    let mut conn = RawConn::connect(broker.addr()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let retried = loop {
        let outcome = produce(&mut conn, &topic, last.clone()).await;
        if outcome.0 == 0 || tokio::time::Instant::now() > deadline {
            break outcome;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        retried,
        (0, 6),
        "after kill -9 the retry is recognised as a duplicate"
    );
    assert_eq!(log_end(&mut conn, &topic).await, 8, "and stored once");
}
