//! Every bound and timing the simulator uses, as named constants. Timings mirror the broker's
//! (Kafka's defaults where the broker has none of its own) so that a schedule that breaks here
//! would break a real cluster the same way.

/// Seeds: how many seeds `cargo test -p millrace-sim` runs without `MILLRACE_SIM_SEEDS` (issue 14
/// asks for at least 2,000 per CI run). Read by `tests/sim.rs`.
pub const SEEDS_DEFAULT: u64 = 2_000;

/// Steps: most events one seed may process. A run that needs more is in a livelock (an event
/// that schedules itself without end) and fails with that reason. Enforced by `World::run`.
pub const STEPS_MAX: u64 = 2_000_000;

/// Brokers: most brokers one world holds (3 usually, sometimes 4 or 5). Checked by
/// `SimConfig::validate`.
pub const BROKERS_MAX: i32 = 5;

/// Metadata quorum voters: the first brokers are the controller voters (combined mode,
/// replication-notes §7: brokers 1–3 are voters, more brokers are observers).
pub const VOTERS_MAX: i32 = 3;

/// Partitions of the simulated topic (each with its own producer). Checked by
/// `SimConfig::validate`.
pub const PARTITIONS_MAX: i32 = 4;

/// Node ids of clients: producer of partition p is `PRODUCER_NODE_BASE + p`; the admin client is
/// `ADMIN_NODE`. Both above any broker id.
pub const PRODUCER_NODE_BASE: i32 = 1_000;
pub const ADMIN_NODE: i32 = 2_000;
const _: () = assert!(BROKERS_MAX < PRODUCER_NODE_BASE);
const _: () = assert!(PRODUCER_NODE_BASE + PARTITIONS_MAX < ADMIN_NODE);

/// Records: most records one fetch answer carries per partition (Kafka bounds it in bytes with
/// `replica.fetch.max.bytes`); a follower far behind needs several rounds. Enforced by the
/// leader's fetch handler.
pub const FETCH_RECORDS_MAX: usize = 16;

/// Records in one produce request (1..=this). Enforced by the producer.
pub const PRODUCE_RECORDS_MAX: i64 = 3;

/// Controller requests queued on the active controller; more are refused at once (the service's
/// `CONTROLLER_QUEUE_MAX`, scaled to a handful of brokers). Enforced by `World::controller_request`.
pub const CONTROLLER_QUEUE_MAX: usize = 64;

/// Milliseconds a broker waits for the controller's answer to a registration, heartbeat or
/// AlterPartition (the lifecycle's request timeout), following controller moves meanwhile.
pub const CONTROLLER_REQUEST_TIMEOUT_MS: i64 = 3_000;

/// Milliseconds a broker waits before registering again after a refused registration (the
/// lifecycle's `FAST_HEARTBEAT_MS * 4`).
pub const REGISTER_RETRY_MS: i64 = 200;

/// Milliseconds a leader holds a follower fetch that finds no new records
/// (`replica.fetch.wait.max.ms`, Kafka's default).
pub const FETCH_MAX_WAIT_MS: i64 = 500;

/// Milliseconds a follower waits for a fetch answer before it sends the next one.
pub const FETCH_TIMEOUT_MS: i64 = 2_000;
const _: () = assert!(FETCH_TIMEOUT_MS > FETCH_MAX_WAIT_MS);

/// Milliseconds a follower waits after a fetch in which every partition failed
/// (`replica.fetch.backoff.ms`, shortened to keep runs short).
pub const FETCH_BACKOFF_MS: i64 = 200;

/// Milliseconds between a broker's replica ticks (ISR shrink checks, AlterPartition retries).
pub const REPLICA_TICK_MS: i64 = 100;

/// Milliseconds between a broker's high-watermark checkpoints (the store's maintenance writes
/// them; Kafka's `replica.high.watermark.checkpoint.interval.ms` is 5 s).
pub const HW_CHECKPOINT_MS: i64 = 1_000;

/// Milliseconds before a broker that could not reach the quorum tries to catch up on metadata again.
pub const METADATA_RETRY_MS: i64 = 100;

/// Milliseconds an `acks=all` produce waits in the leader's purgatory before REQUEST_TIMED_OUT
/// (`request.timeout.ms`, shortened to the scale of a simulated run).
pub const PRODUCE_TIMEOUT_MS: i64 = 1_500;

/// Milliseconds a client waits for any answer; past it the outcome is unknown (Jepsen's `info`).
/// A crashed broker refuses the connection at once instead.
pub const CLIENT_REQUEST_TIMEOUT_MS: i64 = 2_000;
const _: () = assert!(CLIENT_REQUEST_TIMEOUT_MS > PRODUCE_TIMEOUT_MS);

/// Milliseconds a client backs off after an error before it asks for metadata again.
pub const CLIENT_BACKOFF_MS: i64 = 100;

/// Milliseconds between the quorum's health checks (is the active controller alive, unpaused and
/// in touch with a majority of voters?).
pub const QUORUM_CHECK_MS: i64 = 100;

/// Milliseconds: Raft's election timeout range: how long an unhealthy active controller keeps
/// its place, and how long an election takes.
pub const ELECTION_TIMEOUT_MIN_MS: i64 = 300;
pub const ELECTION_TIMEOUT_MAX_MS: i64 = 1_500;

/// Milliseconds between checks of whether the healed cluster has converged.
pub const DRAIN_CHECK_MS: i64 = 250;

/// Milliseconds the healed cluster gets to converge (leaders, full ISRs, equal logs and images)
/// before the run fails for lack of progress. Longer than a session timeout plus the slowest
/// restart, so that a broker refused as a duplicate registration is back in time.
pub const DRAIN_MAX_MS: i64 = 90_000;

/// Bytes: the range a seed with a scaled-down metadata entry bound draws it from. The smallest
/// must hold the largest record the simulation writes with both transaction markers (a
/// `RegisterBroker` or `Topic` record, ~300 bytes); the largest holds a few partition changes.
pub const ENTRY_BYTES_SMALL_MIN: i64 = 560;
pub const ENTRY_BYTES_SMALL_MAX: i64 = 1_200;
