//! `QuorumConfig`: what one node needs to take part in the controller quorum, its validation and
//! its translation into openraft's `Config`.
//!
//! Names follow Kafka's: `node.id`, `process.roles` (→ [`Role`]), `controller.quorum.voters`
//! (→ `voters`), the controller listener (→ `listen`), `controller.quorum.election.timeout.ms`.
//! The voter set is static, as in Kafka's static quorum: every node must be given the same voter
//! ids (the handshake in `wire` refuses peers whose set differs).

use crate::tls::ControllerTlsHandle;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use openraft::SnapshotPolicy;

use crate::limits::{
    APPEND_ENTRIES_PER_RPC_MAX, NODE_ADDR_BYTES_MAX, SNAPSHOT_CHUNK_BYTES, VOTERS_MAX,
};
use crate::QuorumError;

/// A node's part in the quorum (Kafka's `process.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A voter (`process.roles` contains `controller`): votes, can lead.
    Voter,
    /// An observer (`process.roles=broker`): follows the committed log as a learner, never
    /// votes and never leads.
    Observer,
}

/// Configuration of one node of the quorum.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This node's id (`node.id`).
    pub node_id: u64,
    /// The metadata log directory (inside the broker's data dir); created if missing.
    pub dir: PathBuf,
    /// Where the controller listener binds; `None` runs without one, which only a single voter
    /// with no observers can do (the default single-node broker).
    pub listen: Option<SocketAddr>,
    /// For an observer: the `host:port` voters use to reach this node's listener (default: the
    /// `listen` address).
    pub advertised: Option<String>,
    /// `controller.quorum.voters`: voter id → `host:port`, as this node reaches them.
    pub voters: BTreeMap<u64, String>,
    /// Voter or observer.
    pub role: Role,
    /// Milliseconds: a follower that hears no leader for a random time in
    /// `[election_timeout_min_ms, election_timeout_max_ms)` starts an election.
    pub election_timeout_min_ms: u64,
    /// Milliseconds: see `election_timeout_min_ms`.
    pub election_timeout_max_ms: u64,
    /// Milliseconds: how often the leader sends heartbeats (AppendEntries) to every node. In
    /// openraft 0.9 this is also the deadline of every AppendEntries round trip, the follower's
    /// fdatasync included (a request that misses it is retried), so it must exceed that.
    pub heartbeat_interval_ms: u64,
    /// Entries: a snapshot is taken after this many entries since the last one.
    pub snapshot_every_entries: u64,
    /// Entries: how many entries already in a snapshot are kept in the log (so a follower just
    /// behind catches up from the log, not a snapshot).
    pub entries_kept_after_snapshot: u64,
    /// Milliseconds: `propose` gives up (outcome unknown) after this long.
    pub propose_timeout_ms: u64,
    /// Mutual TLS on the controller listener, both ends (`None`: plain TCP).
    pub tls: Option<ControllerTlsHandle>,
}

impl QuorumConfig {
    /// A quorum of one: this node is the only voter, with no listener.
    pub fn single_node(node_id: u64, dir: impl Into<PathBuf>) -> QuorumConfig {
        QuorumConfig::new(
            node_id,
            dir,
            Role::Voter,
            BTreeMap::from([(node_id, String::new())]),
            None,
        )
    }

    /// A node of a quorum with the given voters, with default timings.
    pub fn new(
        node_id: u64,
        dir: impl Into<PathBuf>,
        role: Role,
        voters: BTreeMap<u64, String>,
        listen: Option<SocketAddr>,
    ) -> QuorumConfig {
        QuorumConfig {
            node_id,
            dir: dir.into(),
            listen,
            advertised: None,
            voters,
            role,
            // Kafka's controller.quorum.election.timeout.ms is 1000.
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            heartbeat_interval_ms: 200,
            snapshot_every_entries: 10_000,
            entries_kept_after_snapshot: 1_000,
            propose_timeout_ms: 10_000,
            tls: None,
        }
    }

    /// The address observers give voters to reach them.
    pub(crate) fn advertised_addr(&self) -> Option<String> {
        self.advertised
            .clone()
            .or_else(|| self.listen.map(|a| a.to_string()))
    }

    /// Checks the configuration; the error names the setting.
    pub fn validate(&self) -> Result<(), QuorumError> {
        let bad = |m: String| Err(QuorumError::Config(m));
        if self.voters.is_empty() || self.voters.len() > VOTERS_MAX {
            return bad(format!(
                "controller.quorum.voters must name 1 to {VOTERS_MAX} voters, not {}",
                self.voters.len()
            ));
        }
        let alone = self.voters.len() == 1 && self.role == Role::Voter;
        for (id, addr) in &self.voters {
            if addr.len() > NODE_ADDR_BYTES_MAX || (!alone && addr.is_empty()) {
                return bad(format!(
                    "controller.quorum.voters: voter {id} needs a host:port of at most {NODE_ADDR_BYTES_MAX} bytes"
                ));
            }
        }
        match self.role {
            Role::Voter if !self.voters.contains_key(&self.node_id) => {
                return bad(format!(
                    "node.id {} has the controller role but is not in controller.quorum.voters",
                    self.node_id
                ))
            }
            Role::Observer if self.voters.contains_key(&self.node_id) => {
                return bad(format!(
                    "node.id {} is in controller.quorum.voters but has only the broker role",
                    self.node_id
                ))
            }
            _ => {}
        }
        if !alone && self.listen.is_none() {
            return bad("a quorum of more than one node needs a controller listener".into());
        }
        if self.role == Role::Observer {
            let wildcard =
                self.advertised.is_none() && self.listen.is_some_and(|a| a.ip().is_unspecified());
            match self.advertised_addr() {
                Some(a) if !wildcard && !a.is_empty() && a.len() <= NODE_ADDR_BYTES_MAX => {}
                _ => {
                    return bad(
                        "an observer needs an advertised controller address (not a wildcard)"
                            .into(),
                    )
                }
            }
        }
        if self.heartbeat_interval_ms == 0
            || self.election_timeout_min_ms <= self.heartbeat_interval_ms
            || self.election_timeout_max_ms <= self.election_timeout_min_ms
        {
            return bad(format!(
                "need 0 < heartbeat ({}) < election timeout min ({}) < max ({}) milliseconds",
                self.heartbeat_interval_ms,
                self.election_timeout_min_ms,
                self.election_timeout_max_ms
            ));
        }
        if self.snapshot_every_entries == 0 || self.propose_timeout_ms == 0 {
            return bad("snapshot_every_entries and propose_timeout_ms must be positive".into());
        }
        Ok(())
    }

    /// This node's own election timeout range `[lo, hi)` in milliseconds.
    ///
    /// openraft 0.9 draws one random election timeout per node at start and checks it on a tick
    /// of 1.5 heartbeat intervals, so two voters whose draws fall in the same tick time out
    /// together after every failed election and split the vote forever (seen in tests: two
    /// candidates in lock-step for 10 s after the leader stopped). So each voter gets its own band
    /// of the configured range, by its rank among the voter ids, and draws only in the first
    /// quarter of it: any two voters' timeouts then differ by more than a tick plus 50 ms. When
    /// the configured range is too narrow for that many voters, the bands extend past
    /// `election_timeout_max_ms`.
    pub fn election_band_ms(&self) -> (u64, u64) {
        let n = self.voters.len().max(1) as u64;
        let rank = self
            .voters
            .keys()
            .position(|id| *id == self.node_id)
            .unwrap_or(0) as u64;
        let tick = self.heartbeat_interval_ms.saturating_mul(3) / 2;
        // A band's unused three quarters must exceed a tick plus 50 ms.
        let step_min = (tick.saturating_add(50)).saturating_mul(4).div_ceil(3);
        let step = (self
            .election_timeout_max_ms
            .saturating_sub(self.election_timeout_min_ms)
            / n)
            .max(step_min);
        let lo = self
            .election_timeout_min_ms
            .saturating_add(rank.saturating_mul(step));
        (lo, lo.saturating_add((step / 4).max(1)))
    }

    /// openraft's configuration for this node.
    pub(crate) fn raft_config(&self) -> Result<openraft::Config, QuorumError> {
        let (election_lo, election_hi) = self.election_band_ms();
        let config = openraft::Config {
            cluster_name: "millrace-controller".into(),
            election_timeout_min: election_lo,
            election_timeout_max: election_hi,
            heartbeat_interval: self.heartbeat_interval_ms,
            // Sending and installing the last snapshot chunk includes the follower's
            // StateMachine::restore and an fsync: allow seconds, not openraft's 200 ms.
            install_snapshot_timeout: 10_000.max(self.election_timeout_max_ms),
            max_payload_entries: APPEND_ENTRIES_PER_RPC_MAX,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every_entries),
            snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES as u64,
            max_in_snapshot_log_to_keep: self.entries_kept_after_snapshot,
            // An observer never starts an election (it is a learner; this is belt and braces).
            enable_elect: self.role == Role::Voter,
            ..Default::default()
        };
        config
            .validate()
            .map_err(|e| QuorumError::Config(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voters() -> BTreeMap<u64, String> {
        (1..=3)
            .map(|i| (i, format!("127.0.0.1:{}", 9000 + i)))
            .collect()
    }

    fn check(c: QuorumConfig, ok: bool) {
        assert_eq!(c.validate().is_ok(), ok, "{c:?}");
    }

    #[test]
    fn validation() {
        let listen = Some("127.0.0.1:9001".parse().unwrap());
        check(QuorumConfig::single_node(1, "/d"), true);
        check(
            QuorumConfig::new(1, "/d", Role::Voter, voters(), listen),
            true,
        );
        check(
            QuorumConfig::new(1, "/d", Role::Voter, voters(), None),
            false,
        );
        check(
            QuorumConfig::new(4, "/d", Role::Voter, voters(), listen),
            false,
        );
        check(
            QuorumConfig::new(4, "/d", Role::Observer, voters(), listen),
            true,
        );
        check(
            QuorumConfig::new(2, "/d", Role::Observer, voters(), listen),
            false,
        );
        check(
            QuorumConfig::new(1, "/d", Role::Voter, BTreeMap::new(), listen),
            false,
        );
        let mut many = voters();
        many.insert(2, String::new());
        check(QuorumConfig::new(1, "/d", Role::Voter, many, listen), false);
        let mut c = QuorumConfig::single_node(1, "/d");
        c.election_timeout_max_ms = c.election_timeout_min_ms;
        check(c, false);
        assert!(QuorumConfig::single_node(1, "/d").raft_config().is_ok());
    }

    #[test]
    fn each_voter_times_out_in_its_own_band() {
        let listen = Some("127.0.0.1:9001".parse().unwrap());
        for n in 1..=VOTERS_MAX as u64 {
            for (min, max, hb) in [(1000, 2000, 100), (500, 1000, 100), (150, 300, 50)] {
                let voters: BTreeMap<u64, String> =
                    (1..=n).map(|i| (i * 10, format!("h:{i}"))).collect();
                let mut bands = Vec::new();
                for id in voters.keys() {
                    let mut c = QuorumConfig::new(*id, "/d", Role::Voter, voters.clone(), listen);
                    c.election_timeout_min_ms = min;
                    c.election_timeout_max_ms = max;
                    c.heartbeat_interval_ms = hb;
                    c.validate().unwrap();
                    let rc = c.raft_config().unwrap();
                    assert!(rc.election_timeout_min >= min);
                    bands.push(c.election_band_ms());
                }
                let tick = hb * 3 / 2;
                for w in bands.windows(2) {
                    assert!(w[0].0 < w[0].1 && w[0].1 <= w[1].0);
                    assert!(w[1].0 - w[0].1 > tick + 49, "{n} voters, {bands:?}");
                }
            }
        }
    }
}
