//! `millrace-bench`: drives any Kafka-compatible broker with librdkafka and reports throughput,
//! latency percentiles (HDR histogram), and — given the broker's pid — its CPU seconds and RSS.
//!
//! Modes: `produce`, `consume`, `e2e` (produce and consume in one process; latency is from send to
//! receipt), `trickle` (one consumer of every partition of a many-partition topic while a few
//! records a second arrive: the broker's cost of serving idle fetches), and `first-produce` (time
//! from a broker's process start to its first acknowledged produce). Output: a human summary, or one JSON line per run with `--json`; a progress line on
//! stderr when it is a terminal.

mod broker_stats;
mod report;
mod workloads;

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Load generator for Kafka-compatible brokers.
#[derive(Debug, Parser)]
#[command(name = "millrace-bench", version)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Produce messages as fast as possible, or at --rate.
    Produce(ProduceArgs),
    /// Consume a topic from the beginning.
    Consume(ConsumeArgs),
    /// Produce and consume at once; latency is send → receipt.
    E2e(ProduceArgs),
    /// One consumer of every partition while a few records a second are spread over them.
    Trickle(TrickleArgs),
    /// Start a broker command and time its first acknowledged produce.
    FirstProduce(FirstProduceArgs),
}

/// Options every mode shares.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Broker address.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Topic (created with --partitions if missing).
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Replication factor of the topic when it is created.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// The broker's pid, for CPU seconds and peak RSS.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// A label copied into the report (e.g. "W1 millrace").
    #[arg(long, default_value = "")]
    pub label: String,
    /// One JSON line instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Extra librdkafka properties, name=value (repeatable).
    #[arg(short = 'X', value_name = "NAME=VALUE")]
    pub extra: Vec<String>,
}

#[derive(Debug, Args, Clone)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub common: Common,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub message_size: usize,
    /// Number of messages (default 100000 unless --duration is given).
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// acks: 0, 1 or all.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// none, gzip, snappy, lz4, zstd.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// linger.ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u32,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: u32,
    /// Target rate in MB/s (fixed load for latency); unlimited when absent.
    #[arg(long)]
    pub rate_mb: Option<f64>,
    /// Enable idempotence (needs InitProducerId).
    #[arg(long)]
    pub idempotence: bool,
    /// Before the clock starts, write one record to every partition and wait until all are
    /// acknowledged, so topic creation and leader election are outside the timed run; how long
    /// that took is reported as `topic_ready_seconds`.
    #[arg(long)]
    pub prime: bool,
}

#[derive(Debug, Args, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Stop after this many bytes of values (default: everything up to the high watermark at start).
    #[arg(long)]
    pub bytes: Option<u64>,
    /// Stop after this many messages.
    #[arg(long)]
    pub count: Option<u64>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
}

#[derive(Debug, Args, Clone)]
pub struct TrickleArgs {
    #[command(flatten)]
    pub common: Common,
    /// Records per second, spread round-robin over the partitions.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Seconds of the measured phase.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Record size in bytes.
    #[arg(long, default_value_t = 100)]
    pub message_size: usize,
}

#[derive(Debug, Args, Clone)]
pub struct FirstProduceArgs {
    /// Broker address the command will listen on.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    #[arg(long, default_value = "")]
    pub label: String,
    #[arg(long)]
    pub json: bool,
    /// The broker command line, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let report = match cli.mode {
        Mode::Produce(args) => workloads::produce(&args, false)?,
        Mode::E2e(args) => workloads::produce(&args, true)?,
        Mode::Consume(args) => workloads::consume(&args)?,
        Mode::Trickle(args) => workloads::trickle(&args)?,
        Mode::FirstProduce(args) => workloads::first_produce(&args)?,
    };
    report.print();
    Ok(())
}

/// Seconds as a Duration, refusing nonsense.
pub fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.0, 86_400.0))
}
