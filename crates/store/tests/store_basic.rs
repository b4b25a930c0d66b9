//! Goal: the public store API behaves as API.md promises (append, read, offsets, idempotence,
//! durability, truncation, timestamps, restart).

mod common;

use common::*;
use millrace_store::testing::encode_batch;
use millrace_store::{
    AppendError, FlushPolicy, LogConfig, ReadError, ReadUpperBound, StoreError, TimestampType,
};

#[test]
fn append_read_offsets() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("orders.v1-x", 0);
    let log = store
        .create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    assert!(matches!(
        store.create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16])
        ),
        Err(StoreError::AlreadyExists(_))
    ));
    let a = log.append(batch(3, 1000), 5).expect("append");
    assert_eq!((a.base_offset, a.last_offset, a.duplicate), (0, 2, false));
    let b = log.append(batch(2, 2000), 5).expect("append");
    assert_eq!((b.base_offset, b.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(log.high_watermark(), 5);
    let r = log
        .read(0, 1 << 20, ReadUpperBound::HighWatermark, true)
        .expect("read");
    let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
    assert_eq!(h.base_offset, 0);
    assert_eq!(h.partition_leader_epoch, 5);
    // Offset inside the second batch returns the whole second batch.
    let r = log
        .read(4, 1 << 20, ReadUpperBound::HighWatermark, true)
        .expect("read");
    let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
    assert_eq!((h.base_offset, h.last_offset()), (3, 4));
    assert_eq!(r.records.len(), h.total_size());
    // max_bytes smaller than a batch: still one whole batch (min_one_batch), none otherwise.
    let r = log
        .read(0, 1, ReadUpperBound::HighWatermark, true)
        .expect("read");
    assert!(!r.records.is_empty());
    let r = log
        .read(0, 1, ReadUpperBound::HighWatermark, false)
        .expect("read");
    assert!(r.records.is_empty());
    assert!(log
        .read(5, 100, ReadUpperBound::HighWatermark, true)
        .expect("read")
        .records
        .is_empty());
    assert!(matches!(
        log.read(6, 100, ReadUpperBound::HighWatermark, true),
        Err(ReadError::OffsetOutOfRange { .. })
    ));
    assert_eq!(store.partitions(), vec![t.clone()]);
    for bad in [tp("a/b", 0), tp("..", 0), tp("ok", -1)] {
        assert!(
            matches!(
                store.create_partition(
                    &bad,
                    LogConfig::default(),
                    millrace_store::TopicId::from_bytes([7; 16])
                ),
                Err(StoreError::Io(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(read_all(&store, &t), vec![(0, 2), (3, 4)]);
}

#[test]
fn validation_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store
        .create_partition(
            &tp("t", 0),
            LogConfig {
                max_message_bytes: 200,
                ..LogConfig::default()
            },
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let good = batch(1, 1);
    let mut bad_crc = good.clone();
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 1;
    assert!(matches!(
        log.append(bad_crc, 0),
        Err(AppendError::CorruptMessage(_))
    ));
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    assert!(matches!(
        log.append(bad_magic, 0),
        Err(AppendError::InvalidRecord(_))
    ));
    let mut short = good.clone();
    short.truncate(30);
    assert!(matches!(
        log.append(short, 0),
        Err(AppendError::CorruptMessage(_))
    ));
    assert!(matches!(
        log.append(batch(20, 1), 0),
        Err(AppendError::MessageTooLarge { .. })
    ));
    assert!(matches!(
        log.append(bytes::BytesMut::new(), 0),
        Err(AppendError::InvalidRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 0);
    log.append(good, 0).expect("good batch");
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn idempotent_producer() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("idem", 0);
    let log = store
        .create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let rec = [(None, Some(&b"v"[..]), 1)];
    let b0 = encode_batch(&[rec[0], rec[0]], 42, 0, 0);
    let first = log.append(b0.clone(), 0).expect("append");
    assert_eq!((first.base_offset, first.last_offset), (0, 1));
    log.append(batch(1, 1), 0).expect("other producer");
    let dup = log.append(b0, 0).expect("duplicate");
    assert!(dup.duplicate);
    assert_eq!((dup.base_offset, dup.last_offset), (0, 1));
    assert_eq!(log.log_end_offset(), 3);
    assert!(matches!(
        log.append(encode_batch(&rec, 42, 0, 5), 0),
        Err(AppendError::OutOfOrderSequence(_))
    ));
    log.append(encode_batch(&rec, 42, 0, 2), 0)
        .expect("next sequence");
    assert!(matches!(
        log.append(encode_batch(&rec, 42, 1, 3), 0),
        Err(AppendError::OutOfOrderSequence(_))
    ));
    log.append(encode_batch(&rec, 42, 1, 0), 0)
        .expect("new epoch from 0");
    assert!(matches!(
        log.append(encode_batch(&rec, 42, 0, 3), 0),
        Err(AppendError::InvalidProducerEpoch(_))
    ));
    let states = log.producer_states();
    assert_eq!(states.len(), 1);
    assert_eq!((states[0].producer_epoch, states[0].last_sequence), (1, 0));
    // Survives a clean restart (snapshot) and an unclean one (rebuilt from batch headers).
    store.shutdown().expect("shutdown");
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&t).expect("partition");
    assert_eq!(log.producer_states(), states);
    assert!(
        log.append(encode_batch(&rec, 42, 1, 0), 0)
            .expect("dup")
            .duplicate
    );
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&t).expect("partition");
    assert_eq!(log.producer_states(), states);
    assert!(
        log.append(encode_batch(&rec, 42, 1, 0), 0)
            .expect("dup")
            .duplicate
    );
}

#[test]
fn log_append_time_rewrites_batch() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let log = store
        .create_partition(
            &tp("lat", 0),
            config,
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let info = log.append(batch(2, 5), 0).expect("append");
    assert!(info.log_append_time_ms > 1_600_000_000_000);
    let r = log
        .read(0, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect("read");
    let h = millrace_store::batch::validate(&r.records).expect("CRC recomputed");
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, info.log_append_time_ms);
}

#[test]
fn rolls_and_restarts() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().expect("tmp");
        let t = tp("roll", 3);
        let expected;
        {
            let store = open(dir.path(), FlushPolicy::Batch);
            let log = store
                .create_partition(
                    &t,
                    small_segments(),
                    millrace_store::TopicId::from_bytes([7; 16]),
                )
                .expect("create");
            for i in 0..100 {
                log.append(batch(1 + i % 3, 1000 + i as i64), 1)
                    .expect("append");
            }
            expected = read_all(&store, &t);
            assert_contiguous(&expected, 0);
            let segs = std::fs::read_dir(dir.path().join("roll-3"))
                .expect("ls")
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
                })
                .count();
            assert!(segs > 5, "expected several segments, got {segs}");
            if clean {
                store.shutdown().expect("shutdown");
                assert!(dir.path().join(".clean-shutdown").exists());
            }
        }
        let store = open(dir.path(), FlushPolicy::Batch);
        assert!(!dir.path().join(".clean-shutdown").exists());
        assert_eq!(read_all(&store, &t), expected, "clean={clean}");
        let log = store.partition(&t).expect("partition");
        let next = log.append(batch(1, 5000), 1).expect("append after restart");
        assert_eq!(next.base_offset, expected.last().map_or(0, |b| b.1 + 1));
        for (base, _) in &expected {
            let r = log
                .read(*base, 10, ReadUpperBound::LogEnd, true)
                .expect("read");
            let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
            assert_eq!(h.base_offset, *base);
        }
    }
}

/// A parked fetch is woken by its own partition's high watermark, not by another partition's.
#[tokio::test]
async fn a_high_watermark_wakes_only_the_fetches_of_its_partition() {
    use futures::FutureExt;

    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let id = millrace_store::TopicId::from_bytes([9; 16]);
    let a = store
        .create_partition(&tp("w", 0), LogConfig::default(), id)
        .expect("create a");
    let b = store
        .create_partition(&tp("w", 1), LogConfig::default(), id)
        .expect("create b");
    let on_a = std::sync::Arc::new(tokio::sync::Notify::new());
    let on_b = std::sync::Arc::new(tokio::sync::Notify::new());
    a.watch_high_watermark(&on_a);
    b.watch_high_watermark(&on_b);

    b.append(batch(3, 1), 0).expect("append b");
    assert_eq!(b.high_watermark(), 3, "flush policy never: visible at once");
    assert!(on_b.notified().now_or_never().is_some(), "b's fetch woken");
    assert!(
        on_a.notified().now_or_never().is_none(),
        "a's fetch must sleep through b's append"
    );

    a.append(batch(2, 1), 0).expect("append a");
    assert!(on_a.notified().now_or_never().is_some(), "a's fetch woken");

    // Deleting a partition releases its parked fetches too.
    let on_a_again = std::sync::Arc::new(tokio::sync::Notify::new());
    a.watch_high_watermark(&on_a_again);
    store.delete_partition(&tp("w", 0)).expect("delete");
    assert!(on_a_again.notified().now_or_never().is_some());
}

#[tokio::test]
async fn durability_policies() {
    for policy in [FlushPolicy::Batch, FlushPolicy::Always, FlushPolicy::Never] {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path(), policy);
        let log = store
            .create_partition(
                &tp("d", 0),
                LogConfig::default(),
                millrace_store::TopicId::from_bytes([7; 16]),
            )
            .expect("create");
        let waiter = std::sync::Arc::new(tokio::sync::Notify::new());
        log.watch_high_watermark(&waiter);
        let notified = waiter.notified();
        let info = log.append(batch(4, 1), 0).expect("append");
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            log.wait_durable(info.last_offset + 1),
        )
        .await
        .expect("durable in time")
        .expect("durable");
        tokio::time::timeout(std::time::Duration::from_secs(5), notified)
            .await
            .expect("notified");
        assert_eq!(log.durable_offset(), 4);
        assert_eq!(log.high_watermark(), 4);
    }
}

#[test]
fn timestamps_and_truncation() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("ts", 0);
    let log = store
        .create_partition(
            &t,
            small_segments(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    for i in 0..50i64 {
        let recs = [
            (Some(&b"k"[..]), Some(&b"v"[..]), 10_000 + i * 10),
            (None, Some(&b"w"[..]), 10_000 + i * 10 + 5),
        ];
        log.append(encode_batch(&recs, -1, -1, -1), 0)
            .expect("append");
    }
    assert_eq!(
        log.offset_for_timestamp(10_000).expect("ts"),
        Some((0, 10_000))
    );
    assert_eq!(
        log.offset_for_timestamp(10_201).expect("ts"),
        Some((41, 10_205))
    );
    assert_eq!(
        log.offset_for_timestamp(10_205).expect("ts"),
        Some((41, 10_205))
    );
    assert_eq!(log.offset_for_timestamp(99_999).expect("ts"), None);
    assert_eq!(log.max_timestamp().expect("max"), Some((99, 10_495)));
    log.truncate_to(61).expect("truncate");
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(log.high_watermark(), 60);
    assert_eq!(log.max_timestamp().expect("max"), Some((59, 10_295)));
    assert_eq!(log.append(batch(1, 1), 0).expect("append").base_offset, 60);
    let new_start = log.delete_records_before(30).expect("delete records");
    assert_eq!(new_start, 30);
    assert!(matches!(
        log.read(29, 100, ReadUpperBound::LogEnd, true),
        Err(ReadError::OffsetOutOfRange { .. })
    ));
    let r = log
        .read(30, 100, ReadUpperBound::LogEnd, true)
        .expect("read");
    assert!(!r.records.is_empty());
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&t).expect("partition");
    assert_eq!(log.log_start_offset(), 30);
    assert_eq!(log.log_end_offset(), 61);
}

#[test]
fn delete_partition_is_gone_after_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("gone", 0);
    let log = store
        .create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    log.append(batch(1, 1), 0).expect("append");
    store.delete_partition(&t).expect("delete");
    assert!(store.partition(&t).is_none());
    assert!(matches!(
        log.append(batch(1, 1), 0),
        Err(AppendError::Store(StoreError::UnknownPartition(_)))
    ));
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    assert!(store.partitions().is_empty());
    store
        .create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("recreate");
}
