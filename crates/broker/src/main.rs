//! `millrace`: the broker binary. Reads settings, opens the store and the cluster metadata,
//! serves Kafka clients, runs background maintenance, and shuts down cleanly on SIGTERM/SIGINT
//! (stop accepting, finish in-flight requests, flush, write the clean-shutdown marker, exit 0).
//!
//! Exit codes: 0 after a clean stop, 2 for a settings error (one line naming the key), 1 for any
//! other failure to start or stop.

mod settings;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use millrace_cluster::{BrokerEndpoint, Cluster};
use millrace_frontend::BrokerContext;
use millrace_store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::settings::{Cli, Settings};

/// Exit code for bad settings (as `sysexits`' EX_USAGE is to shells: "you asked for something wrong").
const EXIT_BAD_SETTINGS: u8 = 2;
/// Upper bound between two maintenance ticks (retention, compaction, time-based rolls).
const MAINTENANCE_TICK_MAX: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let settings = match Settings::resolve(&cli, std::env::vars()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("millrace: {e}");
            return ExitCode::from(EXIT_BAD_SETTINGS);
        }
    };
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
    match runtime.block_on(run(settings, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
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

    let store = Store::open(StoreConfig {
        data_dir: settings.data_dir.clone(),
        flush_policy: config.flush_policy(),
        flush_interval: config.flush_batch_interval(),
        max_open_files: config.max_open_files(),
        high_watermark_follows_durable: true,
    })
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
    let token = CancellationToken::new();
    let ctx = Arc::new(BrokerContext {
        cluster: cluster.clone(),
        data_dir: std::fs::canonicalize(&settings.data_dir)
            .unwrap_or_else(|_| settings.data_dir.clone())
            .display()
            .to_string(),
        shutdown: token.clone(),
    });

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
    if let Err(e) = server.await {
        warn!(error = %e, "server task failed");
    }
    let _ = maintenance.await;
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .context("store shutdown task")?
        .context("store shutdown")?;
    info!("clean shutdown complete");
    Ok(())
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
