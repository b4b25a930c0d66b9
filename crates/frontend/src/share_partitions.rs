//! The share partitions this broker leads (KIP-932): for each (share group, topic, partition),
//! the [`SharePartition`] state machine of `millrace-share`, with the share sessions
//! ([`crate::share_session`]) and the connections that hold them.
//!
//! A share partition is made on the first ShareFetch that reaches its leader: its start offset
//! comes from the group's `share.auto.offset.reset` (Kafka's default, `latest`: the high
//! watermark). It is kept for the leader epoch it was made in; a partition whose leader epoch
//! moved (a leader change and back) starts again.
//!
//! Acquisition locks expire lazily: every use of a share partition first expires the locks
//! past their deadline (records become available again, or archived at the delivery-count
//! limit), and a parked ShareFetch wakes at the earliest lock deadline of its session.
//!
//! **Not yet:** the state lives in memory only. Kafka persists it in `__share_group_state`
//! (the codec is `millrace_share::records`); until Millrace does, a broker restart or a leader
//! change forgets acknowledgements and in-flight records, which is why share groups are off
//! unless `millrace.share.groups.enable=true`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use millrace_share::{SharePartition, SharePartitionConfig};
use parking_lot::Mutex;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::share_session::{MemberKey, SharePartitionId, ShareSessionCache};

/// Where a new share partition starts (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// The high watermark when the share partition is made (Kafka's default).
    Latest,
    /// The log start offset.
    Earliest,
}

/// The broker's share-group settings.
#[derive(Debug, Clone)]
pub struct ShareSettings {
    /// Whether share groups are served (`millrace.share.groups.enable`); when not, the share
    /// APIs answer UNSUPPORTED_VERSION, as Kafka does with `share.version` 0.
    pub enabled: bool,
    /// `group.share.max.share.sessions`.
    pub max_sessions: usize,
    /// The broker's `group.share.*` defaults for every share partition.
    pub partition: SharePartitionConfig,
    pub auto_offset_reset: AutoOffsetReset,
}

impl Default for ShareSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            max_sessions: 2000,
            partition: SharePartitionConfig::default(),
            auto_offset_reset: AutoOffsetReset::Latest,
        }
    }
}

/// One share partition's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShareKey {
    pub group_id: Arc<str>,
    pub topic_id: Uuid,
    pub partition: i32,
}

#[derive(Debug)]
struct Held {
    leader_epoch: i32,
    partition: SharePartition,
}

/// The share partitions, sessions and connections of this broker.
#[derive(Debug)]
pub struct ShareState {
    pub settings: ShareSettings,
    pub sessions: ShareSessionCache,
    partitions: Mutex<HashMap<ShareKey, Arc<Mutex<Held>>>>,
    /// Woken when records may have become available again (released, a lock ended, a partition
    /// started over): parked ShareFetches look again.
    released: Notify,
    next_connection: AtomicU64,
    /// Records acquired again after an earlier delivery, since start (all share partitions).
    redelivered_total: AtomicU64,
    /// Records archived (rejected, gaps, the delivery-count limit, aborted, below the log
    /// start), since start.
    archived_total: AtomicU64,
}

/// Share groups' numbers for the metrics, read at scrape time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareStats {
    pub sessions: u64,
    pub partitions: u64,
    /// Records between each share partition's start and end offsets (Kafka's in-flight count).
    pub in_flight_records: u64,
    /// Records acquired (locked by a member) now.
    pub acquired_records: u64,
    pub redelivered_total: u64,
    pub archived_total: u64,
}

impl ShareState {
    pub fn new(settings: ShareSettings) -> Self {
        Self {
            sessions: ShareSessionCache::new(settings.max_sessions),
            settings,
            partitions: Mutex::new(HashMap::new()),
            released: Notify::new(),
            next_connection: AtomicU64::new(1),
            redelivered_total: AtomicU64::new(0),
            archived_total: AtomicU64::new(0),
        }
    }

    /// A fresh id for a connection that opens share sessions.
    pub fn connection_id(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `f` on the share partition `key` led in `leader_epoch`, made first (starting at
    /// `start_offset()`) when there is none for that epoch. Locks past their deadline are
    /// expired first. `Err` when the share partition cannot be made (a bad start offset).
    pub fn with_partition<R>(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
        start_offset: impl FnOnce() -> i64,
        now_ms: i64,
        f: impl FnOnce(&mut SharePartition) -> R,
    ) -> Result<R, millrace_share::ShareError> {
        let held = {
            let mut partitions = self.partitions.lock();
            match partitions.get(key) {
                Some(h) if h.lock().leader_epoch == leader_epoch => Arc::clone(h),
                _ => {
                    let state = millrace_share::PersistedState::initial(0, start_offset());
                    let partition = SharePartition::new(state, self.settings.partition)?;
                    let h = Arc::new(Mutex::new(Held {
                        leader_epoch,
                        partition,
                    }));
                    partitions.insert(key.clone(), Arc::clone(&h));
                    h
                }
            }
        };
        let mut held = held.lock();
        Ok(self.step(&mut held.partition, now_ms, f))
    }

    /// Ends the locks past their deadline, then runs `f`; counts what both archived and
    /// redelivered.
    fn step<R>(
        &self,
        partition: &mut SharePartition,
        now_ms: i64,
        f: impl FnOnce(&mut SharePartition) -> R,
    ) -> R {
        let before = partition.metrics();
        let expired = partition.expire_locks(now_ms);
        if !expired.is_empty() {
            self.released.notify_waiters();
        }
        let result = f(partition);
        let after = partition.metrics();
        self.archived_total.fetch_add(
            after
                .archived_records_total
                .saturating_sub(before.archived_records_total),
            Ordering::Relaxed,
        );
        self.redelivered_total.fetch_add(
            after
                .redelivered_records_total
                .saturating_sub(before.redelivered_records_total),
            Ordering::Relaxed,
        );
        result
    }

    /// Runs `f` on the share partition `key` if this broker holds it (ShareAcknowledge never
    /// makes one: Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a share partition not loaded).
    pub fn with_existing<R>(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
        now_ms: i64,
        f: impl FnOnce(&mut SharePartition) -> R,
    ) -> Option<R> {
        let held = {
            let partitions = self.partitions.lock();
            Arc::clone(partitions.get(key)?)
        };
        let mut held = held.lock();
        if held.leader_epoch != leader_epoch {
            return None;
        }
        Some(self.step(&mut held.partition, now_ms, f))
    }

    /// The earliest acquisition-lock deadline among `keys`.
    pub fn next_lock_deadline(&self, keys: &[ShareKey]) -> Option<i64> {
        let held: Vec<_> = {
            let partitions = self.partitions.lock();
            keys.iter()
                .filter_map(|k| partitions.get(k).map(Arc::clone))
                .collect()
        };
        held.iter()
            .filter_map(|h| h.lock().partition.next_lock_deadline())
            .min()
    }

    /// Releases what `member` of `group_id` holds in `partitions` (its session ended).
    pub fn release_member(
        &self,
        group_id: &Arc<str>,
        member_id: &str,
        partitions: &[SharePartitionId],
        now_ms: i64,
    ) {
        let held: Vec<_> = {
            let map = self.partitions.lock();
            partitions
                .iter()
                .filter_map(|(topic_id, partition)| {
                    map.get(&ShareKey {
                        group_id: Arc::clone(group_id),
                        topic_id: *topic_id,
                        partition: *partition,
                    })
                    .map(Arc::clone)
                })
                .collect()
        };
        let mut released = false;
        for h in held {
            released |= !h
                .lock()
                .partition
                .release_member(member_id, now_ms)
                .is_empty();
        }
        if released {
            self.released.notify_waiters();
        }
    }

    /// Wakes the ShareFetches waiting for records (some were released).
    pub fn notify_released(&self) {
        self.released.notify_waiters();
    }

    /// A future that completes at the next release (register before looking, then await).
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// The numbers the metrics show.
    pub fn stats(&self) -> ShareStats {
        let held: Vec<_> = self.partitions.lock().values().map(Arc::clone).collect();
        let mut stats = ShareStats {
            sessions: u64::try_from(self.sessions.len()).unwrap_or(u64::MAX),
            partitions: u64::try_from(held.len()).unwrap_or(u64::MAX),
            redelivered_total: self.redelivered_total.load(Ordering::Relaxed),
            archived_total: self.archived_total.load(Ordering::Relaxed),
            ..ShareStats::default()
        };
        for h in held {
            let m = h.lock().partition.metrics();
            stats.in_flight_records += m.in_flight_records;
            stats.acquired_records += m.acquired_records;
        }
        stats
    }

    /// Share partitions held now.
    pub fn len(&self) -> usize {
        self.partitions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The share sessions of one connection: when the connection closes (its
/// [`crate::session::Session`] is dropped), they end and their members' records are released.
#[derive(Debug)]
pub struct ShareConnection {
    state: Arc<ShareState>,
    pub id: u64,
    members: Mutex<Vec<MemberKey>>,
}

impl ShareConnection {
    pub fn new(state: Arc<ShareState>) -> Self {
        let id = state.connection_id();
        Self {
            state,
            id,
            members: Mutex::new(Vec::new()),
        }
    }

    /// Notes that `member` opened a session on this connection.
    pub fn opened(&self, member: &MemberKey) {
        let mut members = self.members.lock();
        if !members.contains(member) {
            members.push(member.clone());
        }
    }
}

impl Drop for ShareConnection {
    fn drop(&mut self) {
        let members = std::mem::take(&mut *self.members.lock());
        if members.is_empty() {
            return;
        }
        let now = now_ms();
        for (member, partitions) in self.state.sessions.connection_closed(self.id, &members) {
            self.state
                .release_member(&member.group_id, &member.member_id, &partitions, now);
        }
    }
}

/// Wall-clock milliseconds since the epoch: the clock acquisition locks are kept by.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
