//! One hosted partition's replication logic over its log (Kafka's `Partition` minus the I/O of
//! moving bytes): becoming leader or follower from committed metadata, checking and accounting a
//! follower's fetch, truncating as a follower when the leader says our log diverges, and the
//! checks a leader makes before an append. It wraps the pure [`PartitionReplica`] machine and a
//! [`ReplicaLog`], so the same code runs over the store in the broker and over a simulated log in
//! the simulator.
//!
//! Rules kept here:
//! - A new leader epoch is recorded in the log's epoch cache at the log end *before* the replica
//!   acts as leader (KIP-101): every record it appends carries the new epoch, and followers can
//!   find where their logs diverge.
//! - Client and replica requests carry the leader epoch they expect (KIP-320): older is
//!   FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 skips the check.
//! - A follower's fetch counts towards the HW only if the divergence check passed.
//! - A follower's high watermark is the leader's, capped by its own log end.
//!
//! Locking: none inside; the caller holds one lock per partition around each call.

use crate::divergence::{check_follower_fetch, follower_truncation_offset, FollowerFetchCheck};
use crate::replica::{
    Action, AlterPartitionError, Event, PartitionReplica, PartitionState, ReplicaConfig,
};

/// What replication needs of a partition's log.
pub trait ReplicaLog {
    fn log_start_offset(&self) -> i64;
    fn log_end_offset(&self) -> i64;
    /// Everything below is as durable as the flush policy promises.
    fn durable_end_offset(&self) -> i64;
    fn high_watermark(&self) -> i64;
    /// The largest leader epoch ≤ `epoch` in the log's epoch cache and its end offset.
    fn end_offset_for_leader_epoch(&self, epoch: i32) -> Option<(i32, i64)>;
    /// The latest leader epoch in the log, if any.
    fn latest_leader_epoch(&self) -> Option<i32>;
    /// Records that leader epoch `epoch` starts at the log end (durably, before returning).
    fn begin_leader_epoch(&self, epoch: i32) -> Result<(), String>;
    /// Removes every record at or above `offset`, then every leader-epoch entry that starts at or
    /// past the new log end — also when no record goes (`offset` at or past the log end): a
    /// replica that began a leader epoch and appended nothing must drop that epoch when a leader
    /// says its log diverges there, or its next fetch carries the same epoch and diverges again,
    /// forever (Kafka's `UnifiedLog.truncateTo` truncates the epoch cache in that case too).
    fn truncate_to(&self, offset: i64) -> Result<(), String>;
    /// Removes every record and restarts the log at `offset` (a follower behind the leader's
    /// log start).
    fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), String>;
    /// Raises the high watermark (never lowers it).
    fn set_high_watermark(&self, offset: i64);
}

/// Why a request on this partition is refused; the front end maps these to Kafka codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionError {
    /// NOT_LEADER_OR_FOLLOWER (6); carries the leader and epoch we know, for KIP-951 hints.
    NotLeader { leader: i32, leader_epoch: i32 },
    /// FENCED_LEADER_EPOCH (74)
    FencedLeaderEpoch,
    /// UNKNOWN_LEADER_EPOCH (75)
    UnknownLeaderEpoch,
    /// NOT_ENOUGH_REPLICAS (19)
    NotEnoughReplicas,
    /// OFFSET_OUT_OF_RANGE (1)
    OffsetOutOfRange,
    /// KAFKA_STORAGE_ERROR (56)
    Storage,
}

/// The leader's answer to a follower fetch position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetchDecision {
    /// Serve records from the fetch offset; `high_watermark` is ours after accounting the fetch.
    Serve { high_watermark: i64 },
    /// Tell the follower to truncate.
    Diverging { epoch: i32, end_offset: i64 },
}

/// A follower's fetch position: where to fetch from, and the epoch of the last record there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// One partition's replication state over its log.
#[derive(Debug, Clone)]
pub struct Partition<L> {
    pub log: L,
    replica: PartitionReplica,
}

impl<L: ReplicaLog> Partition<L> {
    pub fn new(local_id: i32, log: L, config: ReplicaConfig) -> Self {
        Self {
            log,
            replica: PartitionReplica::new(local_id, config),
        }
    }

    pub fn replica(&self) -> &PartitionReplica {
        &self.replica
    }

    pub fn is_leader(&self) -> bool {
        self.replica.is_leader()
    }

    /// Applies committed metadata for this partition; returns actions for the caller.
    pub fn on_metadata(
        &mut self,
        state: PartitionState,
        config: ReplicaConfig,
        now_ms: i64,
    ) -> Result<Vec<Action>, PartitionError> {
        let local_id = self.local_id();
        let becomes_leader = state.leader == local_id
            && self
                .replica
                .leader()
                .is_none_or(|(l, e)| l != local_id || e != state.leader_epoch);
        if becomes_leader
            && self
                .log
                .latest_leader_epoch()
                .is_none_or(|e| e < state.leader_epoch)
        {
            self.log
                .begin_leader_epoch(state.leader_epoch)
                .map_err(|_| PartitionError::Storage)?;
        }
        let actions = self.replica.step(Event::Metadata {
            state,
            log_end_offset: self.log.log_end_offset(),
            durable_end_offset: self.log.durable_end_offset(),
            high_watermark: self.log.high_watermark(),
            config,
            now_ms,
        });
        Ok(self.apply(actions))
    }

    fn local_id(&self) -> i32 {
        self.replica.local_id()
    }

    /// KIP-320 check of the leader epoch a request expects (-1 = no check).
    pub fn check_leader_epoch(&self, expected: i32) -> Result<(), PartitionError> {
        let Some((_, epoch)) = self.replica.leader() else {
            return Err(PartitionError::NotLeader {
                leader: -1,
                leader_epoch: -1,
            });
        };
        if expected < 0 || expected == epoch {
            Ok(())
        } else if expected < epoch {
            Err(PartitionError::FencedLeaderEpoch)
        } else {
            Err(PartitionError::UnknownLeaderEpoch)
        }
    }

    /// Refuses unless this replica leads (with the KIP-951 hint).
    pub fn require_leader(&self) -> Result<i32, PartitionError> {
        match self.replica.leader() {
            Some((l, e)) if l == self.local_id() && self.replica.is_leader() => Ok(e),
            Some((l, e)) => Err(PartitionError::NotLeader {
                leader: l,
                leader_epoch: e,
            }),
            None => Err(PartitionError::NotLeader {
                leader: -1,
                leader_epoch: -1,
            }),
        }
    }

    /// Before a leader append: our leader epoch to stamp, and for acks=all the min ISR check.
    pub fn check_append(&self, acks_all: bool) -> Result<i32, PartitionError> {
        let epoch = self.require_leader()?;
        if acks_all && self.replica.is_under_min_isr() {
            return Err(PartitionError::NotEnoughReplicas);
        }
        Ok(epoch)
    }

    /// After a leader append or a flush: the durable end moved.
    pub fn on_local_durable(&mut self) -> Vec<Action> {
        let actions = self.replica.step(Event::LocalDurable {
            durable_end_offset: self.log.durable_end_offset(),
        });
        self.apply(actions)
    }

    /// A follower fetched. Returns what to answer, plus actions for the caller.
    #[allow(clippy::too_many_arguments)]
    pub fn on_follower_fetch(
        &mut self,
        replica_id: i32,
        broker_epoch: i64,
        current_leader_epoch: i32,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        eligible: bool,
        now_ms: i64,
    ) -> Result<(FollowerFetchDecision, Vec<Action>), PartitionError> {
        self.require_leader()?;
        self.check_leader_epoch(current_leader_epoch)?;
        let log_end_offset = self.log.log_end_offset();
        let check = check_follower_fetch(
            self.log.log_start_offset(),
            log_end_offset,
            |e| self.log.end_offset_for_leader_epoch(e),
            fetch_offset,
            last_fetched_epoch,
        );
        match check {
            FollowerFetchCheck::Diverging { epoch, end_offset } => Ok((
                FollowerFetchDecision::Diverging { epoch, end_offset },
                Vec::new(),
            )),
            FollowerFetchCheck::OutOfRange => Err(PartitionError::OffsetOutOfRange),
            FollowerFetchCheck::Consistent => {
                let actions = self.replica.step(Event::FollowerFetch {
                    replica_id,
                    broker_epoch,
                    fetch_offset,
                    eligible,
                    leader_log_end_offset: log_end_offset,
                    now_ms,
                });
                let actions = self.apply(actions);
                Ok((
                    FollowerFetchDecision::Serve {
                        high_watermark: self.replica.high_watermark(),
                    },
                    actions,
                ))
            }
        }
    }

    /// As follower: where the next fetch starts.
    pub fn fetch_position(&self) -> Option<FetchPosition> {
        let (leader, leader_epoch) = self.replica.leader()?;
        if self.replica.is_leader() || leader < 0 {
            return None;
        }
        Some(FetchPosition {
            fetch_offset: self.log.log_end_offset(),
            last_fetched_epoch: self.log.latest_leader_epoch().unwrap_or(-1),
            leader,
            leader_epoch,
        })
    }

    /// As follower: the leader says our log diverges; truncate. Returns the new log end.
    ///
    /// A negative `epoch` means the leader knows none of our leader epochs (every epoch it holds
    /// is newer; `end_offset` is its log start): nothing we hold can be matched against its log,
    /// and truncating to an offset would keep our last epoch, so the next fetch would ask the same
    /// question forever. The log starts over at the leader's log start instead, as after an
    /// out-of-range fetch (Kafka answers such a fetch with the first epoch it knows, which
    /// `ReplicaLog` cannot ask for; starting over is always sound, it only costs a re-fetch).
    pub fn on_diverging_epoch(
        &mut self,
        epoch: i32,
        end_offset: i64,
    ) -> Result<i64, PartitionError> {
        if epoch < 0 {
            self.log
                .truncate_fully_and_start_at(end_offset)
                .map_err(|_| PartitionError::Storage)?;
        } else {
            let at = follower_truncation_offset(
                self.log.log_end_offset(),
                |e| self.log.end_offset_for_leader_epoch(e),
                epoch,
                end_offset,
            )
            .max(self.log.log_start_offset());
            self.log
                .truncate_to(at)
                .map_err(|_| PartitionError::Storage)?;
        }
        self.replica.step(Event::Truncated {
            log_end_offset: self.log.log_end_offset(),
        });
        Ok(self.log.log_end_offset())
    }

    /// As follower: our fetch offset is outside the leader's log. Below its start: restart our log
    /// at the leader's start (everything we have is older than anything the leader keeps).
    pub fn on_fetch_out_of_range(
        &mut self,
        leader_log_start_offset: i64,
    ) -> Result<(), PartitionError> {
        let leo = self.log.log_end_offset();
        if leo < leader_log_start_offset {
            self.log
                .truncate_fully_and_start_at(leader_log_start_offset)
                .map_err(|_| PartitionError::Storage)?;
            self.replica.step(Event::Truncated {
                log_end_offset: self.log.log_end_offset(),
            });
        }
        Ok(())
    }

    /// As follower: a fetch answer arrived (its records already appended); take the leader's HW.
    pub fn on_leader_high_watermark(&mut self, leader_high_watermark: i64) -> Vec<Action> {
        let actions = self.replica.step(Event::LeaderHighWatermark {
            leader_high_watermark,
            log_end_offset: self.log.log_end_offset(),
        });
        self.apply(actions)
    }

    /// The controller answered our AlterPartition.
    pub fn on_alter_partition(
        &mut self,
        result: Result<PartitionState, AlterPartitionError>,
        now_ms: i64,
    ) -> Vec<Action> {
        let actions = self
            .replica
            .step(Event::AlterPartitionDone { result, now_ms });
        self.apply(actions)
    }

    /// Brokers the metadata shows fenced, shutting down or gone: not eligible for the ISR.
    pub fn mark_ineligible(&mut self, replicas: Vec<i32>) {
        self.replica.step(Event::Ineligible { replicas });
    }

    pub fn tick(&mut self, now_ms: i64) -> Vec<Action> {
        let actions = self.replica.step(Event::Tick { now_ms });
        self.apply(actions)
    }

    /// Applies HW actions to the log; returns the rest (and the HW ones, so the caller can wake
    /// waiters) to the caller.
    fn apply(&mut self, actions: Vec<Action>) -> Vec<Action> {
        for a in &actions {
            if let Action::SetHighWatermark(hw) = a {
                self.log.set_high_watermark(*hw);
            }
        }
        actions
    }
}

#[cfg(test)]
mod tests;
