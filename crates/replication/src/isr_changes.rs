//! This broker's ISR changes on their way to the controller (Kafka's `AlterPartitionManager`):
//! every leader's proposal waits in one queue, and one sender takes them in batches — one
//! `AlterPartitions` request at a time, every pending change in it (up to
//! `ISR_CHANGES_PER_REQUEST_MAX`).
//!
//! Why: a broker that leads thousands of partitions proposes thousands of ISR changes at once
//! when a follower comes back (each partition expands its ISR). One request each opened as many
//! connections to the controller listener and as many decisions in the controller's queue —
//! heartbeats waited behind them past the session timeout and the cluster fenced every broker.
//! One request per batch is one decision, one metadata transaction at most.
//!
//! What it keeps: a batch names each partition at most once and carries one broker epoch (a
//! later proposal for the same partition, or one made under another registration, waits for the
//! next batch); proposals leave in the order they came; one request is out at a time. It does not
//! send: the broker's sender task and the simulator's brokers both execute
//! [`IsrChangeSender`] (part of the replication driver, `driver/mod.rs`).

use std::collections::{BTreeSet, VecDeque};

use millrace_cluster::image::PartitionRegistration;
use millrace_controller::messages::{ControllerError, IsrChange};
use millrace_controller::{ControllerRequest, ControllerResponse};
use uuid::Uuid;

use crate::replica::{AlterPartitionError, PartitionState};

/// One leader's ISR change, proposed under a broker epoch (the request carries one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub broker_epoch: i64,
    pub change: IsrChange,
}

impl Proposal {
    /// The partition, as (topic id, index).
    pub fn partition(&self) -> (Uuid, i32) {
        (self.change.topic_id, self.change.partition)
    }
}

/// What the controller's answer means to one change: the outcome for the replica, and the
/// controller's error when it refused the change (for the log).
pub type Answer = (
    Result<PartitionState, AlterPartitionError>,
    Option<ControllerError>,
);

/// This broker's ISR changes waiting for the controller; `T` is whatever the executor needs to
/// hand each answer to its partition.
#[derive(Debug)]
pub struct IsrChangeSender<T> {
    pending: VecDeque<(Proposal, T)>,
    in_flight: Option<Vec<T>>,
}

impl<T> Default for IsrChangeSender<T> {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
            in_flight: None,
        }
    }
}

impl<T> IsrChangeSender<T> {
    /// Queues a proposal.
    pub fn propose(&mut self, proposal: Proposal, target: T) {
        self.pending.push_back((proposal, target));
    }

    /// The next `AlterPartitions` request of `node_id` (at most `max` changes, see
    /// [`take_batch`]) unless one is out or nothing is pending.
    pub fn next_request(&mut self, node_id: i32, max: usize) -> Option<ControllerRequest> {
        if self.in_flight.is_some() {
            return None;
        }
        let batch = take_batch(&mut self.pending, max);
        let broker_epoch = batch.first().map(|(p, _)| p.broker_epoch)?;
        let mut changes = Vec::with_capacity(batch.len());
        let mut targets = Vec::with_capacity(batch.len());
        for (p, t) in batch {
            changes.push(p.change);
            targets.push(t);
        }
        self.in_flight = Some(targets);
        Some(ControllerRequest::AlterPartitions {
            node_id,
            broker_epoch,
            changes,
        })
    }

    /// The request out was answered with `response` (or gave up: pass the error): each change's
    /// target with its answer, in order ([`answers`]). Empty when no request was out.
    pub fn on_response(&mut self, response: ControllerResponse) -> Vec<(T, Answer)> {
        let Some(targets) = self.in_flight.take() else {
            return Vec::new();
        };
        let answers = answers(response, targets.len());
        targets.into_iter().zip(answers).collect()
    }

    /// A request is out.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Drops everything (the process stopped).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.in_flight = None;
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Takes the next batch from `pending`: at most `max` proposals under the first one's broker
/// epoch, each partition once, in order; the rest stay. Empty when nothing is pending.
pub fn take_batch<T>(pending: &mut VecDeque<(Proposal, T)>, max: usize) -> Vec<(Proposal, T)> {
    let Some(epoch) = pending.front().map(|(p, _)| p.broker_epoch) else {
        return Vec::new();
    };
    let mut batch = Vec::new();
    let mut named = BTreeSet::new();
    let mut left = VecDeque::with_capacity(pending.len());
    while let Some((p, t)) = pending.pop_front() {
        if batch.len() < max && p.broker_epoch == epoch && named.insert(p.partition()) {
            batch.push((p, t));
        } else {
            left.push_back((p, t));
        }
    }
    *pending = left;
    batch
}

/// What the controller's answer to an `AlterPartitions` request of `changes` changes means to each
/// of them, in order: per change, the new registration, INELIGIBLE_REPLICA as `Ineligible`, an
/// internal error (the controller could not tell whether the change committed) as `Retriable`,
/// and any other refusal as `Stale` (the partition moved; the leader waits for the image); a
/// stale broker epoch is `Stale` for all; no answer (a timeout, no controller, an internal error,
/// an answer that does not fit the request) is `Retriable` for all. The error of each refused
/// change comes with it, for the log.
///
/// Why an internal error is `Retriable`, not `Stale`: `Stale` waits for metadata that says how the
/// partition moved, and after an internal error nothing may have moved — the leader would wait
/// for ever with its change pending (decision 0068).
pub fn answers(response: ControllerResponse, changes: usize) -> Vec<Answer> {
    match response {
        ControllerResponse::AlterPartitions { results } if results.len() == changes => results
            .into_iter()
            .map(|r| match r {
                Ok(reg) => (Ok(state_of(reg)), None),
                Err(e @ ControllerError::IneligibleReplica(_)) => {
                    (Err(AlterPartitionError::Ineligible), Some(e))
                }
                Err(e @ ControllerError::Internal(_)) => {
                    (Err(AlterPartitionError::Retriable), Some(e))
                }
                Err(e) => (Err(AlterPartitionError::Stale), Some(e)),
            })
            .collect(),
        ControllerResponse::Error {
            error: e @ ControllerError::StaleBrokerEpoch,
        } => (0..changes)
            .map(|_| (Err(AlterPartitionError::Stale), Some(e.clone())))
            .collect(),
        _ => (0..changes)
            .map(|_| (Err(AlterPartitionError::Retriable), None))
            .collect(),
    }
}

fn state_of(reg: PartitionRegistration) -> PartitionState {
    PartitionState {
        leader: reg.leader,
        leader_epoch: reg.leader_epoch,
        partition_epoch: reg.partition_epoch,
        isr: reg.isr,
        replicas: reg.replicas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(epoch: i64, partition: i32) -> Proposal {
        Proposal {
            broker_epoch: epoch,
            change: IsrChange {
                topic_id: Uuid::nil(),
                partition,
                leader_epoch: 1,
                partition_epoch: 1,
                new_isr: vec![(1, -1), (2, -1)],
            },
        }
    }

    fn check(queued: &[(i64, i32)], max: usize, expected: &[&[u32]]) {
        let mut pending = VecDeque::new();
        for (n, &(epoch, partition)) in queued.iter().enumerate() {
            pending.push_back((proposal(epoch, partition), n as u32));
        }
        for want in expected {
            let got: Vec<u32> = take_batch(&mut pending, max)
                .iter()
                .map(|(_, n)| *n)
                .collect();
            assert_eq!(&got, want);
        }
        assert!(pending.is_empty());
    }

    #[test]
    fn batches_name_each_partition_once_under_one_broker_epoch() {
        // Everything in one batch.
        check(&[(5, 0), (5, 1), (5, 2)], 10, &[&[0, 1, 2]]);
        // Bounded, in order.
        check(&[(5, 0), (5, 1), (5, 2)], 2, &[&[0, 1], &[2]]);
        // A second proposal for partition 0 waits for the next batch.
        check(&[(5, 0), (5, 1), (5, 0)], 10, &[&[0, 1], &[2]]);
        // Another broker epoch waits too.
        check(&[(5, 0), (6, 1), (5, 2)], 10, &[&[0, 2], &[1]]);
        check(&[], 10, &[&[]]);
    }

    #[test]
    fn each_change_gets_its_own_answer_and_a_whole_failure_answers_all() {
        let reg = PartitionRegistration::new(vec![1, 2]);
        let kinds = |response, n| -> Vec<Result<(), AlterPartitionError>> {
            answers(response, n)
                .into_iter()
                .map(|(r, _)| r.map(|_| ()))
                .collect()
        };
        let per_change = ControllerResponse::AlterPartitions {
            results: vec![
                Ok(reg),
                Err(ControllerError::IneligibleReplica("fenced".into())),
                Err(ControllerError::InvalidUpdateVersion),
                Err(ControllerError::Internal("commit outcome unknown".into())),
            ],
        };
        assert_eq!(
            kinds(per_change.clone(), 4),
            vec![
                Ok(()),
                Err(AlterPartitionError::Ineligible),
                Err(AlterPartitionError::Stale),
                Err(AlterPartitionError::Retriable)
            ]
        );
        // An answer that does not fit the request is no answer.
        assert_eq!(
            kinds(per_change, 2),
            vec![Err(AlterPartitionError::Retriable); 2]
        );
        let stale = ControllerResponse::Error {
            error: ControllerError::StaleBrokerEpoch,
        };
        assert_eq!(kinds(stale, 2), vec![Err(AlterPartitionError::Stale); 2]);
        for error in [
            ControllerError::Timeout("no answer".into()),
            ControllerError::Internal("no quorum".into()),
        ] {
            assert_eq!(
                kinds(ControllerResponse::Error { error }, 2),
                vec![Err(AlterPartitionError::Retriable); 2]
            );
        }
    }

    #[test]
    fn one_request_out_at_a_time_and_its_answer_goes_to_each_target() {
        let mut sender = IsrChangeSender::default();
        assert!(sender.next_request(1, 10).is_none());
        sender.propose(proposal(5, 0), "p0");
        sender.propose(proposal(5, 1), "p1");
        let Some(ControllerRequest::AlterPartitions {
            node_id,
            broker_epoch,
            changes,
        }) = sender.next_request(1, 10)
        else {
            panic!("a request");
        };
        assert_eq!((node_id, broker_epoch, changes.len()), (1, 5, 2));
        sender.propose(proposal(5, 2), "p2");
        assert!(sender.in_flight());
        assert!(sender.next_request(1, 10).is_none(), "one request out");
        let answered = sender.on_response(ControllerResponse::Error {
            error: ControllerError::Timeout("no answer".into()),
        });
        let targets: Vec<&str> = answered.iter().map(|(t, _)| *t).collect();
        assert_eq!(targets, vec!["p0", "p1"]);
        assert!(answered
            .iter()
            .all(|(_, (r, _))| *r == Err(AlterPartitionError::Retriable)));
        assert!(sender
            .on_response(ControllerResponse::Error {
                error: ControllerError::Timeout("late".into()),
            })
            .is_empty());
        assert!(sender.next_request(1, 10).is_some(), "p2 goes next");
    }
}
