//! Confluent REST Proxy v3 (`/v3/clusters/…`), following Confluent's published OpenAPI document;
//! Millrace's own document for what is served is `docs/http-v3.openapi.yaml`.

use axum::Router;

use crate::RestApi;
use std::sync::Arc;

/// The v3 routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new()
}
