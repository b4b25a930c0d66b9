//! Bounds on broker and topic config values, as named constants. Each says its unit, why it
//! exists and what enforces it; the ones that feed the store are tied to the store's own limits by
//! compile-time assertions, so a value the config accepts is one the store can keep.

use millrace_store::limits::BATCH_BYTES_MAX;

/// Bytes: largest `message.max.bytes` (broker) and `max.message.bytes` (topic), counted as Kafka
/// counts a batch (12-byte log overhead included). The store reads back no batch larger than
/// `BATCH_BYTES_MAX` (recovery stops at it as corruption), so a larger limit would acknowledge a
/// batch that a restart cuts off. Enforced by config validation: exit 2 at startup, INVALID_CONFIG
/// in CreateTopics/AlterConfigs.
pub const MESSAGE_MAX_BYTES_MAX: i64 = BATCH_BYTES_MAX as i64;

/// Bytes: largest `replica.fetch.max.bytes` (what a follower asks of one partition per Fetch).
/// Kafka returns the first batch even when it is larger than this, so a follower never needs more
/// than one largest batch to make progress; a larger value would only size reads beyond any batch
/// the store holds. Enforced by config validation (exit 2 at startup).
pub const REPLICA_FETCH_MAX_BYTES_MAX: i64 = BATCH_BYTES_MAX as i64;

/// Bytes: room a Produce request needs around one batch (header, client id, transactional id,
/// topic name, partition fields), with a wide margin: Kafka's request header and Produce fields
/// take well under 64 KiB even with the longest names.
pub const PRODUCE_REQUEST_OVERHEAD_BYTES_MAX: i64 = 64 * 1024;

/// Bytes: largest `socket.request.max.bytes`. A request is held whole in memory while it is read
/// and decoded, so one request is capped at 1 GiB; it must still carry the largest batch the store
/// accepts. Enforced by config validation (exit 2 at startup).
pub const SOCKET_REQUEST_MAX_BYTES_MAX: i64 = 1024 * 1024 * 1024;

/// Bytes: largest `queued.max.request.bytes` (the broker-wide budget for requests being read and
/// queued). A budget is only useful below the machine's memory; 64 GiB is far above any default
/// and catches a typo such as an extra digit. Enforced by config validation (exit 2 at startup).
pub const QUEUED_MAX_REQUEST_BYTES_MAX: i64 = 64 * 1024 * 1024 * 1024;

/// Bytes: share of `queued.max.request.bytes` that only small requests may use, so that large
/// half-sent requests cannot take the last of the budget and stall every other client (heartbeats,
/// metadata, ordinary produce requests). Enforced by the front end's request memory pool; the
/// config check keeps the budget at least `socket.request.max.bytes` plus this.
pub const SMALL_REQUEST_RESERVE_BYTES: i64 = 16 * 1024 * 1024;

/// Bytes: a request at most this large counts as small for `SMALL_REQUEST_RESERVE_BYTES`. Kafka's
/// clients cap a request at 1 MiB by default (`max.request.size`, librdkafka's
/// `message.max.bytes`), so ordinary traffic is small.
pub const SMALL_REQUEST_BYTES_MAX: i64 = 1024 * 1024;

const _: () = assert!(MESSAGE_MAX_BYTES_MAX <= BATCH_BYTES_MAX as i64);
const _: () = assert!(REPLICA_FETCH_MAX_BYTES_MAX <= BATCH_BYTES_MAX as i64);
const _: () = assert!(
    SOCKET_REQUEST_MAX_BYTES_MAX >= MESSAGE_MAX_BYTES_MAX + PRODUCE_REQUEST_OVERHEAD_BYTES_MAX
);
// The frame's size field is an i32.
const _: () = assert!(SOCKET_REQUEST_MAX_BYTES_MAX <= i32::MAX as i64);
const _: () = assert!(
    QUEUED_MAX_REQUEST_BYTES_MAX >= SOCKET_REQUEST_MAX_BYTES_MAX + SMALL_REQUEST_RESERVE_BYTES
);
const _: () = assert!(SMALL_REQUEST_BYTES_MAX <= SMALL_REQUEST_RESERVE_BYTES);

/// Bytes: most a BROKER resource's dynamic configs (keys and values) may take, per broker and for
/// the cluster default; more is refused with INVALID_CONFIG. The dynamic keys are a few dozen
/// short values, far below this. Enforced by `config_broker::check`.
pub const BROKER_CONFIG_BYTES_MAX: usize = 64 * 1024;
