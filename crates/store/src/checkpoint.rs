//! Small metadata files and how they are written crash-safely: tmp → fsync → rename → fsync dir.
//!
//! Files: the data-dir offset checkpoints (`recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint`, Kafka's text format), the
//! per-partition `leader-epoch-checkpoint` (Kafka's text format) and producer-state snapshots
//! (binary with a CRC-32C). A reader of any of these never trusts it beyond its checks: a missing
//! or malformed file means "unknown", which costs recovery time, never data.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::TopicPartition;
use crate::limits::CHECKPOINT_FILE_BYTES_MAX;
use crate::storage::Storage;

/// Data-dir file: per partition, the offset below which the log is known to be on disk.
pub(crate) const RECOVERY_POINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Data-dir file: per partition, the log start offset.
pub(crate) const LOG_START_FILE: &str = "log-start-offset-checkpoint";
/// Data-dir file: per partition, the high watermark.
pub(crate) const HIGH_WATERMARK_FILE: &str = "replication-offset-checkpoint";
/// Partition file: leader epoch → start offset.
pub(crate) const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";
/// Data-dir marker of a clean shutdown.
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";
/// Partition file: the persisted `LogConfig`.
pub(crate) const CONFIG_FILE: &str = "config.json";
/// Suffix of producer snapshots.
pub(crate) const SNAPSHOT_SUFFIX: &str = "snapshot";

const SNAPSHOT_MAGIC: &[u8; 4] = b"MRPS";
/// Version written: the payload layout of `producer_state` (v2 adds transactions; v1 is read).
const SNAPSHOT_VERSION: u16 = crate::producer_state::SNAPSHOT_V2;
/// Oldest version read.
const SNAPSHOT_VERSION_MIN: u16 = 1;

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Wraps an error whose outcome is unknown (a failed fsync) so that it never reads as ENOSPC
/// (`free_space::is_no_space`), whatever its error number: such an error is never retried as
/// if nothing had happened.
pub(crate) fn unknown_outcome(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// How much of an atomic write (`path.tmp`, rename over `path`) is synced before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// fdatasync the file, rename, fsync the directory.
    Synced,
    /// fdatasync the file and rename; the caller fsyncs the directory after more changes to it.
    FileOnly,
    /// Nothing synced; the caller makes the whole file system durable afterwards
    /// (`Store::create_partitions`).
    Unsynced,
}

/// Writes `bytes` to `path` atomically and durably: `path.tmp`, fdatasync, rename, fsync dir.
pub(crate) fn write_atomic(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_as(storage, path, bytes, Durability::Synced)
}

/// Writes `bytes` to `path` through `path.tmp` and a rename, synced as `durability` says.
pub(crate) fn write_atomic_as(
    storage: &dyn Storage,
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> io::Result<()> {
    let tmp = tmp_path(path);
    let file = storage.open(&tmp, true)?;
    let written = storage
        .set_len(&file, 0)
        .and_then(|()| storage.write_at(&file, bytes, 0));
    if let Err(e) = written {
        // Out of space: `path` is untouched; give the temporary's blocks back at once.
        drop(file);
        if crate::error::is_no_space(&e) {
            let _ = storage.remove_file(&tmp);
        }
        return Err(e);
    }
    if durability != Durability::Unsynced {
        storage
            .sync(&file)
            .map_err(|e| unknown_outcome("fdatasync", e))?;
    }
    drop(file);
    storage.rename(&tmp, path)?;
    match path.parent() {
        Some(dir) if durability == Durability::Synced => storage
            .sync_dir(dir)
            .map_err(|e| unknown_outcome("fsync of the directory", e)),
        _ => Ok(()),
    }
}

/// Reads a whole small file; `Ok(None)` if missing; an error if larger than the limit.
pub(crate) fn read_bounded(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(m) if m.len() > CHECKPOINT_FILE_BYTES_MAX as u64 => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is larger than {CHECKPOINT_FILE_BYTES_MAX} bytes",
                    path.display()
                ),
            ))
        }
        Ok(_) => {}
    }
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Kafka's offset checkpoint text: "0\n<count>\n" then "<topic> <partition> <offset>\n" lines.
pub(crate) fn encode_offsets(offsets: &BTreeMap<TopicPartition, i64>) -> Vec<u8> {
    let mut s = format!("0\n{}\n", offsets.len());
    for (tp, off) in offsets {
        s.push_str(&format!("{} {} {}\n", tp.topic, tp.partition, off));
    }
    s.into_bytes()
}

/// Parses Kafka's offset checkpoint text; `None` if malformed.
pub(crate) fn decode_offsets(bytes: &[u8]) -> Option<BTreeMap<TopicPartition, i64>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let count: usize = lines.next()?.parse().ok()?;
    let mut out = BTreeMap::new();
    for line in lines.by_ref().take(count) {
        let mut parts = line.rsplitn(3, ' ');
        let offset: i64 = parts.next()?.parse().ok()?;
        let partition: i32 = parts.next()?.parse().ok()?;
        let topic = parts.next()?;
        out.insert(TopicPartition::new(topic, partition), offset);
    }
    if out.len() != count || lines.next().is_some() {
        return None;
    }
    Some(out)
}

/// Kafka's leader-epoch-checkpoint text: "0\n<count>\n" then "<epoch> <start offset>\n" lines.
pub(crate) fn encode_epochs(entries: &[(i32, i64)]) -> Vec<u8> {
    let mut s = format!("0\n{}\n", entries.len());
    for (epoch, start) in entries {
        s.push_str(&format!("{epoch} {start}\n"));
    }
    s.into_bytes()
}

/// Parses a leader-epoch-checkpoint; `None` if malformed.
pub(crate) fn decode_epochs(bytes: &[u8]) -> Option<Vec<(i32, i64)>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let count: usize = lines.next()?.parse().ok()?;
    let mut out = Vec::new();
    for line in lines.by_ref().take(count) {
        let (e, s) = line.split_once(' ')?;
        out.push((e.parse().ok()?, s.parse().ok()?));
    }
    if out.len() != count || lines.next().is_some() {
        return None;
    }
    Some(out)
}

/// Producer snapshot file: magic "MRPS" · u16 version · u32 CRC-32C of the rest · i64 offset ·
/// payload (see `producer_state.rs`).
pub(crate) fn encode_snapshot(offset: i64, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(8 + payload.len());
    body.extend_from_slice(&offset.to_be_bytes());
    body.extend_from_slice(payload);
    let mut out = Vec::with_capacity(10 + body.len());
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes a producer snapshot file → (version, offset, payload); `None` if malformed, of an
/// unknown version or the CRC fails.
pub(crate) fn decode_snapshot(bytes: &[u8]) -> Option<(u16, i64, &[u8])> {
    if bytes.get(..4)? != SNAPSHOT_MAGIC {
        return None;
    }
    let version = u16::from_be_bytes(bytes.get(4..6)?.try_into().ok()?);
    if !(SNAPSHOT_VERSION_MIN..=SNAPSHOT_VERSION).contains(&version) {
        return None;
    }
    let crc = u32::from_be_bytes(bytes.get(6..10)?.try_into().ok()?);
    let body = bytes.get(10..)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let offset = i64::from_be_bytes(body.get(..8)?.try_into().ok()?);
    Some((version, offset, body.get(8..)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::OsStorage;

    #[test]
    fn offsets_round_trip() {
        let mut m = BTreeMap::new();
        m.insert(TopicPartition::new("a.b-c_d", 3), 42);
        m.insert(TopicPartition::new("x", 0), 0);
        let enc = encode_offsets(&m);
        assert_eq!(decode_offsets(&enc), Some(m));
        assert_eq!(decode_offsets(b"0\n2\nx 0 1\n"), None);
        assert_eq!(decode_offsets(b"1\n0\n"), None);
        assert_eq!(decode_offsets(b"0\n1\nx y 1\n"), None);
    }

    #[test]
    fn epochs_and_snapshots_round_trip() {
        let e = vec![(0, 0), (3, 100)];
        assert_eq!(decode_epochs(&encode_epochs(&e)), Some(e));
        let snap = encode_snapshot(77, b"payload");
        assert_eq!(
            decode_snapshot(&snap),
            Some((SNAPSHOT_VERSION, 77, &b"payload"[..]))
        );
        let mut bad = snap.clone();
        let n = bad.len() - 1;
        bad[n] ^= 1;
        assert_eq!(decode_snapshot(&bad), None);
        assert_eq!(decode_snapshot(&snap[..5]), None);
    }

    #[test]
    fn atomic_write_replaces_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("f");
        write_atomic(&OsStorage, &p, b"one").expect("write");
        write_atomic(&OsStorage, &p, b"two").expect("write");
        assert_eq!(read_bounded(&p).expect("read"), Some(b"two".to_vec()));
        assert!(!tmp_path(&p).exists());
        assert_eq!(
            read_bounded(&dir.path().join("missing")).expect("read"),
            None
        );
    }
}
