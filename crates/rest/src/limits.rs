//! The HTTP API's fixed bounds (the operator's are `millrace.rest.*`, [`RestConfig`]).
//!
//! [`RestConfig`]: millrace_cluster::config_rest::RestConfig

use std::time::Duration;

/// Open HTTP connections at most; a further connection waits in the accept queue.
pub const HTTP_CONNECTIONS_MAX: usize = 1024;
/// The time a client has to send a request's headers (and, on HTTP/1.1, between requests on a
/// kept-alive connection).
pub const HTTP_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The client id the HTTP API's Kafka calls carry (quotas by client id see it).
pub const CLIENT_ID: &str = "millrace-rest";
