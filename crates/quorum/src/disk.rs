//! The file operations the quorum's storage uses, behind one trait so that tests can cut the
//! power (drop everything not fsynced) or make fsync fail.
//!
//! Every read and every mutation of the metadata log directory goes through [`Disk`] and
//! [`DiskFile`]: open/create, positioned read and write, set_len, fdatasync, rename, remove and
//! directory fsync. [`OsDisk`] is the real file system; `testing::MemDisk` is an in-memory one
//! that keeps, per file and per directory, what was made durable, so a test can "lose power".
//!
//! Also here: [`write_atomic`] (tmp → fsync → rename → fsync dir, the only way the vote and the
//! snapshot are replaced) and [`read_small`] (a whole small file, bounded before allocating).
//! Nothing here knows Raft.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// File-system operations on the metadata log directory.
pub trait Disk: Send + Sync + fmt::Debug + 'static {
    /// Creates a directory and its parents (existing is not an error).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Opens `path` for reading and writing; with `create`, creates it if missing (the new name
    /// is durable only after `sync_dir` of its directory). Missing without `create`: NotFound.
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn DiskFile>>;
    /// Atomic rename (durable after `sync_dir`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file; missing is not an error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// fsync of a directory: makes creates, renames and removes in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Bytes an unprivileged writer may still write on the file system that holds `dir`.
    fn free_bytes(&self, dir: &Path) -> io::Result<u64>;
}

/// One open file.
pub trait DiskFile: Send + Sync + fmt::Debug {
    /// Current length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reads exactly `buf.len()` bytes at `offset` (UnexpectedEof past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// fdatasync: the file's data and length are durable when this returns `Ok`.
    fn sync_data(&self) -> io::Result<()>;
    /// Makes `[offset, offset + len)` allocated on disk (zeros where nothing was written), so
    /// that later writes there cannot fail for lack of space. The default writes zeros.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        const CHUNK: u64 = 1024 * 1024;
        let zeros = vec![0u8; CHUNK as usize];
        let mut at = offset;
        let end = offset.saturating_add(len);
        while at < end {
            let n = (end - at).min(CHUNK);
            self.write_all_at(zeros.get(..n as usize).unwrap_or(&zeros), at)?;
            at += n;
        }
        Ok(())
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsDisk;

#[derive(Debug)]
struct OsFile(File);

impl Disk for OsDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Box::new(OsFile(file)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        let st = rustix::fs::statvfs(dir)?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

impl DiskFile for OsFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    /// fallocate(2) where the file system has it (no data written); zeros where it does not.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        match rustix::fs::fallocate(&self.0, rustix::fs::FallocateFlags::empty(), offset, len) {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::DQUOT => {
                Err(e.into())
            }
            Err(_) => {
                let zeros = vec![0u8; 1024 * 1024];
                let mut at = offset;
                let end = offset.saturating_add(len);
                while at < end {
                    let n = (end - at).min(zeros.len() as u64);
                    self.0
                        .write_all_at(zeros.get(..n as usize).unwrap_or(&zeros), at)?;
                    at += n;
                }
                Ok(())
            }
        }
    }
}

/// Whether `e` says the file system is out of space (ENOSPC, or EDQUOT: a quota counts the
/// same). Only errors that carry the OS error number count: a write that failed this way did
/// not happen past the bytes it reports, so the caller can put the file back and try again.
/// Errors of unknown outcome (a failed fsync) are wrapped by [`unknown_outcome`] and never match.
pub fn is_no_space(e: &io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(rustix::io::Errno::NOSPC.raw_os_error())
        || code == Some(rustix::io::Errno::DQUOT.raw_os_error())
}

/// Wraps an error whose outcome is unknown (a failed fsync: the page cache may have dropped the
/// dirty pages, fsyncgate) so that [`is_no_space`] never takes it for a clean failure, whatever
/// its error number (NFS and some file systems report ENOSPC from fsync).
pub fn unknown_outcome(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The temporary name a file is written under before it replaces `path`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces `path` with `parts` (concatenated) durably: write `path.tmp`, fdatasync it, rename it
/// over `path`, fsync the directory. When this returns `Ok`, a power loss leaves the new content;
/// before, it leaves the old content or the new one, never a mix.
///
/// Out of space while writing the temporary file (`is_no_space`), it removes that file (its
/// space is the first to give back) and returns the error as it came: `path` is untouched, so a
/// retry is safe. A failed fsync returns an error of unknown outcome (`unknown_outcome`).
pub fn write_atomic(disk: &dyn Disk, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tmp_path(path);
    let file = disk.open(&tmp, true)?;
    let written = file.set_len(0).and_then(|()| {
        let mut offset = 0u64;
        for part in parts {
            file.write_all_at(part, offset)?;
            offset = offset.saturating_add(part.len() as u64);
        }
        Ok(())
    });
    if let Err(e) = written {
        drop(file);
        if is_no_space(&e) {
            let _ = disk.remove_file(&tmp);
        }
        return Err(e);
    }
    file.sync_data()
        .map_err(|e| unknown_outcome("fdatasync", e))?;
    drop(file);
    disk.rename(&tmp, path)?;
    disk.sync_dir(dir)
        .map_err(|e| unknown_outcome("fsync of the directory", e))
}

/// Reads a whole file of at most `max` bytes; `Ok(None)` when it does not exist.
pub fn read_small(disk: &dyn Disk, path: &Path, max: usize) -> io::Result<Option<Vec<u8>>> {
    let file = match disk.open(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.size()?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= max)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is {len} bytes, more than {max}", path.display()),
            )
        })?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_read_small_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vote");
        write_atomic(&OsDisk, &path, &[b"one"]).unwrap();
        write_atomic(&OsDisk, &path, &[b"tw", b"o!"]).unwrap();
        assert_eq!(read_small(&OsDisk, &path, 16).unwrap().unwrap(), b"two!");
        assert!(!tmp_path(&path).exists());
        assert!(read_small(&OsDisk, &path, 3).is_err());
        assert!(read_small(&OsDisk, &dir.path().join("none"), 3)
            .unwrap()
            .is_none());
    }
}
