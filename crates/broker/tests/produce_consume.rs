//! Goal: records produced through a real client (librdkafka) come back from the broker exactly as
//! sent (keys, null values, headers, timestamps, offsets), for every codec and ack level, and the
//! offset-positioning APIs (by time, mid-batch, out of range) behave as Kafka's do.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, Timestamp};
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

const RECV_TIMEOUT: Duration = Duration::from_secs(30);
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_preserves_keys_null_values_headers_and_timestamps() {
    let broker = Broker::start();
    let topic = unique_topic("roundtrip");
    let producer = producer(&broker, &[]);
    let t0: i64 = 1_700_000_000_000;
    let binary: Vec<u8> = (0..=255u8).collect();

    struct Sent {
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<(&'static str, Option<Vec<u8>>)>,
        timestamp: i64,
    }
    let sent = [
        Sent {
            key: Some(b"k1".to_vec()),
            value: Some(b"v1".to_vec()),
            headers: vec![
                ("h1", Some(b"a".to_vec())),
                ("h-null", None),
                ("h-empty", Some(Vec::new())),
            ],
            timestamp: t0,
        },
        Sent {
            key: None,
            value: None,
            headers: vec![],
            timestamp: t0 + 1,
        },
        Sent {
            key: Some(b"k3".to_vec()),
            value: Some(Vec::new()),
            headers: vec![],
            timestamp: t0 - 86_400_000,
        },
        Sent {
            key: Some(Vec::new()),
            value: Some(binary.clone()),
            headers: vec![("dup", Some(b"1".to_vec())), ("dup", Some(b"2".to_vec()))],
            timestamp: t0 + 3,
        },
    ];

    for (i, s) in sent.iter().enumerate() {
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&topic).partition(0).timestamp(s.timestamp);
        if let Some(k) = &s.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &s.value {
            record = record.payload(v.as_slice());
        }
        if !s.headers.is_empty() {
            let mut headers = OwnedHeaders::new();
            for (k, v) in &s.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: v.as_ref(),
                });
            }
            record = record.headers(headers);
        }
        let delivery = producer
            .send(record, SEND_TIMEOUT)
            .await
            .unwrap_or_else(|(e, _)| panic!("send #{i} failed: {e:?}"));
        assert_eq!(delivery.partition, 0);
        assert_eq!(
            delivery.offset,
            i64::try_from(i).expect("small"),
            "delivery offset of #{i}"
        );
    }

    let consumer = consumer(&broker, &[]);
    assign(&consumer, &topic, &[(0, Offset::Beginning)]);
    let got = recv_n(&consumer, sent.len(), RECV_TIMEOUT).await;
    for (i, (s, m)) in sent.iter().zip(&got).enumerate() {
        assert_eq!(
            m.offset(),
            i64::try_from(i).expect("small"),
            "offset of #{i}"
        );
        assert_eq!(m.key(), s.key.as_deref(), "key of #{i}");
        assert_eq!(m.payload(), s.value.as_deref(), "value of #{i}");
        assert!(
            matches!(m.timestamp(), Timestamp::CreateTime(ts) if ts == s.timestamp),
            "timestamp of #{i}: got {:?}, sent CreateTime({})",
            m.timestamp(),
            s.timestamp
        );
        let got_headers: Vec<(String, Option<Vec<u8>>)> = match m.headers() {
            None => Vec::new(),
            Some(h) => h
                .iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect(),
        };
        let want_headers: Vec<(String, Option<Vec<u8>>)> = s
            .headers
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        assert_eq!(got_headers, want_headers, "headers of #{i}");
    }
    assert_no_message(&consumer, Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_round_trips_many_records_over_several_partitions() {
    const PARTITIONS: i32 = 3;
    const COUNT: usize = 300;
    let broker = Broker::start_with(&["num.partitions=3"]);

    for codec in ["none", "gzip", "snappy", "lz4"] {
        let topic = unique_topic(&format!("codec-{codec}"));
        let producer = producer(
            &broker,
            &[
                ("compression.codec", codec),
                ("linger.ms", "50"),
                ("batch.num.messages", "100"),
            ],
        );
        let values: Vec<String> = (0..COUNT)
            .map(|i| format!("{codec}-{i:05}-{}", "payload ".repeat(20)))
            .collect();
        let keys: Vec<String> = (0..COUNT).map(|i| format!("key-{i}")).collect();
        let mut futures = Vec::with_capacity(COUNT);
        for i in 0..COUNT {
            let partition = i32::try_from(i).expect("small") % PARTITIONS;
            let record = FutureRecord::to(&topic)
                .partition(partition)
                .key(keys[i].as_str())
                .payload(values[i].as_str());
            let future = producer
                .send_result(record)
                .unwrap_or_else(|(e, _)| panic!("{codec}: enqueue #{i}: {e:?}"));
            futures.push(future);
        }
        // Where each value was acknowledged: (partition, offset).
        let mut acked: HashMap<String, (i32, i64)> = HashMap::new();
        for (i, future) in futures.into_iter().enumerate() {
            let delivery = tokio::time::timeout(SEND_TIMEOUT, future)
                .await
                .unwrap_or_else(|_| panic!("{codec}: delivery #{i} timed out"))
                .expect("delivery future not cancelled")
                .unwrap_or_else(|(e, _)| panic!("{codec}: delivery #{i} failed: {e:?}"));
            acked.insert(values[i].clone(), (delivery.partition, delivery.offset));
        }

        let consumer = consumer(&broker, &[]);
        let all: Vec<(i32, Offset)> = (0..PARTITIONS).map(|p| (p, Offset::Beginning)).collect();
        assign(&consumer, &topic, &all);
        let got = recv_n(&consumer, COUNT, RECV_TIMEOUT).await;
        let mut per_partition: BTreeMap<i32, Vec<(i64, String, String)>> = BTreeMap::new();
        for m in &got {
            let value = String::from_utf8(m.payload().expect("value").to_vec()).expect("utf8");
            let key = String::from_utf8(m.key().expect("key").to_vec()).expect("utf8");
            per_partition
                .entry(m.partition())
                .or_default()
                .push((m.offset(), key, value));
        }
        for p in 0..PARTITIONS {
            let records = per_partition.get(&p).cloned().unwrap_or_default();
            let want: Vec<usize> = (0..COUNT)
                .filter(|i| i32::try_from(*i).expect("small") % PARTITIONS == p)
                .collect();
            assert_eq!(
                records.len(),
                want.len(),
                "{codec}: records in partition {p}"
            );
            for (n, ((offset, key, value), i)) in records.iter().zip(&want).enumerate() {
                assert_eq!(
                    *offset,
                    i64::try_from(n).expect("small"),
                    "{codec}: p{p} offset"
                );
                assert_eq!(key, &keys[*i], "{codec}: p{p} key at offset {offset}");
                assert_eq!(value, &values[*i], "{codec}: p{p} value at offset {offset}");
                assert_eq!(
                    acked.get(value),
                    Some(&(p, *offset)),
                    "{codec}: acknowledged position of {key}"
                );
            }
        }
        assert_no_message(&consumer, Duration::from_millis(300)).await;
    }
}

/// librdkafka is built here without zstd, so zstd goes over the raw protocol: a hand-built zstd
/// frame made of raw (stored) blocks, which any zstd decoder accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_batch_is_stored_and_served_back() {
    let broker = Broker::start();
    let topic = unique_topic("codec-zstd");
    ensure_topics(broker.addr(), &[&topic]).await;

    let mut records = Vec::new();
    for i in 0..50i64 {
        let value = format!("zstd-value-{i}-{}", "z".repeat(100));
        let mut r = record(
            Some(format!("k{i}").as_bytes()),
            Some(value.as_bytes()),
            1_700_000_000_000 + i,
        );
        set_offset(&mut r, i);
        r.headers.insert(
            StrBytes::from_static_str("codec"),
            Some(Bytes::from_static(b"zstd")),
        );
        records.push(r);
    }
    let batch = encode_zstd_batch(&records);

    let mut conn = RawConn::connect(broker.addr()).await;
    let produced = produce_batch(&mut conn, &topic, 0, batch).await;
    assert_eq!(produced.error_code, 0, "zstd produce (v9) error code");
    assert_eq!(produced.base_offset, 0);

    let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
    let partition = only_partition(&response).clone();
    assert_eq!(partition.error_code, 0);
    if partition.high_watermark != 50 {
        // Diagnose before failing: does the record show up a moment later?
        tokio::time::sleep(Duration::from_millis(500)).await;
        let later = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
        panic!(
            "Fetch right after the acknowledged zstd Produce: high_watermark {} (want 50), \
             {} record bytes; 500 ms later: high_watermark {}, {} record bytes",
            partition.high_watermark,
            partition.records.as_ref().map_or(0, Bytes::len),
            only_partition(&later).high_watermark,
            only_partition(&later)
                .records
                .as_ref()
                .map_or(0, Bytes::len),
        );
    }
    let mut bytes = partition.records.clone().expect("fetched records");
    let mut fetched = Vec::new();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode_with_custom_compression(
            &mut bytes,
            Some(|b: &mut Bytes, c: Compression| {
                assert_eq!(c, Compression::Zstd, "fetched batch codec");
                Ok(Bytes::from(zstd_stored_unframe(b)))
            }),
        )
        .expect("decode fetched zstd batch");
        fetched.extend(set.records);
    }
    assert_eq!(fetched.len(), records.len());
    for (want, got) in records.iter().zip(&fetched) {
        assert_eq!(got.offset, want.offset);
        assert_eq!(got.key, want.key);
        assert_eq!(got.value, want.value);
        assert_eq!(got.timestamp, want.timestamp);
        assert_eq!(header_list(got), header_list(want));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ack_level_delivers_all_records() {
    const COUNT: usize = 50;
    // `always` appends (each an fdatasync) run off the shared runtime thread: same answers.
    for policy in ["batch", "always"] {
        let broker = Broker::start_with(&[&format!("log.flush.policy={policy}")]);
        for acks in ["0", "1", "all"] {
            check_acks(&broker, acks, COUNT).await;
        }
    }
}

async fn check_acks(broker: &Broker, acks: &str, count: usize) {
    let topic = unique_topic(&format!("acks-{acks}"));
    let producer = producer(broker, &[("acks", acks), ("linger.ms", "5")]);
    let values: Vec<String> = (0..count).map(|i| format!("acks-{acks}-{i}")).collect();
    let mut futures = Vec::new();
    for v in &values {
        let record: FutureRecord<'_, str, str> =
            FutureRecord::to(&topic).partition(0).payload(v.as_str());
        futures.push(
            producer
                .send_result(record)
                .unwrap_or_else(|(e, _)| panic!("acks={acks}: enqueue: {e:?}")),
        );
    }
    for (i, future) in futures.into_iter().enumerate() {
        let delivery = tokio::time::timeout(SEND_TIMEOUT, future)
            .await
            .unwrap_or_else(|_| panic!("acks={acks}: delivery #{i} timed out"))
            .expect("delivery future not cancelled")
            .unwrap_or_else(|(e, _)| panic!("acks={acks}: delivery #{i} failed: {e:?}"));
        if acks != "0" {
            assert_eq!(
                delivery.offset,
                i64::try_from(i).expect("small"),
                "acks={acks}: offset of #{i}"
            );
        }
    }
    let consumer = consumer(broker, &[]);
    assign(&consumer, &topic, &[(0, Offset::Beginning)]);
    let got = recv_n(&consumer, count, RECV_TIMEOUT).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.offset(), i64::try_from(i).expect("small"), "acks={acks}");
        assert_eq!(m.payload(), Some(values[i].as_bytes()), "acks={acks} #{i}");
    }
    assert_no_message(&consumer, Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_for_times_finds_the_first_record_at_or_after_the_timestamp() {
    let broker = Broker::start();
    let topic = unique_topic("by-time");
    let t0 = now_ms() - 3_600_000;
    let producer = producer(&broker, &[("linger.ms", "100")]);
    // Enqueued together so that (most likely) they share one batch: the lookup must then find the
    // record inside the batch, not just the batch.
    let mut futures = Vec::new();
    for i in 0..10i64 {
        let value = format!("t{i}");
        let record: FutureRecord<'_, str, str> = FutureRecord::to(&topic)
            .partition(0)
            .payload(value.as_str())
            .timestamp(t0 + i * 1000);
        futures.push(producer.send_result(record).expect("enqueue"));
    }
    for f in futures {
        tokio::time::timeout(SEND_TIMEOUT, f)
            .await
            .expect("delivery timed out")
            .expect("not cancelled")
            .expect("delivered");
    }
    let consumer = consumer(&broker, &[]);
    let cases = [
        (t0 - 10_000, Offset::Offset(0)),
        (t0, Offset::Offset(0)),
        (t0 + 3000, Offset::Offset(3)),
        (t0 + 3500, Offset::Offset(4)),
        (t0 + 9000, Offset::Offset(9)),
        (t0 + 9001, Offset::End),
    ];
    for (ts, want) in cases {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(ts))
            .expect("add partition");
        let result = consumer
            .offsets_for_times(tpl, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("offsets_for_times({ts}) failed: {e:?}"));
        let elem = result
            .find_partition(&topic, 0)
            .expect("partition in the result");
        assert!(
            elem.error().is_ok(),
            "offsets_for_times(t0{:+}) error: {:?}",
            ts - t0,
            elem.error()
        );
        assert_eq!(elem.offset(), want, "offsets_for_times(t0{:+})", ts - t0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_from_the_middle_of_a_batch_starts_at_that_offset() {
    let broker = Broker::start();
    let topic = unique_topic("mid-batch");
    ensure_topics(broker.addr(), &[&topic]).await;
    let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let records: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            record(
                Some(format!("k{i}").as_bytes()),
                Some(v.as_bytes()),
                1_700_000_000_000 + i64::try_from(i).expect("small"),
            )
        })
        .collect();
    let mut conn = RawConn::connect(broker.addr()).await;
    let produced = produce_batch(&mut conn, &topic, 0, encode_batch(&records)).await;
    assert_eq!(produced.error_code, 0);
    assert_eq!(produced.base_offset, 0);

    // Raw view: the whole containing batch comes back, and it contains offsets 5..=9.
    let response = conn.request(12, &fetch_request(&topic, 0, 5, 0, 1)).await;
    let partition = only_partition(&response);
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 10);
    let fetched = decode_records(&partition.records);
    assert!(
        fetched.first().is_some_and(|r| r.offset <= 5),
        "first fetched record must belong to the batch containing offset 5: {:?}",
        fetched.first().map(|r| r.offset)
    );
    let from_five: Vec<i64> = fetched
        .iter()
        .map(|r| r.offset)
        .filter(|o| *o >= 5)
        .collect();
    assert_eq!(from_five, vec![5, 6, 7, 8, 9]);

    // Client view: the consumer delivers exactly 5..=9.
    let consumer = consumer(&broker, &[]);
    assign(&consumer, &topic, &[(0, Offset::Offset(5))]);
    let got = recv_n(&consumer, 5, RECV_TIMEOUT).await;
    for (m, i) in got.iter().zip(5usize..) {
        assert_eq!(m.offset(), i64::try_from(i).expect("small"));
        assert_eq!(m.payload(), Some(values[i].as_bytes()));
    }
    assert_no_message(&consumer, Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_beyond_the_log_end_is_offset_out_of_range() {
    let broker = Broker::start();
    let topic = unique_topic("out-of-range");
    let producer = producer(&broker, &[]);
    for i in 0..3 {
        let value = format!("r{i}");
        let record: FutureRecord<'_, str, str> = FutureRecord::to(&topic)
            .partition(0)
            .payload(value.as_str());
        producer
            .send(record, SEND_TIMEOUT)
            .await
            .unwrap_or_else(|(e, _)| panic!("send: {e:?}"));
    }

    // Raw: error 1 for an offset past the high watermark.
    let mut conn = RawConn::connect(broker.addr()).await;
    let response = conn.request(12, &fetch_request(&topic, 0, 100, 0, 1)).await;
    let partition = only_partition(&response);
    assert_eq!(
        partition.error_code, 1,
        "fetch at offset 100 of a 3-record log: expected OFFSET_OUT_OF_RANGE"
    );

    // auto.offset.reset=error: the consumer reports the out-of-range condition.
    let strict = consumer(&broker, &[("auto.offset.reset", "error")]);
    assign(&strict, &topic, &[(0, Offset::Offset(100))]);
    match tokio::time::timeout(RECV_TIMEOUT, strict.recv()).await {
        Err(_) => panic!("auto.offset.reset=error: no error reported within {RECV_TIMEOUT:?}"),
        Ok(Ok(m)) => panic!(
            "auto.offset.reset=error: got a message at offset {} instead of an error",
            m.offset()
        ),
        Ok(Err(e)) => assert!(
            matches!(
                e,
                KafkaError::MessageConsumption(
                    RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange
                )
            ),
            "auto.offset.reset=error: unexpected error {e:?}"
        ),
    }

    // auto.offset.reset=earliest: the consumer resets to offset 0 and reads everything.
    let lenient = consumer(&broker, &[("auto.offset.reset", "earliest")]);
    assign(&lenient, &topic, &[(0, Offset::Offset(100))]);
    let got = recv_n(&lenient, 3, RECV_TIMEOUT).await;
    let offsets: Vec<i64> = got.iter().map(|m| m.offset()).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_batches_are_the_produced_bytes() {
    let broker = Broker::start();
    let topic = unique_topic("passthrough");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;
    let mut sent = Vec::new();
    for b in 0..3 {
        let records: Vec<_> = (0..4)
            .map(|i| {
                let mut r = record(
                    Some(format!("b{b}k{i}").as_bytes()),
                    Some(format!("b{b}v{i}").as_bytes()),
                    1_700_000_000_000 + i,
                );
                r.headers.insert(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"x")),
                );
                r
            })
            .collect();
        let batch = encode_batch(&records);
        let produced = produce_batch(&mut conn, &topic, 0, batch.clone()).await;
        assert_eq!(produced.error_code, 0);
        assert_eq!(produced.base_offset, b * 4);
        sent.push(batch);
    }
    let response = conn.request(12, &fetch_request(&topic, 0, 0, 0, 1)).await;
    let partition = only_partition(&response);
    let fetched = partition.records.clone().expect("records");
    let mut at = 0usize;
    for (b, batch) in sent.iter().enumerate() {
        let end = at + batch.len();
        assert!(fetched.len() >= end, "fetched bytes end inside batch {b}");
        let got = &fetched[at..end];
        let base = i64::from_be_bytes(got[0..8].try_into().expect("8 bytes"));
        assert_eq!(
            base,
            i64::try_from(b * 4).expect("small"),
            "base offset of batch {b}"
        );
        // Everything except baseOffset (0..8) and partitionLeaderEpoch (12..16) is as produced.
        assert_eq!(&got[8..12], &batch[8..12], "batchLength of batch {b}");
        assert_eq!(&got[16..], &batch[16..], "bytes 16.. of batch {b}");
        at = end;
    }
    assert_eq!(at, fetched.len(), "no extra bytes after the 3 batches");
}
