//! The group coordinator: owns every group (classic, KIP-848 consumer group or KIP-932 share
//! group) whose
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
//! Record batches are encoded in `encode.rs` with the store's codec (`millrace_store::records`),
//! the one v2 codec of the workspace; replay is in `replay.rs`.
//!
//! This file owns the coordinator itself: [`GroupCoordinator`] and its configuration, the shards
//! and their leadership (loading and unloading), appends, and shutdown. The requests are served by
//! `impl GroupCoordinator` blocks in the files under `coordinator/`, along Kafka's lines:
//! - `classic.rs`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (Kafka's `ClassicGroup`);
//! - `consumer.rs`: KIP-848 ConsumerGroupHeartbeat and ConsumerGroupDescribe;
//! - `share.rs`: KIP-932 ShareGroupHeartbeat and ShareGroupDescribe;
//! - `share_offsets.rs`: a share group's initialized partitions as AlterShareGroupOffsets,
//!   DeleteShareGroupOffsets and DeleteGroups change them;
//! - `offsets.rs`: OffsetCommit, TxnOffsetCommit and its markers, OffsetFetch, OffsetDelete;
//! - `admin.rs`: ListGroups, DescribeGroups, DeleteGroups, the metrics' view;
//! - `timers.rs`: session and rebalance deadlines, offset expiry, the periodic snapshot;
//! - `snapshots.rs`: writing the sled snapshot;
//!
//! and two modules under them that name nothing of this file: `shard.rs`, the state of one
//! partition ([`PartitionStatus`] is defined there), and `encode.rs`, the bytes appended. This file
//! names nothing inside the parts, so no import runs both ways.
//!
//! Not here: wire types, sockets, topic existence checks (the front end asks the cluster), which
//! broker leads what (the broker's replica manager says so through `become_leader`/`resign`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use millrace_store::PartitionLog;
use parking_lot::{Condvar, Mutex};
use tracing::{debug, error, info, warn};

use crate::consumer_group::ConsumerGroupConfig;
use crate::error::GroupError;
use crate::group::{CommittedOffset, Group, GroupConfig, GroupState, JoinResponse, SyncResponse};
use crate::group_log::{GroupLog, GroupLogError};
use crate::limits::{GROUP_ID_BYTES_MAX, LOADER_THREADS_MAX};
use crate::replay::{self, ReplayError};
pub use crate::reply::Reply;
use crate::share_group::{InitializedPartitions, ShareGroupConfig};
use crate::snapshot::SnapshotStore;
use crate::txn_offsets::TxnOffsets;

use self::encode::encode_batch;
pub use self::shard::PartitionStatus;
use self::shard::{GroupEntry, Leadership, Led, Shard};

mod admin;
mod classic;
mod consumer;
mod encode;
mod offsets;
mod shard;
mod share;
mod share_offsets;
mod snapshots;
#[cfg(test)]
mod tests;
mod timers;

/// The future of an append: `Ok` once the records are committed.
type Committed = Reply<Result<(), GroupLogError>>;

/// Broker settings the coordinator honours.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub group: GroupConfig,
    /// The group.consumer.* settings of KIP-848 consumer groups.
    pub consumer: ConsumerGroupConfig,
    /// The group.share.* settings of KIP-932 share groups.
    pub share: ShareGroupConfig,
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
    /// "Classic", "Consumer" or "Share", as ListGroups v5 reports it (Kafka's `GroupType`).
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

/// What DeleteGroups removed with a group that the group coordinator does not own itself: for a
/// share group, its share partitions that had share state (empty for other groups), whose state
/// the caller deleted first (Kafka's DeleteShareGroupState; [`ShareGroupDeletion`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletedGroup {
    pub share_partitions: InitializedPartitions,
}

/// What DeleteGroups must do about one group before deleting it (`share_offsets.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareGroupDeletion {
    /// Not a share group (or no group): DeleteGroups handles it as any other.
    NotShare,
    /// An Empty share group: delete the share state of these partitions first.
    Delete(InitializedPartitions),
    /// A share group with members: NON_EMPTY_GROUP.
    NotEmpty,
}

/// Topic → partitions, as OffsetFetch asks; `None` = every committed offset of the group.
pub type FetchTopics = Option<Vec<(String, Vec<i32>)>>;

/// One partition's answer to OffsetFetch.
#[derive(Debug, Clone)]
pub enum FetchedOffset {
    /// The committed offset (`None`: nothing committed).
    Stable(Option<CommittedOffset>),
    /// The fetch asked for stable offsets only and a transactional offset of the partition is
    /// still pending (UNSTABLE_OFFSET_COMMIT).
    Unstable,
}

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

    // ----- leadership and loading -----

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
            &replay::ReplayConfigs {
                group: &self.config.group,
                consumer: &self.config.consumer,
                share: &self.config.share,
            },
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
                for (id, share) in replayed.share_groups {
                    let entry = guard.groups.entry(id.clone()).or_insert_with(|| {
                        GroupEntry::new(Group::new(&id, &self.config.group, now))
                    });
                    if entry.consumer.is_none() {
                        entry.share = Some(share);
                    }
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

    // ----- shutdown -----

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
