//! Persisted share-partition state: what `__share_group_state` holds for one share-partition
//! (group, topic, partition), and Kafka's rule for folding a written update into it.
//!
//! Where it sits: the share-partition leader (`partition.rs`) loads a `PersistedState` when a
//! share partition first serves a fetch, and produces `StateChange`s that the share coordinator
//! writes as ShareUpdate records (`records.rs`); replaying those records rebuilds a
//! `PersistedState` with [`combine`].
//!
//! Invariants kept by [`combine`] (Kafka's `PersisterStateBatchCombiner`): the result is sorted,
//! non-overlapping and gap-free within each run; where batches overlap, the higher delivery count
//! wins, then the higher delivery state; adjacent ranges with equal (state, count) coalesce;
//! nothing below the start offset survives. The start offset never regresses
//! ([`PersistedState::apply_update`]).
//!
//! Not here: encoding (`records.rs`), in-flight state and locks (`partition.rs`), which are never
//! persisted.

use std::collections::BTreeMap;

/// Delivery state of a record, with Kafka's persisted ids (`RecordState`): AVAILABLE 0,
/// ACQUIRED 1, ACKNOWLEDGED 2, ARCHIVING 3 (DLQ only, loaded as ARCHIVED here), ARCHIVED 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordState {
    /// May be acquired by any member.
    Available,
    /// Locked to one member until acknowledged, released or its lock expires. Never persisted.
    Acquired,
    /// Accepted by a consumer; terminal.
    Acknowledged,
    /// Rejected, a gap, past the delivery-count limit, aborted, or below the log start; terminal.
    Archived,
}

impl RecordState {
    /// Kafka's id of the state, as persisted in `DeliveryState`.
    pub fn id(self) -> u8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }

    /// The state a persisted `DeliveryState` id stands for. ARCHIVING (3) is the DLQ's transient
    /// state; without a DLQ it loads as ARCHIVED. ACQUIRED (1) is never persisted, so it and any
    /// other id are rejected.
    pub fn from_persisted_id(id: u8) -> Option<RecordState> {
        match id {
            0 => Some(RecordState::Available),
            2 => Some(RecordState::Acknowledged),
            3 | 4 => Some(RecordState::Archived),
            _ => None,
        }
    }

    /// ACKNOWLEDGED and ARCHIVED: the share-partition start offset may move past these.
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// One persisted range of offsets with one delivery state and count (Kafka's `StateBatch` /
/// `PersisterStateBatch`). `first` and `last` are inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first: i64,
    pub last: i64,
    /// Kafka's `DeliveryState` id (see [`RecordState::id`]).
    pub state: u8,
    pub delivery_count: i16,
}

/// The state of one share-partition as the share coordinator keeps it (Kafka's
/// `ShareGroupOffset`): epochs, the share-partition start offset (SPSO; -1 while never
/// initialized), the count of terminal records at or above it, and the non-acquired batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedState {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// Terminal (acknowledged or archived) records at or above `start_offset`; -1 when unknown.
    /// DescribeShareGroupOffsets' lag is HWM − start − this.
    pub delivery_complete_count: i32,
    pub batches: Vec<StateBatch>,
}

impl PersistedState {
    /// A share partition that starts at `start_offset` with nothing delivered, as
    /// InitializeShareGroupState writes it.
    pub fn initial(state_epoch: i32, start_offset: i64) -> PersistedState {
        PersistedState {
            state_epoch,
            leader_epoch: 0,
            start_offset,
            delivery_complete_count: if start_offset < 0 { -1 } else { 0 },
            batches: Vec::new(),
        }
    }

    /// Folds one written update (a ShareUpdate record or a WriteShareGroupState) into this
    /// state: the start offset moves only forward (`start_offset` -1 means unchanged), the
    /// batches combine by Kafka's rules, the leader epoch and delivery-complete count are the
    /// update's.
    pub fn apply_update(
        &mut self,
        leader_epoch: i32,
        start_offset: i64,
        delivery_complete_count: i32,
        batches: &[StateBatch],
    ) {
        if start_offset >= 0 {
            self.start_offset = self.start_offset.max(start_offset);
        }
        self.leader_epoch = leader_epoch;
        self.delivery_complete_count = delivery_complete_count;
        self.batches = combine(&self.batches, batches, self.start_offset);
    }
}

/// Records a share partition delivered, with how often (any state): what a reload carries over
/// when the share partition's writes failed ([`PersistedState::carry_delivery_counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveredRange {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i16,
}

impl PersistedState {
    /// Carries into this state (just read back after a failed write) the delivery counts the
    /// share partition had reached in memory, `carried`, as Kafka keeps them by rolling a failed
    /// write back in memory instead of reloading: where this state is terminal (ACKNOWLEDGED,
    /// ARCHIVED) it stays; elsewhere a record's count becomes the higher of the two, and a record
    /// that reached `delivery_count_limit` is ARCHIVED, as its lock would have expired into.
    /// Returns the ranges raised, to be written. Without it a share partition whose writes keep
    /// failing (a share coordinator outage) delivers its records without bound: each reload
    /// resets their counts to what was last committed.
    pub fn carry_delivery_counts(
        &mut self,
        carried: &[DeliveredRange],
        delivery_count_limit: i16,
    ) -> Vec<StateBatch> {
        let terminal: Vec<(i64, i64)> = self
            .batches
            .iter()
            .filter(|b| {
                RecordState::from_persisted_id(b.state).is_some_and(RecordState::is_terminal)
            })
            .map(|b| (b.first, b.last))
            .collect();
        let mut raised = Vec::new();
        for c in carried.iter().filter(|c| c.delivery_count > 0) {
            let first = c.first.max(self.start_offset);
            if first > c.last {
                continue;
            }
            let state = if c.delivery_count >= delivery_count_limit {
                RecordState::Archived
            } else {
                RecordState::Available
            };
            // `c` less the terminal ranges (sorted, disjoint) that overlap it.
            let mut from = first;
            for &(t_first, t_last) in terminal.iter().filter(|t| t.1 >= first && t.0 <= c.last) {
                if t_first > from {
                    raised.push(StateBatch {
                        first: from,
                        last: t_first - 1,
                        state: state.id(),
                        delivery_count: c.delivery_count,
                    });
                }
                from = t_last.saturating_add(1);
            }
            if from <= c.last {
                raised.push(StateBatch {
                    first: from,
                    last: c.last,
                    state: state.id(),
                    delivery_count: c.delivery_count,
                });
            }
        }
        // Where this state already counts as many deliveries, combine keeps it.
        self.batches = combine(&self.batches, &raised, self.start_offset);
        raised
    }
}

/// Merges `current` and `updates` into sorted, non-overlapping batches at or above
/// `start_offset` (Kafka's `PersisterStateBatchCombiner`): where ranges overlap, the higher
/// delivery count wins, then the higher state id; adjacent ranges with equal state and count
/// coalesce. A batch with `first > last` carries no offsets and is ignored.
///
/// A sweep over the range boundaries: O(n log n) in the number of batches, never per offset,
/// so a corrupt range of 2^63 offsets costs what a one-offset range costs.
pub fn combine(
    current: &[StateBatch],
    updates: &[StateBatch],
    start_offset: i64,
) -> Vec<StateBatch> {
    // Boundaries as i128 so that `last + 1` of i64::MAX does not overflow.
    let floor = i128::from(start_offset.max(0));
    let mut events: Vec<(i128, bool, (i16, u8))> = Vec::new();
    for b in current.iter().chain(updates) {
        let first = i128::from(b.first).max(floor);
        let end = i128::from(b.last) + 1;
        if first < end {
            events.push((first, true, (b.delivery_count, b.state)));
            events.push((end, false, (b.delivery_count, b.state)));
        }
    }
    events.sort_unstable_by_key(|e| e.0);

    let mut active: BTreeMap<(i16, u8), usize> = BTreeMap::new();
    let mut out: Vec<StateBatch> = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let pos = events[i].0;
        while i < events.len() && events[i].0 == pos {
            let (_, open, key) = events[i];
            if open {
                *active.entry(key).or_insert(0) += 1;
            } else if let Some(n) = active.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    active.remove(&key);
                }
            }
            i += 1;
        }
        let (Some(&(count, state)), Some(next)) = (active.keys().next_back(), events.get(i)) else {
            continue;
        };
        // Both ends lie within i64: they are a batch's first (clamped up to start_offset) or
        // last + 1 of a batch whose range covers the segment.
        let first = i64::try_from(pos).unwrap_or(i64::MAX);
        let last = i64::try_from(next.0 - 1).unwrap_or(i64::MAX);
        match out.last_mut() {
            Some(prev)
                if prev.state == state
                    && prev.delivery_count == count
                    && i128::from(prev.last) + 1 == pos =>
            {
                prev.last = last;
            }
            _ => out.push(StateBatch {
                first,
                last,
                state,
                delivery_count: count,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(first: i64, last: i64, state: u8, delivery_count: i16) -> StateBatch {
        StateBatch {
            first,
            last,
            state,
            delivery_count,
        }
    }

    fn check(current: &[StateBatch], updates: &[StateBatch], start: i64, expected: &[StateBatch]) {
        assert_eq!(combine(current, updates, start), expected);
    }

    #[test]
    fn disjoint_batches_are_sorted() {
        check(
            &[b(10, 14, 2, 1)],
            &[b(0, 4, 0, 2)],
            0,
            &[b(0, 4, 0, 2), b(10, 14, 2, 1)],
        );
    }

    #[test]
    fn overlap_higher_delivery_count_wins() {
        // Offsets 5..=9 are Available with count 1 in the snapshot; the update says count 2.
        check(
            &[b(0, 9, 0, 1)],
            &[b(5, 9, 0, 2)],
            0,
            &[b(0, 4, 0, 1), b(5, 9, 0, 2)],
        );
        // A lower count never overwrites a higher one, whatever the order of the inputs.
        check(
            &[b(5, 9, 0, 3)],
            &[b(0, 9, 2, 1)],
            0,
            &[b(0, 4, 2, 1), b(5, 9, 0, 3)],
        );
    }

    #[test]
    fn overlap_equal_count_higher_state_wins() {
        check(
            &[b(0, 9, 0, 1)],
            &[b(3, 4, 2, 1)],
            0,
            &[b(0, 2, 0, 1), b(3, 4, 2, 1), b(5, 9, 0, 1)],
        );
        check(&[b(0, 9, 4, 1)], &[b(3, 4, 2, 1)], 0, &[b(0, 9, 4, 1)]);
    }

    #[test]
    fn adjacent_equal_runs_coalesce() {
        check(
            &[b(0, 4, 2, 1)],
            &[b(5, 9, 2, 1), b(10, 12, 2, 1)],
            0,
            &[b(0, 12, 2, 1)],
        );
        // Equal but not adjacent: kept apart.
        check(
            &[b(0, 4, 2, 1)],
            &[b(6, 9, 2, 1)],
            0,
            &[b(0, 4, 2, 1), b(6, 9, 2, 1)],
        );
    }

    #[test]
    fn prunes_below_start() {
        check(
            &[b(0, 9, 2, 1), b(10, 19, 0, 2)],
            &[],
            15,
            &[b(15, 19, 0, 2)],
        );
        check(&[b(0, 9, 2, 1)], &[], 10, &[]);
    }

    #[test]
    fn huge_and_empty_ranges() {
        check(
            &[b(0, i64::MAX, 4, 1)],
            &[b(5, 4, 2, 9)],
            0,
            &[b(0, i64::MAX, 4, 1)],
        );
        check(
            &[b(i64::MAX, i64::MAX, 0, 1)],
            &[],
            0,
            &[b(i64::MAX, i64::MAX, 0, 1)],
        );
    }

    #[test]
    fn start_offset_never_regresses() {
        let mut s = PersistedState::initial(0, 10);
        s.apply_update(1, 20, 0, &[b(20, 24, 0, 1)]);
        assert_eq!(s.start_offset, 20);
        s.apply_update(1, 5, 0, &[]);
        assert_eq!(
            s.start_offset, 20,
            "an older start offset must not move it back"
        );
        s.apply_update(2, -1, 3, &[b(25, 27, 2, 1)]);
        assert_eq!(s.start_offset, 20, "-1 leaves the start offset unchanged");
        assert_eq!(s.leader_epoch, 2);
        assert_eq!(s.delivery_complete_count, 3);
        assert_eq!(s.batches, vec![b(20, 24, 0, 1), b(25, 27, 2, 1)]);
        s.apply_update(2, 25, 3, &[]);
        assert_eq!(
            s.batches,
            vec![b(25, 27, 2, 1)],
            "batches below the new start are pruned"
        );
    }

    fn d(first: i64, last: i64, delivery_count: i16) -> DeliveredRange {
        DeliveredRange {
            first,
            last,
            delivery_count,
        }
    }

    #[test]
    fn carried_counts_raise_available_records_and_never_touch_terminal_ones() {
        // 0-9 acknowledged, 10-19 available after one delivery, 30-39 archived; 20-29 and 40-49
        // acquired and never written.
        let mut s = PersistedState {
            state_epoch: 1,
            leader_epoch: 1,
            start_offset: 0,
            delivery_complete_count: 20,
            batches: vec![b(0, 9, 2, 1), b(10, 19, 0, 1), b(30, 39, 4, 2)],
        };
        // In memory: everything 0-49 was delivered 3 times (the writes saying so failed).
        let raised = s.carry_delivery_counts(&[d(0, 49, 3)], 5);
        assert_eq!(raised, vec![b(10, 29, 0, 3), b(40, 49, 0, 3)]);
        assert_eq!(
            s.batches,
            vec![
                b(0, 9, 2, 1),
                b(10, 29, 0, 3),
                b(30, 39, 4, 2),
                b(40, 49, 0, 3)
            ]
        );
        // A lower count than persisted changes nothing.
        let mut again = s.clone();
        again.carry_delivery_counts(&[d(10, 19, 2)], 5);
        assert_eq!(again.batches, s.batches);
    }

    #[test]
    fn a_carried_count_at_the_limit_archives_and_below_the_start_is_ignored() {
        let mut s = PersistedState {
            state_epoch: 1,
            leader_epoch: 1,
            start_offset: 5,
            delivery_complete_count: 0,
            batches: vec![b(5, 9, 0, 2)],
        };
        let raised = s.carry_delivery_counts(&[d(0, 7, 5), d(8, 9, 4), d(10, 10, 0)], 5);
        assert_eq!(raised, vec![b(5, 7, 4, 5), b(8, 9, 0, 4)]);
        assert_eq!(s.batches, vec![b(5, 7, 4, 5), b(8, 9, 0, 4)]);
    }

    #[test]
    fn state_ids_are_kafkas() {
        assert_eq!(RecordState::Available.id(), 0);
        assert_eq!(RecordState::Acquired.id(), 1);
        assert_eq!(RecordState::Acknowledged.id(), 2);
        assert_eq!(RecordState::Archived.id(), 4);
        assert_eq!(
            RecordState::from_persisted_id(3),
            Some(RecordState::Archived)
        );
        assert_eq!(RecordState::from_persisted_id(1), None);
        assert_eq!(RecordState::from_persisted_id(5), None);
    }
}
