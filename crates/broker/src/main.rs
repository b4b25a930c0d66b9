//! `millrace`: the broker binary. Reads settings, opens the store, starts the node (`node.rs`:
//! metadata quorum, controller service, registration, replica manager), starts the group
//! coordinator (following `__consumer_offsets` leadership; its replays run in the background;
//! the topic itself is created on the first FindCoordinator), serves Kafka clients, runs
//! background maintenance, and shuts down cleanly on SIGTERM/SIGINT (controlled shutdown, stop
//! accepting, answer parked group requests, finish in-flight requests, write the group snapshot,
//! flush, write the clean-shutdown marker, exit 0).
//!
//! Exit codes: 0 after a clean stop, 2 for a settings error (one line naming the key) or a data
//! dir whose cluster metadata file is missing while its partition directories contradict each
//! other (one line naming the file and what to do; checked before anything is opened, so nothing
//! is changed), 1 for any other failure to start or stop.
//!
//! Test knob (not a config key): `MILLRACE_TEST_FAIL_SYNC=<text>` makes every fdatasync of a file
//! whose path contains `<text>` fail (`millrace_store::storage::FaultStorage`), so integration
//! tests can drive a failing disk through the real binary.

mod disk_space;
mod groups_log;
mod node;
mod observe;
mod settings;
mod tiered;
mod txn_io;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use millrace_cluster::listeners::ListenerAddress;
use millrace_cluster::{BrokerConfig, BrokerEndpoint, Cluster, MetadataError};
use millrace_controller::ProducerIdAllocator;
use millrace_frontend::fetch_session::FetchSessionCache;
use millrace_frontend::BrokerContext;
use millrace_groups::{
    Assignor, ConsumerGroupConfig, CoordinatorConfig, GroupConfig, GroupCoordinator,
    ShareGroupConfig, OFFSETS_TOPIC,
};
use millrace_replication::LeadershipChange;
use millrace_store::{Store, StoreConfig};
use millrace_transactions::{TransactionCoordinator, TxnConfig, TRANSACTION_STATE_TOPIC};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::settings::{Cli, LogFormat, Settings};

/// Exit code for bad settings (as `sysexits`' EX_USAGE is to shells: "you asked for something wrong").
const EXIT_BAD_SETTINGS: u8 = 2;
/// Exit code for a data dir the broker will not guess about (missing metadata file, contradicting
/// partition directories): like bad settings, the operator must act before a retry can work.
const EXIT_AMBIGUOUS_DATA_DIR: u8 = 2;
/// Environment variable of the fsync-failure test knob (see the module comment).
const FAIL_SYNC_KNOB: &str = "MILLRACE_TEST_FAIL_SYNC";
/// How long a controlled shutdown may wait for the controller to move this broker's leaderships.
const CONTROLLED_SHUTDOWN_MAX: Duration = Duration::from_secs(10);
/// Upper bound between two maintenance ticks (retention, compaction, time-based rolls).
const MAINTENANCE_TICK_MAX: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let fail_sync_of = std::env::var(FAIL_SYNC_KNOB).ok();
    let env = std::env::vars().filter(|(k, _)| k != FAIL_SYNC_KNOB);
    let settings = match Settings::resolve(&cli, env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("millrace: {e}");
            return ExitCode::from(EXIT_BAD_SETTINGS);
        }
    };
    for warning in settings.warnings() {
        warn!("{warning}");
    }
    // TLS keystores and SASL settings are part of the configuration: unusable ones stop the broker
    // here, with the key named, like any other bad setting.
    let security = match listener_security(&settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("millrace: {e}");
            return ExitCode::from(EXIT_BAD_SETTINGS);
        }
    };
    // The same for the HTTP listener's TLS and authentication (`millrace.http.*`).
    let http_security = match settings
        .http_listen
        .map(|_| millrace_rest::server::HttpSecurity::from_config(&settings.config))
        .transpose()
    {
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
    // The signal handlers are installed before anything else runs, so a SIGTERM during a long
    // start (opening thousands of partitions) is kept and stops the broker cleanly once the start
    // reaches its first wait, instead of killing the process mid-open.
    let outcome = runtime.block_on(async {
        let shutdown = shutdown_signal();
        run(settings, security, http_security, fail_sync_of, shutdown).await
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e)
            if e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<MetadataError>(),
                    Some(MetadataError::Ambiguous { .. })
                )
            }) =>
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

/// Logs go to stderr, filtered by `MILLRACE_LOG` (else `RUST_LOG`, else `info`), as text lines
/// or, with `--log-format json`, one JSON object per line.
fn init_logging(format: LogFormat) {
    let filter = std::env::var("MILLRACE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Installs the SIGTERM and SIGINT handlers now (inside the runtime), and returns a future that
/// resolves on the first of those signals, whenever it arrived.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        match (interrupt, terminate) {
            (Ok(mut interrupt), Ok(mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            (Ok(mut interrupt), Err(e)) => {
                warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the broker");
                interrupt.recv().await;
            }
            (Err(e), Ok(mut terminate)) => {
                warn!(error = %e, "cannot listen for SIGINT; only SIGTERM stops the broker");
                terminate.recv().await;
            }
            (Err(e), Err(_)) => {
                warn!(error = %e, "cannot listen for SIGTERM or SIGINT; the broker stops only when killed");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Runs a broker until `shutdown` resolves. The trigger is a parameter so tests can pass their own.
/// Opens the store (through the fdatasync-failing storage of the test knob, if set) and starts
/// its scrubber.
fn open_store(
    settings: &Settings,
    config: &BrokerConfig,
    fail_sync_of: Option<String>,
) -> anyhow::Result<Arc<Store>> {
    use anyhow::Context;
    let store_config = StoreConfig {
        data_dir: settings.data_dir.clone(),
        extra_log_dirs: settings.extra_log_dirs.clone(),
        flush_policy: config.flush_policy(),
        flush_interval: config.flush_batch_interval(),
        max_open_files: config.max_open_files(),
        // Replication owns the high watermark (a quorum of one included).
        high_watermark_follows_durable: false,
    };
    let open_started = Instant::now();
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
    info!(
        partitions = store.partitions().len(),
        after_clean_shutdown = store.opened_after_clean_shutdown(),
        elapsed_ms = open_started.elapsed().as_millis(),
        "store opened"
    );
    // The scrubber re-reads sealed segments for bit rot; replication repairs what it finds.
    store
        .start_scrubber(millrace_store::ScrubSettings {
            interval: config.log_scrub_interval(),
            bytes_per_sec: config.log_scrub_bytes_per_sec(),
        })
        .context("cannot start the scrubber")?;
    Ok(store)
}

async fn run(
    settings: Settings,
    security: Vec<ListenerSecurity>,
    http_security: Option<millrace_rest::server::HttpSecurity>,
    fail_sync_of: Option<String>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(shutdown);
    use anyhow::Context;
    let config = settings.config.clone();
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("cannot create data dir {}", settings.data_dir.display()))?;
    let listeners = bind_listeners(&settings, security).await?;
    let inter_broker = listeners
        .iter()
        .find(|l| *l.name == *settings.inter_broker_listener)
        .context("the inter-broker listener is not bound")?;
    let bound = inter_broker.bound;
    let (host, port) = inter_broker.advertised.clone();
    let advertised: Vec<ListenerAddress> = listeners
        .iter()
        .map(|l| ListenerAddress {
            name: l.name.to_string(),
            host: l.advertised.0.clone(),
            port: l.advertised.1,
        })
        .collect();
    // The HTTP listener comes up before the store opens, so /health and /ready answer during a
    // long recovery.
    let observer = observe::Observer::new();
    let rest = millrace_rest::RestApi::new(
        config.rest(),
        listeners.first().map_or_else(
            || Arc::from(settings.inter_broker_listener.as_str()),
            |l| l.name.clone(),
        ),
    );
    let http_stop = CancellationToken::new();
    let http = match settings.http_listen.zip(http_security) {
        Some((addr, security)) => {
            let http_listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (millrace.http.listen)"))?;
            info!(address = %http_listener.local_addr().context("HTTP listener address")?, "HTTP listener (metrics, health, readiness, HTTP API)");
            let ops_observer = observer.clone();
            Some(tokio::spawn(millrace_rest::server::serve(
                http_listener,
                rest.clone(),
                security,
                Arc::new(move |request| observe::route(&ops_observer, request)),
                http_stop.clone(),
            )))
        }
        None => None,
    };

    let store = open_store(&settings, &config, fail_sync_of)?;
    let endpoint = BrokerEndpoint {
        node_id: config.node_id(),
        host: host.clone(),
        port,
    };
    let token = CancellationToken::new();
    let node = node::start(
        &settings,
        &config,
        &store,
        (&host, port, advertised.clone()),
        &token,
    )
    .await?;
    let cluster = Arc::new(Cluster::new(
        config.clone(),
        store.clone(),
        node.image.clone(),
        endpoint.clone(),
        settings.quorum.is_none(),
    ));
    let groups = open_group_coordinator(&config, &settings.data_dir, &node);
    follow_offsets_leadership(&node, &groups);
    let ready = node.start_publishing(&store, &settings.data_dir, &token);
    let fetch_sessions = Arc::new(FetchSessionCache::new(config.fetch_session_slots()));
    let share_coordinator = open_share_coordinator(&config, &node, &token);
    follow_share_group_state_leadership(&node, &share_coordinator);
    let persister = Arc::new(millrace_frontend::share_persister::Persister::new(
        cluster.clone(),
        node.replicas.clone(),
        node.controller.clone(),
        share_coordinator,
    ));
    let shares = Arc::new(share_state(&config, &cluster, persister));
    let tiered = tiered::start(&config, &node.replicas, &node.controller, &token)?;
    let remote_reader = tiered.as_ref().map(|t| Arc::clone(&t.reader));
    observer.attach(observe::BrokerView {
        tiered: tiered.as_ref().map(|t| Arc::clone(&t.manager)),
        cluster: cluster.clone(),
        replicas: node.replicas.clone(),
        groups: groups.clone(),
        quorum: node.quorum.clone(),
        node_ready: ready.clone(),
        partition_level: config.metrics_partition_level(),
        fetch_sessions: fetch_sessions.clone(),
        shares: shares.clone(),
        disk: disk_space::DiskDirs::new(&config, &settings.data_dir, &settings.extra_log_dirs),
    });
    let producer_ids = Arc::new(ProducerIdAllocator::new(
        node.controller.clone(),
        node.lifecycle.clone(),
    ));
    let transactions = open_transaction_coordinator(&config, &node, &groups, &producer_ids);
    follow_transaction_state_leadership(&node, &transactions);
    let ctx = Arc::new(BrokerContext {
        cluster: cluster.clone(),
        replicas: node.replicas.clone(),
        controller: node.controller.clone(),
        producer_ids,
        data_dir: std::fs::canonicalize(&settings.data_dir)
            .unwrap_or_else(|_| settings.data_dir.clone())
            .display()
            .to_string(),
        groups: groups.clone(),
        transactions: transactions.clone(),
        shutdown: token.clone(),
        fetch_sessions,
        shares,
        authorizer: settings.config.authorizer().map(Arc::new),
        quotas: Arc::new(millrace_frontend::quota::QuotaManager::new(quota_window(
            &settings.config,
        ))),
        remote: remote_reader,
    });
    rest.attach(ctx.clone());
    let timers = {
        let stop = token.clone();
        tokio::spawn(
            groups
                .clone()
                .run_timers(async move { stop.cancelled().await }),
        )
    };

    let txn_timeouts = tokio::spawn(transactions.clone().run_timeouts());
    let maintenance = spawn_maintenance(
        store.clone(),
        config.retention_check_interval(),
        token.clone(),
    );
    // Ready once this process is registered, unfenced and its replicas follow the image. Only
    // then are connections accepted, as Kafka enables request processing only after startup: a
    // client that connected earlier waits in the listen backlog rather than being told of a
    // cluster with no live broker (librdkafka's admin client then waits a minute for the
    // controller it was named).
    let mut ready = ready;
    let stopped_before_ready = tokio::select! {
        r = ready.wait_for(|r| *r) => { r.context("the node stopped before it was ready")?; false }
        _ = &mut shutdown => true,
    };
    let server = if stopped_before_ready {
        // No ready line: the stop below is the same as after one (a clean stop, exit 0).
        info!("stopped before ready");
        None
    } else {
        let served = listeners
            .into_iter()
            .map(|l| millrace_frontend::server::ServedListener {
                socket: l.socket,
                name: l.name,
                tls: l.security.tls,
                sasl: l.security.sasl,
            })
            .collect();
        let server = tokio::spawn(millrace_frontend::server::run(served, ctx));
        announce_ready(&endpoint, &cluster, &settings, bound, &advertised);
        shutdown.await;
        Some(server)
    };
    info!("shutting down: moving leaderships away (controlled shutdown)");
    controlled_shutdown(&node, &config).await;
    info!("shutting down: no new connections; finishing in-flight requests");
    token.cancel();
    // Parked JoinGroup/SyncGroup requests are answered now, so the drain does not wait on them.
    groups.shutdown();
    transactions.shutdown();
    txn_timeouts.abort();
    if let Some(Err(e)) = match server {
        Some(server) => Some(server.await),
        None => None,
    } {
        warn!(error = %e, "server task failed");
    }
    let _ = maintenance.await;
    // An upload cut here is never committed: its objects are orphans the next leader cleans.
    if let Some(tiered) = &tiered {
        tiered.task.abort();
    }
    let _ = timers.await;
    {
        let groups = groups.clone();
        tokio::task::spawn_blocking(move || groups.write_final_snapshot())
            .await
            .context("group snapshot task")?;
    }
    close_store_and_quorum(store, node.quorum.quorum()).await?;
    http_stop.cancel();
    if let Some(http) = http {
        let _ = http.await;
    }
    info!("clean shutdown complete");
    Ok(())
}

/// Flushes and closes the store, then stops the metadata quorum. With several log dirs, one
/// offline dir fails the store's shutdown after the others were flushed and marked clean: the
/// quorum still stops cleanly, then the error is returned.
async fn close_store_and_quorum(
    store: Arc<Store>,
    quorum: &Arc<millrace_quorum::Quorum>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let partitions = store.partitions().len();
    let flush_started = Instant::now();
    let stored = tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .context("store shutdown task")?;
    if stored.is_ok() {
        info!(
            partitions,
            elapsed_ms = flush_started.elapsed().as_millis(),
            "shutting down: every log flushed, clean-shutdown marker written"
        );
    }
    if let Err(e) = quorum.shutdown().await {
        warn!(error = %e, "metadata quorum shutdown failed");
    }
    stored.context("store shutdown")
}

/// `quota.window.num` and `quota.window.size.seconds` (validated as positive integers).
fn quota_window(config: &millrace_cluster::BrokerConfig) -> millrace_frontend::quota::QuotaWindow {
    let mut window = millrace_frontend::quota::QuotaWindow::default();
    let number = |key: &str| config.get(key).and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(samples) = number("quota.window.num") {
        window.samples = samples.max(1);
    }
    if let Some(seconds) = number("quota.window.size.seconds") {
        window.window_ms = seconds.max(1).saturating_mul(1000);
    }
    window
}

/// A bound Kafka listener, before the server takes it.
struct BoundListener {
    name: Arc<str>,
    socket: TcpListener,
    bound: std::net::SocketAddr,
    /// What clients are told: the advertised address, or the bound one.
    advertised: (String, u16),
    security: ListenerSecurity,
}

/// A listener's TLS configuration and SASL settings, per its security protocol.
struct ListenerSecurity {
    tls: Option<Arc<millrace_frontend::tls::TlsListener>>,
    sasl: Option<Arc<millrace_frontend::sasl::SaslSettings>>,
}

/// Builds every listener's TLS configuration (reading its keystore) and SASL settings, in the
/// order of `settings.listeners`; the first problem names the listener and key.
fn listener_security(settings: &Settings) -> Result<Vec<ListenerSecurity>, String> {
    use millrace_frontend::{sasl, tls};
    settings
        .listeners
        .iter()
        .map(|l| {
            let tls = if l.protocol.uses_tls() {
                let settings = tls::TlsSettings::from_config(&settings.config, &l.name)
                    .map_err(|e| e.to_string())?;
                Some(tls::TlsListener::new(settings).map_err(|e| e.to_string())?)
            } else {
                None
            };
            let sasl = if l.protocol.uses_sasl() {
                let settings = sasl::SaslSettings::from_config(&settings.config, &l.name)
                    .map_err(|e| e.to_string())?;
                Some(Arc::new(settings))
            } else {
                None
            };
            Ok(ListenerSecurity { tls, sasl })
        })
        .collect()
}

/// Binds every listener.
async fn bind_listeners(
    settings: &Settings,
    security: Vec<ListenerSecurity>,
) -> anyhow::Result<Vec<BoundListener>> {
    use anyhow::Context;
    let mut out = Vec::with_capacity(settings.listeners.len());
    for (l, security) in settings.listeners.iter().zip(security) {
        let socket = TcpListener::bind(l.bind)
            .await
            .with_context(|| format!("cannot listen on {} (listener {})", l.bind, l.name))?;
        let bound = socket.local_addr().context("listener address")?;
        let advertised = l.advertised.clone().unwrap_or_else(|| {
            let ip = bound.ip();
            let host = if ip.is_unspecified() {
                warn!(listener = %l.name, "listening on a wildcard address; advertising 127.0.0.1 (set advertised.listeners)");
                "127.0.0.1".to_string()
            } else {
                ip.to_string()
            };
            (host, bound.port())
        });
        out.push(BoundListener {
            name: Arc::from(l.name.as_str()),
            socket,
            bound,
            advertised,
            security,
        });
    }
    Ok(out)
}

/// Logs readiness and prints the one ready line on stdout that scripts and tests wait for. It
/// names the inter-broker listener's bound address (`listening on host:port`), then every
/// listener when there are several.
fn announce_ready(
    endpoint: &BrokerEndpoint,
    cluster: &Cluster,
    settings: &Settings,
    bound: std::net::SocketAddr,
    listeners: &[ListenerAddress],
) {
    let all = listeners
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    info!(
        node_id = endpoint.node_id,
        cluster_id = %cluster.cluster_id(),
        data_dir = %settings.data_dir.display(),
        advertised = %format!("{}:{}", endpoint.host, endpoint.port),
        listeners = %all,
        "millrace ready"
    );
    let more = if listeners.len() > 1 {
        format!("; listeners {all}")
    } else {
        String::new()
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "millrace ready: node {} listening on {bound} (advertised {}:{}, cluster {}{more})",
        endpoint.node_id,
        endpoint.host,
        endpoint.port,
        cluster.cluster_id()
    );
    let _ = out.flush();
}

/// Asks the controller to move this broker's leaderships away, and waits (bounded) until it did.
async fn controlled_shutdown(node: &node::Node, config: &BrokerConfig) {
    let enabled = config
        .get("controlled.shutdown.enable")
        .is_none_or(|v| v.trim().eq_ignore_ascii_case("true"));
    if !enabled {
        return;
    }
    // Like Kafka's BrokerLifecycleManager: only a registered, unfenced broker can lead, so only
    // it has leaderships to move; a broker still waiting to register (its previous session
    // has not expired) or fenced stops at once instead of waiting out the bound for nothing.
    let leads_maybe = node
        .lifecycle
        .watch()
        .borrow()
        .is_some_and(|r| !r.fenced && !r.shut_down);
    if !leads_maybe {
        info!("shutting down: not registered or fenced, so no leaderships to move");
        return;
    }
    node.lifecycle.begin_controlled_shutdown();
    let mut watch = node.lifecycle.watch();
    let done = tokio::time::timeout(CONTROLLED_SHUTDOWN_MAX, async {
        loop {
            if watch.borrow_and_update().is_some_and(|r| r.shut_down) {
                return;
            }
            if watch.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    if done.is_err() {
        warn!("controlled shutdown did not finish in time; stopping anyway");
    }
}

/// The group coordinator over `__consumer_offsets`, appending through replication. Its partition
/// count is the topic's when the image already has it, else `offsets.topic.num.partitions` (the
/// topic is created with that many on the first FindCoordinator).
fn open_group_coordinator(
    config: &BrokerConfig,
    data_dir: &std::path::Path,
    node: &node::Node,
) -> Arc<GroupCoordinator> {
    let long = |key: &str, fallback: i64| {
        config
            .get(key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let clamp_i32 = |v: i64| v.clamp(0, i64::from(i32::MAX)) as i32;
    let group = GroupConfig {
        min_session_timeout_ms: clamp_i32(long("group.min.session.timeout.ms", 6_000)),
        max_session_timeout_ms: clamp_i32(long("group.max.session.timeout.ms", 1_800_000)),
        initial_rebalance_delay_ms: clamp_i32(long("group.initial.rebalance.delay.ms", 3_000)),
        max_size: long("group.max.size", i64::from(i32::MAX)).max(1) as usize,
    };
    let consumer_defaults = ConsumerGroupConfig::default();
    let assignors: Vec<Assignor> = config
        .get("group.consumer.assignors")
        .map(|v| {
            v.split(',')
                .filter_map(|name| {
                    // Kafka also accepts the assignors' class names.
                    let short = name.trim().rsplit('.').next().unwrap_or_default();
                    let short = short.trim_end_matches("Assignor");
                    Assignor::from_name(short)
                })
                .collect()
        })
        .filter(|a: &Vec<Assignor>| !a.is_empty())
        .unwrap_or(consumer_defaults.assignors);
    let consumer = ConsumerGroupConfig {
        session_timeout_ms: clamp_i32(long(
            "group.consumer.session.timeout.ms",
            i64::from(consumer_defaults.session_timeout_ms),
        ))
        .max(1),
        heartbeat_interval_ms: clamp_i32(long(
            "group.consumer.heartbeat.interval.ms",
            i64::from(consumer_defaults.heartbeat_interval_ms),
        ))
        .max(1),
        max_size: long("group.consumer.max.size", i64::from(i32::MAX)).max(1) as usize,
        assignors,
    };
    let share_defaults = ShareGroupConfig::default();
    let share = ShareGroupConfig {
        session_timeout_ms: clamp_i32(long(
            "group.share.session.timeout.ms",
            i64::from(share_defaults.session_timeout_ms),
        ))
        .max(1),
        heartbeat_interval_ms: clamp_i32(long(
            "group.share.heartbeat.interval.ms",
            i64::from(share_defaults.heartbeat_interval_ms),
        ))
        .max(1),
        max_size: usize::try_from(long("group.share.max.size", 200).max(1)).unwrap_or(200),
    };
    let coordinator = CoordinatorConfig {
        consumer,
        share,
        group,
        offsets_retention_ms: long("offsets.retention.minutes", 10_080).saturating_mul(60_000),
        snapshot_dir: Some(data_dir.join("group_snapshot.sled")),
    };
    let partitions = node
        .image
        .current()
        .topic(OFFSETS_TOPIC)
        .map(|t| t.partition_count())
        .unwrap_or_else(|| clamp_i32(long("offsets.topic.num.partitions", 50)).max(1));
    let commit_timeout = Duration::from_millis(
        u64::try_from(long("offsets.commit.timeout.ms", 5_000).max(1)).unwrap_or(5_000),
    );
    let log = Arc::new(groups_log::ReplicatedGroupLog::new(
        node.replicas.clone(),
        commit_timeout,
    ));
    GroupCoordinator::new(coordinator, partitions, log)
}

/// The transaction coordinator over replication, with Kafka's `transaction.*` settings.
fn open_transaction_coordinator(
    config: &BrokerConfig,
    node: &node::Node,
    groups: &Arc<GroupCoordinator>,
    producer_ids: &Arc<ProducerIdAllocator>,
) -> Arc<TransactionCoordinator> {
    let long = |key: &str, fallback: i64| {
        config
            .get(key)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let clamp_i32 = |v: i64| v.clamp(0, i64::from(i32::MAX)) as i32;
    let partitions = node
        .image
        .current()
        .topic(TRANSACTION_STATE_TOPIC)
        .map(|t| t.partition_count())
        .unwrap_or_else(|| clamp_i32(long("transaction.state.log.num.partitions", 50)).max(1));
    let image = node.image.clone();
    let io = Arc::new(txn_io::ReplicatedTxnIo::new(
        node.replicas.clone(),
        Box::new(move |topic| image.current().topic(topic).is_some()),
        groups.clone(),
        producer_ids.clone(),
        Duration::from_millis(
            u64::try_from(long("offsets.commit.timeout.ms", 5_000).max(1)).unwrap_or(5_000),
        ),
    ));
    TransactionCoordinator::new(
        TxnConfig {
            partitions,
            max_timeout_ms: clamp_i32(long("transaction.max.timeout.ms", 900_000)).max(1),
            abort_check_interval: Duration::from_millis(
                u64::try_from(
                    long(
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                        10_000,
                    )
                    .max(1),
                )
                .unwrap_or(10_000),
            ),
        },
        io,
    )
}

/// Loads a `__transaction_state` partition when this broker becomes its leader, unloads it when
/// it stops leading.
fn follow_transaction_state_leadership(
    node: &node::Node,
    transactions: &Arc<TransactionCoordinator>,
) {
    let transactions = Arc::clone(transactions);
    node.replicas
        .on_leadership(Box::new(move |change| match change {
            LeadershipChange::Became {
                tp,
                leader_epoch,
                log,
            } if tp.topic == TRANSACTION_STATE_TOPIC => {
                transactions.become_leader(tp.partition, log, leader_epoch)
            }
            LeadershipChange::Resigned { tp } if tp.topic == TRANSACTION_STATE_TOPIC => {
                transactions.resign(tp.partition)
            }
            _ => {}
        }));
}

/// Loads a `__consumer_offsets` partition's groups when this broker becomes its leader, unloads
/// them when it stops leading.
fn follow_offsets_leadership(node: &node::Node, groups: &Arc<GroupCoordinator>) {
    let groups = Arc::clone(groups);
    node.replicas
        .on_leadership(Box::new(move |change| match change {
            LeadershipChange::Became {
                tp,
                leader_epoch,
                log,
            } if tp.topic == OFFSETS_TOPIC => groups.become_leader(tp.partition, log, leader_epoch),
            LeadershipChange::Resigned { tp } if tp.topic == OFFSETS_TOPIC => {
                groups.resign(tp.partition, None)
            }
            _ => {}
        }));
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

/// The share coordinator over `__share_group_state`, with Kafka's `share.coordinator.*`.
/// Also prunes `__share_group_state` every `share.coordinator.state.topic.prune.interval.ms`
/// until `stop`.
fn open_share_coordinator(
    config: &BrokerConfig,
    node: &node::Node,
    stop: &CancellationToken,
) -> Arc<millrace_frontend::share_coordinator::ShareCoordinator> {
    let long = |key: &str, fallback: i64| {
        config
            .get(key)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let updates_per_snapshot = u32::try_from(long(
        "share.coordinator.snapshot.update.records.per.snapshot",
        i64::from(millrace_share::UPDATES_PER_SNAPSHOT_DEFAULT),
    ))
    .unwrap_or(millrace_share::UPDATES_PER_SNAPSHOT_DEFAULT);
    let commit_timeout = Duration::from_millis(
        u64::try_from(long("share.coordinator.write.timeout.ms", 5_000).max(1)).unwrap_or(5_000),
    );
    let coordinator = millrace_frontend::share_coordinator::ShareCoordinator::new(
        node.replicas.clone(),
        commit_timeout,
        updates_per_snapshot,
    );
    let prune_interval = Duration::from_millis(
        u64::try_from(long("share.coordinator.state.topic.prune.interval.ms", 300_000).max(1))
            .unwrap_or(300_000),
    );
    let pruner = Arc::clone(&coordinator);
    let stop = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(prune_interval) => {}
            }
            let deleted = pruner.prune().await;
            if deleted > 0 {
                info!(records = deleted, "__share_group_state pruned");
            }
        }
    });
    coordinator
}

/// Loads a `__share_group_state` partition when this broker becomes its leader, unloads it when
/// it stops leading.
fn follow_share_group_state_leadership(
    node: &node::Node,
    coordinator: &Arc<millrace_frontend::share_coordinator::ShareCoordinator>,
) {
    let coordinator = Arc::clone(coordinator);
    node.replicas
        .on_leadership(Box::new(move |change| match change {
            LeadershipChange::Became {
                tp,
                leader_epoch,
                log,
            } if tp.topic == millrace_share::SHARE_GROUP_STATE_TOPIC => {
                coordinator.become_leader(tp.partition, log, leader_epoch)
            }
            LeadershipChange::Resigned { tp }
                if tp.topic == millrace_share::SHARE_GROUP_STATE_TOPIC =>
            {
                coordinator.resign(tp.partition)
            }
            _ => {}
        }));
}

/// Share groups' partitions and sessions, each group obeying its GROUP resource configs over
/// the broker's `group.share.*` (read from `cluster`'s image at each use), persisted through
/// `persister`.
fn share_state(
    config: &BrokerConfig,
    cluster: &Arc<Cluster>,
    persister: Arc<millrace_frontend::share_persister::Persister>,
) -> millrace_frontend::share_partitions::ShareState {
    let share = config.share();
    let groups = millrace_frontend::group_settings::ImageGroupConfigs(Arc::clone(cluster));
    millrace_frontend::share_partitions::ShareState::new(
        millrace_frontend::share_partitions::ShareSettings {
            enabled: share.enabled,
            max_sessions: share.max_share_sessions,
            groups: Some(Arc::new(groups)),
            ..Default::default()
        },
        Some(persister),
    )
}
