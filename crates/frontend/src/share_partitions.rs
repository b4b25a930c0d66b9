//! The share partitions this broker leads (KIP-932): for each (share group, topic, partition),
//! the [`SharePartition`] state machine of `millrace-share`, with the share sessions
//! ([`crate::share_session`]) and the connections that hold them.
//!
//! A share partition is loaded on the first ShareFetch that reaches its leader
//! ([`ShareState::load`]): its state is read from the share coordinator through the
//! [`Persister`] (recording this leader epoch); a key never initialized is initialized at the
//! start that the group's `share.auto.offset.reset` gives (Kafka's default, `latest`: the high
//! watermark) and read again, so the start is durable before anything is delivered. It is kept
//! for the leader epoch it was loaded in; a partition whose leader epoch moved is loaded again.
//!
//! Group configs: every use of a share partition first puts the group's current configs in force
//! ([`ShareSettings::group`], through a [`ShareGroupConfigProvider`]): the record lock duration,
//! delivery-count limit and in-flight window a GROUP resource sets apply from the next
//! acquisition, release or lock expiry, as Kafka reads its group config provider at each use.
//!
//! Persistence (Kafka's rules): acknowledgements are answered only once their write is
//! committed ([`ShareState::persist`]); a failed write fails the partition's acknowledgement and
//! drops the share partition, which the next fetch loads again from what was committed, with the
//! delivery counts it had reached carried over (a record is delivered no more often than the
//! limit allows while writes fail).
//! Releases, lock expiries and the log-start archive write without being waited for. Acquiring
//! is never written, so what was in flight at a crash or leader change is delivered again.
//!
//! Acquisition locks expire lazily: every use of a share partition first expires the locks
//! past their deadline (records become available again, or archived at the delivery-count
//! limit), and a parked ShareFetch wakes at the earliest lock deadline of its session.
//!
//! A share partition is dropped when its state is replaced or deleted by the group
//! coordinator on this broker ([`ShareState::forget`]), and all of a group's are dropped when
//! its last share session here ends (Kafka's `onGroupEmpty`), so that the admin APIs, which
//! need an Empty group, find no stale copy on any broker: the next fetch loads the state again.
//!
//! Without a persister (the front end's in-process tests) the state lives in memory only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use millrace_cluster::{GroupSettings, ShareAutoOffsetReset, ShareIsolationLevel};
use millrace_share::limits::DELIVERY_COUNT_LIMIT_MIN;
use millrace_share::{
    DeliveredRange, PersistedState, SharePartition, SharePartitionConfig, StateChange, StateWrite,
};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::warn;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::error_codes::{COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR};
use crate::share_coordinator::{ShareCoordinator, StateError, FENCED_STATE_EPOCH};
use crate::share_persister::Persister;
use crate::share_session::{MemberKey, SharePartitionId, ShareSessionCache};

/// How long loading a share partition may retry a share coordinator that is not available yet
/// (the topic being created, its leader loading, a leader change).
const LOAD_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(15);
/// Attempts to read or initialize a share partition's state in one load.
const LOAD_ATTEMPTS_MAX: u32 = 200;
/// First and longest pause between two load attempts.
const LOAD_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(20);
const LOAD_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(500);
/// Share partitions whose delivery counts are kept across a failed write at most; past it a
/// reload starts from what was committed, as before.
const CARRIED_PARTITIONS_MAX: usize = 10_000;

/// A share group's configs as they are now (Kafka's `ShareGroupConfigProvider`): its GROUP
/// resource configs over the broker's `group.share.*`, asked at every use.
pub trait ShareGroupConfigProvider: Send + Sync + std::fmt::Debug {
    fn settings(&self, group_id: &str) -> GroupSettings;
}

/// What the share partitions of one group obey now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupSettings {
    pub partition: SharePartitionConfig,
    /// Where a new share partition starts (`share.auto.offset.reset`).
    pub auto_offset_reset: ShareAutoOffsetReset,
    /// `share.isolation.level`.
    pub isolation_level: ShareIsolationLevel,
}

/// The broker's share-group settings.
#[derive(Debug, Clone)]
pub struct ShareSettings {
    /// Whether share groups are served (`millrace.share.groups.enable`); when not, the share
    /// APIs answer UNSUPPORTED_VERSION, as Kafka does with `share.version` 0.
    pub enabled: bool,
    /// `group.share.max.share.sessions`.
    pub max_sessions: usize,
    /// Every group's settings, where they are known (the broker: its metadata image); `None`:
    /// every group has [`ShareSettings::defaults`] (in-process tests).
    pub groups: Option<Arc<dyn ShareGroupConfigProvider>>,
    /// What a group obeys without a provider.
    pub defaults: ShareGroupSettings,
}

impl Default for ShareSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            max_sessions: 2000,
            groups: None,
            defaults: ShareGroupSettings {
                partition: SharePartitionConfig::default(),
                auto_offset_reset: ShareAutoOffsetReset::Latest,
                isolation_level: ShareIsolationLevel::ReadUncommitted,
            },
        }
    }
}

impl ShareSettings {
    /// What the share partitions of `group_id` obey now.
    pub fn group(&self, group_id: &str) -> ShareGroupSettings {
        let Some(provider) = &self.groups else {
            return self.defaults;
        };
        let s = provider.settings(group_id);
        ShareGroupSettings {
            partition: SharePartitionConfig {
                delivery_count_limit: s.share_delivery_count_limit,
                max_record_locks: s.share_partition_max_record_locks,
                record_lock_duration_ms: s.share_record_lock_duration_ms,
                renew_enabled: s.share_renew_acknowledge_enable,
            },
            auto_offset_reset: s.share_auto_offset_reset,
            isolation_level: s.share_isolation_level,
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
    /// The partition's leader epoch when the share partition was loaded: every write carries it.
    leader_epoch: i32,
    partition: SharePartition,
}

/// What a write of a share partition carries besides its change.
#[derive(Debug, Clone, Copy)]
pub struct WriteEpochs {
    pub state_epoch: i32,
    pub leader_epoch: i32,
}

/// The share partitions, sessions and connections of this broker.
#[derive(Debug)]
pub struct ShareState {
    pub settings: ShareSettings,
    pub sessions: ShareSessionCache,
    partitions: Mutex<HashMap<ShareKey, Arc<Mutex<Held>>>>,
    /// One load at a time per share partition.
    loading: Mutex<HashMap<ShareKey, Arc<tokio::sync::Mutex<()>>>>,
    /// `None`: in memory only (in-process tests).
    persister: Option<Arc<Persister>>,
    /// Delivery counts of share partitions dropped after a failed write, by the leader epoch
    /// they were loaded in: the next load in that epoch carries them over (see `persist`).
    carried: Mutex<HashMap<ShareKey, (i32, Vec<DeliveredRange>)>>,
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

/// One share partition held here, as the share-group lag metric reads it: lag = high watermark
/// − `start_offset` − `delivery_complete_count` (Kafka's DescribeShareGroupOffsets lag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartitionProgress {
    pub group_id: Arc<str>,
    pub topic_id: Uuid,
    pub partition: i32,
    /// The share-partition start offset (SPSO).
    pub start_offset: i64,
    /// Records at or above the start offset that are acknowledged or archived.
    pub delivery_complete_count: i32,
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
    pub fn new(settings: ShareSettings, persister: Option<Arc<Persister>>) -> Self {
        Self {
            sessions: ShareSessionCache::new(settings.max_sessions),
            settings,
            partitions: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashMap::new()),
            carried: Mutex::new(HashMap::new()),
            persister,
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

    /// This broker's share coordinator, when share state is persisted.
    pub fn coordinator(&self) -> Option<&Arc<ShareCoordinator>> {
        self.persister.as_ref().map(|p| p.coordinator())
    }

    /// The persister, when share state is persisted (the group coordinator's admin side uses it
    /// too).
    pub fn persister(&self) -> Option<&Arc<Persister>> {
        self.persister.as_ref()
    }

    /// Whether the share partition `key` is loaded for `leader_epoch`.
    fn is_loaded(&self, key: &ShareKey, leader_epoch: i32) -> bool {
        self.partitions
            .lock()
            .get(key)
            .is_some_and(|h| h.lock().leader_epoch == leader_epoch)
    }

    /// Loads the share partition `key` for `leader_epoch` unless it is loaded: its persisted
    /// state, or a new one starting at `start()` (initialized first when persisted). See the
    /// module comment.
    pub async fn load(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
        start: impl Fn() -> i64,
    ) -> Result<(), StateError> {
        if self.is_loaded(key, leader_epoch) {
            return Ok(());
        }
        let gate = Arc::clone(self.loading.lock().entry(key.clone()).or_default());
        let _one = gate.lock().await;
        if self.is_loaded(key, leader_epoch) {
            return Ok(());
        }
        let mut state = match &self.persister {
            None => PersistedState::initial(0, start()),
            Some(persister) => read_or_initialize(persister, key, leader_epoch, &start).await?,
        };
        let config = self.settings.group(&key.group_id).partition;
        let raised = match self.carried.lock().remove(key) {
            Some((epoch, ranges)) if epoch == leader_epoch => {
                let limit = config.delivery_count_limit.max(DELIVERY_COUNT_LIMIT_MIN);
                state.carry_delivery_counts(&ranges, limit)
            }
            _ => Vec::new(),
        };
        let start_before = state.start_offset;
        let partition = SharePartition::new(state, config)
            .map_err(|e| StateError::new(UNKNOWN_SERVER_ERROR, e.to_string()))?;
        if !raised.is_empty() {
            // What the counts say now is written like a lock expiry: in the background.
            let change = StateChange {
                batches: raised,
                start_offset: partition.start_offset(),
                start_offset_moved: partition.start_offset() != start_before,
                delivery_complete_count: partition.delivery_complete_count(),
            };
            let epochs = WriteEpochs {
                state_epoch: partition.state_epoch(),
                leader_epoch,
            };
            self.write_in_background(key, epochs, change);
        }
        self.partitions.lock().insert(
            key.clone(),
            Arc::new(Mutex::new(Held {
                leader_epoch,
                partition,
            })),
        );
        self.loading.lock().remove(key);
        self.released.notify_waiters();
        Ok(())
    }

    /// Drops the share partition `key` if it is still the one loaded in `leader_epoch` (its
    /// write failed: the next fetch loads it again from what was committed), keeping the
    /// delivery counts it had reached for that load: a record is not delivered more often than
    /// the delivery-count limit allows because writes failed (Kafka rolls the failed transitions
    /// back in memory and keeps counting; a new leader starts from what was committed, here as
    /// there).
    fn unload_after_failed_write(&self, key: &ShareKey, leader_epoch: i32) {
        let mut partitions = self.partitions.lock();
        let Some(held) = partitions.get(key) else {
            return;
        };
        let ranges = {
            let held = held.lock();
            if held.leader_epoch != leader_epoch {
                return;
            }
            held.partition.delivered_ranges()
        };
        partitions.remove(key);
        drop(partitions);
        let mut carried = self.carried.lock();
        if carried.len() < CARRIED_PARTITIONS_MAX || carried.contains_key(key) {
            carried.insert(key.clone(), (leader_epoch, ranges));
        }
    }

    /// Drops the share partition `key` whatever leader epoch it was loaded in: its state was
    /// replaced or deleted (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups), and
    /// the next fetch loads it again from what is persisted. Without a persister nothing is
    /// dropped: memory is all the state there is.
    pub fn forget(&self, key: &ShareKey) {
        if self.persister.is_none() {
            return;
        }
        self.partitions.lock().remove(key);
        self.carried.lock().remove(key);
    }

    /// Drops every share partition of `group_id` (Kafka's `onGroupEmpty`): its last share session
    /// on this broker ended, so nothing is acquired from them any more, and the group may now be
    /// altered or deleted by the group coordinator on any broker; the next fetch loads them
    /// again from what is persisted. Without a persister nothing is dropped.
    fn forget_group(&self, group_id: &str) {
        if self.persister.is_none() {
            return;
        }
        self.partitions
            .lock()
            .retain(|key, _| &*key.group_id != group_id);
    }

    /// Runs `f` on the share partition `key` if it is loaded for `leader_epoch` (ShareFetch
    /// loads it first; ShareAcknowledge never does: Kafka answers UNKNOWN_TOPIC_OR_PARTITION for
    /// a share partition not loaded). Locks past their deadline are expired first, and that
    /// change is written in the background. `f` also gets the epochs its own writes carry.
    pub fn with_partition<R>(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
        now_ms: i64,
        f: impl FnOnce(&mut SharePartition, WriteEpochs) -> R,
    ) -> Option<R> {
        let held = {
            let partitions = self.partitions.lock();
            Arc::clone(partitions.get(key)?)
        };
        let mut held = held.lock();
        if held.leader_epoch != leader_epoch {
            return None;
        }
        Some(self.step(key, &mut held, now_ms, f))
    }

    /// Ends the locks past their deadline (writing that in the background), then runs `f`;
    /// counts what both archived and redelivered.
    fn step<R>(
        &self,
        key: &ShareKey,
        held: &mut Held,
        now_ms: i64,
        f: impl FnOnce(&mut SharePartition, WriteEpochs) -> R,
    ) -> R {
        let epochs = WriteEpochs {
            state_epoch: held.partition.state_epoch(),
            leader_epoch: held.leader_epoch,
        };
        let partition = &mut held.partition;
        // The group's configs as they are now (Kafka reads them at each use).
        partition.set_config(self.settings.group(&key.group_id).partition);
        let before = partition.metrics();
        let expired = partition.expire_locks(now_ms);
        if !expired.is_empty() {
            self.released.notify_waiters();
            self.write_in_background(key, epochs, expired);
        }
        let result = f(partition, epochs);
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

    /// Writes `change` of `key` and waits for it to commit (an acknowledgement's write). On a
    /// failure the share partition is dropped, to be loaded again from what was committed.
    pub async fn persist(
        &self,
        key: &ShareKey,
        epochs: WriteEpochs,
        change: &StateChange,
    ) -> Result<(), StateError> {
        let Some(persister) = &self.persister else {
            return Ok(());
        };
        if change.is_empty() {
            return Ok(());
        }
        let write = state_write(epochs, change);
        let written = persister
            .write(&key.group_id, key.topic_id, key.partition, &write)
            .await;
        if let Err(e) = &written {
            warn!(group = %key.group_id, partition = key.partition, error = %e, "share state write failed; the share partition is reloaded");
            self.unload_after_failed_write(key, epochs.leader_epoch);
        }
        written
    }

    /// Writes `change` of `key` without waiting (releases, lock expiries, the log-start
    /// archive). A fenced write drops the share partition.
    pub fn write_in_background(&self, key: &ShareKey, epochs: WriteEpochs, change: StateChange) {
        let Some(persister) = &self.persister else {
            return;
        };
        if change.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            warn!("no runtime to write share state on; the change is not persisted");
            return;
        };
        let persister = Arc::clone(persister);
        let key = key.clone();
        let write = state_write(epochs, &change);
        runtime.spawn(async move {
            if let Err(e) = persister
                .write(&key.group_id, key.topic_id, key.partition, &write)
                .await
            {
                warn!(group = %key.group_id, partition = key.partition, error = %e, "share state write (release or lock expiry) failed");
            }
        });
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

    /// Releases what `member` of `group_id` holds in `partitions` (its session ended); when it
    /// was the group's last session here, the group's share partitions are dropped.
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
                    let key = ShareKey {
                        group_id: Arc::clone(group_id),
                        topic_id: *topic_id,
                        partition: *partition,
                    };
                    let h = map.get(&key).map(Arc::clone)?;
                    Some((key, h))
                })
                .collect()
        };
        let mut released = false;
        for (key, h) in held {
            let mut h = h.lock();
            let epochs = WriteEpochs {
                state_epoch: h.partition.state_epoch(),
                leader_epoch: h.leader_epoch,
            };
            h.partition
                .set_config(self.settings.group(group_id).partition);
            let change = h.partition.release_member(member_id, now_ms);
            if !change.is_empty() {
                released = true;
                self.write_in_background(&key, epochs, change);
            }
        }
        if released {
            self.released.notify_waiters();
        }
        if !self.sessions.has_group(group_id) {
            self.forget_group(group_id);
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

    /// Each share partition held now, with its start offset and delivery-complete count (the
    /// share-group lag metric). Takes each partition's lock once, briefly.
    pub fn progress(&self) -> Vec<SharePartitionProgress> {
        let held: Vec<_> = self
            .partitions
            .lock()
            .iter()
            .map(|(k, h)| (k.clone(), Arc::clone(h)))
            .collect();
        held.into_iter()
            .map(|(key, h)| {
                let h = h.lock();
                SharePartitionProgress {
                    group_id: key.group_id,
                    topic_id: key.topic_id,
                    partition: key.partition,
                    start_offset: h.partition.start_offset(),
                    delivery_complete_count: h.partition.delivery_complete_count(),
                }
            })
            .collect()
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

/// The WriteShareGroupState of `change`: the current start offset always (Kafka's leader sends
/// its SPSO with every write), the changed ranges.
fn state_write(epochs: WriteEpochs, change: &StateChange) -> StateWrite {
    StateWrite {
        state_epoch: epochs.state_epoch,
        leader_epoch: epochs.leader_epoch,
        start_offset: change.start_offset,
        delivery_complete_count: change.delivery_complete_count,
        batches: change.batches.clone(),
    }
}

/// Reads `key`'s persisted state for `leader_epoch`; initializes it at `start()` first when it
/// was never initialized (or initialized without a start offset). Retries a coordinator not
/// available yet for up to [`LOAD_WAIT_MAX`].
async fn read_or_initialize(
    persister: &Persister,
    key: &ShareKey,
    leader_epoch: i32,
    start: &impl Fn() -> i64,
) -> Result<PersistedState, StateError> {
    let deadline = tokio::time::Instant::now() + LOAD_WAIT_MAX;
    let mut backoff = LOAD_BACKOFF_MIN;
    let (group, topic_id, partition) = (&*key.group_id, key.topic_id, key.partition);
    for _ in 0..LOAD_ATTEMPTS_MAX {
        let attempt: Result<Option<PersistedState>, StateError> = async {
            match persister
                .read(group, topic_id, partition, leader_epoch)
                .await?
            {
                Some(state) if state.start_offset >= 0 => Ok(Some(state)),
                uninitialized => {
                    let state_epoch = uninitialized.map_or(0, |s| s.state_epoch);
                    persister
                        .initialize(group, topic_id, partition, state_epoch, start())
                        .await?;
                    Ok(None)
                }
            }
        }
        .await;
        match attempt {
            Ok(Some(state)) => return Ok(state),
            // Initialized: the next read records this leader epoch and returns it.
            Ok(None) => {}
            Err(e)
                if (e.is_retriable() || e.code == FENCED_STATE_EPOCH)
                    && tokio::time::Instant::now() + backoff < deadline =>
            {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(LOAD_BACKOFF_MAX);
            }
            Err(e) => return Err(e),
        }
    }
    Err(StateError::new(
        COORDINATOR_NOT_AVAILABLE,
        "the share partition's state could not be loaded in time",
    ))
}

#[cfg(test)]
mod tests {
    use millrace_share::{AcquireMode, LogBatch};

    use super::*;

    const NOW: i64 = 1_000_000;

    fn shares(delivery_count_limit: i16) -> ShareState {
        let mut settings = ShareSettings {
            enabled: true,
            ..Default::default()
        };
        settings.defaults.partition.delivery_count_limit = delivery_count_limit;
        ShareState::new(settings, None)
    }

    /// What member `m` acquires of records 0..=9 now: (first, last, delivery count).
    fn acquire(state: &ShareState, key: &ShareKey, m: &str) -> Vec<(i64, i64, i16)> {
        state
            .with_partition(key, 7, NOW, |p, _| {
                let log = [LogBatch { first: 0, last: 9 }];
                p.acquire(m, 0, &log, 500, 500, AcquireMode::BatchOptimized, &[], NOW)
                    .expect("acquire")
            })
            .expect("loaded")
            .into_iter()
            .map(|r| (r.first, r.last, r.delivery_count))
            .collect()
    }

    #[tokio::test]
    async fn a_failed_write_keeps_the_delivery_counts_for_the_reload() {
        let state = shares(2);
        let key = ShareKey {
            group_id: Arc::from("g"),
            topic_id: Uuid::new_v4(),
            partition: 0,
        };
        for delivery in 1..=2 {
            state.load(&key, 7, || 0).await.expect("load");
            assert_eq!(
                acquire(&state, &key, "m"),
                vec![(0, 9, delivery)],
                "delivery {delivery}"
            );
            // The acknowledgement's write fails: the share partition is dropped.
            state.unload_after_failed_write(&key, 7);
            assert!(!state.is_loaded(&key, 7));
        }
        // Delivered as often as the limit allows: the reload archives the records (it delivered
        // them a third time, and for ever, when each reload started from what was committed).
        state.load(&key, 7, || 0).await.expect("load");
        assert_eq!(acquire(&state, &key, "m"), vec![]);

        // A reload in another leader epoch starts from what was committed (nothing here).
        state.unload_after_failed_write(&key, 7);
        state.load(&key, 8, || 0).await.expect("load");
        let fresh = state
            .with_partition(&key, 8, NOW, |p, _| {
                let log = [LogBatch { first: 0, last: 9 }];
                p.acquire(
                    "m",
                    0,
                    &log,
                    500,
                    500,
                    AcquireMode::BatchOptimized,
                    &[],
                    NOW,
                )
                .expect("acquire")
            })
            .expect("loaded");
        assert_eq!(fresh[0].delivery_count, 1);
    }
}
