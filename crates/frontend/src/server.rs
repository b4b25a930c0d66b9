//! The accept loops: one per listener, one task per connection, `max.connections` enforced across
//! every listener, one request memory budget (`queued.max.request.bytes`) shared by all
//! connections, a TLS handshake first on TLS listeners (whose keystore and truststore files are
//! checked for changes every [`TLS_FILES_CHECK_INTERVAL`]), and a graceful stop that stops
//! accepting, lets in-flight requests finish (bounded by `SHUTDOWN_DRAIN_MS_MAX`), then returns.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::connection::{serve_connection, ConnectionLimits};
use crate::limits::SHUTDOWN_DRAIN_MS_MAX;
use crate::request_memory::RequestMemory;
use crate::sasl::SaslSettings;
use crate::tls::{TlsListener, TLS_FILES_CHECK_INTERVAL};
use crate::BrokerContext;

/// Pause after a failed accept (for example EMFILE), so that the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// A bound listener to serve.
pub struct ServedListener {
    pub socket: TcpListener,
    /// The listener's name, upper case.
    pub name: Arc<str>,
    /// `Some` for a TLS listener (security protocol SSL or SASL_SSL).
    pub tls: Option<Arc<TlsListener>>,
    /// `Some` for a SASL listener (SASL_PLAINTEXT or SASL_SSL).
    pub sasl: Option<Arc<SaslSettings>>,
}

/// What every accept loop shares.
struct Shared {
    ctx: Arc<BrokerContext>,
    limits: ConnectionLimits,
    connections_max: usize,
    active: AtomicUsize,
    tracker: TaskTracker,
}

/// Serves Kafka clients on every listener until `ctx.shutdown` is cancelled, then drains.
pub async fn run(listeners: Vec<ServedListener>, ctx: Arc<BrokerContext>) {
    let config = &ctx.cluster.config;
    let shared = Arc::new(Shared {
        limits: ConnectionLimits {
            request_bytes_max: config.socket_request_max_bytes(),
            idle_max: config.connections_max_idle(),
            memory: RequestMemory::new(config.queued_max_request_bytes()),
        },
        connections_max: config.max_connections(),
        active: AtomicUsize::new(0),
        tracker: TaskTracker::new(),
        ctx: ctx.clone(),
    });
    let mut loops = Vec::with_capacity(listeners.len());
    for listener in listeners {
        if let Some(tls) = &listener.tls {
            tokio::spawn(watch_tls_files(tls.clone(), ctx.clone()));
        }
        loops.push(tokio::spawn(accept_loop(listener, shared.clone())));
    }
    for accept in loops {
        if let Err(e) = accept.await {
            warn!(error = %e, "accept loop failed");
        }
    }
    shared.tracker.close();
    if tokio::time::timeout(
        Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX),
        shared.tracker.wait(),
    )
    .await
    .is_err()
    {
        warn!("in-flight requests did not finish in time; closing their connections");
    }
}

async fn accept_loop(listener: ServedListener, shared: Arc<Shared>) {
    let ServedListener {
        socket,
        name,
        tls,
        sasl,
    } = listener;
    loop {
        let accepted = tokio::select! {
            _ = shared.ctx.shutdown.cancelled() => break,
            accepted = socket.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                warn!(listener = %name, error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let metrics = millrace_metrics::global();
        if shared.active.load(Ordering::Acquire) >= shared.connections_max {
            metrics.connections_refused.inc();
            warn!(%peer, listener = %name, connections_max = shared.connections_max, "refusing connection: max.connections reached");
            drop(stream);
            continue;
        }
        debug!(%peer, listener = %name, "accepted connection");
        shared.active.fetch_add(1, Ordering::AcqRel);
        metrics.connections_accepted.inc();
        metrics.connections.inc();
        let task_shared = shared.clone();
        let name = name.clone();
        let security = (
            tls.as_ref().map(|t| (t.acceptor(), t.principal_mapper())),
            sasl.clone(),
        );
        shared.tracker.spawn(async move {
            let shared = task_shared;
            serve_connection(
                stream,
                peer,
                name,
                security,
                shared.ctx.clone(),
                shared.limits.clone(),
            )
            .await;
            shared.active.fetch_sub(1, Ordering::AcqRel);
            let metrics = millrace_metrics::global();
            metrics.connections.dec();
            metrics.connections_closed.inc();
        });
    }
}

/// Reloads a TLS listener's configuration when its files change, until shutdown.
async fn watch_tls_files(tls: Arc<TlsListener>, ctx: Arc<BrokerContext>) {
    let mut tick = tokio::time::interval(TLS_FILES_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let tls = tls.clone();
        // A few stat calls, and a rebuild only on change: off the runtime threads all the same.
        if tokio::task::spawn_blocking(move || tls.reload_if_changed())
            .await
            .is_err()
        {
            return;
        }
    }
}
