//! The share coordinator (KIP-932; Kafka's `ShareCoordinatorService`): the durable state of
//! share partitions in the internal topic `__share_group_state`, for the partitions of it that
//! this broker leads.
//!
//! Where it sits: the share-state RPCs (keys 83–87, `api/share_group_state.rs`) and this
//! broker's own persister (`share_persister.rs`, when it leads the key's partition) call it;
//! it appends through the replica manager. The rules of each RPC are `millrace_share`'s
//! [`ShareCoordinatorShard`]; this module adds leadership, loading and the appends.
//!
//! Invariants:
//! - one shard per `__share_group_state` partition, loaded by replaying the partition when this
//!   broker becomes its leader (a later leader epoch starts a new load) and dropped when it
//!   resigns; until the replay is done the partition answers COORDINATOR_LOAD_IN_PROGRESS, and
//!   a partition not led here NOT_COORDINATOR;
//! - one RPC at a time per partition: it decides on the shard's state, appends its record
//!   acks=all in the leader epoch the shard was loaded in, folds the record into the shard as
//!   soon as it is in the log, and answers once it is committed. As Kafka's coordinator runtime
//!   applies a write before it commits: a record in the leader's log commits unless leadership
//!   moves (and then the shard is dropped and the next leader replays its own log), so a write
//!   whose commit timed out still counts — the shard is always a replay of this leader's log. An
//!   RPC that writes nothing (a read) answers only once everything folded so far is committed,
//!   so no answer shows state that may not survive, and none misses a timed-out write that later
//!   commits (its share partition would deliver from a state the log then overrides);
//! - the write-lock of a shard is an async mutex held across the append: writes of one
//!   partition are serialized, as Kafka's coordinator runtime serializes a shard's events;
//! - pruning ([`ShareCoordinator::prune`], every `share.coordinator.state.topic.prune.interval.ms`)
//!   only moves a partition's log start up to the oldest of its keys' latest snapshots, below the
//!   high watermark: a replay from the new start rebuilds the same shard. A key whose latest
//!   snapshot is older than the previous round first gets a fresh one (Kafka's cold-partition
//!   snapshots), so a rarely written key does not hold the partition back.
//!
//! Locking: `shards` (sync) → a shard's `led` (sync) are held only to look up; a shard's
//! `inner` (async) is held across the append. Never the other way round.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use millrace_replication::{AckError, AckWait, PartitionError, ReplicaError, ReplicaManager};
use millrace_share::records::{decode_record, encode_record, ShareStateKey, ShareStateRecord};
use millrace_share::{
    CoordinatorError, PersistedState, ShareCoordinatorShard, StateSummary, StateWrite,
    SHARE_GROUP_STATE_TOPIC,
};
use millrace_store::batch_walk::{BatchWalk, Validation, WalkChecks, WalkedBatch};
use millrace_store::records::{decode_records, encode_records, BatchFields, Record};
use millrace_store::{PartitionLog, ReadUpperBound, TopicPartition};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::error_codes::{
    COORDINATOR_LOAD_IN_PROGRESS, FENCED_LEADER_EPOCH, INVALID_REQUEST, NOT_COORDINATOR,
    NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR,
};

/// Kafka's FENCED_STATE_EPOCH.
pub const FENCED_STATE_EPOCH: i16 = 124;

/// Bytes read per step while replaying a `__share_group_state` partition.
const LOAD_READ_BYTES: usize = 1 << 20;

/// A share-state operation's failure, as Kafka's error code and message: what the RPCs answer
/// and what the persister sees from a local or a remote coordinator alike.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("share state error {code}: {message}")]
pub struct StateError {
    pub code: i16,
    pub message: String,
}

impl StateError {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Whether asking again (after the coordinator moves, loads or the topic appears) may
    /// succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self.code,
            NOT_COORDINATOR
                | COORDINATOR_LOAD_IN_PROGRESS
                | crate::error_codes::COORDINATOR_NOT_AVAILABLE
                | NOT_ENOUGH_REPLICAS
                | REQUEST_TIMED_OUT
        )
    }
}

impl From<CoordinatorError> for StateError {
    fn from(e: CoordinatorError) -> Self {
        let code = match e {
            CoordinatorError::InvalidRequest(_) => INVALID_REQUEST,
            CoordinatorError::FencedLeaderEpoch { .. } => FENCED_LEADER_EPOCH,
            CoordinatorError::FencedStateEpoch { .. } => FENCED_STATE_EPOCH,
        };
        StateError::new(code, e.to_string())
    }
}

/// Which load of a partition is current.
#[derive(Debug, Clone, Copy)]
struct Led {
    leader_epoch: i32,
    load_id: u64,
    loaded: bool,
}

struct Loaded {
    load_id: u64,
    shard: ShareCoordinatorShard,
    /// The log replayed and appended to (`None` before the first load).
    log: Option<Arc<PartitionLog>>,
    /// The offset after the last record folded into `shard`: answers wait for the high
    /// watermark to reach it.
    folded_end: i64,
    /// The high watermark when the previous prune round began: keys whose latest snapshot is
    /// below it get a fresh one in the next round.
    prune_mark: i64,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("load_id", &self.load_id)
            .field("shard", &self.shard)
            .field("folded_end", &self.folded_end)
            .field("prune_mark", &self.prune_mark)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Shard {
    led: Mutex<Option<Led>>,
    inner: tokio::sync::Mutex<Loaded>,
}

/// The share coordinator of this broker. See the module comment.
pub struct ShareCoordinator {
    replicas: Arc<ReplicaManager>,
    commit_timeout: Duration,
    updates_per_snapshot: u32,
    shards: Mutex<HashMap<i32, Arc<Shard>>>,
    next_load: AtomicU64,
}

impl std::fmt::Debug for ShareCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareCoordinator")
            .field("partitions", &self.shards.lock().len())
            .finish_non_exhaustive()
    }
}

impl ShareCoordinator {
    /// `commit_timeout`: `share.coordinator.write.timeout.ms`; `updates_per_snapshot`:
    /// `share.coordinator.snapshot.update.records.per.snapshot`.
    pub fn new(
        replicas: Arc<ReplicaManager>,
        commit_timeout: Duration,
        updates_per_snapshot: u32,
    ) -> Arc<Self> {
        Arc::new(Self {
            replicas,
            commit_timeout,
            updates_per_snapshot,
            shards: Mutex::new(HashMap::new()),
            next_load: AtomicU64::new(1),
        })
    }

    /// This broker became the leader of `__share_group_state` partition `partition` in
    /// `leader_epoch`: replay it in the background, then serve it.
    pub fn become_leader(
        self: &Arc<Self>,
        partition: i32,
        log: Arc<PartitionLog>,
        leader_epoch: i32,
    ) {
        let load_id = self.next_load.fetch_add(1, Ordering::Relaxed);
        let shard = {
            let mut shards = self.shards.lock();
            Arc::clone(shards.entry(partition).or_insert_with(|| {
                Arc::new(Shard {
                    led: Mutex::new(None),
                    inner: tokio::sync::Mutex::new(Loaded {
                        load_id: 0,
                        shard: ShareCoordinatorShard::new(self.updates_per_snapshot),
                        log: None,
                        folded_end: 0,
                        prune_mark: 0,
                    }),
                })
            }))
        };
        {
            let mut led = shard.led.lock();
            if led.is_some_and(|l| l.leader_epoch >= leader_epoch) {
                return;
            }
            *led = Some(Led {
                leader_epoch,
                load_id,
                loaded: false,
            });
        }
        info!(
            partition,
            leader_epoch, "loading {SHARE_GROUP_STATE_TOPIC} partition"
        );
        let updates_per_snapshot = self.updates_per_snapshot;
        tokio::spawn(async move {
            let replayed_log = Arc::clone(&log);
            let replayed =
                tokio::task::spawn_blocking(move || replay(&replayed_log, updates_per_snapshot))
                    .await;
            let (loaded, folded_end) = match replayed {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(e)) => {
                    warn!(partition, error = %e, "{SHARE_GROUP_STATE_TOPIC} replay failed");
                    return;
                }
                Err(e) => {
                    warn!(partition, error = %e, "{SHARE_GROUP_STATE_TOPIC} replay task failed");
                    return;
                }
            };
            let keys = loaded.len();
            let mut inner = shard.inner.lock().await;
            let mut led = shard.led.lock();
            match led.as_mut() {
                Some(l) if l.load_id == load_id => l.loaded = true,
                _ => return,
            }
            *inner = Loaded {
                load_id,
                shard: loaded,
                log: Some(log),
                folded_end,
                prune_mark: 0,
            };
            info!(
                partition,
                leader_epoch, keys, "{SHARE_GROUP_STATE_TOPIC} partition loaded"
            );
        });
    }

    /// This broker no longer leads `partition`.
    pub fn resign(&self, partition: i32) {
        if let Some(shard) = self.shards.lock().get(&partition) {
            *shard.led.lock() = None;
        }
    }

    /// Whether `partition` is led here and loaded.
    pub fn is_serving(&self, partition: i32) -> bool {
        self.shards
            .lock()
            .get(&partition)
            .and_then(|s| *s.led.lock())
            .is_some_and(|l| l.loaded)
    }

    /// InitializeShareGroupState of one key.
    pub async fn initialize(
        &self,
        partition: i32,
        key: &ShareStateKey,
        state_epoch: i32,
        start_offset: i64,
    ) -> Result<(), StateError> {
        let now = now_ms();
        self.run(partition, |shard| {
            Ok((
                (),
                Some(shard.initialize(key, state_epoch, start_offset, now)?),
            ))
        })
        .await
    }

    /// ReadShareGroupState of one key, recording `leader_epoch`.
    pub async fn read(
        &self,
        partition: i32,
        key: &ShareStateKey,
        leader_epoch: i32,
    ) -> Result<PersistedState, StateError> {
        let now = now_ms();
        self.run(partition, |shard| Ok(shard.read(key, leader_epoch, now)?))
            .await
    }

    /// WriteShareGroupState of one key.
    pub async fn write(
        &self,
        partition: i32,
        key: &ShareStateKey,
        write: &StateWrite,
    ) -> Result<(), StateError> {
        let now = now_ms();
        self.run(partition, |shard| {
            Ok(((), Some(shard.write(key, write, now)?)))
        })
        .await
    }

    /// DeleteShareGroupState of one key.
    pub async fn delete(&self, partition: i32, key: &ShareStateKey) -> Result<(), StateError> {
        self.run(partition, |shard| Ok(((), shard.delete(key)?)))
            .await
    }

    /// ReadShareGroupStateSummary of one key.
    pub async fn read_summary(
        &self,
        partition: i32,
        key: &ShareStateKey,
    ) -> Result<StateSummary, StateError> {
        self.run(partition, |shard| Ok((shard.read_summary(key)?, None)))
            .await
    }

    /// Decides on the shard of `partition` with `decide`, appends the record it returns (if
    /// any) and folds it in, then answers once everything folded is committed (module comment).
    async fn run<R>(
        &self,
        partition: i32,
        decide: impl FnOnce(&ShareCoordinatorShard) -> Result<(R, Option<ShareStateRecord>), StateError>,
    ) -> Result<R, StateError> {
        let not_coordinator =
            || StateError::new(NOT_COORDINATOR, "This broker does not lead the share state");
        let shard = self
            .shards
            .lock()
            .get(&partition)
            .map(Arc::clone)
            .ok_or_else(not_coordinator)?;
        let led = (*shard.led.lock()).ok_or_else(not_coordinator)?;
        let loading =
            || StateError::new(COORDINATOR_LOAD_IN_PROGRESS, "The share state is loading");
        if !led.loaded {
            return Err(loading());
        }
        let mut inner = shard.inner.lock().await;
        if inner.load_id != led.load_id {
            return Err(loading());
        }
        let (result, record) = decide(&inner.shard)?;
        if let Some(record) = record {
            let (offset, wait) = self.append(partition, led.leader_epoch, &record)?;
            inner.shard.replay_at(&record, offset);
            inner.folded_end = inner.folded_end.max(offset + 1);
            if let Some(wait) = wait {
                wait.wait(self.commit_timeout).await.map_err(commit_error)?;
            }
        } else {
            self.wait_committed(&inner).await?;
        }
        if shard.led.lock().is_none_or(|l| l.load_id != led.load_id) {
            // This broker no longer leads: the next leader replays its own log.
            return Err(not_coordinator());
        }
        Ok(result)
    }

    /// Waits, up to the commit timeout, for the high watermark to pass every record folded into
    /// `inner` (only a write whose commit timed out, or the tail a new leader replayed, is not).
    async fn wait_committed(&self, inner: &Loaded) -> Result<(), StateError> {
        let Some(log) = inner.log.as_ref() else {
            return Ok(());
        };
        let deadline = tokio::time::Instant::now() + self.commit_timeout;
        loop {
            let waiter = Arc::new(Notify::new());
            log.watch_high_watermark(&waiter);
            if log.high_watermark() >= inner.folded_end {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, waiter.notified())
                .await
                .is_err()
            {
                return Err(commit_error(AckError::Timeout));
            }
        }
    }

    /// One prune round over the `__share_group_state` partitions led and loaded here: fresh
    /// snapshots for the keys whose latest one is older than the previous round, then the log
    /// start moved up to the oldest snapshot still needed. Returns the records deleted.
    pub async fn prune(&self) -> u64 {
        let led: Vec<(i32, Arc<Shard>)> = self
            .shards
            .lock()
            .iter()
            .map(|(p, s)| (*p, Arc::clone(s)))
            .collect();
        let mut deleted = 0u64;
        for (partition, shard) in led {
            if !shard.led.lock().is_some_and(|l| l.loaded) {
                continue;
            }
            let tp = TopicPartition::new(SHARE_GROUP_STATE_TOPIC, partition);
            let Some(hosted) = self.replicas.partition(&tp) else {
                continue;
            };
            let log = Arc::clone(&hosted.log);
            let (mark, cold) = {
                let mut inner = shard.inner.lock().await;
                let cold = inner.shard.snapshotted_below(inner.prune_mark);
                let mark = std::mem::replace(&mut inner.prune_mark, log.high_watermark());
                (mark, cold)
            };
            let now = now_ms();
            for key in &cold {
                // A key written since the round began has its own snapshot or updates: the
                // shard decides again under the lock. A failure ends this partition's round.
                let snapshotted = self
                    .run(partition, |s| {
                        let due = s.snapshot_offset(key).is_some_and(|o| o < mark);
                        Ok(((), if due { s.snapshot(key, now) } else { None }))
                    })
                    .await;
                if let Err(e) = snapshotted {
                    warn!(partition, error = %e, "{SHARE_GROUP_STATE_TOPIC}: cold snapshot failed");
                    break;
                }
            }
            let below = {
                let inner = shard.inner.lock().await;
                inner.shard.redundant_below(log.high_watermark())
            };
            let start = log.log_start_offset();
            if below <= start {
                continue;
            }
            match log.delete_records_before(below) {
                Ok(now_start) => deleted += u64::try_from(now_start - start).unwrap_or(0),
                Err(e) => warn!(partition, error = %e, "{SHARE_GROUP_STATE_TOPIC}: pruning failed"),
            }
        }
        deleted
    }

    /// Appends `record` to `partition` acks=all in `leader_epoch`: its offset, and the wait for
    /// its commit (`None` when it is committed already).
    fn append(
        &self,
        partition: i32,
        leader_epoch: i32,
        record: &ShareStateRecord,
    ) -> Result<(i64, Option<AckWait>), StateError> {
        let (key, value) =
            encode_record(record).map_err(|e| StateError::new(INVALID_REQUEST, e.to_string()))?;
        let now = now_ms();
        let batch = encode_records(
            &BatchFields {
                base_offset: 0,
                partition_leader_epoch: -1,
                attributes: 0,
                last_offset_delta: 0,
                base_timestamp: now,
                max_timestamp: now,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &[Record {
                offset: 0,
                timestamp: now,
                key: Some(key.freeze()),
                value: value.map(|v| v.freeze()),
                headers: Vec::new(),
            }],
        );
        let tp = TopicPartition::new(SHARE_GROUP_STATE_TOPIC, partition);
        let (info, wait) = self
            .replicas
            .append_in_epoch(&tp, batch, -1, Some(leader_epoch))
            .map_err(|e| match e {
                ReplicaError::UnknownPartition(_)
                | ReplicaError::Partition(
                    PartitionError::NotLeader { .. }
                    | PartitionError::FencedLeaderEpoch
                    | PartitionError::UnknownLeaderEpoch,
                ) => StateError::new(NOT_COORDINATOR, e.to_string()),
                ReplicaError::Partition(PartitionError::NotEnoughReplicas) => {
                    StateError::new(NOT_ENOUGH_REPLICAS, e.to_string())
                }
                other => StateError::new(UNKNOWN_SERVER_ERROR, other.to_string()),
            })?;
        Ok((info.base_offset, wait))
    }
}

/// Why a write, or the writes an answer waited for, did not commit.
fn commit_error(e: AckError) -> StateError {
    match e {
        AckError::NotLeader => StateError::new(NOT_COORDINATOR, "leadership moved"),
        AckError::NotEnoughReplicasAfterAppend | AckError::Timeout => StateError::new(
            REQUEST_TIMED_OUT,
            "the share state write did not commit in time",
        ),
        AckError::Storage => StateError::new(UNKNOWN_SERVER_ERROR, "the log went offline"),
    }
}

/// Replays a `__share_group_state` partition into a shard, to its log end (returned with it).
/// An unreadable record is skipped with a warning (its key keeps what came before), as the
/// transaction coordinator does.
fn replay(
    log: &PartitionLog,
    updates_per_snapshot: u32,
) -> Result<(ShareCoordinatorShard, i64), String> {
    let mut shard = ShareCoordinatorShard::new(updates_per_snapshot);
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let read = log
            .read(offset, LOAD_READ_BYTES, ReadUpperBound::LogEnd, true)
            .map_err(|e| e.to_string())?;
        let bytes = read.records;
        if bytes.is_empty() {
            break;
        }
        let before = offset;
        let checks = WalkChecks {
            validation: Validation::Header,
            batch_bytes_max: None,
        };
        for walked in BatchWalk::new(&bytes, checks) {
            let Ok(WalkedBatch {
                header: h,
                bytes: batch,
                ..
            }) = walked
            else {
                break;
            };
            offset = offset.max(h.next_offset());
            if h.is_control() {
                continue;
            }
            let (_, recs) = decode_records(batch).map_err(|e| e.to_string())?;
            for r in recs {
                let Some(key) = r.key.as_deref() else {
                    continue;
                };
                match decode_record(key, r.value.as_deref()) {
                    Ok(record) => shard.replay_at(&record, r.offset),
                    Err(e) => {
                        warn!(offset = r.offset, error = %e, "skipping an unreadable {SHARE_GROUP_STATE_TOPIC} record")
                    }
                }
            }
        }
        if offset == before {
            break;
        }
    }
    Ok((shard, offset))
}

fn now_ms() -> i64 {
    crate::clock::now_ms()
}
