//! Every limit of replication, as a named constant.

/// Bytes: largest answer accepted from another broker (a replica Fetch answer is bounded by
/// `replica.fetch.response.max.bytes`, 10 MiB by default, plus headers; a broker's own
/// `socket.request.max.bytes` bounds what it accepts the same way). Enforced by
/// `client::BrokerConnection::send` before allocating.
pub const INTER_BROKER_RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;
