//! Goal: a clean shutdown of many partitions is bounded in time — it does not pay one
//! fsync after another, partition by partition — and leaves the clean-shutdown marker and every
//! record for the next open. (Its own binary: `scale.rs` counts the whole process's open files.)

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use millrace_store::storage::{OsStorage, PowerLossStorage, Storage};
use millrace_store::{FlushPolicy, LogConfig, Store, TopicId, TopicPartition};

/// A disk on which, once `slow` is set, every fdatasync and directory fsync takes `SLOW_SYNC`
/// longer (a loaded or networked disk); it counts how many are in flight at once. Before that
/// (while the test creates its partitions) it skips fsyncs: the test never cuts the power, and
/// the reopen reads the page cache, so they would only make the setup slow.
#[derive(Debug, Default)]
struct SlowSyncStorage {
    real: OsStorage,
    slow: AtomicBool,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
}

/// What one fsync costs on `SlowSyncStorage` beyond the real one, while it is slow.
const SLOW_SYNC: Duration = Duration::from_millis(5);

impl SlowSyncStorage {
    /// Whether to do the real fsync (after `SLOW_SYNC`).
    fn slow_sync(&self) -> bool {
        if !self.slow.load(Ordering::SeqCst) {
            return false;
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(SLOW_SYNC);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        true
    }
}

impl Storage for SlowSyncStorage {
    fn open(&self, path: &Path, create: bool) -> std::io::Result<std::fs::File> {
        self.real.open(path, create)
    }
    fn write_at(&self, file: &std::fs::File, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.real.write_at(file, buf, offset)
    }
    fn sync(&self, file: &std::fs::File) -> std::io::Result<()> {
        if self.slow_sync() {
            self.real.sync(file)?;
        }
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        if self.slow_sync() {
            self.real.sync_dir(dir)?;
        }
        Ok(())
    }
    fn sync_filesystem(&self, dir: &std::fs::File) -> std::io::Result<()> {
        if self.slow_sync() {
            self.real.sync_filesystem(dir)?;
        }
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.real.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.real.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.real.remove_dir_all(path)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.real.create_dir_all(path)
    }
    fn set_len(&self, file: &std::fs::File, len: u64) -> std::io::Result<()> {
        self.real.set_len(file, len)
    }
}

/// Partitions of the bounded-shutdown test (creating each costs about 5 ms of ext4 time on the
/// test machine, which is why there are not more).
const PARTITIONS: i32 = 1_000;
/// The shutdown of `PARTITIONS` on the slow disk must finish within this. One partition after
/// another it takes at least 1,000 × 6 fsyncs × 5 ms = 30 s; with the fsyncs of
/// `SHUTDOWN_THREADS` partitions overlapping, 2 to 4 s in a debug build on 2 busy cores.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

fn tp_of(topic: &str, p: i32) -> TopicPartition {
    tp(&format!("{topic}-{}", p % 5), p)
}

fn create_and_append(store: &Store, topic: &str, partitions: i32, records: impl Fn(i32) -> usize) {
    for p in 0..partitions {
        let log = store
            .create_partition(
                &tp_of(topic, p),
                LogConfig::default(),
                TopicId::from_bytes([9; 16]),
            )
            .expect("create");
        log.append(batch(records(p), i64::from(p)), 0)
            .expect("append");
    }
}

fn records_of(p: i32) -> usize {
    1 + (p as usize % 3)
}

#[test]
fn shutdown_of_many_partitions_is_bounded_and_clean() {
    let dir = tempfile::tempdir().expect("tmp");
    let storage = Arc::new(SlowSyncStorage::default());
    let config = store_config(dir.path(), FlushPolicy::Batch);
    {
        let store = Store::open_with_storage(config.clone(), storage.clone()).expect("open");
        create_and_append(&store, "stop", PARTITIONS, records_of);
        storage.slow.store(true, Ordering::SeqCst);
        let started = Instant::now();
        store.shutdown().expect("shutdown");
        let took = started.elapsed();
        let peak = storage.peak_in_flight.load(Ordering::SeqCst);
        eprintln!("{PARTITIONS} partitions: shutdown {took:?} with {SLOW_SYNC:?} per fsync, at most {peak} in flight");
        assert!(took < SHUTDOWN_BOUND, "shutdown took {took:?}");
        assert!(peak > 1, "fsyncs never overlapped");
    }
    assert!(dir.path().join(".clean-shutdown").exists());
    let store = Store::open(config).expect("reopen");
    assert!(store.opened_after_clean_shutdown());
    assert_eq!(store.partitions().len(), PARTITIONS as usize);
    for p in 0..PARTITIONS {
        let t = tp_of("stop", p);
        let log = store.partition(&t).expect("partition");
        let n = records_of(p) as i64;
        assert_eq!((log.log_end_offset(), log.recovery_point()), (n, n), "{t}");
        assert_eq!(read_all(&store, &t), vec![(0, n - 1)], "{t}");
    }
}

/// Not a test: times create, shutdown, clean open and recovery open of 10,000 partitions on the
/// real disk, for docs/benchmarks.md ("Start and stop with many partitions"). Run with
/// `cargo test --release -p millrace-store --test shutdown -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (tens of seconds), not a test"]
fn measure_start_and_stop_of_ten_thousand_partitions() {
    const MEASURED: i32 = 10_000;
    let dir = tempfile::tempdir().expect("tmp");
    let config = store_config(dir.path(), FlushPolicy::Batch);
    let mut started = Instant::now();
    let mut lap = |what: &str| {
        eprintln!("{MEASURED} partitions: {what} {:?}", started.elapsed());
        started = Instant::now();
    };
    let store = Store::open(config.clone()).expect("open");
    create_and_append(&store, "measure", MEASURED, |_| 3);
    lap("create + append");
    store.shutdown().expect("shutdown");
    lap("shutdown");
    drop(store);
    let store = Store::open(config.clone()).expect("clean open");
    lap("clean open");
    assert!(store.opened_after_clean_shutdown());
    store.shutdown().expect("shutdown");
    lap("shutdown (nothing appended since open)");
    drop(store);
    let store = Store::open(config.clone()).expect("clean open");
    for p in 0..MEASURED {
        let log = store.partition(&tp_of("measure", p)).expect("partition");
        log.append(batch(3, 0), 0).expect("append");
    }
    drop(store);
    lap("clean open, append to each, crash (no shutdown)");
    let store = Store::open(config).expect("recovery open");
    lap("recovery open");
    assert!(!store.opened_after_clean_shutdown());
    assert_eq!(store.partitions().len(), MEASURED as usize);
}

/// Inode and bytes of every producer snapshot in a partition directory, by file name.
fn snapshots_in(dir: &Path) -> Vec<(String, u64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out: Vec<(String, u64, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snapshot"))
        .map(|e| {
            let ino = e.metadata().expect("stat").ino();
            let bytes = std::fs::read(e.path()).expect("read");
            (e.file_name().to_string_lossy().into_owned(), ino, bytes)
        })
        .collect();
    out.sort();
    out
}

/// Goal: closing an idle partition (opened after a clean shutdown, nothing appended) replaces no
/// producer snapshot — it fsyncs the identical one in place — and what it vouches for survives a
/// power cut right after the shutdown (`PowerLossStorage`, several seeds): the marker, the
/// snapshot bytes, every record and the producer state (a resent idempotent batch is a
/// duplicate).
#[test]
fn idle_partitions_close_without_replacing_their_snapshots() {
    let idempotent = |seq: i32| {
        let value = format!("v{seq}").into_bytes();
        millrace_store::testing::encode_batch(&[(None, Some(&value[..]), 1)], 42, 0, seq)
    };
    for seed in 0..4u64 {
        let dir = tempfile::tempdir().expect("tmp");
        let config = store_config(dir.path(), FlushPolicy::Batch);
        let t = tp("idle", 0);
        {
            let store = Store::open(config.clone()).expect("open");
            let log = store
                .create_partition(&t, LogConfig::default(), TopicId::from_bytes([3; 16]))
                .expect("create");
            for seq in 0..3 {
                log.append(idempotent(seq), 0).expect("append");
            }
            store.shutdown().expect("shutdown");
        }
        let part_dir = dir.path().join(t.to_string());
        let before = snapshots_in(&part_dir);
        assert!(!before.is_empty(), "no producer snapshot after shutdown");
        {
            let storage =
                Arc::new(PowerLossStorage::new(dir.path(), seed, u64::MAX).expect("model"));
            let store = Store::open_with_storage(config.clone(), storage.clone()).expect("reopen");
            assert!(store.opened_after_clean_shutdown());
            store.shutdown().expect("idle shutdown");
            drop(store);
            assert_eq!(
                snapshots_in(&part_dir),
                before,
                "the idle close replaced a snapshot"
            );
            storage.power_loss().expect("power loss");
        }
        assert!(dir.path().join(".clean-shutdown").exists(), "seed {seed}");
        let after: Vec<(String, Vec<u8>)> = snapshots_in(&part_dir)
            .into_iter()
            .map(|(name, _, bytes)| (name, bytes))
            .collect();
        let want: Vec<(String, Vec<u8>)> = before
            .into_iter()
            .map(|(name, _, bytes)| (name, bytes))
            .collect();
        assert_eq!(after, want, "seed {seed}: snapshots after the power cut");
        let store = Store::open(config).expect("open after power cut");
        assert!(store.opened_after_clean_shutdown(), "seed {seed}");
        assert_eq!(
            read_all(&store, &t),
            vec![(0, 0), (1, 1), (2, 2)],
            "seed {seed}"
        );
        let log = store.partition(&t).expect("partition");
        let again = log.append(idempotent(2), 0).expect("resend");
        assert!(again.duplicate, "seed {seed}: producer state lost");
    }
}
