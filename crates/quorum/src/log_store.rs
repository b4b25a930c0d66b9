//! openraft's `RaftLogStorage` over our files: the log (`log_file`), the vote file and the
//! committed-index file, with every write done in order by one log writer thread.
//!
//! The storage contract openraft relies on, and how it is kept:
//! - **A vote is durable before `save_vote` returns**: the writer writes `quorum.vote.tmp`,
//!   fdatasyncs, renames it over `quorum.vote` and fsyncs the directory, and only then answers.
//! - **Entries are durable before the flush callback fires**: `append` puts the entries in the
//!   in-memory cache (so readers see them when it returns, as openraft requires) and queues the
//!   encoded records; the writer writes and fdatasyncs them and then calls
//!   `LogFlushed::log_io_completed`.
//! - **Writes are serialized**: one thread takes commands from one bounded queue in the order
//!   openraft issued them (append, vote, truncate, purge, committed), so a later write never
//!   reaches the disk before an earlier one.
//! - **No holes**: `log_file` refuses an append that does not continue the log.
//! - **A full disk is waited out, not reported**: an append, vote or snapshot write that fails
//!   with ENOSPC is put back (the log cuts a short write back to its old length, `write_atomic`
//!   removes its temporary) and retried through `reserve::Reserve::with_space`, which first
//!   releases the directory's space reserve. openraft 0.9 stops its Raft core for good on any
//!   storage error, so reporting ENOSPC would stop the quorum — and with it the DeleteTopics that
//!   would free the disk. A purge that finds no space is skipped (purging only saves space; the
//!   next purge goes further).
//! - **A write of unknown outcome poisons the writer**: after any other I/O error (a failed
//!   fsync above all, whatever its error number: the page cache can no longer be trusted) every
//!   later command fails too and openraft stops with a storage error. Restarting recovers from
//!   what the disk really holds.
//!
//! The committed log id is saved without fsync (`save_committed` is optional in openraft and
//! only speeds up re-applying at start); it is written after the entries it covers were synced,
//! and read back only if it matches an entry in the log.
//!
//! openraft's core awaits `save_vote`, `truncate` and each append's flush, but the file I/O never
//! runs on a runtime thread (pitfall #185 in the replication notes).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, RaftLogReader, StorageIOError};
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot, watch};

use crate::codec;
use crate::disk::{self, Disk, DiskFile};
use crate::limits::{LOG_RECORD_BYTES_MAX, SMALL_FILE_BYTES_MAX, WRITER_QUEUE_MAX};
use crate::log_file::LogFile;
use crate::reserve::Reserve;
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::QuorumError;

/// The vote file's name inside the quorum directory.
pub const VOTE_FILE_NAME: &str = "quorum.vote";
/// The committed-index file's name inside the quorum directory.
pub const COMMITTED_FILE_NAME: &str = "quorum.committed";

/// What openraft reads without touching the disk: every entry not yet purged, the vote, the
/// purge point and the committed log id.
#[derive(Debug, Default)]
struct LogCache {
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

enum WriteCmd {
    Append {
        records: Vec<(u64, Vec<u8>)>,
        done: LogFlushed<TypeConfig>,
    },
    SaveVote {
        record: Vec<u8>,
        done: oneshot::Sender<io::Result<()>>,
    },
    Truncate {
        from: u64,
        done: oneshot::Sender<io::Result<()>>,
    },
    Purge {
        upto: LogId,
    },
    SaveCommitted {
        record: Vec<u8>,
    },
}

/// The log store handed to openraft.
pub struct LogStore {
    cache: Arc<RwLock<LogCache>>,
    tx: mpsc::Sender<WriteCmd>,
    committed_tx: watch::Sender<Option<u64>>,
}

/// A reader of the cached log, for openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    cache: Arc<RwLock<LogCache>>,
}

/// Resolves when the log writer thread has finished every queued write and exited.
pub type WriterDone = oneshot::Receiver<()>;

fn sto_err(subject: ErrorSubject<u64>, verb: ErrorVerb, e: impl ToString) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::error(e.to_string())).into()
}

fn write_logs_err(e: impl ToString) -> StorageError {
    sto_err(ErrorSubject::Logs, ErrorVerb::Write, e)
}

impl LogStore {
    /// Opens the log, vote and committed files in `dir` (recovering the log) and starts the
    /// writer thread. Blocking: call from a blocking context.
    pub fn open(
        disk: Arc<dyn Disk>,
        dir: &Path,
        reserve: Arc<Reserve>,
    ) -> Result<(LogStore, WriterDone, watch::Receiver<Option<u64>>), QuorumError> {
        let (log, recovered) = LogFile::open(disk.clone(), dir)?;
        let cut_bytes = recovered.cut_bytes;
        let vote_path = dir.join(VOTE_FILE_NAME);
        let vote = match disk::read_small(&*disk, &vote_path, SMALL_FILE_BYTES_MAX) {
            Ok(None) => None,
            Ok(Some(bytes)) => {
                // Written only through tmp → fsync → rename: a bad vote file is corruption.
                // Starting without it could vote twice in a term, so refuse.
                let (vote, _) = codec::decode_record::<Vote>(&bytes, SMALL_FILE_BYTES_MAX)
                    .ok_or_else(|| QuorumError::Corrupt {
                        path: vote_path.clone(),
                        reason: "invalid vote record".into(),
                    })?;
                Some(vote)
            }
            Err(source) => {
                return Err(QuorumError::Io {
                    context: format!("read {}", vote_path.display()),
                    source,
                })
            }
        };
        let committed_path = dir.join(COMMITTED_FILE_NAME);
        let committed_file =
            disk.open(&committed_path, true)
                .map_err(|source| QuorumError::Io {
                    context: format!("open {}", committed_path.display()),
                    source,
                })?;
        let committed = read_committed_file(&*committed_file);

        let mut cache = LogCache {
            entries: recovered
                .entries
                .into_iter()
                .map(|e| (e.log_id.index, e))
                .collect(),
            last_purged: recovered.last_purged,
            vote,
            committed: None,
        };
        cache.committed = committed.filter(|c| committed_is_valid(&cache, c));
        let committed_index = cache.committed.as_ref().map(|c| c.index);
        tracing::info!(
            dir = %dir.display(),
            entries = cache.entries.len(),
            last_purged = ?cache.last_purged,
            vote = ?cache.vote,
            committed = ?cache.committed,
            cut_bytes,
            "metadata log opened"
        );

        let (tx, rx) = mpsc::channel(WRITER_QUEUE_MAX);
        let (done_tx, done_rx) = oneshot::channel();
        let writer = Writer {
            disk,
            dir: dir.to_path_buf(),
            log,
            committed_file,
            reserve,
            poisoned: None,
        };
        std::thread::Builder::new()
            .name("quorum-log-writer".into())
            .spawn(move || {
                writer.run(rx);
                let _ = done_tx.send(());
            })
            .map_err(|source| QuorumError::Io {
                context: "spawn the log writer thread".into(),
                source,
            })?;
        let (committed_tx, committed_rx) = watch::channel(committed_index);
        let store = LogStore {
            cache: Arc::new(RwLock::new(cache)),
            tx,
            committed_tx,
        };
        Ok((store, done_rx, committed_rx))
    }

    async fn send(&self, cmd: WriteCmd) -> Result<(), StorageError> {
        self.tx
            .send(cmd)
            .await
            .map_err(|_| write_logs_err("the log writer thread has stopped"))
    }
}

/// The committed log id is trusted only if the log (or the purge point) holds that exact id.
fn committed_is_valid(cache: &LogCache, c: &LogId) -> bool {
    let in_log = cache.entries.get(&c.index).is_some_and(|e| e.log_id == *c);
    let purged = cache.last_purged.as_ref().is_some_and(|p| c <= p);
    if !(in_log || purged) {
        tracing::warn!(committed = %c, "ignoring a saved committed log id not in the log");
    }
    in_log || purged
}

fn read_committed_file(file: &dyn DiskFile) -> Option<LogId> {
    let len = usize::try_from(file.size().ok()?)
        .ok()?
        .min(SMALL_FILE_BYTES_MAX);
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).ok()?;
    codec::decode_record::<Option<LogId>>(&buf, SMALL_FILE_BYTES_MAX).and_then(|(c, _)| c)
}

/// The thread that performs every log, vote and committed write, in queue order.
struct Writer {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    log: LogFile,
    committed_file: Box<dyn DiskFile>,
    reserve: Arc<Reserve>,
    /// The first I/O error of unknown outcome; once set, every command fails.
    poisoned: Option<String>,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<WriteCmd>) {
        while let Some(cmd) = rx.blocking_recv() {
            self.handle(cmd);
        }
        tracing::debug!(dir = %self.dir.display(), "log writer thread exits");
    }

    fn guard(&mut self, r: io::Result<()>, what: &str) -> io::Result<()> {
        if let Err(e) = &r {
            tracing::error!(
                dir = %self.dir.display(),
                error = %e,
                "metadata log: {what} failed; no further writes until restart"
            );
            self.poisoned = Some(format!("{what}: {e}"));
        }
        r
    }

    fn check(&self) -> io::Result<()> {
        match &self.poisoned {
            Some(p) => Err(io::Error::other(format!(
                "log writer stopped after an earlier failure ({p})"
            ))),
            None => Ok(()),
        }
    }

    fn handle(&mut self, cmd: WriteCmd) {
        let reserve = self.reserve.clone();
        match cmd {
            WriteCmd::Append { records, done } => {
                let r = self.check().and_then(|()| {
                    let log = &mut self.log;
                    reserve.with_space("append", || log.append(&records))
                });
                let r = self.guard(r, "append");
                done.log_io_completed(r);
            }
            WriteCmd::SaveVote { record, done } => {
                let path = self.dir.join(VOTE_FILE_NAME);
                let r = self.check().and_then(|()| {
                    reserve.with_space("save vote", || {
                        disk::write_atomic(&*self.disk, &path, &[&record])
                    })
                });
                let r = self.guard(r, "save vote");
                let _ = done.send(r);
            }
            WriteCmd::Truncate { from, done } => {
                let r = self.check().and_then(|()| self.log.truncate(from));
                let r = self.guard(r, "truncate");
                let _ = done.send(r);
            }
            WriteCmd::Purge { upto } => match self.check().and_then(|()| self.log.purge(upto)) {
                Err(e) if disk::is_no_space(&e) => {
                    tracing::warn!(error = %e, upto = %upto, "metadata log: purge skipped, no space");
                }
                r => {
                    let _ = self.guard(r, "purge");
                }
            },
            WriteCmd::SaveCommitted { record } => {
                // Not fsynced: see the module comment. A failure here is not fatal either.
                if self.check().is_ok() {
                    if let Err(e) = self.committed_file.write_all_at(&record, 0) {
                        tracing::warn!(error = %e, "metadata log: saving the committed id failed");
                    }
                }
            }
        }
        if self.poisoned.is_none() {
            reserve.top_up();
        }
    }
}

/// `[start, end)` of a range of log indexes; `None` when empty.
fn index_range<RB: RangeBounds<u64>>(range: &RB) -> Option<(u64, Option<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.checked_add(1),
        Bound::Excluded(e) => Some(*e),
        Bound::Unbounded => None,
    };
    if end.is_some_and(|e| e <= start) {
        return None;
    }
    Some((start, end))
}

fn read_range<RB: RangeBounds<u64>>(cache: &RwLock<LogCache>, range: RB) -> Vec<Entry> {
    let Some((start, end)) = index_range(&range) else {
        return Vec::new();
    };
    let cache = cache.read();
    match end {
        Some(end) => cache
            .entries
            .range(start..end)
            .map(|(_, e)| e.clone())
            .collect(),
        None => cache
            .entries
            .range(start..)
            .map(|(_, e)| e.clone())
            .collect(),
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read_range(&self.cache, range))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(read_range(&self.cache, range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let cache = self.cache.read();
        let last = cache.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: cache.last_purged,
            last_log_id: last.or(cache.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            cache: self.cache.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let err = |e: String| sto_err(ErrorSubject::Vote, ErrorVerb::Write, e);
        let record =
            codec::encode_record(vote, SMALL_FILE_BYTES_MAX).map_err(|e| err(e.to_string()))?;
        let (done, rx) = oneshot::channel();
        self.send(WriteCmd::SaveVote { record, done }).await?;
        rx.await
            .map_err(|_| err("the log writer thread has stopped".into()))?
            .map_err(|e| err(e.to_string()))?;
        self.cache.write().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.cache.read().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let record = codec::encode_record(&committed, SMALL_FILE_BYTES_MAX)
            .map_err(|e| write_logs_err(e.to_string()))?;
        self.cache.write().committed = committed;
        self.committed_tx.send_replace(committed.map(|c| c.index));
        self.send(WriteCmd::SaveCommitted { record }).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.cache.read().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut records = Vec::new();
        let mut cached = Vec::new();
        for entry in entries {
            let record = codec::encode_record(&entry, LOG_RECORD_BYTES_MAX)
                .map_err(|e| write_logs_err(format!("entry {}: {e}", entry.log_id)))?;
            records.push((entry.log_id.index, record));
            cached.push(entry);
        }
        {
            let mut cache = self.cache.write();
            for entry in cached {
                cache.entries.insert(entry.log_id.index, entry);
            }
        }
        self.send(WriteCmd::Append {
            records,
            done: callback,
        })
        .await
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.cache.write().entries.split_off(&log_id.index);
        let (done, rx) = oneshot::channel();
        self.send(WriteCmd::Truncate {
            from: log_id.index,
            done,
        })
        .await?;
        rx.await
            .map_err(|_| write_logs_err("the log writer thread has stopped"))?
            .map_err(write_logs_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        {
            let mut cache = self.cache.write();
            let keep = cache.entries.split_off(&(log_id.index.saturating_add(1)));
            cache.entries = keep;
            if !matches!(&cache.last_purged, Some(p) if *p >= log_id) {
                cache.last_purged = Some(log_id);
            }
        }
        self.send(WriteCmd::Purge { upto: log_id }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Crash, MemDisk};

    fn no_reserve(disk: &Arc<dyn Disk>, dir: &Path) -> Arc<Reserve> {
        Reserve::open(disk.clone(), dir, 0)
    }

    fn setup() -> (MemDisk, Arc<dyn Disk>, PathBuf) {
        let mem = MemDisk::new();
        let disk: Arc<dyn Disk> = Arc::new(mem.clone());
        let dir = PathBuf::from("/q");
        disk.create_dir_all(&dir).unwrap();
        (mem, disk, dir)
    }

    #[test]
    fn index_ranges() {
        assert_eq!(index_range(&(3..7)), Some((3, Some(7))));
        assert_eq!(index_range(&(3..=7)), Some((3, Some(8))));
        assert_eq!(index_range(&(3..)), Some((3, None)));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 7..3;
        assert_eq!(index_range(&reversed), None);
        assert_eq!(index_range(&(3..3)), None);
        assert_eq!(index_range(&(..=u64::MAX)), Some((0, None)));
    }

    // Entry durability through openraft's flush callback is tested end to end in
    // tests/storage_faults.rs (openraft does not let us build a `LogFlushed` here).
    #[tokio::test]
    async fn a_vote_acknowledged_before_power_loss_survives_it() {
        let (mem, disk, dir) = setup();
        let (mut store, done, _) =
            LogStore::open(disk.clone(), &dir, no_reserve(&disk, &dir)).unwrap();
        store.save_vote(&Vote::new(3, 2)).await.unwrap();
        store.save_vote(&Vote::new(4, 1)).await.unwrap();
        mem.crash(Crash::PowerLoss);
        drop(store);
        done.await.unwrap();
        let (mut store, _, _) =
            LogStore::open(disk.clone(), &dir, no_reserve(&disk, &dir)).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(4, 1)));
    }

    #[tokio::test]
    async fn a_vote_whose_fsync_fails_is_not_acknowledged_and_poisons_the_writer() {
        let (mem, disk, dir) = setup();
        let (mut store, done, _) =
            LogStore::open(disk.clone(), &dir, no_reserve(&disk, &dir)).unwrap();
        store.save_vote(&Vote::new(3, 2)).await.unwrap();
        mem.fail_syncs(true);
        assert!(store.save_vote(&Vote::new(4, 1)).await.is_err());
        mem.fail_syncs(false);
        // fsyncgate: after one failed fsync nothing is trusted until a restart.
        assert!(store.save_vote(&Vote::new(5, 1)).await.is_err());
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
        mem.crash(Crash::PowerLoss);
        drop(store);
        done.await.unwrap();
        let (mut store, _, _) =
            LogStore::open(disk.clone(), &dir, no_reserve(&disk, &dir)).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_vote_on_a_full_disk_spends_the_reserve_then_waits_for_space() {
        let (mem, disk, dir) = setup();
        let reserve = Reserve::open(disk.clone(), &dir, 4096);
        assert_eq!(reserve.held(), 4096);
        let (mut store, _done, _) = LogStore::open(disk.clone(), &dir, reserve.clone()).unwrap();
        // Nothing left but the reserve.
        mem.set_capacity(Some(4096 + 64));
        let filler = disk.open(&dir.join("filler"), true).unwrap();
        let _ = filler.write_all_at(&[0u8; 64], 0);
        store.save_vote(&Vote::new(3, 2)).await.unwrap();
        assert_eq!(reserve.held(), 0, "the reserve paid for the vote");
        // Now truly full: the next vote waits (it is not an error) until space returns.
        mem.set_capacity(Some(
            mem.read(&dir.join(VOTE_FILE_NAME)).unwrap().len() as u64 + 64,
        ));
        let space = {
            let mem = mem.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                assert!(reserve.waiting());
                mem.set_capacity(None);
            })
        };
        store.save_vote(&Vote::new(4, 1)).await.unwrap();
        space.await.unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(4, 1)));
    }

    #[tokio::test]
    async fn a_corrupt_vote_file_refuses_to_start() {
        let (mem, disk, dir) = setup();
        let (mut store, done, _) =
            LogStore::open(disk.clone(), &dir, no_reserve(&disk, &dir)).unwrap();
        store.save_vote(&Vote::new(3, 2)).await.unwrap();
        drop(store);
        done.await.unwrap();
        let path = dir.join(VOTE_FILE_NAME);
        let mut bytes = mem.read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        mem.write(&path, &bytes);
        assert!(matches!(
            LogStore::open(disk.clone(), &dir, no_reserve(&disk, &dir)),
            Err(QuorumError::Corrupt { .. })
        ));
    }
}
