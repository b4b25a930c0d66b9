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
        extra_log_dirs: Vec::new(),
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

/// Every record of the log (decoded), in offset order.
pub fn read_records(store: &Store, tp: &TopicPartition) -> Vec<millrace_store::records::Record> {
    let log = store.partition(tp).expect("partition");
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let r = log
            .read(offset, 1 << 20, ReadUpperBound::LogEnd, true)
            .expect("read");
        if r.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < r.records.len() {
            let bytes = &r.records[pos..];
            let h = millrace_store::batch::validate_stored(bytes).expect("valid batch");
            let (_, recs) =
                millrace_store::records::decode_records(&bytes[..h.total_size()]).expect("decode");
            out.extend(recs.into_iter().filter(|r| r.offset >= offset));
            pos += h.total_size();
            offset = h.last_offset() + 1;
        }
    }
    out
}

/// Recompresses an uncompressed test batch with `codec` (1 gzip, 2 snappy, 3 lz4, 4 zstd).
pub fn compress_batch(batch: &[u8], codec: u8) -> BytesMut {
    use std::io::Write;
    let body = &batch[61..];
    let compressed: Vec<u8> = match codec {
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(body).expect("gzip");
            e.finish().expect("gzip")
        }
        2 => snap::raw::Encoder::new()
            .compress_vec(body)
            .expect("snappy"),
        3 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(body).expect("lz4");
            e.finish().expect("lz4")
        }
        _ => zstd::encode_all(body, 3).expect("zstd"),
    };
    let mut out = BytesMut::from(&batch[..61]);
    out.extend_from_slice(&compressed);
    let len = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&len.to_be_bytes());
    let attrs = i16::from_be_bytes([out[21], out[22]]) | i16::from(codec);
    out[21..23].copy_from_slice(&attrs.to_be_bytes());
    millrace_store::batch::rewrite_crc(&mut out);
    out
}

/// The real file system without fsyncs, for test phases whose durability does not matter (the
/// checks after a simulated crash, which end in a `kill -9`-style drop at most): on a busy
/// machine each real fsync can take tens of milliseconds.
#[derive(Debug, Default)]
pub struct NoSync;

impl millrace_store::storage::Storage for NoSync {
    fn open(&self, p: &Path, create: bool) -> std::io::Result<std::fs::File> {
        millrace_store::storage::OsStorage.open(p, create)
    }
    fn write_at(&self, f: &std::fs::File, buf: &[u8], off: u64) -> std::io::Result<()> {
        millrace_store::storage::OsStorage.write_at(f, buf, off)
    }
    fn sync(&self, _: &std::fs::File) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_dir(&self, _: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_filesystem(&self, _: &std::fs::File) -> std::io::Result<()> {
        Ok(())
    }
    fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
        millrace_store::storage::OsStorage.rename(a, b)
    }
    fn remove_file(&self, p: &Path) -> std::io::Result<()> {
        millrace_store::storage::OsStorage.remove_file(p)
    }
    fn remove_dir_all(&self, p: &Path) -> std::io::Result<()> {
        millrace_store::storage::OsStorage.remove_dir_all(p)
    }
    fn create_dir_all(&self, p: &Path) -> std::io::Result<()> {
        millrace_store::storage::OsStorage.create_dir_all(p)
    }
    fn set_len(&self, f: &std::fs::File, len: u64) -> std::io::Result<()> {
        millrace_store::storage::OsStorage.set_len(f, len)
    }
}

/// Opens the store in `dir` over `NoSync`.
pub fn open_without_fsync(dir: &Path, policy: FlushPolicy) -> Arc<Store> {
    Store::open_with_storage(store_config(dir, policy), Arc::new(NoSync)).expect("open store")
}

/// Waits (at most 10 s) until the flusher has synced `log`'s sealed segments and, per policy, its
/// appends: the cleaner only works below the recovery point.
pub fn settle(log: &millrace_store::PartitionLog) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(log.recovery_point() >= log.active_segment_base_offset()
        && log.durable_offset() >= log.log_end_offset())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{}: recovery point {} still below the active segment {} after 10 s",
            log.topic_partition(),
            log.recovery_point(),
            log.active_segment_base_offset()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `workload` on a fresh store over the power-loss model, cut at `points` operations spread
/// evenly over `total` (a crash-free run's count), and hands `check` the directory, what the
/// workload reported before the cut (`T::default()` if the store did not even open) and a
/// description of the cut for failure messages.
pub fn at_power_cuts<T: Default>(
    total: u64,
    points: u64,
    config: impl Fn(&Path) -> StoreConfig,
    workload: impl Fn(&Store) -> T,
    check: impl Fn(&Path, &T, &str),
) {
    use millrace_store::storage::{PowerLossStorage, Storage};
    let step = (total / points).max(1);
    for crash_at in (1..=total).step_by(step as usize) {
        let dir = tempfile::tempdir().expect("tmp");
        let storage =
            Arc::new(PowerLossStorage::new(dir.path(), crash_at, crash_at).expect("model"));
        let shared: Arc<dyn Storage> = storage.clone();
        let reported = match Store::open_with_storage(config(dir.path()), shared) {
            Ok(store) => workload(&store),
            Err(_) => T::default(),
        };
        let notes = storage.power_loss().expect("power loss");
        let what = format!(
            "power cut at operation {crash_at} of {total} ({})",
            notes.join("; ")
        );
        check(dir.path(), &reported, &what);
    }
}
