//! Replication throttles (Kafka's KIP-73): a bound, in bytes per second, on the replication
//! traffic of the replicas a topic names in `leader.replication.throttled.replicas` (what this
//! broker sends as their leader) and `follower.replication.throttled.replicas` (what it fetches
//! as their follower), set by `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate` (dynamic broker configs). `kafka-reassign-partitions
//! --throttle` sets them so that moving replicas does not starve clients.
//!
//! Kafka's rules, kept here: only a replica **out of the ISR** is throttled (an in-sync follower,
//! which `acks=all` waits on, never is); while the bound is exceeded, the leader answers a
//! throttled follower's fetch with no records, and a follower leaves its throttled partitions out
//! of its next fetch; the bytes of throttled replicas are what counts against the bound.
//!
//! The measure is a token bucket of one second's worth of bytes, which may go into debt: a fetch
//! answered while tokens remained can be larger than them (up to `replica.fetch.max.bytes`), and
//! the debt is repaid at the rate before the next throttled bytes move. So the average over any
//! longer period stays at the rate, as Kafka's windowed rate does.

use parking_lot::Mutex;

/// Bytes per second that mean "no bound" (Kafka's default, `Long.MAX_VALUE`).
pub const UNBOUNDED: i64 = i64::MAX;

/// One direction's throttle (leader or follower) on this broker.
#[derive(Debug)]
pub struct ReplicationQuota {
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    rate: i64,
    /// Bytes that may still move now; negative while in debt.
    tokens: f64,
    last_ms: i64,
}

impl Default for ReplicationQuota {
    fn default() -> Self {
        Self {
            bucket: Mutex::new(Bucket {
                rate: UNBOUNDED,
                tokens: 0.0,
                last_ms: 0,
            }),
        }
    }
}

impl ReplicationQuota {
    /// Sets the bound in bytes per second (`UNBOUNDED`: none; 0 stops throttled replication).
    pub fn set_rate(&self, rate: i64) {
        let mut b = self.bucket.lock();
        if b.rate != rate {
            b.rate = rate;
            // A new bound starts with a full second of tokens and no debt.
            b.tokens = rate as f64;
        }
    }

    pub fn rate(&self) -> i64 {
        self.bucket.lock().rate
    }

    /// Whether throttled bytes must wait now.
    pub fn exceeded(&self, now_ms: i64) -> bool {
        let mut b = self.bucket.lock();
        if b.rate == UNBOUNDED {
            return false;
        }
        b.refill(now_ms);
        b.tokens < 0.0
    }

    /// Counts `bytes` of throttled replicas that moved.
    pub fn record(&self, bytes: usize, now_ms: i64) {
        let mut b = self.bucket.lock();
        if b.rate == UNBOUNDED || bytes == 0 {
            return;
        }
        b.refill(now_ms);
        b.tokens -= bytes as f64;
    }
}

impl Bucket {
    fn refill(&mut self, now_ms: i64) {
        let elapsed = now_ms.saturating_sub(self.last_ms).max(0);
        self.last_ms = now_ms;
        let cap = self.rate as f64;
        self.tokens = (self.tokens + cap * elapsed as f64 / 1000.0).min(cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbounded_never_throttles() {
        let q = ReplicationQuota::default();
        q.record(1 << 30, 0);
        assert!(!q.exceeded(0));
    }

    #[test]
    fn a_large_read_is_repaid_at_the_rate() {
        let q = ReplicationQuota::default();
        q.set_rate(1000);
        assert!(!q.exceeded(0));
        // 5,000 bytes at once against 1,000 of tokens: 4,000 of debt, repaid in 4 s.
        q.record(5000, 0);
        assert!(q.exceeded(10));
        assert!(q.exceeded(3_900));
        assert!(!q.exceeded(4_100));
        // Tokens never exceed one second's worth.
        assert!(!q.exceeded(60_000));
        q.record(1500, 60_000);
        assert!(q.exceeded(60_000));
    }

    #[test]
    fn a_new_rate_clears_the_debt() {
        let q = ReplicationQuota::default();
        q.set_rate(10);
        q.record(1_000_000, 0);
        assert!(q.exceeded(1));
        q.set_rate(UNBOUNDED);
        assert!(!q.exceeded(2));
    }
}
