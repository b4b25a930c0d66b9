//! Long polls parked on a partition (Kafka's fetch purgatory, keyed by partition): each waiting
//! Fetch registers its own `Notify` with the partitions it asked for, and a partition wakes only
//! those when it changes, not every parked fetch in the broker.
//!
//! A waiter is held weakly: a fetch that has answered simply drops its `Notify`, and the dead
//! entry goes at the next wake-up or when the list is pruned (each time it has doubled), so an
//! idle partition polled by many short-lived fetches holds no more than about twice its live
//! waiters. Waking takes the list: a woken fetch registers again before it reads again.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// The list is pruned of dead waiters when it reaches this length (then at twice what remains).
const PRUNE_AT_MIN: usize = 16;

/// The fetches waiting for one change of one partition.
#[derive(Default)]
pub struct Watchers {
    inner: Mutex<WatcherList>,
}

#[derive(Default)]
struct WatcherList {
    waiters: Vec<Weak<Notify>>,
    prune_at: usize,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers")
            .field("waiters", &self.inner.lock().waiters.len())
            .finish()
    }
}

impl Watchers {
    /// Registers `waiter` for the next [`Watchers::wake`] (once, however often it is called
    /// before that). The wake-up is a `notify_one`, so one that comes before the waiter awaits
    /// is kept, not lost.
    pub fn watch(&self, waiter: &Arc<Notify>) {
        let mut list = self.inner.lock();
        let me = Arc::as_ptr(waiter);
        if list.waiters.iter().any(|w| std::ptr::eq(w.as_ptr(), me)) {
            return;
        }
        if list.waiters.len() >= list.prune_at.max(PRUNE_AT_MIN) {
            list.waiters.retain(|w| w.strong_count() > 0);
            list.prune_at = list.waiters.len() * 2;
        }
        list.waiters.push(Arc::downgrade(waiter));
    }

    /// Wakes every registered waiter still alive and forgets them all.
    pub fn wake(&self) {
        let waiters = {
            let mut list = self.inner.lock();
            if list.waiters.is_empty() {
                return;
            }
            list.prune_at = 0;
            std::mem::take(&mut list.waiters)
        };
        for waiter in waiters {
            if let Some(n) = waiter.upgrade() {
                n.notify_one();
            }
        }
    }

    /// Registered waiters, dead ones included (tests and diagnostics).
    pub fn len(&self) -> usize {
        self.inner.lock().waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn a_wake_reaches_each_live_waiter_once_even_before_it_awaits() {
        let watchers = Watchers::default();
        let a = Arc::new(Notify::new());
        let b = Arc::new(Notify::new());
        watchers.watch(&a);
        watchers.watch(&a);
        watchers.watch(&b);
        assert_eq!(
            watchers.len(),
            2,
            "a second watch by the same waiter is not a second entry"
        );
        watchers.wake();
        assert!(watchers.is_empty());
        // The permit was stored: awaiting after the wake completes at once.
        assert!(a.notified().now_or_never().is_some());
        assert!(b.notified().now_or_never().is_some());
        assert!(
            a.notified().now_or_never().is_none(),
            "one wake, one permit"
        );
    }

    #[test]
    fn dead_waiters_are_pruned_so_an_idle_partition_does_not_grow() {
        let watchers = Watchers::default();
        let live = Arc::new(Notify::new());
        watchers.watch(&live);
        for _ in 0..10_000 {
            let fetch = Arc::new(Notify::new());
            watchers.watch(&fetch);
        }
        assert!(
            watchers.len() <= PRUNE_AT_MIN + 1,
            "{} entries for 1 live waiter",
            watchers.len()
        );
        watchers.wake();
        assert!(live.notified().now_or_never().is_some());
    }
}
