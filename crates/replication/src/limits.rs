//! Every limit of replication, as a named constant.

/// Bytes: largest answer accepted from another broker (a replica Fetch answer is bounded by
/// `replica.fetch.response.max.bytes`, 10 MiB by default, plus headers; a broker's own
/// `socket.request.max.bytes` bounds what it accepts the same way). Enforced by
/// `client::BrokerConnection::send` before allocating.
pub const INTER_BROKER_RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Milliseconds: how often the repair task retries damaged replicas it could not repair yet.
pub const REPAIR_RETRY_MS: u64 = 1_000;

/// Bytes: most bytes one repair Fetch asks for (a damaged range larger than this takes several).
pub const REPAIR_FETCH_BYTES_MAX: i32 = 8 * 1024 * 1024;

/// Fetches: most Fetch requests one damaged range may take before its repair gives up for now.
pub const REPAIR_FETCHES_PER_RANGE_MAX: usize = 1_024;

/// SaslAuthenticate round trips one inter-broker SASL exchange may take (PLAIN takes one, SCRAM
/// two); a server asking for more is not trusted.
pub const SASL_ROUNDS_MAX: usize = 4;
/// Per mille of a SASL session's lifetime (KIP-368) after which an inter-broker connection
/// authenticates again before its next request, as Kafka's clients do (85-95 %).
pub const SASL_REAUTH_AT_PER_MILLE: u32 = 850;
