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
//! next batch); proposals leave in the order they came. It does not send: the replica manager
//! takes batches ([`IsrChangeQueue::next_batch`]) and answers each proposal's partition.
//!
//! Shared with the simulator, whose brokers batch the same way: [`take_batch`] (which proposals
//! go together) and [`answers`] (what the controller's answer means to each).

use std::collections::{BTreeSet, VecDeque};

use millrace_cluster::image::PartitionRegistration;
use millrace_controller::messages::ControllerError;
use millrace_controller::ControllerResponse;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::replica::{AlterPartitionError, PartitionState};

/// What the queue needs to know of a proposal to batch it.
pub trait Batchable {
    /// The broker epoch the proposal was made under (the request carries one).
    fn broker_epoch(&self) -> i64;
    /// The partition, as (topic id, index).
    fn partition(&self) -> (uuid::Uuid, i32);
}

/// Pending ISR changes of this broker.
pub struct IsrChangeQueue<T> {
    pending: Mutex<VecDeque<T>>,
    wake: Notify,
}

impl<T: Batchable> Default for IsrChangeQueue<T> {
    fn default() -> Self {
        Self {
            pending: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
        }
    }
}

impl<T: Batchable> IsrChangeQueue<T> {
    /// Queues a proposal and wakes the sender.
    pub fn push(&self, change: T) {
        self.pending.lock().push_back(change);
        self.wake.notify_one();
    }

    /// Takes the next batch now (see [`take_batch`]).
    pub fn take_batch(&self, max: usize) -> Vec<T> {
        take_batch(&mut self.pending.lock(), max)
    }

    /// Waits until something is pending, then takes a batch (see `take_batch`).
    pub async fn next_batch(&self, max: usize) -> Vec<T> {
        loop {
            let notified = self.wake.notified();
            let batch = self.take_batch(max);
            if !batch.is_empty() {
                return batch;
            }
            notified.await;
        }
    }

    pub fn len(&self) -> usize {
        self.pending.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Takes the next batch from `pending`: at most `max` proposals under the first one's broker
/// epoch, each partition once, in order; the rest stay. Empty when nothing is pending.
pub fn take_batch<T: Batchable>(pending: &mut VecDeque<T>, max: usize) -> Vec<T> {
    let Some(epoch) = pending.front().map(Batchable::broker_epoch) else {
        return Vec::new();
    };
    let mut batch = Vec::new();
    let mut named = BTreeSet::new();
    let mut left = VecDeque::with_capacity(pending.len());
    while let Some(change) = pending.pop_front() {
        if batch.len() < max && change.broker_epoch() == epoch && named.insert(change.partition()) {
            batch.push(change);
        } else {
            left.push_back(change);
        }
    }
    *pending = left;
    batch
}

/// What the controller's answer to an `AlterPartitions` request of `changes` changes means to each
/// of them, in order: per change, the new registration, INELIGIBLE_REPLICA as `Ineligible` and any
/// other refusal as `Stale` (the partition moved; the leader waits for the image); a stale broker
/// epoch is `Stale` for all; no answer (a timeout, no controller, an answer that does not fit the
/// request) is `Retriable` for all. The error of each refused change comes with it, for the log.
pub fn answers(
    response: ControllerResponse,
    changes: usize,
) -> Vec<(
    Result<PartitionState, AlterPartitionError>,
    Option<ControllerError>,
)> {
    match response {
        ControllerResponse::AlterPartitions { results } if results.len() == changes => results
            .into_iter()
            .map(|r| match r {
                Ok(reg) => (Ok(state_of(reg)), None),
                Err(e @ ControllerError::IneligibleReplica(_)) => {
                    (Err(AlterPartitionError::Ineligible), Some(e))
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
    use uuid::Uuid;

    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Change {
        epoch: i64,
        partition: i32,
        n: u32,
    }

    impl Batchable for Change {
        fn broker_epoch(&self) -> i64 {
            self.epoch
        }
        fn partition(&self) -> (Uuid, i32) {
            (Uuid::nil(), self.partition)
        }
    }

    fn check(queued: &[(i64, i32)], max: usize, expected: &[&[u32]]) {
        let q = IsrChangeQueue::default();
        for (n, &(epoch, partition)) in queued.iter().enumerate() {
            q.push(Change {
                epoch,
                partition,
                n: n as u32,
            });
        }
        for want in expected {
            let got: Vec<u32> = q.take_batch(max).iter().map(|c| c.n).collect();
            assert_eq!(&got, want);
        }
        assert!(q.is_empty());
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
            ],
        };
        assert_eq!(
            kinds(per_change.clone(), 3),
            vec![
                Ok(()),
                Err(AlterPartitionError::Ineligible),
                Err(AlterPartitionError::Stale)
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
        let timeout = ControllerResponse::Error {
            error: ControllerError::Timeout("no answer".into()),
        };
        assert_eq!(
            kinds(timeout, 2),
            vec![Err(AlterPartitionError::Retriable); 2]
        );
    }

    #[tokio::test]
    async fn the_sender_wakes_for_a_proposal() {
        let q = std::sync::Arc::new(IsrChangeQueue::default());
        let waiting = tokio::spawn({
            let q = std::sync::Arc::clone(&q);
            async move { q.next_batch(10).await }
        });
        tokio::task::yield_now().await;
        q.push(Change {
            epoch: 1,
            partition: 3,
            n: 7,
        });
        let batch = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("joined");
        assert_eq!(batch.len(), 1);
    }
}
