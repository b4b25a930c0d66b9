//! Producer ids for InitProducerId: blocks of ids handed to this broker by the active controller
//! (AllocateProducerIds, committed in the metadata log), used up one by one. Ids are never handed
//! out twice in the cluster: a block is committed before any id of it is used.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::client::ControllerClient;
use crate::lifecycle::BrokerLifecycle;
use crate::messages::{ControllerError, ControllerRequest, ControllerResponse};

/// How long one AllocateProducerIds may wait for the controller.
const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Hands out producer ids from committed blocks.
pub struct ProducerIdAllocator {
    client: Arc<ControllerClient>,
    lifecycle: Arc<BrokerLifecycle>,
    /// The unused rest of the current block: `next..end`.
    block: Mutex<(i64, i64)>,
}

impl ProducerIdAllocator {
    pub fn new(client: Arc<ControllerClient>, lifecycle: Arc<BrokerLifecycle>) -> Self {
        Self {
            client,
            lifecycle,
            block: Mutex::new((0, 0)),
        }
    }

    /// A producer id no broker handed out before.
    pub async fn next(&self) -> Result<i64, ControllerError> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            let broker_epoch = self
                .lifecycle
                .watch()
                .borrow()
                .map(|r| r.broker_epoch)
                .ok_or_else(|| {
                    ControllerError::Timeout("this broker is not registered yet".into())
                })?;
            let req = ControllerRequest::AllocateProducerIds {
                node_id: self.lifecycle.node_id(),
                broker_epoch,
            };
            match self.client.request(req, ALLOCATE_TIMEOUT).await {
                ControllerResponse::ProducerIds {
                    first_producer_id,
                    count,
                } => *block = (first_producer_id, first_producer_id.saturating_add(count)),
                ControllerResponse::Error { error } => return Err(error),
                other => {
                    return Err(ControllerError::Internal(format!(
                        "unexpected answer to AllocateProducerIds: {other:?}"
                    )))
                }
            }
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }
}
