//! `millrace`: the broker binary. Reads settings, opens the store and the cluster metadata,
//! starts the group coordinator (creating `__consumer_offsets` if missing; its replay runs in the
//! background), serves Kafka clients, runs background maintenance, and shuts down cleanly on
//! SIGTERM/SIGINT (stop accepting, answer parked group requests, finish in-flight requests, write
//! the group snapshot, flush, write the clean-shutdown marker, exit 0).
//!
//! Exit codes: 0 after a clean stop, 2 for a settings error (one line naming the key) or a data
//! dir whose cluster metadata file is missing while its partition directories contradict each
//! other (one line naming the file and what to do; checked before anything is opened, so nothing
//! is changed), 1 for any other failure to start or stop.
//!
//! Test knob (not a config key): `MILLRACE_TEST_FAIL_SYNC=<text>` makes every fdatasync of a file
//! whose path contains `<text>` fail (`millrace_store::storage::FaultStorage`), so integration
//! tests can drive a failing disk through the real binary.

mod settings;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use millrace_cluster::{
    AdminError, BrokerConfig, BrokerEndpoint, Cluster, MetadataError, NewTopic, LEADER_EPOCH,
};
use millrace_frontend::BrokerContext;
use millrace_groups::{
    CoordinatorConfig, DurableGroupLog, GroupConfig, GroupCoordinator, OFFSETS_TOPIC,
};
use millrace_store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::settings::{Cli, Settings};

/// Exit code for bad settings (as `sysexits`' EX_USAGE is to shells: "you asked for something wrong").
const EXIT_BAD_SETTINGS: u8 = 2;
/// Exit code for a data dir the broker will not guess about (missing metadata file, contradicting
/// partition directories): like bad settings, the operator must act before a retry can work.
const EXIT_AMBIGUOUS_DATA_DIR: u8 = 2;
/// Environment variable of the fsync-failure test knob (see the module comment).
const FAIL_SYNC_KNOB: &str = "MILLRACE_TEST_FAIL_SYNC";
/// Upper bound between two maintenance ticks (retention, compaction, time-based rolls).
const MAINTENANCE_TICK_MAX: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let fail_sync_of = std::env::var(FAIL_SYNC_KNOB).ok();
    let env = std::env::vars().filter(|(k, _)| k != FAIL_SYNC_KNOB);
    let settings = match Settings::resolve(&cli, env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("millrace: {e}");
            return ExitCode::from(EXIT_BAD_SETTINGS);
        }
    };
    if let Err(e) = millrace_cluster::node::check_data_dir(&settings.config, &settings.data_dir) {
        eprintln!("millrace: {e}");
        return ExitCode::from(EXIT_AMBIGUOUS_DATA_DIR);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("millrace: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings, fail_sync_of, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e)
            if matches!(
                e.downcast_ref::<AdminError>(),
                Some(AdminError::Metadata(MetadataError::Ambiguous { .. }))
            ) =>
        {
            error!("{e:#}");
            eprintln!("millrace: {e:#}");
            ExitCode::from(EXIT_AMBIGUOUS_DATA_DIR)
        }
        Err(e) => {
            error!("{e:#}");
            eprintln!("millrace: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = std::env::var("MILLRACE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the broker");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs a broker until `shutdown` resolves. The trigger is a parameter so tests can pass their own.
async fn run(
    settings: Settings,
    fail_sync_of: Option<String>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let config = settings.config.clone();
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("cannot create data dir {}", settings.data_dir.display()))?;
    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let bound = listener.local_addr().context("listener address")?;
    let (host, port) = settings.advertised.clone().unwrap_or_else(|| {
        let ip = bound.ip();
        let host = if ip.is_unspecified() {
            warn!("listening on a wildcard address; advertising 127.0.0.1 (set --advertised-listener)");
            "127.0.0.1".to_string()
        } else {
            ip.to_string()
        };
        (host, bound.port())
    });

    let store_config = StoreConfig {
        data_dir: settings.data_dir.clone(),
        flush_policy: config.flush_policy(),
        flush_interval: config.flush_batch_interval(),
        max_open_files: config.max_open_files(),
        high_watermark_follows_durable: true,
    };
    let store = match fail_sync_of {
        None => Store::open(store_config),
        Some(text) => {
            warn!(knob = FAIL_SYNC_KNOB, files = %text, "test knob: every fdatasync of matching files fails");
            Store::open_with_storage(
                store_config,
                Arc::new(millrace_store::storage::FaultStorage::failing_sync_of(text)),
            )
        }
    }
    .with_context(|| format!("cannot open the store in {}", settings.data_dir.display()))?;
    let endpoint = BrokerEndpoint {
        node_id: config.node_id(),
        host,
        port,
    };
    let cluster = Arc::new(
        Cluster::open(
            config.clone(),
            store.clone(),
            &settings.data_dir,
            endpoint.clone(),
        )
        .context("cannot open the cluster metadata")?,
    );
    let groups = open_group_coordinator(&cluster, &config, &settings.data_dir)
        .context("cannot start the group coordinator")?;
    let token = CancellationToken::new();
    let ctx = Arc::new(BrokerContext {
        cluster: cluster.clone(),
        data_dir: std::fs::canonicalize(&settings.data_dir)
            .unwrap_or_else(|_| settings.data_dir.clone())
            .display()
            .to_string(),
        groups: groups.clone(),
        shutdown: token.clone(),
    });
    let timers = {
        let stop = token.clone();
        tokio::spawn(
            groups
                .clone()
                .run_timers(async move { stop.cancelled().await }),
        )
    };

    let maintenance = spawn_maintenance(
        store.clone(),
        config.retention_check_interval(),
        token.clone(),
    );
    let server = tokio::spawn(millrace_frontend::server::run(listener, ctx));

    info!(
        node_id = endpoint.node_id,
        cluster_id = %cluster.cluster_id(),
        data_dir = %settings.data_dir.display(),
        advertised = %format!("{}:{}", endpoint.host, endpoint.port),
        "millrace ready"
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "millrace ready: node {} listening on {bound} (advertised {}:{}, cluster {})",
        endpoint.node_id,
        endpoint.host,
        endpoint.port,
        cluster.cluster_id()
    );
    let _ = out.flush();
    drop(out);

    shutdown.await;
    info!("shutting down: no new connections; finishing in-flight requests");
    token.cancel();
    // Parked JoinGroup/SyncGroup requests are answered now, so the drain does not wait on them.
    groups.shutdown();
    if let Err(e) = server.await {
        warn!(error = %e, "server task failed");
    }
    let _ = maintenance.await;
    let _ = timers.await;
    {
        let groups = groups.clone();
        tokio::task::spawn_blocking(move || groups.write_final_snapshot())
            .await
            .context("group snapshot task")?;
    }
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .context("store shutdown task")?
        .context("store shutdown")?;
    info!("clean shutdown complete");
    Ok(())
}

/// Creates `__consumer_offsets` if missing (compacted, offsets.topic.num.partitions partitions,
/// offsets.topic.replication.factor capped to the live brokers), builds the coordinator over its
/// partitions and makes it leader of all of them (replays start in the background). The topic's
/// actual partition count wins over the setting, as in Kafka.
fn open_group_coordinator(
    cluster: &Arc<Cluster>,
    config: &BrokerConfig,
    data_dir: &std::path::Path,
) -> anyhow::Result<Arc<GroupCoordinator>> {
    use anyhow::Context;
    let long = |key: &str, fallback: i64| {
        config
            .get(key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let clamp_i32 = |v: i64| v.clamp(0, i64::from(i32::MAX)) as i32;
    if cluster.metadata.topic(OFFSETS_TOPIC).is_none() {
        let brokers = cluster.brokers().len().max(1) as i64;
        let rf = long("offsets.topic.replication.factor", 3).min(brokers);
        let new = NewTopic {
            name: OFFSETS_TOPIC.to_string(),
            partitions: Some(clamp_i32(long("offsets.topic.num.partitions", 50)).max(1)),
            replication_factor: Some(rf as i16),
            assignments: Default::default(),
            configs: [
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("segment.bytes".to_string(), "104857600".to_string()),
            ]
            .into_iter()
            .collect(),
        };
        cluster
            .create_topic(&new)
            .with_context(|| format!("cannot create {OFFSETS_TOPIC}"))?;
    }
    let topic = cluster
        .metadata
        .topic(OFFSETS_TOPIC)
        .with_context(|| format!("{OFFSETS_TOPIC} vanished"))?;
    let mut logs = Vec::new();
    for p in 0..topic.partitions {
        let log = cluster
            .partition_log(OFFSETS_TOPIC, p)
            .with_context(|| format!("{OFFSETS_TOPIC}-{p} has no log"))?;
        logs.push((p, log));
    }
    let group = GroupConfig {
        min_session_timeout_ms: clamp_i32(long("group.min.session.timeout.ms", 6_000)),
        max_session_timeout_ms: clamp_i32(long("group.max.session.timeout.ms", 1_800_000)),
        initial_rebalance_delay_ms: clamp_i32(long("group.initial.rebalance.delay.ms", 3_000)),
        max_size: long("group.max.size", i64::from(i32::MAX)).max(1) as usize,
    };
    let coordinator = CoordinatorConfig {
        group,
        offsets_retention_ms: long("offsets.retention.minutes", 10_080).saturating_mul(60_000),
        snapshot_dir: Some(data_dir.join("group_snapshot.sled")),
    };
    // Single node: this broker leads every offsets partition in LEADER_EPOCH, and a record is
    // committed once durable. Each partition replays in the background; meanwhile its groups get
    // COORDINATOR_LOAD_IN_PROGRESS.
    let commit_timeout = Duration::from_millis(
        u64::try_from(long("offsets.commit.timeout.ms", 5_000).max(1)).unwrap_or(5_000),
    );
    let group_log = Arc::new(DurableGroupLog::new(commit_timeout));
    let groups = GroupCoordinator::new(coordinator, topic.partitions, group_log.clone());
    for (p, log) in logs {
        group_log.lead(p, log.clone(), LEADER_EPOCH);
        groups.become_leader(p, log, LEADER_EPOCH);
    }
    Ok(groups)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Retention, compaction and time-based rolls on a blocking thread, one bounded tick at a time.
fn spawn_maintenance(
    store: Arc<Store>,
    interval: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let tick = interval.min(MAINTENANCE_TICK_MAX);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(tick) => {}
            }
            let store = store.clone();
            match tokio::task::spawn_blocking(move || store.run_maintenance(now_ms())).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!(error = %e, "maintenance tick failed"),
                Err(e) => warn!(error = %e, "maintenance task panicked"),
            }
        }
    })
}
