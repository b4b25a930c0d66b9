//! Free space of the file system that holds a log dir: the low-water mark below which client
//! produce is refused (`millrace.log.dir.min.free.bytes`), and the reading the metrics show.
//!
//! Free space is read with `statvfs` (`f_bavail × f_frsize`: what an unprivileged writer may
//! still write). The produce path asks [`check`] on every request, so a reading is kept for
//! `FREE_SPACE_CACHE_MS` per directory while it is more than twice the mark: a syscall per
//! request would be cheap, but a cache keeps the cost flat under 100k requests per second far
//! from the mark; near it every request reads afresh, so the mark is overshot by at most the
//! requests in flight (and past it ENOSPC is still handled).
//! The metrics read [`free_bytes`] at scrape time (decision 0053).
//!
//! Takes the directory as a parameter (a partition dir or a log dir; both name the file
//! system); knows nothing of the store's dirs. Locking: one short mutex over the cache.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::StoreError;
use crate::limits::FREE_SPACE_CACHE_MS;

/// Bytes an unprivileged writer may still write on the file system that holds `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let st = rustix::fs::statvfs(dir)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// (total bytes, free bytes) of the file system that holds `dir`.
pub fn total_and_free_bytes(dir: &Path) -> io::Result<(u64, u64)> {
    let st = rustix::fs::statvfs(dir)?;
    Ok((
        st.f_blocks.saturating_mul(st.f_frsize),
        st.f_bavail.saturating_mul(st.f_frsize),
    ))
}

fn cache() -> &'static Mutex<HashMap<PathBuf, (Instant, u64)>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, (Instant, u64)>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Free bytes under `dir`, read at most once per `FREE_SPACE_CACHE_MS` while the last reading
/// was more than twice `min_free`; nearer the mark, read every time (a fast producer would
/// otherwise overshoot it by what it writes in the cache's lifetime).
fn cached_free_bytes(dir: &Path, min_free: u64) -> io::Result<u64> {
    let now = Instant::now();
    let fresh = Duration::from_millis(FREE_SPACE_CACHE_MS);
    if let Some((at, free)) = cache().lock().get(dir) {
        if now.duration_since(*at) < fresh && *free >= min_free.saturating_mul(2) {
            return Ok(*free);
        }
    }
    let free = free_bytes(dir)?;
    let mut cache = cache().lock();
    if cache.len() >= crate::limits::FREE_SPACE_CACHE_DIRS_MAX {
        cache.clear();
    }
    cache.insert(dir.to_path_buf(), (now, free));
    Ok(free)
}

/// `Err(StoreError::DiskFull)` when the file system holding `dir` has less than `min_free`
/// bytes free. 0 turns the check off. An unreadable reading lets the write go on (it meets
/// ENOSPC itself if the disk is really full).
pub fn check(dir: &Path, min_free: u64) -> Result<(), StoreError> {
    if min_free == 0 {
        return Ok(());
    }
    match cached_free_bytes(dir, min_free) {
        Ok(free) if free < min_free => Err(StoreError::DiskFull {
            dir: dir.display().to_string(),
            free,
            min_free,
        }),
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot read free space");
            Ok(())
        }
    }
}

/// Whether an I/O error is the file system being out of space (see `error::is_no_space`).
pub use crate::error::is_no_space;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_low_water_mark_refuses_below_it_and_zero_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 0);
        assert!(check(dir.path(), 0).is_ok());
        assert!(check(dir.path(), 1).is_ok());
        assert!(matches!(
            check(dir.path(), u64::MAX),
            Err(StoreError::DiskFull { .. })
        ));
        let (total, free2) = total_and_free_bytes(dir.path()).unwrap();
        assert!(total >= free2);
        assert!(is_no_space(&io::Error::from_raw_os_error(
            rustix::io::Errno::NOSPC.raw_os_error()
        )));
        assert!(!is_no_space(&io::Error::other(
            "fdatasync: No space left on device"
        )));
    }
}
