//! Limits of the chaos proxy. Each is a named constant with its unit, why it exists and what
//! enforces it; relations between them are checked at compile time below.

/// Bytes read from one socket at a time (bytes). The read buffer of every connection direction
/// has this size, so it also bounds one queued chunk. Enforced in `route::read_loop`.
pub const CHUNK_BYTES: usize = 16 * 1024;

/// Chunks queued between the reader and the writer of one connection direction (count). With
/// `CHUNK_BYTES` this bounds what a passing or delayed direction buffers (1 MiB); when full, the
/// reader waits, which pushes back on the sender through TCP. Enforced by the bounded channel in
/// `route::serve_pair`.
pub const IN_FLIGHT_CHUNKS_MAX: usize = 64;

/// Bytes one held connection direction buffers before it spills (bytes). A hold that would exceed
/// it turns into a cut for that connection: the held bytes are dropped and the connection is
/// closed when the direction is healed (its stream has a gap). Enforced in `route::read_loop`.
pub const HOLD_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Longest delay a direction may get (ms): a longer one is a cut and should be asked for as one.
/// Enforced by the control protocol (`control::parse`).
pub const DELAY_MS_MAX: u64 = 60_000;

/// Routes one proxy process serves (count). A 3-node cluster needs 15; enforced by
/// `Proxy::add_route`.
pub const ROUTES_MAX: usize = 256;

/// Open connections per route (count). Kafka clients keep a few per broker; a connection beyond
/// this is closed at accept. Enforced in `route::accept_loop`.
pub const CONNECTIONS_PER_ROUTE_MAX: usize = 1024;

/// Longest control line (bytes, without the newline). A longer line is answered with an error and
/// the control connection is closed. Enforced in `control::serve`.
pub const CONTROL_LINE_BYTES_MAX: usize = 4096;

/// Control connections open at once (count). Enforced in `control::serve`.
pub const CONTROL_CONNECTIONS_MAX: usize = 16;

/// Longest wait for the upstream's TCP handshake (ms). Enforced in `route::serve_connection`.
pub const UPSTREAM_CONNECT_MS_MAX: u64 = 5_000;

/// Longest route name (bytes; ASCII letters, digits, `-`, `_`, `.`, `>`). Enforced by
/// `control::parse`.
pub const ROUTE_NAME_BYTES_MAX: usize = 64;

const _: () = assert!(CHUNK_BYTES <= HOLD_BYTES_MAX);
const _: () = assert!(ROUTE_NAME_BYTES_MAX < CONTROL_LINE_BYTES_MAX);
const _: () = assert!(IN_FLIGHT_CHUNKS_MAX * CHUNK_BYTES <= HOLD_BYTES_MAX);
