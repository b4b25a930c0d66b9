//! The metadata quorum of a real broker: [`MetadataQuorum`] over `millrace-quorum` (openraft), the
//! metadata image as its replicated state machine, and the controller listener's request handler.
//! The only module of this crate that knows `millrace-quorum`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use millrace_cluster::image::{MetadataImage, SharedImage};
use millrace_cluster::records::MetadataBatch;
use millrace_quorum::{Quorum, QuorumStatus, RpcError, RpcHandler, StateMachine};
use tokio::sync::watch;
use tracing::warn;

use crate::messages::{ControllerError, ControllerResponse};
use crate::quorum::{
    CallError, MetadataQuorum, ProposeError, QuorumDescription, QuorumReplica, QuorumView,
};
use crate::service::ControllerService;

/// The metadata image as the quorum's state machine.
pub struct ImageStateMachine {
    image: Arc<SharedImage>,
}

impl ImageStateMachine {
    pub fn new(image: Arc<SharedImage>) -> Arc<Self> {
        Arc::new(Self { image })
    }
}

impl StateMachine for ImageStateMachine {
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8> {
        match MetadataBatch::decode(payload) {
            Ok(batch) => self.image.apply_batch(index, &batch),
            Err(e) => {
                // Deterministic on every node: an entry this build cannot read changes nothing.
                warn!(index, error = %e, "metadata entry skipped");
                self.image.advance_to(index);
            }
        }
        Vec::new()
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        self.image.current().encode().map_err(|e| e.to_string())
    }

    fn restore(&self, last_index: u64, snapshot: &[u8]) -> Result<(), String> {
        let mut image = MetadataImage::decode(snapshot)?;
        image.offset = image.offset.max(last_index);
        self.image.restore(image);
        Ok(())
    }
}

/// Answers controller requests arriving on the controller listener: this node's controller
/// service once it exists (voters), else NotController.
#[derive(Default)]
pub struct ControllerRpc {
    service: OnceLock<Arc<ControllerService>>,
}

impl ControllerRpc {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Installs the service (after the quorum it needs has started).
    pub fn set_service(&self, service: Arc<ControllerService>) {
        let _ = self.service.set(service);
    }
}

impl RpcHandler for ControllerRpc {
    fn handle(&self, _from: Option<u64>, payload: Vec<u8>) -> BoxFuture<'static, Vec<u8>> {
        match self.service.get() {
            Some(service) => {
                let service = Arc::clone(service);
                Box::pin(async move { service.handle_rpc(payload).await })
            }
            None => Box::pin(async move {
                ControllerResponse::Error {
                    error: ControllerError::NotController { leader: None },
                }
                .to_wire()
            }),
        }
    }
}

/// [`MetadataQuorum`] over a running `Quorum`.
pub struct RaftQuorum {
    quorum: Arc<Quorum>,
    view: watch::Receiver<QuorumView>,
}

fn to_node(id: u64) -> i32 {
    i32::try_from(id).unwrap_or(i32::MAX)
}

fn view_of(status: &QuorumStatus) -> QuorumView {
    QuorumView {
        leader: status.leader.map(to_node),
        is_leader: status.is_leader,
        term: status.term,
    }
}

impl RaftQuorum {
    pub fn new(quorum: Arc<Quorum>) -> Arc<Self> {
        let mut status = quorum.watch();
        let (tx, rx) = watch::channel(view_of(&status.borrow()));
        tokio::spawn(async move {
            while status.changed().await.is_ok() {
                let v = view_of(&status.borrow_and_update());
                tx.send_if_modified(|cur| {
                    let changed = *cur != v;
                    *cur = v;
                    changed
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Arc::new(Self { quorum, view: rx })
    }

    pub fn quorum(&self) -> &Arc<Quorum> {
        &self.quorum
    }
}

impl MetadataQuorum for RaftQuorum {
    fn propose(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<u64, ProposeError>> {
        Box::pin(async move {
            match self.quorum.propose(payload).await {
                Ok((index, _)) => Ok(index),
                Err(millrace_quorum::ProposeError::NotLeader { leader }) => {
                    Err(ProposeError::NotLeader {
                        leader: leader.map(to_node),
                    })
                }
                Err(e @ millrace_quorum::ProposeError::TooLarge { .. }) => {
                    Err(ProposeError::Refused(e.to_string()))
                }
                Err(e) => Err(ProposeError::Unknown(e.to_string())),
            }
        })
    }

    fn view(&self) -> watch::Receiver<QuorumView> {
        self.view.clone()
    }

    fn call(
        &self,
        to: i32,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Vec<u8>, CallError>> {
        Box::pin(async move {
            let node = u64::try_from(to).map_err(|_| CallError {
                node: to,
                reason: "negative node id".into(),
            })?;
            self.quorum
                .call(node, payload, timeout)
                .await
                .map_err(|e: RpcError| CallError {
                    node: to,
                    reason: e.to_string(),
                })
        })
    }

    fn describe(&self) -> Option<QuorumDescription> {
        let d = self.quorum.describe()?;
        let offset = |o: u64| i64::try_from(o).unwrap_or(i64::MAX);
        let replica = |r: &millrace_quorum::ReplicaProgress| QuorumReplica {
            node_id: to_node(r.node_id),
            log_end_offset: offset(r.log_end_offset),
            last_fetch_timestamp: r.last_fetch_ms.unwrap_or(-1),
            last_caught_up_timestamp: r.last_caught_up_ms.unwrap_or(-1),
        };
        Some(QuorumDescription {
            leader_id: to_node(d.leader),
            leader_epoch: i32::try_from(d.term).unwrap_or(i32::MAX),
            high_watermark: offset(d.high_watermark),
            voters: d.voters.iter().map(replica).collect(),
            observers: d.observers.iter().map(replica).collect(),
            endpoints: d
                .addresses
                .into_iter()
                .map(|(id, addr)| (to_node(id), addr))
                .collect(),
        })
    }
}
