//! Follower fetching (Kafka's `AbstractFetcherThread` minus the sockets): when the fetch to one
//! leader broker goes out and for which partitions ([`LeaderFetcher`]), and what one partition
//! does with its part of the answer ([`apply_answer`]). The broker's fetcher tasks and the
//! simulator's brokers both run exactly this; they only move the bytes and keep the time.
//!
//! Rules:
//! - one fetch in flight per leader broker, covering every partition followed there that is not
//!   backing off;
//! - the next fetch goes out only once everything appended is as durable as the flush policy
//!   promises: the offset a follower fetches from is what the leader counts for its high
//!   watermark, so it must survive a power loss here (a log with records not yet durable — say
//!   appended while this replica led — holds the fetch too);
//! - a failed request (no connection, timeout) backs the whole fetcher off; a partition whose
//!   answer was an error, or an out-of-range offset, backs off on its own;
//! - an answer counts only if the partition's position is still the one sent (the state may have
//!   moved while the request was out).

use std::collections::BTreeMap;

use crate::partition::{FetchPosition, Partition, PartitionError, ReplicaLog};
use crate::replica::Action;

/// How long a partition whose fetch answer was an error waits before it is fetched again.
pub const PARTITION_BACKOFF_MS: i64 = 200;

/// What fetching needs of a follower's log beyond [`ReplicaLog`].
pub trait FollowerLog: ReplicaLog {
    /// Records as they travel from the leader.
    type Records;
    /// Appends the leader's records, fetched from `fetch_offset`, as the leader stored them.
    /// `Ok(false)`: nothing appended (they did not fit our log end).
    fn append_replicated(&self, fetch_offset: i64, records: Self::Records) -> Result<bool, String>;
    /// Moves the log start up to `offset` (never past our high watermark; never down).
    fn follow_log_start(&self, offset: i64) -> Result<(), String>;
}

/// One partition's part of a fetch answer.
#[derive(Debug)]
pub enum FetchAnswer<R> {
    /// Records (`None`: none new) with the leader's high watermark and log start.
    Records {
        records: Option<R>,
        high_watermark: i64,
        log_start_offset: i64,
    },
    /// Our log diverges from the leader's: truncate.
    Diverging { epoch: i32, end_offset: i64 },
    /// Our fetch offset is outside the leader's log.
    OutOfRange { log_start_offset: i64 },
    /// Any other error (not leader, fenced epoch, unknown partition...): wait for metadata.
    Error,
}

/// What applying one partition's answer did.
#[derive(Debug, Default)]
pub struct AnswerOutcome {
    /// The replica's actions (high watermark moves).
    pub actions: Vec<Action>,
    /// Records were appended: the fetcher waits for them to become durable.
    pub appended: bool,
    /// The answer no longer matched the partition's position; nothing was done.
    pub stale: bool,
    /// The partition should back off before its next fetch.
    pub back_off: bool,
    /// The log was truncated: (log end before, after).
    pub truncated: Option<(i64, i64)>,
    /// The log was restarted at this offset (we were behind the leader's log start).
    pub restarted_at: Option<i64>,
    /// A log operation failed (storage error): logged by the caller.
    pub failure: Option<String>,
}

/// Applies `answer`, received for a fetch sent from `sent`, to partition `part`.
pub fn apply_answer<L: FollowerLog>(
    part: &mut Partition<L>,
    sent: &FetchPosition,
    answer: FetchAnswer<L::Records>,
) -> AnswerOutcome {
    let mut out = AnswerOutcome::default();
    if part.fetch_position().as_ref() != Some(sent) {
        out.stale = true;
        return out;
    }
    match answer {
        FetchAnswer::Records {
            records,
            high_watermark,
            log_start_offset,
        } => {
            if let Some(records) = records {
                match part.log.append_replicated(sent.fetch_offset, records) {
                    Ok(appended) => out.appended = appended,
                    Err(e) => {
                        out.failure = Some(format!("appending replicated records failed: {e}"));
                        out.back_off = true;
                        return out;
                    }
                }
            }
            out.actions = part.on_leader_high_watermark(high_watermark);
            // The leader's log start moved (retention, DeleteRecords): follow it, up to what this
            // replica knows is committed (Kafka's maybeIncrementLogStartOffset).
            if log_start_offset > part.log.log_start_offset() {
                if let Err(e) = part.log.follow_log_start(log_start_offset) {
                    out.failure = Some(format!("following the leader's log start failed: {e}"));
                }
            }
        }
        FetchAnswer::Diverging { epoch, end_offset } => {
            let before = part.log.log_end_offset();
            match part.on_diverging_epoch(epoch, end_offset) {
                Ok(after) => out.truncated = Some((before, after)),
                Err(e) => out.failure = Some(storage_failure("truncation", e)),
            }
        }
        FetchAnswer::OutOfRange { log_start_offset } => {
            let before = part.log.log_start_offset();
            if let Err(e) = part.on_fetch_out_of_range(log_start_offset) {
                out.failure = Some(storage_failure("restarting the log", e));
            }
            if part.log.log_start_offset() != before {
                out.restarted_at = Some(part.log.log_start_offset());
            }
            out.back_off = true;
        }
        FetchAnswer::Error => out.back_off = true,
    }
    out
}

fn storage_failure(what: &str, e: PartitionError) -> String {
    format!("{what} failed: {e:?}")
}

/// What a fetcher does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchStep<K> {
    /// Send fetch `fetch_id` for these partitions from these positions.
    Send {
        fetch_id: u64,
        partitions: Vec<(K, FetchPosition)>,
    },
    /// Make the followed logs durable first (the fetcher goes on at
    /// [`LeaderFetcher::on_durable`]).
    WaitDurable,
    /// Nothing to send now; look again at `retry_at_ms` (a backoff ending), or when woken.
    Idle { retry_at_ms: Option<i64> },
}

/// A partition followed at this leader, as the fetcher sees it.
#[derive(Debug, Clone)]
pub struct Followed<K> {
    pub key: K,
    pub position: FetchPosition,
    /// The log holds records not yet durable.
    pub unsynced: bool,
}

/// The fetch state towards one leader broker.
#[derive(Debug, Clone)]
pub struct LeaderFetcher<K> {
    leader: i32,
    /// The fetch out, and the positions it was sent from.
    in_flight: Option<(u64, Vec<(K, FetchPosition)>)>,
    waiting_durable: bool,
    backoff_until_ms: i64,
    partition_backoff: BTreeMap<K, i64>,
    next_fetch_id: u64,
    /// Test only (the simulator's `FetchBeforeDurable` mode): fetch before appends are durable.
    fetch_before_durable: bool,
}

impl<K: Ord + Clone> LeaderFetcher<K> {
    pub fn new(leader: i32) -> Self {
        Self {
            leader,
            in_flight: None,
            waiting_durable: false,
            backoff_until_ms: i64::MIN,
            partition_backoff: BTreeMap::new(),
            next_fetch_id: 1,
            fetch_before_durable: false,
        }
    }

    /// Test only: breaks the durability rule on purpose (the checkers must catch it).
    pub fn fetch_before_durable(mut self) -> Self {
        self.fetch_before_durable = true;
        self
    }

    pub fn leader(&self) -> i32 {
        self.leader
    }

    pub fn in_flight(&self) -> Option<u64> {
        self.in_flight.as_ref().map(|(id, _)| *id)
    }

    /// Decides the next step, given the partitions this broker follows at this leader.
    pub fn next(&mut self, now_ms: i64, followed: Vec<Followed<K>>) -> FetchStep<K> {
        if self.in_flight.is_some() {
            return FetchStep::Idle { retry_at_ms: None };
        }
        if self.waiting_durable {
            return FetchStep::WaitDurable;
        }
        if now_ms < self.backoff_until_ms {
            return FetchStep::Idle {
                retry_at_ms: Some(self.backoff_until_ms),
            };
        }
        self.partition_backoff.retain(|_, until| *until > now_ms);
        let mut partitions = Vec::new();
        let mut unsynced = false;
        for f in followed {
            if f.position.leader != self.leader || self.partition_backoff.contains_key(&f.key) {
                continue;
            }
            unsynced |= f.unsynced;
            partitions.push((f.key, f.position));
        }
        if partitions.is_empty() {
            return FetchStep::Idle {
                retry_at_ms: self.partition_backoff.values().min().copied(),
            };
        }
        if unsynced && !self.fetch_before_durable {
            self.waiting_durable = true;
            return FetchStep::WaitDurable;
        }
        let fetch_id = self.next_fetch_id;
        self.next_fetch_id += 1;
        self.in_flight = Some((fetch_id, partitions.clone()));
        FetchStep::Send {
            fetch_id,
            partitions,
        }
    }

    /// The answer to fetch `fetch_id` arrived: the positions it was sent from, or `None` when it
    /// is not the fetch out (a late answer to a fetch given up on).
    pub fn on_answer(&mut self, fetch_id: u64) -> Option<Vec<(K, FetchPosition)>> {
        match self.in_flight.take() {
            Some((id, sent)) if id == fetch_id => Some(sent),
            other => {
                self.in_flight = other;
                None
            }
        }
    }

    /// Partition `key`'s answer said to back off.
    pub fn back_off_partition(&mut self, key: K, now_ms: i64) {
        self.partition_backoff
            .insert(key, now_ms.saturating_add(PARTITION_BACKOFF_MS));
    }

    /// The answer has been applied; `appended`: some partition appended records.
    pub fn answered(&mut self, appended: bool) {
        if appended && !self.fetch_before_durable {
            self.waiting_durable = true;
        }
    }

    /// Fetch `fetch_id` failed (no connection, no answer in time): back off for `backoff_ms`.
    pub fn on_failure(&mut self, fetch_id: Option<u64>, now_ms: i64, backoff_ms: i64) {
        if fetch_id.is_some() && self.in_flight() != fetch_id {
            return;
        }
        self.in_flight = None;
        self.backoff_until_ms = now_ms.saturating_add(backoff_ms);
    }

    /// Whether the fetcher waits for appended records to become durable.
    pub fn waiting_durable(&self) -> bool {
        self.waiting_durable
    }

    /// What the fetcher waited for is durable: it may fetch again.
    pub fn on_durable(&mut self) {
        self.waiting_durable = false;
    }
}

#[cfg(test)]
mod tests;
