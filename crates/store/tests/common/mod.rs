//! Shared helpers for the store's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use millrace_store::testing::encode_batch;
use millrace_store::{FlushPolicy, LogConfig, ReadUpperBound, Store, StoreConfig, TopicPartition};

pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

pub fn store_config(dir: &Path, policy: FlushPolicy) -> StoreConfig {
    StoreConfig {
        data_dir: dir.to_path_buf(),
        flush_policy: policy,
        flush_interval: Duration::from_millis(1),
        max_open_files: 64,
        high_watermark_follows_durable: true,
    }
}

pub fn open(dir: &Path, policy: FlushPolicy) -> Arc<Store> {
    Store::open(store_config(dir, policy)).expect("open store")
}

pub fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

/// A batch of `n` records with values `v{i}` and keys `k{i % keys}`.
pub fn batch(n: usize, ts: i64) -> BytesMut {
    let vals: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("value-{i}-{ts}").into_bytes())
        .collect();
    let recs: Vec<millrace_store::testing::TestRecord<'_>> = vals
        .iter()
        .map(|v| (Some(&b"key"[..]), Some(&v[..]), ts))
        .collect();
    encode_batch(&recs, -1, -1, -1)
}

/// Reads the whole log (LogEnd bound) and returns (base offset, last offset) of every batch.
pub fn read_all(store: &Store, tp: &TopicPartition) -> Vec<(i64, i64)> {
    let log = store.partition(tp).expect("partition");
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    loop {
        let r = log
            .read(offset, 1 << 20, ReadUpperBound::LogEnd, true)
            .expect("read");
        if r.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < r.records.len() {
            let h = millrace_store::batch::validate_stored(&r.records[pos..]).expect("valid batch");
            out.push((h.base_offset, h.last_offset()));
            pos += h.total_size();
            offset = h.last_offset() + 1;
        }
    }
    out
}

/// Asserts batches form one contiguous range starting at `start`.
pub fn assert_contiguous(batches: &[(i64, i64)], start: i64) {
    let mut next = start;
    for (base, last) in batches {
        assert_eq!(*base, next, "gap or overlap in {batches:?}");
        next = last + 1;
    }
}
