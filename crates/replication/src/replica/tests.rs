//! The replica state machine as pure functions: high watermark, ISR changes, epochs.

use proptest::prelude::*;

use super::*;

const LAG_MS: i64 = 10_000;

fn config(min_isr: usize) -> ReplicaConfig {
    ReplicaConfig {
        replica_lag_time_max_ms: LAG_MS,
        min_insync_replicas: min_isr,
    }
}

fn state(leader: i32, leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch,
        partition_epoch,
        isr: isr.to_vec(),
        replicas: vec![1, 2, 3],
    }
}

/// Broker 1 leads epoch 0 with the given ISR, its log at `leo` (all durable).
fn leader(isr: &[i32], min_isr: usize, leo: i64) -> PartitionReplica {
    let mut r = PartitionReplica::new(1, config(min_isr));
    r.step(Event::Metadata {
        state: state(1, 0, 0, isr),
        log_end_offset: leo,
        durable_end_offset: leo,
        high_watermark: 0,
        config: config(min_isr),
        now_ms: 0,
    });
    r
}

fn fetch(
    r: &mut PartitionReplica,
    replica_id: i32,
    offset: i64,
    leader_leo: i64,
    now_ms: i64,
) -> Vec<Action> {
    r.step(Event::FollowerFetch {
        replica_id,
        broker_epoch: 100 + i64::from(replica_id),
        fetch_offset: offset,
        eligible: true,
        leader_log_end_offset: leader_leo,
        now_ms,
    })
}

#[test]
fn hw_is_the_smallest_log_end_of_the_isr_and_waits_for_every_member() {
    let mut r = leader(&[1, 2, 3], 2, 10);
    assert!(
        fetch(&mut r, 2, 10, 10, 1).is_empty(),
        "3 has not fetched: the HW must wait"
    );
    assert_eq!(r.high_watermark(), 0);
    assert_eq!(
        fetch(&mut r, 3, 7, 10, 2),
        vec![Action::SetHighWatermark(7)]
    );
    assert_eq!(
        fetch(&mut r, 3, 10, 10, 3),
        vec![Action::SetHighWatermark(10)]
    );
}

#[test]
fn hw_counts_only_the_leaders_durable_end() {
    let mut r = PartitionReplica::new(1, config(1));
    r.step(Event::Metadata {
        state: state(1, 0, 0, &[1, 2]),
        log_end_offset: 10,
        durable_end_offset: 4,
        high_watermark: 0,
        config: config(1),
        now_ms: 0,
    });
    assert_eq!(
        fetch(&mut r, 2, 10, 10, 1),
        vec![Action::SetHighWatermark(4)]
    );
    assert_eq!(
        r.step(Event::LocalDurable {
            durable_end_offset: 10
        }),
        vec![Action::SetHighWatermark(10)]
    );
}

#[test]
fn strict_min_isr_freezes_the_hw() {
    let mut r = leader(&[1], 2, 10);
    assert!(r.is_under_min_isr());
    assert!(r
        .step(Event::LocalDurable {
            durable_end_offset: 10
        })
        .is_empty());
    assert_eq!(r.high_watermark(), 0);
}

#[test]
fn a_new_leader_epoch_forgets_follower_progress() {
    let mut r = leader(&[1, 2], 1, 10);
    fetch(&mut r, 2, 10, 10, 1);
    assert_eq!(r.high_watermark(), 10);
    // Leadership moves away and back in a later epoch; the log grew meanwhile (as follower).
    r.step(Event::Metadata {
        state: state(2, 1, 1, &[1, 2]),
        log_end_offset: 10,
        durable_end_offset: 10,
        high_watermark: 10,
        config: config(1),
        now_ms: 2,
    });
    r.step(Event::Metadata {
        state: state(1, 2, 2, &[1, 2]),
        log_end_offset: 20,
        durable_end_offset: 20,
        high_watermark: 10,
        config: config(1),
        now_ms: 3,
    });
    assert_eq!(r.epoch_start_offset(), Some(20));
    assert_eq!(
        r.high_watermark(),
        10,
        "follower 2 has not fetched in epoch 2"
    );
    assert_eq!(
        fetch(&mut r, 2, 15, 20, 4),
        vec![Action::SetHighWatermark(15)]
    );
}

#[test]
fn a_caught_up_follower_outside_the_isr_is_proposed_once() {
    let mut r = leader(&[1, 2], 1, 10);
    fetch(&mut r, 2, 10, 10, 1);
    let actions = fetch(&mut r, 3, 10, 10, 2);
    assert_eq!(
        actions,
        vec![Action::AlterPartition {
            leader_epoch: 0,
            partition_epoch: 0,
            isr: vec![(1, -1), (2, 102), (3, 103)],
        }]
    );
    // In flight: nothing more is proposed.
    assert!(fetch(&mut r, 3, 10, 10, 3).is_empty());
    // Committed.
    r.step(Event::AlterPartitionDone {
        result: Ok(state(1, 0, 1, &[1, 2, 3])),
        now_ms: 4,
    });
    assert_eq!(r.isr(), Some(&[1, 2, 3][..]));
}

#[test]
fn a_follower_behind_the_hw_or_the_epoch_start_does_not_join() {
    let mut r = leader(&[1, 2], 1, 10);
    fetch(&mut r, 2, 10, 10, 1);
    assert!(fetch(&mut r, 3, 9, 10, 2).is_empty());
    let mut r = PartitionReplica::new(1, config(1));
    r.step(Event::Metadata {
        state: state(1, 3, 0, &[1]),
        log_end_offset: 10,
        durable_end_offset: 10,
        high_watermark: 5,
        config: config(1),
        now_ms: 0,
    });
    // HW is 10 now (ISR = leader alone), so the epoch start rule is what matters at 10: 9 < 10.
    assert!(fetch(&mut r, 2, 9, 10, 1).is_empty());
}

#[test]
fn an_ineligible_follower_does_not_join() {
    let mut r = leader(&[1], 1, 10);
    let actions = r.step(Event::FollowerFetch {
        replica_id: 2,
        broker_epoch: 5,
        fetch_offset: 10,
        eligible: false,
        leader_log_end_offset: 10,
        now_ms: 1,
    });
    assert!(actions.is_empty());
}

#[test]
fn a_pending_expansion_counts_for_the_hw_a_pending_shrink_does_not() {
    // Expansion: 3 joins (pending); the HW must now also wait for 3.
    let mut r = leader(&[1, 2], 1, 10);
    r.step(Event::LocalDurable {
        durable_end_offset: 20,
    });
    fetch(&mut r, 2, 10, 20, 1);
    assert_eq!(r.high_watermark(), 10);
    let actions = fetch(&mut r, 3, 10, 20, 2);
    assert!(
        matches!(&actions[..], [Action::AlterPartition { .. }]),
        "{actions:?}"
    );
    fetch(&mut r, 2, 20, 20, 3);
    assert_eq!(r.high_watermark(), 10, "3 is in the maximal ISR and at 10");
    // Shrink: 2 stops fetching; the shrink is proposed but the HW still waits for 2.
    let mut r = leader(&[1, 2, 3], 1, 20);
    fetch(&mut r, 2, 5, 20, 1);
    fetch(&mut r, 3, 20, 20, 1);
    assert_eq!(r.high_watermark(), 5);
    fetch(&mut r, 3, 20, 20, LAG_MS + 5);
    let actions = r.step(Event::Tick {
        now_ms: LAG_MS + 10,
    });
    assert!(
        matches!(&actions[..], [Action::AlterPartition { isr, .. }] if isr.iter().map(|(b, _)| *b).collect::<Vec<_>>() == vec![1, 3]),
        "{actions:?}"
    );
    assert_eq!(
        r.high_watermark(),
        5,
        "an uncommitted shrink must not raise the HW"
    );
    let actions = r.step(Event::AlterPartitionDone {
        result: Ok(state(1, 0, 1, &[1, 3])),
        now_ms: LAG_MS + 11,
    });
    assert_eq!(actions, vec![Action::SetHighWatermark(20)]);
}

#[test]
fn a_follower_that_keeps_up_is_not_shrunk() {
    let mut r = leader(&[1, 2], 1, 10);
    for t in (0..5 * LAG_MS).step_by(1000) {
        fetch(&mut r, 2, 10, 10, t);
        let actions = r.step(Event::Tick { now_ms: t });
        assert!(actions.is_empty(), "at {t}: {actions:?}");
    }
}

#[test]
fn a_stale_alter_partition_answer_is_ignored() {
    let mut r = leader(&[1, 2], 1, 10);
    r.step(Event::Metadata {
        state: state(1, 0, 5, &[1, 2, 3]),
        log_end_offset: 10,
        durable_end_offset: 10,
        high_watermark: 0,
        config: config(1),
        now_ms: 1,
    });
    r.step(Event::AlterPartitionDone {
        result: Ok(state(1, 0, 3, &[1])),
        now_ms: 2,
    });
    assert_eq!(r.isr(), Some(&[1, 2, 3][..]));
}

#[test]
fn follower_hw_is_the_leaders_capped_by_its_own_log_end() {
    let mut r = PartitionReplica::new(2, config(1));
    r.step(Event::Metadata {
        state: state(1, 0, 0, &[1, 2]),
        log_end_offset: 0,
        durable_end_offset: 0,
        high_watermark: 0,
        config: config(1),
        now_ms: 0,
    });
    assert_eq!(
        r.step(Event::LeaderHighWatermark {
            leader_high_watermark: 50,
            log_end_offset: 30
        }),
        vec![Action::SetHighWatermark(30)]
    );
    assert!(r
        .step(Event::LeaderHighWatermark {
            leader_high_watermark: 20,
            log_end_offset: 40
        })
        .is_empty());
    assert_eq!(r.high_watermark(), 30);
}

/// Random fetches, durability, ticks and AlterPartition answers against one leader: whenever the
/// HW is at `h`, every committed ISR member's log (durable, this epoch) reached `h` — the
/// definition of "committed = on every ISR member's disk" — and the HW never moves back.
#[derive(Debug, Clone)]
enum Op {
    Fetch { replica: i32, advance: i64 },
    Durable { advance: i64 },
    Append { count: i64 },
    Tick { ms: i64 },
    Answer { commit: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (2..4i32, 0..5i64).prop_map(|(replica, advance)| Op::Fetch { replica, advance }),
        (0..5i64).prop_map(|advance| Op::Durable { advance }),
        (1..5i64).prop_map(|count| Op::Append { count }),
        (1..8_000i64).prop_map(|ms| Op::Tick { ms }),
        any::<bool>().prop_map(|commit| Op::Answer { commit }),
    ]
}

proptest! {
    #[test]
    fn committed_means_on_every_isr_members_log(ops in proptest::collection::vec(op(), 1..200), min_isr in 1usize..4) {
        let mut r = leader(&[1, 2, 3], min_isr, 0);
        let mut committed = state(1, 0, 0, &[1, 2, 3]);
        let mut leo = 0i64;
        let mut durable = 0i64;
        let mut follower_leo = [0i64, 0, 0, 0];
        let mut fetched = [false; 4];
        let mut pending: Option<Vec<i32>> = None;
        let mut now = 0i64;
        let mut last_hw = 0i64;
        for op in ops {
            let actions = match op {
                Op::Fetch { replica, advance } => {
                    let i = replica as usize;
                    follower_leo[i] = (follower_leo[i] + advance).min(leo);
                    fetched[i] = true;
                    fetch(&mut r, replica, follower_leo[i], leo, now)
                }
                Op::Durable { advance } => {
                    durable = (durable + advance).min(leo);
                    r.step(Event::LocalDurable { durable_end_offset: durable })
                }
                Op::Append { count } => { leo += count; Vec::new() }
                Op::Tick { ms } => { now += ms; r.step(Event::Tick { now_ms: now }) }
                Op::Answer { commit } => match pending.take() {
                    Some(isr) if commit => {
                        committed.partition_epoch += 1;
                        committed.isr = isr;
                        r.step(Event::AlterPartitionDone { result: Ok(committed.clone()), now_ms: now })
                    }
                    Some(_) => r.step(Event::AlterPartitionDone { result: Err(AlterPartitionError::Ineligible), now_ms: now }),
                    None => Vec::new(),
                },
            };
            for a in actions {
                match a {
                    Action::SetHighWatermark(h) => {
                        prop_assert!(h > last_hw, "HW moved back or stood still: {} -> {}", last_hw, h);
                        last_hw = h;
                    }
                    Action::AlterPartition { isr, partition_epoch, .. } => {
                        prop_assert_eq!(partition_epoch, committed.partition_epoch);
                        prop_assert!(pending.is_none(), "two ISR changes in flight");
                        pending = Some(isr.into_iter().map(|(b, _)| b).collect());
                    }
                }
            }
            let h = r.high_watermark();
            prop_assert!(h <= durable, "HW {} above the leader's durable end {}", h, durable);
            if h > 0 {
                prop_assert!(committed.isr.len() >= min_isr || h <= last_hw);
                for &b in &committed.isr {
                    if b != 1 {
                        prop_assert!(fetched[b as usize] && follower_leo[b as usize] >= h,
                            "HW {} but ISR member {} is at {}", h, b, follower_leo[b as usize]);
                    }
                }
            }
        }
    }
}
