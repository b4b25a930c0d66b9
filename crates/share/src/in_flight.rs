//! One in-flight batch of a share partition's cache (Kafka's `InFlightBatch`): a contiguous
//! range of offsets on the partition leader with each record's delivery state, delivery count,
//! owner member and acquisition-lock deadline.
//!
//! Kafka keeps either one state for the whole batch or, once a batch is partly acknowledged or
//! acquired, one state per offset. Here a batch is always a list of runs, each a contiguous
//! range with one record state: a whole batch is one run, and splitting costs the number of
//! distinct runs, never the number of offsets (a batch of a million records released record by
//! record grows only as far as its acknowledgements differ).
//!
//! Invariants: the runs are sorted, contiguous and cover exactly `[first, last]`; after
//! [`InFlightBatch::coalesce`] no two adjacent runs hold equal records. Only `partition.rs`
//! changes batches; nothing here reads a clock.

use std::sync::Arc;

use crate::state::RecordState;

/// The state of one record (or of a run of records with identical state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) state: RecordState,
    pub(crate) delivery_count: i16,
    /// The member holding the acquisition lock; `None` unless ACQUIRED.
    pub(crate) member: Option<Arc<str>>,
    /// When the acquisition lock expires (ms); `None` unless ACQUIRED.
    pub(crate) lock_deadline_ms: Option<i64>,
}

impl Record {
    /// A record in `state` with no owner and no lock (AVAILABLE, ACKNOWLEDGED, ARCHIVED).
    pub(crate) fn unlocked(state: RecordState, delivery_count: i16) -> Record {
        Record {
            state,
            delivery_count,
            member: None,
            lock_deadline_ms: None,
        }
    }

    /// A record acquired by `member` with `delivery_count`, locked until `deadline_ms`.
    pub(crate) fn acquired(member: &Arc<str>, delivery_count: i16, deadline_ms: i64) -> Record {
        Record {
            state: RecordState::Acquired,
            delivery_count,
            member: Some(Arc::clone(member)),
            lock_deadline_ms: Some(deadline_ms),
        }
    }

    /// ACQUIRED with a lock that has not expired at `now_ms`.
    pub(crate) fn is_locked(&self, now_ms: i64) -> bool {
        self.state == RecordState::Acquired && self.lock_deadline_ms.is_some_and(|d| d > now_ms)
    }

    /// Owned by `member` (whatever the state).
    pub(crate) fn is_owned_by(&self, member: &str) -> bool {
        self.member.as_deref() == Some(member)
    }
}

/// A contiguous range of records with one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) rec: Record,
}

impl Run {
    pub(crate) fn len(&self) -> i64 {
        self.last - self.first + 1
    }
}

/// One cached batch: `[first, last]` split into runs of equal record state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InFlightBatch {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) runs: Vec<Run>,
}

impl InFlightBatch {
    /// A batch whose records all share `rec`. `first <= last` is the caller's invariant.
    pub(crate) fn new(first: i64, last: i64, rec: Record) -> InFlightBatch {
        debug_assert!(first <= last);
        InFlightBatch {
            first,
            last,
            runs: vec![Run { first, last, rec }],
        }
    }

    /// Records in the batch.
    pub(crate) fn len(&self) -> i64 {
        self.last - self.first + 1
    }

    /// The record of a batch whose records all share one state (Kafka: no per-offset state).
    pub(crate) fn uniform_record(&self) -> Option<&Record> {
        match self.runs.as_slice() {
            [only] => Some(&only.rec),
            _ => None,
        }
    }

    /// Every record is ACKNOWLEDGED or ARCHIVED.
    pub(crate) fn is_terminal(&self) -> bool {
        self.runs.iter().all(|r| r.rec.state.is_terminal())
    }

    /// Makes `at` the first offset of a run, if it lies inside one (not at its start).
    fn split_at(&mut self, at: i64) {
        if at <= self.first || at > self.last {
            return;
        }
        let idx = self.runs.partition_point(|r| r.last < at);
        let Some(run) = self.runs.get_mut(idx) else {
            return;
        };
        if run.first == at {
            return;
        }
        let tail = Run {
            first: at,
            last: run.last,
            rec: run.rec.clone(),
        };
        run.last = at - 1;
        self.runs.insert(idx + 1, tail);
    }

    /// The runs covering exactly `[lo, hi] ∩ [first, last]`, split at both ends so that the
    /// caller may change them. Empty when the ranges do not meet. Call [`Self::coalesce`] after.
    pub(crate) fn range_mut(&mut self, lo: i64, hi: i64) -> &mut [Run] {
        let lo = lo.max(self.first);
        let hi = hi.min(self.last);
        if lo > hi {
            return &mut [];
        }
        self.split_at(lo);
        if hi < self.last {
            self.split_at(hi + 1);
        }
        let start = self.runs.partition_point(|r| r.first < lo);
        let end = self.runs.partition_point(|r| r.last <= hi);
        &mut self.runs[start..end]
    }

    /// Merges adjacent runs with equal records.
    pub(crate) fn coalesce(&mut self) {
        let mut out: Vec<Run> = Vec::with_capacity(self.runs.len());
        for run in self.runs.drain(..) {
            match out.last_mut() {
                Some(prev) if prev.rec == run.rec => prev.last = run.last,
                _ => out.push(run),
            }
        }
        self.runs = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avail(count: i16) -> Record {
        Record::unlocked(RecordState::Available, count)
    }

    fn shape(b: &InFlightBatch) -> Vec<(i64, i64, RecordState)> {
        b.runs
            .iter()
            .map(|r| (r.first, r.last, r.rec.state))
            .collect()
    }

    #[test]
    fn range_mut_splits_at_both_ends_and_coalesce_merges_back() {
        let mut b = InFlightBatch::new(10, 19, avail(1));
        for r in b.range_mut(12, 14) {
            r.rec.state = RecordState::Acknowledged;
        }
        assert_eq!(
            shape(&b),
            vec![
                (10, 11, RecordState::Available),
                (12, 14, RecordState::Acknowledged),
                (15, 19, RecordState::Available)
            ]
        );
        assert_eq!(b.range_mut(0, 9).len(), 0);
        assert_eq!(b.range_mut(19, 30).len(), 1);
        for r in b.range_mut(12, 14) {
            r.rec.state = RecordState::Available;
        }
        b.coalesce();
        assert_eq!(shape(&b), vec![(10, 19, RecordState::Available)]);
        assert!(b.uniform_record().is_some());
    }

    #[test]
    fn runs_stay_contiguous_under_many_splits() {
        let mut b = InFlightBatch::new(0, 99, avail(1));
        for i in (0..100).step_by(3) {
            for r in b.range_mut(i, i) {
                r.rec.delivery_count = 2;
            }
        }
        let mut next = 0;
        for r in &b.runs {
            assert_eq!(r.first, next);
            next = r.last + 1;
        }
        assert_eq!(next, 100);
        assert_eq!(b.runs.iter().map(Run::len).sum::<i64>(), b.len());
    }
}
