//! Limits of the front end. Each is a named constant with its unit and what enforces it.
//! Limits that operators tune (`socket.request.max.bytes`, `max.connections`,
//! `connections.max.idle.ms`) are broker configs instead, read from `BrokerConfig`.

/// Requests decoded but not yet answered on one connection (count). Enforced by the bounded
/// channel between a connection's reader and writer: when full, the reader stops reading, which
/// pushes back on the client through TCP. Clients keep at most 5 in flight, so this never bites a
/// well-behaved one.
pub const IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX: usize = 32;

/// Longest a Fetch may wait for data (ms), whatever `max_wait_ms` says. Kafka has no cap; this one
/// keeps a hostile client from parking a request for days. Enforced in `api::fetch`.
pub const FETCH_WAIT_MS_MAX: u64 = 60_000;

/// Longest a Produce may wait for durability (ms), whatever `timeout_ms` says. Enforced in
/// `api::produce`.
pub const PRODUCE_TIMEOUT_MS_MAX: u64 = 300_000;

/// Milliseconds: the longest a forwarded admin request (CreateTopics, DeleteTopics, …) waits for
/// the controller, whatever its `timeout_ms` asks (0 asks for this bound). Enforced by
/// `api::forward::timeout`.
pub const ADMIN_TIMEOUT_MS_MAX: u64 = 60_000;

/// Most bytes one Fetch response may carry in records, whatever `max_bytes` says (Kafka's
/// `fetch.max.bytes` broker default, 55 MiB).
pub const FETCH_RESPONSE_BYTES_MAX: usize = 57_671_680;

/// Smallest legal request frame: api key (2) + api version (2) + correlation id (4) + client id
/// length (2).
pub const REQUEST_FRAME_BYTES_MIN: usize = 10;

/// Bytes a connection's reader reads ahead of the request it is cutting (size fields and small
/// requests come from one read). Not counted in `queued.max.request.bytes`: it is per connection,
/// bounded by `max.connections`, and held only while unread bytes wait in it
/// ([`crate::read_buffer`]). Larger bodies bypass it and are read straight into their granted
/// buffer.
pub const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Milliseconds a client has to finish the TLS handshake on a TLS listener before the connection
/// is closed (enforced in `connection::serve_connection`).
pub const TLS_HANDSHAKE_MS_MAX: u64 = 10_000;

/// Bytes of a segment file read at a time when a Fetch response goes out over TLS (no `sendfile`
/// there): per connection, one piece in memory at a time.
pub const TLS_FILE_READ_BYTES: usize = 256 * 1024;

/// How long shutdown waits for in-flight requests before closing connections anyway (ms).
pub const SHUTDOWN_DRAIN_MS_MAX: u64 = 10_000;

const _: () = assert!(FETCH_WAIT_MS_MAX < PRODUCE_TIMEOUT_MS_MAX);
