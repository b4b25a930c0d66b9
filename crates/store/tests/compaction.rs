//! Goal: compaction keeps exactly the latest record of every key in sealed segments (with real
//! keys, timestamps, compressed input and tombstones), keeps tombstones for delete.retention.ms,
//! respects min.compaction.lag.ms, keeps offsets contiguous, and survives restarts.

mod common;

use std::collections::BTreeMap;

use common::*;
use millrace_store::testing::encode_batch;
use millrace_store::{CleanupPolicy, FlushPolicy, LogConfig, Store, TopicPartition};

const NOW: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;

fn compact_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1500,
        index_interval_bytes: 200,
        cleanup_policy: CleanupPolicy {
            delete: false,
            compact: true,
        },
        delete_retention_ms: HOUR,
        min_cleanable_dirty_ratio: 0.1,
        ..LogConfig::default()
    }
}

/// Writes `rounds` updates of `keys` keys (some batches compressed); returns key → (offset, value).
fn write_updates(
    log: &millrace_store::PartitionLog,
    keys: usize,
    rounds: usize,
    ts: i64,
    latest: &mut BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>,
) {
    for round in 0..rounds {
        let owned: Vec<(Vec<u8>, Vec<u8>)> = (0..keys)
            .map(|k| {
                (
                    format!("key-{k}").into_bytes(),
                    format!("value-{k}-{round}-{ts}").into_bytes(),
                )
            })
            .collect();
        for chunk in owned.chunks(3) {
            let recs: Vec<millrace_store::testing::TestRecord<'_>> = chunk
                .iter()
                .map(|(k, v)| (Some(&k[..]), Some(&v[..]), ts + round as i64))
                .collect();
            let mut b = encode_batch(&recs, -1, -1, -1);
            let codec = (round % 5) as u8;
            if codec > 0 {
                b = compress_batch(&b, codec);
            }
            let info = log.append(b, 0).expect("append");
            for (i, (k, v)) in chunk.iter().enumerate() {
                latest.insert(k.clone(), (info.base_offset + i as i64, Some(v.clone())));
            }
        }
    }
}

fn tombstone(
    log: &millrace_store::PartitionLog,
    key: &[u8],
    ts: i64,
    latest: &mut BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>,
) {
    let info = log
        .append(encode_batch(&[(Some(key), None, ts)], -1, -1, -1), 0)
        .expect("append");
    latest.insert(key.to_vec(), (info.base_offset, None));
}

/// Checks: every key's latest record is present with its value; in sealed segments below the
/// cleaner point no key appears twice; offsets are contiguous across batches.
fn check_compacted(
    store: &Store,
    t: &TopicPartition,
    latest: &BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>,
    active_base: i64,
) {
    let records = read_records(store, t);
    let mut seen: BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> = BTreeMap::new();
    let mut sealed_keys = std::collections::BTreeSet::new();
    let mut prev = -1;
    for r in &records {
        assert!(r.offset > prev, "offsets increase");
        prev = r.offset;
        let key = r.key.as_ref().expect("keyed").to_vec();
        if r.offset < active_base {
            assert!(
                sealed_keys.insert(key.clone()),
                "key {:?} twice in cleaned segments",
                String::from_utf8_lossy(&key)
            );
        }
        seen.insert(key, (r.offset, r.value.as_ref().map(|v| v.to_vec())));
    }
    for (k, (offset, value)) in latest {
        match (seen.get(k), value) {
            (Some((o, v)), _) => assert_eq!(
                (o, v),
                (offset, value),
                "latest of {:?}",
                String::from_utf8_lossy(k)
            ),
            (None, None) => {} // tombstone removed after its horizon
            (None, Some(_)) => panic!("latest value of {:?} lost", String::from_utf8_lossy(k)),
        }
    }
    assert_contiguous(
        &read_all(store, t),
        store.partition(t).expect("p").log_start_offset(),
    );
}

fn active_base(dir: &std::path::Path, t: &TopicPartition) -> i64 {
    std::fs::read_dir(dir.join(t.to_string()))
        .expect("ls")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse::<i64>().ok()
        })
        .max()
        .expect("segments")
}

#[test]
fn compaction_keeps_latest_per_key_and_tombstones_for_retention() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("__consumer_offsets", 7);
    let log = store
        .create_partition(
            &t,
            compact_config(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let mut latest = BTreeMap::new();
    write_updates(&log, 10, 12, NOW - HOUR, &mut latest);
    tombstone(&log, b"key-7", NOW - HOUR, &mut latest);
    write_updates(&log, 4, 3, NOW - HOUR / 2, &mut latest);
    let size_before = log.size_bytes();
    let end_before = log.log_end_offset();
    settle(&log);
    let report = store.run_maintenance(NOW).expect("maintenance");
    assert!(report.partitions_cleaned >= 1, "{report:?}");
    assert!(
        log.size_bytes() < size_before / 2,
        "{} -> {}",
        size_before,
        log.size_bytes()
    );
    assert_eq!(log.log_end_offset(), end_before);
    let ab = active_base(dir.path(), &t);
    check_compacted(&store, &t, &latest, ab);
    // The tombstone is still there (horizon = clean time + 1 h).
    let records = read_records(&store, &t);
    assert!(records
        .iter()
        .any(|r| r.key.as_deref() == Some(&b"key-7"[..]) && r.value.is_none()));

    // Restart uncleanly: recovery accepts the cleaned segments, content unchanged.
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&t).expect("partition");
    check_compacted(&store, &t, &latest, ab);

    // Two hours later, with new dirty data: the tombstone's horizon passed, it goes.
    write_updates(&log, 10, 6, NOW + 2 * HOUR, &mut latest);
    settle(&log);
    store.run_maintenance(NOW + 3 * HOUR).expect("maintenance");
    let records = read_records(&store, &t);
    assert!(
        !records
            .iter()
            .any(|r| r.key.as_deref() == Some(&b"key-7"[..]) && r.value.is_none()),
        "tombstone expired"
    );
    check_compacted(&store, &t, &latest, active_base(dir.path(), &t));
    store.shutdown().expect("shutdown");
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    check_compacted(&store, &t, &latest, active_base(dir.path(), &t));
}

#[test]
fn min_compaction_lag_protects_recent_segments() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("lagged", 0);
    let log = store
        .create_partition(
            &t,
            LogConfig {
                min_compaction_lag_ms: HOUR,
                ..compact_config()
            },
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let mut latest = BTreeMap::new();
    write_updates(&log, 5, 10, NOW - 10, &mut latest);
    let size = log.size_bytes();
    settle(&log);
    let report = store.run_maintenance(NOW).expect("maintenance");
    assert_eq!(report.partitions_cleaned, 0);
    assert_eq!(log.size_bytes(), size);
    settle(&log);
    store.run_maintenance(NOW + 2 * HOUR).expect("maintenance");
    assert!(log.size_bytes() < size);
    check_compacted(&store, &t, &latest, active_base(dir.path(), &t));
}

#[test]
fn idempotent_state_survives_compaction() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("idem-compact", 0);
    let log = store
        .create_partition(
            &t,
            compact_config(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let v = [b'v'; 100];
    for seq in 0..40 {
        let b = encode_batch(&[(Some(b"same-key"), Some(&v), NOW)], 77, 2, seq);
        log.append(b, 0).expect("append");
    }
    let before = log.producer_states();
    settle(&log);
    store.run_maintenance(NOW).expect("maintenance");
    assert!(log.size_bytes() < 40 * 100);
    assert_eq!(log.producer_states(), before);
    drop(log);
    drop(store);
    // Lose the producer snapshots: state is rebuilt from (cleaned) batch headers.
    for e in std::fs::read_dir(dir.path().join(t.to_string())).expect("ls") {
        let p = e.expect("e").path();
        if p.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(p).expect("rm");
        }
    }
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&t).expect("partition");
    let after = log.producer_states();
    assert_eq!(after[0].last_sequence, 39);
    assert_eq!(after[0].producer_epoch, 2);
    let next = encode_batch(&[(Some(b"same-key"), Some(&v), NOW)], 77, 2, 40);
    assert_eq!(log.append(next, 0).expect("next sequence").base_offset, 40);
    let dup = encode_batch(&[(Some(b"same-key"), Some(&v), NOW)], 77, 2, 40);
    assert!(log.append(dup, 0).expect("dup").duplicate);
}

#[test]
fn compacted_topics_reject_keyless_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store
        .create_partition(
            &tp("keys", 0),
            compact_config(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let keyless = encode_batch(
        &[(Some(b"k"), Some(b"v"), NOW), (None, Some(b"v"), NOW)],
        -1,
        -1,
        -1,
    );
    assert!(matches!(
        log.append(keyless.clone(), 0),
        Err(millrace_store::AppendError::InvalidRecords { ref record_errors, .. }) if record_errors.len() == 1 && record_errors[0].0 == 1
    ));
    assert!(matches!(
        log.append(compress_batch(&keyless, 4), 0),
        Err(millrace_store::AppendError::InvalidRecords { ref record_errors, .. }) if record_errors.len() == 1 && record_errors[0].0 == 1
    ));
    let keyed = encode_batch(&[(Some(b"k"), None, NOW)], -1, -1, -1);
    log.append(compress_batch(&keyed, 1), 0)
        .expect("keyed, compressed");
    assert_eq!(log.log_end_offset(), 1);
}

/// A transactional batch of producer `pid` (epoch 0, sequence `seq`): one record `key` = `value`.
fn txn_record(pid: i64, seq: i32, key: &[u8], value: &[u8]) -> bytes::BytesMut {
    let mut b = encode_batch(&[(Some(key), Some(value), NOW)], pid, 0, seq);
    let attrs = i16::from_be_bytes([b[21], b[22]]) | millrace_store::batch::ATTR_TRANSACTIONAL;
    b[21..23].copy_from_slice(&attrs.to_be_bytes());
    millrace_store::batch::rewrite_crc(&mut b);
    b
}

#[test]
fn aborted_records_supersede_nothing_and_committed_ones_compact() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("txn-compact", 0);
    let log = store
        .create_partition(
            &t,
            compact_config(),
            millrace_store::TopicId::from_bytes([9; 16]),
        )
        .expect("create");
    let commit = millrace_store::Marker {
        commit: true,
        coordinator_epoch: 0,
    };
    let abort = millrace_store::Marker {
        commit: false,
        ..commit
    };
    log.append(txn_record(1, 0, b"a", b"committed-a"), 0)
        .expect("txn 1");
    log.append_marker(1, 0, commit, 0).expect("commit 1");
    log.append(txn_record(2, 0, b"a", b"aborted-a"), 0)
        .expect("txn 2");
    log.append_marker(2, 0, abort, 0).expect("abort 2");
    log.append(txn_record(3, 0, b"b", b"committed-b"), 0)
        .expect("txn 3");
    log.append_marker(3, 0, commit, 0).expect("commit 3");
    // Later plain updates of b (superseding the committed transactional b) fill and roll
    // segments so that the transactions lie in cleanable ones.
    let v = [b'x'; 200];
    for _ in 0..30 {
        log.append(encode_batch(&[(Some(b"b"), Some(&v), NOW)], -1, -1, -1), 0)
            .expect("plain b");
    }
    settle(&log);
    store.run_maintenance(NOW).expect("maintenance");
    let values: Vec<Vec<u8>> = read_records(&store, &t)
        .into_iter()
        .filter_map(|r| r.value.map(|v| v.to_vec()))
        .collect();
    let has = |v: &[u8]| values.iter().any(|x| x == v);
    assert!(
        values.len() < 30,
        "the pass compacted: {} records left",
        values.len()
    );
    assert!(
        has(b"committed-a"),
        "an aborted record must not supersede a committed one"
    );
    assert!(has(b"aborted-a"), "aborted batches are kept whole");
    assert!(
        !has(b"committed-b"),
        "a committed transactional record is superseded like any other"
    );
    assert_eq!(log.last_stable_offset(), log.high_watermark());
    assert_eq!(
        log.aborted_transactions(0, i64::MAX)
            .iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect::<Vec<_>>(),
        vec![(2, 2)]
    );
}
