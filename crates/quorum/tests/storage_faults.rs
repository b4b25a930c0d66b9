//! Goal: what the quorum acknowledged (a committed proposal, a vote) survives a power loss that
//! drops everything not fsynced, a torn tail is cut at restart, and a failing fsync is never
//! acknowledged as success.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, fast, start_single, Cluster, RecordingSm};
use millrace_quorum::disk::Disk;
use millrace_quorum::testing::{Crash, MemDisk};
use millrace_quorum::{NodeState, ProposeError};

fn payload(i: u32) -> Vec<u8> {
    format!("record-{i}").into_bytes()
}

async fn acked_entries_survive(crash: Crash) {
    let mem = MemDisk::new();
    let disk: Arc<dyn Disk> = Arc::new(mem.clone());
    let dir = Path::new("/data/meta");
    let log = dir.join("quorum.log");
    let q = start_single(1, dir, Some(disk.clone()), Arc::new(RecordingSm::default()))
        .await
        .expect("start");
    let mut acked = Vec::new();
    for i in 0..25 {
        let (index, _) = q.propose(payload(i)).await.expect("acknowledged");
        acked.push((index, payload(i)));
    }
    if crash == Crash::PowerLossTornTail {
        // An append in flight (never acknowledged): a copy of the log's last 200 bytes, of which
        // the crash keeps half. Recovery must cut it.
        let bytes = mem.read(&log).expect("log file");
        let tail = bytes[bytes.len() - 200..].to_vec();
        assert!(mem.append_unsynced(&log, &tail));
        mem.crash(crash);
        assert_eq!(
            mem.read(&log).expect("log file").len(),
            bytes.len() + 100,
            "a torn tail is on disk"
        );
    } else {
        mem.crash(crash);
    }
    // The old process is gone: its handles fail; stop its tasks.
    let _ = q.shutdown().await;

    let sm = Arc::new(RecordingSm::default());
    let q = start_single(1, dir, Some(disk.clone()), sm.clone())
        .await
        .expect("start");
    eventually(
        "acknowledged entries re-applied",
        Duration::from_secs(10),
        || sm.entries() == acked,
    )
    .await;
    // The log keeps working on top of what survived (a torn tail left in place would hide the
    // new entries from the next recovery).
    let (index, _) = q
        .propose(b"after".to_vec())
        .await
        .expect("propose after restart");
    assert!(index > acked.last().expect("some acked").0);
    acked.push((index, b"after".to_vec()));
    mem.crash(Crash::PowerLoss);
    let _ = q.shutdown().await;
    let sm = Arc::new(RecordingSm::default());
    let q = start_single(1, dir, Some(disk), sm.clone())
        .await
        .expect("restart");
    eventually("all entries re-applied", Duration::from_secs(10), || {
        sm.entries() == acked
    })
    .await;
    q.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_survive_a_power_loss() {
    acked_entries_survive(Crash::PowerLoss).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_survive_a_torn_tail() {
    acked_entries_survive(Crash::PowerLossTornTail).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_survive_a_process_kill() {
    acked_entries_survive(Crash::ProcessKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_fsync_is_never_acknowledged() {
    let mem = MemDisk::new();
    let disk: Arc<dyn Disk> = Arc::new(mem.clone());
    let dir = Path::new("/data/meta");
    let q = start_single(1, dir, Some(disk.clone()), Arc::new(RecordingSm::default()))
        .await
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..5 {
        let (index, _) = q.propose(payload(i)).await.unwrap();
        acked.push((index, payload(i)));
    }
    mem.fail_syncs(true);
    let r = q.propose(b"never durable".to_vec()).await;
    assert!(matches!(r, Err(ProposeError::Fatal(_))), "{r:?}");
    // The node stops on the storage error and says why; later proposals fail too.
    let mut watch = q.watch();
    tokio::time::timeout(
        Duration::from_secs(5),
        watch.wait_for(|s| s.state == NodeState::Shutdown && s.error.is_some()),
    )
    .await
    .expect("status reports the storage error")
    .unwrap();
    mem.fail_syncs(false);
    assert!(q.propose(b"later".to_vec()).await.is_err());
    mem.crash(Crash::PowerLoss);
    let _ = q.shutdown().await;

    let sm = Arc::new(RecordingSm::default());
    let q = start_single(1, dir, Some(disk), sm.clone()).await.unwrap();
    eventually(
        "acknowledged entries re-applied",
        Duration::from_secs(10),
        || sm.entries().len() >= acked.len(),
    )
    .await;
    assert_eq!(sm.entries(), acked, "exactly the acknowledged entries");
    q.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_wide_power_loss_keeps_votes_and_committed_entries() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    c.use_mem_disks();
    c.start_all(listeners).await;
    let leader = c.agreed_leader(Duration::from_secs(10)).await;
    let term = c.nodes[&leader].status().term;
    let mut expected = Vec::new();
    for i in 0..15 {
        c.nodes[&leader].q().propose(payload(i)).await.unwrap();
        expected.push(payload(i));
    }
    let mems: Vec<MemDisk> = c.mem.as_ref().unwrap().values().cloned().collect();
    for m in &mems {
        m.crash(Crash::PowerLoss);
    }
    for id in [1, 2, 3] {
        let q = c.nodes.get_mut(&id).unwrap().quorum.take().unwrap();
        let _ = q.shutdown().await;
    }
    // Followers first: with no leader running, the term each reports right after its start can
    // only come from its vote file (an election would need an election timeout, >= 500 ms).
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    for &id in &followers {
        c.start(id, None).await;
        let s = c.nodes[&id].status();
        assert!(
            s.term >= term,
            "node {id} lost its vote for term {term}: {s:?}"
        );
    }
    c.start(leader, None).await;
    let old_leader = leader;
    let leader = c.agreed_leader(Duration::from_secs(10)).await;
    // One leader per term: the same node may resume term `term`, anyone else needs a higher one.
    let new_term = c.nodes[&leader].status().term;
    assert!(
        new_term > term || (new_term == term && leader == old_leader),
        "term {term} led by {old_leader}, now term {new_term} led by {leader}"
    );
    c.nodes[&leader]
        .q()
        .propose(b"after".to_vec())
        .await
        .unwrap();
    expected.push(b"after".to_vec());
    c.all_applied(&expected, Duration::from_secs(10)).await;
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}
