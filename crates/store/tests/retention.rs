//! Goal: retention by time and size deletes only whole sealed segments, advances and persists the
//! log start offset, and never touches the active segment or segments with recent timestamps.

mod common;

use common::*;
use millrace_store::testing::encode_batch;
use millrace_store::{CleanupPolicy, FlushPolicy, LogConfig, ReadError, ReadUpperBound};

const NOW: i64 = 1_700_000_000_000;

fn keyed(ts: i64) -> bytes::BytesMut {
    let v = [b'x'; 200];
    encode_batch(
        &[(Some(b"k"), Some(&v), ts), (Some(b"j"), Some(&v), ts)],
        -1,
        -1,
        -1,
    )
}

#[test]
fn retention_by_time_uses_largest_timestamp() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("ret-time", 0);
    let config = LogConfig {
        segment_bytes: 1000,
        retention_ms: 60_000,
        ..LogConfig::default()
    };
    let log = store
        .create_partition(&t, config, millrace_store::TopicId::from_bytes([7; 16]))
        .expect("create");
    // 20 old batches (2 hours ago), then 10 recent ones.
    for i in 0..20 {
        log.append(keyed(NOW - 7_200_000 + i), 0).expect("append");
    }
    let first_recent = log.log_end_offset();
    for i in 0..10 {
        log.append(keyed(NOW - 1_000 + i), 0).expect("append");
    }
    let before = read_all(&store, &t);
    let report = store.run_maintenance(NOW).expect("maintenance");
    assert!(report.segments_deleted > 0);
    let lso = log.log_start_offset();
    assert!(
        lso > 0 && lso <= first_recent,
        "log start {lso}, first recent {first_recent}"
    );
    // Every record at or after the first recent one survives; nothing below log start is served.
    let after = read_all(&store, &t);
    assert_contiguous(&after, lso);
    assert!(after
        .iter()
        .any(|b| b.0 <= first_recent && first_recent <= b.1));
    assert_eq!(after.last(), before.last());
    assert!(matches!(
        log.read(lso - 1, 100, ReadUpperBound::LogEnd, true),
        Err(ReadError::OffsetOutOfRange { .. })
    ));
    // A segment whose largest timestamp is recent is kept even if its first batch is old.
    let report = store.run_maintenance(NOW).expect("maintenance");
    assert_eq!(report.segments_deleted, 0);
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&t).expect("partition");
    assert_eq!(log.log_start_offset(), lso, "log start offset persisted");
}

#[test]
fn retention_by_size_keeps_active_segment() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("ret-size", 0);
    let config = LogConfig {
        segment_bytes: 1000,
        retention_bytes: 2500,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let log = store
        .create_partition(&t, config, millrace_store::TopicId::from_bytes([7; 16]))
        .expect("create");
    for i in 0..40 {
        log.append(keyed(NOW + i), 0).expect("append");
    }
    let size_before = log.size_bytes();
    store.run_maintenance(NOW).expect("maintenance");
    let size_after = log.size_bytes();
    assert!(size_before > 2500);
    assert!(size_after <= 2500 + 1000, "size {size_after}");
    assert!(size_after >= 2500 - 1000, "deleted too much: {size_after}");
    assert_eq!(log.log_end_offset(), 80);
    assert_contiguous(&read_all(&store, &t), log.log_start_offset());
    // retention.bytes 0: everything sealed goes, the active segment stays.
    log.update_config(LogConfig {
        retention_bytes: 0,
        retention_ms: -1,
        segment_bytes: 1000,
        ..LogConfig::default()
    });
    store.run_maintenance(NOW).expect("maintenance");
    assert_eq!(log.log_end_offset(), 80);
    assert!(!read_all(&store, &t).is_empty());
}

#[test]
fn compact_only_topics_are_not_deleted_by_retention() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("ret-compact", 0);
    let config = LogConfig {
        segment_bytes: 1000,
        retention_ms: 1,
        cleanup_policy: CleanupPolicy {
            delete: false,
            compact: true,
        },
        ..LogConfig::default()
    };
    let log = store
        .create_partition(&t, config, millrace_store::TopicId::from_bytes([7; 16]))
        .expect("create");
    for i in 0..20 {
        log.append(keyed(NOW - 7_200_000 + i), 0).expect("append");
    }
    store.run_maintenance(NOW).expect("maintenance");
    assert_eq!(log.log_start_offset(), 0);
}

/// A tiered log (`remote.storage.enable`) keeps its local segments until the object store holds
/// them (`remote_copied_end`), then deletes them by `local.retention.bytes`, not `retention.bytes`.
#[test]
fn a_tiered_log_deletes_only_what_the_object_store_holds_by_local_retention() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("ret-tiered", 0);
    let config = LogConfig {
        segment_bytes: 1000,
        retention_bytes: -1,
        retention_ms: -1,
        remote_storage_enable: true,
        local_retention_bytes: 2500,
        ..LogConfig::default()
    };
    let log = store
        .create_partition(&t, config, millrace_store::TopicId::from_bytes([7; 16]))
        .expect("create");
    for i in 0..40 {
        log.append(keyed(NOW + i), 0).expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let size_before = log.size_bytes();
    assert!(size_before > 2500);
    // Nothing copied yet: nothing goes, whatever local retention says.
    store.run_maintenance(NOW).expect("maintenance");
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.size_bytes(), size_before);
    // Copied up to offset 20: only segments entirely below 20 go.
    log.set_remote_copied_end(20);
    store.run_maintenance(NOW).expect("maintenance");
    let start = log.log_start_offset();
    assert!(start > 0 && start <= 20, "log start {start}");
    // Everything copied: local retention bounds the tail.
    log.set_remote_copied_end(log.log_end_offset());
    store.run_maintenance(NOW).expect("maintenance");
    assert!(
        log.size_bytes() <= 2500 + 1000,
        "local tail {}",
        log.size_bytes()
    );
    assert_contiguous(&read_all(&store, &t), log.log_start_offset());
    // The upload plan sees the sealed segments from an offset on.
    let sealed = log.sealed_segments_from(log.log_start_offset(), log.log_end_offset(), 100);
    assert!(!sealed.is_empty());
    assert!(sealed
        .windows(2)
        .all(|w| w[0].next_base_offset == w[1].base_offset));
}
