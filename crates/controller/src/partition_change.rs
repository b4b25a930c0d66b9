//! One partition's next state: given its registration and a target ISR (a broker left, a leader
//! asked to shrink or expand it, an election was requested), compute the ISR, the eligible leader
//! replicas (ELR) and the leader — Kafka's `PartitionChangeBuilder` rules after KIP-841 and KIP-966 —
//! and the one `PartitionChange` record that gets there (or none).
//!
//! Rules (the why is in docs/decisions/0025-elections-and-elr.md):
//! - Only an active broker (registered, unfenced, not in controlled shutdown) may lead (KIP-841).
//! - ELR: while the target ISR is at least `min.insync.replicas`, the ELR is empty. Below it, the
//!   high watermark cannot advance (strict min ISR), so every replica leaving the ISR at that point
//!   still holds every committed record: ELR = (ELR ∪ current ISR) − target ISR − replicas that
//!   restarted uncleanly.
//! - Election order: keep a valid current leader; else the first replica (assignment order) in the
//!   target ISR; else, when the ISR is empty, the first active ELR member (the ISR becomes just it,
//!   and if that meets `min.insync.replicas` the ELR empties: the HW advances again without them);
//!   else, with unclean election, the first active replica (ISR becomes just it, ELR cleared);
//!   else a partition with a single replica elects that replica when it is active (nothing better
//!   can ever come back); else no leader.
//! - Preferred election puts the first assigned replica in charge when it is a valid leader.
//! - Reassignment (KIP-455): while one is in progress, `replicas` is the target followed by the
//!   replicas being removed, `adding_replicas` = target − original, `removing_replicas` =
//!   original − target. Every change first checks whether it completes the reassignment (Kafka's
//!   `completeReassignmentIfNeeded`): once the target ISR, without the removing replicas, is
//!   non-empty and holds every remaining replica, `replicas` becomes the target, the removing
//!   replicas leave the ISR and both lists empty — in the same record, before the election, so a
//!   leader being removed hands over to a replica of the target's ISR.
//! - A change whose replicas no longer include every current replica raises the leader epoch even
//!   when the leader stays (Kafka: so the removed replicas' fetches are fenced).
//!
//! Pure: no I/O, no clock. Read first: [`PartitionChange`], [`PartitionChange::build`].

use millrace_cluster::image::{PartitionRegistration, NO_LEADER};
use millrace_cluster::records::MetadataRecord;
use uuid::Uuid;

/// How a new leader may be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// Keep a valid leader; otherwise elect from the ISR, then the ELR.
    Online,
    /// Prefer the first assigned replica when it is a valid leader.
    Preferred,
    /// Like `Online`, then any active replica (may lose committed data).
    Unclean,
}

/// What an election did, for logs and ElectLeaders answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionOutcome {
    /// The leader stays.
    Unchanged,
    /// A new leader from the ISR.
    Clean(i32),
    /// A new leader from the ELR.
    FromElr(i32),
    /// A new leader outside the ISR and ELR (unclean, or the sole replica).
    Unclean(i32),
    /// No replica can lead.
    None,
}

/// A planned change of one partition.
#[derive(Debug, Clone)]
pub struct PartitionChange<'a> {
    pub topic_id: Uuid,
    pub partition: i32,
    pub current: &'a PartitionRegistration,
    pub target_isr: Vec<i32>,
    pub target_replicas: Vec<i32>,
    pub target_adding: Vec<i32>,
    pub target_removing: Vec<i32>,
    /// Replicas that restarted uncleanly: they leave the ELR.
    pub unclean_shutdown: Vec<i32>,
    pub election: Election,
    pub min_isr: usize,
    /// Force a leader epoch bump even if the leader stays (besides the bump that removing
    /// replicas implies).
    pub bump_leader_epoch: bool,
}

impl<'a> PartitionChange<'a> {
    /// A change that starts from the current state.
    pub fn new(
        topic_id: Uuid,
        partition: i32,
        current: &'a PartitionRegistration,
        min_isr: usize,
    ) -> Self {
        Self {
            topic_id,
            partition,
            current,
            target_isr: current.isr.clone(),
            target_replicas: current.replicas.clone(),
            target_adding: current.adding_replicas.clone(),
            target_removing: current.removing_replicas.clone(),
            unclean_shutdown: Vec::new(),
            election: Election::Online,
            min_isr: min_isr.max(1),
            bump_leader_epoch: false,
        }
    }

    /// Starts a reassignment towards `target` (Kafka's `PartitionReassignmentReplicas`), or
    /// replaces the one in progress: the current `replicas` (which during a reassignment hold
    /// the earlier target and the replicas it removes) count as the original. `replicas` becomes
    /// the target followed by the replicas to remove; adding and removing are sorted. A target
    /// that only reorders the replicas completes in the same change.
    pub fn reassign(mut self, target: &[i32]) -> Self {
        let current = &self.current.replicas;
        let mut removing: Vec<i32> = current
            .iter()
            .copied()
            .filter(|b| !target.contains(b))
            .collect();
        removing.sort_unstable();
        removing.dedup();
        let mut adding: Vec<i32> = target
            .iter()
            .copied()
            .filter(|b| !current.contains(b))
            .collect();
        adding.sort_unstable();
        adding.dedup();
        let mut replicas = target.to_vec();
        replicas.extend(removing.iter().copied());
        self.target_replicas = replicas;
        self.target_adding = adding;
        self.target_removing = removing;
        self
    }

    /// Cancels the reassignment in progress (Kafka's `PartitionReassignmentRevert`): the replicas
    /// being added leave `replicas` and the ISR. Returns `true` when no replica of the original
    /// set is left in the ISR; the first original replica then becomes the ISR, which is an
    /// unclean election the caller must allow (Kafka refuses the cancel otherwise).
    pub fn revert(mut self) -> (Self, bool) {
        let adding = self.current.adding_replicas.clone();
        self.target_replicas.retain(|b| !adding.contains(b));
        self.target_isr.retain(|b| !adding.contains(b));
        self.target_adding.clear();
        self.target_removing.clear();
        let unclean = self.target_isr.is_empty();
        if let (true, Some(&first)) = (unclean, self.target_replicas.first()) {
            self.target_isr = vec![first];
        }
        (self, unclean)
    }

    /// Takes `broker` out of the ISR (fenced, shutting down, restarted).
    pub fn without(mut self, broker: i32) -> Self {
        self.target_isr.retain(|&b| b != broker);
        self
    }

    /// Computes the record, or `None` when nothing changes.
    pub fn build(
        mut self,
        is_active: impl Fn(i32) -> bool,
    ) -> (Option<MetadataRecord>, ElectionOutcome) {
        self.complete_reassignment_if_possible();
        let current = self.current;
        let mut isr = self.target_isr.clone();
        let (mut elr, last_known_elr) = self.target_elr();

        let valid = |b: i32, isr: &[i32], elr: &[i32]| {
            b != NO_LEADER
                && is_active(b)
                && (isr.contains(&b) || (isr.is_empty() && elr.contains(&b)))
        };
        let replicas = &self.target_replicas;
        let keep_current = valid(current.leader, &isr, &elr);
        let preferred = replicas.first().copied().unwrap_or(NO_LEADER);
        let mut outcome = ElectionOutcome::Unchanged;
        let mut leader = current.leader;
        let elected = if self.election == Election::Preferred && valid(preferred, &isr, &elr) {
            Some(preferred)
        } else if keep_current {
            None
        } else {
            replicas.iter().copied().find(|&b| valid(b, &isr, &elr))
        };
        match elected {
            Some(b) if b == current.leader => {}
            Some(b) => {
                leader = b;
                if isr.contains(&b) {
                    outcome = ElectionOutcome::Clean(b);
                } else {
                    // Only possible with an empty ISR: the leader comes from the ELR.
                    isr = vec![b];
                    elr.retain(|&r| r != b);
                    outcome = ElectionOutcome::FromElr(b);
                }
            }
            None if keep_current => {}
            None => {
                let sole = replicas.len() == 1 && is_active(preferred);
                let unclean = if self.election == Election::Unclean {
                    replicas.iter().copied().find(|&b| is_active(b))
                } else if sole && isr.is_empty() && elr.is_empty() {
                    Some(preferred)
                } else {
                    None
                };
                match unclean {
                    Some(b) => {
                        leader = b;
                        isr = vec![b];
                        elr.clear();
                        outcome = ElectionOutcome::Unclean(b);
                    }
                    None => {
                        leader = NO_LEADER;
                        outcome = if current.leader == NO_LEADER {
                            ElectionOutcome::Unchanged
                        } else {
                            ElectionOutcome::None
                        };
                    }
                }
            }
        }
        // The ELR rule holds for the ISR the election produced: an election from the ELR may
        // bring the ISR back to min ISR, and from then on the HW advances without the replicas
        // left in the ELR, which soon lack committed records (an unclean election clears it
        // anyway).
        let (elr, last_known_elr) =
            if matches!(outcome, ElectionOutcome::Unclean(_)) || isr.len() >= self.min_isr {
                (Vec::new(), Vec::new())
            } else {
                (elr, last_known_elr)
            };

        let mut change = MetadataRecord::partition_change(self.topic_id, self.partition);
        if leader != current.leader {
            change.leader = Some(leader);
        }
        if isr != current.isr {
            change.isr = Some(isr);
        }
        if elr != current.elr {
            change.elr = Some(elr);
        }
        if last_known_elr != current.last_known_elr {
            change.last_known_elr = Some(last_known_elr);
        }
        if self.target_replicas != current.replicas {
            change.replicas = Some(self.target_replicas.clone());
        }
        if self.target_adding != current.adding_replicas {
            change.adding_replicas = Some(self.target_adding.clone());
        }
        if self.target_removing != current.removing_replicas {
            change.removing_replicas = Some(self.target_removing.clone());
        }
        let replicas_removed = current
            .replicas
            .iter()
            .any(|b| !self.target_replicas.contains(b));
        change.bump_leader_epoch =
            (self.bump_leader_epoch || replicas_removed) && change.leader.is_none();
        if change.is_empty() {
            return (None, outcome);
        }
        (Some(change.build()), outcome)
    }

    /// Whether a reassignment is in progress in the target state.
    pub fn is_reassigning(&self) -> bool {
        !self.target_adding.is_empty() || !self.target_removing.is_empty()
    }

    /// Completes the reassignment in progress when the target ISR allows it (Kafka's
    /// `PartitionReassignmentReplicas.maybeCompleteReassignment`): without the removing replicas,
    /// the ISR must be non-empty and hold every remaining replica.
    fn complete_reassignment_if_possible(&mut self) {
        if !self.is_reassigning() {
            return;
        }
        let removing = &self.target_removing;
        let isr: Vec<i32> = self
            .target_isr
            .iter()
            .copied()
            .filter(|b| !removing.contains(b))
            .collect();
        let replicas: Vec<i32> = self
            .target_replicas
            .iter()
            .copied()
            .filter(|b| !removing.contains(b))
            .collect();
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|b| isr.contains(b)) {
            return;
        }
        self.target_isr = isr;
        self.target_replicas = replicas;
        self.target_adding.clear();
        self.target_removing.clear();
    }

    /// The ELR and last known ELR for the target ISR (KIP-966).
    fn target_elr(&self) -> (Vec<i32>, Vec<i32>) {
        if self.target_isr.len() >= self.min_isr {
            return (Vec::new(), Vec::new());
        }
        let mut candidates: Vec<i32> = self.current.elr.clone();
        for &b in &self.current.isr {
            if !candidates.contains(&b) {
                candidates.push(b);
            }
        }
        let elr: Vec<i32> = candidates
            .iter()
            .copied()
            .filter(|b| !self.target_isr.contains(b) && !self.unclean_shutdown.contains(b))
            .filter(|b| self.target_replicas.contains(b))
            .collect();
        let mut last_known: Vec<i32> = self.current.last_known_elr.clone();
        for b in candidates {
            if !last_known.contains(&b) {
                last_known.push(b);
            }
        }
        last_known.retain(|b| !self.target_isr.contains(b) && !elr.contains(b));
        (elr, last_known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use millrace_cluster::image::MetadataImage;
    use millrace_cluster::records::MetadataBatch;

    fn reg(replicas: &[i32], isr: &[i32], elr: &[i32], leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            elr: elr.to_vec(),
            last_known_elr: Vec::new(),
            leader,
            leader_epoch: 5,
            partition_epoch: 9,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// Applies the change to `current` through the image, as every node would.
    fn after(
        current: &PartitionRegistration,
        record: Option<MetadataRecord>,
    ) -> PartitionRegistration {
        let Some(record) = record else {
            return current.clone();
        };
        let id = Uuid::nil();
        let mut image = MetadataImage::default();
        image.apply_batch(
            1,
            &MetadataBatch::new(vec![
                MetadataRecord::Topic {
                    name: "t".into(),
                    topic_id: id,
                    configs: Default::default(),
                },
                MetadataRecord::Partition {
                    topic_id: id,
                    partition: 0,
                    registration: current.clone(),
                },
            ]),
        );
        image.apply_batch(2, &MetadataBatch::new(vec![record]));
        image.partition("t", 0).cloned().expect("partition")
    }

    fn check(
        current: PartitionRegistration,
        edit: impl FnOnce(PartitionChange) -> PartitionChange,
        active: &[i32],
        min_isr: usize,
        expected: (i32, &[i32], &[i32]),
        expected_outcome: ElectionOutcome,
    ) -> PartitionRegistration {
        let change = edit(PartitionChange::new(Uuid::nil(), 0, &current, min_isr));
        let (record, outcome) = change.build(|b| active.contains(&b));
        let next = after(&current, record);
        assert_eq!(
            (next.leader, next.isr.as_slice(), next.elr.as_slice()),
            expected,
            "from {current:?}"
        );
        assert_eq!(outcome, expected_outcome);
        next
    }

    #[test]
    fn fencing_the_leader_elects_the_next_isr_member_in_assignment_order() {
        let next = check(
            reg(&[1, 2, 3], &[1, 2, 3], &[], 1),
            |c| c.without(1),
            &[2, 3],
            2,
            (2, &[2, 3], &[]),
            ElectionOutcome::Clean(2),
        );
        assert_eq!(next.leader_epoch, 6);
        assert_eq!(next.partition_epoch, 10);
    }

    #[test]
    fn fencing_a_follower_keeps_the_leader_and_epoch() {
        let next = check(
            reg(&[1, 2, 3], &[1, 2, 3], &[], 1),
            |c| c.without(3),
            &[1, 2],
            2,
            (1, &[1, 2], &[]),
            ElectionOutcome::Unchanged,
        );
        assert_eq!((next.leader_epoch, next.partition_epoch), (5, 10));
    }

    #[test]
    fn below_min_isr_the_removed_replicas_become_eligible() {
        // ISR [1,2] with min ISR 2; 2 leaves: the HW is frozen, 2 holds every committed record.
        let next = check(
            reg(&[1, 2, 3], &[1, 2], &[], 1),
            |c| c.without(2),
            &[1, 3],
            2,
            (1, &[1], &[2]),
            ElectionOutcome::Unchanged,
        );
        // The leader dies too: the ISR empties, both are eligible, neither is active.
        let next = check(
            next,
            |c| c.without(1),
            &[3],
            2,
            (-1, &[], &[2, 1]),
            ElectionOutcome::None,
        );
        // 3 never was in sync: it must not lead. 2 comes back and leads from the ELR.
        let next = check(
            next.clone(),
            |c| c,
            &[3],
            2,
            (-1, &[], &[2, 1]),
            ElectionOutcome::Unchanged,
        );
        check(
            next,
            |c| c,
            &[2, 3],
            2,
            (2, &[2], &[1]),
            ElectionOutcome::FromElr(2),
        );
    }

    #[test]
    fn unclean_restart_leaves_the_elr() {
        let current = reg(&[1, 2, 3], &[], &[2, 1], -1);
        let next = check(
            current,
            |mut c| {
                c.unclean_shutdown = vec![2];
                c
            },
            &[2, 3],
            2,
            (-1, &[], &[1]),
            ElectionOutcome::Unchanged,
        );
        assert!(next.last_known_elr.contains(&2));
    }

    #[test]
    fn reaching_min_isr_clears_the_elr() {
        let mut current = reg(&[1, 2, 3], &[1], &[2], 1);
        current.isr = vec![1];
        check(
            current,
            |mut c| {
                c.target_isr = vec![1, 3];
                c
            },
            &[1, 2, 3],
            2,
            (1, &[1, 3], &[]),
            ElectionOutcome::Unchanged,
        );
    }

    #[test]
    fn unclean_election_takes_any_active_replica_and_resets_the_isr() {
        let current = reg(&[1, 2, 3], &[], &[], -1);
        check(
            current,
            |mut c| {
                c.election = Election::Unclean;
                c
            },
            &[3],
            2,
            (3, &[3], &[]),
            ElectionOutcome::Unclean(3),
        );
    }

    #[test]
    fn a_sole_replica_leads_again_even_after_an_unclean_restart() {
        let current = reg(&[1], &[], &[], -1);
        check(
            current,
            |c| c,
            &[1],
            1,
            (1, &[1], &[]),
            ElectionOutcome::Unclean(1),
        );
    }

    #[test]
    fn a_sole_replica_that_is_fenced_leaves_an_empty_isr_and_is_eligible() {
        let current = reg(&[1], &[1], &[], 1);
        check(
            current,
            |c| c.without(1),
            &[],
            1,
            (-1, &[], &[1]),
            ElectionOutcome::None,
        );
    }

    #[test]
    fn preferred_election_moves_leadership_back() {
        let current = reg(&[1, 2, 3], &[1, 2, 3], &[], 2);
        check(
            current,
            |mut c| {
                c.election = Election::Preferred;
                c
            },
            &[1, 2, 3],
            2,
            (1, &[1, 2, 3], &[]),
            ElectionOutcome::Clean(1),
        );
    }

    #[test]
    fn nothing_to_change_gives_no_record() {
        let current = reg(&[1, 2, 3], &[1, 2, 3], &[], 1);
        let (record, outcome) = PartitionChange::new(Uuid::nil(), 0, &current, 2).build(|_| true);
        assert!(record.is_none());
        assert_eq!(outcome, ElectionOutcome::Unchanged);
    }

    #[test]
    fn a_reassignment_adds_replicas_then_completes_once_they_are_in_sync() {
        // [1,2,3] -> [2,3,4]: 4 is added (hosted, fetching) while 1 still leads.
        let current = reg(&[1, 2, 3], &[1, 2, 3], &[], 1);
        let next = check(
            current,
            |c| c.reassign(&[2, 3, 4]),
            &[1, 2, 3, 4],
            2,
            (1, &[1, 2, 3], &[]),
            ElectionOutcome::Unchanged,
        );
        assert_eq!(next.replicas, vec![2, 3, 4, 1]);
        assert_eq!(next.adding_replicas, vec![4]);
        assert_eq!(next.removing_replicas, vec![1]);
        assert_eq!(
            next.leader_epoch, 5,
            "adding replicas keeps the leader epoch"
        );
        // The leader adds 4 to the ISR: the reassignment completes in the same change, and the
        // leader being removed hands over to the first in-sync replica of the target.
        let done = check(
            next,
            |mut c| {
                c.target_isr = vec![1, 2, 3, 4];
                c
            },
            &[1, 2, 3, 4],
            2,
            (2, &[2, 3, 4], &[]),
            ElectionOutcome::Clean(2),
        );
        assert_eq!(done.replicas, vec![2, 3, 4]);
        assert!(done.adding_replicas.is_empty() && done.removing_replicas.is_empty());
        assert_eq!(done.leader_epoch, 6);
    }

    #[test]
    fn a_reassignment_waits_while_a_target_replica_is_out_of_sync() {
        let current = reg(&[1, 2, 3], &[1, 2, 3], &[], 1);
        let next = check(
            current,
            |c| c.reassign(&[1, 2, 4]),
            &[1, 2, 3, 4],
            1,
            (1, &[1, 2, 3], &[]),
            ElectionOutcome::Unchanged,
        );
        // 3 (being removed) drops out; 4 has not caught up: nothing completes.
        let next = check(
            next,
            |c| c.without(3),
            &[1, 2, 4],
            1,
            (1, &[1, 2], &[]),
            ElectionOutcome::Unchanged,
        );
        assert_eq!(next.replicas, vec![1, 2, 4, 3]);
        assert_eq!(
            (
                next.adding_replicas.as_slice(),
                next.removing_replicas.as_slice()
            ),
            (&[4][..], &[3][..])
        );
    }

    #[test]
    fn a_shrinking_reassignment_completes_at_once_and_raises_the_leader_epoch() {
        let current = reg(&[1, 2, 3], &[1, 2, 3], &[], 1);
        let next = check(
            current,
            |c| c.reassign(&[1, 2]),
            &[1, 2, 3],
            1,
            (1, &[1, 2], &[]),
            ElectionOutcome::Unchanged,
        );
        assert_eq!(next.replicas, vec![1, 2]);
        assert!(next.removing_replicas.is_empty());
        assert_eq!(
            next.leader_epoch, 6,
            "a removed replica's fetches must be fenced"
        );
    }

    #[test]
    fn cancelling_a_reassignment_drops_the_added_replicas() {
        let mut current = reg(&[2, 3, 4, 1], &[1, 2, 3], &[], 1);
        current.adding_replicas = vec![4];
        current.removing_replicas = vec![1];
        let (change, unclean) = PartitionChange::new(Uuid::nil(), 0, &current, 2).revert();
        assert!(!unclean);
        let (record, _) = change.build(|_| true);
        let next = after(&current, record);
        // Kafka's revert keeps the order of the reassignment's replica list.
        assert_eq!(next.replicas, vec![2, 3, 1]);
        assert_eq!((next.leader, next.isr.as_slice()), (1, &[1, 2, 3][..]));
        assert!(next.adding_replicas.is_empty() && next.removing_replicas.is_empty());
        assert_eq!(next.leader_epoch, 6);
    }

    #[test]
    fn cancelling_when_only_added_replicas_are_in_sync_is_unclean() {
        let mut current = reg(&[4, 1], &[4], &[], 4);
        current.adding_replicas = vec![4];
        current.removing_replicas = vec![1];
        let (change, unclean) = PartitionChange::new(Uuid::nil(), 0, &current, 1).revert();
        assert!(unclean);
        assert_eq!(change.target_isr, vec![1]);
        assert_eq!(change.target_replicas, vec![1]);
    }

    #[test]
    fn a_fenced_broker_never_leads() {
        // Leader 1 is in the ISR but fenced: a change that keeps the ISR still re-elects.
        let current = reg(&[1, 2], &[1, 2], &[], 1);
        check(
            current,
            |c| c,
            &[2],
            1,
            (2, &[1, 2], &[]),
            ElectionOutcome::Clean(2),
        );
    }
}
