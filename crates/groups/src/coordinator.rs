//! The group coordinator: owns every classic group whose `__consumer_offsets` partition this
//! broker leads, the JoinGroup/SyncGroup requests parked on them, the timers, and the records it
//! writes to and replays from `__consumer_offsets`.
//!
//! Where it sits: the front end translates wire requests into the request structs of
//! [`crate::group`] and calls a method here; methods whose answer may wait (JoinGroup, SyncGroup,
//! commits waiting for durability) return a [`Reply`] future, the rest answer at once.
//!
//! Locking: one `parking_lot::Mutex` per `__consumer_offsets` partition ("shard"). A call takes
//! exactly one shard lock, steps the pure [`Group`], appends any records to the partition log
//! while still holding it (so records are in the log in the order the state changed), and
//! releases it before awaiting anything. No lock is held across an `.await`.
//!
//! Invariants:
//! - an OffsetCommit, a group metadata change that answers a JoinGroup/SyncGroup, and a deletion
//!   are answered with success only after their records are durable
//!   (`PartitionLog::wait_durable`); when a group's metadata record cannot be appended or does not
//!   become durable, the replies waiting for it become COORDINATOR_NOT_AVAILABLE (Kafka's answer
//!   to a failed append) and the group goes back to rebalancing (`Group::metadata_not_durable`);
//! - a shard answers COORDINATOR_LOAD_IN_PROGRESS until its replay is done;
//! - after [`GroupCoordinator::shutdown`] every parked request has been answered and every new
//!   one gets COORDINATOR_NOT_AVAILABLE.
//!
//! Record batches are encoded and decoded with the store's codec (`millrace_store::records`), the
//! one v2 codec of the workspace.
//!
//! Not here: wire types, sockets, topic existence checks (the front end asks the cluster).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use millrace_store::records::{self as store_records, BatchFields, Record};
use millrace_store::{PartitionLog, ReadUpperBound};
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::error::GroupError;
use crate::group::{
    CommittedOffset, Effect, Group, GroupConfig, GroupState, JoinRequest, JoinResponse,
    LeaveResult, Outcome, SyncRequest, SyncResponse,
};
use crate::limits::{
    COMMIT_PARTITIONS_MAX, GROUP_ID_BYTES_MAX, OFFSET_METADATA_BYTES_MAX, RECORD_BYTES_MAX,
    REPLAY_READ_BYTES, TIMER_TICK_MS,
};
use crate::records::{self, OffsetValue, RecordKey, RecordValue};
use crate::snapshot::{PartitionSnapshot, SnapshotStore};

/// A response that may complete later.
pub type Reply<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How often Empty groups are checked for expired offsets (Kafka's
/// offsets.retention.check.interval.ms is 600 s; a shorter period costs little here).
const EXPIRY_CHECK_INTERVAL_MS: i64 = 60_000;
/// How often changed shards are written to the sled snapshot.
const SNAPSHOT_INTERVAL_MS: i64 = 60_000;

/// Broker settings the coordinator honours.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub group: GroupConfig,
    /// offsets.retention.minutes, in ms.
    pub offsets_retention_ms: i64,
    /// Leader epoch to stamp on appended batches.
    pub leader_epoch: i32,
    /// Where the sled snapshot lives; `None` = no snapshot.
    pub snapshot_dir: Option<PathBuf>,
}

/// One partition to replay-and-serve: its index and log.
pub struct OffsetsPartition {
    pub partition: i32,
    pub log: Arc<PartitionLog>,
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

/// ListGroups entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
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

struct GroupEntry {
    group: Group,
    joins: HashMap<String, oneshot::Sender<JoinResponse>>,
    syncs: HashMap<String, oneshot::Sender<SyncResponse>>,
}

impl GroupEntry {
    fn new(group: Group) -> Self {
        Self {
            group,
            joins: HashMap::new(),
            syncs: HashMap::new(),
        }
    }
}

struct Shard {
    partition: i32,
    log: Arc<PartitionLog>,
    loaded: bool,
    /// Set by every change, cleared when the snapshot is written.
    dirty: bool,
    groups: BTreeMap<String, GroupEntry>,
}

/// Replies to send once the group's metadata record (if one was written) is durable.
#[derive(Default)]
struct Deliveries {
    joins: Vec<(oneshot::Sender<JoinResponse>, JoinResponse)>,
    syncs: Vec<(oneshot::Sender<SyncResponse>, SyncResponse)>,
    /// The record's log and the offset that must become durable.
    durable: Option<(Arc<PartitionLog>, i64)>,
    /// Why the record could not be appended at all, if it could not.
    append_failed: Option<String>,
    /// Whose record it is (coordinator, group id, generation), to put the group back into
    /// rebalancing if the record does not become durable.
    owner: Option<(Weak<GroupCoordinator>, String, i32)>,
}

/// What a reply that waits for a group metadata record waits on.
enum Persisted {
    /// No record was written.
    Nothing,
    /// Appended; durable once this offset of this log is.
    Appended(Arc<PartitionLog>, i64),
    /// The append failed, for this reason.
    Failed(String),
}

impl Deliveries {
    fn persisted(&self) -> Persisted {
        match (&self.append_failed, &self.durable) {
            (Some(reason), _) => Persisted::Failed(reason.clone()),
            (None, Some((log, end))) => Persisted::Appended(log.clone(), *end),
            (None, None) => Persisted::Nothing,
        }
    }

    /// Sends now if no record was written; once it is durable if one was; and if it cannot be
    /// made durable, answers every reply with COORDINATOR_NOT_AVAILABLE and returns the group to
    /// rebalancing.
    fn send(self) {
        if let Some(reason) = self.append_failed.clone() {
            self.fail(reason);
            return;
        }
        match self.durable.clone() {
            None => self.send_now(),
            Some((log, end)) => {
                tokio::spawn(async move {
                    match log.wait_durable(end).await {
                        Ok(()) => self.send_now(),
                        Err(e) => self.fail(e.to_string()),
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

    fn fail(self, reason: String) {
        warn!(group = ?self.owner.as_ref().map(|o| &o.1), %reason, "group metadata did not become durable; answering COORDINATOR_NOT_AVAILABLE");
        for (tx, r) in self.joins {
            let _ = tx.send(JoinResponse::error(
                GroupError::Storage(reason.clone()),
                &r.member_id,
            ));
        }
        for (tx, _) in self.syncs {
            let _ = tx.send(SyncResponse::error(GroupError::Storage(reason.clone())));
        }
        if let Some((coordinator, group_id, generation)) = self.owner {
            if let Some(c) = coordinator.upgrade() {
                c.metadata_not_durable(&group_id, generation);
            }
        }
    }
}

/// Encodes `records` (key, value) as one uncompressed v2 batch with the store's codec: base offset
/// 0 (the store assigns offsets), no producer id, every record stamped `timestamp_ms`.
fn encode_batch(records: &[(Bytes, Option<Bytes>)], timestamp_ms: i64) -> BytesMut {
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            offset: i as i64,
            timestamp: timestamp_ms,
            key: Some(key.clone()),
            value: value.clone(),
            headers: Vec::new(),
        })
        .collect();
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta: i32::try_from(records.len().saturating_sub(1)).unwrap_or(i32::MAX),
        base_timestamp: timestamp_ms,
        max_timestamp: timestamp_ms,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
    store_records::encode_records(&fields, &recs)
}

/// The data records in `bytes` (whole batches, as a log read returns them; control batches are
/// skipped), the offset after the last batch read (`None` if none), and why anything was skipped.
/// Stops at the first batch that does not validate.
fn decode_batches(bytes: &[u8]) -> (Vec<Record>, Option<i64>, Vec<String>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut next = None;
    let mut pos = 0usize;
    while let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) {
        let h = match millrace_store::batch::validate_stored(rest) {
            Ok(h) => h,
            Err(e) => {
                errors.push(format!("batch at byte {pos}: {e}"));
                break;
            }
        };
        next = Some(h.next_offset());
        if !h.is_control() {
            match store_records::decode_records(rest.get(..h.total_size()).unwrap_or(&[])) {
                Ok((_, recs)) => out.extend(recs.into_iter().filter(|r| {
                    let fits =
                        |b: &Option<Bytes>| b.as_ref().is_none_or(|b| b.len() <= RECORD_BYTES_MAX);
                    fits(&r.key) && fits(&r.value)
                })),
                Err(e) => errors.push(format!("batch at offset {}: {e}", h.base_offset)),
            }
        }
        pos += h.total_size();
    }
    (out, next, errors)
}

/// The group coordinator of one broker.
pub struct GroupCoordinator {
    me: Weak<GroupCoordinator>,
    config: CoordinatorConfig,
    shards: Vec<Mutex<Shard>>,
    snapshot: Option<SnapshotStore>,
    closed: AtomicBool,
}

impl GroupCoordinator {
    /// A coordinator for `partitions` (all of `__consumer_offsets`, indexed 0..n). Nothing is
    /// loaded yet: call [`GroupCoordinator::load`].
    pub fn new(config: CoordinatorConfig, partitions: Vec<OffsetsPartition>) -> Arc<Self> {
        let snapshot = config.snapshot_dir.as_deref().and_then(SnapshotStore::open);
        let mut partitions = partitions;
        partitions.sort_by_key(|p| p.partition);
        let shards = partitions
            .into_iter()
            .map(|p| {
                Mutex::new(Shard {
                    partition: p.partition,
                    log: p.log,
                    loaded: false,
                    dirty: false,
                    groups: BTreeMap::new(),
                })
            })
            .collect();
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            config,
            shards,
            snapshot,
            closed: AtomicBool::new(false),
        })
    }

    pub fn partition_count(&self) -> i32 {
        self.shards.len() as i32
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

    /// Locks the shard of `group_id` once it is loaded.
    fn loaded_shard(
        &self,
        group_id: &str,
    ) -> Result<parking_lot::MutexGuard<'_, Shard>, GroupError> {
        let shard = self.shard(group_id)?.lock();
        if !shard.loaded {
            return Err(GroupError::CoordinatorLoadInProgress);
        }
        Ok(shard)
    }

    /// FindCoordinator's question: may this broker serve `group_id` right now?
    pub fn check_coordinator(&self, group_id: &str) -> Result<(), GroupError> {
        self.loaded_shard(group_id).map(|_| ())
    }

    // ----- loading -----

    /// Replays every partition (snapshot first, then the log's tail). Blocking: run it on a
    /// blocking thread. Each shard serves as soon as its own replay is done.
    pub fn load(&self) {
        let started = std::time::Instant::now();
        let mut records = 0usize;
        for shard in &self.shards {
            // Replay into a private copy so the shard's lock is not held (and request threads
            // are not blocked) while reading the log; unloaded shards take no writes, so nothing
            // can change underneath.
            let mut replayed = {
                let shard = shard.lock();
                Shard {
                    partition: shard.partition,
                    log: shard.log.clone(),
                    loaded: false,
                    dirty: false,
                    groups: BTreeMap::new(),
                }
            };
            records += self.load_shard(&mut replayed);
            let mut shard = shard.lock();
            shard.groups = replayed.groups;
            shard.loaded = true;
        }
        let groups: usize = self.shards.iter().map(|s| s.lock().groups.len()).sum();
        info!(
            partitions = self.shards.len(),
            groups,
            records_replayed = records,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "group coordinator loaded"
        );
        self.write_snapshots(true);
    }

    fn load_shard(&self, shard: &mut Shard) -> usize {
        let now = now_ms();
        let log_start = shard.log.log_start_offset();
        let log_end = shard.log.log_end_offset();
        let mut from = log_start;
        if let Some(snap) = self.snapshot.as_ref().and_then(|s| s.read(shard.partition)) {
            if snap.next_offset >= log_start && snap.next_offset <= log_end {
                for (k, v) in &snap.entries {
                    self.apply_record(shard, k, Some(v), now);
                }
                from = snap.next_offset;
            } else {
                debug!(
                    partition = shard.partition,
                    snapshot = snap.next_offset,
                    log_start,
                    log_end,
                    "snapshot does not match the log; full replay"
                );
            }
        }
        let mut replayed = 0usize;
        while from < log_end {
            let read = match shard
                .log
                .read(from, REPLAY_READ_BYTES, ReadUpperBound::LogEnd, true)
            {
                Ok(r) => r,
                Err(e) => {
                    warn!(partition = shard.partition, offset = from, error = %e, "replay read failed; serving what was loaded");
                    break;
                }
            };
            let (raw, next, errors) = decode_batches(&read.records);
            for e in errors {
                warn!(partition = shard.partition, error = %e, "skipping unreadable batch in __consumer_offsets");
            }
            for r in raw {
                if r.offset < from {
                    continue;
                }
                if let Some(key) = &r.key {
                    self.apply_record(shard, key, r.value.as_ref(), now);
                    replayed += 1;
                }
            }
            match next {
                Some(n) if n > from => from = n,
                _ => break,
            }
        }
        // Groups that replay left with nothing in them are not groups.
        shard.groups.retain(|_, e| {
            !(e.group.is_empty() && e.group.offsets.is_empty() && e.group.protocol_type().is_none())
        });
        replayed
    }

    fn apply_record(&self, shard: &mut Shard, key: &[u8], value: Option<&Bytes>, now: i64) {
        let key = match records::decode_key(key) {
            Ok(Some(k)) => k,
            Ok(None) => return,
            Err(e) => {
                warn!(partition = shard.partition, error = %e, "skipping undecodable key");
                return;
            }
        };
        let value = match value {
            None => None,
            Some(v) => match records::decode_value(&key, v) {
                Ok(v) => Some(v),
                Err(e) => {
                    warn!(partition = shard.partition, error = %e, "skipping undecodable value");
                    return;
                }
            },
        };
        let config = &self.config.group;
        match (key, value) {
            (
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                },
                value,
            ) => {
                let entry = shard
                    .groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(Group::new(&group, config, now)));
                match value {
                    Some(RecordValue::Offset(o)) => {
                        entry.group.offsets.insert((topic, partition), o);
                    }
                    _ => {
                        entry.group.offsets.remove(&(topic, partition));
                    }
                }
            }
            (RecordKey::Group { group }, Some(RecordValue::Group(v))) => {
                let entry = shard
                    .groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(Group::new(&group, config, now)));
                entry.group.restore(v, now);
            }
            (RecordKey::Group { group }, _) => {
                if let Some(entry) = shard.groups.remove(&group) {
                    if !entry.group.offsets.is_empty() {
                        let mut fresh = Group::new(&group, config, now);
                        fresh.offsets = entry.group.offsets;
                        shard.groups.insert(group, GroupEntry::new(fresh));
                    }
                }
            }
        }
    }

    /// Writes every shard that changed (or all, with `all`) to the sled snapshot.
    fn write_snapshots(&self, all: bool) {
        let Some(store) = &self.snapshot else {
            return;
        };
        for shard in &self.shards {
            let snap = {
                let mut shard = shard.lock();
                if !shard.loaded || !(all || shard.dirty) {
                    continue;
                }
                shard.dirty = false;
                materialize(&shard)
            };
            let partition = { shard.lock().partition };
            store.write(partition, &snap);
        }
        store.flush();
    }

    // ----- appends -----

    /// Appends records as one batch to the shard's log; returns the offset that must become
    /// durable before answering.
    fn append(
        &self,
        shard: &mut Shard,
        records: &[(Bytes, Option<Bytes>)],
    ) -> Result<i64, GroupError> {
        let batch: BytesMut = encode_batch(records, now_ms());
        let info = shard
            .log
            .append(batch, self.config.leader_epoch)
            .map_err(|e| GroupError::Storage(e.to_string()))?;
        shard.dirty = true;
        Ok(info.last_offset + 1)
    }

    /// Carries out a step's effects for `group_id`: takes parked responders, writes the group's
    /// metadata record, and returns the replies to send (after durability if a record was written).
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
                    Ok(end) => out.durable = Some((shard.log.clone(), end)),
                    Err(e) => out.append_failed = Some(e.to_string()),
                }
                let generation = shard
                    .groups
                    .get(group_id)
                    .map_or(0, |e| e.group.generation());
                out.owner = Some((self.me.clone(), group_id.to_string(), generation));
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
        let new_member_id = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
        let before = (entry.group.state(), entry.group.generation());
        let (outcome, effects) = entry.group.join(&config, &req, new_member_id, now);
        log_transition(&entry.group, before);
        let rx = match outcome {
            Outcome::Reply(r) => Err(r),
            Outcome::Await { member_id } => {
                let (tx, rx) = oneshot::channel();
                if let Some(old) = entry.joins.insert(member_id.clone(), tx) {
                    let _ = old.send(JoinResponse::error(
                        GroupError::RebalanceInProgress,
                        &member_id,
                    ));
                }
                Ok(rx)
            }
        };
        let deliveries = self.apply_effects(&mut shard, &req.group_id, effects);
        // A refused first join leaves no group behind (Kafka validates before creating one).
        let leftover = shard.groups.get(&req.group_id).is_some_and(|e| {
            e.group.is_empty() && e.group.offsets.is_empty() && e.group.protocol_type().is_none()
        });
        if created && leftover {
            shard.groups.remove(&req.group_id);
        }
        let persisted = deliveries.persisted();
        drop(shard);
        deliveries.send();
        match rx {
            Ok(rx) => Box::pin(async move {
                rx.await.unwrap_or_else(|_| {
                    JoinResponse::error(GroupError::CoordinatorNotAvailable, &member_id)
                })
            }),
            Err(response) => {
                let member_id = response.member_id.clone();
                after_durable(persisted, response, move |reason| {
                    JoinResponse::error(GroupError::Storage(reason), &member_id)
                })
            }
        }
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
        let rx = match outcome {
            Outcome::Reply(r) => Err(r),
            Outcome::Await { member_id } => {
                let (tx, rx) = oneshot::channel();
                if let Some(old) = entry.syncs.insert(member_id, tx) {
                    let _ = old.send(SyncResponse::error(GroupError::RebalanceInProgress));
                }
                Ok(rx)
            }
        };
        let deliveries = self.apply_effects(&mut shard, &req.group_id, effects);
        let persisted = deliveries.persisted();
        drop(shard);
        deliveries.send();
        match rx {
            Ok(rx) => Box::pin(async move {
                rx.await
                    .unwrap_or_else(|_| SyncResponse::error(GroupError::CoordinatorNotAvailable))
            }),
            Err(response) => after_durable(persisted, response, |reason| {
                SyncResponse::error(GroupError::Storage(reason))
            }),
        }
    }

    /// The group's metadata record of `generation` did not become durable: if the group is still
    /// in that generation it forgets the assignment and rebalances (Kafka's
    /// resetAndPropagateAssignmentError + prepareRebalance), answering what it must.
    fn metadata_not_durable(&self, group_id: &str, generation: i32) {
        let now = now_ms();
        let Ok(shard) = self.shard(group_id) else {
            return;
        };
        let mut shard = shard.lock();
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

    // ----- offsets -----

    /// OffsetCommit: one result per partition, in request order, answered once durable.
    pub fn commit_offsets(&self, req: CommitRequest) -> Reply<Vec<Result<(), GroupError>>> {
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
        if let Err(e) = entry.group.validate_commit(
            req.generation_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            now,
        ) {
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
        let end = match self.append(&mut shard, &writes) {
            Ok(end) => end,
            Err(e) => return all(e),
        };
        if let Some(entry) = shard.groups.get_mut(&req.group_id) {
            for (tp, value) in applied {
                entry.group.offsets.insert(tp, value);
            }
        }
        let log = shard.log.clone();
        drop(shard);
        Box::pin(async move {
            match log.wait_durable(end).await {
                Ok(()) => results,
                Err(e) => {
                    let e = GroupError::Storage(e.to_string());
                    results.into_iter().map(|_| Err(e.clone())).collect()
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
        let shard = self.loaded_shard(group_id)?;
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

    // ----- admin -----

    /// ListGroups, filtered by state names (case-insensitive; empty = all). Fails with
    /// COORDINATOR_LOAD_IN_PROGRESS while any partition is loading, as Kafka does.
    pub fn list_groups(&self, states: &[String]) -> Result<Vec<GroupListing>, GroupError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            if !shard.loaded {
                return Err(GroupError::CoordinatorLoadInProgress);
            }
            for entry in shard.groups.values() {
                let g = &entry.group;
                let state = g.state();
                if state == GroupState::Dead {
                    continue;
                }
                if !states.is_empty()
                    && !states.iter().any(|s| s.eq_ignore_ascii_case(state.name()))
                {
                    continue;
                }
                out.push(GroupListing {
                    group_id: g.id().to_string(),
                    protocol_type: g.protocol_type().unwrap_or_default().to_string(),
                    state,
                });
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
            for (i, (log, end)) in waits {
                if let Err(e) = log.wait_durable(end).await {
                    if let Some(r) = results.get_mut(i) {
                        *r = Err(GroupError::Storage(e.to_string()));
                    }
                }
            }
            results
        })
    }

    fn delete_group(&self, group_id: &str) -> Result<(Arc<PartitionLog>, i64), GroupError> {
        let now = now_ms();
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        match entry.group.state() {
            GroupState::Empty => {}
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            _ => return Err(GroupError::NonEmptyGroup),
        }
        let tombstones = group_tombstones(&entry.group, true);
        let end = self.append(&mut shard, &tombstones)?;
        if let Some(mut entry) = shard.groups.remove(group_id) {
            entry.group.mark_dead(now);
        }
        Ok((shard.log.clone(), end))
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
            Ok((results, Some((log, end)))) => Box::pin(async move {
                match log.wait_durable(end).await {
                    Ok(()) => Ok(results),
                    Err(e) => Err(GroupError::Storage(e.to_string())),
                }
            }),
        }
    }

    #[allow(clippy::type_complexity)]
    fn delete_offsets_now(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<
        (
            Vec<Result<(), GroupError>>,
            Option<(Arc<PartitionLog>, i64)>,
        ),
        GroupError,
    > {
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        let g = &entry.group;
        let consumer = g.protocol_type() == Some("consumer");
        match g.state() {
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            GroupState::Empty => {}
            _ if !consumer => return Err(GroupError::NonEmptyGroup),
            _ => {}
        }
        let empty = g.state() == GroupState::Empty;
        let mut results = Vec::with_capacity(partitions.len());
        let mut tombstones = Vec::new();
        let mut removed = Vec::new();
        for (topic, partition) in partitions {
            if !empty && g.is_subscribed(topic) {
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
        let end = self.append(&mut shard, &tombstones)?;
        if let Some(entry) = shard.groups.get_mut(group_id) {
            for tp in removed {
                entry.group.offsets.remove(&tp);
            }
        }
        Ok((results, Some((shard.log.clone(), end))))
    }

    // ----- timers and shutdown -----

    /// One timer pass: session expiry, rebalance deadlines, and (when `expire`) offset expiry.
    pub fn tick(&self, expire: bool) {
        let now = now_ms();
        for shard in &self.shards {
            let mut shard = shard.lock();
            if !shard.loaded {
                continue;
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
            let g = &mut entry.group;
            for tp in g.expired_offsets(now, retention) {
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

fn ready<T: Send + 'static>(value: T) -> Reply<T> {
    Box::pin(std::future::ready(value))
}

/// `value` once the record it waits for is durable; `on_failure(reason)` if it cannot become so.
fn after_durable<T: Send + 'static>(
    persisted: Persisted,
    value: T,
    on_failure: impl FnOnce(String) -> T + Send + 'static,
) -> Reply<T> {
    match persisted {
        Persisted::Nothing => ready(value),
        Persisted::Failed(reason) => ready(on_failure(reason)),
        Persisted::Appended(log, end) => Box::pin(async move {
            match log.wait_durable(end).await {
                Ok(()) => value,
                Err(e) => on_failure(e.to_string()),
            }
        }),
    }
}

/// Tombstones for a group's offsets (when `with_offsets`) and its metadata.
fn group_tombstones(g: &Group, with_offsets: bool) -> Vec<(Bytes, Option<Bytes>)> {
    let mut out = Vec::new();
    if with_offsets {
        for (topic, partition) in g.offsets.keys() {
            out.push((
                records::encode_key(&RecordKey::Offset {
                    group: g.id().to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                None,
            ));
        }
    }
    out.push((
        records::encode_key(&RecordKey::Group {
            group: g.id().to_string(),
        }),
        None,
    ));
    out
}

/// The shard's latest value per key, as records, with the log offset they reflect.
fn materialize(shard: &Shard) -> PartitionSnapshot {
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
    }
    PartitionSnapshot {
        next_offset: shard.log.log_end_offset(),
        entries,
    }
}

#[cfg(test)]
mod tests {
    //! Replay: what one coordinator wrote, a fresh one over the same logs reads back, with or
    //! without (or with a corrupt) sled snapshot.
    use super::*;
    use millrace_store::{LogConfig, Store, StoreConfig, TopicPartition};

    const N: i32 = 3;

    /// A store of `N` offsets partitions in a fresh directory (kept alive by the returned guard).
    fn logs() -> (tempfile::TempDir, Arc<Store>, Vec<Arc<PartitionLog>>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig {
            data_dir: dir.path().to_path_buf(),
            flush_policy: millrace_store::FlushPolicy::Batch,
            flush_interval: Duration::from_millis(2),
            max_open_files: 16,
            high_watermark_follows_durable: true,
        })
        .expect("store");
        let logs = (0..N)
            .map(|p| {
                store
                    .create_partition(
                        &TopicPartition::new("__consumer_offsets", p),
                        LogConfig::default(),
                        millrace_store::TopicId::from_bytes([7; 16]),
                    )
                    .expect("partition")
            })
            .collect();
        (dir, store, logs)
    }

    fn coordinator(
        logs: &[Arc<PartitionLog>],
        snapshot_dir: Option<PathBuf>,
    ) -> Arc<GroupCoordinator> {
        coordinator_with_retention(logs, snapshot_dir, 7 * 24 * 3600 * 1000)
    }

    fn coordinator_with_retention(
        logs: &[Arc<PartitionLog>],
        snapshot_dir: Option<PathBuf>,
        offsets_retention_ms: i64,
    ) -> Arc<GroupCoordinator> {
        let config = CoordinatorConfig {
            group: GroupConfig::default(),
            offsets_retention_ms,
            leader_epoch: 0,
            snapshot_dir,
        };
        let partitions = logs
            .iter()
            .enumerate()
            .map(|(i, log)| OffsetsPartition {
                partition: i as i32,
                log: log.clone(),
            })
            .collect();
        GroupCoordinator::new(config, partitions)
    }

    fn commit(
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        metadata: &str,
    ) -> CommitRequest {
        CommitRequest {
            group_id: group.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            retention_time_ms: -1,
            partitions: vec![CommitPartition {
                topic: topic.into(),
                partition,
                offset,
                leader_epoch: 5,
                metadata: Some(metadata.into()),
            }],
        }
    }

    fn offset_of(
        c: &GroupCoordinator,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Option<(i64, String)> {
        let fetched = c
            .fetch_offsets(group, Some(vec![(topic.to_string(), vec![partition])]))
            .expect("fetch");
        fetched[0].1[0]
            .1
            .as_ref()
            .map(|o| (o.offset, o.metadata.clone()))
    }

    async fn write_some(c: &GroupCoordinator) {
        for (g, off) in [("alpha", 10), ("beta", 20), ("gamma", 30)] {
            let r = c.commit_offsets(commit(g, "t", 0, off, "m")).await;
            assert_eq!(r, vec![Ok(())]);
        }
        // Overwrite, then delete one group.
        assert_eq!(
            c.commit_offsets(commit("alpha", "t", 0, 11, "again")).await,
            vec![Ok(())]
        );
        assert_eq!(c.delete_groups(vec!["gamma".into()]).await, vec![Ok(())]);
    }

    fn check_replayed(c: &GroupCoordinator) {
        assert_eq!(offset_of(c, "alpha", "t", 0), Some((11, "again".into())));
        assert_eq!(offset_of(c, "beta", "t", 0), Some((20, "m".into())));
        assert_eq!(offset_of(c, "gamma", "t", 0), None);
        assert_eq!(offset_of(c, "beta", "t", 1), None);
    }

    #[tokio::test]
    async fn replay_restores_offsets_and_tombstones() {
        let (_dir, _store, logs) = logs();
        let first = coordinator(&logs, None);
        assert_eq!(
            first.check_coordinator("alpha"),
            Err(GroupError::CoordinatorLoadInProgress)
        );
        first.load();
        assert_eq!(first.check_coordinator(""), Err(GroupError::InvalidGroupId));
        write_some(&first).await;
        check_replayed(&first);

        let second = coordinator(&logs, None);
        second.load();
        check_replayed(&second);
        let listed: Vec<String> = second
            .list_groups(&[])
            .expect("list")
            .into_iter()
            .map(|g| g.group_id)
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
    }

    #[tokio::test]
    async fn snapshot_shortens_replay_and_a_bad_one_costs_nothing() {
        let (_dir, _store, logs) = logs();
        let dir = tempfile::tempdir().expect("tempdir");
        let snap = dir.path().join("snap");
        {
            let first = coordinator(&logs, Some(snap.clone()));
            first.load();
            write_some(&first).await;
            first.shutdown();
            first.write_final_snapshot();
        }
        {
            let second = coordinator(&logs, Some(snap.clone()));
            second.load();
            check_replayed(&second);
            // More commits after the snapshot: replayed from the log's tail.
            second.closed.store(false, Ordering::Release);
            assert_eq!(
                second
                    .commit_offsets(commit("beta", "t", 0, 21, "tail"))
                    .await,
                vec![Ok(())]
            );
        }
        {
            let third = coordinator(&logs, Some(snap.clone()));
            third.load();
            assert_eq!(offset_of(&third, "beta", "t", 0), Some((21, "tail".into())));
            // A snapshot claiming more than the log holds is ignored.
            if let Some(store) = &third.snapshot {
                for p in 0..N {
                    store.write(
                        p,
                        &PartitionSnapshot {
                            next_offset: 1_000_000,
                            entries: vec![],
                        },
                    );
                }
                store.flush();
            }
        }
        let fourth = coordinator(&logs, Some(snap.clone()));
        fourth.load();
        assert_eq!(
            offset_of(&fourth, "beta", "t", 0),
            Some((21, "tail".into()))
        );
        assert_eq!(
            offset_of(&fourth, "alpha", "t", 0),
            Some((11, "again".into()))
        );
    }

    #[tokio::test]
    async fn expired_offsets_and_empty_groups_leave_tombstones() {
        let (_dir, _store, logs) = logs();
        let c = coordinator_with_retention(&logs, None, 0);
        c.load();
        assert_eq!(
            c.commit_offsets(commit("old", "t", 0, 5, "")).await,
            vec![Ok(())]
        );
        assert_eq!(offset_of(&c, "old", "t", 0), Some((5, String::new())));
        c.tick(true);
        assert_eq!(offset_of(&c, "old", "t", 0), None);
        assert!(c.list_groups(&[]).expect("list").is_empty());
        // The tombstones replay too.
        let again = coordinator(&logs, None);
        again.load();
        assert_eq!(offset_of(&again, "old", "t", 0), None);
        assert!(again.list_groups(&[]).expect("list").is_empty());
    }

    /// A store whose fdatasync fails for every segment: JoinGroup succeeds (it writes nothing),
    /// the SyncGroup that would make the group Stable writes its metadata record, which never
    /// becomes durable, so it is answered with a storage error (COORDINATOR_NOT_AVAILABLE on the
    /// wire), never with an assignment, and the group goes back to rebalancing.
    #[tokio::test]
    async fn sync_group_is_refused_when_the_group_record_is_not_durable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_with_storage(
            StoreConfig {
                data_dir: dir.path().to_path_buf(),
                flush_policy: millrace_store::FlushPolicy::Batch,
                flush_interval: Duration::from_millis(2),
                max_open_files: 16,
                high_watermark_follows_durable: true,
            },
            Arc::new(millrace_store::storage::FaultStorage::failing_sync_of(
                ".log",
            )),
        )
        .expect("store");
        let logs: Vec<_> = (0..N)
            .map(|p| {
                store
                    .create_partition(
                        &TopicPartition::new("__consumer_offsets", p),
                        LogConfig::default(),
                        millrace_store::TopicId::from_bytes([7; 16]),
                    )
                    .expect("partition")
            })
            .collect();
        let config = CoordinatorConfig {
            group: GroupConfig {
                initial_rebalance_delay_ms: 0,
                ..GroupConfig::default()
            },
            offsets_retention_ms: 1000,
            leader_epoch: 0,
            snapshot_dir: None,
        };
        let partitions = logs
            .iter()
            .enumerate()
            .map(|(i, log)| OffsetsPartition {
                partition: i as i32,
                log: log.clone(),
            })
            .collect();
        let c = GroupCoordinator::new(config, partitions);
        c.load();
        let join = |member_id: &str| JoinRequest {
            group_id: "g".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            member_id: member_id.into(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![crate::group::Protocol {
                name: "range".into(),
                metadata: Bytes::from_static(b"m"),
            }],
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            require_known_member_id: false,
        };
        let ten_s = Duration::from_secs(10);
        let joined = tokio::time::timeout(ten_s, c.join(join("")))
            .await
            .expect("join answered");
        assert_eq!(joined.error, None);
        let synced = tokio::time::timeout(
            ten_s,
            c.sync(SyncRequest {
                group_id: "g".into(),
                generation_id: joined.generation_id,
                member_id: joined.member_id.clone(),
                group_instance_id: None,
                protocol_type: Some("consumer".into()),
                protocol_name: Some("range".into()),
                assignments: vec![(joined.member_id.clone(), Bytes::from_static(b"A"))],
            }),
        )
        .await
        .expect("sync answered");
        assert!(
            matches!(synced.error, Some(GroupError::Storage(_))),
            "{synced:?}"
        );
        assert!(synced.assignment.is_empty());
        assert!(
            store.offline_reason().is_some(),
            "the failed fsync took the dir offline"
        );
        // The group left Stable: its members must rejoin.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.describe_group("g").expect("describe").state != GroupState::PreparingRebalance {
            assert!(
                std::time::Instant::now() < deadline,
                "group never went back to rebalancing"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            c.heartbeat("g", &joined.member_id, None, joined.generation_id),
            Err(GroupError::RebalanceInProgress)
        );
    }

    #[test]
    fn partition_for_matches_java_string_hash_code() {
        // "" → 0; "a" → 97; "group" → 98629247; Java's hashCode of "polygenelubricants" is
        // Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
        assert_eq!(partition_for("a", 50), 97 % 50);
        assert_eq!(partition_for("group", 50), 98_629_247 % 50);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        for g in ["x", "consumer-group-1", "ünïcödé"] {
            assert!((0..50).contains(&partition_for(g, 50)));
        }
    }
}
