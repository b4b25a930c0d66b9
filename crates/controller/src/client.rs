//! The broker's side of the controller: sends a [`ControllerRequest`] to whichever node is the
//! active controller (this node's own service when it leads, otherwise over the controller
//! listener), following leadership changes until an answer or the deadline (Kafka's
//! `NodeToControllerChannelManager`).
//!
//! A request whose answer was lost may be retried and so applied twice; every request is either
//! idempotent (registration of the same incarnation, heartbeats) or answers a repeat with an error
//! the caller understands (TOPIC_ALREADY_EXISTS, INVALID_UPDATE_VERSION), as with Kafka.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use crate::limits::CONTROLLER_RETRY_MS;
use crate::messages::{ControllerError, ControllerRequest, ControllerResponse};
use crate::quorum::MetadataQuorum;
use crate::service::ControllerService;

/// Sends requests to the active controller.
pub struct ControllerClient {
    node_id: i32,
    quorum: Arc<dyn MetadataQuorum>,
    local: Option<Arc<ControllerService>>,
}

impl ControllerClient {
    /// `local`: this node's controller service, if it is a quorum voter.
    pub fn new(
        node_id: i32,
        quorum: Arc<dyn MetadataQuorum>,
        local: Option<Arc<ControllerService>>,
    ) -> Self {
        Self {
            node_id,
            quorum,
            local,
        }
    }

    /// The active controller as this node knows it (Metadata's and DescribeCluster's
    /// `controller_id`).
    pub fn controller_id(&self) -> Option<i32> {
        self.quorum.view().borrow().leader
    }

    /// Sends `req` to the active controller; retries while there is none or it moved, until
    /// `timeout`. A timeout answers `ControllerError::Timeout`.
    pub async fn request(&self, req: ControllerRequest, timeout: Duration) -> ControllerResponse {
        let deadline = Instant::now() + timeout;
        let retry = Duration::from_millis(CONTROLLER_RETRY_MS);
        let mut view = self.quorum.view();
        loop {
            let leader = view.borrow_and_update().leader;
            let response = match leader {
                Some(l) if l == self.node_id && self.local.is_some() => match &self.local {
                    Some(service) => Some(service.submit(req.clone()).await),
                    None => None,
                },
                Some(l) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let bytes = match req.encode() {
                        Ok(bytes) => bytes,
                        Err(e) => {
                            return ControllerResponse::Error {
                                error: ControllerError::Internal(e.to_string()),
                            }
                        }
                    };
                    match self.quorum.call(l, bytes, left).await {
                        Ok(bytes) => match ControllerResponse::decode(&bytes) {
                            Ok(r) => Some(r),
                            Err(e) => {
                                return ControllerResponse::Error {
                                    error: ControllerError::Internal(e),
                                }
                            }
                        },
                        Err(e) => {
                            debug!(error = %e, "controller call failed; retrying");
                            None
                        }
                    }
                }
                None => None,
            };
            match response {
                Some(ControllerResponse::Error {
                    error: ControllerError::NotController { .. },
                })
                | None => {}
                Some(r) => return r,
            }
            let now = Instant::now();
            if now >= deadline {
                return ControllerResponse::Error {
                    error: ControllerError::Timeout(format!(
                        "no active controller answered within {} ms",
                        timeout.as_millis()
                    )),
                };
            }
            // Wait for a leadership change or a short while, whichever comes first.
            let pause = retry.min(deadline - now);
            if let Ok(Err(_closed)) = tokio::time::timeout(pause, view.changed()).await {
                // The quorum is gone (shutting down): no change will come; do not spin.
                tokio::time::sleep(pause).await;
            }
        }
    }
}
