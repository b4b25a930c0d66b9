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
