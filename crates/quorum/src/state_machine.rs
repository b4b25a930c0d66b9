//! openraft's `RaftStateMachine` over the application's [`StateMachine`], and the snapshot file.
//!
//! Applying: each committed entry goes to `StateMachine::apply(index, payload)`; blank entries
//! (a new leader's first entry) and membership entries are not shown to the application, so the
//! indexes it sees increase but are not contiguous. The application's state lives in memory only:
//! it is rebuilt at start from the snapshot plus the committed entries after it (openraft
//! re-applies them from `read_committed`; entries committed but not yet known as committed locally
//! are applied once the leader says so).
//!
//! Snapshot (`quorum.snapshot`): one record holding the snapshot's metadata (last applied log id,
//! membership, id) and the length and CRC-32C of the data, followed by the data (the bytes of
//! `StateMachine::snapshot`). It is replaced only through tmp → fsync → rename → fsync dir, and
//! never by an older snapshot. `StateMachine::snapshot` runs on openraft's state-machine task (it
//! must be fast and in memory); the file is written on a blocking thread.
//!
//! Locking: `SnapshotFiles::current` is a short mutex; `SnapshotFiles::write` serializes the
//! snapshot writers (builds and installs may overlap) and is held only on blocking threads.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, StorageIOError,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::codec::{self, parse_record_header, RECORD_HEADER_BYTES};
use crate::disk::{self, Disk};
use crate::limits::{LOG_RECORD_BYTES_MAX, SNAPSHOT_BYTES_MAX};
use crate::reserve::Reserve;
use crate::types::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use crate::{QuorumError, StateMachine};

/// The snapshot file's name inside the quorum directory.
pub const SNAPSHOT_FILE_NAME: &str = "quorum.snapshot";

const SNAPSHOT_MAGIC: u64 = u64::from_be_bytes(*b"MRQSNAP\0");
const SNAPSHOT_FORMAT_VERSION: u16 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct SnapshotHeader {
    magic: u64,
    version: u16,
    meta: SnapshotMeta,
    data_len: u64,
    data_crc: u32,
}

/// The current snapshot, held in memory (it is what followers are sent).
#[derive(Debug, Clone)]
pub struct CurrentSnapshot {
    /// Its metadata.
    pub meta: SnapshotMeta,
    /// The `StateMachine::snapshot` bytes.
    pub data: Arc<Vec<u8>>,
}

/// The snapshot file and the in-memory copy of the current snapshot.
#[derive(Debug)]
pub struct SnapshotFiles {
    disk: Arc<dyn Disk>,
    path: PathBuf,
    current: Mutex<Option<CurrentSnapshot>>,
    write: Mutex<()>,
    reserve: Arc<Reserve>,
}

fn sm_err(subject: ErrorSubject<u64>, verb: ErrorVerb, e: impl ToString) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::error(e.to_string())).into()
}

impl SnapshotFiles {
    /// Loads the snapshot in `dir`, if any. Blocking. A snapshot that fails its checks is an
    /// error: the log before it may already be purged, so starting without it would lose state.
    /// A write that finds the disk full waits for space through `reserve` (see `reserve`).
    pub fn load(
        disk: Arc<dyn Disk>,
        dir: &Path,
        reserve: Arc<Reserve>,
    ) -> Result<SnapshotFiles, QuorumError> {
        let path = dir.join(SNAPSHOT_FILE_NAME);
        let current = read_snapshot(&*disk, &path)?;
        Ok(SnapshotFiles {
            disk,
            path,
            current: Mutex::new(current),
            write: Mutex::new(()),
            reserve,
        })
    }

    /// The current snapshot.
    pub fn current(&self) -> Option<CurrentSnapshot> {
        self.current.lock().clone()
    }

    /// Makes `snap` the current snapshot, durably, unless a snapshot at least as new is already
    /// current. Blocking.
    pub fn store(&self, snap: CurrentSnapshot) -> std::io::Result<()> {
        let _writer = self.write.lock();
        if let Some(cur) = &*self.current.lock() {
            if cur.meta.last_log_id >= snap.meta.last_log_id {
                return Ok(());
            }
        }
        let header = SnapshotHeader {
            magic: SNAPSHOT_MAGIC,
            version: SNAPSHOT_FORMAT_VERSION,
            meta: snap.meta.clone(),
            data_len: snap.data.len() as u64,
            data_crc: crc32c::crc32c(&snap.data),
        };
        let head =
            codec::encode_record(&header, LOG_RECORD_BYTES_MAX).map_err(std::io::Error::other)?;
        self.reserve.with_space("snapshot write", || {
            disk::write_atomic(&*self.disk, &self.path, &[&head, &snap.data])
        })?;
        *self.current.lock() = Some(snap);
        Ok(())
    }
}

fn read_snapshot(disk: &dyn Disk, path: &Path) -> Result<Option<CurrentSnapshot>, QuorumError> {
    let corrupt = |reason: &str| QuorumError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let io = |source| QuorumError::Io {
        context: format!("read {}", path.display()),
        source,
    };
    let file = match disk.open(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let len = file.size().map_err(io)?;
    let mut head = [0u8; RECORD_HEADER_BYTES];
    file.read_exact_at(&mut head, 0)
        .map_err(|_| corrupt("shorter than a record header"))?;
    let rec = parse_record_header(head, LOG_RECORD_BYTES_MAX)
        .ok_or_else(|| corrupt("header record too long"))?;
    let head_len = RECORD_HEADER_BYTES + rec.len;
    if (head_len as u64) > len {
        return Err(corrupt("header record runs past the end"));
    }
    let mut head_buf = vec![0u8; head_len];
    file.read_exact_at(&mut head_buf, 0).map_err(io)?;
    let (header, _) = codec::decode_record::<SnapshotHeader>(&head_buf, LOG_RECORD_BYTES_MAX)
        .ok_or_else(|| corrupt("invalid header record"))?;
    if header.magic != SNAPSHOT_MAGIC || header.version != SNAPSHOT_FORMAT_VERSION {
        return Err(corrupt("unknown magic or version"));
    }
    let data_len = usize::try_from(header.data_len)
        .ok()
        .filter(|l| *l <= SNAPSHOT_BYTES_MAX)
        .ok_or_else(|| corrupt("data longer than SNAPSHOT_BYTES_MAX"))?;
    if (head_len as u64).checked_add(header.data_len) != Some(len) {
        return Err(corrupt("file length does not match the header"));
    }
    let mut data = vec![0u8; data_len];
    file.read_exact_at(&mut data, head_len as u64).map_err(io)?;
    if crc32c::crc32c(&data) != header.data_crc {
        return Err(corrupt("data CRC mismatch"));
    }
    Ok(Some(CurrentSnapshot {
        meta: header.meta,
        data: Arc::new(data),
    }))
}

/// The state machine handed to openraft.
pub struct SmStore {
    sm: Arc<dyn StateMachine>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    files: Arc<SnapshotFiles>,
    builds: u64,
}

impl SmStore {
    /// Wraps `sm`, which must already hold the state of `files`' current snapshot (if any).
    pub fn new(sm: Arc<dyn StateMachine>, files: Arc<SnapshotFiles>) -> SmStore {
        let (last_applied, membership) = match files.current() {
            Some(s) => (s.meta.last_log_id, s.meta.last_membership.clone()),
            None => (None, StoredMembership::default()),
        };
        SmStore {
            sm,
            last_applied,
            membership,
            files,
            builds: 0,
        }
    }
}

/// Builds one snapshot from bytes taken while the state machine was at `meta.last_log_id`.
pub struct SnapshotBuilder {
    meta: SnapshotMeta,
    /// The state machine's snapshot, or why it could not make one.
    data: Result<Vec<u8>, String>,
    files: Arc<SnapshotFiles>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let err = |e: String| sm_err(ErrorSubject::Snapshot(None), ErrorVerb::Write, e);
        let data = std::mem::replace(&mut self.data, Ok(Vec::new()))
            .map_err(|e| err(format!("StateMachine::snapshot failed: {e}")))?;
        if data.len() > SNAPSHOT_BYTES_MAX {
            return Err(err(format!(
                "snapshot of {} bytes exceeds SNAPSHOT_BYTES_MAX ({SNAPSHOT_BYTES_MAX})",
                data.len()
            )));
        }
        let snap = CurrentSnapshot {
            meta: self.meta.clone(),
            data: Arc::new(data),
        };
        let files = self.files.clone();
        let stored = snap.clone();
        tokio::task::spawn_blocking(move || files.store(stored))
            .await
            .map_err(|e| err(e.to_string()))?
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(last_log_id = ?snap.meta.last_log_id, bytes = snap.data.len(), "metadata snapshot written");
        Ok(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data.to_vec())),
        })
    }
}

impl RaftStateMachine<TypeConfig> for SmStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<u8>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut responses = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let response = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(payload) => self.sm.apply(entry.log_id.index, &payload.0),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                    Vec::new()
                }
            };
            responses.push(response);
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        self.builds += 1;
        let snapshot_id = match &self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, self.builds),
            None => format!("none-{}", self.builds),
        };
        SnapshotBuilder {
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            data: self.sm.snapshot(),
            files: self.files.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let err = |e: String| sm_err(ErrorSubject::Snapshot(None), ErrorVerb::Write, e);
        let data = snapshot.into_inner();
        if data.len() > SNAPSHOT_BYTES_MAX {
            return Err(err(format!("received snapshot of {} bytes", data.len())));
        }
        let last_index = meta.last_log_id.map_or(0, |l| l.index);
        self.sm
            .restore(last_index, &data)
            .map_err(|e| err(format!("StateMachine::restore refused the snapshot: {e}")))?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        let snap = CurrentSnapshot {
            meta: meta.clone(),
            data: Arc::new(data),
        };
        let files = self.files.clone();
        tokio::task::spawn_blocking(move || files.store(snap))
            .await
            .map_err(|e| err(e.to_string()))?
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(last_log_id = ?meta.last_log_id, "metadata snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.files.current().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data.to_vec())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Crash, MemDisk};
    use openraft::CommittedLeaderId;

    fn snap(index: u64, data: &[u8]) -> CurrentSnapshot {
        CurrentSnapshot {
            meta: SnapshotMeta {
                last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), index)),
                last_membership: StoredMembership::default(),
                snapshot_id: format!("s{index}"),
            },
            data: Arc::new(data.to_vec()),
        }
    }

    #[test]
    fn snapshots_survive_power_loss_never_go_back_and_damage_is_refused() {
        let mem = MemDisk::new();
        let disk: Arc<dyn Disk> = Arc::new(mem.clone());
        let dir = PathBuf::from("/q");
        disk.create_dir_all(&dir).unwrap();
        let files =
            SnapshotFiles::load(disk.clone(), &dir, Reserve::open(disk.clone(), &dir, 0)).unwrap();
        assert!(files.current().is_none());
        files.store(snap(10, b"ten")).unwrap();
        files.store(snap(5, b"five")).unwrap(); // older: ignored
        mem.crash(Crash::PowerLoss);
        let files =
            SnapshotFiles::load(disk.clone(), &dir, Reserve::open(disk.clone(), &dir, 0)).unwrap();
        let cur = files.current().unwrap();
        assert_eq!(cur.data.as_slice(), b"ten");
        assert_eq!(cur.meta.snapshot_id, "s10");
        // A failing fsync leaves the previous snapshot.
        mem.fail_syncs(true);
        assert!(files.store(snap(20, b"twenty")).is_err());
        mem.fail_syncs(false);
        mem.crash(Crash::PowerLoss);
        let files =
            SnapshotFiles::load(disk.clone(), &dir, Reserve::open(disk.clone(), &dir, 0)).unwrap();
        assert_eq!(files.current().unwrap().data.as_slice(), b"ten");
        // A flipped data bit is refused.
        let path = dir.join(SNAPSHOT_FILE_NAME);
        let mut bytes = mem.read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        mem.write(&path, &bytes);
        assert!(matches!(
            SnapshotFiles::load(disk.clone(), &dir, Reserve::open(disk.clone(), &dir, 0)),
            Err(QuorumError::Corrupt { .. })
        ));
    }
}
