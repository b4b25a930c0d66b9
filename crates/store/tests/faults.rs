//! Goal: I/O errors on append never leave a partial batch visible and never panic: a transient
//! write error fails that append with `AppendError::Store` and the log carries on; an error whose
//! outcome is unknown (failed rollback, failed fsync) takes the data dir offline: later appends
//! return `Offline`, waiters are woken with an error, and reads keep working.

mod common;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use common::*;
use millrace_store::storage::{OsStorage, Storage};
use millrace_store::{AppendError, FlushPolicy, LogConfig, ReadUpperBound, Store, StoreError};

/// Fails the next `fail_writes` batch-sized writes (after landing a torn half), the next
/// `fail_truncates` truncations to a non-zero size and the next `fail_syncs` fdatasyncs.
#[derive(Debug, Default)]
struct Flaky {
    fail_writes: AtomicU32,
    fail_truncates: AtomicU32,
    fail_syncs: AtomicU32,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Storage for Flaky {
    fn open(&self, p: &Path, create: bool) -> io::Result<File> {
        OsStorage.open(p, create)
    }
    fn write_at(&self, f: &File, buf: &[u8], off: u64) -> io::Result<()> {
        if buf.len() > 61 && take(&self.fail_writes) {
            OsStorage.write_at(f, &buf[..buf.len() / 2], off)?;
            return Err(io::Error::other("injected write error"));
        }
        OsStorage.write_at(f, buf, off)
    }
    fn sync(&self, f: &File) -> io::Result<()> {
        if take(&self.fail_syncs) {
            return Err(io::Error::other("injected fsync error"));
        }
        OsStorage.sync(f)
    }
    fn sync_dir(&self, d: &Path) -> io::Result<()> {
        OsStorage.sync_dir(d)
    }
    fn sync_filesystem(&self, d: &File) -> io::Result<()> {
        if take(&self.fail_syncs) {
            return Err(io::Error::other("injected syncfs error"));
        }
        OsStorage.sync_filesystem(d)
    }
    fn rename(&self, a: &Path, b: &Path) -> io::Result<()> {
        OsStorage.rename(a, b)
    }
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        OsStorage.remove_file(p)
    }
    fn remove_dir_all(&self, p: &Path) -> io::Result<()> {
        OsStorage.remove_dir_all(p)
    }
    fn create_dir_all(&self, p: &Path) -> io::Result<()> {
        OsStorage.create_dir_all(p)
    }
    fn set_len(&self, f: &File, l: u64) -> io::Result<()> {
        // Only the rollback of an append (to a non-zero size), not checkpoint rewrites that the
        // flusher may run concurrently.
        if l > 0 && take(&self.fail_truncates) {
            return Err(io::Error::other("injected truncate error"));
        }
        OsStorage.set_len(f, l)
    }
}

#[test]
fn transient_write_error_is_rolled_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let flaky = Arc::new(Flaky::default());
    let store =
        Store::open_with_storage(store_config(dir.path(), FlushPolicy::Never), flaky.clone())
            .expect("open");
    let t = tp("flaky", 0);
    let log = store
        .create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    log.append(batch(2, 1), 0).expect("append");
    flaky.fail_writes.store(1, Ordering::SeqCst);
    assert!(matches!(
        log.append(batch(3, 2), 0),
        Err(AppendError::Store(StoreError::Io(_)))
    ));
    assert_eq!(log.log_end_offset(), 2);
    // The torn half was cut: the next append lands right after the first batch and all reads
    // (and a recovery) see exactly two whole batches.
    assert_eq!(log.append(batch(1, 3), 0).expect("append").base_offset, 2);
    assert_eq!(read_all(&store, &t), vec![(0, 1), (2, 2)]);
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    assert_eq!(read_all(&store, &t), vec![(0, 1), (2, 2)]);
}

#[test]
fn failed_rollback_takes_the_dir_offline_and_reads_keep_working() {
    let dir = tempfile::tempdir().expect("tmp");
    let flaky = Arc::new(Flaky::default());
    let store =
        Store::open_with_storage(store_config(dir.path(), FlushPolicy::Never), flaky.clone())
            .expect("open");
    let t = tp("offline", 0);
    let log = store
        .create_partition(
            &t,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    log.append(batch(2, 1), 0).expect("append");
    flaky.fail_writes.store(1, Ordering::SeqCst);
    flaky.fail_truncates.store(1, Ordering::SeqCst);
    assert!(matches!(
        log.append(batch(3, 2), 0),
        Err(AppendError::Store(StoreError::Io(_)))
    ));
    assert!(store.offline_reason().is_some());
    assert!(matches!(
        log.append(batch(1, 3), 0),
        Err(AppendError::Store(StoreError::Offline(_)))
    ));
    assert!(matches!(
        store.create_partition(
            &tp("other", 0),
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16])
        ),
        Err(StoreError::Offline(_))
    ));
    // Reads still serve the whole batches, never the torn tail.
    let r = log
        .read(0, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect("read");
    let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
    assert_eq!(
        (h.base_offset, h.last_offset(), r.records.len()),
        (0, 1, h.total_size())
    );
    assert!(matches!(store.shutdown(), Err(StoreError::Offline(_))));
    drop(log);
    drop(store);
    // Recovery cuts the torn tail.
    let store = open(dir.path(), FlushPolicy::Never);
    assert_eq!(read_all(&store, &t), vec![(0, 1)]);
}

#[tokio::test]
async fn failed_fsync_fails_waiters_and_goes_offline() {
    for policy in [FlushPolicy::Batch, FlushPolicy::Always] {
        let dir = tempfile::tempdir().expect("tmp");
        let flaky = Arc::new(Flaky::default());
        let store = Store::open_with_storage(store_config(dir.path(), policy), flaky.clone())
            .expect("open");
        let log = store
            .create_partition(
                &tp("sync", 0),
                LogConfig::default(),
                millrace_store::TopicId::from_bytes([7; 16]),
            )
            .expect("create");
        flaky.fail_syncs.store(1, Ordering::SeqCst);
        let result = log.append(batch(1, 1), 0);
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), log.wait_durable(1))
            .await
            .expect("waiter woken");
        assert!(
            matches!(waited, Err(StoreError::Offline(_))),
            "{policy:?}: {waited:?}"
        );
        if policy == FlushPolicy::Always {
            assert!(matches!(result, Err(AppendError::Store(StoreError::Io(_)))));
        }
        assert_eq!(
            log.high_watermark(),
            0,
            "{policy:?}: nothing became visible to consumers"
        );
        assert!(matches!(
            log.append(batch(1, 1), 0),
            Err(AppendError::Store(StoreError::Offline(_)))
        ));
    }
}
