//! The HTTP listener: accepts connections, speaks HTTP/1.1 or HTTP/2 (h2c by prior knowledge; the
//! same over TLS by ALPN), finds who the client is, and hands each request to the operator's
//! routes (`/metrics`, `/health`, `/ready`, … — the broker's, given as [`OpsRoutes`]) or to the
//! HTTP API's router ([`crate::router`]).
//!
//! Bounds: [`HTTP_CONNECTIONS_MAX`] connections; [`HTTP_HEADER_READ_TIMEOUT`] to send headers
//! (and between requests on a kept-alive HTTP/1.1 connection); request bodies above
//! `millrace.rest.request.bytes.max` answer 413.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, Response};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use millrace_cluster::acl::ANONYMOUS_PRINCIPAL;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{debug, warn};

use crate::gateway::Caller;
use crate::limits::{HTTP_CONNECTIONS_MAX, HTTP_HEADER_READ_TIMEOUT};
use crate::RestApi;

/// The operator's routes: `Some(response)` for a path they own, `None` for the HTTP API's.
pub type OpsRoutes = Arc<dyn Fn(&Request<Incoming>) -> Option<Response<Full<Bytes>>> + Send + Sync>;

/// Serves HTTP on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: TcpListener,
    api: Arc<RestApi>,
    ops: OpsRoutes,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
    let router =
        crate::router(api.clone()).layer(DefaultBodyLimit::max(api.config.request_bytes_max));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let ops = ops.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let router = router.clone();
                let ops = ops.clone();
                async move { Ok::<_, Infallible>(handle(request, peer, &ops, router).await) }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HTTP_HEADER_READ_TIMEOUT);
            builder.http2().timer(TokioTimer::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                r = connection.as_mut() => {
                    if let Err(e) = r {
                        debug!(error = %e, "HTTP connection ended with an error");
                    }
                }
                _ = stop.cancelled() => {}
            }
            drop(permit);
        });
    }
}

/// One request: the operator's route if it is one, else the HTTP API's.
async fn handle(
    request: Request<Incoming>,
    peer: SocketAddr,
    ops: &OpsRoutes,
    router: axum::Router,
) -> Response<Body> {
    if let Some(response) = ops(&request) {
        return response.map(Body::new);
    }
    let mut request = request.map(Body::new);
    request.extensions_mut().insert(Caller {
        principal: ANONYMOUS_PRINCIPAL.to_string(),
        peer,
    });
    match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}
