//! Goal: one store holds 10,000 partitions with a bounded number of open files: create, append
//! one batch to each, reopen after an unclean stop, read every batch back — while the process's
//! open file descriptors (entries of /proc/self/fd) stay within `max_open_files` plus a margin.

mod common;

use std::time::Instant;

use common::*;
use millrace_store::{FlushPolicy, LogConfig, ReadUpperBound, Store, StoreConfig};

const PARTITIONS: i32 = 10_000;
const MAX_OPEN_FILES: usize = 128;
/// Descriptors the store may use beyond its file cache: directory fsyncs and checkpoint files in
/// flight (flusher threads), the flusher's own handles, and test-harness noise.
const MARGIN: usize = 32;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn ten_thousand_partitions_with_bounded_open_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let baseline = open_fds();
    let limit = baseline + MAX_OPEN_FILES + MARGIN;
    let mut peak = baseline;
    let sample = |peak: &mut usize| {
        let n = open_fds();
        *peak = (*peak).max(n);
        assert!(n <= limit, "{n} open descriptors, limit {limit}");
    };
    let config = StoreConfig {
        max_open_files: MAX_OPEN_FILES,
        ..store_config(dir.path(), FlushPolicy::Batch)
    };
    let started = Instant::now();
    {
        let store = Store::open(config.clone()).expect("open");
        for p in 0..PARTITIONS {
            let t = tp(&format!("scale.topic-{}", p % 7), p);
            let log = store
                .create_partition(
                    &t,
                    LogConfig::default(),
                    millrace_store::TopicId::from_bytes([7; 16]),
                )
                .expect("create");
            log.append(batch(1 + (p as usize % 3), p as i64), 0)
                .expect("append");
            if p % 500 == 0 {
                sample(&mut peak);
            }
        }
        assert_eq!(store.partitions().len(), PARTITIONS as usize);
        sample(&mut peak);
        // Unclean stop: no shutdown, no marker.
    }
    let created = started.elapsed();
    let store = Store::open(config).expect("reopen");
    let reopened = started.elapsed() - created;
    sample(&mut peak);
    assert_eq!(store.partitions().len(), PARTITIONS as usize);
    for p in 0..PARTITIONS {
        let t = tp(&format!("scale.topic-{}", p % 7), p);
        let log = store.partition(&t).expect("partition");
        let n = 1 + (p as i64 % 3);
        assert_eq!(log.log_end_offset(), n, "{t}");
        let r = log
            .read(0, 1 << 20, ReadUpperBound::LogEnd, true)
            .expect("read");
        let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
        assert_eq!(
            (h.base_offset, h.last_offset(), h.max_timestamp),
            (0, n - 1, p as i64)
        );
        if p % 500 == 0 {
            sample(&mut peak);
        }
    }
    sample(&mut peak);
    eprintln!(
        "10k partitions: create+append {created:?}, unclean reopen {reopened:?}, fd baseline {baseline}, peak {peak}, limit {limit}"
    );
}
