//! Goal: every seed of the simulator holds every invariant — `MILLRACE_SIM_SEEDS` seeds (default
//! `SEEDS_DEFAULT`) starting at `MILLRACE_SIM_FIRST_SEED` (default 0), on as many threads as the
//! machine has cores (each seed single-threaded and deterministic); `MILLRACE_SIM_SEED=S` reruns
//! one seed with a trace of every step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use millrace_sim::limits::SEEDS_DEFAULT;
use millrace_sim::{run_seed, Outcome, Stats};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs `count` seeds from `first` on the machine's cores; returns every outcome's stats and
/// the failures.
fn run_many(first: u64, count: u64) -> (Stats, Vec<Outcome>) {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8) as u64;
    let next = AtomicU64::new(0);
    let total = Mutex::new(Stats::default());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.min(count.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let outcome = run_seed(first + i, false);
                total
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .add(&outcome.stats);
                if outcome.failure.is_some() {
                    failures
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(outcome);
                }
            });
        }
    });
    let mut failures = failures
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    failures.sort_by_key(|o| o.seed);
    (
        total.into_inner().unwrap_or_else(PoisonError::into_inner),
        failures,
    )
}

#[test]
fn every_seed_holds_every_invariant() {
    if let Some(seed) = env_u64("MILLRACE_SIM_SEED") {
        let outcome = run_seed(seed, true);
        eprintln!("seed {seed}: {:?}", outcome.stats);
        if let Some(f) = outcome.failure {
            panic!("{f}");
        }
        return;
    }
    let count = env_u64("MILLRACE_SIM_SEEDS").unwrap_or(SEEDS_DEFAULT);
    let first = env_u64("MILLRACE_SIM_FIRST_SEED").unwrap_or(0);
    let started = Instant::now();
    let (stats, failures) = run_many(first, count);
    eprintln!(
        "simulated {count} seeds from {first} in {:.1} s: {stats}",
        started.elapsed().as_secs_f64()
    );
    for f in &failures {
        if let Some(f) = &f.failure {
            eprintln!("{f}");
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} seeds failed (first: {:?})",
        failures.len(),
        failures.first().and_then(|o| o.failure.clone())
    );
}

/// A seed is its own reproduction: two runs of it take the same steps at the same times and end
/// with the same committed records and acknowledgements.
#[test]
fn a_seed_replays_exactly() {
    for seed in [0, 1, 60, 631, 1022] {
        let a = run_seed(seed, false);
        let b = run_seed(seed, false);
        assert_eq!(a.digest, b.digest, "seed {seed}");
        assert_eq!(a.stats, b.stats, "seed {seed}");
        assert_eq!(a.failure, b.failure, "seed {seed}");
    }
    assert_ne!(run_seed(0, false).digest, run_seed(1, false).digest);
}
