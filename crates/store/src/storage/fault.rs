//! `FaultStorage`: the real file system, except that every fdatasync of a file whose path contains
//! a chosen text fails with an I/O error (as a failing disk reports `EIO`). For tests that drive a
//! whole broker: the `millrace` binary uses it when its test knob asks (`MILLRACE_TEST_FAIL_SYNC`),
//! so a test can make exactly one partition's log fail to become durable.
//!
//! Files are matched by the path they were opened under (the `File` handed to `sync` carries no
//! path, so `open` remembers the device and inode of matching files).
//!
//! Locking: one short mutex around the set of matching files.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use parking_lot::Mutex;

use super::{OsStorage, Storage};

/// A `Storage` whose fdatasync fails for chosen files; see the module comment.
#[derive(Debug)]
pub struct FaultStorage {
    fail_sync_of: String,
    matching: Mutex<HashSet<(u64, u64)>>,
    real: OsStorage,
}

impl FaultStorage {
    /// Fails every fdatasync of a file whose path contains `text`.
    pub fn failing_sync_of(text: impl Into<String>) -> FaultStorage {
        FaultStorage {
            fail_sync_of: text.into(),
            matching: Mutex::new(HashSet::new()),
            real: OsStorage,
        }
    }
}

impl Storage for FaultStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<File> {
        let file = self.real.open(path, create)?;
        if path.to_string_lossy().contains(&self.fail_sync_of) {
            let meta = file.metadata()?;
            self.matching.lock().insert((meta.dev(), meta.ino()));
        }
        Ok(file)
    }
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        self.real.write_at(file, buf, offset)
    }
    fn sync(&self, file: &File) -> io::Result<()> {
        let meta = file.metadata()?;
        if self.matching.lock().contains(&(meta.dev(), meta.ino())) {
            return Err(io::Error::other(format!(
                "injected fdatasync failure (files matching {:?})",
                self.fail_sync_of
            )));
        }
        self.real.sync(file)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.real.sync_dir(dir)
    }
    /// Fails while any matching file was opened: a file system sync covers that file too.
    fn sync_filesystem(&self, dir: &File) -> io::Result<()> {
        if !self.matching.lock().is_empty() {
            return Err(io::Error::other(format!(
                "injected syncfs failure (files matching {:?} are on it)",
                self.fail_sync_of
            )));
        }
        self.real.sync_filesystem(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.real.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.real.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.real.remove_dir_all(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.real.create_dir_all(path)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.real.set_len(file, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_matching_files_fail_to_sync() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = FaultStorage::failing_sync_of("bad-0/");
        std::fs::create_dir(dir.path().join("bad-0")).expect("mkdir");
        let bad = s.open(&dir.path().join("bad-0/x.log"), true).expect("open");
        let good = s.open(&dir.path().join("good.log"), true).expect("open");
        assert!(s.sync(&bad).is_err());
        assert!(s.sync(&good).is_ok());
    }
}
