//! REST v3 produce: `POST /v3/clusters/{cluster_id}/topics/{topic_name}/records`, one record per
//! request or a stream of JSON records in one request answered record by record (Confluent's
//! streaming mode).

use std::sync::Arc;

use axum::Router;

use crate::RestApi;

/// The v3 produce routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new()
}
