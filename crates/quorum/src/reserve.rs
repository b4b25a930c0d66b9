//! The metadata log's space reserve, and how a write that finds the disk full waits for space
//! instead of failing.
//!
//! The reserve is a file of `RESERVE_BYTES` (`quorum.reserve`) allocated in the quorum
//! directory while there is room (fallocate, or zeros written where the file system lacks it).
//! When a write of the log, the vote or the snapshot fails with ENOSPC (`disk::is_no_space`),
//! [`Reserve::with_space`] deletes the reserve file (its blocks go back to the file system at
//! once) and tries again: the quorum can go on committing — a
//! DeleteTopics that frees the data dir, above all — on a disk the store has filled. If the
//! reserve is already spent, the write is retried with a backoff until space returns, and never
//! reported as an error: openraft 0.9 stops its Raft core for good on any storage error from an
//! append, a vote or a snapshot (`RaftCore::append_to_log`, `Notify::StateMachine`), and a node
//! whose core stopped needs a restart. The reserve is written again (`top_up`, after each
//! write and every `RESERVE_RETRY_INTERVAL_MS` from the quorum's timer) as space returns, never
//! taking more than half of what is free, so that re-creating it never takes the last bytes the
//! store needs.
//!
//! Only a write whose outcome is known may be retried: the callers put the file back first (the
//! log cuts a short append back, `write_atomic` removes its temporary), and errors of unknown
//! outcome (a failed fsync) are wrapped by `disk::unknown_outcome` so that they never match.
//!
//! Locking: one short mutex over the reserve's state; the retry loop sleeps without it. Shared by
//! the log writer thread and the snapshot writer (`state_machine`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::disk::{self, Disk};
use crate::limits::{
    NO_SPACE_LOG_INTERVAL_MS, NO_SPACE_RETRY_MS_MAX, NO_SPACE_RETRY_MS_MIN,
    RESERVE_RETRY_INTERVAL_MS, RESERVE_TOP_UP_MIN_BYTES,
};

/// The reserve file's name inside the quorum directory.
pub const RESERVE_FILE_NAME: &str = "quorum.reserve";

#[derive(Debug)]
struct State {
    /// Bytes the reserve file holds now.
    held: u64,
    /// No `top_up` before this.
    next_try: Instant,
}

/// The reserve of one quorum directory.
#[derive(Debug)]
pub struct Reserve {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    path: PathBuf,
    target: u64,
    state: Mutex<State>,
    stopped: AtomicBool,
    waiting: AtomicBool,
}

impl Reserve {
    /// The reserve of `dir` (`target` bytes; 0 turns it off): takes over a reserve file left by
    /// an earlier run and fills it up if there is room. Blocking. Never fails: a node without a
    /// reserve still works, and a full disk at start must not stop it.
    pub fn open(disk: Arc<dyn Disk>, dir: &Path, target: u64) -> Arc<Reserve> {
        let path = dir.join(RESERVE_FILE_NAME);
        let held = match disk.open(&path, false) {
            Ok(f) => f.size().unwrap_or(0),
            Err(_) => 0,
        };
        let reserve = Arc::new(Reserve {
            disk,
            dir: dir.to_path_buf(),
            path,
            target,
            state: Mutex::new(State {
                held,
                next_try: Instant::now(),
            }),
            stopped: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
        });
        reserve.top_up();
        reserve
    }

    /// Bytes the reserve holds now.
    pub fn held(&self) -> u64 {
        self.state.lock().held
    }

    /// Deletes the reserve file; returns whether it held anything.
    pub fn release(&self) -> bool {
        let mut st = self.state.lock();
        if st.held == 0 {
            return false;
        }
        if let Err(e) = self.disk.remove_file(&self.path) {
            tracing::warn!(error = %e, "metadata log: cannot delete the space reserve");
            return false;
        }
        tracing::warn!(
            dir = %self.dir.display(),
            bytes = st.held,
            "metadata log: disk full; space reserve released so the metadata quorum can write"
        );
        st.held = 0;
        st.next_try = Instant::now() + Duration::from_millis(RESERVE_RETRY_INTERVAL_MS);
        true
    }

    /// Fills the reserve back up towards its target if it is short and was not tried in the
    /// last `RESERVE_RETRY_INTERVAL_MS`: by what is missing, but never by more than half of the
    /// free space (re-creating the reserve must not take the last bytes the store needs), and
    /// not at all for less than `RESERVE_TOP_UP_MIN_BYTES` unless that completes it. Cheap when
    /// there is nothing to do. Blocking.
    pub fn top_up(&self) {
        let mut st = self.state.lock();
        if st.held >= self.target || Instant::now() < st.next_try {
            return;
        }
        st.next_try = Instant::now() + Duration::from_millis(RESERVE_RETRY_INTERVAL_MS);
        let missing = self.target - st.held;
        let grant = match self.disk.free_bytes(&self.dir) {
            Ok(free) => missing.min(free / 2),
            Err(e) => {
                tracing::debug!(error = %e, "metadata log: cannot read free space");
                return;
            }
        };
        if grant < missing && grant < RESERVE_TOP_UP_MIN_BYTES {
            return;
        }
        let goal = st.held + grant;
        match self.fill(st.held, goal) {
            Ok(()) => {
                tracing::info!(
                    dir = %self.dir.display(),
                    bytes = goal,
                    target = self.target,
                    "metadata log: space reserve in place"
                );
                st.held = goal;
            }
            Err(e) => {
                // Whatever was written stays reserved; the next try goes on from there.
                let now = self
                    .disk
                    .open(&self.path, false)
                    .and_then(|f| f.size())
                    .unwrap_or(0);
                tracing::warn!(error = %e, held = now, "metadata log: cannot fill the space reserve");
                st.held = now;
            }
        }
    }

    fn fill(&self, from: u64, to: u64) -> io::Result<()> {
        let file = self.disk.open(&self.path, true)?;
        // fallocate where the file system has it: blocks reserved without writing them.
        file.allocate(from, to.saturating_sub(from))?;
        // Durable or not, the blocks are allocated; the sync only keeps the file across a crash.
        file.sync_data()?;
        drop(file);
        self.disk.sync_dir(&self.dir)
    }

    /// Whether a write is waiting for space now (the reserve spent).
    pub fn waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst)
    }

    /// From now on `with_space` gives up instead of waiting (the quorum is shutting down).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Runs `op` until it does not fail for lack of space: on ENOSPC the reserve is released and
    /// `op` tried again at once; with no reserve left, again after a backoff, for as long as the
    /// disk stays full (a warning every `NO_SPACE_LOG_INTERVAL_MS`). `op` must leave things as
    /// they were when it fails with ENOSPC. Returns `op`'s other errors as they come, and the
    /// ENOSPC error only after `stop`. Blocking.
    pub fn with_space<T>(
        &self,
        what: &str,
        mut op: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        let mut backoff = Duration::from_millis(NO_SPACE_RETRY_MS_MIN);
        let mut started: Option<Instant> = None;
        let mut last_log: Option<Instant> = None;
        loop {
            let e = match op() {
                Err(e) if disk::is_no_space(&e) => e,
                other => {
                    self.waiting.store(false, Ordering::SeqCst);
                    if let Some(s) = started {
                        tracing::info!(
                            waited_ms = s.elapsed().as_millis() as u64,
                            "metadata log: {what} succeeded after the disk was full"
                        );
                    }
                    return other;
                }
            };
            if self.release() {
                continue;
            }
            if self.stopped.load(Ordering::SeqCst) {
                self.waiting.store(false, Ordering::SeqCst);
                return Err(e);
            }
            self.waiting.store(true, Ordering::SeqCst);
            let now = Instant::now();
            started.get_or_insert(now);
            let due = last_log.is_none_or(|l| {
                now.duration_since(l) >= Duration::from_millis(NO_SPACE_LOG_INTERVAL_MS)
            });
            if due {
                last_log = Some(now);
                tracing::error!(
                    dir = %self.dir.display(),
                    error = %e,
                    "metadata log: {what} has no space and no reserve left; retrying until space returns"
                );
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(NO_SPACE_RETRY_MS_MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemDisk;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn the_reserve_is_released_on_enospc_and_refilled_when_space_returns() {
        let mem = MemDisk::new();
        let disk: Arc<dyn Disk> = Arc::new(mem.clone());
        let dir = PathBuf::from("/q");
        disk.create_dir_all(&dir).unwrap();
        mem.set_capacity(Some(10 * MIB));
        let reserve = Reserve::open(disk.clone(), &dir, 2 * MIB);
        assert_eq!(reserve.held(), 2 * MIB);
        // Fill the rest of the disk.
        let ballast = disk.open(&dir.join("ballast"), true).unwrap();
        assert!(disk::is_no_space(
            &ballast
                .write_all_at(&vec![1u8; (9 * MIB) as usize], 0)
                .unwrap_err()
        ));
        let f = disk.open(&dir.join("data"), true).unwrap();
        let mut tries = 0;
        reserve
            .with_space("test write", || {
                tries += 1;
                f.write_all_at(&[7u8; 1000], 0).inspect_err(|_| {
                    let _ = f.set_len(0);
                })
            })
            .unwrap();
        assert_eq!(tries, 2, "one failure, the reserve released, one success");
        assert_eq!(reserve.held(), 0);
        // Too little room (half of what is free is under RESERVE_TOP_UP_MIN_BYTES): it stays
        // released.
        reserve.state.lock().next_try = Instant::now();
        reserve.top_up();
        assert_eq!(reserve.held(), 0);
        // Some room: half of it.
        disk.open(&dir.join("ballast"), true)
            .unwrap()
            .set_len(6 * MIB)
            .unwrap();
        reserve.state.lock().next_try = Instant::now();
        reserve.top_up();
        let half = reserve.held();
        assert!((MIB..2 * MIB).contains(&half), "{half}");
        // Space returns.
        disk.remove_file(&dir.join("ballast")).unwrap();
        reserve.state.lock().next_try = Instant::now();
        reserve.top_up();
        assert_eq!(reserve.held(), 2 * MIB);
        assert_eq!(
            mem.read(&dir.join(RESERVE_FILE_NAME))
                .map(|b| b.len() as u64),
            Some(2 * MIB)
        );
    }

    #[test]
    fn with_no_reserve_left_a_write_waits_for_space_and_stop_ends_the_wait() {
        let mem = MemDisk::new();
        let disk: Arc<dyn Disk> = Arc::new(mem.clone());
        let dir = PathBuf::from("/q");
        disk.create_dir_all(&dir).unwrap();
        mem.set_capacity(Some(MIB));
        let reserve = Reserve::open(disk.clone(), &dir, 0);
        let f = disk.open(&dir.join("data"), true).unwrap();
        let big = vec![1u8; (2 * MIB) as usize];
        let mut tries = 0;
        let r = reserve.with_space("test write", || {
            tries += 1;
            if tries == 3 {
                mem.set_capacity(None); // space returns
            }
            f.set_len(0)?;
            f.write_all_at(&big, 0)
        });
        assert!(r.is_ok());
        assert_eq!(tries, 3);
        mem.set_capacity(Some(MIB));
        reserve.stop();
        let r = reserve.with_space("test write", || {
            f.set_len(0)?;
            f.write_all_at(&big, 0)
        });
        assert!(r.is_err_and(|e| disk::is_no_space(&e)));
    }
}
