//! The simulated network: messages between nodes (brokers, the producers, the admin client) with
//! a per-link base delay, per-message jitter (so messages on one link overtake each other), loss,
//! and link cuts that can be one-way or both ways (partitions). A message is dropped when its
//! link is cut at delivery time, or when either end restarted since it was sent (the connection
//! it travelled on is gone).
//!
//! What travels: the controller requests and answers of `millrace-controller` as they are, and
//! small stand-ins for Kafka's Fetch (v15+: replica id and broker epoch, current leader epoch,
//! last fetched epoch; diverging epoch in the answer), Produce (acks=all) and Metadata.

use std::collections::BTreeMap;

use millrace_controller::{ControllerRequest, ControllerResponse};

use crate::log::Record;
use crate::rng::Rng;

/// One partition of a follower's fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    pub partition: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    pub current_leader_epoch: i32,
}

/// Why a partition of a fetch or a produce was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionErrorCode {
    NotLeaderOrFollower,
    FencedLeaderEpoch,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    RequestTimedOut,
    /// OFFSET_OUT_OF_RANGE with the leader's log start offset.
    OffsetOutOfRange {
        log_start_offset: i64,
    },
    Storage,
}

/// One partition of a fetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchResult {
    Records {
        records: Vec<Record>,
        high_watermark: i64,
        log_start_offset: i64,
    },
    Diverging {
        epoch: i32,
        end_offset: i64,
    },
    Error(PartitionErrorCode),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub fetch_id: u64,
    pub replica_id: i32,
    pub broker_epoch: i64,
    pub partitions: Vec<FetchPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    pub fetch_id: u64,
    /// Each with the position it answers.
    pub partitions: Vec<(FetchPartition, FetchResult)>,
}

/// What a message carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    ControllerRequest {
        req_id: u64,
        req: ControllerRequest,
    },
    ControllerResponse {
        req_id: u64,
        resp: ControllerResponse,
    },
    Fetch(FetchRequest),
    FetchResponse(FetchResponse),
    /// acks=all
    Produce {
        req_id: u64,
        partition: i32,
        values: Vec<u64>,
    },
    ProduceResponse {
        req_id: u64,
        /// The base offset, or why not.
        result: Result<i64, PartitionErrorCode>,
    },
    MetadataRequest {
        req_id: u64,
    },
    MetadataResponse {
        req_id: u64,
        /// The leader of each partition as the answering broker's image says (-1: none).
        leaders: Vec<i32>,
    },
}

impl Body {
    pub fn kind(&self) -> &'static str {
        match self {
            Body::ControllerRequest { .. } => "controller-request",
            Body::ControllerResponse { .. } => "controller-response",
            Body::Fetch(_) => "fetch",
            Body::FetchResponse(_) => "fetch-response",
            Body::Produce { .. } => "produce",
            Body::ProduceResponse { .. } => "produce-response",
            Body::MetadataRequest { .. } => "metadata",
            Body::MetadataResponse { .. } => "metadata-response",
        }
    }
}

/// A message in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub from: i32,
    pub to: i32,
    /// The incarnations of both ends when it was sent (0 for clients).
    pub from_incarnation: u64,
    pub to_incarnation: u64,
    pub body: Body,
}

/// Link state.
#[derive(Debug, Default)]
pub struct Net {
    /// Base one-way delay per directed link, drawn on first use.
    base_delay: BTreeMap<(i32, i32), i64>,
    /// Directed links cut, with how many active cuts cover each.
    cut: BTreeMap<(i32, i32), u32>,
    /// Active cuts by id, to heal them.
    cuts: BTreeMap<u64, Vec<(i32, i32)>>,
    next_cut: u64,
}

impl Net {
    /// Whether `from` can currently send to `to`.
    pub fn link_up(&self, from: i32, to: i32) -> bool {
        from == to || !self.cut.contains_key(&(from, to))
    }

    /// Both directions up.
    pub fn connected(&self, a: i32, b: i32) -> bool {
        self.link_up(a, b) && self.link_up(b, a)
    }

    /// The delay of one message on `from → to`.
    pub fn delay(
        &mut self,
        rng: &mut Rng,
        range: (i64, i64),
        jitter: i64,
        from: i32,
        to: i32,
    ) -> i64 {
        if from == to {
            return 0;
        }
        let base = *self
            .base_delay
            .entry((from, to))
            .or_insert_with(|| rng.range(range.0, range.1));
        base + rng.range(0, jitter)
    }

    /// Cuts the given directed links until [`Net::heal`]; returns the cut's id.
    pub fn cut(&mut self, links: Vec<(i32, i32)>) -> u64 {
        self.next_cut += 1;
        for l in &links {
            *self.cut.entry(*l).or_insert(0) += 1;
        }
        self.cuts.insert(self.next_cut, links);
        self.next_cut
    }

    pub fn heal(&mut self, id: u64) {
        let Some(links) = self.cuts.remove(&id) else {
            return;
        };
        for l in links {
            if let Some(n) = self.cut.get_mut(&l) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.cut.remove(&l);
                }
            }
        }
    }

    pub fn heal_all(&mut self) {
        self.cuts.clear();
        self.cut.clear();
    }

    pub fn active_cuts(&self) -> usize {
        self.cuts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_cuts_heal_independently() {
        let mut net = Net::default();
        let a = net.cut(vec![(1, 2), (2, 1)]);
        let b = net.cut(vec![(1, 2)]);
        assert!(!net.link_up(1, 2) && !net.link_up(2, 1));
        net.heal(a);
        assert!(!net.link_up(1, 2) && net.link_up(2, 1));
        net.heal(b);
        assert!(net.connected(1, 2));
        assert!(net.link_up(3, 3));
    }
}
