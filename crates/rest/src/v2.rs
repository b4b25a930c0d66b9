//! Confluent REST Proxy v2: topics, produce, brokers and consumer instances, with Confluent's
//! content types (`application/vnd.kafka.v2+json`, `….json.v2+json`, `….binary.v2+json`,
//! `application/json`) and error codes.

use axum::Router;
use millrace_cluster::config_rest::RestConfig;

use crate::RestApi;
use std::sync::Arc;

/// The v2 API's own state: the consumer instances this broker holds.
pub struct State {}

impl State {
    pub fn new(_config: &RestConfig) -> Self {
        Self {}
    }
}

/// The v2 routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new()
}
