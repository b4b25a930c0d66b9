//! Millrace's seeded, deterministic simulator of the controller and partition replication (issue
//! 14, item 5; TigerBeetle's VOPR and FoundationDB's simulation in spirit).
//!
//! What it is: a single-threaded world of N brokers, one metadata quorum and the clients, over a
//! simulated network, disk and clock, all driven by one seed. It runs the *real* state machines —
//! [`millrace_controller::Controller`] as the active controller,
//! [`millrace_cluster::image::MetadataImage`] on every broker,
//! [`millrace_replication::Partition`] (with its `PartitionReplica` and divergence checks) for
//! every hosted partition over a simulated log — wired the way the broker wires them, and checks
//! the invariants of [`check`] after every step.
//!
//! Where it sits: a test tool. Nothing in the broker depends on it; it depends on the pure
//! crates only (no tokio, no I/O, no clock).
//!
//! Invariant: a seed determines the run exactly — same seed, same steps, same digest — so a
//! failing seed is its own reproduction ([`run`] with tracing prints every step).
//!
//! What it deliberately does not model: the bytes of record batches (a record is a leader epoch
//! and a unique value), idempotent producers, consumers and groups, reassignment, and the Raft
//! protocol of the metadata quorum (modelled as one linearizable log with leader changes and lost
//! or unanswered proposals; see [`quorum`]). docs/reliability.md ("Simulation") describes the
//! model, the faults, the invariants and how to rerun a seed.
//!
//! Read first: [`world`] (the loop), [`broker`] (the wiring under test), [`check`] (the
//! invariants), [`faults`].

pub mod broker;
pub mod check;
pub mod client;
pub mod config;
pub mod faults;
pub mod limits;
pub mod log;
pub mod net;
pub mod quorum;
pub mod rng;
pub mod world;

pub use config::{Broken, SimConfig};
pub use world::{Failure, Outcome, Stats};

/// Runs one world; with `tracing`, every step is printed to stderr.
pub fn run(cfg: SimConfig, tracing: bool) -> Outcome {
    if let Err(e) = cfg.validate() {
        return Outcome {
            seed: cfg.seed,
            stats: Stats::default(),
            digest: 0,
            failure: Some(Failure {
                seed: cfg.seed,
                broken: cfg.broken,
                step: 0,
                now_ms: 0,
                what: format!("invalid configuration: {e}"),
            }),
        };
    }
    world::World::new(cfg, tracing).run()
}

/// Runs seed `seed` with the settings it draws.
pub fn run_seed(seed: u64, tracing: bool) -> Outcome {
    run(SimConfig::from_seed(seed), tracing)
}
