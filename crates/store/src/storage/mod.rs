//! The file operations that change disk state, behind one trait so tests can crash the store at
//! any of them.
//!
//! Every mutation made by append, roll, checkpoint, retention, compaction, recovery and partition
//! create/delete goes through `Storage`: create, positioned write, fdatasync, directory fsync,
//! rename, remove, truncate. Reads use the returned `File` directly (`pread`). `OsStorage` is the
//! real implementation. The others model failures, each named by what it models:
//! - `CrashStorage` — `kill -9`: counts operations and "crashes" at the N-th one: that operation
//!   fails (a write may first land a torn prefix) and so does every later one, as if the process
//!   had died there. What already reached the file system stays (the page cache survives).
//! - `PowerLossStorage` (`power_loss.rs`) — a power cut: the same crash point, and then
//!   `power_loss()` takes back, file by file and directory by directory, everything that was not
//!   made durable by an fsync (seeded: dropped, torn or zero-filled).
//! - `FaultStorage` (`fault.rs`) — a disk that refuses fdatasync on chosen files, for tests that
//!   drive a whole broker.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod fault;
mod power_loss;

pub use fault::FaultStorage;
pub use power_loss::PowerLossStorage;

/// File-system mutations used by the store.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Opens `path` for reading and writing; with `create`, creates it if missing.
    fn open(&self, path: &Path, create: bool) -> io::Result<File>;
    /// Writes all of `buf` at byte `offset` (pwrite).
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()>;
    /// fdatasync.
    fn sync(&self, file: &File) -> io::Result<()>;
    /// fsync of a directory, making creates, renames and removes in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// `syncfs` of the file system holding the open directory `dir`: every file's data and every
    /// directory entry on it durable at once. The handle should be opened once, before the writes
    /// it is to cover, so that it reports every writeback error since (Linux's errseq).
    fn sync_filesystem(&self, dir: &File) -> io::Result<()>;
    /// Whether `sync_filesystem` reports writeback errors, so that the flusher may replace
    /// per-file fdatasyncs with it (Linux 5.8 and later).
    fn sync_filesystem_reports_errors(&self) -> bool {
        true
    }
    /// Atomic rename.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file (missing is not an error).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory tree (missing is not an error).
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Truncates or extends a file.
    fn set_len(&self, file: &File, len: u64) -> io::Result<()>;
}

/// Whether the running Linux kernel is at least `major.minor` (from
/// `/proc/sys/kernel/osrelease`; unknown counts as no).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release.trim().split(['.', '-']);
    let number = |p: Option<&str>| p.and_then(|s| s.parse::<u32>().ok());
    match (number(parts.next()), number(parts.next())) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// The real file system.
#[derive(Debug, Default)]
pub struct OsStorage;

fn ignore_not_found(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl Storage for OsStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
    }
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }
    fn sync(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn sync_filesystem(&self, dir: &File) -> io::Result<()> {
        rustix::fs::syncfs(dir).map_err(io::Error::from)
    }
    fn sync_filesystem_reports_errors(&self) -> bool {
        kernel_at_least(5, 8)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        ignore_not_found(std::fs::remove_file(path))
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        ignore_not_found(std::fs::remove_dir_all(path))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
}

/// A `Storage` that dies at the N-th mutating operation (1-based), modelling `kill -9`. Operation
/// N fails (a write first writes half of its buffer: a torn write), and so does every operation
/// after it.
#[derive(Debug)]
pub struct CrashStorage {
    ops: AtomicU64,
    crash_at: u64,
    crashed: AtomicBool,
    real: OsStorage,
}

impl CrashStorage {
    /// Crashes at operation `crash_at` (u64::MAX = never; use it to count a workload's ops).
    pub fn new(crash_at: u64) -> CrashStorage {
        CrashStorage {
            ops: AtomicU64::new(0),
            crash_at,
            crashed: AtomicBool::new(false),
            real: OsStorage,
        }
    }

    /// Mutating operations attempted so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Whether the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Counts one operation; `Err` if this one or an earlier one is the crash point.
    fn step(&self) -> Result<(), bool> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(false);
        }
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.crash_at {
            self.crashed.store(true, Ordering::SeqCst);
            return Err(true);
        }
        Ok(())
    }
}

fn crash_error() -> io::Error {
    io::Error::other("injected crash")
}

impl Storage for CrashStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<File> {
        if create && !path.exists() {
            self.step().map_err(|_| crash_error())?;
        } else if self.crashed() {
            // Opening existing files for reading keeps working after the crash.
            return OpenOptions::new().read(true).open(path);
        }
        self.real.open(path, create)
    }
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.step() {
            Ok(()) => self.real.write_at(file, buf, offset),
            Err(true) => {
                let half = buf.get(..buf.len() / 2).unwrap_or(&[]);
                let _ = self.real.write_at(file, half, offset);
                Err(crash_error())
            }
            Err(false) => Err(crash_error()),
        }
    }
    // No real fsync: under `kill -9` the page cache survives, so it changes nothing the model
    // sees, and on a busy disk each one costs milliseconds per crash point.
    fn sync(&self, _file: &File) -> io::Result<()> {
        self.step().map_err(|_| crash_error())
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())
    }
    fn sync_filesystem(&self, _dir: &File) -> io::Result<()> {
        self.step().map_err(|_| crash_error())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        self.real.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        self.real.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        self.real.remove_dir_all(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        self.real.create_dir_all(path)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        self.real.set_len(file, len)
    }
}
