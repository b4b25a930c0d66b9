//! `SimLog`: one partition's log on one simulated broker, implementing replication's
//! [`ReplicaLog`] the way the store's `PartitionLog` does (`crates/store/src/log/`, through
//! replication's `store_log.rs`), with the store's power-loss
//! model.
//!
//! What it keeps: the log start offset, records (leader epoch and a unique value each, one
//! record per batch), the leader-epoch cache, the durable end (what the last group-commit fsync
//! covered), the high watermark and the last high-watermark checkpoint.
//!
//! Crash model (docs/log-format.md §6–7):
//! - `kill -9` ([`SimLog::kill`]): the page cache survives; nothing written is lost, but what was
//!   not fsynced is still not durable after the restart.
//! - power loss ([`SimLog::power_loss`]): everything past the durable end is lost, except a
//!   prefix of it that happened to reach the disk (a torn tail; recovery keeps the whole records
//!   before the first torn one). The epoch cache is what recovery rebuilds: entries that start at
//!   or past the surviving log end are gone (`truncate_from_end(log_end)`), the rest match the
//!   surviving records. `begin_leader_epoch` is durable when it returns (a checkpoint write).
//! - the high watermark restarts from its last checkpoint, clamped to the surviving log.
//!
//! Truncation follows the `ReplicaLog` contract: `truncate_to(offset)` also drops epoch entries
//! that start at or past the log end when no record goes (the store's `truncate_to` returns early
//! there; see docs/reliability.md, "Simulation"), and the truncation itself is durable.
//!
//! Interior mutability: the trait's writers take `&self` (the store locks inside); one
//! `RefCell`, never borrowed across a call out.

use std::cell::RefCell;

use millrace_replication::driver::fetch::FollowerLog;
use millrace_replication::ReplicaLog;

/// One record: the leader epoch it was written in and its value (unique per run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub leader_epoch: i32,
    pub value: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    start: i64,
    records: Vec<Record>,
    /// (leader epoch, start offset), strictly increasing in both (the store's LeaderEpochCache).
    epochs: Vec<(i32, i64)>,
    durable: i64,
    hw: i64,
    hw_checkpoint: i64,
    /// Lowest offset whose record was removed or replaced since the checker last looked.
    rewritten_from: Option<i64>,
}

impl State {
    fn leo(&self) -> i64 {
        self.start + self.records.len() as i64
    }

    /// The store's `LeaderEpochCache::assign`.
    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 || self.epochs.last().is_some_and(|(e, _)| epoch <= *e) {
            return;
        }
        while self.epochs.last().is_some_and(|(_, s)| *s >= start_offset) {
            self.epochs.pop();
        }
        self.epochs.push((epoch, start_offset));
    }

    fn truncate_epochs_from_end(&mut self, offset: i64) {
        self.epochs.retain(|(_, s)| *s < offset);
    }

    fn mark_rewritten(&mut self, offset: i64) {
        self.rewritten_from = Some(self.rewritten_from.map_or(offset, |o| o.min(offset)));
    }

    fn cut_to(&mut self, leo: i64) {
        let keep = usize::try_from(leo.saturating_sub(self.start)).unwrap_or(0);
        if keep < self.records.len() {
            self.records.truncate(keep);
            self.mark_rewritten(leo);
        }
        self.truncate_epochs_from_end(leo);
        self.durable = self.durable.min(leo);
        self.hw = self.hw.min(leo);
    }
}

/// A simulated partition log.
#[derive(Debug, Default)]
pub struct SimLog {
    inner: RefCell<State>,
}

impl SimLog {
    /// Appends records as the leader, stamped with `leader_epoch`; returns (base offset, end offset).
    pub fn append_as_leader(&self, leader_epoch: i32, values: &[u64]) -> (i64, i64) {
        let mut s = self.inner.borrow_mut();
        let base = s.leo();
        s.assign_epoch(leader_epoch, base);
        s.records.extend(values.iter().map(|&value| Record {
            leader_epoch,
            value,
        }));
        (base, s.leo())
    }

    /// Appends the leader's records at their offsets (a follower append keeps offsets and epochs
    /// and rebuilds the epoch cache from them). Refused unless `at` is our log end.
    pub fn append_replicated(&self, at: i64, records: &[Record]) -> bool {
        let mut s = self.inner.borrow_mut();
        if at != s.leo() {
            return false;
        }
        for r in records {
            let offset = s.leo();
            s.assign_epoch(r.leader_epoch, offset);
            s.records.push(*r);
        }
        true
    }

    /// Up to `max` records from `from` (nothing outside the log).
    pub fn read(&self, from: i64, max: usize) -> Vec<Record> {
        let s = self.inner.borrow();
        let Some(i) = from
            .checked_sub(s.start)
            .and_then(|d| usize::try_from(d).ok())
        else {
            return Vec::new();
        };
        s.records.iter().skip(i).take(max).copied().collect()
    }

    /// The record at `offset`, if the log holds it.
    pub fn record(&self, offset: i64) -> Option<Record> {
        let s = self.inner.borrow();
        let i = usize::try_from(offset.checked_sub(s.start)?).ok()?;
        s.records.get(i).copied()
    }

    /// Retention or DeleteRecords (the store's `delete_records_before`): moves the log start to
    /// `offset`, never past the high watermark, dropping the records below; the epoch cache is
    /// left as it is (as the store does); checkpointed before it returns. Returns the new start.
    pub fn delete_records_before(&self, offset: i64) -> i64 {
        let mut s = self.inner.borrow_mut();
        let target = offset.min(s.hw);
        if target > s.start {
            let n = usize::try_from(target - s.start)
                .unwrap_or(0)
                .min(s.records.len());
            s.records.drain(..n);
            s.start = target;
        }
        s.start
    }

    /// The group-commit fsync: everything written is durable.
    pub fn sync(&self) -> bool {
        let mut s = self.inner.borrow_mut();
        let leo = s.leo();
        let moved = s.durable < leo;
        s.durable = leo;
        moved
    }

    pub fn has_unsynced(&self) -> bool {
        let s = self.inner.borrow();
        s.durable < s.leo()
    }

    /// The store's maintenance writes the high-watermark checkpoint.
    pub fn checkpoint_high_watermark(&self) {
        let mut s = self.inner.borrow_mut();
        s.hw_checkpoint = s.hw;
    }

    /// `kill -9`: the page cache keeps every write; the high watermark restarts from its
    /// checkpoint.
    pub fn kill(&self) {
        let mut s = self.inner.borrow_mut();
        let (start, leo) = (s.start, s.leo());
        s.hw = s.hw_checkpoint.clamp(start, leo);
    }

    /// Power loss: keeps the durable prefix plus `torn` of the unsynced records that reached the
    /// disk; returns how many records were lost.
    pub fn power_loss(&self, torn: i64) -> i64 {
        let mut s = self.inner.borrow_mut();
        let leo = s.leo();
        let survivor = s.durable.saturating_add(torn.max(0)).min(leo);
        s.cut_to(survivor);
        let start = s.start;
        s.hw = s.hw_checkpoint.clamp(start, survivor);
        // What survived is on disk now.
        s.durable = survivor;
        leo - survivor
    }

    /// For the checker: the lowest offset rewritten since the last call.
    pub fn take_rewritten_from(&self) -> Option<i64> {
        self.inner.borrow_mut().rewritten_from.take()
    }

    /// The whole log: (start offset, records), for the final comparison.
    pub fn snapshot(&self) -> (i64, Vec<Record>) {
        let s = self.inner.borrow();
        (s.start, s.records.clone())
    }

    /// The epoch cache, for traces.
    pub fn epochs(&self) -> Vec<(i32, i64)> {
        self.inner.borrow().epochs.clone()
    }
}

impl ReplicaLog for SimLog {
    fn log_start_offset(&self) -> i64 {
        self.inner.borrow().start
    }

    fn log_end_offset(&self) -> i64 {
        self.inner.borrow().leo()
    }

    fn durable_end_offset(&self) -> i64 {
        self.inner.borrow().durable
    }

    fn high_watermark(&self) -> i64 {
        self.inner.borrow().hw
    }

    fn end_offset_for_leader_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let s = self.inner.borrow();
        let idx = s.epochs.partition_point(|(e, _)| *e <= epoch);
        let (found, _) = *s.epochs.get(idx.checked_sub(1)?)?;
        let end = s.epochs.get(idx).map_or(s.leo(), |(_, start)| *start);
        Some((found, end))
    }

    fn latest_leader_epoch(&self) -> Option<i32> {
        self.inner.borrow().epochs.last().map(|(e, _)| *e)
    }

    fn begin_leader_epoch(&self, epoch: i32) -> Result<(), String> {
        let mut s = self.inner.borrow_mut();
        let leo = s.leo();
        s.assign_epoch(epoch, leo);
        Ok(())
    }

    fn truncate_to(&self, offset: i64) -> Result<(), String> {
        let mut s = self.inner.borrow_mut();
        let at = offset.clamp(s.start, s.leo());
        s.cut_to(at);
        Ok(())
    }

    fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), String> {
        let mut s = self.inner.borrow_mut();
        let from = s.start;
        if !s.records.is_empty() {
            s.mark_rewritten(from);
        }
        s.records.clear();
        s.epochs.clear();
        s.start = offset;
        s.durable = offset;
        s.hw = offset;
        s.hw_checkpoint = offset;
        Ok(())
    }

    fn set_high_watermark(&self, offset: i64) {
        let mut s = self.inner.borrow_mut();
        let (start, leo) = (s.start, s.leo());
        s.hw = s.hw.max(offset.clamp(start, leo));
    }
}

impl FollowerLog for SimLog {
    type Records = Vec<Record>;

    fn append_replicated(&self, fetch_offset: i64, records: Vec<Record>) -> Result<bool, String> {
        Ok(SimLog::append_replicated(self, fetch_offset, &records))
    }

    fn follow_log_start(&self, offset: i64) -> Result<(), String> {
        self.delete_records_before(offset);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_loss_keeps_the_durable_prefix_and_a_torn_part_of_the_tail() {
        let log = SimLog::default();
        log.begin_leader_epoch(0).unwrap();
        log.append_as_leader(0, &[1, 2, 3]);
        log.sync();
        log.set_high_watermark(2);
        log.checkpoint_high_watermark();
        log.set_high_watermark(3);
        log.append_as_leader(0, &[4, 5]);
        log.begin_leader_epoch(3).unwrap();
        assert_eq!(log.power_loss(1), 1);
        assert_eq!(log.log_end_offset(), 4);
        assert_eq!(log.durable_end_offset(), 4);
        assert_eq!(log.high_watermark(), 2, "restarts from the checkpoint");
        assert_eq!(
            log.latest_leader_epoch(),
            Some(0),
            "epoch 3 began at 5: gone"
        );
        assert_eq!(log.take_rewritten_from(), Some(4));
        assert_eq!(log.take_rewritten_from(), None);
    }

    #[test]
    fn delete_records_stops_at_the_high_watermark() {
        let log = SimLog::default();
        log.append_as_leader(0, &[1, 2, 3, 4]);
        log.set_high_watermark(2);
        assert_eq!(log.delete_records_before(3), 2);
        assert_eq!(log.log_start_offset(), 2);
        assert_eq!(log.read(0, 10), vec![]);
        assert_eq!(log.read(2, 10).len(), 2);
        assert_eq!(log.record(3).map(|r| r.value), Some(4));
        assert_eq!(
            log.end_offset_for_leader_epoch(0),
            Some((0, 4)),
            "epochs stay"
        );
    }

    #[test]
    fn kill_keeps_every_write_but_not_its_durability() {
        let log = SimLog::default();
        log.append_as_leader(0, &[1, 2]);
        log.kill();
        assert_eq!(log.log_end_offset(), 2);
        assert_eq!(log.durable_end_offset(), 0);
    }

    #[test]
    fn replicated_appends_keep_epochs_and_truncation_follows_the_store() {
        let log = SimLog::default();
        let recs = [
            Record {
                leader_epoch: 0,
                value: 1,
            },
            Record {
                leader_epoch: 2,
                value: 2,
            },
        ];
        assert!(!log.append_replicated(1, &recs), "not at the log end");
        assert!(log.append_replicated(0, &recs));
        assert_eq!(log.end_offset_for_leader_epoch(1), Some((0, 1)));
        assert_eq!(log.end_offset_for_leader_epoch(2), Some((2, 2)));
        assert_eq!(log.end_offset_for_leader_epoch(-1), None);
        log.truncate_to(5).unwrap();
        assert_eq!(log.log_end_offset(), 2);
        log.begin_leader_epoch(4).unwrap();
        log.truncate_to(2).unwrap();
        assert_eq!(
            log.latest_leader_epoch(),
            Some(2),
            "an epoch begun at the log end goes even when no record does"
        );
        log.truncate_to(1).unwrap();
        assert_eq!(log.log_end_offset(), 1);
        assert_eq!(log.latest_leader_epoch(), Some(0));
        assert_eq!(log.read(0, 10), vec![recs[0]]);
    }
}
