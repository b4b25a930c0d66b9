//! A bounded, store-wide cache of open segment and index files (least recently used closes).
//!
//! Invariant: at most `capacity` files are held by the cache. A file handed out is an `Arc<File>`,
//! so a reader that took one keeps a valid descriptor even if the cache closes it or the file is
//! deleted or replaced meanwhile; the descriptor is closed when the last user drops it.
//! Locking: one short mutex around the map; files are opened outside it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::Storage;

#[derive(Default)]
struct Inner {
    files: HashMap<PathBuf, (Arc<File>, u64)>,
    lru: BTreeMap<u64, PathBuf>,
    tick: u64,
}

/// LRU cache of open files keyed by path.
pub(crate) struct FileCache {
    inner: Mutex<Inner>,
    capacity: usize,
    storage: Arc<dyn Storage>,
}

impl FileCache {
    pub(crate) fn new(capacity: usize, storage: Arc<dyn Storage>) -> FileCache {
        FileCache {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(crate::limits::OPEN_FILES_MIN),
            storage,
        }
    }

    /// Returns the open file at `path`, opening it (creating it if `create`) on a miss.
    pub(crate) fn get(&self, path: &Path, create: bool) -> io::Result<Arc<File>> {
        {
            let mut inner = self.inner.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some((file, old_tick)) = inner.files.get_mut(path) {
                let file = Arc::clone(file);
                let old = std::mem::replace(old_tick, tick);
                inner.lru.remove(&old);
                inner.lru.insert(tick, path.to_path_buf());
                return Ok(file);
            }
        }
        let file = Arc::new(self.storage.open(path, create)?);
        let mut inner = self.inner.lock();
        if let Some((existing, _)) = inner.files.get(path) {
            return Ok(Arc::clone(existing));
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner
            .files
            .insert(path.to_path_buf(), (Arc::clone(&file), tick));
        inner.lru.insert(tick, path.to_path_buf());
        while inner.files.len() > self.capacity {
            let Some((_, victim)) = inner.lru.pop_first() else {
                break;
            };
            inner.files.remove(&victim);
        }
        Ok(file)
    }

    /// Forgets `path` (after it was deleted, renamed or replaced).
    pub(crate) fn invalidate(&self, path: &Path) {
        let mut inner = self.inner.lock();
        if let Some((_, tick)) = inner.files.remove(path) {
            inner.lru.remove(&tick);
        }
    }

    /// Forgets every file under `dir`.
    pub(crate) fn invalidate_dir(&self, dir: &Path) {
        let mut inner = self.inner.lock();
        let victims: Vec<PathBuf> = inner
            .files
            .keys()
            .filter(|p| p.starts_with(dir))
            .cloned()
            .collect();
        for v in victims {
            if let Some((_, tick)) = inner.files.remove(&v) {
                inner.lru.remove(&tick);
            }
        }
    }

    /// Number of files currently held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().files.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::OsStorage;

    #[test]
    fn cache_is_bounded_and_lru() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(8, Arc::new(OsStorage));
        let paths: Vec<PathBuf> = (0..20).map(|i| dir.path().join(format!("f{i}"))).collect();
        for p in &paths {
            cache.get(p, true).expect("open");
            cache.get(&paths[0], false).expect("keep hot");
            assert!(cache.len() <= 8);
        }
        assert!(cache.inner.lock().files.contains_key(&paths[0]));
        assert!(!cache.inner.lock().files.contains_key(&paths[1]));
        cache.invalidate(&paths[0]);
        assert!(!cache.inner.lock().files.contains_key(&paths[0]));
        cache.invalidate_dir(dir.path());
        assert_eq!(cache.len(), 0);
    }
}
