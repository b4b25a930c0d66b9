//! Several log dirs (`log.dirs`): placement of new partitions, a failed dir taking only its own
//! partitions offline, a partition found in two dirs refused at open, a replica moved between
//! dirs while it is appended to, and the leftovers of an interrupted move resolved at open.
mod common;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_contiguous, batch, read_all, tp};
use millrace_store::storage::{CrashStorage, OsStorage, PowerLossStorage, Storage};
use millrace_store::{
    AppendError, FlushPolicy, LogConfig, MoveError, Store, StoreConfig, StoreError, TopicId,
};

fn config(dirs: &[&Path]) -> StoreConfig {
    StoreConfig {
        flush_policy: FlushPolicy::Batch,
        flush_interval: Duration::from_millis(1),
        ..StoreConfig::with_log_dirs(dirs.iter().map(|d| d.to_path_buf()))
    }
}

fn create(store: &Store, t: &millrace_store::TopicPartition) {
    store
        .create_partition(t, LogConfig::default(), TopicId::from_bytes([3; 16]))
        .expect("create");
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

#[test]
fn new_partitions_go_to_the_dir_with_the_fewest() {
    let (a, b, c) = (
        tempfile::tempdir().expect("test setup"),
        tempfile::tempdir().expect("test setup"),
        tempfile::tempdir().expect("test setup"),
    );
    let store = Store::open(config(&[a.path(), b.path(), c.path()])).expect("open");
    for p in 0..6 {
        create(&store, &tp("t", p));
    }
    let placed: Vec<PathBuf> = (0..6)
        .map(|p| store.log_dir_of(&tp("t", p)).expect("hosted"))
        .collect();
    let want: Vec<PathBuf> = [a.path(), b.path(), c.path()]
        .iter()
        .cycle()
        .take(6)
        .map(|p| p.to_path_buf())
        .collect();
    assert_eq!(placed, want, "round robin by count, ties in log.dirs order");
    // Deleting two partitions of the first dir makes it the emptiest.
    store.delete_partition(&tp("t", 0)).expect("delete");
    store.delete_partition(&tp("t", 3)).expect("delete");
    create(&store, &tp("u", 0));
    assert_eq!(store.log_dir_of(&tp("u", 0)).as_deref(), Some(a.path()));
    store.shutdown().expect("shutdown");
    drop(store);
    // Each partition is found again in its own dir.
    let store = Store::open(config(&[a.path(), b.path(), c.path()])).expect("reopen");
    assert!(store.opened_after_clean_shutdown());
    assert_eq!(store.log_dir_of(&tp("t", 5)).as_deref(), Some(c.path()));
    assert_eq!(store.partitions().len(), 5);
}

#[test]
fn a_partition_in_two_dirs_is_refused_at_open() {
    let (a, b) = (
        tempfile::tempdir().expect("test setup"),
        tempfile::tempdir().expect("test setup"),
    );
    {
        let store = Store::open(config(&[a.path()])).expect("open");
        create(&store, &tp("dup", 0));
        store.shutdown().expect("shutdown");
    }
    copy_dir(&a.path().join("dup-0"), &b.path().join("dup-0"));
    let refused = Store::open(config(&[a.path(), b.path()]));
    assert!(
        matches!(refused, Err(StoreError::DuplicateLog { .. })),
        "{:?}",
        refused.err()
    );
}

/// Fails every directory fsync under `dir` once `fail` is set: the dir's checkpoint writes fail.
#[derive(Debug)]
struct FailDir {
    dir: PathBuf,
    fail: AtomicBool,
}

impl Storage for FailDir {
    fn open(&self, p: &Path, create: bool) -> io::Result<File> {
        OsStorage.open(p, create)
    }
    fn write_at(&self, f: &File, buf: &[u8], off: u64) -> io::Result<()> {
        OsStorage.write_at(f, buf, off)
    }
    fn sync(&self, f: &File) -> io::Result<()> {
        OsStorage.sync(f)
    }
    fn sync_dir(&self, d: &Path) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) && d.starts_with(&self.dir) {
            return Err(io::Error::other("injected EIO"));
        }
        OsStorage.sync_dir(d)
    }
    fn sync_filesystem(&self, d: &File) -> io::Result<()> {
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
    fn set_len(&self, f: &File, len: u64) -> io::Result<()> {
        OsStorage.set_len(f, len)
    }
}

#[test]
fn a_failed_dir_takes_only_its_own_partitions_offline() {
    let (a, b) = (
        tempfile::tempdir().expect("test setup"),
        tempfile::tempdir().expect("test setup"),
    );
    let storage = Arc::new(FailDir {
        dir: b.path().to_path_buf(),
        fail: AtomicBool::new(false),
    });
    let store =
        Store::open_with_storage(config(&[a.path(), b.path()]), storage.clone()).expect("open");
    create(&store, &tp("t", 0));
    create(&store, &tp("t", 1));
    assert_eq!(store.log_dir_of(&tp("t", 1)).as_deref(), Some(b.path()));
    let (on_a, on_b) = (
        store.partition(&tp("t", 0)).expect("test setup"),
        store.partition(&tp("t", 1)).expect("test setup"),
    );
    on_a.append(batch(2, 1), 0).expect("append a");
    on_b.append(batch(2, 1), 0).expect("append b");
    storage.fail.store(true, Ordering::SeqCst);
    // The next checkpoint write of dir b fails: b goes offline, a does not.
    store.run_maintenance(1).expect("maintenance");
    let offline = store.offline_log_dirs();
    assert_eq!(offline.len(), 1, "{offline:?}");
    assert_eq!(offline[0].0, b.path());
    assert!(
        store.offline_reason().is_none(),
        "the store as a whole still writes"
    );
    assert!(matches!(
        on_b.append(batch(1, 2), 0),
        Err(AppendError::Store(StoreError::Offline(_)))
    ));
    on_a.append(batch(1, 2), 0)
        .expect("dir a keeps taking appends");
    // New partitions avoid the failed dir; maintenance goes on for the other.
    create(&store, &tp("t", 2));
    assert_eq!(store.log_dir_of(&tp("t", 2)).as_deref(), Some(a.path()));
    store.run_maintenance(2).expect("maintenance");
    let described = store.describe_log_dirs();
    assert!(described[0].offline.is_none() && described[1].offline.is_some());
    assert!(matches!(store.shutdown(), Err(StoreError::Offline(_))));
    drop((on_a, on_b));
    drop(store);
    // The failed dir is rescanned (recovered) at the next open and serves again.
    let store = Store::open(config(&[a.path(), b.path()])).expect("reopen");
    assert!(!store.opened_after_clean_shutdown());
    assert_eq!(read_all(&store, &tp("t", 1)), vec![(0, 1)]);
    assert_eq!(read_all(&store, &tp("t", 0)), vec![(0, 1), (2, 2)]);
    store
        .partition(&tp("t", 1))
        .expect("test setup")
        .append(batch(1, 3), 0)
        .expect("dir b serves again");
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_replica_moves_between_dirs_while_it_is_appended_to() {
    let (a, b) = (
        tempfile::tempdir().expect("test setup"),
        tempfile::tempdir().expect("test setup"),
    );
    let store = Store::open(config(&[a.path(), b.path()])).expect("open");
    let t = tp("mv", 0);
    store
        .create_partition(&t, small(), TopicId::from_bytes([5; 16]))
        .expect("create");
    assert_eq!(store.log_dir_of(&t).as_deref(), Some(a.path()));
    let log = store.partition(&t).expect("test setup");
    for i in 0..200 {
        log.append(batch(3, i), 0).expect("append");
    }
    assert!(matches!(
        store.alter_replica_log_dir(&t, "/nowhere"),
        Err(MoveError::LogDirNotFound(_))
    ));
    assert!(matches!(
        store.alter_replica_log_dir(&tp("absent", 0), &b.path().display().to_string()),
        Err(MoveError::ReplicaNotAvailable(_))
    ));
    // To its own dir: a no-op.
    store
        .alter_replica_log_dir(&t, &a.path().display().to_string())
        .expect("same dir");
    store
        .alter_replica_log_dir(&t, &b.path().display().to_string())
        .expect("move accepted");
    // Appends go on through the same log object while the copy runs and after the swap.
    let mut appended = 200;
    wait_for("the swap", || {
        log.append(batch(3, appended), 0)
            .expect("append during move");
        appended += 1;
        store.log_dir_of(&t).as_deref() == Some(b.path())
    });
    for i in 0..20 {
        log.append(batch(3, 1000 + i), 0)
            .expect("append after move");
    }
    let total = (appended + 20) * 3;
    let batches = read_all(&store, &t);
    assert_contiguous(&batches, 0);
    assert_eq!(batches.last().map(|b| b.1 + 1), Some(total));
    assert!(!a.path().join("mv-0").exists(), "the old copy is removed");
    wait_for("the move to end", || {
        store
            .describe_log_dirs()
            .iter()
            .all(|d| d.futures.is_empty())
    });
    let described = store.describe_log_dirs();
    assert!(described[0].partitions.is_empty());
    assert_eq!(described[1].partitions[0].0, t);
    assert!(described[1].total_bytes.unwrap_or(0) >= described[1].usable_bytes.unwrap_or(0));
    store.shutdown().expect("shutdown");
    drop(log);
    drop(store);
    let store = Store::open(config(&[a.path(), b.path()])).expect("reopen");
    assert_eq!(store.log_dir_of(&t).as_deref(), Some(b.path()));
    assert_eq!(read_all(&store, &t), batches);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("test setup");
    for e in std::fs::read_dir(from).expect("test setup") {
        let e = e.expect("test setup");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("test setup");
    }
}

#[test]
fn an_interrupted_move_is_resolved_at_open() {
    let (a, b) = (
        tempfile::tempdir().expect("test setup"),
        tempfile::tempdir().expect("test setup"),
    );
    {
        let store = Store::open(config(&[a.path(), b.path()])).expect("open");
        create(&store, &tp("x", 0));
        create(&store, &tp("y", 0));
        for t in [tp("x", 0), tp("y", 0)] {
            store
                .partition(&t)
                .expect("test setup")
                .append(batch(4, 1), 0)
                .expect("test setup");
        }
        store.shutdown().expect("shutdown");
    }
    // x-0 (in a): crashed between the two renames of its swap: source `-moved`, copy `-future`.
    copy_dir(&a.path().join("x-0"), &b.path().join("x-0.1f-future"));
    std::fs::rename(a.path().join("x-0"), a.path().join("x-0.1f-moved")).expect("test setup");
    // y-0 (in b): crashed during its copy: a partial `-future` in a.
    std::fs::create_dir_all(a.path().join("y-0.2e-future")).expect("test setup");
    let store = Store::open(config(&[a.path(), b.path()])).expect("open");
    assert_eq!(store.log_dir_of(&tp("x", 0)).as_deref(), Some(a.path()));
    assert_eq!(store.log_dir_of(&tp("y", 0)).as_deref(), Some(b.path()));
    assert_eq!(read_all(&store, &tp("x", 0)), vec![(0, 3)]);
    assert!(!b.path().join("x-0.1f-future").exists());
    assert!(!a.path().join("y-0.2e-future").exists());
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("test setup");
    for e in std::fs::read_dir(from).expect("test setup") {
        let e = e.expect("test setup");
        if e.file_type().expect("test setup").is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("test setup");
        }
    }
}

/// A crash model for `crash_during_a_move`.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// `kill -9` (CrashStorage): every write stays, in the page cache.
    Kill,
    /// A power cut (PowerLossStorage): only what was fsynced stays, plus a seeded part of the rest.
    Power,
}

/// Crashes a move at every file operation in turn, then restarts: the partition is found in
/// exactly one dir with every batch, whatever step the move reached.
fn crash_during_a_move(cut: Cut) {
    let template = tempfile::tempdir().expect("tmp");
    let (ta, tb) = (template.path().join("a"), template.path().join("b"));
    let t = tp("crash", 0);
    let expected = {
        let store = Store::open(config(&[&ta, &tb])).expect("open");
        store
            .create_partition(&t, small(), TopicId::from_bytes([6; 16]))
            .expect("create");
        let log = store.partition(&t).expect("hosted");
        for i in 0..40 {
            log.append(batch(3, i), 0).expect("append");
        }
        let batches = read_all(&store, &t);
        store.shutdown().expect("shutdown");
        batches
    };
    for crash_at in 1..2_000 {
        // Every earlier operation was a crash point.
        let crashes = crash_at - 1;
        let run = tempfile::tempdir().expect("tmp");
        let (a, b) = (run.path().join("a"), run.path().join("b"));
        copy_tree(&ta, &a);
        copy_tree(&tb, &b);
        let (kill, power) = match cut {
            Cut::Kill => (Some(Arc::new(CrashStorage::new(crash_at))), None),
            Cut::Power => {
                let model = PowerLossStorage::new(run.path(), crash_at, crash_at).expect("model");
                (None, Some(Arc::new(model)))
            }
        };
        let storage: Arc<dyn Storage> = match (&kill, &power) {
            (Some(k), _) => k.clone(),
            (_, Some(p)) => p.clone(),
            _ => unreachable!("one model per cut"),
        };
        let opened = Store::open_with_storage(config(&[&a, &b]), Arc::clone(&storage));
        let mut finished = false;
        if let Ok(store) = opened {
            if store
                .alter_replica_log_dir(&t, &b.display().to_string())
                .is_ok()
            {
                wait_for("the mover to end", || {
                    store
                        .describe_log_dirs()
                        .iter()
                        .all(|d| d.futures.is_empty())
                });
            }
            finished = store.log_dir_of(&t).as_deref() == Some(b.as_path());
            drop(store);
        }
        let crashed = match (&kill, &power) {
            (Some(k), _) => k.crashed(),
            (_, Some(model)) => {
                let crashed = model.crashed();
                model.power_loss().expect("power loss");
                crashed
            }
            _ => unreachable!("one model per cut"),
        };
        let store = Store::open(config(&[&a, &b])).expect("reopen after the crash");
        assert_eq!(
            read_all(&store, &t),
            expected,
            "{cut:?} at operation {crash_at}"
        );
        let dir = store.log_dir_of(&t).expect("hosted");
        if finished && matches!(cut, Cut::Kill) {
            assert_eq!(
                dir, b,
                "{cut:?} at operation {crash_at}: the finished move holds"
            );
        }
        if !crashed {
            assert!(finished, "a move without a crash finishes");
            assert!(crashes > 10, "only {crashes} crash points");
            eprintln!("{cut:?}: {crashes} crash points, each restarted with one whole copy");
            return;
        }
    }
    panic!("the move never ran to its end within 2,000 operations");
}

#[test]
fn a_move_cut_by_kill_9_at_any_file_operation_leaves_one_whole_copy() {
    crash_during_a_move(Cut::Kill);
}

#[test]
fn a_move_cut_by_a_power_loss_at_any_file_operation_leaves_one_whole_copy() {
    crash_during_a_move(Cut::Power);
}

/// Requests racing for one partition (two targets, each asked twice at once): the replica ends
/// where the last request sent it, with every batch, and no copy or leftover stays elsewhere.
#[test]
fn a_second_request_replaces_a_move_in_progress() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let paths: Vec<&Path> = dirs.iter().map(|d| d.path()).collect();
    let store = Store::open(config(&paths)).expect("open");
    let t = tp("race", 0);
    store
        .create_partition(&t, small(), TopicId::from_bytes([8; 16]))
        .expect("create");
    let log = store.partition(&t).expect("hosted");
    for i in 0..300 {
        log.append(batch(3, i), 0).expect("append");
    }
    let expected = read_all(&store, &t);
    let name = |i: usize| paths[i].display().to_string();
    let racers: Vec<_> = [1, 1, 2, 2]
        .into_iter()
        .map(|i| {
            let (store, t, target) = (Arc::clone(&store), t.clone(), name(i));
            std::thread::spawn(move || store.alter_replica_log_dir(&t, &target))
        })
        .collect();
    for r in racers {
        r.join().expect("racer").expect("accepted");
    }
    store
        .alter_replica_log_dir(&t, &name(2))
        .expect("last request");
    wait_for("the last move", || {
        store.log_dir_of(&t).as_deref() == Some(paths[2])
            && store
                .describe_log_dirs()
                .iter()
                .all(|d| d.futures.is_empty())
    });
    assert_eq!(read_all(&store, &t), expected);
    for (i, p) in paths.iter().enumerate() {
        let leftovers: Vec<String> = std::fs::read_dir(p)
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("race-0"))
            .collect();
        let want: Vec<String> = if i == 2 {
            vec!["race-0".into()]
        } else {
            Vec::new()
        };
        assert_eq!(leftovers, want, "dir {i}");
    }
}
