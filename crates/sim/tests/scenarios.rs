//! Goal: minimal scripted reproductions of the bugs the simulator found, over the real
//! `Partition` and the simulated log; each fails without its fix (the seeds that found them are
//! in `seeds.rs`).

use millrace_replication::{
    FollowerFetchDecision, Partition, PartitionState, ReplicaConfig, ReplicaLog,
};
use millrace_sim::log::SimLog;

const CONFIG: ReplicaConfig = ReplicaConfig {
    replica_lag_time_max_ms: 10_000,
    min_insync_replicas: 1,
};

fn state(leader: i32, leader_epoch: i32, partition_epoch: i32) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch,
        partition_epoch,
        isr: vec![1, 2],
        replicas: vec![1, 2],
    }
}

/// Found by seeds 1, 7, 9 and 19: broker 2 becomes leader of epoch 1 (the epoch starts in its
/// cache at its log end) but appends nothing before broker 1 takes over in epoch 2. Fetching
/// from 1 with last fetched epoch 1, broker 2 hears "diverging at (epoch 0, offset 3)" — its own
/// log end — so it must drop the empty epoch 1 from its cache; otherwise it asks with epoch 1
/// again, forever, and never rejoins the ISR.
#[test]
fn a_replica_that_began_an_epoch_and_appended_nothing_catches_up_after_losing_it() {
    let mut one = Partition::new(1, SimLog::default(), CONFIG);
    let mut two = Partition::new(2, SimLog::default(), CONFIG);
    one.on_metadata(state(1, 0, 0), CONFIG, 0).unwrap();
    two.on_metadata(state(1, 0, 0), CONFIG, 0).unwrap();
    one.log.append_as_leader(0, &[10, 11, 12]);
    assert!(two.log.append_replicated(0, &one.log.read(0, 10)));

    two.on_metadata(state(2, 1, 1), CONFIG, 1).unwrap();
    one.on_metadata(state(2, 1, 1), CONFIG, 1).unwrap();
    assert_eq!(two.log.latest_leader_epoch(), Some(1), "epoch 1 began at 3");

    one.on_metadata(state(1, 2, 2), CONFIG, 2).unwrap();
    two.on_metadata(state(1, 2, 2), CONFIG, 2).unwrap();

    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 3, "broker 2 keeps diverging at its own log end");
        let pos = two.fetch_position().unwrap();
        let (decision, _) = one
            .on_follower_fetch(
                2,
                7,
                pos.leader_epoch,
                pos.fetch_offset,
                pos.last_fetched_epoch,
                true,
                3,
            )
            .unwrap();
        match decision {
            FollowerFetchDecision::Serve { .. } => break,
            FollowerFetchDecision::Diverging { epoch, end_offset } => {
                assert_eq!((epoch, end_offset), (0, 3));
                two.on_diverging_epoch(epoch, end_offset).unwrap();
            }
        }
    }
    assert_eq!(two.log.log_end_offset(), 3, "nothing below 3 was lost");
    assert_eq!(two.log.latest_leader_epoch(), Some(0));
}

/// Found by seed 60 once retention was simulated: broker 1 fell behind the leader's log start
/// and restarted its log at 76 (its epoch cache emptied), then was elected (epoch 1 begins at
/// 76). Broker 2 holds records of epoch 0 up to 76; fetching with last fetched epoch 0 it hears
/// "diverging, epoch -1 (the leader knows no epoch that old), offset 76". Truncating to 76 — its
/// own log end — kept epoch 0, so it asked the same again, forever.
#[test]
fn a_follower_whose_epochs_the_leader_never_saw_starts_over_at_the_leaders_log_start() {
    let mut one = Partition::new(1, SimLog::default(), CONFIG);
    let mut two = Partition::new(2, SimLog::default(), CONFIG);
    two.on_metadata(state(2, 0, 0), CONFIG, 0).unwrap();
    two.log.append_as_leader(0, &[10, 11, 12, 13, 14]);
    one.log.truncate_fully_and_start_at(5).unwrap();
    one.on_metadata(state(1, 1, 1), CONFIG, 1).unwrap();
    two.on_metadata(state(1, 1, 1), CONFIG, 1).unwrap();
    assert_eq!(one.log.latest_leader_epoch(), Some(1));

    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(
            rounds <= 3,
            "broker 2 keeps diverging with an epoch the leader never saw"
        );
        let pos = two.fetch_position().unwrap();
        let (decision, _) = one
            .on_follower_fetch(
                2,
                7,
                pos.leader_epoch,
                pos.fetch_offset,
                pos.last_fetched_epoch,
                true,
                2,
            )
            .unwrap();
        match decision {
            FollowerFetchDecision::Serve { .. } => break,
            FollowerFetchDecision::Diverging { epoch, end_offset } => {
                two.on_diverging_epoch(epoch, end_offset).unwrap();
            }
        }
    }
    assert_eq!(two.log.log_start_offset(), 5);
    assert!(
        two.log.high_watermark() <= 5,
        "nothing above the leader's start counts as committed"
    );
}

/// Found by seed 6194: broker 2 led epoch 1 and wrote offset 0, which nobody else got; broker 3
/// holds offset 0 from epoch 0 and leads again in epoch 2. Broker 2 fetches with last fetched
/// epoch 1 and hears "diverging at (epoch 0, offset 1)". It knows no epoch at or below 0 — every
/// record it has is newer than anything the leader has there — so all of it must go; truncating
/// to the leader's end offset (its own log end) changed nothing, forever.
#[test]
fn a_follower_without_the_leaders_diverging_epoch_truncates_everything() {
    let mut three = Partition::new(3, SimLog::default(), CONFIG);
    let mut two = Partition::new(2, SimLog::default(), CONFIG);
    three.on_metadata(state(3, 0, 0), CONFIG, 0).unwrap();
    three.log.append_as_leader(0, &[10]);
    two.on_metadata(state(2, 1, 1), CONFIG, 1).unwrap();
    two.log.append_as_leader(1, &[20]);
    three.on_metadata(state(3, 2, 2), CONFIG, 2).unwrap();
    two.on_metadata(state(3, 2, 2), CONFIG, 2).unwrap();

    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 3, "broker 2 keeps diverging at its own log end");
        let pos = two.fetch_position().unwrap();
        let (decision, _) = three
            .on_follower_fetch(
                2,
                7,
                pos.leader_epoch,
                pos.fetch_offset,
                pos.last_fetched_epoch,
                true,
                3,
            )
            .unwrap();
        match decision {
            FollowerFetchDecision::Serve { .. } => break,
            FollowerFetchDecision::Diverging { epoch, end_offset } => {
                two.on_diverging_epoch(epoch, end_offset).unwrap();
            }
        }
    }
    assert_eq!(two.log.log_end_offset(), 0, "its epoch-1 record at 0 went");
}

mod isr_changes {
    use millrace_replication::replica::AlterPartitionError;
    use millrace_replication::{Action, Event, PartitionReplica, PartitionState, ReplicaConfig};

    const LAG_MS: i64 = 5_000;
    const CONFIG: ReplicaConfig = ReplicaConfig {
        replica_lag_time_max_ms: LAG_MS,
        min_insync_replicas: 2,
    };

    fn state(partition_epoch: i32, isr: &[i32]) -> PartitionState {
        PartitionState {
            leader: 1,
            leader_epoch: 0,
            partition_epoch,
            isr: isr.to_vec(),
            replicas: vec![1, 2, 3],
        }
    }

    fn leader(isr: &[i32], leo: i64) -> PartitionReplica {
        let mut r = PartitionReplica::new(1, CONFIG);
        r.step(Event::Metadata {
            state: state(0, isr),
            log_end_offset: leo,
            durable_end_offset: leo,
            high_watermark: 0,
            config: CONFIG,
            now_ms: 0,
        });
        r
    }

    fn fetch(
        r: &mut PartitionReplica,
        replica: i32,
        offset: i64,
        leader_leo: i64,
        now_ms: i64,
    ) -> Vec<Action> {
        r.step(Event::FollowerFetch {
            replica_id: replica,
            broker_epoch: 10 + i64::from(replica),
            fetch_offset: offset,
            eligible: true,
            leader_log_end_offset: leader_leo,
            now_ms,
        })
    }

    fn proposals(actions: &[Action]) -> Vec<Vec<i32>> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::AlterPartition { isr, .. } => Some(isr.iter().map(|(b, _)| *b).collect()),
                _ => None,
            })
            .collect()
    }

    /// Found by seed 1022: leader 1 proposes adding 3 (at 40) to the ISR; the answer is lost (the
    /// call times out: outcome unknown) although the controller committed it. The leader must keep
    /// counting 3 for the HW until the metadata settles the outcome — otherwise its HW passes 3's
    /// log end while 3 is a committed ISR member, and electing 3 would lose committed records.
    #[test]
    fn an_expansion_with_an_unknown_outcome_still_bounds_the_hw_and_is_sent_again() {
        let mut r = leader(&[1, 2], 30);
        r.step(Event::LocalDurable {
            durable_end_offset: 50,
        });
        fetch(&mut r, 2, 40, 50, 1);
        assert_eq!(r.high_watermark(), 40);
        let actions = fetch(&mut r, 3, 40, 50, 2);
        assert_eq!(proposals(&actions), vec![vec![1, 2, 3]]);
        // The answer never comes: the broker's request times out.
        r.step(Event::AlterPartitionDone {
            result: Err(AlterPartitionError::Retriable),
            now_ms: 3_000,
        });
        fetch(&mut r, 2, 50, 50, 3_001);
        assert_eq!(
            r.high_watermark(),
            40,
            "3 may be a committed ISR member at 40: the HW must wait for it"
        );
        // Retried, the same change is sent again.
        let actions = r.step(Event::Tick { now_ms: 4_000 });
        assert_eq!(proposals(&actions), vec![vec![1, 2, 3]]);
        // The first attempt had committed: the retry is refused as stale; still pending.
        r.step(Event::AlterPartitionDone {
            result: Err(AlterPartitionError::Stale),
            now_ms: 4_001,
        });
        fetch(&mut r, 2, 50, 50, 4_002);
        assert_eq!(r.high_watermark(), 40);
        // The metadata settles it: 3 is in; the HW follows 3.
        r.step(Event::Metadata {
            state: state(1, &[1, 2, 3]),
            log_end_offset: 50,
            durable_end_offset: 50,
            high_watermark: 40,
            config: CONFIG,
            now_ms: 4_003,
        });
        assert_eq!(r.isr(), Some(&[1, 2, 3][..]));
        fetch(&mut r, 3, 50, 50, 4_004);
        assert_eq!(r.high_watermark(), 50);
    }

    /// Also from seed 1022: follower 3 dies after its last fetch. Shrunk out of the ISR after the
    /// lag, it must not be proposed again from its stale fetch state — that made the ISR flap
    /// every tick (two metadata entries per round, and an HW held back by a dead member).
    #[test]
    fn a_follower_that_stopped_fetching_is_not_added_back_after_its_shrink() {
        let mut r = leader(&[1, 2, 3], 10);
        fetch(&mut r, 2, 10, 10, 1);
        fetch(&mut r, 3, 10, 10, 1);
        assert_eq!(r.high_watermark(), 10);
        let mut changes = Vec::new();
        let mut partition_epoch = 0;
        for t in (2..4 * LAG_MS).step_by(100) {
            let mut actions = fetch(&mut r, 2, 10, 10, t);
            actions.extend(r.step(Event::Tick { now_ms: t }));
            for isr in proposals(&actions) {
                partition_epoch += 1;
                changes.push(isr.clone());
                r.step(Event::AlterPartitionDone {
                    result: Ok(state(partition_epoch, &isr)),
                    now_ms: t,
                });
            }
        }
        assert_eq!(changes, vec![vec![1, 2]], "one shrink, no flapping");
    }
}

mod elections {
    use millrace_cluster::image::PartitionRegistration;
    use millrace_controller::partition_change::{ElectionOutcome, PartitionChange};
    use uuid::Uuid;

    fn reg(isr: &[i32], elr: &[i32], leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: vec![4, 1, 3],
            isr: isr.to_vec(),
            elr: elr.to_vec(),
            last_known_elr: Vec::new(),
            leader,
            leader_epoch: 2,
            partition_epoch: 7,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// Found by seed 631 (min.insync.replicas=1): leader 4 and follower 1 are fenced together,
    /// ISR [] and ELR [4, 1]. Broker 1 comes back and is elected from the ELR with ISR [1] — at
    /// min ISR, so the HW advances again and 4 soon lacks committed records. Left in the ELR, 4
    /// was elected later and its stale tail replaced records that had been acknowledged.
    #[test]
    fn an_election_from_the_elr_that_reaches_min_isr_empties_the_elr() {
        let current = reg(&[], &[4, 1], -1);
        let change = PartitionChange::new(Uuid::nil(), 2, &current, 1);
        let (record, outcome) = change.build(|b| b == 1);
        assert_eq!(outcome, ElectionOutcome::FromElr(1));
        let mut next = current.clone();
        next.apply_change(&record.unwrap());
        assert_eq!((next.leader, next.isr.clone()), (1, vec![1]));
        assert_eq!(
            next.elr,
            Vec::<i32>::new(),
            "4 may miss what 1 commits from now on"
        );

        // With min.insync.replicas=2 the HW stays frozen at ISR [1], so 4 remains eligible.
        let change = PartitionChange::new(Uuid::nil(), 2, &current, 2);
        let (record, _) = change.build(|b| b == 1);
        let mut next = current.clone();
        next.apply_change(&record.unwrap());
        assert_eq!(next.elr, vec![4]);
    }
}
