//! CPU cost of `PartitionLog::append` itself: the same 1 KiB appends as `append_read`, with a
//! `Storage` that discards `.log` writes, so only the store's own work (validation, CRC, offset
//! assignment, index and producer-state upkeep, locking, notification) is timed.
//! Run: `cargo bench -p millrace-store --bench append_cpu`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use millrace_store::storage::{OsStorage, Storage};
use millrace_store::{FlushPolicy, LogConfig, Store, StoreConfig, TopicPartition};

/// The real file system, except that positioned writes are dropped.
#[derive(Debug)]
struct DiscardWrites(OsStorage);

impl Storage for DiscardWrites {
    fn open(&self, p: &Path, create: bool) -> std::io::Result<std::fs::File> {
        self.0.open(p, create)
    }
    fn write_at(&self, _: &std::fs::File, _: &[u8], _: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn sync(&self, f: &std::fs::File) -> std::io::Result<()> {
        self.0.sync(f)
    }
    fn sync_dir(&self, d: &Path) -> std::io::Result<()> {
        self.0.sync_dir(d)
    }
    fn sync_filesystem(&self, d: &std::fs::File) -> std::io::Result<()> {
        self.0.sync_filesystem(d)
    }
    fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
        self.0.rename(a, b)
    }
    fn remove_file(&self, p: &Path) -> std::io::Result<()> {
        self.0.remove_file(p)
    }
    fn remove_dir_all(&self, p: &Path) -> std::io::Result<()> {
        self.0.remove_dir_all(p)
    }
    fn create_dir_all(&self, p: &Path) -> std::io::Result<()> {
        self.0.create_dir_all(p)
    }
    fn set_len(&self, f: &std::fs::File, l: u64) -> std::io::Result<()> {
        self.0.set_len(f, l)
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = StoreConfig {
        flush_policy: FlushPolicy::Never,
        ..StoreConfig::new(dir.path())
    };
    let store = Store::open_with_storage(config, Arc::new(DiscardWrites(OsStorage))).expect("open");
    let log = store
        .create_partition(
            &TopicPartition::new("cpu", 0),
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let one = millrace_store::testing::encode_filler_batch(1, 1024 - 73, 1);
    let n: u32 = 300_000;
    let data: Vec<_> = (0..n).map(|_| one.clone()).collect();
    let t = Instant::now();
    for b in data {
        log.append(b, 0).expect("append");
    }
    let append = t.elapsed() / n;
    let t = Instant::now();
    for _ in 0..n {
        millrace_store::batch::validate(&one).expect("valid");
    }
    let validate = t.elapsed() / n;
    println!("1 KiB append, writes discarded: {append:?} per append (of which header+CRC validation {validate:?})");
}
