//! The metadata log file `quorum.log`: its byte layout, recovery at start, and the three ways it
//! changes (append, truncate a conflicting suffix, purge a prefix already in a snapshot).
//!
//! Layout (docs/quorum.md has the byte table): one header record (magic, format version, the log
//! id of the last purged entry), then one record per entry in index order, each
//! `[u32 length][u32 CRC-32C][postcard(Entry)]` (`codec`).
//!
//! Invariants:
//! - Entries in the file are contiguous: the first has index `last_purged + 1` (or 0), each next
//!   one the previous index + 1, and log ids never decrease. Appends that would leave a hole are
//!   refused.
//! - `append` returns only after the records are written and fdatasynced; that is what lets
//!   `log_store` fire openraft's flush callback.
//! - The file is replaced only whole: creation and purge write `quorum.log.tmp`, fdatasync it,
//!   rename it over `quorum.log` and fsync the directory. So the header is never torn.
//! - Recovery keeps the longest valid prefix of records and cuts the rest (a torn tail from a
//!   crash during an append that was never acknowledged), with a warning naming the bytes cut.
//!
//! Locking: none. A `LogFile` is owned by the log writer thread (`log_store`); only the start-up
//! code touches it before that thread exists. It does not know openraft's callbacks or the vote.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::codec::{self, parse_record_header, RECORD_HEADER_BYTES};
use crate::disk::{self, Disk, DiskFile};
use crate::limits::{LOG_READ_CHUNK_BYTES, LOG_RECORD_BYTES_MAX, SMALL_FILE_BYTES_MAX};
use crate::types::{Entry, LogId};
use crate::QuorumError;

/// The log file's name inside the quorum directory.
pub const LOG_FILE_NAME: &str = "quorum.log";

const LOG_MAGIC: u64 = u64::from_be_bytes(*b"MRQLOG\0\0");
const LOG_FORMAT_VERSION: u16 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct LogHeader {
    magic: u64,
    version: u16,
    last_purged: Option<LogId>,
}

/// What recovery found in the file.
#[derive(Debug)]
pub struct Recovered {
    /// The valid entries, in index order.
    pub entries: Vec<Entry>,
    /// The log id of the last purged entry (from the header).
    pub last_purged: Option<LogId>,
    /// Bytes cut from the end (an invalid or torn tail).
    pub cut_bytes: u64,
}

/// The open log file.
#[derive(Debug)]
pub struct LogFile {
    disk: Arc<dyn Disk>,
    path: PathBuf,
    file: Box<dyn DiskFile>,
    /// Byte position of each entry; `positions[0]` holds entry `first_index`.
    positions: VecDeque<u64>,
    first_index: u64,
    /// File length: where the next record goes.
    end: u64,
    last_purged: Option<LogId>,
}

fn corrupt(path: &Path, reason: impl Into<String>) -> QuorumError {
    QuorumError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn io_err(context: &str, path: &Path) -> impl FnOnce(io::Error) -> QuorumError {
    let context = format!("{context} {}", path.display());
    move |source| QuorumError::Io { context, source }
}

fn header_record(last_purged: Option<LogId>) -> io::Result<Vec<u8>> {
    let header = LogHeader {
        magic: LOG_MAGIC,
        version: LOG_FORMAT_VERSION,
        last_purged,
    };
    codec::encode_record(&header, SMALL_FILE_BYTES_MAX).map_err(io::Error::other)
}

/// The index the entry after `last_purged` must have.
fn next_after(last_purged: &Option<LogId>) -> u64 {
    last_purged
        .as_ref()
        .map_or(0, |l| l.index.saturating_add(1))
}

impl LogFile {
    /// Opens (or creates, durably) the log file in `dir` and recovers its entries.
    pub fn open(disk: Arc<dyn Disk>, dir: &Path) -> Result<(LogFile, Recovered), QuorumError> {
        let path = dir.join(LOG_FILE_NAME);
        let file = match disk.open(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let header = header_record(None).map_err(io_err("encode header of", &path))?;
                disk::write_atomic(&*disk, &path, &[&header]).map_err(io_err("create", &path))?;
                disk.open(&path, false).map_err(io_err("open", &path))?
            }
            Err(e) => return Err(io_err("open", &path)(e)),
        };
        let len = file.size().map_err(io_err("stat", &path))?;
        let head_len = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(SMALL_FILE_BYTES_MAX + RECORD_HEADER_BYTES);
        let mut head = vec![0u8; head_len];
        file.read_exact_at(&mut head, 0)
            .map_err(io_err("read", &path))?;
        // The header is written only through tmp → fsync → rename, so a bad one is corruption,
        // not a torn write: refuse to guess.
        let (header, header_len) = codec::decode_record::<LogHeader>(&head, SMALL_FILE_BYTES_MAX)
            .ok_or_else(|| corrupt(&path, "invalid header record"))?;
        if header.magic != LOG_MAGIC || header.version != LOG_FORMAT_VERSION {
            return Err(corrupt(
                &path,
                format!("unknown magic or version {}", header.version),
            ));
        }
        let mut log = LogFile {
            disk,
            path,
            file,
            positions: VecDeque::new(),
            first_index: next_after(&header.last_purged),
            end: header_len as u64,
            last_purged: header.last_purged,
        };
        let entries = log.scan(len)?;
        let cut_bytes = len.saturating_sub(log.end);
        if cut_bytes > 0 {
            tracing::warn!(
                path = %log.path.display(),
                kept_entries = entries.len(),
                cut_bytes,
                "metadata log: cutting an invalid or torn tail"
            );
            log.file
                .set_len(log.end)
                .and_then(|()| log.file.sync_data())
                .map_err(io_err("truncate torn tail of", &log.path))?;
        }
        let recovered = Recovered {
            entries,
            last_purged: log.last_purged,
            cut_bytes,
        };
        Ok((log, recovered))
    }

    /// Reads records from `self.end` to `len`, keeping the valid contiguous prefix; leaves
    /// `self.end` after the last valid record.
    fn scan(&mut self, len: u64) -> Result<Vec<Entry>, QuorumError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut buf_start = self.end;
        let mut prev: Option<LogId> = self.last_purged;
        while self.end < len {
            let pos = self.end;
            let rel = usize::try_from(pos - buf_start).unwrap_or(usize::MAX);
            let have = buf.len().saturating_sub(rel);
            let mut need = RECORD_HEADER_BYTES;
            if have >= RECORD_HEADER_BYTES {
                let head: [u8; RECORD_HEADER_BYTES] = match buf
                    .get(rel..rel + RECORD_HEADER_BYTES)
                    .and_then(|h| h.try_into().ok())
                {
                    Some(h) => h,
                    None => break,
                };
                match parse_record_header(head, LOG_RECORD_BYTES_MAX) {
                    Some(h) => need = RECORD_HEADER_BYTES + h.len,
                    None => break,
                }
            }
            if have < need {
                let remaining = len - pos;
                if (need as u64) > remaining {
                    break; // torn: the record runs past the end of the file
                }
                let want = (need.max(LOG_READ_CHUNK_BYTES) as u64).min(remaining) as usize;
                buf = vec![0u8; want];
                self.file
                    .read_exact_at(&mut buf, pos)
                    .map_err(io_err("read", &self.path))?;
                buf_start = pos;
                continue;
            }
            let Some((entry, used)) = buf
                .get(rel..)
                .and_then(|b| codec::decode_record::<Entry>(b, LOG_RECORD_BYTES_MAX))
            else {
                break;
            };
            // `prev` starts as the last purged log id, so this covers the first entry too.
            let expected = next_after(&prev);
            if entry.log_id.index != expected || prev.as_ref().is_some_and(|p| entry.log_id < *p) {
                tracing::warn!(
                    index = entry.log_id.index,
                    expected,
                    "metadata log: entry out of order"
                );
                break;
            }
            prev = Some(entry.log_id);
            self.positions.push_back(pos);
            entries.push(entry);
            self.end = pos + used as u64;
        }
        Ok(entries)
    }

    /// The index the next appended entry must have.
    pub fn next_index(&self) -> u64 {
        self.first_index.saturating_add(self.positions.len() as u64)
    }

    /// Appends encoded records (`(index, record)`) and fdatasyncs them.
    pub fn append(&mut self, records: &[(u64, Vec<u8>)]) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(records.iter().map(|(_, r)| r.len()).sum());
        let mut positions = Vec::with_capacity(records.len());
        let mut pos = self.end;
        for (next, (index, record)) in (self.next_index()..).zip(records) {
            if *index != next {
                return Err(io::Error::other(format!(
                    "append of index {index} would leave a hole: next is {next}"
                )));
            }
            positions.push(pos);
            pos += record.len() as u64;
            bytes.extend_from_slice(record);
        }
        if let Err(e) = self.file.write_all_at(&bytes, self.end) {
            // A short write leaves part of a record past `end`; put the file back to its old
            // length so that the outcome is known (nothing appended) and a retry writes the same
            // bytes at the same place. If even that fails, the outcome is unknown.
            return match self.file.set_len(self.end) {
                Ok(()) => Err(e),
                Err(e2) => Err(disk::unknown_outcome(
                    &format!("append failed ({e}) and cutting it back"),
                    e2,
                )),
            };
        }
        self.file
            .sync_data()
            .map_err(|e| disk::unknown_outcome("fdatasync", e))?;
        self.positions.extend(positions);
        self.end = pos;
        Ok(())
    }

    /// Removes entries from index `from` on (inclusive) and fdatasyncs the new length.
    pub fn truncate(&mut self, from: u64) -> io::Result<()> {
        if from >= self.next_index() {
            return Ok(());
        }
        let Some(keep) = from.checked_sub(self.first_index) else {
            return Err(io::Error::other(format!(
                "truncate from {from} would remove purged entries (first is {})",
                self.first_index
            )));
        };
        let keep = keep as usize;
        let Some(pos) = self.positions.get(keep).copied() else {
            return Ok(());
        };
        self.file.set_len(pos)?;
        self.file
            .sync_data()
            .map_err(|e| disk::unknown_outcome("fdatasync", e))?;
        self.positions.truncate(keep);
        self.end = pos;
        Ok(())
    }

    /// Removes entries up to `upto` (inclusive) by rewriting the file without them
    /// (tmp → fsync → rename → fsync dir). A crash before the rename leaves the old file, which
    /// is also correct: purging is only ever an optimisation.
    pub fn purge(&mut self, upto: LogId) -> io::Result<()> {
        if self.last_purged.as_ref().is_some_and(|p| *p >= upto) {
            return Ok(());
        }
        let next = self.next_index();
        let (start_pos, dropped) = if upto.index < self.first_index {
            (self.positions.front().copied().unwrap_or(self.end), 0usize)
        } else if upto.index.saturating_add(1) >= next {
            (self.end, self.positions.len())
        } else {
            let dropped = (upto.index + 1 - self.first_index) as usize;
            (
                self.positions.get(dropped).copied().unwrap_or(self.end),
                dropped,
            )
        };
        let header = header_record(Some(upto))?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = disk::tmp_path(&self.path);
        let new = self.disk.open(&tmp, true)?;
        let copied = self.copy_tail(&*new, &header, start_pos);
        let to = match copied {
            Ok(to) => to,
            Err(e) => {
                // Out of space: the old file is untouched; give the temporary's space back.
                drop(new);
                let _ = self.disk.remove_file(&tmp);
                return Err(e);
            }
        };
        new.sync_data()
            .map_err(|e| disk::unknown_outcome("fdatasync", e))?;
        self.disk.rename(&tmp, &self.path)?;
        self.disk
            .sync_dir(dir)
            .map_err(|e| disk::unknown_outcome("fsync of the directory", e))?;
        // The new file is in place; move the in-memory positions to it.
        let shift_from = start_pos;
        let shift_to = header.len() as u64;
        self.file = new;
        self.positions.drain(..dropped.min(self.positions.len()));
        for p in self.positions.iter_mut() {
            *p = *p - shift_from + shift_to;
        }
        self.first_index = self.first_index.max(upto.index.saturating_add(1));
        self.end = to;
        self.last_purged = Some(upto);
        Ok(())
    }

    /// Writes `header` and then this file's bytes from `start_pos` to its end into `new`;
    /// returns the new file's length.
    fn copy_tail(&self, new: &dyn DiskFile, header: &[u8], start_pos: u64) -> io::Result<u64> {
        new.set_len(0)?;
        new.write_all_at(header, 0)?;
        let mut from = start_pos;
        let mut to = header.len() as u64;
        let mut chunk = vec![0u8; LOG_READ_CHUNK_BYTES];
        while from < self.end {
            let n = ((self.end - from) as usize).min(LOG_READ_CHUNK_BYTES);
            let part = &mut chunk[..n];
            self.file.read_exact_at(part, from)?;
            new.write_all_at(part, to)?;
            from += n as u64;
            to += n as u64;
        }
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Crash, MemDisk};
    use crate::types::{Payload, TypeConfig};
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::<TypeConfig>::Normal(Payload(vec![index as u8; 10])),
        }
    }

    fn rec(e: &Entry) -> (u64, Vec<u8>) {
        (
            e.log_id.index,
            codec::encode_record(e, LOG_RECORD_BYTES_MAX).unwrap(),
        )
    }

    fn indexes(r: &Recovered) -> Vec<u64> {
        r.entries.iter().map(|e| e.log_id.index).collect()
    }

    fn setup() -> (MemDisk, Arc<dyn Disk>, PathBuf) {
        let mem = MemDisk::new();
        let disk: Arc<dyn Disk> = Arc::new(mem.clone());
        let dir = PathBuf::from("/q");
        disk.create_dir_all(&dir).unwrap();
        (mem, disk, dir)
    }

    #[test]
    fn appended_entries_survive_power_loss_and_tail_is_cut() {
        let (mem, disk, dir) = setup();
        let (mut log, r) = LogFile::open(disk.clone(), &dir).unwrap();
        assert!(r.entries.is_empty());
        log.append(&[rec(&entry(1, 0)), rec(&entry(1, 1))]).unwrap();
        // Written but not synced: a torn half of entry 2 reaches the file.
        let torn = rec(&entry(1, 2));
        log.file.write_all_at(&torn.1, log.end).unwrap();
        mem.crash(Crash::PowerLossTornTail);
        let (log, r) = LogFile::open(disk.clone(), &dir).unwrap();
        assert_eq!(indexes(&r), vec![0, 1]);
        assert!(r.cut_bytes > 0);
        assert_eq!(log.next_index(), 2);
        mem.crash(Crash::PowerLoss);
        let (_, r) = LogFile::open(disk, &dir).unwrap();
        assert_eq!(indexes(&r), vec![0, 1]);
        assert_eq!(r.cut_bytes, 0, "the cut itself was made durable");
    }

    #[test]
    fn holes_are_refused() {
        let (_mem, disk, dir) = setup();
        let (mut log, _) = LogFile::open(disk, &dir).unwrap();
        assert!(log.append(&[rec(&entry(1, 1))]).is_err());
        log.append(&[rec(&entry(1, 0))]).unwrap();
        assert!(log.append(&[rec(&entry(1, 2))]).is_err());
    }

    #[test]
    fn truncate_and_purge_survive_power_loss() {
        let (mem, disk, dir) = setup();
        let (mut log, _) = LogFile::open(disk.clone(), &dir).unwrap();
        let recs: Vec<_> = (0..10).map(|i| rec(&entry(1, i))).collect();
        log.append(&recs).unwrap();
        log.truncate(7).unwrap();
        log.append(&[rec(&entry(2, 7))]).unwrap();
        log.purge(entry(1, 3).log_id).unwrap();
        assert_eq!(log.next_index(), 8);
        log.append(&[rec(&entry(2, 8))]).unwrap();
        mem.crash(Crash::PowerLoss);
        let (mut log, r) = LogFile::open(disk.clone(), &dir).unwrap();
        assert_eq!(indexes(&r), vec![4, 5, 6, 7, 8]);
        assert_eq!(r.entries[3].log_id.leader_id.term, 2);
        assert_eq!(r.last_purged, Some(entry(1, 3).log_id));
        assert!(
            log.truncate(2).is_err(),
            "purged entries cannot be truncated"
        );
        // Purge past the last entry (a snapshot installed ahead of the log).
        log.purge(entry(3, 20).log_id).unwrap();
        assert_eq!(log.next_index(), 21);
        log.append(&[rec(&entry(3, 21))]).unwrap();
        mem.crash(Crash::PowerLoss);
        let (_, r) = LogFile::open(disk, &dir).unwrap();
        assert_eq!(indexes(&r), vec![21]);
    }

    #[test]
    fn failing_fsync_is_reported_and_unsynced_entries_are_not_kept() {
        let (mem, disk, dir) = setup();
        let (mut log, _) = LogFile::open(disk.clone(), &dir).unwrap();
        log.append(&[rec(&entry(1, 0))]).unwrap();
        mem.fail_syncs(true);
        assert!(log.append(&[rec(&entry(1, 1))]).is_err());
        mem.fail_syncs(false);
        mem.crash(Crash::PowerLoss);
        let (_, r) = LogFile::open(disk, &dir).unwrap();
        assert_eq!(indexes(&r), vec![0]);
    }

    #[test]
    fn an_append_that_finds_the_disk_full_is_cut_back_and_can_be_retried() {
        let (mem, disk, dir) = setup();
        let (mut log, _) = LogFile::open(disk.clone(), &dir).unwrap();
        log.append(&[rec(&entry(1, 0))]).unwrap();
        let before = mem.read(&dir.join(LOG_FILE_NAME)).unwrap();
        mem.set_capacity(Some(before.len() as u64 + 5));
        let e = log.append(&[rec(&entry(1, 1))]).unwrap_err();
        assert!(disk::is_no_space(&e), "{e}");
        assert_eq!(mem.read(&dir.join(LOG_FILE_NAME)).unwrap(), before);
        assert_eq!(log.next_index(), 1);
        // A purge that finds no space leaves the log as it was and its temporary file gone.
        let e = log.purge(entry(1, 0).log_id).unwrap_err();
        assert!(disk::is_no_space(&e), "{e}");
        assert!(mem
            .read(&disk::tmp_path(&dir.join(LOG_FILE_NAME)))
            .is_none());
        mem.set_capacity(None);
        log.append(&[rec(&entry(1, 1))]).unwrap();
        mem.crash(Crash::PowerLoss);
        let (_, r) = LogFile::open(disk, &dir).unwrap();
        assert_eq!(indexes(&r), vec![0, 1]);
    }

    #[test]
    fn corrupt_header_is_refused_and_bad_record_cuts_the_rest() {
        let (mem, disk, dir) = setup();
        let (mut log, _) = LogFile::open(disk.clone(), &dir).unwrap();
        let recs: Vec<_> = (0..4).map(|i| rec(&entry(1, i))).collect();
        log.append(&recs).unwrap();
        let path = dir.join(LOG_FILE_NAME);
        let mut bytes = mem.read(&path).unwrap();
        let third = log.positions[2] as usize;
        bytes[third + RECORD_HEADER_BYTES + 2] ^= 1;
        mem.write(&path, &bytes);
        let (_, r) = LogFile::open(disk.clone(), &dir).unwrap();
        assert_eq!(indexes(&r), vec![0, 1]);
        let mut bytes = mem.read(&path).unwrap();
        bytes[3] ^= 1;
        mem.write(&path, &bytes);
        assert!(matches!(
            LogFile::open(disk, &dir),
            Err(QuorumError::Corrupt { .. })
        ));
    }
}
