//! Goal: a broker-only node (observer) joins as a learner, follows and applies the committed log
//! through leader changes and its own restart, and never votes, campaigns or leads.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, fast, Cluster};
use millrace_quorum::{NodeState, ProposeError};
use parking_lot::Mutex;

const WAIT: Duration = Duration::from_secs(10);

fn payload(i: u32) -> Vec<u8> {
    format!("record-{i}").into_bytes()
}

/// Records every state the observer's status passes through.
fn record_states(c: &Cluster, id: u64, seen: Arc<Mutex<Vec<NodeState>>>) {
    let mut rx = c.nodes[&id].q().watch();
    tokio::spawn(async move {
        loop {
            seen.lock().push(rx.borrow_and_update().state);
            if rx.changed().await.is_err() {
                break;
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_the_committed_log_and_never_votes() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[4], fast).await;
    c.start_all(listeners).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    record_states(&c, 4, seen.clone());
    let leader = c.agreed_leader(WAIT).await;
    eventually("observer joined", WAIT, || {
        c.running().all(|n| n.status().observers.contains(&4))
    })
    .await;
    let mut expected = Vec::new();
    for i in 0..10 {
        c.nodes[&leader].q().propose(payload(i)).await.unwrap();
        expected.push(payload(i));
    }
    c.all_applied(&expected, WAIT).await; // includes the observer
    assert!(matches!(
        c.nodes[&4].q().propose(b"x".to_vec()).await,
        Err(ProposeError::NotLeader { leader: Some(l) }) if l == leader
    ));

    // The leader goes: a voter takes over; the observer keeps following.
    c.stop(leader).await;
    let second = c.agreed_leader(WAIT).await;
    assert!([1, 2, 3].contains(&second) && second != leader);
    for i in 10..20 {
        c.nodes[&second].q().propose(payload(i)).await.unwrap();
        expected.push(payload(i));
    }
    c.all_applied(&expected, WAIT).await;

    // The observer restarts: it is already a learner and catches up from its own log and the
    // leader.
    c.stop(4).await;
    c.nodes[&second].q().propose(payload(20)).await.unwrap();
    expected.push(payload(20));
    c.start(4, None).await;
    record_states(&c, 4, seen.clone());
    c.all_applied(&expected, WAIT).await;

    // An observer whose directory is lost starts empty and receives the whole log again.
    c.stop(4).await;
    std::fs::remove_dir_all(&c.nodes[&4].dir).unwrap();
    c.start(4, None).await;
    record_states(&c, 4, seen.clone());
    c.all_applied(&expected, WAIT).await;

    for n in c.running() {
        let s = n.status();
        assert_eq!(s.voters, [1, 2, 3].into(), "node {}: {s:?}", n.id);
        assert_eq!(s.observers, [4].into(), "node {}: {s:?}", n.id);
    }
    let states = seen.lock().clone();
    assert!(!states.is_empty());
    assert!(
        states
            .iter()
            .all(|s| matches!(s, NodeState::Observer | NodeState::Shutdown)),
        "the observer was in a voter's state: {states:?}"
    );
    for id in [1, 2, 3, 4] {
        if c.nodes[&id].quorum.is_some() {
            c.stop(id).await;
        }
    }
}
