//! Goal: appends, reads, group commit, retention and compaction running at the same time on the
//! same partitions keep every invariant: offsets contiguous and unique, readers only ever see
//! whole valid batches below the high watermark, and every acknowledged append is durable once
//! `wait_durable` says so.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use millrace_store::testing::encode_batch;
use millrace_store::{CleanupPolicy, FlushPolicy, LogConfig, ReadUpperBound};

#[test]
fn appends_reads_and_maintenance_in_parallel() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Batch);
    let plain = store
        .create_partition(
            &tp("par", 0),
            LogConfig {
                segment_bytes: 4096,
                retention_bytes: 64 * 1024,
                ..LogConfig::default()
            },
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let compact = store
        .create_partition(
            &tp("par", 1),
            LogConfig {
                segment_bytes: 4096,
                cleanup_policy: CleanupPolicy {
                    delete: false,
                    compact: true,
                },
                min_cleanable_dirty_ratio: 0.2,
                ..LogConfig::default()
            },
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..3 {
            let (plain, compact) = (plain.clone(), compact.clone());
            writers.push(s.spawn(move || {
                let mut acked = Vec::new();
                for i in 0..300 {
                    let info = plain.append(batch(1 + i % 3, i as i64), 0).expect("append");
                    acked.push((info.base_offset, info.last_offset));
                    let key = format!("key-{}", (w * 7 + i) % 20).into_bytes();
                    let value = format!("v-{w}-{i}").into_bytes();
                    compact
                        .append(
                            encode_batch(&[(Some(&key), Some(&value), i as i64)], -1, -1, -1),
                            0,
                        )
                        .expect("append");
                }
                acked
            }));
        }
        for log in [plain.clone(), compact.clone()] {
            let stop = stop.clone();
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut offset = log.log_start_offset();
                    loop {
                        let r = match log.read(offset, 8192, ReadUpperBound::HighWatermark, true) {
                            Ok(r) => r,
                            // Retention moved the log start past us: start again.
                            Err(millrace_store::ReadError::OffsetOutOfRange { .. }) => break,
                            Err(e) => panic!("read failed: {e}"),
                        };
                        if r.records.is_empty() {
                            break;
                        }
                        let mut pos = 0;
                        while pos < r.records.len() {
                            let h = millrace_store::batch::validate_stored(&r.records[pos..])
                                .expect("whole valid batch");
                            assert!(
                                h.base_offset < r.high_watermark,
                                "served past the high watermark"
                            );
                            pos += h.total_size();
                            offset = h.last_offset() + 1;
                        }
                    }
                }
            });
        }
        {
            let stop = stop.clone();
            let store = store.clone();
            s.spawn(move || {
                let mut now = 1_700_000_000_000;
                while !stop.load(Ordering::SeqCst) {
                    store.run_maintenance(now).expect("maintenance");
                    now += 1000;
                }
            });
        }
        let mut all = Vec::new();
        for w in writers {
            all.extend(w.join().expect("writer"));
        }
        let end = plain.log_end_offset();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), plain.wait_durable(end))
                .await
                .expect("durable in time")
                .expect("durable");
        });
        stop.store(true, Ordering::SeqCst);
        all.sort();
        assert_contiguous(&all, 0);
        assert_eq!(all.last().map(|b| b.1 + 1), Some(end));
    });
    assert_eq!(plain.high_watermark(), plain.log_end_offset());
    assert_eq!(compact.log_end_offset(), 900);
    assert_contiguous(&read_all(&store, &tp("par", 0)), plain.log_start_offset());
    assert_contiguous(&read_all(&store, &tp("par", 1)), compact.log_start_offset());
    // The maintenance thread may not have had a tick after the writers filled enough segments
    // (it races them); one more tick makes the retention check deterministic.
    store
        .run_maintenance(1_800_000_000_000)
        .expect("maintenance");
    assert!(plain.log_start_offset() > 0, "retention ran");
    let kept = read_records(&store, &tp("par", 1)).len();
    assert!(kept < 900, "compaction ran ({kept} of 900 records left)");
    store.shutdown().expect("shutdown");
}
