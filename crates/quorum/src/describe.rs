//! The quorum as DescribeQuorum (Kafka's `kafka-metadata-quorum.sh describe`) reports it: the
//! leader's view of every voter's and observer's progress, answered only by the leader.
//!
//! Offsets are Raft log indexes made exclusive as Kafka's are: a log end offset is one past the
//! last index (0 for an empty log), the high watermark one past the committed index. A
//! follower's progress is openraft's matched index (the last entry the leader knows it holds); its
//! fetch times are the AppendEntries answers the leader's network saw (`network::FollowerAck`):
//! Raft pushes where Kafka's followers pull, so an answer stands for a fetch.

use std::collections::{BTreeMap, HashMap};

use openraft::{RaftMetrics, ServerState};

use crate::network::FollowerAck;

/// One voter's or observer's progress as the leader knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub node_id: u64,
    /// Last index known held + 1; 0 when nothing is known.
    pub log_end_offset: u64,
    /// When it last answered the leader (ms since the epoch); `None`: not since this node started.
    pub last_fetch_ms: Option<i64>,
    /// When an answer last showed it holding the leader's last entry; `None`: never seen.
    pub last_caught_up_ms: Option<i64>,
}

/// The leader's answer to DescribeQuorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader: u64,
    /// The Raft term (Kafka's leader epoch of `__cluster_metadata`).
    pub term: u64,
    /// Committed index + 1; 0 when nothing is committed.
    pub high_watermark: u64,
    pub voters: Vec<ReplicaProgress>,
    pub observers: Vec<ReplicaProgress>,
    /// Controller listener address per node, where one is known (voters from the configured
    /// voter set, observers from their registration).
    pub addresses: BTreeMap<u64, String>,
}

/// What the leader reports; `None` unless `m` is the metrics of the current leader.
pub(crate) fn describe(
    m: &RaftMetrics<u64, openraft::BasicNode>,
    committed: Option<u64>,
    acks: &HashMap<u64, FollowerAck>,
    voter_addresses: &BTreeMap<u64, String>,
    now_ms: i64,
) -> Option<QuorumDescription> {
    if m.state != ServerState::Leader || m.current_leader != Some(m.id) {
        return None;
    }
    let end = |index: Option<u64>| index.map_or(0, |i| i.saturating_add(1));
    let matched: BTreeMap<u64, Option<u64>> = m
        .replication
        .as_ref()
        .map(|r| {
            r.iter()
                .map(|(id, log_id)| (*id, log_id.map(|l| l.index)))
                .collect()
        })
        .unwrap_or_default();
    let progress = |id: u64| -> ReplicaProgress {
        if id == m.id {
            return ReplicaProgress {
                node_id: id,
                log_end_offset: end(m.last_log_index),
                last_fetch_ms: Some(now_ms),
                last_caught_up_ms: Some(now_ms),
            };
        }
        let ack = acks.get(&id);
        ReplicaProgress {
            node_id: id,
            log_end_offset: end(matched.get(&id).copied().flatten()),
            last_fetch_ms: ack.map(|a| a.last_ack_ms),
            last_caught_up_ms: ack.and_then(|a| a.last_caught_up_ms),
        }
    };
    let membership = m.membership_config.membership();
    let mut addresses = BTreeMap::new();
    for (id, node) in membership.nodes() {
        let configured = voter_addresses.get(id).filter(|a| !a.is_empty());
        match configured {
            Some(a) => addresses.insert(*id, a.clone()),
            None if !node.addr.is_empty() => addresses.insert(*id, node.addr.clone()),
            None => None,
        };
    }
    Some(QuorumDescription {
        leader: m.id,
        term: m.current_term,
        high_watermark: end(committed),
        voters: membership.voter_ids().map(progress).collect(),
        observers: membership.learner_ids().map(progress).collect(),
        addresses,
    })
}
