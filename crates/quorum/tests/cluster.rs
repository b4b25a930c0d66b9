//! Goal: three in-process voters on loopback TCP elect one leader, commit and apply proposals in
//! the same order everywhere, survive the leader's loss without losing committed entries, and
//! bring restarted voters back from the log or from a snapshot.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::{fast, Cluster};
use millrace_quorum::{NodeState, ProposeError, QuorumConfig};
use parking_lot::Mutex;

const ELECT: Duration = Duration::from_secs(10);
const APPLY: Duration = Duration::from_secs(10);

fn payload(i: u32) -> Vec<u8> {
    format!("record-{i}").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_one_leader_and_apply_in_the_same_order() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    c.start_all(listeners).await;
    let leader = c.agreed_leader(ELECT).await;
    let mut expected = Vec::new();
    let mut indexes = Vec::new();
    for i in 0..30 {
        let (index, answer) = c.nodes[&leader].q().propose(payload(i)).await.unwrap();
        assert_eq!(answer, format!("applied:{index}").into_bytes());
        indexes.push(index);
        expected.push(payload(i));
    }
    assert!(indexes.windows(2).all(|w| w[0] < w[1]));
    c.all_applied(&expected, APPLY).await;
    for n in c.running() {
        let at: Vec<u64> = n.sm.entries().iter().map(|(i, _)| *i).collect();
        assert_eq!(at, indexes, "node {} applied at other indexes", n.id);
        let s = n.status();
        assert_eq!(s.voters, [1, 2, 3].into(), "{s:?}");
        assert!(s.observers.is_empty());
    }
    // A follower refuses proposals and names the leader.
    let follower = c.running().map(|n| n.id).find(|id| *id != leader).unwrap();
    assert_eq!(
        c.nodes[&follower].q().propose(b"x".to_vec()).await,
        Err(ProposeError::NotLeader {
            leader: Some(leader)
        })
    );
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}

/// Records every (term, leader) pair each node reports.
fn record_leaders(c: &Cluster, seen: &Arc<Mutex<BTreeMap<u64, BTreeSet<u64>>>>) {
    for n in c.running() {
        let mut rx = n.q().watch();
        let seen = seen.clone();
        tokio::spawn(async move {
            loop {
                let s = rx.borrow_and_update().clone();
                if let (Some(l), NodeState::Leader | NodeState::Follower) = (s.leader, s.state) {
                    seen.lock().entry(s.term).or_default().insert(l);
                }
                if rx.changed().await.is_err() {
                    break;
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_leader_elects_another_and_loses_nothing_committed() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    c.start_all(listeners).await;
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    record_leaders(&c, &seen);
    let mut expected = Vec::new();
    let mut next = 0;
    // Three rounds: each stops the leader, checks a new one takes over with nothing committed
    // lost, and restarts the old one, which catches up from the log.
    for round in 0..3 {
        let first = c.agreed_leader(ELECT).await;
        let first_term = c.nodes[&first].status().term;
        for _ in 0..10 {
            c.nodes[&first].q().propose(payload(next)).await.unwrap();
            expected.push(payload(next));
            next += 1;
        }
        c.stop(first).await;
        let t0 = std::time::Instant::now();
        let second = c.agreed_leader(ELECT).await;
        println!(
            "round {round}: leader {first} stopped, {second} leads after {:?}",
            t0.elapsed()
        );
        assert_ne!(second, first);
        assert!(c.nodes[&second].status().term > first_term);
        for _ in 0..10 {
            c.nodes[&second].q().propose(payload(next)).await.unwrap();
            expected.push(payload(next));
            next += 1;
        }
        c.all_applied(&expected, APPLY).await;

        c.start(first, None).await;
        record_leaders(&c, &seen);
        c.all_applied(&expected, APPLY).await;
        assert_eq!(
            c.nodes[&first].sm.restores(),
            0,
            "caught up from the log, not a snapshot"
        );
        assert_eq!(
            c.agreed_leader(ELECT).await,
            second,
            "the rejoining node did not disrupt"
        );
    }
    // One leader per term (Kafka's controller epoch), as every node saw it.
    let seen = seen.lock().clone();
    assert!(seen.len() >= 4, "{seen:?}");
    for (term, leaders) in &seen {
        assert_eq!(leaders.len(), 1, "term {term} had leaders {leaders:?}");
    }
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}

fn snapshot_often(c: QuorumConfig) -> QuorumConfig {
    let mut c = fast(c);
    c.snapshot_every_entries = 5;
    c.entries_kept_after_snapshot = 0;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_behind_the_purged_log_catches_up_from_a_snapshot() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], snapshot_often).await;
    c.start_all(listeners).await;
    let leader = c.agreed_leader(ELECT).await;
    let lagging = c.running().map(|n| n.id).find(|id| *id != leader).unwrap();
    let mut expected = Vec::new();
    for i in 0..3 {
        c.nodes[&leader].q().propose(payload(i)).await.unwrap();
        expected.push(payload(i));
    }
    c.all_applied(&expected, APPLY).await;
    c.stop(lagging).await;
    for i in 3..40 {
        c.nodes[&leader].q().propose(payload(i)).await.unwrap();
        expected.push(payload(i));
    }
    // The leader snapshotted and purged its log past what the stopped node has.
    let leader_dir = c.nodes[&leader].dir.clone();
    assert!(leader_dir.join("quorum.snapshot").exists());
    c.start(lagging, None).await;
    c.all_applied(&expected, APPLY).await;
    assert!(
        c.nodes[&lagging].sm.restores() >= 1,
        "the restarted node installed a snapshot"
    );
    // And it restarts again from its own snapshot plus log.
    c.stop(lagging).await;
    c.start(lagging, None).await;
    assert_eq!(
        c.nodes[&lagging].sm.restores(),
        1,
        "restored once, from its own snapshot file"
    );
    c.all_applied(&expected, APPLY).await;
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_form_one_cluster() {
    for round in 0..4 {
        let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
        c.start_all(listeners).await;
        let leader = c.agreed_leader(ELECT).await;
        let (index, _) = c.nodes[&leader].q().propose(payload(round)).await.unwrap();
        c.all_applied(&[payload(round)], APPLY).await;
        for n in c.running() {
            assert_eq!(
                n.sm.entries(),
                vec![(index, payload(round))],
                "node {}",
                n.id
            );
            assert_eq!(n.status().voters, [1, 2, 3].into());
        }
        let leaders = c
            .running()
            .filter(|n| n.status().state == NodeState::Leader)
            .count();
        assert_eq!(leaders, 1);
        println!("round {round}: leader {leader}, first proposal at index {index}");
        for id in [1, 2, 3] {
            c.stop(id).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_voter_catches_up_through_appends_split_to_fit_a_frame() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    c.start_all(listeners).await;
    let leader = c.agreed_leader(ELECT).await;
    let lagging = c.running().map(|n| n.id).find(|id| *id != leader).unwrap();
    c.stop(lagging).await;
    // 20 entries of 1 MiB: more than one frame (FRAME_BYTES_MAX, 16 MiB) can carry, and fewer
    // than openraft's batch (APPEND_ENTRIES_PER_RPC_MAX), so catching up needs split requests.
    let big = millrace_quorum::limits::ENTRY_PAYLOAD_BYTES_MAX;
    let mut expected = Vec::new();
    for i in 0..20u8 {
        let p = vec![i; big];
        c.nodes[&leader].q().propose(p.clone()).await.unwrap();
        expected.push(p);
    }
    c.start(lagging, None).await;
    c.all_applied(&expected, Duration::from_secs(30)).await;
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}
