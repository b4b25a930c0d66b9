//! The leader-epoch cache of one partition: (leader epoch, start offset) pairs, strictly
//! increasing in both, recorded whenever an append carries a new leader epoch. Used by
//! replication (OffsetForLeaderEpoch, follower truncation). Persisted as `leader-epoch-checkpoint`
//! (see `checkpoint.rs`) and rebuilt from batch headers (partitionLeaderEpoch) by recovery.
//! Pure data under the partition mutex.

/// Leader epoch → start offset entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    pub(crate) fn from_entries(mut entries: Vec<(i32, i64)>) -> LeaderEpochCache {
        let mut clean: Vec<(i32, i64)> = Vec::with_capacity(entries.len());
        for (e, s) in entries.drain(..) {
            if e >= 0 && clean.last().is_none_or(|(le, ls)| e > *le && s >= *ls) {
                clean.push((e, s));
            }
        }
        LeaderEpochCache { entries: clean }
    }

    pub(crate) fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// Records that `epoch` starts at `start_offset`; true if the cache changed.
    pub(crate) fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        match self.entries.last() {
            Some((le, _)) if epoch <= *le => false,
            _ => {
                // A later epoch starting at or before an earlier one's start replaces it.
                while self.entries.last().is_some_and(|(_, s)| *s >= start_offset) {
                    self.entries.pop();
                }
                self.entries.push((epoch, start_offset));
                true
            }
        }
    }

    /// Removes entries starting at or after `offset` (log truncated to `offset`).
    pub(crate) fn truncate_from_end(&mut self, offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(_, s)| *s < offset);
        before != self.entries.len()
    }

    /// Removes entries starting after `offset` (recovery: an entry starting exactly at the log
    /// end is an epoch begun there with no record yet, and stays).
    pub(crate) fn truncate_past(&mut self, offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(_, s)| *s <= offset);
        before != self.entries.len()
    }

    /// The latest epoch and its start offset.
    pub(crate) fn latest(&self) -> Option<(i32, i64)> {
        self.entries.last().copied()
    }

    /// For OffsetForLeaderEpoch: the largest epoch <= `epoch` and the offset where it ended (the
    /// next epoch's start, or `log_end_offset` for the latest).
    pub(crate) fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let idx = self.entries.partition_point(|(e, _)| *e <= epoch);
        let (found, _) = *self.entries.get(idx.checked_sub(1)?)?;
        let end = self.entries.get(idx).map_or(log_end_offset, |(_, s)| *s);
        Some((found, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_truncate_lookup() {
        let mut c = LeaderEpochCache::default();
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 10));
        assert!(c.assign(2, 10));
        assert!(!c.assign(1, 20));
        assert!(c.assign(5, 30));
        assert_eq!(c.end_offset_for(3, 99), Some((2, 30)));
        assert_eq!(c.end_offset_for(5, 99), Some((5, 99)));
        assert_eq!(c.end_offset_for(-1, 99), None);
        assert!(c.truncate_from_end(10));
        assert_eq!(c.entries(), &[(0, 0)]);
        assert_eq!(
            LeaderEpochCache::from_entries(vec![(1, 5), (0, 9), (3, 2)]).entries(),
            &[(1, 5)]
        );
    }
}
