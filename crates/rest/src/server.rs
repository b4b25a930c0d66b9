//! The HTTP listener: accepts connections, does the TLS handshake when
//! `millrace.http.listener.security.protocol=SSL` (the broker's certificates, read and reloaded by
//! the Kafka listeners' [`TlsListener`], ALPN `h2` and `http/1.1`), speaks HTTP/1.1 or HTTP/2
//! (h2c by prior knowledge on plaintext), finds who the client is ([`crate::auth`]), and hands each
//! request to the operator's routes (`/metrics`, `/health`, `/ready`, … — the broker's, given as
//! [`OpsRoutes`]) or to the HTTP API's router ([`crate::router`]).
//!
//! Bounds (named in [`crate::limits`]): [`HTTP_CONNECTIONS_MAX`] connections; the TLS handshake
//! within [`TLS_HANDSHAKE_TIMEOUT`]; headers within [`HTTP_HEADER_READ_TIMEOUT`], at most
//! [`HTTP1_READ_BUFFER_BYTES_MAX`] / [`H2_HEADER_LIST_BYTES_MAX`]; on HTTP/2
//! [`H2_STREAMS_PER_CONNECTION_MAX`] streams and flow-control windows of
//! [`H2_STREAM_WINDOW_BYTES`] / [`H2_CONNECTION_WINDOW_BYTES`]; request bodies paid from a
//! per-connection budget of `millrace.rest.request.bytes.max` bytes and idle at most
//! [`HTTP_BODY_IDLE_TIMEOUT`] ([`crate::request_body`]); a connection with nothing in flight for
//! [`HTTP_CONNECTION_IDLE_TIMEOUT`] is closed.
//!
//! Bad input answers with Confluent's JSON error body: a declared `Content-Length` above
//! `millrace.rest.request.bytes.max` is 413 before the body is read, a body that grows past it is
//! 413 whatever the handler made of the error, a stalled one 408, one that cannot get its
//! connection's body budget 429, and axum's own plain-text
//! rejections (its body limit's 413, a bad path or query's 400) are rewritten as
//! `{"error_code": <status>, "message": <their text>}` ([`confluent_error_body`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::DefaultBodyLimit;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use millrace_cluster::BrokerConfig;
use millrace_frontend::sasl::SaslConfigError;
use millrace_frontend::tls::{TlsError, TlsListener, TlsSettings, TLS_FILES_CHECK_INTERVAL};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use crate::auth::{certificate_principal, Authentication, CredentialLookup};
use crate::error::{code, RestError};
use crate::gateway::Caller;
use crate::limits::{
    ERROR_TEXT_BYTES_MAX, H2_CONNECTION_WINDOW_BYTES, H2_HEADER_LIST_BYTES_MAX,
    H2_LOCAL_ERROR_RESETS_MAX, H2_PENDING_RESET_STREAMS_MAX, H2_SEND_BUFFER_BYTES_MAX,
    H2_STREAMS_PER_CONNECTION_MAX, H2_STREAM_WINDOW_BYTES, HTTP1_HEADERS_MAX,
    HTTP1_READ_BUFFER_BYTES_MAX, HTTP_BODY_IDLE_TIMEOUT, HTTP_CLOSE_GRACE, HTTP_CONNECTIONS_MAX,
    HTTP_CONNECTION_IDLE_TIMEOUT, HTTP_HEADER_READ_TIMEOUT, TLS_HANDSHAKE_TIMEOUT,
};
use crate::request_body::{BodyBudget, BodyFault, BodyLedger, RequestBody};
use crate::RestApi;

/// The operator's routes: `Some(response)` for a path they own, `None` for the HTTP API's.
pub type OpsRoutes = Arc<dyn Fn(&Request<Incoming>) -> Option<Response<Full<Bytes>>> + Send + Sync>;

/// ALPN protocols the HTTP listener offers over TLS, most preferred first.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why the HTTP listener's security settings cannot be used (the broker does not start).
#[derive(Debug, thiserror::Error)]
pub enum SecurityConfigError {
    #[error("millrace.http.listener.security.protocol=SSL: {0}")]
    Tls(#[from] TlsError),
    #[error("millrace.http.authentication: {0}")]
    Sasl(#[from] SaslConfigError),
}

/// The HTTP listener's TLS (with `SSL`) and authentication.
pub struct HttpSecurity {
    pub tls: Option<Arc<TlsListener>>,
    pub authentication: Arc<Authentication>,
}

impl HttpSecurity {
    /// What `config` says (`millrace.http.*`, the TLS settings and PLAIN users of
    /// `millrace.http.listener.name`); SCRAM credentials come from the metadata image once
    /// [`serve`] has the API. The TLS material is read here, so that an unusable keystore stops
    /// the broker at start-up, naming the key.
    pub fn from_config(config: &BrokerConfig) -> Result<Self, SecurityConfigError> {
        use millrace_cluster::config_rest::HttpSecurityProtocol;
        let rest = config.rest();
        let tls = match rest.security_protocol {
            HttpSecurityProtocol::Plaintext => None,
            HttpSecurityProtocol::Ssl => Some(TlsListener::new(
                TlsSettings::from_config(config, &rest.listener_name)?.with_alpn(&ALPN_PROTOCOLS),
            )?),
        };
        let authentication = Authentication::from_config(config, &rest)?;
        Ok(Self {
            tls,
            authentication: Arc::new(authentication),
        })
    }

    /// Plaintext, nobody asked for credentials.
    pub fn plaintext() -> Self {
        Self {
            tls: None,
            authentication: Arc::new(Authentication::new(
                millrace_cluster::config_rest::HttpAuthentication::None,
                false,
                Duration::ZERO,
                Default::default(),
            )),
        }
    }
}

/// The bounds of one connection that are settings or that tests shorten; the rest are
/// [`crate::limits`] constants.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// `millrace.rest.request.bytes.max`: one body at most, and one connection's body budget.
    pub request_bytes_max: usize,
    /// [`HTTP_BODY_IDLE_TIMEOUT`].
    pub body_idle_timeout: Duration,
    /// [`HTTP_CONNECTION_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
}

impl ConnectionLimits {
    /// The limits with bodies of at most `request_bytes_max` bytes.
    pub fn new(request_bytes_max: usize) -> Self {
        Self {
            request_bytes_max,
            body_idle_timeout: HTTP_BODY_IDLE_TIMEOUT,
            idle_timeout: HTTP_CONNECTION_IDLE_TIMEOUT,
        }
    }
}

/// What every connection of the listener shares.
struct Shared {
    router: axum::Router,
    ops: OpsRoutes,
    security: HttpSecurity,
    limits: ConnectionLimits,
}

/// Serves HTTP on `listener` with the HTTP API of `api` until `stop` is cancelled.
pub async fn serve(
    listener: TcpListener,
    api: Arc<RestApi>,
    security: HttpSecurity,
    ops: OpsRoutes,
    stop: CancellationToken,
) {
    let limits = ConnectionLimits::new(api.config.request_bytes_max);
    let image_of = api.clone();
    let credentials: CredentialLookup = Arc::new(move |user, mechanism| {
        image_of
            .gateway
            .image()
            .ok()?
            .scram_credential(user, mechanism)
            .cloned()
    });
    security.authentication.use_scram_credentials(credentials);
    serve_router(listener, crate::router(api), security, limits, ops, stop).await;
}

/// Serves HTTP on `listener` with `router` as the API until `stop` is cancelled.
pub async fn serve_router(
    listener: TcpListener,
    router: axum::Router,
    security: HttpSecurity,
    limits: ConnectionLimits,
    ops: OpsRoutes,
    stop: CancellationToken,
) {
    if let Some(tls) = &security.tls {
        tokio::spawn(watch_tls_files(tls.clone(), stop.clone()));
    }
    let shared = Arc::new(Shared {
        router: router.layer(DefaultBodyLimit::max(limits.request_bytes_max)),
        ops,
        security,
        limits,
    });
    let permits = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
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
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            connection(stream, peer, shared, stop).await;
            drop(permit);
        });
    }
}

/// Reloads the HTTP listener's TLS configuration when its files change, until `stop`.
async fn watch_tls_files(tls: Arc<TlsListener>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(TLS_FILES_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let tls = tls.clone();
        if tokio::task::spawn_blocking(move || tls.reload_if_changed())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// One connection: the TLS handshake and the client certificate's principal first when the
/// listener is SSL.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let Some(tls) = shared.security.tls.clone() else {
        serve_connection(TokioIo::new(stream), peer, None, shared, stop).await;
        return;
    };
    let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream));
    let stream = tokio::select! {
        _ = stop.cancelled() => return,
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                info!(%peer, error = %e, "HTTP TLS handshake failed; closing connection");
                millrace_metrics::global().tls_handshake_failures.inc();
                return;
            }
            Err(_) => {
                info!(%peer, "HTTP TLS handshake not done within {TLS_HANDSHAKE_TIMEOUT:?}; closing connection");
                millrace_metrics::global().tls_handshake_failures.inc();
                return;
            }
        },
    };
    let certificate = match stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
    {
        None => None,
        Some(cert) => match certificate_principal(cert.as_ref(), &tls.principal_mapper()) {
            Some(principal) => Some(principal),
            None => {
                info!(%peer, "no ssl.principal.mapping.rules rule applies to the HTTP client's certificate (or its subject cannot be read); closing connection");
                millrace_metrics::global().authentication_failures.inc();
                return;
            }
        },
    };
    serve_connection(TokioIo::new(stream), peer, certificate, shared, stop).await;
}

/// What one connection's requests share.
struct ConnectionState {
    peer: SocketAddr,
    /// The verified client certificate's principal (`User:<name>`).
    certificate: Option<String>,
    budget: BodyBudget,
    activity: Arc<Activity>,
}

/// Requests in flight on a connection, and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    /// When the connection is idle for `timeout` if nothing starts: `None` while a request is in
    /// flight.
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| *self.last.lock() + timeout)
    }

    fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

/// One request in flight, until its answer's body is sent (or dropped).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's body that keeps its request in flight until it is sent.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves HTTP/1.1 or HTTP/2 on `io` until the client closes, the connection idles out or `stop`.
async fn serve_connection<I>(
    io: I,
    peer: SocketAddr,
    certificate: Option<String>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity {
        in_flight: AtomicUsize::new(0),
        last: Mutex::new(Instant::now()),
    });
    let state = Arc::new(ConnectionState {
        peer,
        certificate,
        budget: BodyBudget::new(shared.limits.request_bytes_max),
        activity: activity.clone(),
    });
    let idle_timeout = shared.limits.idle_timeout;
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let shared = shared.clone();
        let state = state.clone();
        async move {
            let in_flight = state.activity.start();
            let response = handle(request, &shared, &state).await;
            Ok::<_, Infallible>(response.map(|inner| Tracked {
                inner,
                _in_flight: in_flight,
            }))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HTTP_HEADER_READ_TIMEOUT)
        .max_buf_size(HTTP1_READ_BUFFER_BYTES_MAX)
        .max_headers(HTTP1_HEADERS_MAX);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_STREAMS_PER_CONNECTION_MAX)
        .initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(H2_CONNECTION_WINDOW_BYTES)
        .adaptive_window(false)
        .max_header_list_size(H2_HEADER_LIST_BYTES_MAX)
        .max_pending_accept_reset_streams(H2_PENDING_RESET_STREAMS_MAX)
        .max_local_error_reset_streams(H2_LOCAL_ERROR_RESETS_MAX)
        .max_send_buf_size(H2_SEND_BUFFER_BYTES_MAX);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    // Set once a graceful close began: when the connection is dropped if it has not finished.
    let mut closing: Option<Instant> = None;
    loop {
        let wake = closing
            .or_else(|| activity.idle_at(idle_timeout))
            .unwrap_or_else(|| Instant::now() + idle_timeout);
        tokio::select! {
            done = connection.as_mut() => {
                if let Err(e) = done {
                    debug!(%peer, error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            _ = stop.cancelled(), if closing.is_none() => {
                connection.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + HTTP_CLOSE_GRACE);
            }
            _ = tokio::time::sleep_until(wake) => {
                if closing.is_some() {
                    debug!(%peer, "HTTP connection did not close within {HTTP_CLOSE_GRACE:?}; dropping it");
                    return;
                }
                if activity.idle_at(idle_timeout).is_some_and(|at| at <= Instant::now()) {
                    debug!(%peer, "HTTP connection idle for {idle_timeout:?}; closing it");
                    connection.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + HTTP_CLOSE_GRACE);
                }
            }
        }
    }
}

/// One request: the operator's route if it is one, else the HTTP API's as the authenticated
/// caller.
async fn handle(
    request: Request<Incoming>,
    shared: &Shared,
    state: &ConnectionState,
) -> Response<Body> {
    let authentication = &shared.security.authentication;
    let ops_first = !authentication.operator_routes();
    if ops_first {
        if let Some(response) = (shared.ops)(&request) {
            return response.map(Body::new);
        }
    }
    let principal = match authentication
        .principal(request.headers(), state.certificate.as_deref())
        .await
    {
        Ok(principal) => principal,
        Err(refusal) => return refusal.response(),
    };
    if !ops_first {
        if let Some(response) = (shared.ops)(&request) {
            return response.map(Body::new);
        }
    }
    let limits = &shared.limits;
    if declared_length(&request).is_some_and(|n| n > limits.request_bytes_max as u64) {
        return too_large(limits.request_bytes_max).into_response();
    }
    let ledger = BodyLedger::default();
    let mut request = request.map(|body| {
        Body::new(RequestBody::new(
            body,
            state.budget.clone(),
            ledger.clone(),
            limits.request_bytes_max,
            limits.body_idle_timeout,
        ))
    });
    request.extensions_mut().insert(Caller {
        principal,
        peer: state.peer,
    });
    let response = match shared.router.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    match ledger.fault() {
        Some(BodyFault::TooLarge) => too_large(limits.request_bytes_max).into_response(),
        Some(BodyFault::Idle) => RestError::new(
            StatusCode::REQUEST_TIMEOUT,
            i32::from(StatusCode::REQUEST_TIMEOUT.as_u16()),
            format!(
                "The request body stopped arriving for {} ms",
                limits.body_idle_timeout.as_millis()
            ),
        )
        .into_response(),
        Some(BodyFault::Busy) => RestError::new(
            StatusCode::TOO_MANY_REQUESTS,
            code::TOO_MANY_REQUESTS,
            format!(
                "This connection's request bodies in flight hold {} bytes \
                 (millrace.rest.request.bytes.max); retry, or send fewer at once",
                state.budget.total()
            ),
        )
        .into_response(),
        None => confluent_error_body(response).await,
    }
}

/// The request's `Content-Length`, if it declares one that reads as a number.
fn declared_length<B>(request: &Request<B>) -> Option<u64> {
    request
        .headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// 413 with Confluent's body.
fn too_large(limit: usize) -> RestError {
    RestError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        code::PAYLOAD_TOO_LARGE,
        format!("The request body is larger than {limit} bytes (millrace.rest.request.bytes.max)"),
    )
}

/// An error answer in plain text (axum's rejections: its body limit's 413, a path or query that
/// does not parse) rewritten as Confluent's JSON body, `error_code` the HTTP status as Confluent
/// writes generic errors; JSON answers and successes pass unchanged.
pub async fn confluent_error_body(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let plain = response
        .headers()
        .get(CONTENT_TYPE)
        .is_none_or(|t| t.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match Limited::new(body, ERROR_TEXT_BYTES_MAX).collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes())
            .trim()
            .to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    parts.headers.remove(CONTENT_TYPE);
    parts.headers.remove(CONTENT_LENGTH);
    let mut rewritten = RestError::new(status, i32::from(status.as_u16()), message).into_response();
    for (name, value) in parts.headers.iter() {
        rewritten.headers_mut().append(name, value.clone());
    }
    rewritten
}
