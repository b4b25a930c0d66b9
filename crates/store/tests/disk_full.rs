//! Goal: a full disk is an error of known outcome (issue 30). On a 4 MiB tmpfs mounted by the
//! test, appends run until one fails: it fails with `DiskFull` (KAFKA_STORAGE_ERROR at the edge),
//! the data dir stays online, the partition is unchanged (log end, segment files cut back to the
//! bytes the log counts), everything appended reads back and becomes durable, maintenance runs
//! without error; a store reopened on the full disk (no clean shutdown) recovers and reads it all;
//! once space is freed appends succeed again with no restart.
//!
//! Needs root (mount). The mount is undone by a drop guard, also when the test fails.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use millrace_store::testing::Tmpfs;
use millrace_store::{AppendError, FlushPolicy, LogConfig, TopicId};

const FS_BYTES: u64 = 4 * 1024 * 1024;
const APPENDS_MAX: usize = 1000;

/// A batch of 16 records of 1 KiB.
fn big_batch(ts: i64) -> bytes::BytesMut {
    let value = vec![b'v'; 1024];
    let recs: Vec<millrace_store::testing::TestRecord<'_>> =
        (0..16).map(|_| (None, Some(&value[..]), ts)).collect();
    millrace_store::testing::encode_batch(&recs, -1, -1, -1)
}

/// Bytes of the partition's `.log` files on disk.
fn segment_bytes_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("partition dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

#[test]
fn an_append_that_finds_the_disk_full_changes_nothing_and_the_dir_stays_online() {
    let fs = Tmpfs::mount_fresh(FS_BYTES).expect("mount a tmpfs");
    let data = fs.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    // 512 KiB of ballast to free later.
    let ballast = fs.path().join("ballast");
    std::fs::File::create(&ballast)
        .and_then(|mut f| f.write_all(&vec![0u8; 512 * 1024]))
        .expect("ballast");

    let store = open(&data, FlushPolicy::Batch);
    let t = tp("full", 0);
    let config = LogConfig {
        segment_bytes: 256 * 1024,
        ..LogConfig::default()
    };
    let log = store
        .create_partition(&t, config, TopicId::from_bytes([3; 16]))
        .expect("create");
    let part_dir = data.join("full-0");

    let mut failure = None;
    for i in 0..APPENDS_MAX {
        let end = log.log_end_offset();
        match log.append(big_batch(1_700_000_000_000 + i as i64), 0) {
            Ok(_) => {}
            Err(e) => {
                failure = Some((e, end));
                break;
            }
        }
    }
    let (error, end_before) = failure.expect("the disk filled within the appends");
    assert!(
        matches!(&error, AppendError::Store(e) if e.is_no_space()),
        "{error:?}"
    );
    assert!(
        store.offline_reason().is_none(),
        "the data dir stays online"
    );
    assert_eq!(log.log_end_offset(), end_before, "nothing of it counted");
    assert_eq!(
        segment_bytes_on_disk(&part_dir),
        log.size_bytes(),
        "the segment files hold exactly the bytes the log counts (the failed write cut back)"
    );
    let batches = read_all(&store, &t);
    assert_contiguous(&batches, 0);
    assert_eq!(batches.last().map(|b| b.1 + 1), Some(end_before));
    // The appended bytes become durable (the flusher's checkpoint writes may find no space).
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.durable_offset() < end_before {
        assert!(
            Instant::now() < deadline,
            "durable offset stuck at {}",
            log.durable_offset()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Maintenance (checkpoints, rolls, retention) is not an error on a full disk.
    store
        .run_maintenance(1_700_000_000_000)
        .expect("maintenance on a full disk");
    assert!(store.offline_reason().is_none());

    // As after kill -9: no clean shutdown, reopened on the full disk.
    drop(log);
    drop(store);
    let store = open(&data, FlushPolicy::Batch);
    let batches = read_all(&store, &t);
    assert_contiguous(&batches, 0);
    assert_eq!(batches.last().map(|b| b.1 + 1), Some(end_before));
    let log = store.partition(&t).expect("partition");
    assert!(log.append(big_batch(1), 0).is_err(), "still full");

    // Space returns: appends go on, no restart.
    std::fs::remove_file(&ballast).expect("free space");
    log.append(big_batch(2), 0)
        .expect("append after space was freed");
    assert_eq!(log.log_end_offset(), end_before + 16);
    store.shutdown().expect("clean shutdown");
}
