//! Goal: a voter cut off from the others does not raise its term, and when it is reachable again
//! the leader keeps leading in the same term (pre-vote, Kafka's KIP-996). Without pre-vote the
//! cut-off voter starts an election every timeout, and its higher term, answered to the leader's
//! next AppendEntries, makes the leader step down.
//!
//! Voter 3 reaches voters 1 and 2, and they reach it, only through proxies this test can cut
//! (every connection dropped, new ones closed at once): a full partition of voter 3.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, fast, Cluster};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const ELECT: Duration = Duration::from_secs(10);
const APPLY: Duration = Duration::from_secs(10);

/// A TCP proxy to `target` that can be cut and healed.
struct Link {
    addr: String,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Link {
    async fn to(target: String) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let open = open.clone();
            let conns = conns.clone();
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        continue; // dropped: closed at once
                    }
                    let target = target.clone();
                    conns.lock().push(tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(&target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    }));
                }
            }
        });
        Link {
            addr,
            open,
            conns,
            accept,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for c in self.conns.lock().drain(..) {
            c.abort();
        }
    }

    fn heal(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_back_from_a_partition_does_not_unseat_the_leader() {
    let (mut c, mut listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    let real = c.voters.clone();
    let mut links = Vec::new();
    for (from, to) in [(1, 3), (2, 3), (3, 1), (3, 2)] {
        let link = Link::to(real[&to].clone()).await;
        let mut view = c.voter_views.get(&from).cloned().unwrap_or(real.clone());
        view.insert(to, link.addr.clone());
        c.voter_views.insert(from, view);
        links.push(link);
    }
    // Voters 1 and 2 form the quorum and elect a leader among themselves; 3 joins afterwards.
    let three = listeners.remove(&3);
    for id in [1, 2] {
        c.start(id, listeners.remove(&id)).await;
    }
    let leader = c.agreed_leader(ELECT).await;
    c.start(3, three).await;
    let term = c.nodes[&leader].status().term;
    let mut expected = Vec::new();
    for i in 0..5u32 {
        let p = format!("before-{i}").into_bytes();
        c.nodes[&leader]
            .q()
            .propose(p.clone())
            .await
            .expect("commit");
        expected.push(p);
    }
    c.all_applied(&expected, APPLY).await;
    assert_eq!(c.agreed_leader(ELECT).await, leader);

    // Cut voter 3 off for five of its longest election timeouts.
    for link in &links {
        link.cut();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cut_off = c.nodes[&3].status();
    assert_eq!(
        cut_off.term, term,
        "the cut-off voter started elections: {cut_off:?}"
    );
    assert_eq!(c.nodes[&leader].status().term, term);

    // Back: it catches up under the same leader, in the same term.
    for link in &links {
        link.heal();
    }
    let p = b"after".to_vec();
    c.nodes[&leader]
        .q()
        .propose(p.clone())
        .await
        .expect("commit");
    expected.push(p);
    c.all_applied(&expected, APPLY).await;
    // Give a disruption time to show: several heartbeats and an election timeout.
    eventually("voter 3 follows the leader", ELECT, || {
        c.nodes[&3].status().leader == Some(leader)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = c.nodes[&leader].status();
    assert!(after.is_leader, "the leader stepped down: {after:?}");
    assert_eq!(after.term, term, "an election happened: {after:?}");
    assert_eq!(c.agreed_leader(ELECT).await, leader);
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}
