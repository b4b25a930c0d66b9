//! The fetch scheduling rules and one partition's answer, over an in-memory follower log.

use std::cell::RefCell;

use super::*;
use crate::replica::{PartitionState, ReplicaConfig};

/// A follower log: records are their leader epochs; `durable` is the synced prefix.
#[derive(Debug, Default)]
struct MemLog {
    inner: RefCell<(i64, Vec<i32>, i64, i64)>, // (start, records, durable end, hw)
}

impl MemLog {
    fn leo(&self) -> i64 {
        let i = self.inner.borrow();
        i.0 + i.1.len() as i64
    }
    fn sync(&self) {
        let leo = self.leo();
        self.inner.borrow_mut().2 = leo;
    }
}

impl ReplicaLog for MemLog {
    fn log_start_offset(&self) -> i64 {
        self.inner.borrow().0
    }
    fn log_end_offset(&self) -> i64 {
        self.leo()
    }
    fn durable_end_offset(&self) -> i64 {
        self.inner.borrow().2
    }
    fn high_watermark(&self) -> i64 {
        self.inner.borrow().3
    }
    fn end_offset_for_leader_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let i = self.inner.borrow();
        let last = i.1.iter().rposition(|e| *e <= epoch)?;
        Some((i.1[last], i.0 + last as i64 + 1))
    }
    fn latest_leader_epoch(&self) -> Option<i32> {
        self.inner.borrow().1.last().copied()
    }
    fn begin_leader_epoch(&self, _epoch: i32) -> Result<(), String> {
        Ok(())
    }
    fn truncate_to(&self, offset: i64) -> Result<(), String> {
        let mut i = self.inner.borrow_mut();
        let keep = usize::try_from(offset - i.0).unwrap_or(0);
        i.1.truncate(keep);
        let leo = i.0 + i.1.len() as i64;
        i.2 = i.2.min(leo);
        i.3 = i.3.min(leo);
        Ok(())
    }
    fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), String> {
        *self.inner.borrow_mut() = (offset, Vec::new(), offset, offset);
        Ok(())
    }
    fn set_high_watermark(&self, offset: i64) {
        let mut i = self.inner.borrow_mut();
        i.3 = i.3.max(offset);
    }
}

impl FollowerLog for MemLog {
    type Records = Vec<i32>;
    fn append_replicated(&self, fetch_offset: i64, records: Vec<i32>) -> Result<bool, String> {
        if fetch_offset != self.leo() {
            return Ok(false);
        }
        self.inner.borrow_mut().1.extend(records);
        Ok(true)
    }
    fn follow_log_start(&self, offset: i64) -> Result<(), String> {
        let mut i = self.inner.borrow_mut();
        let to = offset.min(i.3);
        if to > i.0 {
            let n = usize::try_from(to - i.0).unwrap_or(0).min(i.1.len());
            i.1.drain(..n);
            i.0 = to;
        }
        Ok(())
    }
}

const CONFIG: ReplicaConfig = ReplicaConfig {
    replica_lag_time_max_ms: 10_000,
    min_insync_replicas: 1,
};

/// A follower (broker 2) of leader 1 in leader epoch 3.
fn follower() -> Partition<MemLog> {
    let mut p = Partition::new(2, MemLog::default(), CONFIG);
    p.on_metadata(
        PartitionState {
            leader: 1,
            leader_epoch: 3,
            partition_epoch: 1,
            isr: vec![1, 2],
            replicas: vec![1, 2],
        },
        CONFIG,
        0,
    )
    .expect("metadata");
    p
}

fn followed(key: i32, p: &Partition<MemLog>) -> Followed<i32> {
    Followed {
        key,
        position: p.fetch_position().expect("follows"),
        unsynced: p.log.durable_end_offset() < p.log.log_end_offset(),
    }
}

#[test]
fn one_fetch_at_a_time_and_the_next_only_once_appends_are_durable() {
    let mut part = follower();
    let mut f = LeaderFetcher::new(1);
    let FetchStep::Send {
        fetch_id,
        partitions,
    } = f.next(0, vec![followed(0, &part)])
    else {
        panic!("a fetch goes out");
    };
    assert_eq!(partitions.len(), 1);
    assert_eq!(
        f.next(1, vec![followed(0, &part)]),
        FetchStep::Idle { retry_at_ms: None },
        "one in flight"
    );
    let sent = f.on_answer(fetch_id).expect("the fetch out");
    let outcome = apply_answer(
        &mut part,
        &sent[0].1,
        FetchAnswer::Records {
            records: Some(vec![3, 3]),
            high_watermark: 2,
            log_start_offset: 0,
        },
    );
    assert!(outcome.appended && !outcome.stale);
    assert_eq!(part.log.log_end_offset(), 2);
    assert_eq!(part.log.high_watermark(), 2);
    f.answered(outcome.appended);
    assert_eq!(f.next(2, vec![followed(0, &part)]), FetchStep::WaitDurable);
    part.log.sync();
    f.on_durable();
    let FetchStep::Send { partitions, .. } = f.next(3, vec![followed(0, &part)]) else {
        panic!("fetches again once durable");
    };
    assert_eq!(partitions[0].1.fetch_offset, 2);
}

#[test]
fn a_log_with_records_not_yet_durable_holds_the_fetch() {
    let part = follower();
    part.log.inner.borrow_mut().1.push(2); // appended while it led, not synced
    let mut f = LeaderFetcher::new(1);
    assert_eq!(f.next(0, vec![followed(0, &part)]), FetchStep::WaitDurable);
    let mut broken = LeaderFetcher::new(1).fetch_before_durable();
    assert!(matches!(
        broken.next(0, vec![followed(0, &part)]),
        FetchStep::Send { .. }
    ));
}

#[test]
fn a_stale_answer_does_nothing_and_an_error_backs_the_partition_off() {
    let mut part = follower();
    let mut f = LeaderFetcher::new(1);
    let FetchStep::Send { fetch_id, .. } = f.next(0, vec![followed(0, &part)]) else {
        panic!("a fetch goes out");
    };
    let sent = f.on_answer(fetch_id).expect("the fetch out");
    assert!(f.on_answer(fetch_id).is_none(), "answered once");
    // The position moved while the fetch was out (a new leader epoch).
    part.on_metadata(
        PartitionState {
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 2,
            isr: vec![1, 2],
            replicas: vec![1, 2],
        },
        CONFIG,
        1,
    )
    .expect("metadata");
    let outcome = apply_answer(
        &mut part,
        &sent[0].1,
        FetchAnswer::Records {
            records: Some(vec![3]),
            high_watermark: 1,
            log_start_offset: 0,
        },
    );
    assert!(outcome.stale && !outcome.appended);
    assert_eq!(part.log.log_end_offset(), 0);

    let FetchStep::Send { fetch_id, .. } = f.next(2, vec![followed(0, &part)]) else {
        panic!("a fetch goes out");
    };
    let sent = f.on_answer(fetch_id).expect("the fetch out");
    let outcome = apply_answer(&mut part, &sent[0].1, FetchAnswer::Error);
    assert!(outcome.back_off);
    f.back_off_partition(0, 2);
    f.answered(false);
    assert_eq!(
        f.next(3, vec![followed(0, &part)]),
        FetchStep::Idle {
            retry_at_ms: Some(2 + PARTITION_BACKOFF_MS)
        }
    );
    assert!(matches!(
        f.next(2 + PARTITION_BACKOFF_MS, vec![followed(0, &part)]),
        FetchStep::Send { .. }
    ));
}

#[test]
fn a_failed_request_backs_the_fetcher_off_and_a_late_failure_is_ignored() {
    let part = follower();
    let mut f = LeaderFetcher::new(1);
    let FetchStep::Send { fetch_id, .. } = f.next(0, vec![followed(0, &part)]) else {
        panic!("a fetch goes out");
    };
    f.on_failure(Some(fetch_id + 1), 0, 500);
    assert_eq!(f.in_flight(), Some(fetch_id), "not the fetch out");
    f.on_failure(Some(fetch_id), 10, 500);
    assert_eq!(
        f.next(20, vec![followed(0, &part)]),
        FetchStep::Idle {
            retry_at_ms: Some(510)
        }
    );
    assert!(matches!(
        f.next(510, vec![followed(0, &part)]),
        FetchStep::Send { .. }
    ));
}

#[test]
fn diverging_truncates_and_out_of_range_restarts_behind_the_leaders_start() {
    let mut part = follower();
    part.log.inner.borrow_mut().1.extend([1, 1, 2, 2]);
    part.log.sync();
    let sent = part.fetch_position().expect("follows");
    let outcome = apply_answer(
        &mut part,
        &sent,
        FetchAnswer::Diverging {
            epoch: 1,
            end_offset: 2,
        },
    );
    assert_eq!(outcome.truncated, Some((4, 2)));
    assert_eq!(part.log.log_end_offset(), 2);

    let sent = part.fetch_position().expect("follows");
    let outcome = apply_answer(
        &mut part,
        &sent,
        FetchAnswer::OutOfRange {
            log_start_offset: 10,
        },
    );
    assert_eq!(outcome.restarted_at, Some(10));
    assert!(outcome.back_off);
    assert_eq!(part.log.log_start_offset(), 10);
}
