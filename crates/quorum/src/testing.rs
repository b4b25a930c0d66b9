//! `MemDisk`: an in-memory [`Disk`] that models what survives a crash, for storage tests.
//!
//! Each file (inode) has its current bytes and the bytes last made durable by `sync_data`; each
//! name has its current target and the target last made durable by `sync_dir` of its directory
//! (the POSIX rule: a create, rename or remove survives a power loss only after the directory is
//! fsynced). [`MemDisk::crash`] applies one of the crash models of [`Crash`]; handles opened before
//! it fail afterwards, as the old process is gone. [`MemDisk::fail_syncs`] makes every fsync
//! return EIO without making anything durable. Directories themselves are always durable (a
//! simplification: the quorum creates its directory once, before anything else).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::disk::{Disk, DiskFile};

/// What a crash keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// `kill -9`: the page cache survives, so every completed write and rename stays.
    ProcessKill,
    /// Power loss: only what was fsynced stays (file bytes after `sync_data`, names after
    /// `sync_dir`).
    PowerLoss,
    /// Power loss during a write: as `PowerLoss`, but a file whose un-synced bytes extend its
    /// durable bytes keeps the first half of that extension (a torn tail).
    PowerLossTornTail,
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    inodes: Vec<Inode>,
    live: BTreeMap<PathBuf, usize>,
    durable: BTreeMap<PathBuf, usize>,
    dirs: BTreeSet<PathBuf>,
    fail_syncs: bool,
    syncs: u64,
    /// File-system size for `free_bytes` and ENOSPC; `None`: unlimited.
    capacity: Option<u64>,
}

impl State {
    /// Bytes held by the files that have a name.
    fn used(&self) -> u64 {
        self.live
            .values()
            .filter_map(|i| self.inodes.get(*i))
            .map(|n| n.data.len() as u64)
            .sum()
    }

    /// How many more bytes fit.
    fn free(&self) -> u64 {
        self.capacity
            .map_or(u64::MAX, |c| c.saturating_sub(self.used()))
    }
}

/// An in-memory file system with crash models; clones share the same files.
#[derive(Debug, Clone, Default)]
pub struct MemDisk {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct MemFile {
    state: Arc<Mutex<State>>,
    inode: usize,
    generation: u64,
}

fn stale() -> io::Error {
    io::Error::other("file handle from before the crash")
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error())
}

impl MemDisk {
    /// An empty file system.
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    /// Crashes the machine: applies `crash` to every file and name; open handles go stale.
    pub fn crash(&self, crash: Crash) {
        let mut st = self.state.lock();
        st.generation += 1;
        if crash == Crash::ProcessKill {
            return;
        }
        st.live = st.durable.clone();
        for inode in &mut st.inodes {
            let keep = if crash == Crash::PowerLossTornTail
                && inode.data.len() > inode.durable.len()
                && inode.data.starts_with(&inode.durable)
            {
                inode.durable.len() + (inode.data.len() - inode.durable.len()) / 2
            } else {
                0
            };
            if keep > 0 {
                inode.data.truncate(keep);
                inode.durable = inode.data.clone();
            } else {
                inode.data = inode.durable.clone();
            }
        }
    }

    /// From now on every `sync_data`/`sync_dir` fails with EIO (and makes nothing durable).
    pub fn fail_syncs(&self, fail: bool) {
        self.state.lock().fail_syncs = fail;
    }

    /// Limits the file system to `capacity` bytes (`None`: unlimited): a write that would grow
    /// the files past it writes what fits and fails with ENOSPC, as a real full disk does.
    pub fn set_capacity(&self, capacity: Option<u64>) {
        self.state.lock().capacity = capacity;
    }

    /// How many successful fsyncs (files and directories) were made.
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// The current bytes of `path`, if it exists.
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.state.lock();
        let inode = *st.live.get(path)?;
        st.inodes.get(inode).map(|i| i.data.clone())
    }

    /// Appends `bytes` to `path` without making them durable (a write in flight when the power
    /// goes); false if it does not exist.
    pub fn append_unsynced(&self, path: &Path, bytes: &[u8]) -> bool {
        let mut st = self.state.lock();
        let Some(inode) = st.live.get(path).copied() else {
            return false;
        };
        match st.inodes.get_mut(inode) {
            Some(i) => {
                i.data.extend_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Overwrites the current bytes of `path` (to inject corruption); false if it does not exist.
    pub fn write(&self, path: &Path, bytes: &[u8]) -> bool {
        let mut st = self.state.lock();
        let Some(inode) = st.live.get(path).copied() else {
            return false;
        };
        match st.inodes.get_mut(inode) {
            Some(i) => {
                i.data = bytes.to_vec();
                i.durable = bytes.to_vec();
                true
            }
            None => false,
        }
    }
}

impl Disk for MemDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        for a in dir.ancestors() {
            st.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn DiskFile>> {
        let mut st = self.state.lock();
        let inode = match st.live.get(path) {
            Some(i) => *i,
            None if create => {
                let parent = path.parent().unwrap_or(Path::new(""));
                if !st.dirs.contains(parent) {
                    return Err(io::Error::from(io::ErrorKind::NotFound));
                }
                st.inodes.push(Inode::default());
                let i = st.inodes.len() - 1;
                st.live.insert(path.to_path_buf(), i);
                i
            }
            None => return Err(io::Error::from(io::ErrorKind::NotFound)),
        };
        Ok(Box::new(MemFile {
            state: self.state.clone(),
            inode,
            generation: st.generation,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let inode = st
            .live
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.live.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.state.lock().live.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        if st.fail_syncs {
            return Err(eio());
        }
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let live: Vec<(PathBuf, usize)> = st
            .live
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        st.durable.retain(|p, _| !in_dir(p));
        st.durable.extend(live);
        st.syncs += 1;
        Ok(())
    }

    fn free_bytes(&self, _dir: &Path) -> io::Result<u64> {
        Ok(self.state.lock().free())
    }
}

impl MemFile {
    fn with<R>(&self, f: impl FnOnce(&mut State, usize) -> io::Result<R>) -> io::Result<R> {
        let mut st = self.state.lock();
        if st.generation != self.generation {
            return Err(stale());
        }
        f(&mut st, self.inode)
    }
}

fn inode(st: &mut State, i: usize) -> io::Result<&mut Inode> {
    st.inodes.get_mut(i).ok_or_else(stale)
}

impl DiskFile for MemFile {
    fn size(&self) -> io::Result<u64> {
        self.with(|st, i| Ok(inode(st, i)?.data.len() as u64))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|st, i| {
            let data = &inode(st, i)?.data;
            let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
            let src = start
                .checked_add(buf.len())
                .and_then(|end| data.get(start..end))
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(|st, i| {
            let free = usize::try_from(st.free()).unwrap_or(usize::MAX);
            let data = &mut inode(st, i)?.data;
            let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
            let end = start
                .checked_add(buf.len())
                .ok_or(io::ErrorKind::InvalidInput)?;
            // What fits is written; the rest fails with ENOSPC (a short write, then the error).
            let fits = data.len().saturating_add(free).max(start);
            let written_end = end.min(fits);
            if data.len() < written_end {
                data.resize(written_end, 0);
            }
            if let (Some(dst), Some(src)) = (
                data.get_mut(start..written_end),
                buf.get(..written_end - start),
            ) {
                dst.copy_from_slice(src);
            }
            if written_end < end {
                return Err(enospc());
            }
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|st, i| {
            let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
            inode(st, i)?.data.resize(len, 0);
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|st, i| {
            if st.fail_syncs {
                return Err(eio());
            }
            let node = inode(st, i)?;
            node.durable = node.data.clone();
            st.syncs += 1;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::write_atomic;

    #[test]
    fn power_loss_keeps_only_synced_bytes_and_names() {
        let disk = MemDisk::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        let f = disk.open(&dir.join("a"), true).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        f.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        f.write_all_at(b" world", 5).unwrap();
        let g = disk.open(&dir.join("b"), true).unwrap();
        g.write_all_at(b"x", 0).unwrap();
        g.sync_data().unwrap(); // data synced, name not
        disk.crash(Crash::PowerLoss);
        assert!(f.size().is_err(), "old handles are stale after a crash");
        assert_eq!(disk.read(&dir.join("a")).unwrap(), b"hello");
        assert!(disk.read(&dir.join("b")).is_none());
    }

    #[test]
    fn torn_tail_keeps_half_and_kill_keeps_all() {
        let disk = MemDisk::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        let f = disk.open(&dir.join("a"), true).unwrap();
        f.write_all_at(b"ab", 0).unwrap();
        f.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        f.write_all_at(b"cdef", 2).unwrap();
        disk.crash(Crash::PowerLossTornTail);
        assert_eq!(disk.read(&dir.join("a")).unwrap(), b"abcd");
        let f = disk.open(&dir.join("a"), false).unwrap();
        f.write_all_at(b"zz", 4).unwrap();
        disk.crash(Crash::ProcessKill);
        assert_eq!(disk.read(&dir.join("a")).unwrap(), b"abcdzz");
    }

    #[test]
    fn failing_sync_makes_nothing_durable() {
        let disk = MemDisk::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        write_atomic(&disk, &dir.join("v"), &[b"one"]).unwrap();
        disk.fail_syncs(true);
        assert!(write_atomic(&disk, &dir.join("v"), &[b"two"]).is_err());
        disk.fail_syncs(false);
        disk.crash(Crash::PowerLoss);
        assert_eq!(disk.read(&dir.join("v")).unwrap(), b"one");
    }
}
