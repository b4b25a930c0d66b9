//! Grouped commit: a flush round of many dirty partitions is one `syncfs` instead of one
//! `fdatasync` per file. Under the power-loss model, cut at operations spread over the whole
//! workload, every partition keeps everything below the durable offset it had published — the
//! offset a `batch` Produce is acknowledged at.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use millrace_store::storage::CrashStorage;
use millrace_store::{FlushPolicy, LogConfig, PartitionLog, Store, StoreConfig, TopicPartition};

/// More than the store's grouped-round threshold (32).
const PARTITIONS: i32 = 40;
const ROUNDS: usize = 3;
/// Crash points tried, spread evenly over a crash-free run's operations.
const CRASH_POINTS: u64 = 40;

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        // Rounds at most every 30 ms, so a round finds all partitions dirty.
        flush_interval: Duration::from_millis(30),
        ..store_config(dir, FlushPolicy::Batch)
    }
}

/// Creates the partitions and appends `ROUNDS` batches to each, waiting for each round to become
/// durable; stops at the first error (the crash).
fn workload(store: &Store) -> Vec<Arc<PartitionLog>> {
    let mut logs = Vec::new();
    let _ = (|| -> Result<(), Box<dyn std::error::Error>> {
        for p in 0..PARTITIONS {
            logs.push(store.create_partition(
                &tp("g", p),
                LogConfig::default(),
                millrace_store::TopicId::from_bytes([9; 16]),
            )?);
        }
        for round in 0..ROUNDS {
            for log in &logs {
                log.append(batch(2, 1_000 + round as i64), 0)?;
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while logs.iter().any(|l| l.durable_offset() < l.log_end_offset())
                && store.offline_reason().is_none()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            if store.offline_reason().is_some() {
                return Ok(());
            }
        }
        Ok(())
    })();
    logs
}

/// (partition, durable offset published before the cut).
fn durable_offsets(logs: &[Arc<PartitionLog>]) -> Vec<(TopicPartition, i64)> {
    logs.iter()
        .map(|l| (l.topic_partition().clone(), l.durable_offset()))
        .collect()
}

fn check(dir: &Path, durable: &[(TopicPartition, i64)], what: &str) {
    let store = Store::open(config(dir)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    for (tp, offset) in durable {
        if *offset <= 0 {
            continue;
        }
        let Some(log) = store.partition(tp) else {
            panic!("{what}: {tp} had durable offset {offset} and is gone");
        };
        let batches = read_all(&store, tp);
        assert_contiguous(&batches, 0);
        let end = batches.last().map_or(0, |b| b.1 + 1);
        assert!(
            end >= *offset,
            "{what}: {tp} had durable offset {offset}, only {end} survived (log end {})",
            log.log_end_offset()
        );
    }
}

#[test]
fn a_grouped_round_loses_nothing_it_published_as_durable_at_a_power_cut() {
    // A crash-free run: count its operations and see that its rounds were grouped.
    let dir = tempfile::tempdir().expect("tmp");
    let counter = Arc::new(CrashStorage::new(u64::MAX));
    let grouped_before = millrace_metrics::global().log_flush_grouped.get();
    let store = Store::open_with_storage(config(dir.path()), counter.clone()).expect("open");
    let logs = workload(&store);
    let durable = durable_offsets(&logs);
    drop(logs);
    drop(store);
    let total = counter.ops();
    assert_eq!(durable.len(), PARTITIONS as usize);
    assert!(
        durable.iter().all(|(_, d)| *d == 2 * ROUNDS as i64),
        "crash-free run: {durable:?}"
    );
    let grouped = millrace_metrics::global().log_flush_grouped.get() - grouped_before;
    assert!(grouped >= 1, "no flush round was grouped");
    check(dir.path(), &durable, "no crash");

    at_power_cuts(
        total,
        CRASH_POINTS,
        config,
        |store| durable_offsets(&workload(store)),
        |dir, durable, what| check(dir, durable, what),
    );
}
