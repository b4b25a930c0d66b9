//! The accept loop: one task per connection, `max.connections` enforced, one request memory budget
//! (`queued.max.request.bytes`) shared by all connections, and a graceful stop that stops
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
use crate::BrokerContext;

/// Pause after a failed accept (for example EMFILE), so that the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// Serves Kafka clients on `listener` until `ctx.shutdown` is cancelled, then drains.
pub async fn run(listener: TcpListener, ctx: Arc<BrokerContext>) {
    let config = &ctx.cluster.config;
    let limits = ConnectionLimits {
        request_bytes_max: config.socket_request_max_bytes(),
        idle_max: config.connections_max_idle(),
        memory: RequestMemory::new(config.queued_max_request_bytes()),
    };
    let connections_max = config.max_connections();
    let active = Arc::new(AtomicUsize::new(0));
    let tracker = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let metrics = millrace_metrics::global();
        if active.load(Ordering::Acquire) >= connections_max {
            metrics.connections_refused.inc();
            warn!(%peer, connections_max, "refusing connection: max.connections reached");
            drop(stream);
            continue;
        }
        debug!(%peer, "accepted connection");
        active.fetch_add(1, Ordering::AcqRel);
        metrics.connections_accepted.inc();
        metrics.connections.inc();
        let active = active.clone();
        let ctx = ctx.clone();
        let limits = limits.clone();
        tracker.spawn(async move {
            serve_connection(stream, peer, ctx, limits).await;
            active.fetch_sub(1, Ordering::AcqRel);
            let metrics = millrace_metrics::global();
            metrics.connections.dec();
            metrics.connections_closed.inc();
        });
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX), tracker.wait())
        .await
        .is_err()
    {
        warn!("in-flight requests did not finish in time; closing their connections");
    }
}
