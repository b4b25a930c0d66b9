//! The background flusher: group commit for `FlushPolicy::Batch`, and the deferred work of rolls
//! (fsync of sealed segment files and the partition directory, producer snapshots) for every policy.
//!
//! Appends put their partition on a queue once (an `AtomicBool` per partition says "already
//! queued"), so per-append work is O(1) and a round touches only dirty partitions, never all of
//! them. A round takes the whole queue, fdatasyncs each partition outside its lock (in parallel
//! across up to `FLUSHER_THREADS` threads), then publishes the new durable offset (and, when the
//! store owns it, the high watermark). Rounds start at most once per `flush_interval`.
//!
//! Locking: the queue has its own short mutex + condvar; partition locks are taken only briefly
//! to collect what to sync and to publish the result.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::log::PartitionLog;

use crate::limits::FLUSHER_THREADS;

/// Queue of partitions with unsynced data or deferred roll work.
#[derive(Default)]
pub(crate) struct FlushQueue {
    queue: Mutex<Vec<Arc<PartitionLog>>>,
    wake: Condvar,
    stop: AtomicBool,
}

impl FlushQueue {
    /// Queues a partition (the caller guarantees it is not already queued).
    pub(crate) fn push(&self, log: Arc<PartitionLog>) {
        let mut q = self.queue.lock();
        q.push(log);
        self.wake.notify_one();
    }

    /// Asks the flusher thread to exit after its current round.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _q = self.queue.lock();
        self.wake.notify_all();
    }

    /// The next round, or `None` once stopped. Work still queued at stop is dropped: `shutdown`
    /// flushes every partition itself, and a dropped store is an unclean stop anyway.
    fn take(&self) -> Option<Vec<Arc<PartitionLog>>> {
        let mut q = self.queue.lock();
        loop {
            if self.stop.load(Ordering::SeqCst) {
                q.clear();
                return None;
            }
            if !q.is_empty() {
                break;
            }
            self.wake.wait_for(&mut q, Duration::from_millis(100));
        }
        Some(std::mem::take(&mut *q))
    }
}

/// Body of the flusher thread.
pub(crate) fn run(queue: Arc<FlushQueue>, interval: Duration) {
    while let Some(round) = queue.take() {
        let started = Instant::now();
        flush_round(round);
        let elapsed = started.elapsed();
        if elapsed < interval && !queue.stop.load(Ordering::SeqCst) {
            std::thread::sleep(interval - elapsed);
        }
    }
}

fn flush_round(round: Vec<Arc<PartitionLog>>) {
    if round.len() <= 1 {
        for log in round {
            log.flush_pending();
        }
        return;
    }
    let per_thread = round.len().div_ceil(FLUSHER_THREADS);
    std::thread::scope(|s| {
        for chunk in round.chunks(per_thread) {
            s.spawn(move || {
                for log in chunk {
                    log.flush_pending();
                }
            });
        }
    });
}
