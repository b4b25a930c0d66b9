//! Pre-vote, the equivalent over openraft of Kafka's KIP-996: a voter stands for election only
//! when a majority of the voters, itself included, has not heard from a leader lately. openraft
//! 0.9 has no pre-vote: a voter cut off from the others keeps timing out, raising its term with
//! every election it starts, and when it is reachable again its higher term (answered to the
//! leader's AppendEntries) makes a healthy leader step down for nothing.
//!
//! How: every voter of a quorum of more than one runs [`guard`], which turns openraft's elections
//! on or off (`Raft::runtime_config().elect`). While this node leads, or heard from a leader within the
//! shortest election timeout, elections stay on (openraft does not time out then anyway).
//! Otherwise it asks every other voter (`Request::PreVote`) whether it heard from a leader within
//! that time; with a majority that has not (itself counted) elections go on, else off, and it asks
//! again every heartbeat interval. A voter "heard from a leader" when it answered an AppendEntries
//! that did not carry a lower term ([`LeaderContact`], touched by the server), or when it leads.
//! A peer that does not answer (cut off, down, or a build without pre-vote) does not grant.
//!
//! What it costs: after a leader dies, the others' elections start at most one heartbeat interval
//! later than without pre-vote (the first ask may still meet a peer that heard from the old leader
//! a moment later). Observers never elect and run no guard; a single voter has no one to ask.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ServerState;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::network::Peers;
use crate::types::Raft;
use crate::wire::{Reply, Request};

/// When this node last heard from a leader, and for how long that counts.
pub(crate) struct LeaderContact {
    last: Mutex<Option<Instant>>,
    /// The shortest election timeout: contact older than this no longer counts.
    window: Duration,
}

impl LeaderContact {
    pub(crate) fn new(window: Duration) -> Arc<LeaderContact> {
        Arc::new(LeaderContact {
            last: Mutex::new(None),
            window,
        })
    }

    /// A leader's AppendEntries (in this node's term or a later one) was answered just now.
    pub(crate) fn touch(&self) {
        *self.last.lock() = Some(Instant::now());
    }

    /// Whether this node leads, or heard from a leader within the window: what a PreVote answer
    /// says (`leader_recent`) and why this node itself does not ask for one.
    pub(crate) fn leader_recent(&self, raft: &Raft, node_id: u64) -> bool {
        let leads = {
            let metrics = raft.metrics();
            let m = metrics.borrow();
            m.state == ServerState::Leader && m.current_leader == Some(node_id)
        };
        leads || self.last.lock().is_some_and(|t| t.elapsed() < self.window)
    }
}

/// Keeps openraft's elections on only while a majority of the voters would grant a pre-vote.
pub(crate) async fn guard(
    raft: Raft,
    peers: Arc<Peers>,
    contact: Arc<LeaderContact>,
    node_id: u64,
    interval: Duration,
    cancel: CancellationToken,
) {
    let majority = peers.voters().len() / 2 + 1;
    let voters: Vec<(u64, String)> = peers
        .voters()
        .iter()
        .filter(|(id, _)| **id != node_id)
        .map(|(id, addr)| (*id, addr.clone()))
        .collect();
    let ask_timeout = interval.max(contact.window / 2);
    let mut enabled = true;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let want = if contact.leader_recent(&raft, node_id) {
            true
        } else {
            let asks = voters.iter().map(|(id, addr)| {
                let peers = Arc::clone(&peers);
                async move {
                    matches!(
                        peers
                            .request(*id, addr, &Request::PreVote, ask_timeout)
                            .await,
                        Ok(Reply::PreVote {
                            leader_recent: false
                        })
                    )
                }
            });
            let granted = 1 + futures::future::join_all(asks)
                .await
                .into_iter()
                .filter(|g| *g)
                .count();
            if granted < majority && enabled {
                info!(
                    node_id,
                    granted,
                    majority,
                    "pre-vote: holding back elections, a majority of the voters still hears a leader or cannot be reached"
                );
            }
            granted >= majority
        };
        if want != enabled {
            if want {
                info!(node_id, "pre-vote: a majority has no leader; elections on");
            }
            raft.runtime_config().elect(want);
            enabled = want;
        }
    }
}
