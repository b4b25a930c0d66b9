//! The group coordinator: owns every group (classic, or KIP-848 consumer group) whose
//! `__consumer_offsets` partition this broker leads and has loaded, the JoinGroup/SyncGroup requests parked on them, the timers, and
//! the records it writes to and replays from `__consumer_offsets`.
//!
//! Where it sits: the front end translates wire requests into the request structs of
//! [`crate::group`] and calls a method here; methods whose answer may wait (JoinGroup, SyncGroup,
//! commits waiting to be committed) return a [`Reply`] future, the rest answer at once. The broker
//! tells it which partitions this broker leads ([`GroupCoordinator::become_leader`],
//! [`GroupCoordinator::resign`]) and gives it the [`GroupLog`] it appends through.
//!
//! Leadership (Kafka's `scheduleLoadOperation`/`scheduleUnloadOperation`): every partition starts
//! not led here (NOT_COORDINATOR). `become_leader(p, log, leader_epoch)` marks it loading
//! (COORDINATOR_LOAD_IN_PROGRESS) and queues a replay of `log` up to its log end on a loader
//! thread ([`LOADER_THREADS_MAX`]); the replay's result is installed only if the partition is
//! still loading for that same call (a load id), else discarded. `resign(p, leader_epoch)` drops
//! the partition's groups and answers their parked JoinGroup/SyncGroup with NOT_COORDINATOR.
//! Notifications are keyed by leader epoch: while leading in epoch L, a `become_leader` for an
//! epoch above L reloads and one at or below L is a duplicate or stale; a `resign` below L is
//! stale; after a resign in epoch R, only a `become_leader` in R or later loads (the replica
//! manager takes leadership away from a fenced broker without a new epoch and gives it back in the
//! same one). A failed replay leaves the partition not served until a newer epoch.
//!
//! Locking: one `parking_lot::Mutex` per `__consumer_offsets` partition ("shard"). A call takes
//! exactly one shard lock, steps the pure [`Group`], appends any records through the
//! [`GroupLog`] while still holding it (so records are in the log in the order the state changed),
//! and releases it before awaiting anything. No lock is held across an `.await`; replays read the
//! log without any lock. Lock order: shard → (inside `GroupLog::append`) the log's own locks;
//! the loader queue's lock and the load-hold lock are never held while taking a shard lock.
//!
//! Invariants:
//! - the groups of a shard are those of its log as of the last record appended (they are changed
//!   only together with an append under the shard lock, or by a whole replay), and only while the
//!   shard is loaded in the leader epoch its appends carry;
//! - an OffsetCommit, a group metadata change that answers a JoinGroup/SyncGroup, and a deletion
//!   are answered with success only after the [`GroupLog`] says their records are committed; when
//!   a group's metadata record cannot be appended or committed, the replies waiting for it get
//!   the mapped error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) and the group goes back to
//!   rebalancing (`Group::metadata_not_durable`);
//! - a shard answers COORDINATOR_LOAD_IN_PROGRESS while its replay runs and NOT_COORDINATOR when
//!   not led here; a resign or reload answers every request parked on it with NOT_COORDINATOR;
//! - after [`GroupCoordinator::shutdown`] every parked request has been answered and every new
//!   one gets COORDINATOR_NOT_AVAILABLE.
//!
//! Record batches are encoded with the store's codec (`millrace_store::records`), the one v2
//! codec of the workspace; replay is in `replay.rs`.
//!
//! Not here: wire types, sockets, topic existence checks (the front end asks the cluster), which
//! broker leads what (the broker's replica manager says so through `become_leader`/`resign`).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use millrace_store::PartitionLog;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;
use tracing::{debug, error, info, warn};

use crate::consumer_group::{
    ConsumerGroup, ConsumerGroupConfig, ConsumerGroupDescription, ConsumerGroupState,
    HeartbeatRequest, HeartbeatResponse, TopicsView, JOIN_EPOCH,
};
use crate::error::GroupError;
use crate::group::{
    CommittedOffset, Effect, Group, GroupConfig, GroupState, JoinRequest, JoinResponse,
    LeaveResult, Outcome, SyncRequest, SyncResponse,
};
use crate::group_log::{GroupLog, GroupLogError};
use crate::limits::{
    COMMIT_PARTITIONS_MAX, GROUP_ID_BYTES_MAX, LOADER_THREADS_MAX, OFFSET_METADATA_BYTES_MAX,
    TIMER_TICK_MS,
};
use crate::records::{self, OffsetValue, RecordKey};
use crate::replay::{self, ReplayError};
use crate::reply::ready;
pub use crate::reply::Reply;
use crate::snapshot::{PartitionSnapshot, SnapshotStore};
use crate::txn_offsets::TxnOffsets;

use self::encode::{encode_batch, encode_group_records, group_tombstones, Encoded};
pub use self::shard::PartitionStatus;
use self::shard::{GroupEntry, Leadership, Led, Shard};

mod encode;
mod shard;
#[cfg(test)]
mod tests;

/// The future of an append: `Ok` once the records are committed.
type Committed = Reply<Result<(), GroupLogError>>;

/// How often Empty groups are checked for expired offsets (Kafka's
/// offsets.retention.check.interval.ms is 600 s; a shorter period costs little here).
const EXPIRY_CHECK_INTERVAL_MS: i64 = 60_000;
/// How often changed shards are written to the sled snapshot.
const SNAPSHOT_INTERVAL_MS: i64 = 60_000;

/// Broker settings the coordinator honours.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub group: GroupConfig,
    /// The group.consumer.* settings of KIP-848 consumer groups.
    pub consumer: ConsumerGroupConfig,
    /// offsets.retention.minutes, in ms.
    pub offsets_retention_ms: i64,
    /// Where the sled snapshot lives; `None` = no snapshot.
    pub snapshot_dir: Option<PathBuf>,
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone)]
pub struct CommitPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// OffsetCommit, in the coordinator's words.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// v2-v4 retention_time_ms; -1 = the broker's offsets.retention.minutes.
    pub retention_time_ms: i64,
    pub partitions: Vec<CommitPartition>,
}

/// See [`GroupCoordinator::metrics_snapshot`].
#[derive(Debug, Default)]
pub struct CoordinatorSnapshot {
    pub groups: Vec<GroupSnapshot>,
    /// `__consumer_offsets` partitions led here whose state is still being replayed.
    pub loading_partitions: usize,
}

/// One group as the metrics see it.
#[derive(Debug)]
pub struct GroupSnapshot {
    pub group_id: String,
    pub state: GroupState,
    /// (topic, partition, committed offset).
    pub offsets: Vec<(String, i32, i64)>,
}

/// ListGroups entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// The state's name as Kafka lists it (classic or consumer group states).
    pub state: &'static str,
    /// "Classic" or "Consumer", as ListGroups v5 reports it.
    pub group_type: &'static str,
}

/// DescribeGroups member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// DescribeGroups entry; an unknown group is reported Dead with no members, as Kafka does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

/// Topic → partitions, as OffsetFetch asks; `None` = every committed offset of the group.
pub type FetchTopics = Option<Vec<(String, Vec<i32>)>>;

/// Kafka's partition of `__consumer_offsets` for a group: `Utils.abs(groupId.hashCode()) % n`
/// with Java's String.hashCode over UTF-16 code units, so the layout matches Kafka's.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Replies to send once the group's metadata record (if one was written) is committed.
#[derive(Default)]
struct Deliveries {
    joins: Vec<(oneshot::Sender<JoinResponse>, JoinResponse)>,
    syncs: Vec<(oneshot::Sender<SyncResponse>, SyncResponse)>,
    /// The record's commit, if one was appended.
    committed: Option<Committed>,
    /// Why the record could not be appended at all, if it could not.
    append_failed: Option<GroupError>,
    /// Whose record it is (coordinator, group id, generation, load id), to put the group back
    /// into rebalancing if the record does not commit.
    owner: Option<(Weak<GroupCoordinator>, String, i32, u64)>,
}

impl Deliveries {
    /// Sends now if no record was written; once it is committed if one was; and if it cannot be
    /// committed, answers every reply with the mapped error and returns the group to rebalancing.
    fn send(mut self) {
        if let Some(e) = self.append_failed.take() {
            self.fail(e);
            return;
        }
        match self.committed.take() {
            None => self.send_now(),
            Some(committed) => {
                tokio::spawn(async move {
                    match committed.await {
                        Ok(()) => self.send_now(),
                        Err(e) => self.fail(e.into()),
                    }
                });
            }
        }
    }

    fn send_now(self) {
        for (tx, r) in self.joins {
            let _ = tx.send(r);
        }
        for (tx, r) in self.syncs {
            let _ = tx.send(r);
        }
    }

    fn fail(self, error: GroupError) {
        warn!(group = ?self.owner.as_ref().map(|o| &o.1), %error, "group metadata did not become durable (not committed); answering with the error");
        for (tx, r) in self.joins {
            let _ = tx.send(JoinResponse::error(error.clone(), &r.member_id));
        }
        for (tx, _) in self.syncs {
            let _ = tx.send(SyncResponse::error(error.clone()));
        }
        if let Some((coordinator, group_id, generation, load_id)) = self.owner {
            if let Some(c) = coordinator.upgrade() {
                c.metadata_not_durable(&group_id, generation, load_id);
            }
        }
    }
}

/// A queued replay.
struct LoadJob {
    partition: i32,
    led: Led,
}

/// Replays waiting for a loader thread (at most one per partition: a newer one replaces it) and
/// how many loader threads run.
#[derive(Default)]
struct LoadQueue {
    jobs: BTreeMap<i32, LoadJob>,
    workers: usize,
}

/// While alive, loader threads do not start replays: partitions stay loading. For tests and
/// simulators that need to observe COORDINATOR_LOAD_IN_PROGRESS.
pub struct LoadHold {
    coordinator: Arc<GroupCoordinator>,
}

impl Drop for LoadHold {
    fn drop(&mut self) {
        let mut holds = self.coordinator.load_holds.lock();
        *holds = holds.saturating_sub(1);
        self.coordinator.load_holds_released.notify_all();
    }
}

/// The group coordinator of one broker.
pub struct GroupCoordinator {
    me: Weak<GroupCoordinator>,
    config: CoordinatorConfig,
    log: Arc<dyn GroupLog>,
    shards: Vec<Mutex<Shard>>,
    /// The sled snapshot, opened by the first loader that needs it (opening takes tens of
    /// milliseconds, which a broker's start should not wait for).
    snapshot: std::sync::OnceLock<Option<SnapshotStore>>,
    closed: AtomicBool,
    next_load_id: AtomicU64,
    loads: Mutex<LoadQueue>,
    load_holds: Mutex<usize>,
    load_holds_released: Condvar,
}

impl GroupCoordinator {
    /// The sled snapshot, opened on first use.
    fn snapshot_store(&self) -> Option<&SnapshotStore> {
        self.snapshot
            .get_or_init(|| {
                self.config
                    .snapshot_dir
                    .as_deref()
                    .and_then(SnapshotStore::open)
            })
            .as_ref()
    }

    /// A coordinator for `__consumer_offsets` partitions `0..partition_count`, appending through
    /// `log`. Nothing is led yet: every group gets NOT_COORDINATOR until
    /// [`GroupCoordinator::become_leader`] names and loads its partition.
    pub fn new(
        config: CoordinatorConfig,
        partition_count: i32,
        log: Arc<dyn GroupLog>,
    ) -> Arc<Self> {
        let shards = (0..partition_count.max(0))
            .map(|partition| {
                Mutex::new(Shard {
                    partition,
                    leadership: Leadership::NotLeader,
                    epoch_floor: 0,
                    dirty: false,
                    groups: BTreeMap::new(),
                    txn: TxnOffsets::default(),
                })
            })
            .collect();
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            config,
            log,
            shards,
            snapshot: std::sync::OnceLock::new(),
            closed: AtomicBool::new(false),
            next_load_id: AtomicU64::new(1),
            loads: Mutex::new(LoadQueue::default()),
            load_holds: Mutex::new(0),
            load_holds_released: Condvar::new(),
        })
    }

    pub fn partition_count(&self) -> i32 {
        i32::try_from(self.shards.len()).unwrap_or(i32::MAX)
    }

    fn shard(&self, group_id: &str) -> Result<&Mutex<Shard>, GroupError> {
        if group_id.is_empty() || group_id.len() > GROUP_ID_BYTES_MAX {
            return Err(GroupError::InvalidGroupId);
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let index = partition_for(group_id, self.partition_count());
        self.shards
            .get(index as usize)
            .ok_or(GroupError::CoordinatorNotAvailable)
    }

    /// Locks the shard of `group_id` once it is loaded here.
    fn loaded_shard(
        &self,
        group_id: &str,
    ) -> Result<parking_lot::MutexGuard<'_, Shard>, GroupError> {
        let shard = self.shard(group_id)?.lock();
        match shard.leadership {
            Leadership::Loaded(_) => Ok(shard),
            Leadership::Loading(_) => Err(GroupError::CoordinatorLoadInProgress),
            Leadership::NotLeader | Leadership::Failed { .. } => Err(GroupError::NotCoordinator),
        }
    }

    /// FindCoordinator's question for a partition led here: may this broker serve `group_id`
    /// right now? NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, or yes.
    pub fn check_coordinator(&self, group_id: &str) -> Result<(), GroupError> {
        self.loaded_shard(group_id).map(|_| ())
    }

    /// Where `__consumer_offsets` partition `partition` stands here (`None` outside
    /// `0..partition_count`).
    pub fn partition_status(&self, partition: i32) -> Option<PartitionStatus> {
        let shard = self.shards.get(usize::try_from(partition).ok()?)?;
        let status = shard.lock().leadership.status();
        Some(status)
    }

    // ----- leadership -----

    /// This broker leads `__consumer_offsets` partition `partition` in `leader_epoch`, over `log`:
    /// replay it in the background (COORDINATOR_LOAD_IN_PROGRESS meanwhile), then serve its groups.
    /// A duplicate or stale call (see the module comment) changes nothing; a newer epoch while
    /// loaded reloads, answering the parked requests NOT_COORDINATOR. Never blocks on I/O.
    pub fn become_leader(&self, partition: i32, log: Arc<PartitionLog>, leader_epoch: i32) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            warn!(
                partition,
                partitions = self.shards.len(),
                "leadership of an unknown __consumer_offsets partition ignored"
            );
            return;
        };
        let mut shard = shard.lock();
        let load = match &shard.leadership {
            Leadership::Loading(l) | Leadership::Loaded(l) => leader_epoch > l.leader_epoch,
            Leadership::NotLeader | Leadership::Failed { .. } => leader_epoch >= shard.epoch_floor,
        };
        if !load {
            debug!(partition, leader_epoch, status = ?shard.leadership.status(), "become_leader ignored: duplicate or stale leader epoch");
            return;
        }
        let parked = shard.unload();
        let led = Led {
            leader_epoch,
            load_id: self.next_load_id.fetch_add(1, Ordering::Relaxed),
            log,
        };
        shard.epoch_floor = shard.epoch_floor.max(leader_epoch);
        shard.leadership = Leadership::Loading(led.clone());
        drop(shard);
        info!(
            partition,
            leader_epoch, "loading __consumer_offsets partition"
        );
        parked.answer(&GroupError::NotCoordinator);
        self.schedule_load(LoadJob { partition, led });
    }

    /// This broker no longer leads `partition`: its groups are dropped, parked requests answered
    /// NOT_COORDINATOR, a running replay discarded. `leader_epoch`: the epoch of the partition
    /// state that took leadership away (or the one it was led in); a resign below the epoch being
    /// led is stale and ignored. `None` (the partition is gone) unloads unconditionally and forgets
    /// every epoch.
    pub fn resign(&self, partition: i32, leader_epoch: Option<i32>) {
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return;
        };
        let mut shard = shard.lock();
        let leading = shard.leadership.leader_epoch();
        if let (Some(e), Some(l)) = (leader_epoch, leading) {
            if e < l {
                debug!(
                    partition,
                    leader_epoch = e,
                    leading = l,
                    "resign ignored: stale leader epoch"
                );
                return;
            }
        }
        shard.epoch_floor = match leader_epoch {
            Some(e) => shard.epoch_floor.max(e),
            None => 0,
        };
        let parked = shard.unload();
        shard.leadership = Leadership::NotLeader;
        drop(shard);
        self.loads.lock().jobs.remove(&partition);
        if leading.is_some() {
            info!(
                partition,
                ?leader_epoch,
                "unloaded __consumer_offsets partition"
            );
        }
        parked.answer(&GroupError::NotCoordinator);
    }

    /// Keeps loader threads from starting replays until the returned hold is dropped.
    pub fn hold_loads(&self) -> Option<LoadHold> {
        let coordinator = self.me.upgrade()?;
        *self.load_holds.lock() += 1;
        Some(LoadHold { coordinator })
    }

    fn schedule_load(&self, job: LoadJob) {
        let start_worker = {
            let mut loads = self.loads.lock();
            loads.jobs.insert(job.partition, job);
            let start = loads.workers < LOADER_THREADS_MAX;
            if start {
                loads.workers += 1;
            }
            start
        };
        if !start_worker {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let work = move || me.run_loads();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(work);
            }
            Err(_) => {
                if let Err(e) = std::thread::Builder::new()
                    .name("group-loader".into())
                    .spawn(work)
                {
                    error!(error = %e, "cannot start a group loader thread");
                    let mut loads = self.loads.lock();
                    loads.workers = loads.workers.saturating_sub(1);
                }
            }
        }
    }

    /// A loader thread: replays queued partitions until the queue is empty.
    fn run_loads(&self) {
        loop {
            {
                let mut holds = self.load_holds.lock();
                while *holds > 0 {
                    self.load_holds_released.wait(&mut holds);
                }
            }
            let job = {
                let mut loads = self.loads.lock();
                match loads.jobs.pop_first() {
                    Some((_, job)) => job,
                    None => {
                        loads.workers = loads.workers.saturating_sub(1);
                        return;
                    }
                }
            };
            if self.closed.load(Ordering::Acquire) {
                continue;
            }
            self.load(job);
        }
    }

    /// Replays one partition and installs the result if its leadership is still the one the job
    /// was queued for.
    fn load(&self, job: LoadJob) {
        let LoadJob { partition, led } = job;
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return;
        };
        let current = || matches!(&shard.lock().leadership, Leadership::Loading(l) if l.load_id == led.load_id);
        if !current() {
            return;
        }
        let started = std::time::Instant::now();
        let snapshot = self.snapshot_store().and_then(|s| s.read(partition));
        let result = replay::replay(
            partition,
            &led.log,
            snapshot,
            &self.config.group,
            &self.config.consumer,
            now_ms(),
            &|| !current(),
        );
        let mut guard = shard.lock();
        if !matches!(&guard.leadership, Leadership::Loading(l) if l.load_id == led.load_id) {
            debug!(
                partition,
                leader_epoch = led.leader_epoch,
                "replay discarded: leadership changed meanwhile"
            );
            return;
        }
        match result {
            Ok(replayed) => {
                guard.groups = replayed
                    .groups
                    .into_iter()
                    .map(|(id, g)| (id, GroupEntry::new(g)))
                    .collect();
                let now = now_ms();
                for (id, consumer) in replayed.consumer_groups {
                    guard
                        .groups
                        .entry(id.clone())
                        .or_insert_with(|| {
                            GroupEntry::new(Group::new(&id, &self.config.group, now))
                        })
                        .consumer = Some(consumer);
                }
                guard.txn = replayed.txn;
                guard.dirty = replayed.records > 0;
                let groups = guard.groups.len();
                guard.leadership = Leadership::Loaded(led.clone());
                drop(guard);
                info!(
                    partition,
                    leader_epoch = led.leader_epoch,
                    groups,
                    records_replayed = replayed.records,
                    from_snapshot = replayed.from_snapshot,
                    log_end_offset = replayed.log_end_offset,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "__consumer_offsets partition loaded"
                );
                if replayed.records > 0 {
                    self.write_snapshot(partition, true);
                    if let Some(store) = self.snapshot_store() {
                        store.flush();
                    }
                }
            }
            Err(ReplayError::Superseded) => {}
            Err(e) => {
                guard.leadership = Leadership::Failed {
                    leader_epoch: led.leader_epoch,
                };
                guard.epoch_floor = guard.epoch_floor.max(led.leader_epoch.saturating_add(1));
                drop(guard);
                error!(partition, leader_epoch = led.leader_epoch, error = %e, "__consumer_offsets partition not loaded; its groups get NOT_COORDINATOR until a newer leader epoch");
            }
        }
    }

    /// Writes every loaded shard that changed (or all, with `all`) to the sled snapshot.
    fn write_snapshots(&self, all: bool) {
        if self.snapshot_store().is_none() {
            return;
        }
        for p in 0..self.partition_count() {
            self.write_snapshot(p, all);
        }
        if let Some(store) = self.snapshot_store() {
            store.flush();
        }
    }

    /// Writes one loaded shard's snapshot if it changed (or always, with `always`). The batch mark
    /// is read from the log without the shard lock: the batch below the snapshot's offset does not
    /// change while this broker leads, and a wrong mark only makes the snapshot unusable.
    fn write_snapshot(&self, partition: i32, always: bool) {
        let Some(store) = self.snapshot_store() else {
            return;
        };
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return;
        };
        let (mut snap, log) = {
            let mut shard = shard.lock();
            let Some(led) = shard.leadership.loaded().cloned() else {
                return;
            };
            if !(always || shard.dirty) {
                return;
            }
            if shard.txn.any_pending() {
                // The snapshot holds no pending offsets: a replay from it would miss records
                // that a later COMMIT marker makes committed. Written once none is pending.
                shard.dirty = true;
                return;
            }
            shard.dirty = false;
            (materialize(&shard, &led.log), led.log)
        };
        snap.last_batch = replay::batch_mark_before(&log, snap.next_offset);
        if snap.next_offset > 0 && snap.last_batch.is_none() {
            debug!(
                partition,
                next_offset = snap.next_offset,
                "no batch mark for the snapshot; not written"
            );
            return;
        }
        store.write(partition, &snap);
    }

    // ----- appends -----

    /// Appends records as one batch through the [`GroupLog`] as the shard's leader; returns the
    /// future that resolves once they are committed.
    fn append(
        &self,
        shard: &mut Shard,
        records: &[(Bytes, Option<Bytes>)],
    ) -> Result<Committed, GroupError> {
        self.append_as(shard, records, None)
            .map(|(_, committed)| committed)
    }

    /// As `append`, also returning the offset of the first record; `producer`: the producer id
    /// and epoch of a transactional batch (the sequence continues the producer's on the
    /// partition).
    fn append_as(
        &self,
        shard: &mut Shard,
        records: &[(Bytes, Option<Bytes>)],
        producer: Option<(i64, i16)>,
    ) -> Result<(i64, Committed), GroupError> {
        let led = shard
            .leadership
            .loaded()
            .cloned()
            .ok_or(GroupError::NotCoordinator)?;
        let producer = producer.map(|(id, epoch)| (id, epoch, led.log.next_sequence(id, epoch)));
        let batch: BytesMut = encode_batch(records, now_ms(), producer);
        let appended = self.log.append(shard.partition, led.leader_epoch, batch)?;
        shard.dirty = true;
        let first = appended
            .last_offset
            .saturating_sub(i64::try_from(records.len()).unwrap_or(1) - 1);
        Ok((first, appended.committed))
    }

    /// Carries out a step's effects for `group_id`: takes parked responders, writes the group's
    /// metadata record, and returns the replies to send (after the commit if a record was written).
    fn apply_effects(&self, shard: &mut Shard, group_id: &str, effects: Vec<Effect>) -> Deliveries {
        let mut out = Deliveries::default();
        let mut persist = false;
        if let Some(entry) = shard.groups.get_mut(group_id) {
            for effect in effects {
                match effect {
                    Effect::JoinReply {
                        member_id,
                        response,
                    } => {
                        if let Some(tx) = entry.joins.remove(&member_id) {
                            out.joins.push((tx, response));
                        }
                    }
                    Effect::SyncReply {
                        member_id,
                        response,
                    } => {
                        if let Some(tx) = entry.syncs.remove(&member_id) {
                            out.syncs.push((tx, response));
                        }
                    }
                    Effect::PersistGroup => persist = true,
                }
            }
        }
        if persist {
            let value = shard
                .groups
                .get(group_id)
                .map(|e| records::encode_group_value(&e.group.metadata_value()));
            if let Some(value) = value {
                let key = records::encode_key(&RecordKey::Group {
                    group: group_id.to_string(),
                });
                match self.append(shard, &[(key, Some(value))]) {
                    Ok(committed) => out.committed = Some(committed),
                    Err(e) => out.append_failed = Some(e),
                }
                let generation = shard
                    .groups
                    .get(group_id)
                    .map_or(0, |e| e.group.generation());
                let load_id = shard.load_id().unwrap_or(0);
                out.owner = Some((self.me.clone(), group_id.to_string(), generation, load_id));
            }
        }
        out
    }

    // ----- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----

    pub fn join(&self, req: JoinRequest) -> Reply<JoinResponse> {
        let member_id = req.member_id.clone();
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(JoinResponse::error(e, &member_id)),
        };
        if !req.member_id.is_empty() && !shard.groups.contains_key(&req.group_id) {
            return ready(JoinResponse::error(GroupError::UnknownMemberId, &member_id));
        }
        let config = self.config.group.clone();
        let created = !shard.groups.contains_key(&req.group_id);
        let entry = shard
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| GroupEntry::new(Group::new(&req.group_id, &config, now)));
        // A consumer group takes classic members only once it is empty (it then becomes a
        // classic group again): Kafka's rule with group.consumer.migration.policy=disabled.
        if entry.active_consumer().is_some() {
            return ready(JoinResponse::error(
                GroupError::InconsistentGroupProtocol,
                &member_id,
            ));
        }
        let converted = entry
            .consumer
            .take()
            .map(|c| encode_group_records(c.tombstones()));
        let new_member_id = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
        let before = (entry.group.state(), entry.group.generation());
        let (outcome, effects) = entry.group.join(&config, &req, new_member_id, now);
        log_transition(&entry.group, before);
        let (tx, rx) = oneshot::channel();
        let direct = match outcome {
            Outcome::Reply(r) => Some((tx, r)),
            Outcome::Await { member_id } => {
                if let Some(old) = entry.joins.insert(member_id.clone(), tx) {
                    let _ = old.send(JoinResponse::error(
                        GroupError::RebalanceInProgress,
                        &member_id,
                    ));
                }
                None
            }
        };
        // An empty consumer group that became classic: its consumer records go (nobody waits;
        // if they do not commit, a reload finds an empty consumer group, which a join converts
        // again).
        if let Some(tombstones) = converted {
            if let Err(e) = self.append(&mut shard, &tombstones) {
                warn!(group = %req.group_id, error = %e, "cannot write the tombstones of a converted consumer group");
            }
        }
        let mut deliveries = self.apply_effects(&mut shard, &req.group_id, effects);
        // An answer given now still waits for the record this step wrote, like the parked ones.
        deliveries.joins.extend(direct);
        // A refused first join leaves no group behind (Kafka validates before creating one).
        let leftover = shard.groups.get(&req.group_id).is_some_and(|e| {
            e.group.is_empty() && e.group.offsets.is_empty() && e.group.protocol_type().is_none()
        });
        if created && leftover {
            shard.groups.remove(&req.group_id);
        }
        drop(shard);
        deliveries.send();
        Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                JoinResponse::error(GroupError::CoordinatorNotAvailable, &member_id)
            })
        })
    }

    pub fn sync(&self, req: SyncRequest) -> Reply<SyncResponse> {
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(SyncResponse::error(e)),
        };
        let Some(entry) = shard.groups.get_mut(&req.group_id) else {
            return ready(SyncResponse::error(GroupError::UnknownMemberId));
        };
        let before = (entry.group.state(), entry.group.generation());
        let (outcome, effects) = entry.group.sync(&req, now);
        log_transition(&entry.group, before);
        let (tx, rx) = oneshot::channel();
        let direct = match outcome {
            Outcome::Reply(r) => Some((tx, r)),
            Outcome::Await { member_id } => {
                if let Some(old) = entry.syncs.insert(member_id, tx) {
                    let _ = old.send(SyncResponse::error(GroupError::RebalanceInProgress));
                }
                None
            }
        };
        let mut deliveries = self.apply_effects(&mut shard, &req.group_id, effects);
        deliveries.syncs.extend(direct);
        drop(shard);
        deliveries.send();
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| SyncResponse::error(GroupError::CoordinatorNotAvailable))
        })
    }

    /// The group's metadata record of `generation`, written in load `load_id`, did not commit: if
    /// the shard still holds that load and the group is still in that generation, it forgets the
    /// assignment and rebalances (Kafka's resetAndPropagateAssignmentError + prepareRebalance),
    /// answering what it must.
    fn metadata_not_durable(&self, group_id: &str, generation: i32, load_id: u64) {
        let now = now_ms();
        let Ok(shard) = self.shard(group_id) else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().map(|l| l.load_id) != Some(load_id) {
            return;
        }
        let Some(entry) = shard.groups.get_mut(group_id) else {
            return;
        };
        let before = (entry.group.state(), entry.group.generation());
        let effects = entry.group.metadata_not_durable(generation, now);
        log_transition(&entry.group, before);
        let deliveries = self.apply_effects(&mut shard, group_id, effects);
        drop(shard);
        deliveries.send();
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        entry
            .group
            .heartbeat(member_id, group_instance_id, generation_id, now_ms())
    }

    /// LeaveGroup: one result per (member id, instance id), or a group-level error.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> LeaveResult {
        let mut shard = self.loaded_shard(group_id)?;
        let Some(entry) = shard.groups.get_mut(group_id) else {
            return Ok(members
                .iter()
                .map(|_| Err(GroupError::UnknownMemberId))
                .collect());
        };
        let before = (entry.group.state(), entry.group.generation());
        let (result, effects) = entry.group.leave(members, now_ms());
        log_transition(&entry.group, before);
        let deliveries = self.apply_effects(&mut shard, group_id, effects);
        drop(shard);
        deliveries.send();
        result
    }

    // ----- KIP-848 consumer groups -----

    /// ConsumerGroupHeartbeat. A classic group becomes a consumer group on a join only while it
    /// has no members (GROUP_ID_NOT_FOUND otherwise, Kafka's answer with migration disabled);
    /// any other epoch for a group that is not a consumer group here gets UNKNOWN_MEMBER_ID, so
    /// that members whose group was lost (a restart, a coordinator move) rejoin.
    pub fn consumer_heartbeat(
        &self,
        req: &HeartbeatRequest,
        topics: &dyn TopicsView,
    ) -> Reply<Result<HeartbeatResponse, GroupError>> {
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let (result, writes) = self.consumer_heartbeat_locked(&mut shard, req, topics, now);
        if writes.is_empty() {
            return ready(result);
        }
        // The answer waits until what it reports is in the log, as in Kafka.
        let load_id = shard.load_id().unwrap_or(0);
        let committed = match self.append(&mut shard, &writes) {
            Ok(c) => c,
            Err(e) => {
                // The state moved on but its records are not in the log: write it all again.
                if let Some(c) = shard
                    .groups
                    .get_mut(&req.group_id)
                    .and_then(|e| e.consumer.as_mut())
                {
                    c.mark_all_dirty();
                }
                return ready(Err(e));
            }
        };
        drop(shard);
        let me = self.me.clone();
        let group_id = req.group_id.clone();
        Box::pin(async move {
            match committed.await {
                Ok(()) => result,
                Err(e) => {
                    if let Some(c) = me.upgrade() {
                        c.consumer_records_not_durable(&group_id, load_id);
                    }
                    Err(e.into())
                }
            }
        })
    }

    /// A consumer group's records did not commit (in load `load_id`): while the shard still holds
    /// that load, the whole group is written again with its next records, so the log catches up
    /// with the state in memory (Kafka reverts the state instead; either way no member is left
    /// with partitions the log would give to another).
    fn consumer_records_not_durable(&self, group_id: &str, load_id: u64) {
        let Ok(shard) = self.shard(group_id) else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().map(|l| l.load_id) != Some(load_id) {
            return;
        }
        if let Some(c) = shard
            .groups
            .get_mut(group_id)
            .and_then(|e| e.consumer.as_mut())
        {
            c.mark_all_dirty();
        }
    }

    /// The heartbeat's step under the shard lock: its answer and the records to append.
    fn consumer_heartbeat_locked(
        &self,
        shard: &mut Shard,
        req: &HeartbeatRequest,
        topics: &dyn TopicsView,
        now: i64,
    ) -> (Result<HeartbeatResponse, GroupError>, Vec<Encoded>) {
        let created = !shard.groups.contains_key(&req.group_id);
        let config = &self.config;
        if created && req.member_epoch != JOIN_EPOCH {
            return (Err(GroupError::UnknownMemberId), Vec::new());
        }
        let entry = shard
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| GroupEntry::new(Group::new(&req.group_id, &config.group, now)));
        if entry.consumer.is_none() {
            if req.member_epoch != JOIN_EPOCH {
                return (Err(GroupError::UnknownMemberId), Vec::new());
            }
            if entry.has_members() || entry.group.state() == GroupState::Dead {
                return (Err(GroupError::GroupIdNotFound), Vec::new());
            }
        }
        let converted = entry.consumer.is_none();
        let consumer = entry.consumer.get_or_insert_with(|| {
            let mut c = ConsumerGroup::new(&req.group_id);
            c.set_empty_since_ms(now);
            c
        });
        let before = consumer.group_epoch();
        let result = consumer.heartbeat(
            &config.consumer,
            req,
            topics,
            || uuid::Uuid::new_v4().to_string(),
            now,
        );
        if consumer.group_epoch() != before {
            debug!(group = %req.group_id, group_epoch = consumer.group_epoch(), state = consumer.state().name(), "consumer group epoch moved");
        }
        let writes = encode_group_records(consumer.take_records());
        // A refused first join leaves no group behind, and a classic group it would have
        // converted stays classic.
        if result.is_err() && consumer.is_empty() {
            if created && entry.group.offsets.is_empty() {
                shard.groups.remove(&req.group_id);
                return (result, Vec::new());
            }
            if converted {
                entry.consumer = None;
                return (result, Vec::new());
            }
        }
        (result, writes)
    }

    /// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for a group that does not exist or
    /// is a classic group, as in Kafka.
    pub fn describe_consumer_group(
        &self,
        group_id: &str,
    ) -> Result<ConsumerGroupDescription, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        shard
            .groups
            .get(group_id)
            .and_then(|e| e.consumer.as_ref())
            .map(|c| c.describe(&self.config.consumer))
            .ok_or(GroupError::GroupIdNotFound)
    }

    // ----- offsets -----

    /// OffsetCommit: one result per partition, in request order, answered once committed.
    pub fn commit_offsets(&self, req: CommitRequest) -> Reply<Vec<Result<(), GroupError>>> {
        self.commit(req, None)
    }

    /// TxnOffsetCommit: as `commit_offsets`, but written in a transactional batch of producer
    /// `producer_id`/`producer_epoch` and pending until the transaction's marker
    /// (`complete_txn`).
    pub fn commit_txn_offsets(
        &self,
        req: CommitRequest,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Reply<Vec<Result<(), GroupError>>> {
        self.commit(req, Some((producer_id, producer_epoch)))
    }

    /// A transaction marker of `producer_id` was committed on `__consumer_offsets` partition
    /// `partition`: its pending offsets there become committed (`commit`) or are dropped.
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().is_none() {
            return;
        }
        let now = now_ms();
        let config = &self.config.group;
        for ((group, topic, p), value) in shard.txn.complete(producer_id, commit) {
            shard
                .groups
                .entry(group.clone())
                .or_insert_with(|| GroupEntry::new(Group::new(&group, config, now)))
                .group
                .offsets
                .insert((topic, p), value);
        }
        shard.dirty = true;
    }

    /// Whether `group_id` has a transactional offset for `topic`/`partition` still pending (an
    /// OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for it).
    pub fn has_pending_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        self.loaded_shard(group_id)
            .is_ok_and(|shard| shard.txn.is_pending(group_id, topic, partition))
    }

    fn commit(
        &self,
        req: CommitRequest,
        producer: Option<(i64, i16)>,
    ) -> Reply<Vec<Result<(), GroupError>>> {
        let count = req.partitions.len();
        let all = move |e: GroupError| -> Reply<Vec<Result<(), GroupError>>> {
            ready(vec![Err(e); count])
        };
        if count > COMMIT_PARTITIONS_MAX {
            return all(GroupError::InvalidRequest(format!(
                "OffsetCommit carries more than {COMMIT_PARTITIONS_MAX} partitions"
            )));
        }
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return all(e),
        };
        let config = self.config.group.clone();
        if !shard.groups.contains_key(&req.group_id) {
            // Kafka: a generation < 0 creates a "simple" group; otherwise the group must exist
            // (the front end answers ILLEGAL_GENERATION to versions before 9).
            if req.generation_id >= 0 {
                return all(GroupError::GroupIdNotFound);
            }
            shard.groups.insert(
                req.group_id.clone(),
                GroupEntry::new(Group::new(&req.group_id, &config, now)),
            );
        }
        let Some(entry) = shard.groups.get_mut(&req.group_id) else {
            return all(GroupError::CoordinatorNotAvailable);
        };
        let valid = match &entry.consumer {
            Some(consumer) => consumer.validate_commit(&req.member_id, req.generation_id),
            None => entry.group.validate_commit(
                req.generation_id,
                &req.member_id,
                req.group_instance_id.as_deref(),
                now,
            ),
        };
        // A transactional commit naming no member is not checked against the group (Kafka's
        // `validateTransactionalOffsetCommit`).
        let unchecked = producer.is_some() && req.member_id.is_empty() && req.generation_id < 0;
        if let Err(e) = valid.or_else(|e| if unchecked { Ok(()) } else { Err(e) }) {
            return all(e);
        }
        let mut results: Vec<Result<(), GroupError>> = Vec::with_capacity(count);
        let mut writes = Vec::new();
        let mut applied = Vec::new();
        for p in &req.partitions {
            let metadata = p.metadata.clone().unwrap_or_default();
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                results.push(Err(GroupError::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue {
                offset: p.offset,
                leader_epoch: p.leader_epoch,
                metadata,
                commit_timestamp_ms: now,
                expire_timestamp_ms: if req.retention_time_ms >= 0 {
                    now.saturating_add(req.retention_time_ms)
                } else {
                    -1
                },
            };
            let key = RecordKey::Offset {
                group: req.group_id.clone(),
                topic: p.topic.clone(),
                partition: p.partition,
            };
            writes.push((
                records::encode_key(&key),
                Some(records::encode_offset_value(&value)),
            ));
            applied.push(((p.topic.clone(), p.partition), value));
            results.push(Ok(()));
        }
        if writes.is_empty() {
            return ready(results);
        }
        let (first, committed) = match self.append_as(&mut shard, &writes, producer) {
            Ok(appended) => appended,
            Err(e) => return all(e),
        };
        for (i, ((topic, p), value)) in applied.iter().enumerate() {
            let key = (req.group_id.clone(), topic.clone(), *p);
            let record_offset = first.saturating_add(i64::try_from(i).unwrap_or(0));
            match producer {
                Some((producer_id, _)) => {
                    shard
                        .txn
                        .add_pending(producer_id, key, record_offset, value.clone())
                }
                None => shard.txn.note_plain(key, record_offset),
            }
        }
        if producer.is_none() {
            if let Some(entry) = shard.groups.get_mut(&req.group_id) {
                for (tp, value) in applied {
                    entry.group.offsets.insert(tp, value);
                }
            }
        }
        drop(shard);
        Box::pin(async move {
            match committed.await {
                Ok(()) => results,
                Err(e) => {
                    // Partitions refused on their own (metadata too large) keep their error, as
                    // in Kafka; the others get the append's.
                    let e = GroupError::from(e);
                    results
                        .into_iter()
                        .map(|r| r.and_then(|()| Err(e.clone())))
                        .collect()
                }
            }
        })
    }

    /// OffsetFetch for one group: per topic, per partition, the committed offset (`None` =
    /// nothing committed, which the front end answers as -1).
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: FetchTopics,
    ) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, GroupError> {
        self.fetch_offsets_as(group_id, None, -1, topics)
    }

    /// OffsetFetch v9+ from a member of a consumer group (`member_id`, `member_epoch`): the
    /// member must be current (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), as in Kafka.
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets_as(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
        topics: FetchTopics,
    ) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        if let Some(consumer) = shard.groups.get(group_id).and_then(|e| e.consumer.as_ref()) {
            consumer.validate_fetch(member_id, member_epoch)?;
        }
        let group = shard.groups.get(group_id).map(|e| &e.group);
        Ok(match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, partitions)| {
                    let found = partitions
                        .into_iter()
                        .map(|p| {
                            let o = group.and_then(|g| g.offsets.get(&(topic.clone(), p)).cloned());
                            (p, o)
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> =
                    BTreeMap::new();
                if let Some(g) = group {
                    for ((topic, p), o) in &g.offsets {
                        by_topic
                            .entry(topic.clone())
                            .or_default()
                            .push((*p, Some(o.clone())));
                    }
                }
                by_topic.into_iter().collect()
            }
        })
    }

    // ----- metrics and readiness -----

    /// What the metrics read at scrape time: each group loaded here with its state and committed
    /// offsets, and how many `__consumer_offsets` partitions led here are still loading. Takes
    /// each shard's lock once, briefly.
    pub fn metrics_snapshot(&self) -> CoordinatorSnapshot {
        let mut out = CoordinatorSnapshot::default();
        for shard in &self.shards {
            let shard = shard.lock();
            match shard.leadership {
                Leadership::Loaded(_) => {}
                Leadership::Loading(_) => {
                    out.loading_partitions += 1;
                    continue;
                }
                Leadership::NotLeader | Leadership::Failed { .. } => continue,
            }
            for entry in shard.groups.values() {
                let g = &entry.group;
                // A consumer group is counted in the classic state closest to its own, so the
                // metric keeps one label set: Assigning and Reconciling are a rebalance.
                let state = match entry.consumer.as_ref().map(ConsumerGroup::state) {
                    None => g.state(),
                    Some(ConsumerGroupState::Empty) => GroupState::Empty,
                    Some(ConsumerGroupState::Stable) => GroupState::Stable,
                    Some(ConsumerGroupState::Assigning | ConsumerGroupState::Reconciling) => {
                        GroupState::PreparingRebalance
                    }
                };
                out.groups.push(GroupSnapshot {
                    group_id: g.id().to_string(),
                    state,
                    offsets: g
                        .offsets
                        .iter()
                        .map(|((topic, partition), o)| (topic.clone(), *partition, o.offset))
                        .collect(),
                });
            }
        }
        out
    }

    // ----- admin -----

    /// ListGroups over the partitions loaded here, filtered by state names (case-insensitive;
    /// empty = all). Fails with COORDINATOR_LOAD_IN_PROGRESS while any partition led here is
    /// loading, as Kafka does; partitions not led here contribute nothing.
    pub fn list_groups(&self, states: &[String]) -> Result<Vec<GroupListing>, GroupError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            match shard.leadership {
                Leadership::Loaded(_) => {}
                Leadership::Loading(_) => return Err(GroupError::CoordinatorLoadInProgress),
                Leadership::NotLeader | Leadership::Failed { .. } => continue,
            }
            for entry in shard.groups.values() {
                let g = &entry.group;
                if g.state() == GroupState::Dead {
                    continue;
                }
                let listing = match &entry.consumer {
                    Some(c) => GroupListing {
                        group_id: g.id().to_string(),
                        protocol_type: "consumer".to_string(),
                        state: c.state().name(),
                        group_type: "Consumer",
                    },
                    None => GroupListing {
                        group_id: g.id().to_string(),
                        protocol_type: g.protocol_type().unwrap_or_default().to_string(),
                        state: g.state().name(),
                        group_type: "Classic",
                    },
                };
                if !states.is_empty()
                    && !states.iter().any(|s| s.eq_ignore_ascii_case(listing.state))
                {
                    continue;
                }
                out.push(listing);
            }
        }
        Ok(out)
    }

    pub fn describe_group(&self, group_id: &str) -> Result<GroupDescription, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        let Some(entry) = shard.groups.get(group_id) else {
            return Ok(GroupDescription {
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            });
        };
        if entry.consumer.is_some() {
            // Kafka: "Group … is not a classic group." (the admin client then asks
            // ConsumerGroupDescribe).
            return Err(GroupError::GroupIdNotFound);
        }
        let g = &entry.group;
        let stable = g.state() == GroupState::Stable;
        let protocol = g.protocol_name().unwrap_or_default().to_string();
        let value = g.metadata_value();
        let members = value
            .members
            .into_iter()
            .map(|m| MemberDescription {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                metadata: if stable { m.subscription } else { Bytes::new() },
                assignment: if stable { m.assignment } else { Bytes::new() },
            })
            .collect();
        Ok(GroupDescription {
            group_id: group_id.to_string(),
            state: g.state(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol_name: if stable { protocol } else { String::new() },
            members,
        })
    }

    /// DeleteGroups: each group must be Empty; its offsets and metadata get tombstones.
    pub fn delete_groups(&self, group_ids: Vec<String>) -> Reply<Vec<Result<(), GroupError>>> {
        let mut results = Vec::with_capacity(group_ids.len());
        let mut waits = Vec::new();
        for (i, group_id) in group_ids.iter().enumerate() {
            match self.delete_group(group_id) {
                Ok(wait) => {
                    waits.push((i, wait));
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        Box::pin(async move {
            for (i, committed) in waits {
                if let Err(e) = committed.await {
                    if let Some(r) = results.get_mut(i) {
                        *r = Err(e.into());
                    }
                }
            }
            results
        })
    }

    fn delete_group(&self, group_id: &str) -> Result<Committed, GroupError> {
        let now = now_ms();
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        if entry.active_consumer().is_some() {
            return Err(GroupError::NonEmptyGroup);
        }
        match entry.group.state() {
            GroupState::Empty => {}
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            _ => return Err(GroupError::NonEmptyGroup),
        }
        let mut tombstones = group_tombstones(&entry.group, true);
        if let Some(c) = &entry.consumer {
            tombstones.extend(encode_group_records(c.tombstones()));
        }
        let committed = self.append(&mut shard, &tombstones)?;
        if let Some(mut entry) = shard.groups.remove(group_id) {
            entry.group.mark_dead(now);
        }
        Ok(committed)
    }

    /// OffsetDelete: per partition, NONE or GROUP_SUBSCRIBED_TO_TOPIC; group-level errors fail all.
    pub fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, i32)>,
    ) -> Reply<Result<Vec<Result<(), GroupError>>, GroupError>> {
        let result = self.delete_offsets_now(group_id, &partitions);
        match result {
            Err(e) => ready(Err(e)),
            Ok((results, None)) => ready(Ok(results)),
            Ok((results, Some(committed))) => Box::pin(async move {
                match committed.await {
                    Ok(()) => Ok(results),
                    Err(e) => Err(e.into()),
                }
            }),
        }
    }

    #[allow(clippy::type_complexity)]
    fn delete_offsets_now(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<(Vec<Result<(), GroupError>>, Option<Committed>), GroupError> {
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        let g = &entry.group;
        let active_consumer = entry.active_consumer();
        let consumer = g.protocol_type() == Some("consumer") || active_consumer.is_some();
        match g.state() {
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            GroupState::Empty => {}
            _ if !consumer => return Err(GroupError::NonEmptyGroup),
            _ => {}
        }
        let empty = g.state() == GroupState::Empty && active_consumer.is_none();
        let mut results = Vec::with_capacity(partitions.len());
        let mut tombstones = Vec::new();
        let mut removed = Vec::new();
        for (topic, partition) in partitions {
            let subscribed = match active_consumer {
                Some(c) => c.is_subscribed(topic),
                None => g.is_subscribed(topic),
            };
            if !empty && subscribed {
                results.push(Err(GroupError::GroupSubscribedToTopic));
                continue;
            }
            if g.offsets.contains_key(&(topic.clone(), *partition)) {
                tombstones.push((
                    records::encode_key(&RecordKey::Offset {
                        group: group_id.to_string(),
                        topic: topic.clone(),
                        partition: *partition,
                    }),
                    None,
                ));
                removed.push((topic.clone(), *partition));
            }
            results.push(Ok(()));
        }
        if tombstones.is_empty() {
            return Ok((results, None));
        }
        let committed = self.append(&mut shard, &tombstones)?;
        if let Some(entry) = shard.groups.get_mut(group_id) {
            for tp in removed {
                entry.group.offsets.remove(&tp);
            }
        }
        Ok((results, Some(committed)))
    }

    // ----- timers and shutdown -----

    /// One timer pass: session expiry, rebalance deadlines, and (when `expire`) offset expiry.
    pub fn tick(&self, expire: bool) {
        let now = now_ms();
        for shard in &self.shards {
            let mut shard = shard.lock();
            if shard.leadership.loaded().is_none() {
                continue;
            }
            let mut removals = Vec::new();
            let mut removed_from = Vec::new();
            for (id, entry) in shard.groups.iter_mut() {
                let Some(consumer) = entry.consumer.as_mut() else {
                    continue;
                };
                if consumer.next_deadline_ms().is_some_and(|d| d <= now) {
                    for member in consumer.tick(now) {
                        info!(group = %id, member = %member, group_epoch = consumer.group_epoch(), "consumer group member removed (session or rebalance timeout)");
                    }
                    let records = consumer.take_records();
                    if !records.is_empty() {
                        removed_from.push(id.clone());
                        removals.extend(encode_group_records(records));
                    }
                }
            }
            // Nobody waits for these. If they cannot be appended or do not commit, the groups are
            // written whole with their next records (a new coordinator would otherwise find the
            // removed members still owning partitions that others now hold).
            if !removals.is_empty() {
                let load_id = shard.load_id().unwrap_or(0);
                match self.append(&mut shard, &removals) {
                    Ok(committed) => {
                        let me = self.me.clone();
                        tokio::spawn(async move {
                            if committed.await.is_err() {
                                if let Some(c) = me.upgrade() {
                                    for id in &removed_from {
                                        c.consumer_records_not_durable(id, load_id);
                                    }
                                }
                            }
                        });
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot write consumer group member removals");
                        for id in &removed_from {
                            if let Some(c) =
                                shard.groups.get_mut(id).and_then(|e| e.consumer.as_mut())
                            {
                                c.mark_all_dirty();
                            }
                        }
                    }
                }
            }
            let due: Vec<String> = shard
                .groups
                .iter()
                .filter(|(_, e)| e.group.next_deadline_ms().is_some_and(|d| d <= now))
                .map(|(id, _)| id.clone())
                .collect();
            let mut deliveries = Vec::new();
            for id in due {
                let effects = match shard.groups.get_mut(&id) {
                    Some(e) => {
                        let before = (e.group.state(), e.group.generation());
                        let effects = e.group.tick(now);
                        log_transition(&e.group, before);
                        effects
                    }
                    None => continue,
                };
                deliveries.push(self.apply_effects(&mut shard, &id, effects));
            }
            if expire {
                self.expire_offsets(&mut shard, now);
            }
            drop(shard);
            for d in deliveries {
                d.send();
            }
        }
    }

    /// Removes expired offsets of Empty groups, and Empty groups left with no offsets.
    fn expire_offsets(&self, shard: &mut Shard, now: i64) {
        let retention = self.config.offsets_retention_ms;
        let mut tombstones = Vec::new();
        let mut dead = Vec::new();
        for (id, entry) in shard.groups.iter_mut() {
            if entry.active_consumer().is_some() {
                continue;
            }
            let empty_since = entry.consumer.as_ref().map(ConsumerGroup::empty_since_ms);
            let g = &mut entry.group;
            for tp in g.expired_offsets_since(now, retention, empty_since) {
                g.offsets.remove(&tp);
                tombstones.push((
                    records::encode_key(&RecordKey::Offset {
                        group: id.clone(),
                        topic: tp.0,
                        partition: tp.1,
                    }),
                    None,
                ));
            }
            if g.state() == GroupState::Empty && g.offsets.is_empty() && g.is_empty() {
                tombstones.extend(group_tombstones(g, false));
                if let Some(c) = &entry.consumer {
                    tombstones.extend(encode_group_records(c.tombstones()));
                }
                dead.push(id.clone());
            }
        }
        for id in &dead {
            shard.groups.remove(id);
        }
        if !tombstones.is_empty() {
            info!(
                partition = shard.partition,
                records = tombstones.len(),
                groups_removed = dead.len(),
                "expired offsets"
            );
            // Nobody waits for these: tombstones that are refused or do not commit are written
            // again by the first expiry pass after the next load, as the offsets are still expired.
            if let Err(e) = self.append(shard, &tombstones) {
                warn!(error = %e, "cannot write offset expiry tombstones");
            }
        }
    }

    /// Runs the timers until `stop` resolves.
    pub async fn run_timers(self: Arc<Self>, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let mut last_expiry = now_ms();
        let mut last_snapshot = now_ms();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(Duration::from_millis(TIMER_TICK_MS)) => {}
            }
            let now = now_ms();
            let expire = now - last_expiry >= EXPIRY_CHECK_INTERVAL_MS;
            if expire {
                last_expiry = now;
            }
            self.tick(expire);
            if now - last_snapshot >= SNAPSHOT_INTERVAL_MS {
                last_snapshot = now;
                let me = self.clone();
                let _ = tokio::task::spawn_blocking(move || me.write_snapshots(false)).await;
            }
        }
    }

    /// Stops serving: every parked JoinGroup/SyncGroup gets COORDINATOR_NOT_AVAILABLE (clients
    /// find the coordinator again), later calls get the same. Then the snapshot is written.
    /// Blocking (sled flush): call from a blocking thread or at the very end.
    pub fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
        for shard in &self.shards {
            let mut shard = shard.lock();
            for entry in shard.groups.values_mut() {
                for (member_id, tx) in entry.joins.drain() {
                    let _ = tx.send(JoinResponse::error(
                        GroupError::CoordinatorNotAvailable,
                        &member_id,
                    ));
                }
                for (_, tx) in entry.syncs.drain() {
                    let _ = tx.send(SyncResponse::error(GroupError::CoordinatorNotAvailable));
                }
            }
        }
    }

    /// Writes the snapshot of every loaded shard (at clean shutdown, after appends stopped).
    pub fn write_final_snapshot(&self) {
        self.write_snapshots(true);
    }
}

/// Logs a group's state changes, as Kafka's coordinator does ("Preparing to rebalance group",
/// "Stabilized group"): info for a new generation, debug otherwise.
fn log_transition(g: &Group, before: (GroupState, i32)) {
    let after = (g.state(), g.generation());
    if after == before {
        return;
    }
    if after.1 != before.1 || after.0 == GroupState::Stable {
        info!(
            group = %g.id(),
            from = before.0.name(),
            to = after.0.name(),
            generation = after.1,
            members = g.member_count(),
            "group state change"
        );
    } else {
        debug!(
            group = %g.id(),
            from = before.0.name(),
            to = after.0.name(),
            generation = after.1,
            members = g.member_count(),
            "group state change"
        );
    }
}

/// The shard's latest value per key, as records, with the log offset they reflect (the batch mark
/// is left for the caller to read from the log).
fn materialize(shard: &Shard, log: &PartitionLog) -> PartitionSnapshot {
    let mut entries = Vec::new();
    for (id, entry) in &shard.groups {
        let g = &entry.group;
        if g.protocol_type().is_some() || g.generation() > 0 {
            entries.push((
                records::encode_key(&RecordKey::Group { group: id.clone() }),
                records::encode_group_value(&g.metadata_value()),
            ));
        }
        for ((topic, partition), o) in &g.offsets {
            entries.push((
                records::encode_key(&RecordKey::Offset {
                    group: id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                records::encode_offset_value(o),
            ));
        }
        if let Some(c) = &entry.consumer {
            entries.extend(
                encode_group_records(c.all_records())
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v))),
            );
        }
    }
    PartitionSnapshot {
        next_offset: log.log_end_offset(),
        last_batch: None,
        entries,
    }
}
