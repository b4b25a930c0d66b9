//! Goal: a crash at ANY file operation (write, fsync, rename, remove, truncate, create) during
//! appends, rolls, checkpoints, retention, DeleteRecords, compaction and shutdown leaves a log that
//! real recovery turns into one contiguous offset range holding every acknowledged write (that
//! retention did not legitimately remove) and, for the compacted partition, the latest
//! acknowledged value of every key.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use millrace_store::storage::CrashStorage;
use millrace_store::testing::encode_batch;
use millrace_store::{CleanupPolicy, FlushPolicy, LogConfig, Store, TopicPartition};

const HOUR: i64 = 3_600_000;

struct Acked {
    /// (base, last) of acknowledged appends to the delete-policy partition.
    plain: Vec<(i64, i64)>,
    /// key → (offset, value) of acknowledged writes to the compacted partition.
    latest: BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>,
}

fn plain_tp() -> TopicPartition {
    tp("crash-plain", 0)
}
fn compact_tp() -> TopicPartition {
    tp("crash-compact", 1)
}

/// Runs the workload until the first error (the "crash"). Returns what was acknowledged.
fn workload(store: &Store, now: i64) -> Acked {
    let mut acked = Acked {
        plain: Vec::new(),
        latest: BTreeMap::new(),
    };
    let _ = (|| -> Result<(), Box<dyn std::error::Error>> {
        let plain = store.create_partition(
            &plain_tp(),
            LogConfig {
                segment_bytes: 600,
                retention_bytes: 1500,
                index_interval_bytes: 100,
                ..LogConfig::default()
            },
            millrace_store::TopicId::from_bytes([7; 16]),
        )?;
        let compact = store.create_partition(
            &compact_tp(),
            LogConfig {
                segment_bytes: 600,
                index_interval_bytes: 100,
                cleanup_policy: CleanupPolicy {
                    delete: false,
                    compact: true,
                },
                min_cleanable_dirty_ratio: 0.01,
                delete_retention_ms: HOUR,
                ..LogConfig::default()
            },
            millrace_store::TopicId::from_bytes([7; 16]),
        )?;
        for round in 0..4 {
            for i in 0..6 {
                let info = plain.append(batch(1 + i % 2, now), 0)?;
                acked.plain.push((info.base_offset, info.last_offset));
                let key = format!("k{}", i % 3).into_bytes();
                let value = format!("v{round}-{i}").into_bytes();
                let tomb = round == 2 && i == 5;
                let rec = [(
                    Some(&key[..]),
                    if tomb { None } else { Some(&value[..]) },
                    now,
                )];
                let info = compact.append(encode_batch(&rec, -1, -1, -1), 0)?;
                acked.latest.insert(
                    key,
                    (info.base_offset, if tomb { None } else { Some(value) }),
                );
            }
            store.run_maintenance(now + round * HOUR)?;
            if round == 1 {
                plain.delete_records_before(plain.log_start_offset() + 1)?;
            }
        }
        store.shutdown()?;
        Ok(())
    })();
    acked
}

fn check(dir: &std::path::Path, acked: &Acked, n: u64) {
    let store = Store::open(store_config(dir, FlushPolicy::Batch))
        .unwrap_or_else(|e| panic!("crash at op {n}: reopen failed: {e}"));
    check_compact(&store, acked, n);
    let Some(log) = store.partition(&plain_tp()) else {
        return;
    };
    let lso = log.log_start_offset();
    let batches = read_all(&store, &plain_tp());
    assert_contiguous(&batches, lso);
    let end = log.log_end_offset();
    assert_eq!(
        end,
        batches.last().map_or(lso, |b| b.1 + 1),
        "crash at op {n}"
    );
    for b in acked.plain.iter().filter(|b| b.0 >= lso) {
        assert!(
            batches.contains(b),
            "crash at op {n}: acknowledged batch {b:?} lost (log start {lso})"
        );
    }
    // A valid append still works, lands at the log end, reads back, and survives another unclean
    // restart (so recovery really cut any torn tail).
    let info = log.append(batch(1, 0), 0).expect("append after crash");
    assert_eq!(info.base_offset, end, "crash at op {n}");
    let r = log
        .read(end, 1 << 20, millrace_store::ReadUpperBound::LogEnd, true)
        .unwrap_or_else(|e| panic!("crash at op {n}: read back failed: {e}"));
    let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
    assert_eq!(h.base_offset, end, "crash at op {n}");
    drop(log);
    drop(store);
    let store = Store::open(store_config(dir, FlushPolicy::Batch)).expect("second reopen");
    let batches = read_all(&store, &plain_tp());
    assert_eq!(
        batches.last().map(|b| b.0),
        Some(end),
        "crash at op {n}: post-crash append lost"
    );
    check_compact(&store, acked, n);
}

fn check_compact(store: &Store, acked: &Acked, n: u64) {
    let Some(log) = store.partition(&compact_tp()) else {
        return;
    };
    let lso = log.log_start_offset();
    assert_contiguous(&read_all(store, &compact_tp()), lso);
    let mut seen = BTreeMap::new();
    for r in read_records(store, &compact_tp()) {
        seen.insert(
            r.key.as_ref().expect("key").to_vec(),
            (r.offset, r.value.as_ref().map(|v| v.to_vec())),
        );
    }
    for (k, want) in acked.latest.iter().filter(|(_, w)| w.0 >= lso) {
        assert_eq!(
            seen.get(k),
            Some(want),
            "crash at op {n}: latest value of {:?}",
            String::from_utf8_lossy(k)
        );
    }
}

#[test]
fn crash_at_every_operation() {
    let now = 1_700_000_000_000;
    // Count the operations of a crash-free run.
    let dir = tempfile::tempdir().expect("tmp");
    let counter = Arc::new(CrashStorage::new(u64::MAX));
    let store = Store::open_with_storage(
        store_config(dir.path(), FlushPolicy::Batch),
        counter.clone(),
    )
    .expect("open");
    let acked = workload(&store, now);
    drop(store);
    let total = counter.ops();
    assert!(total > 100, "workload too small: {total} ops");
    assert!(acked.plain.len() == 24, "crash-free run must finish");
    check(dir.path(), &acked, 0);
    {
        // The crash-free run really exercised retention, DeleteRecords and compaction.
        let store = Store::open(store_config(dir.path(), FlushPolicy::Batch)).expect("open");
        let plain = store.partition(&plain_tp()).expect("plain");
        assert!(plain.log_start_offset() > 0, "retention ran");
        let compacted = read_records(&store, &compact_tp()).len();
        assert!(
            compacted < 24,
            "compaction removed records ({compacted} of 24 left)"
        );
        eprintln!("crash-free run: {total} file operations, compacted log keeps {compacted} of 24 records");
    }

    let mut crashed_runs = 0;
    for n in 1..=total + 5 {
        let dir = tempfile::tempdir().expect("tmp");
        let storage = Arc::new(CrashStorage::new(n));
        let acked = match Store::open_with_storage(
            store_config(dir.path(), FlushPolicy::Batch),
            storage.clone(),
        ) {
            Ok(store) => {
                let acked = workload(&store, now);
                drop(store);
                acked
            }
            Err(_) => Acked {
                plain: Vec::new(),
                latest: BTreeMap::new(),
            },
        };
        if storage.crashed() {
            crashed_runs += 1;
        }
        check(dir.path(), &acked, n);
    }
    // The flusher thread runs concurrently, so a run's operation count varies a little.
    assert!(
        crashed_runs as u64 >= total * 9 / 10,
        "most runs must actually crash ({crashed_runs} of {total})"
    );
}
