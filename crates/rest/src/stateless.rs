//! Stateless consumers, PolarStreams' style (`/v1/consumer/…`): register, poll (which commits the
//! previous poll's positions), commit, goodbye — served by any broker of a cluster, the state kept
//! by the group coordinator, not in a broker's memory.

use axum::Router;

use crate::RestApi;
use std::sync::Arc;

/// The stateless consumer's routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new()
}
