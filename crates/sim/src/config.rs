//! One run's settings, all drawn from its seed: the cluster's shape, the timings, the network's
//! behaviour and the fault rate. Drawn from a stream of their own, so that a change to the
//! simulation's logic does not change which cluster a seed builds.

use millrace_controller::limits::DECISION_ENTRY_BYTES_TARGET;

use crate::limits::{BROKERS_MAX, ENTRY_BYTES_SMALL_MAX, ENTRY_BYTES_SMALL_MIN, PARTITIONS_MAX};
use crate::rng::Rng;

/// A deliberately broken setting, to prove that the checks fire (a checker that never fires
/// proves nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// `unclean.leader.election.enable=true` with `min.insync.replicas=1`: an out-of-sync replica
    /// may be elected and acknowledged writes get lost.
    UncleanElection,
    /// Followers fetch again before what they appended is durable, so the leader counts offsets a
    /// power loss takes back: the high watermark can pass the ISR's durable log end.
    FetchBeforeDurable,
    /// A restarted broker leads what its freshly replayed image says it leads, without waiting to
    /// see *this incarnation* registered and unfenced: two incarnations lead one leader epoch.
    LeadWithoutRegistration,
}

/// The settings of one run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub brokers: i32,
    /// Brokers `1..=voters` are the metadata quorum's voters.
    pub voters: i32,
    pub partitions: i32,
    pub replication_factor: i16,
    pub min_insync_replicas: usize,
    /// broker.session.timeout.ms
    pub session_timeout_ms: i64,
    /// broker.heartbeat.interval.ms
    pub heartbeat_interval_ms: i64,
    /// replica.lag.time.max.ms
    pub replica_lag_time_max_ms: i64,
    /// How long faults are injected; then everything heals and the run drains.
    pub fault_phase_ms: i64,
    /// Mean time between two injected faults.
    pub fault_mean_interval_ms: i64,
    /// A producer's pause between two requests (uniform in this range).
    pub produce_interval_ms: (i64, i64),
    /// One-way network delay of a link (each directed link draws its base from this range).
    pub link_delay_ms: (i64, i64),
    /// Extra random delay per message (reorders messages on a link).
    pub jitter_ms: i64,
    /// Chance a message is lost.
    pub loss_per_mille: u32,
    /// Delay from an append to the group-commit fsync that covers it (`log.flush.policy=batch`).
    pub flush_delay_ms: (i64, i64),
    /// Delay of a metadata commit reaching a broker.
    pub metadata_delay_ms: (i64, i64),
    /// Time the quorum takes to commit one entry.
    pub commit_latency_ms: (i64, i64),
    /// Brokers restarted after a crash register with `clean_shutdown=false` (what a broker whose
    /// acknowledged writes were not all fsynced must say, KIP-966). Off by default: with
    /// `log.flush.policy=batch` the high watermark counts only durable log ends, so every committed
    /// record survives a power loss and the restarted broker may stay in the ELR.
    pub unclean_restarts: bool,
    /// Bytes: the quorum's bound on one metadata entry. Most seeds use the controller's own
    /// (`DECISION_ENTRY_BYTES_TARGET`); the rest a bound a few records wide, so that registrations,
    /// fencings, elections and topic creation become metadata transactions of several entries
    /// that a failover can cut (split by the service's own `entries_of`).
    pub entry_bytes_max: usize,
    /// How often (‰ of `AlterPartitions` requests, during the fault phase) the active controller
    /// answers with an internal error: before deciding (nothing committed), after committing
    /// (the broker cannot tell), or for the whole request.
    pub alter_partition_internal_per_mille: u32,
    pub broken: Option<Broken>,
}

impl SimConfig {
    /// The settings seed `seed` runs with.
    pub fn from_seed(seed: u64) -> Self {
        let mut r = Rng::new(seed ^ 0x5EED_C0DE_F00D_0001);
        let brokers = match r.below(10) {
            0 => 5,
            1 | 2 => 4,
            _ => 3,
        };
        let replication_factor = if r.chance(150) { 2 } else { 3 };
        let min_insync_replicas = if r.chance(150) { 1 } else { 2 };
        let session_timeout_ms = [3_000, 4_500, 6_000, 9_000][r.below(4) as usize];
        let heartbeat_interval_ms = session_timeout_ms * 2 / 9;
        let link_lo = r.range(1, 5);
        let link_hi = link_lo + r.range(0, 20);
        let flush_lo = r.range(1, 10);
        // Half the seeds have a slow disk: a wide window in which appends are not yet durable.
        let flush_spread = if r.chance(500) {
            r.range(0, 20)
        } else {
            r.range(20, 250)
        };
        Self {
            seed,
            brokers,
            voters: brokers.min(3),
            partitions: r.range(1, 3) as i32,
            replication_factor,
            min_insync_replicas,
            session_timeout_ms,
            heartbeat_interval_ms,
            replica_lag_time_max_ms: r.range(2_000, 8_000),
            fault_phase_ms: r.range(20_000, 40_000),
            fault_mean_interval_ms: r.range(700, 2_500),
            produce_interval_ms: (r.range(20, 80), r.range(100, 400)),
            link_delay_ms: (link_lo, link_hi),
            jitter_ms: r.range(0, 15),
            loss_per_mille: [0, 0, 5, 20, 50][r.below(5) as usize],
            flush_delay_ms: (flush_lo, flush_lo + flush_spread),
            metadata_delay_ms: (1, r.range(5, 80)),
            commit_latency_ms: (1, r.range(3, 30)),
            unclean_restarts: r.chance(100),
            // Drawn last: the draws above keep building the clusters they built before.
            entry_bytes_max: if r.chance(400) {
                usize::try_from(r.range(ENTRY_BYTES_SMALL_MIN, ENTRY_BYTES_SMALL_MAX))
                    .unwrap_or(DECISION_ENTRY_BYTES_TARGET)
            } else {
                DECISION_ENTRY_BYTES_TARGET
            },
            // Drawn after the entry bound, for the same reason.
            alter_partition_internal_per_mille: if r.chance(300) {
                r.range(50, 400) as u32
            } else {
                0
            },
            broken: None,
        }
    }

    /// The same seed with a deliberately broken setting.
    pub fn broken(seed: u64, broken: Broken) -> Self {
        let mut c = Self::from_seed(seed);
        c.broken = Some(broken);
        match broken {
            Broken::UncleanElection => {
                c.min_insync_replicas = 1;
                c.replication_factor = 3;
            }
            Broken::FetchBeforeDurable | Broken::LeadWithoutRegistration => {}
        }
        c
    }

    /// Checks the shape against the limits.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=BROKERS_MAX).contains(&self.brokers) {
            return Err(format!(
                "{} brokers is outside 1..={BROKERS_MAX}",
                self.brokers
            ));
        }
        if !(1..=PARTITIONS_MAX).contains(&self.partitions) {
            return Err(format!(
                "{} partitions is outside 1..={PARTITIONS_MAX}",
                self.partitions
            ));
        }
        if i32::from(self.replication_factor) > self.brokers || self.replication_factor < 1 {
            return Err(format!(
                "replication factor {} does not fit {} brokers",
                self.replication_factor, self.brokers
            ));
        }
        if self.voters < 1 || self.voters > self.brokers {
            return Err(format!(
                "{} voters for {} brokers",
                self.voters, self.brokers
            ));
        }
        Ok(())
    }

    /// Whether unclean leader election is on for the topic.
    pub fn unclean_election(&self) -> bool {
        self.broken == Some(Broken::UncleanElection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drawn_shape_is_valid() {
        for seed in 0..2_000 {
            let c = SimConfig::from_seed(seed);
            assert_eq!(c.validate(), Ok(()), "seed {seed}");
        }
    }
}
