//! Forwarding of admin requests to the active controller (Kafka's request forwarding): every
//! broker accepts CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
//! IncrementalAlterConfigs and ElectLeaders, hands them to the controller, and answers once the
//! controller committed them — and once this broker's own image shows the change, so that the
//! client's next Metadata to this broker sees it (bounded: the answer never waits long for that).

use std::sync::Arc;
use std::time::Duration;

use millrace_cluster::image::MetadataImage;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use crate::limits::ADMIN_TIMEOUT_MS_MAX;
use crate::BrokerContext;

/// How long an answer may wait for this broker's image to show a committed change.
const IMAGE_CATCH_UP_WAIT: Duration = Duration::from_secs(2);

/// The request's `timeout_ms`, bounded (0 or less: the longest we allow).
pub fn timeout(timeout_ms: i32) -> Duration {
    let ms = u64::try_from(timeout_ms).unwrap_or(0);
    Duration::from_millis(if ms == 0 {
        ADMIN_TIMEOUT_MS_MAX
    } else {
        ms.min(ADMIN_TIMEOUT_MS_MAX)
    })
}

/// Sends `request` to the active controller.
pub async fn forward(
    ctx: &Arc<BrokerContext>,
    request: ControllerRequest,
    timeout: Duration,
) -> Result<ControllerResponse, ControllerError> {
    match ctx.controller.request(request, timeout).await {
        ControllerResponse::Error { error } => Err(error),
        other => Ok(other),
    }
}

/// Waits (bounded) until this broker's image satisfies `done`.
pub async fn await_image(ctx: &Arc<BrokerContext>, done: impl Fn(&MetadataImage) -> bool) {
    let mut changes = ctx.cluster.shared_image().subscribe();
    let deadline = tokio::time::Instant::now() + IMAGE_CATCH_UP_WAIT;
    loop {
        let image = ctx.cluster.image();
        if done(&image) {
            // And the replicas here act on it (a Produce right after CreateTopics finds its leader).
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            ctx.replicas.wait_applied(image.offset, left).await;
            return;
        }
        if tokio::time::timeout_at(deadline, changes.changed())
            .await
            .is_err()
        {
            return;
        }
    }
}
