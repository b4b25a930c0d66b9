//! A leader and a follower exchanging fetches over in-memory logs: the follower copies the
//! leader's records with their epochs, truncates a diverging tail, and both HWs follow.

use std::cell::RefCell;

use super::*;

/// An in-memory log: the leader epoch of each record, an epoch cache, a durable prefix.
#[derive(Debug, Default)]
struct MemLog {
    inner: RefCell<MemInner>,
}

#[derive(Debug, Default)]
struct MemInner {
    start: i64,
    records: Vec<i32>,
    epochs: Vec<(i32, i64)>,
    durable: i64,
    hw: i64,
}

impl MemInner {
    fn leo(&self) -> i64 {
        self.start + self.records.len() as i64
    }
}

impl MemLog {
    fn append(&self, epoch: i32, count: usize) {
        let mut i = self.inner.borrow_mut();
        if i.epochs.last().is_none_or(|(e, _)| *e < epoch) {
            let leo = i.leo();
            i.epochs.push((epoch, leo));
        }
        i.records.extend(std::iter::repeat_n(epoch, count));
        i.durable = i.leo();
    }

    /// Copies the leader's records from `from` (a follower append keeps the leader's epochs).
    fn copy_from(&self, leader: &MemLog, from: i64) {
        let l = leader.inner.borrow();
        let idx = usize::try_from(from - l.start).unwrap_or(0);
        let epochs: Vec<i32> = l.records.get(idx..).unwrap_or(&[]).to_vec();
        drop(l);
        for e in epochs {
            self.append(e, 1);
        }
    }

    fn epochs_of(&self) -> Vec<i32> {
        self.inner.borrow().records.clone()
    }
}

impl ReplicaLog for MemLog {
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
        let i = self.inner.borrow();
        let idx = i.epochs.iter().rposition(|(e, _)| *e <= epoch)?;
        let end = i.epochs.get(idx + 1).map_or(i.leo(), |(_, s)| *s);
        Some((i.epochs[idx].0, end))
    }
    fn latest_leader_epoch(&self) -> Option<i32> {
        self.inner.borrow().epochs.last().map(|(e, _)| *e)
    }
    fn begin_leader_epoch(&self, epoch: i32) -> Result<(), String> {
        let mut i = self.inner.borrow_mut();
        let leo = i.leo();
        i.epochs.push((epoch, leo));
        Ok(())
    }
    fn truncate_to(&self, offset: i64) -> Result<(), String> {
        let mut i = self.inner.borrow_mut();
        let keep = usize::try_from(offset - i.start).unwrap_or(0);
        i.records.truncate(keep);
        let leo = i.leo();
        // Epochs that start past the new end are gone.
        i.epochs.retain(|(_, s)| *s < leo);
        i.durable = i.durable.min(leo);
        i.hw = i.hw.min(leo);
        Ok(())
    }
    fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), String> {
        let mut i = self.inner.borrow_mut();
        i.records.clear();
        i.epochs.clear();
        i.start = offset;
        i.durable = offset;
        i.hw = offset;
        Ok(())
    }
    fn set_high_watermark(&self, offset: i64) {
        let mut i = self.inner.borrow_mut();
        i.hw = i.hw.max(offset);
    }
}

const CONFIG: ReplicaConfig = ReplicaConfig {
    replica_lag_time_max_ms: 10_000,
    min_insync_replicas: 2,
};

fn state(leader: i32, leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch,
        partition_epoch,
        isr: isr.to_vec(),
        replicas: vec![1, 2],
    }
}

/// One fetch round from `follower` to `leader`.
fn fetch_round(leader: &mut Partition<MemLog>, follower: &mut Partition<MemLog>, now: i64) {
    let pos = follower.fetch_position().expect("a follower");
    let follower_id = follower.replica().local_id();
    let (decision, _) = leader
        .on_follower_fetch(
            follower_id,
            7,
            pos.leader_epoch,
            pos.fetch_offset,
            pos.last_fetched_epoch,
            true,
            now,
        )
        .expect("fetch served");
    match decision {
        FollowerFetchDecision::Serve { high_watermark } => {
            follower.log.copy_from(&leader.log, pos.fetch_offset);
            follower.on_leader_high_watermark(high_watermark);
        }
        FollowerFetchDecision::Diverging { epoch, end_offset } => {
            follower
                .on_diverging_epoch(epoch, end_offset)
                .expect("truncate");
        }
    }
}

#[test]
fn a_follower_copies_the_leaders_log_and_the_hw_follows() {
    let mut leader = Partition::new(1, MemLog::default(), CONFIG);
    let mut follower = Partition::new(2, MemLog::default(), CONFIG);
    leader
        .on_metadata(state(1, 0, 0, &[1, 2]), CONFIG, 0)
        .expect("leader");
    follower
        .on_metadata(state(1, 0, 0, &[1, 2]), CONFIG, 0)
        .expect("follower");
    assert_eq!(leader.check_append(true), Ok(0));
    leader.log.append(0, 5);
    leader.on_local_durable();
    assert_eq!(
        leader.log.high_watermark(),
        0,
        "the follower has not fetched"
    );
    fetch_round(&mut leader, &mut follower, 1);
    assert_eq!(follower.log.log_end_offset(), 5);
    assert_eq!(
        leader.log.high_watermark(),
        0,
        "the HW moves when the follower fetches from 5"
    );
    fetch_round(&mut leader, &mut follower, 2);
    assert_eq!(leader.log.high_watermark(), 5);
    assert_eq!(
        follower.log.high_watermark(),
        5,
        "the answer carries the HW the fetch moved"
    );
}

#[test]
fn a_deposed_leaders_uncommitted_tail_is_truncated_and_replaced() {
    let mut a = Partition::new(1, MemLog::default(), CONFIG);
    let mut b = Partition::new(2, MemLog::default(), CONFIG);
    a.on_metadata(state(1, 0, 0, &[1, 2]), CONFIG, 0)
        .expect("a leads");
    b.on_metadata(state(1, 0, 0, &[1, 2]), CONFIG, 0)
        .expect("b follows");
    a.log.append(0, 3);
    a.on_local_durable();
    fetch_round(&mut a, &mut b, 1);
    fetch_round(&mut a, &mut b, 2);
    assert_eq!(a.log.high_watermark(), 3);
    // a appends 4 more records that b never gets, then loses leadership to b (epoch 1).
    a.log.append(0, 4);
    b.on_metadata(state(2, 1, 1, &[2]), CONFIG, 3)
        .expect("b leads");
    a.on_metadata(state(2, 1, 1, &[2]), CONFIG, 3)
        .expect("a follows");
    assert_eq!(
        a.check_append(false),
        Err(PartitionError::NotLeader {
            leader: 2,
            leader_epoch: 1
        })
    );
    b.log.append(1, 2);
    b.on_local_durable();
    let pos = a.fetch_position().expect("follower");
    assert_eq!((pos.fetch_offset, pos.last_fetched_epoch), (7, 0));
    let (decision, _) = b
        .on_follower_fetch(
            1,
            7,
            pos.leader_epoch,
            pos.fetch_offset,
            pos.last_fetched_epoch,
            true,
            4,
        )
        .expect("served");
    assert_eq!(
        decision,
        FollowerFetchDecision::Diverging {
            epoch: 0,
            end_offset: 3
        }
    );
    a.on_diverging_epoch(0, 3).expect("truncate");
    assert_eq!(a.log.log_end_offset(), 3);
    // Next fetch agrees and copies the new leader's epoch-1 records.
    fetch_round(&mut b, &mut a, 5);
    assert_eq!(a.log.epochs_of(), b.log.epochs_of());
    assert_eq!(a.log.epochs_of(), vec![0, 0, 0, 1, 1]);
}

#[test]
fn stale_and_future_leader_epochs_are_refused() {
    let mut leader = Partition::new(1, MemLog::default(), CONFIG);
    leader
        .on_metadata(state(1, 4, 0, &[1, 2]), CONFIG, 0)
        .expect("leader");
    assert_eq!(
        leader.check_leader_epoch(3),
        Err(PartitionError::FencedLeaderEpoch)
    );
    assert_eq!(
        leader.check_leader_epoch(5),
        Err(PartitionError::UnknownLeaderEpoch)
    );
    assert_eq!(leader.check_leader_epoch(4), Ok(()));
    assert_eq!(leader.check_leader_epoch(-1), Ok(()));
    assert_eq!(
        leader.log.latest_leader_epoch(),
        Some(4),
        "the epoch starts in the log at election"
    );
}

#[test]
fn acks_all_is_refused_below_min_isr() {
    let mut leader = Partition::new(1, MemLog::default(), CONFIG);
    leader
        .on_metadata(state(1, 0, 0, &[1]), CONFIG, 0)
        .expect("leader");
    assert_eq!(
        leader.check_append(true),
        Err(PartitionError::NotEnoughReplicas)
    );
    assert_eq!(leader.check_append(false), Ok(0));
}
