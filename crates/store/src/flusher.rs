//! The background flusher: group commit for `FlushPolicy::Batch`, and the deferred work of rolls
//! (fsync of sealed segment files and the partition directory, producer snapshots) for every policy.
//!
//! Appends put their partition on a queue once (an `AtomicBool` per partition says "already
//! queued"), so per-append work is O(1) and a round touches only dirty partitions, never all of
//! them. A round takes the whole queue, fdatasyncs each partition outside its lock (in parallel
//! across `FLUSHER_THREADS` long-lived threads), then publishes the new durable offset (and, when
//! the store owns it, the high watermark). Rounds start at most once per `flush_interval`.
//!
//! Where `syncfs` reports writeback errors (Linux 5.8+), a round of at least
//! `SYNCFS_ROUND_PARTITIONS_MIN` partitions is one *grouped* commit instead:
//! every partition's work is taken first, then one `syncfs` of the data directory's file system
//! makes all their files' data and directory entries durable at once (one journal commit and one
//! device flush, where per-file `fdatasync`s cost one each), then each partition publishes. The
//! power-loss model (`storage::PowerLossStorage`) makes everything durable at a `syncfs`, and the
//! crash tests run rounds both ways.
//!
//! Locking: the queue has its own short mutex + condvar; partition locks are taken only briefly
//! (by `FlushTarget::flush_pending`) to collect what to sync and to publish the result.
//!
//! Not here: what a partition syncs. The queue holds `FlushTarget`s, which `log/` implements, so
//! this module does not depend on the log.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::limits::{FLUSHER_THREADS, SYNCFS_ROUND_PARTITIONS_MIN};

/// Bytes written to segments since the last flush round began, every store of the process (the
/// bytes-per-flush metric; one relaxed add per append).
static WRITTEN_SINCE_ROUND: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` just written to a segment file.
pub(crate) fn count_written(bytes: usize) {
    WRITTEN_SINCE_ROUND.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// The second half of a grouped flush, given the result of the `syncfs`.
pub(crate) type FinishFlush = Box<dyn FnOnce(&std::io::Result<()>) + Send>;

/// One `syncfs` of the file system holding every partition of the store.
pub(crate) type SyncAll = Box<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// A partition with deferred durability work.
pub(crate) trait FlushTarget: Send + Sync {
    /// Does the partition's pending work: fsyncs outside its lock, then publishes offsets.
    fn flush_pending(&self);
    /// Takes the partition's pending work for a grouped commit; the returned step finishes it
    /// (snapshots, checkpoints, publishing) once the `syncfs` that replaces its fsyncs is done.
    fn begin_grouped_flush(self: Arc<Self>) -> FinishFlush;
}

type Target = Arc<dyn FlushTarget>;

/// Queue of partitions with unsynced data or deferred roll work.
#[derive(Default)]
pub(crate) struct FlushQueue {
    queue: Mutex<Vec<Target>>,
    wake: Condvar,
    stop: AtomicBool,
}

impl FlushQueue {
    /// Queues a partition (the caller guarantees it is not already queued).
    pub(crate) fn push(&self, log: Target) {
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
    fn take(&self) -> Option<Vec<Target>> {
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

/// Counts finished chunks of one round.
struct Countdown {
    left: Mutex<usize>,
    done: Condvar,
}

impl Countdown {
    fn finish_one(&self) {
        let mut left = self.left.lock();
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.lock();
        while *left > 0 {
            self.done.wait(&mut left);
        }
    }
}

type Job = (Vec<Target>, Arc<Countdown>);

/// Body of the flusher thread: takes whole rounds (so each round is one group commit, at most one
/// per `interval`) and spreads a round over `FLUSHER_THREADS - 1` long-lived helper threads plus
/// itself.
pub(crate) fn run(queue: Arc<FlushQueue>, interval: Duration, sync_all: Option<SyncAll>) {
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let helpers: Vec<_> = (1..FLUSHER_THREADS)
        .filter_map(|i| {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("millrace-flusher-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().recv();
                    let Ok((logs, countdown)) = job else { break };
                    for log in logs {
                        log.flush_pending();
                    }
                    countdown.finish_one();
                })
                .ok()
        })
        .collect();
    while let Some(round) = queue.take() {
        let started = Instant::now();
        let bytes = WRITTEN_SINCE_ROUND.swap(0, Ordering::Relaxed);
        match &sync_all {
            Some(sync_all) if round.len() >= SYNCFS_ROUND_PARTITIONS_MIN => {
                grouped_round(round, sync_all)
            }
            _ => flush_round(round, &tx, helpers.len()),
        }
        let elapsed = started.elapsed();
        let metrics = millrace_metrics::global();
        metrics.log_flush_duration.observe(elapsed.as_secs_f64());
        metrics.log_flush_bytes.observe(bytes as f64);
        if elapsed < interval && !queue.stop.load(Ordering::SeqCst) {
            std::thread::sleep(interval - elapsed);
        }
    }
    drop(tx);
    for h in helpers {
        let _ = h.join();
    }
}

/// One grouped commit: every partition's work taken, one `syncfs`, every partition finished.
fn grouped_round(round: Vec<Target>, sync_all: &SyncAll) {
    let finishes: Vec<FinishFlush> = round
        .into_iter()
        .map(FlushTarget::begin_grouped_flush)
        .collect();
    let synced = sync_all();
    millrace_metrics::global().log_flush_grouped.inc();
    for finish in finishes {
        finish(&synced);
    }
}

fn flush_round(mut round: Vec<Target>, helpers: &std::sync::mpsc::Sender<Job>, n_helpers: usize) {
    if round.len() <= 1 || n_helpers == 0 {
        for log in round {
            log.flush_pending();
        }
        return;
    }
    let per_thread = round.len().div_ceil(n_helpers + 1);
    let mut chunks = Vec::new();
    while round.len() > per_thread {
        let rest = round.split_off(per_thread);
        chunks.push(std::mem::replace(&mut round, rest));
    }
    let countdown = Arc::new(Countdown {
        left: Mutex::new(chunks.len()),
        done: Condvar::new(),
    });
    for chunk in chunks {
        if let Err(std::sync::mpsc::SendError((chunk, _))) =
            helpers.send((chunk, Arc::clone(&countdown)))
        {
            // No helper left (cannot happen while this thread holds the sender): do it here.
            for log in chunk {
                log.flush_pending();
            }
            countdown.finish_one();
        }
    }
    for log in round {
        log.flush_pending();
    }
    countdown.wait();
}
