//! The share coordinator's state for one `__share_group_state` partition (Kafka's
//! `ShareCoordinatorShard`): per share-partition key (group, topic id, partition) the
//! [`PersistedState`] replayed from the partition, and the rules of the share-state RPCs
//! (InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
//! DeleteShareGroupState, ReadShareGroupStateSummary, keys 83–87).
//!
//! Where it sits: the front end's share coordinator holds one [`ShareCoordinatorShard`] per
//! `__share_group_state` partition this broker leads. An RPC asks the shard for the record to
//! append ([`ShareCoordinatorShard::initialize`], [`ShareCoordinatorShard::write`], …); the
//! caller appends it acks=all and, once committed, folds it in with
//! [`ShareCoordinatorShard::replay`] — the same call that loads the partition on leadership, so
//! what a client saw answered is exactly what a replay rebuilds.
//!
//! Rules (Kafka 4.4's share coordinator):
//! - every write appends one record: a ShareUpdate with the changed ranges, or a full
//!   ShareSnapshot (the merged state, SnapshotEpoch + 1) once `updates_per_snapshot` updates
//!   followed the last snapshot, when the key is new, or when the state epoch moves;
//! - a Read records its leader epoch (a higher one appends an update bumping it; a lower one is
//!   FENCED_LEADER_EPOCH); a Write with a lower leader epoch is FENCED_LEADER_EPOCH, with a lower
//!   state epoch FENCED_STATE_EPOCH; Read and Write of a key never initialized are
//!   INVALID_REQUEST;
//! - Initialize writes a fresh snapshot unless the stored state epoch is higher
//!   (FENCED_STATE_EPOCH); Delete tombstones a key (a missing key is a no-op); ReadSummary of a
//!   missing key answers start offset -1 without an error.
//!
//! Pruning (Kafka's `lastRedundantOffset` and cold-partition snapshots): a key needs only its
//! latest snapshot and the updates after it, so the records below the oldest of the keys' latest
//! snapshots can go ([`ShareCoordinatorShard::redundant_below`]); a key written rarely is given a
//! fresh snapshot of its current state ([`ShareCoordinatorShard::snapshot`]) so that it does not
//! hold the whole partition back.
//!
//! Pure: no I/O, no clock (timestamps come in as `now_ms`).

use std::collections::HashMap;

use thiserror::Error;

use crate::records::{ShareSnapshotValue, ShareStateKey, ShareStateRecord, ShareUpdateValue};
use crate::state::{PersistedState, StateBatch};

/// The share coordinator's internal topic.
pub const SHARE_GROUP_STATE_TOPIC: &str = "__share_group_state";

/// Kafka's `share.coordinator.snapshot.update.records.per.snapshot` default (records): updates
/// appended for a key before the next write is a full snapshot.
pub const UPDATES_PER_SNAPSHOT_DEFAULT: u32 = 500;

/// Why the share coordinator refused an RPC; the front end maps each to Kafka's code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoordinatorError {
    /// INVALID_REQUEST (42): negative epochs or partition, or a key never initialized.
    #[error("{0}")]
    InvalidRequest(String),
    /// FENCED_LEADER_EPOCH (74): a share-partition leader older than the one recorded.
    #[error("leader epoch {request} is older than the recorded {stored}")]
    FencedLeaderEpoch { request: i32, stored: i32 },
    /// FENCED_STATE_EPOCH (124): a state epoch older than the one recorded.
    #[error("state epoch {request} is older than the recorded {stored}")]
    FencedStateEpoch { request: i32, stored: i32 },
}

/// What ReadShareGroupStateSummary answers for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSummary {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub delivery_complete_count: i32,
}

/// A WriteShareGroupState's content for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// -1: unchanged.
    pub start_offset: i64,
    /// -1: unknown.
    pub delivery_complete_count: i32,
    pub batches: Vec<StateBatch>,
}

/// One key's state with its snapshot bookkeeping.
#[derive(Debug, Clone)]
struct Entry {
    state: PersistedState,
    snapshot_epoch: i32,
    updates_since_snapshot: u32,
    create_timestamp_ms: i64,
    /// Where the key's latest snapshot sits in the partition; -1 when unknown (it then holds
    /// every record back from pruning).
    snapshot_offset: i64,
}

/// The share coordinator's state of one `__share_group_state` partition. See the module comment.
#[derive(Debug, Clone)]
pub struct ShareCoordinatorShard {
    entries: HashMap<ShareStateKey, Entry>,
    updates_per_snapshot: u32,
}

impl ShareCoordinatorShard {
    /// An empty shard that snapshots a key after `updates_per_snapshot` updates (at least 1).
    pub fn new(updates_per_snapshot: u32) -> ShareCoordinatorShard {
        ShareCoordinatorShard {
            entries: HashMap::new(),
            updates_per_snapshot: updates_per_snapshot.max(1),
        }
    }

    /// Folds one committed record in, in log order (load and after each append), its offset
    /// unknown (see [`Self::replay_at`]).
    pub fn replay(&mut self, record: &ShareStateRecord) {
        self.replay_at(record, -1);
    }

    /// Folds one committed record at `offset` of the partition in, in log order. An update of
    /// a key with no snapshot is ignored: Kafka always writes the snapshot first, so it can only
    /// follow a tombstone that a compaction kept, or pruning left, without the snapshot before it.
    pub fn replay_at(&mut self, record: &ShareStateRecord, offset: i64) {
        match record {
            ShareStateRecord::Snapshot(key, value) => {
                let create = self
                    .entries
                    .get(key)
                    .map_or(value.create_timestamp_ms, |e| e.create_timestamp_ms);
                self.entries.insert(
                    key.clone(),
                    Entry {
                        state: value.to_state(),
                        snapshot_epoch: value.snapshot_epoch,
                        updates_since_snapshot: 0,
                        create_timestamp_ms: create,
                        snapshot_offset: offset,
                    },
                );
            }
            ShareStateRecord::Update(key, value) => {
                if let Some(entry) = self.entries.get_mut(key) {
                    entry.state.apply_update(
                        value.leader_epoch,
                        value.start_offset,
                        value.delivery_complete_count,
                        &value.state_batches,
                    );
                    entry.updates_since_snapshot = entry.updates_since_snapshot.saturating_add(1);
                }
            }
            ShareStateRecord::Tombstone(key) => {
                self.entries.remove(key);
            }
        }
    }

    /// The stored state of `key`, if initialized.
    pub fn state(&self, key: &ShareStateKey) -> Option<&PersistedState> {
        self.entries.get(key).map(|e| &e.state)
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The offset below which no record is needed to rebuild this shard: the oldest of the keys'
    /// latest snapshots, at most `end` (the committed end, which it is when no key is held). A
    /// key whose snapshot offset is unknown holds everything (0).
    pub fn redundant_below(&self, end: i64) -> i64 {
        self.entries
            .values()
            .map(|e| e.snapshot_offset.max(0))
            .min()
            .unwrap_or(end)
            .min(end)
    }

    /// The keys whose latest snapshot sits below `offset` (or whose snapshot offset is unknown):
    /// those a fresh snapshot would let pruning pass.
    pub fn snapshotted_below(&self, offset: i64) -> Vec<ShareStateKey> {
        self.entries
            .iter()
            .filter(|(_, e)| e.snapshot_offset < offset)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Where `key`'s latest snapshot sits (-1: unknown), if the key is held.
    pub fn snapshot_offset(&self, key: &ShareStateKey) -> Option<i64> {
        self.entries.get(key).map(|e| e.snapshot_offset)
    }

    /// A snapshot of `key`'s current state (SnapshotEpoch + 1) to append, so that the records
    /// before it are no longer needed; `None` when the key is not held.
    pub fn snapshot(&self, key: &ShareStateKey, now_ms: i64) -> Option<ShareStateRecord> {
        let entry = self.entries.get(key)?;
        Some(ShareStateRecord::Snapshot(
            key.clone(),
            ShareSnapshotValue::from_state(
                &entry.state,
                entry.snapshot_epoch.saturating_add(1),
                entry.create_timestamp_ms,
                now_ms,
            ),
        ))
    }

    /// InitializeShareGroupState: the snapshot to append for `key` starting at `start_offset`
    /// (-1: the share-partition leader applies `share.auto.offset.reset` on its first read).
    pub fn initialize(
        &self,
        key: &ShareStateKey,
        state_epoch: i32,
        start_offset: i64,
        now_ms: i64,
    ) -> Result<ShareStateRecord, CoordinatorError> {
        check_key(key)?;
        if state_epoch < 0 {
            return Err(invalid(format!("invalid state epoch {state_epoch}")));
        }
        if start_offset < -1 {
            return Err(invalid(format!("invalid start offset {start_offset}")));
        }
        let entry = self.entries.get(key);
        if let Some(e) = entry.filter(|e| e.state.state_epoch > state_epoch) {
            return Err(CoordinatorError::FencedStateEpoch {
                request: state_epoch,
                stored: e.state.state_epoch,
            });
        }
        let state = PersistedState::initial(state_epoch, start_offset);
        let snapshot_epoch = entry.map_or(0, |e| e.snapshot_epoch.saturating_add(1));
        Ok(ShareStateRecord::Snapshot(
            key.clone(),
            ShareSnapshotValue::from_state(&state, snapshot_epoch, now_ms, now_ms),
        ))
    }

    /// ReadShareGroupState: the stored state, and the record to append first when the reader's
    /// `leader_epoch` is newer than the one recorded (-1 reads without recording).
    pub fn read(
        &self,
        key: &ShareStateKey,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(PersistedState, Option<ShareStateRecord>), CoordinatorError> {
        check_key(key)?;
        let Some(entry) = self.entries.get(key) else {
            return Err(uninitialized(key));
        };
        let stored = entry.state.leader_epoch;
        if leader_epoch >= 0 && leader_epoch < stored {
            return Err(CoordinatorError::FencedLeaderEpoch {
                request: leader_epoch,
                stored,
            });
        }
        let mut state = entry.state.clone();
        if leader_epoch <= stored {
            return Ok((state, None));
        }
        state.leader_epoch = leader_epoch;
        let record = self.next_record(
            key,
            entry,
            &StateWrite {
                state_epoch: entry.state.state_epoch,
                leader_epoch,
                start_offset: -1,
                delivery_complete_count: entry.state.delivery_complete_count,
                batches: Vec::new(),
            },
            now_ms,
        );
        Ok((state, Some(record)))
    }

    /// WriteShareGroupState: the record to append for `write` of `key`.
    pub fn write(
        &self,
        key: &ShareStateKey,
        write: &StateWrite,
        now_ms: i64,
    ) -> Result<ShareStateRecord, CoordinatorError> {
        check_key(key)?;
        if write.state_epoch < 0 || write.leader_epoch < 0 {
            return Err(invalid(format!(
                "invalid state epoch {} or leader epoch {}",
                write.state_epoch, write.leader_epoch
            )));
        }
        if write.start_offset < -1 {
            return Err(invalid(format!(
                "invalid start offset {}",
                write.start_offset
            )));
        }
        if let Some(b) = write
            .batches
            .iter()
            .find(|b| b.first > b.last || b.first < 0 || b.delivery_count < 0)
        {
            return Err(invalid(format!("invalid state batch {b:?}")));
        }
        let Some(entry) = self.entries.get(key) else {
            return Err(uninitialized(key));
        };
        if write.leader_epoch < entry.state.leader_epoch {
            return Err(CoordinatorError::FencedLeaderEpoch {
                request: write.leader_epoch,
                stored: entry.state.leader_epoch,
            });
        }
        if write.state_epoch < entry.state.state_epoch {
            return Err(CoordinatorError::FencedStateEpoch {
                request: write.state_epoch,
                stored: entry.state.state_epoch,
            });
        }
        Ok(self.next_record(key, entry, write, now_ms))
    }

    /// DeleteShareGroupState: the tombstone to append, or `None` when there is nothing stored.
    pub fn delete(
        &self,
        key: &ShareStateKey,
    ) -> Result<Option<ShareStateRecord>, CoordinatorError> {
        check_key(key)?;
        Ok(self
            .entries
            .contains_key(key)
            .then(|| ShareStateRecord::Tombstone(key.clone())))
    }

    /// ReadShareGroupStateSummary: a missing key answers start offset -1, epochs 0 and
    /// delivery-complete count -1, without an error.
    pub fn read_summary(&self, key: &ShareStateKey) -> Result<StateSummary, CoordinatorError> {
        check_key(key)?;
        Ok(match self.entries.get(key) {
            Some(e) => StateSummary {
                state_epoch: e.state.state_epoch,
                leader_epoch: e.state.leader_epoch,
                start_offset: e.state.start_offset,
                delivery_complete_count: e.state.delivery_complete_count,
            },
            None => StateSummary {
                state_epoch: 0,
                leader_epoch: 0,
                start_offset: -1,
                delivery_complete_count: -1,
            },
        })
    }

    /// An update, or a snapshot of the merged state when the key is due one (the update count
    /// reached the limit, or the state epoch moves, which an update cannot carry).
    fn next_record(
        &self,
        key: &ShareStateKey,
        entry: &Entry,
        write: &StateWrite,
        now_ms: i64,
    ) -> ShareStateRecord {
        let snapshot_due = entry.updates_since_snapshot.saturating_add(1)
            >= self.updates_per_snapshot
            || write.state_epoch != entry.state.state_epoch;
        if !snapshot_due {
            return ShareStateRecord::Update(
                key.clone(),
                ShareUpdateValue {
                    snapshot_epoch: entry.snapshot_epoch,
                    leader_epoch: write.leader_epoch,
                    start_offset: write.start_offset,
                    delivery_complete_count: write.delivery_complete_count,
                    state_batches: write.batches.clone(),
                },
            );
        }
        let mut merged = entry.state.clone();
        merged.apply_update(
            write.leader_epoch,
            write.start_offset,
            write.delivery_complete_count,
            &write.batches,
        );
        merged.state_epoch = write.state_epoch;
        ShareStateRecord::Snapshot(
            key.clone(),
            ShareSnapshotValue::from_state(
                &merged,
                entry.snapshot_epoch.saturating_add(1),
                entry.create_timestamp_ms,
                now_ms,
            ),
        )
    }
}

fn check_key(key: &ShareStateKey) -> Result<(), CoordinatorError> {
    if key.group_id.is_empty() {
        return Err(invalid("group id is empty".into()));
    }
    if key.partition < 0 {
        return Err(invalid(format!("invalid partition {}", key.partition)));
    }
    Ok(())
}

fn invalid(message: String) -> CoordinatorError {
    CoordinatorError::InvalidRequest(message)
}

fn uninitialized(key: &ShareStateKey) -> CoordinatorError {
    invalid(format!(
        "uninitialized share partition {}:{}",
        key.group_id, key.partition
    ))
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
