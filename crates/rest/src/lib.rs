//! The HTTP API, a second front end beside the Kafka listener (decision 0075): Confluent's REST
//! Proxy v2 ([`v2`]) and v3 ([`v3`], produce in [`v3_records`]) and PolarStreams-style stateless consumers
//! ([`stateless`]), served on the broker's HTTP listener next to `/metrics`, `/health` and
//! `/ready` ([`server`]): HTTP/1.1 and HTTP/2, TLS with the broker's certificates, HTTP Basic
//! against the SASL users or the mTLS principal ([`auth`]), bounded bodies ([`request_body`]).
//!
//! Every request reaches the broker's services through the same Kafka API handlers a Kafka client
//! meets, called in process with the HTTP client's principal ([`gateway`]): ACLs, quotas, error
//! codes and validation are the Kafka listener's, not a copy of them. What must happen on another
//! broker (the partition's leader, the group's coordinator) is forwarded there.

pub mod auth;
pub mod consume;
pub mod error;
pub mod gateway;
pub mod limits;
pub mod membership;
pub mod produce;
pub mod records;
pub mod request_body;
pub mod server;
pub mod stateless;
pub mod v2;
pub mod v3;
pub mod v3_records;

use std::sync::Arc;

use axum::Router;
use millrace_cluster::config_rest::RestConfig;

pub use error::RestError;
pub use gateway::{Caller, Gateway};

/// The HTTP API's state: the way into the broker and its settings. Created when the HTTP listener
/// opens (before the store); [`RestApi::attach`] hands it the broker once the broker serves.
pub struct RestApi {
    pub gateway: Gateway,
    pub config: RestConfig,
    pub v2: v2::State,
}

impl RestApi {
    /// The API of a broker that is not yet serving: every call answers 503 until
    /// [`RestApi::attach`].
    pub fn new(config: RestConfig, listener: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            gateway: Gateway::new(listener),
            v2: v2::State::new(&config),
            config,
        })
    }

    /// The broker serves: calls reach it from now on.
    pub fn attach(&self, ctx: Arc<millrace_frontend::BrokerContext>) {
        self.gateway.attach(ctx);
    }
}

/// Every route of the HTTP API (not the operator's `/metrics`, `/health`, `/ready`).
pub fn router(api: Arc<RestApi>) -> Router {
    Router::new()
        .merge(v2::routes())
        .merge(v3::routes())
        .merge(v3_records::routes())
        .merge(stateless::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(api)
}

/// Confluent's answer for a path it does not serve.
async fn not_found() -> RestError {
    RestError::new(
        axum::http::StatusCode::NOT_FOUND,
        error::code::NOT_FOUND,
        "HTTP 404 Not Found",
    )
}

/// Confluent's answer for a method a path does not serve.
async fn method_not_allowed() -> RestError {
    RestError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        error::code::METHOD_NOT_ALLOWED,
        "HTTP 405 Method Not Allowed",
    )
}
