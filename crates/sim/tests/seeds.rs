//! Goal: every seed that ever failed while the simulator was built passes now — each entry names
//! the bug it found. A seed replays the run it found only with the simulator of its day (the
//! commit that fixed the bug names it); as the simulator grows, the same seed explores another
//! run, so every bug also has a scripted reproduction in `scenarios.rs` that does not drift.

use millrace_sim::run_seed;

/// (seed, what it found).
const SEEDS: &[(u64, &str)] = &[
    (
        1,
        "livelock: a follower that began a leader epoch and appended nothing diverged at its own \
         log end forever (ReplicaLog::truncate_to must drop epochs at the log end)",
    ),
    (7, "same livelock"),
    (9, "same livelock"),
    (19, "same livelock"),
    (
        1022,
        "an ISR expansion whose answer was lost (committed by the controller) stopped counting \
         for the HW: the leader's HW passed a committed ISR member's durable log end; and a dead \
         follower flapped in and out of the ISR from its stale fetch state",
    ),
    (
        60,
        "livelock: followers whose leader epochs the leader never saw (its log restarted past \
         them) truncated to their own log end and asked with the same epoch forever",
    ),
    (
        631,
        "replicas differed below the HW: an election from the ELR reached min ISR but left the \
         other ELR member eligible; elected later, its stale tail replaced committed records",
    ),
    (
        6194,
        "livelock: a follower that knew no epoch as old as the leader's diverging epoch truncated \
         to the leader's end offset (its own log end) and kept its newer epoch",
    ),
];

#[test]
fn recorded_seeds_pass() {
    let mut failed = Vec::new();
    for &(seed, found) in SEEDS {
        let outcome = run_seed(seed, false);
        if let Some(f) = outcome.failure {
            failed.push(format!("{f}\n  (this seed once found: {found})"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// (seed, the decision a failover cuts between two of its entries). Each runs with a scaled-down
/// metadata entry bound, so its registrations and fencings are metadata transactions of several
/// entries, and the active controller loses its quorum after the first entry of one of them: the
/// next controller must abort the open transaction before deciding anything (without the abort,
/// the next decision begins or ends inside it and the simulator's quorum fails the run).
const CUT_DECISIONS: &[(u64, &str)] = &[
    (1471, "a fencing (FenceBroker and 3 partition changes)"),
    (1475, "a fencing (FenceBroker and 3 partition changes)"),
    (
        2371,
        "a fencing (FenceBroker and 3 partition changes), then an unfencing (UnfenceBroker and 3 \
         elections)",
    ),
];

#[test]
fn a_controller_lost_between_two_entries_of_a_decision_leaves_nothing_half_done() {
    for &(seed, what) in CUT_DECISIONS {
        let outcome = run_seed(seed, false);
        if let Some(f) = outcome.failure {
            panic!("{f}\n  (this seed cuts {what})");
        }
        assert!(
            outcome.stats.decisions_cut >= 1 && outcome.stats.transactions_aborted >= 1,
            "seed {seed} no longer cuts a decision between two entries ({what}): {}; pick a new \
             one with MILLRACE_SIM_SEEDS and the stats line of tests/sim.rs",
            outcome.stats
        );
    }
}
