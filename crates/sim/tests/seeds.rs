//! Goal: every seed that ever failed while the simulator was built passes now — each entry names
//! the bug it found and the fix (scripted reproductions are in `scenarios.rs`).

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
