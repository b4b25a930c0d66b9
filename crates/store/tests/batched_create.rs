//! Batched partition creation (`Store::create_partitions`): a large batch is made durable by one
//! `syncfs` instead of several syncs per partition. Under the power-loss model, cut at operations
//! spread over the whole workload, every partition the batch reported created is there after the
//! cut, with its topic id, and keeps what it published as durable after that.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use millrace_store::storage::CrashStorage;
use millrace_store::{FlushPolicy, LogConfig, PartitionLog, Store, StoreConfig, TopicId};

/// More than the store's batch threshold (32).
const PARTITIONS: i32 = 40;
/// Crash points tried, spread evenly over a crash-free run's operations.
const CRASH_POINTS: u64 = 40;
const TOPIC_ID: [u8; 16] = [7; 16];

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        flush_interval: Duration::from_millis(30),
        ..store_config(dir, FlushPolicy::Batch)
    }
}

fn batch_of(n: i32) -> Vec<(millrace_store::TopicPartition, LogConfig, TopicId)> {
    (0..n)
        .map(|p| {
            (
                tp("c", p),
                LogConfig::default(),
                TopicId::from_bytes(TOPIC_ID),
            )
        })
        .collect()
}

/// Creates the partitions in one batch, then appends one batch of records to each and waits
/// until it is durable; stops at the first error (the crash). Returns the logs created.
fn workload(store: &Store) -> Vec<Arc<PartitionLog>> {
    let logs: Vec<Arc<PartitionLog>> = store
        .create_partitions(batch_of(PARTITIONS))
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    for log in &logs {
        if log.append(batch(3, 1_000), 0).is_err() {
            return logs;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while logs.iter().any(|l| l.durable_offset() < l.log_end_offset())
        && store.offline_reason().is_none()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    logs
}

/// The workload's partitions, each with the durable offset it published.
fn created_by(store: &Store) -> Vec<(millrace_store::TopicPartition, i64)> {
    workload(store)
        .iter()
        .map(|l| (l.topic_partition().clone(), l.durable_offset()))
        .collect()
}

fn check(dir: &Path, created: &[(millrace_store::TopicPartition, i64)], what: &str) {
    let store = Store::open(config(dir)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    for (tp, durable) in created {
        let Some(log) = store.partition(tp) else {
            panic!("{what}: {tp} was reported created and is gone");
        };
        assert_eq!(
            log.topic_id(),
            Some(TopicId::from_bytes(TOPIC_ID)),
            "{what}: {tp} lost its topic id"
        );
        let end = read_all(&store, tp).last().map_or(0, |b| b.1 + 1);
        assert!(
            end >= *durable,
            "{what}: {tp} had durable offset {durable}, only {end} survived"
        );
    }
}

#[test]
fn a_batch_costs_fewer_storage_operations_than_one_create_each() {
    let ops = |batched: bool| {
        let dir = tempfile::tempdir().expect("tmp");
        let counter = Arc::new(CrashStorage::new(u64::MAX));
        let store = Store::open_with_storage(config(dir.path()), counter.clone()).expect("open");
        let before = counter.ops();
        if batched {
            assert!(store
                .create_partitions(batch_of(PARTITIONS))
                .iter()
                .all(Result::is_ok));
        } else {
            for (tp, config, id) in batch_of(PARTITIONS) {
                store.create_partition(&tp, config, id).expect("create");
            }
        }
        counter.ops() - before
    };
    let (batched, one_by_one) = (ops(true), ops(false));
    assert!(
        batched < one_by_one,
        "a batch of {PARTITIONS} took {batched} storage operations, one by one {one_by_one}"
    );
}

#[test]
fn a_batch_loses_no_partition_it_reported_created_at_a_power_cut() {
    let dir = tempfile::tempdir().expect("tmp");
    let counter = Arc::new(CrashStorage::new(u64::MAX));
    let store = Store::open_with_storage(config(dir.path()), counter.clone()).expect("open");
    let created = created_by(&store);
    assert_eq!(created.len(), PARTITIONS as usize, "crash-free run");
    drop(store);
    let total = counter.ops();
    check(dir.path(), &created, "no crash");

    at_power_cuts(
        total,
        CRASH_POINTS,
        config,
        created_by,
        |dir, created, what| check(dir, created, what),
    );
}
