//! The HTTP API's fixed bounds (the operator's are `millrace.rest.*`, [`RestConfig`]). Each says
//! its unit, why, and what enforces it.
//!
//! [`RestConfig`]: millrace_cluster::config_rest::RestConfig

use std::time::Duration;

/// Open HTTP connections at most; a further connection waits in the accept queue
/// (`server::serve`'s semaphore).
pub const HTTP_CONNECTIONS_MAX: usize = 1024;
/// The time a client has to send a request's headers (and, on HTTP/1.1, between requests on a
/// kept-alive connection): hyper's `header_read_timeout`.
pub const HTTP_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a request body may go without a byte arriving before the request answers 408: a client
/// that sends half a body and stalls holds no memory and no handler for longer
/// (`request_body::RequestBody`). Between frames, not for the whole body, so that v3's streaming
/// produce (one request, records for as long as the client sends them) stays open.
pub const HTTP_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a request body's frame waits for its connection's body budget
/// (`millrace.rest.request.bytes.max` bytes of bodies in flight at once) before the request
/// answers 429: bodies that hold the budget between them and wait on each other are undone
/// quickly (`request_body::RequestBody`).
pub const HTTP_BODY_BUDGET_WAIT: Duration = Duration::from_secs(1);
/// A connection with no request in flight for this long is closed (gracefully: HTTP/2 GOAWAY, or
/// HTTP/1.1 closing after the answer): idle keep-alive connections do not hold one of the
/// [`HTTP_CONNECTIONS_MAX`] slots for ever (`server`'s idle watch).
pub const HTTP_CONNECTION_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// After a graceful close starts (idle, or the broker stopping), the longest the connection may
/// take to finish what is in flight before it is dropped.
pub const HTTP_CLOSE_GRACE: Duration = Duration::from_secs(10);
/// The TLS handshake's time bound, as on the Kafka listeners.
pub const TLS_HANDSHAKE_TIMEOUT: Duration =
    Duration::from_millis(millrace_frontend::limits::TLS_HANDSHAKE_MS_MAX);

/// HTTP/1.1: hyper's read buffer at most, in bytes, which bounds a request line and its headers
/// (a longer head is refused with 431).
pub const HTTP1_READ_BUFFER_BYTES_MAX: usize = 64 * 1024;
/// HTTP/1.1: headers per request at most (hyper refuses more with 431).
pub const HTTP1_HEADERS_MAX: usize = 100;

/// HTTP/2: streams (requests) open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS;
/// h2 refuses a further one with REFUSED_STREAM).
pub const H2_STREAMS_PER_CONNECTION_MAX: u32 = 100;
/// HTTP/2: bytes a client may send on one stream before the server reads them
/// (SETTINGS_INITIAL_WINDOW_SIZE; h2 enforces it with FLOW_CONTROL_ERROR).
pub const H2_STREAM_WINDOW_BYTES: u32 = 1024 * 1024;
/// HTTP/2: bytes a client may send on all streams of a connection together before the server
/// reads them: what one connection's unread request bodies can hold at most. What has been read
/// is bounded by the connection's body budget (`millrace.rest.request.bytes.max`).
pub const H2_CONNECTION_WINDOW_BYTES: u32 = 4 * 1024 * 1024;
/// HTTP/2: the largest header list, in bytes, of one request (SETTINGS_MAX_HEADER_LIST_SIZE;
/// h2 answers a larger one with 431).
pub const H2_HEADER_LIST_BYTES_MAX: u32 = 32 * 1024;
/// HTTP/2: streams a client may reset before the server accepted them, at once (the "rapid
/// reset" attack, CVE-2023-44487): past it, h2 closes the connection.
pub const H2_PENDING_RESET_STREAMS_MAX: usize = 20;
/// HTTP/2: streams the server may reset for a client's errors on one connection before closing
/// it (h2's guard against a client that provokes resets without end).
pub const H2_LOCAL_ERROR_RESETS_MAX: usize = 1024;
/// HTTP/2: bytes of answers buffered per stream for a client that does not read them.
pub const H2_SEND_BUFFER_BYTES_MAX: usize = 1024 * 1024;

/// HTTP Basic: the longest `Authorization` value read, in bytes (a longer one is refused as bad
/// credentials without being decoded).
pub const BASIC_CREDENTIALS_BYTES_MAX: usize = 4096;
/// Checked Basic credentials remembered, at most, so that PBKDF2 (SCRAM users) does not run for
/// every request; past it the oldest is dropped (`auth::Verified`).
pub const AUTH_CACHE_ENTRIES_MAX: usize = 1024;
/// How long a remembered check holds. A SCRAM credential deleted or changed takes effect at once
/// all the same (the entry keeps the StoredKey it was checked against).
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(30);
/// PBKDF2 derivations (a few milliseconds of CPU each) running at once for Basic checks; more
/// wait, so that wrong passwords cannot take every blocking thread.
pub const AUTH_DERIVATIONS_CONCURRENT_MAX: usize = 4;

/// The longest an HTTP answer is held back for a quota's `throttle_time_ms`
/// (`Gateway::throttle`); Kafka's throttle times stay well below it with the default quota
/// window (11 × 1 s).
pub const THROTTLE_MS_MAX: u64 = 60_000;

/// Bytes of a plain-text error answer (an axum rejection) read to turn it into Confluent's JSON
/// error body; the rest is cut.
pub const ERROR_TEXT_BYTES_MAX: usize = 4096;

/// The client id the HTTP API's Kafka calls carry (quotas by client id see it).
pub const CLIENT_ID: &str = "millrace-rest";

const _: () = assert!(H2_STREAM_WINDOW_BYTES <= H2_CONNECTION_WINDOW_BYTES);
const _: () = assert!(HTTP_BODY_BUDGET_WAIT.as_millis() < HTTP_BODY_IDLE_TIMEOUT.as_millis());
// h2's windows are at most 2^31 - 1 (RFC 9113 §6.9.1).
const _: () = assert!(H2_CONNECTION_WINDOW_BYTES <= i32::MAX as u32);
// hyper refuses a read buffer under 8 KiB.
const _: () = assert!(HTTP1_READ_BUFFER_BYTES_MAX >= 8192);
// A Basic header fits in the header bounds it is read under.
const _: () = assert!(BASIC_CREDENTIALS_BYTES_MAX < H2_HEADER_LIST_BYTES_MAX as usize);
const _: () = assert!(BASIC_CREDENTIALS_BYTES_MAX < HTTP1_READ_BUFFER_BYTES_MAX);
