//! The replication driver: everything a broker decides about the replicas it hosts, as plain
//! state machines fed events and answering with what to do — no sockets, no tasks, no clock.
//! The broker's tokio runtime (`manager.rs`, `fetcher.rs`) and the seeded simulator
//! (`millrace-sim`) both execute it, so the simulator's seeds test the logic that ships
//! (decision 0068).
//!
//! | event                                  | driver                          | what comes out                         |
//! |----------------------------------------|---------------------------------|----------------------------------------|
//! | committed metadata for a partition     | [`HostedReplica::on_metadata`]  | leadership moves, HW moves, ISR change |
//! | a leader append became durable         | `Partition::on_local_durable`   | HW moves, acks to release              |
//! | a follower fetched from us             | `Partition::on_follower_fetch`  | what to serve, HW moves, ISR change    |
//! | time to fetch from a leader            | [`fetch::LeaderFetcher::next`]  | the fetch to send, or wait for fsync   |
//! | a fetch answer, per partition          | [`fetch::apply_answer`]         | append/truncate done, backoff, HW      |
//! | replica actions                        | [`HostedReplica::after`]        | ISR changes to send, acks to release   |
//! | ISR changes to send / their answer     | [`isr_changes::IsrChangeSender`]| one `AlterPartitions` at a time        |
//! | a tick                                 | `Partition::tick`, `release_acks` | ISR shrink/expand, timed-out acks   |
//! | the scrubber found damaged batches     | [`repair::repair_sources`], [`repair::take_batches`] | whom to ask, what to keep |
//!
//! The executor owns what the driver does not: moving bytes (the store or the simulated log),
//! connections, timers, and the locks — the broker keeps each [`HostedReplica`] under its own
//! mutex (appends on different partitions never wait for each other) and the per-broker parts
//! (fetchers, ISR sender) under theirs; the simulator owns them all in one broker value.
//!
//! [`isr_changes::IsrChangeSender`]: crate::isr_changes::IsrChangeSender

pub mod acks;
pub mod fetch;
pub mod repair;

use millrace_cluster::image::NO_LEADER;

use crate::isr_changes::Proposal;
use crate::partition::{Partition, PartitionError, ReplicaLog};
use crate::replica::{Action, PartitionState, ReplicaConfig};
use acks::{AckError, AckView, AckWaits};

/// How leadership of a partition moved with a metadata change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipMove {
    /// This replica leads now, in `leader_epoch` (newly, or in a new epoch).
    Became { leader_epoch: i32 },
    /// This replica led and no longer does.
    Resigned,
}

/// What applying committed metadata to one partition did.
#[derive(Debug, Default)]
pub struct MetadataOutcome {
    pub actions: Vec<Action>,
    pub leadership: Option<LeadershipMove>,
    /// The leader or leader epoch the replica acts on changed: requests parked on the old one
    /// should answer now.
    pub epoch_changed: bool,
}

/// One partition replica hosted by this broker: its replication state over its log, the committed
/// state last handed to it, and its `acks=all` waiters `W`.
#[derive(Debug)]
pub struct HostedReplica<L, W> {
    pub partition: Partition<L>,
    /// The committed state and settings last handed to the partition (a topic config change,
    /// say min.insync.replicas, is handed over even when the state is the same).
    delivered: Option<(PartitionState, ReplicaConfig)>,
    pub acks: AckWaits<W>,
}

impl<L: ReplicaLog, W> HostedReplica<L, W> {
    pub fn new(local_id: i32, log: L, config: ReplicaConfig) -> Self {
        Self {
            partition: Partition::new(local_id, log, config),
            delivered: None,
            acks: AckWaits::default(),
        }
    }

    /// Applies the committed state of this partition. `current`: the image shows this process
    /// registered and unfenced — otherwise it leads nothing, even where the image names it leader
    /// (a restarted process never acts on its predecessor's leaderships): it acts as if the
    /// partition had no leader until it is current. `inactive(b)`: broker `b` is fenced, shutting
    /// down or unregistered (not eligible for the ISR, KIP-841).
    pub fn on_metadata(
        &mut self,
        mut state: PartitionState,
        current: bool,
        config: ReplicaConfig,
        now_ms: i64,
        inactive: impl Fn(i32) -> bool,
    ) -> Result<MetadataOutcome, PartitionError> {
        let local = self.partition.replica().local_id();
        if state.leader == local && !current {
            state.leader = NO_LEADER;
        }
        let mut out = MetadataOutcome::default();
        if self.delivered.as_ref() != Some(&(state.clone(), config)) {
            let was_leader = self.partition.is_leader();
            let before = self.partition.replica().leader();
            out.actions = self.partition.on_metadata(state.clone(), config, now_ms)?;
            self.delivered = Some((state.clone(), config));
            let after = self.partition.replica().leader();
            out.epoch_changed = before != after;
            let is_leader = self.partition.is_leader();
            if is_leader && (!was_leader || before != after) {
                let leader_epoch = after.map_or(-1, |(_, e)| e);
                out.leadership = Some(LeadershipMove::Became { leader_epoch });
            } else if was_leader && !is_leader {
                out.leadership = Some(LeadershipMove::Resigned);
            }
        }
        if self.partition.is_leader() {
            let ineligible: Vec<i32> = state
                .replicas
                .iter()
                .copied()
                .filter(|&b| b != local && inactive(b))
                .collect();
            if !ineligible.is_empty() {
                self.partition.mark_ineligible(ineligible);
            }
        }
        Ok(out)
    }

    /// What the `acks=all` waits see now.
    pub fn ack_view(&self, now_ms: i64) -> AckView {
        let replica = self.partition.replica();
        AckView {
            leading_epoch: if self.partition.is_leader() {
                replica.leader().map(|(_, e)| e)
            } else {
                None
            },
            high_watermark: replica.high_watermark(),
            under_min_isr: replica.is_under_min_isr(),
            now_ms,
        }
    }

    /// Answers the `acks=all` waits that can be answered now.
    pub fn release_acks(&mut self, now_ms: i64) -> Vec<(W, Result<(), AckError>)> {
        let view = self.ack_view(now_ms);
        self.acks.release(view)
    }

    /// Carries out the replica's `actions` as far as the driver goes: turns ISR changes into
    /// proposals for the broker's [`crate::isr_changes::IsrChangeSender`] (made under
    /// `broker_epoch`; without a registration a proposal cannot be sent, and is answered as
    /// unsent at once, so the replica retries it) and answers the acks the actions released.
    pub fn after(
        &mut self,
        actions: Vec<Action>,
        partition_key: (uuid::Uuid, i32),
        broker_epoch: Option<i64>,
        now_ms: i64,
    ) -> AfterActions<W> {
        let mut out = AfterActions {
            proposals: Vec::new(),
            acks: Vec::new(),
            high_watermark: None,
        };
        let mut queue: std::collections::VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::SetHighWatermark(hw) => out.high_watermark = Some(hw),
                Action::AlterPartition {
                    leader_epoch,
                    partition_epoch,
                    isr,
                } => match broker_epoch {
                    Some(broker_epoch) if broker_epoch >= 0 => out.proposals.push(Proposal {
                        broker_epoch,
                        change: millrace_controller::messages::IsrChange {
                            topic_id: partition_key.0,
                            partition: partition_key.1,
                            leader_epoch,
                            partition_epoch,
                            new_isr: isr,
                        },
                    }),
                    // Answered at once; a Retriable answer only schedules the retry, so what it
                    // returns goes through this same loop and ends.
                    _ => queue.extend(self.partition.on_alter_partition(
                        Err(crate::replica::AlterPartitionError::Retriable),
                        now_ms,
                    )),
                },
            }
        }
        out.acks = self.release_acks(now_ms);
        out
    }
}

/// What [`HostedReplica::after`] leaves to the executor.
#[derive(Debug)]
pub struct AfterActions<W> {
    /// ISR changes for the broker's sender.
    pub proposals: Vec<Proposal>,
    /// `acks=all` answers to deliver.
    pub acks: Vec<(W, Result<(), AckError>)>,
    /// The high watermark moved to this (wake whoever watches it).
    pub high_watermark: Option<i64>,
}
