//! The controller service: runs on every quorum voter; while this node leads the quorum it is the
//! active controller, stepping the pure [`Controller`] one request at a time and committing each
//! decision through the quorum before answering and taking the next.
//!
//! Activation: when this node becomes the quorum leader (a new term), it first commits an empty
//! entry — once that is applied here, the image holds everything earlier terms committed — then
//! starts fresh broker sessions, and on a brand-new cluster commits the bootstrap records (cluster
//! id, and topics migrated from a single-node data directory).
//!
//! **Invariant:** one active controller per quorum term: decisions are made only while the
//! quorum says this node leads, on an image that contains every committed entry of earlier terms.
//! **Invariant:** a request is answered only after its records are committed and applied here; if
//! the outcome of a proposal is unknown, the answer says so (REQUEST_TIMED_OUT) and the next
//! decision waits for a new barrier.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use millrace_cluster::image::SharedImage;
use millrace_cluster::records::{new_cluster_id, MetadataBatch, MetadataRecord};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::controller::{Controller, ControllerConfig, Decision};
use crate::limits::{
    CONTROLLER_QUEUE_MAX, CONTROLLER_TICK_MS, DECISION_ENTRY_BYTES_TARGET, PROPOSE_TIMEOUT_MS,
};
use crate::messages::{ControllerError, ControllerRequest, ControllerResponse};
use crate::quorum::{MetadataQuorum, ProposeError};

type Job = (ControllerRequest, oneshot::Sender<ControllerResponse>);

/// Handle to the controller service of this node.
pub struct ControllerService {
    node_id: i32,
    jobs: mpsc::Sender<Job>,
    quorum: Arc<dyn MetadataQuorum>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl ControllerService {
    /// Starts the decision loop. `bootstrap` are the records a brand-new cluster starts with
    /// (besides its cluster id), e.g. topics migrated from a single-node data directory.
    pub fn spawn(
        node_id: i32,
        config: ControllerConfig,
        quorum: Arc<dyn MetadataQuorum>,
        image: Arc<SharedImage>,
        bootstrap: Vec<MetadataRecord>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(CONTROLLER_QUEUE_MAX);
        let service = Arc::new(Self {
            node_id,
            jobs: tx,
            quorum: Arc::clone(&quorum),
        });
        let mut lp = DecisionLoop {
            controller: Controller::new(config),
            quorum,
            image,
            active_term: None,
            bootstrap,
        };
        tokio::spawn(async move { lp.run(rx, stop).await });
        service
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Decides one request on this node (answers NotController unless it leads the quorum).
    pub async fn submit(&self, req: ControllerRequest) -> ControllerResponse {
        let not_controller = || ControllerResponse::Error {
            error: ControllerError::NotController {
                leader: self.quorum.view().borrow().leader,
            },
        };
        if !self.quorum.view().borrow().is_leader {
            return not_controller();
        }
        let (tx, rx) = oneshot::channel();
        if self.jobs.try_send((req, tx)).is_err() {
            return ControllerResponse::Error {
                error: ControllerError::Timeout("the controller's queue is full".into()),
            };
        }
        rx.await.unwrap_or_else(|_| not_controller())
    }

    /// Answers a controller request that arrived on the controller listener.
    pub async fn handle_rpc(&self, payload: Vec<u8>) -> Vec<u8> {
        let response = match ControllerRequest::decode(&payload) {
            Ok(req) => self.submit(req).await,
            Err(e) => ControllerResponse::Error {
                error: ControllerError::InvalidRequest(e),
            },
        };
        response.encode()
    }
}

struct DecisionLoop {
    controller: Controller,
    quorum: Arc<dyn MetadataQuorum>,
    image: Arc<SharedImage>,
    /// The quorum term this node is the active controller of, once activated.
    active_term: Option<u64>,
    bootstrap: Vec<MetadataRecord>,
}

impl DecisionLoop {
    async fn run(&mut self, mut jobs: mpsc::Receiver<Job>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(CONTROLLER_TICK_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut view = self.quorum.view();
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                job = jobs.recv() => {
                    let Some((req, reply)) = job else { break };
                    let response = self.decide(req).await;
                    let _ = reply.send(response);
                }
                _ = tick.tick() => {
                    if self.ensure_active().await {
                        let records = self.controller.tick(&self.image.current(), now_ms());
                        if !records.is_empty() {
                            let _ = self.commit(Decision { records, response: ControllerResponse::Configs { result: Ok(()) } }).await;
                        }
                    }
                }
                changed = view.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let v = *view.borrow_and_update();
                    if !v.is_leader || Some(v.term) != self.active_term {
                        if self.active_term.is_some() {
                            info!(term = v.term, leader = ?v.leader, "no longer the active controller");
                        }
                        self.active_term = None;
                    }
                    if v.is_leader {
                        // Activate at once rather than at the next request or tick.
                        self.ensure_active().await;
                    }
                }
            }
        }
    }

    async fn decide(&mut self, req: ControllerRequest) -> ControllerResponse {
        if !self.ensure_active().await {
            return ControllerResponse::Error {
                error: ControllerError::NotController {
                    leader: self.quorum.view().borrow().leader,
                },
            };
        }
        let decision = self.controller.handle(&self.image.current(), req, now_ms());
        self.commit(decision).await
    }

    /// Commits the decision's records (if any) and returns its answer: one entry, or several in
    /// order when it is too large for one and may be split (`entries_of`); the answer waits for
    /// the last, and a failure stops the rest (the requester retries against the new image).
    async fn commit(&mut self, decision: Decision) -> ControllerResponse {
        if decision.records.is_empty() {
            return decision.response;
        }
        let mut result = Ok(0);
        for entry in entries_of(decision.records) {
            result = self.propose(MetadataBatch::new(entry)).await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(offset) => {
                let mut response = decision.response;
                if let ControllerResponse::Registered { broker_epoch } = &mut response {
                    if *broker_epoch < 0 {
                        *broker_epoch = i64::try_from(offset).unwrap_or(i64::MAX);
                    }
                }
                response
            }
            Err(ProposeError::NotLeader { leader }) => {
                self.active_term = None;
                ControllerResponse::Error {
                    error: ControllerError::NotController { leader },
                }
            }
            Err(ProposeError::Unknown(reason)) => {
                // The entry may still commit: the next decision must see it first.
                self.active_term = None;
                warn!(%reason, "metadata proposal outcome unknown");
                ControllerResponse::Error {
                    error: ControllerError::Timeout(reason),
                }
            }
        }
    }

    async fn propose(&self, batch: MetadataBatch) -> Result<u64, ProposeError> {
        let timeout = Duration::from_millis(PROPOSE_TIMEOUT_MS);
        match tokio::time::timeout(timeout, self.quorum.propose(batch.encode())).await {
            Ok(result) => result,
            Err(_) => Err(ProposeError::Unknown(format!(
                "not committed within {PROPOSE_TIMEOUT_MS} ms"
            ))),
        }
    }

    /// Makes this node the active controller of the current term if it leads the quorum.
    async fn ensure_active(&mut self) -> bool {
        let view = *self.quorum.view().borrow();
        if !view.is_leader {
            self.active_term = None;
            return false;
        }
        if self.active_term == Some(view.term) {
            return true;
        }
        // Barrier: once this empty entry is applied, the image holds every earlier entry.
        if let Err(e) = self.propose(MetadataBatch::new(Vec::new())).await {
            warn!(error = %e, "could not commit the activation barrier");
            return false;
        }
        let image = self.image.current();
        if image.cluster_id.is_none() {
            // Seeded records may carry the cluster id of a migrated data directory.
            let mut records = Vec::new();
            if !matches!(
                self.bootstrap.first(),
                Some(MetadataRecord::Bootstrap { .. })
            ) {
                records.push(MetadataRecord::Bootstrap {
                    cluster_id: new_cluster_id(),
                });
            }
            records.extend(self.bootstrap.iter().cloned());
            let topics = records
                .iter()
                .filter(|r| matches!(r, MetadataRecord::Topic { .. }))
                .count();
            if let Err(e) = self.propose(MetadataBatch::new(records)).await {
                warn!(error = %e, "could not commit the bootstrap records");
                return false;
            }
            self.bootstrap.clear();
            info!(topics, "bootstrapped a new cluster");
        }
        self.controller.activate(&self.image.current(), now_ms());
        self.active_term = Some(view.term);
        info!(term = view.term, "this node is the active controller");
        true
    }
}
/// The entries one decision's records are committed in. One entry unless it would encode past
/// `DECISION_ENTRY_BYTES_TARGET` and every record is a partition change or a broker's state
/// change (fencing, unfencing, controlled shutdown, unregistration): then the partition changes
/// fill entries in order and the broker records come last, so that no image shows a broker's new
/// state before its partitions moved. Kafka's controller writes these non-atomically too. Topic
/// creation and deletion, registration and bootstrap stay one entry whatever their size.
fn entries_of(records: Vec<MetadataRecord>) -> Vec<Vec<MetadataRecord>> {
    let sizes: Vec<usize> = records
        .iter()
        .map(|r| serde_json::to_vec(r).map_or(0, |v| v.len() + 1))
        .collect();
    let splittable = records.iter().all(|r| {
        matches!(
            r,
            MetadataRecord::PartitionChange { .. }
                | MetadataRecord::FenceBroker { .. }
                | MetadataRecord::UnfenceBroker { .. }
                | MetadataRecord::BeginControlledShutdown { .. }
                | MetadataRecord::UnregisterBroker { .. }
        )
    });
    if !splittable || sizes.iter().sum::<usize>() <= DECISION_ENTRY_BYTES_TARGET {
        return vec![records];
    }
    let mut entries: Vec<Vec<MetadataRecord>> = Vec::new();
    let mut current: Vec<MetadataRecord> = Vec::new();
    let mut current_bytes = 0usize;
    let mut broker_records = Vec::new();
    for (record, size) in records.into_iter().zip(sizes) {
        if !matches!(record, MetadataRecord::PartitionChange { .. }) {
            broker_records.push(record);
            continue;
        }
        if !current.is_empty() && current_bytes + size > DECISION_ENTRY_BYTES_TARGET {
            entries.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
        current_bytes += size;
        current.push(record);
    }
    current.extend(broker_records);
    entries.push(current);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(partition: i32) -> MetadataRecord {
        millrace_cluster::records::PartitionChangeBuilder {
            leader: Some(-1),
            isr: Some(vec![2, 3]),
            ..MetadataRecord::partition_change(uuid::Uuid::from_bytes([7; 16]), partition)
        }
        .build()
    }

    #[test]
    fn a_large_fencing_is_split_with_the_fence_last() {
        let fence = MetadataRecord::FenceBroker {
            node_id: 1,
            broker_epoch: 5,
        };
        let mut records = vec![fence.clone()];
        records.extend((0..10_000).map(change));
        let whole = MetadataBatch::new(records.clone()).encode().len();
        assert!(whole > DECISION_ENTRY_BYTES_TARGET, "{whole} bytes");
        let entries = entries_of(records);
        assert!(entries.len() > 1, "{} entries", entries.len());
        for e in &entries {
            let bytes = MetadataBatch::new(e.clone()).encode().len();
            assert!(
                bytes <= DECISION_ENTRY_BYTES_TARGET + 64,
                "entry of {bytes} bytes"
            );
        }
        let flat: Vec<MetadataRecord> = entries.into_iter().flatten().collect();
        assert_eq!(flat.last(), Some(&fence));
        let partitions: Vec<i32> = flat
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::PartitionChange { partition, .. } => Some(*partition),
                _ => None,
            })
            .collect();
        assert_eq!(partitions, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn small_or_atomic_decisions_stay_one_entry() {
        let small = vec![
            MetadataRecord::FenceBroker {
                node_id: 1,
                broker_epoch: 5,
            },
            change(0),
        ];
        assert_eq!(entries_of(small.clone()), vec![small]);
        let mut big_removal: Vec<MetadataRecord> = (0..10_000).map(change).collect();
        big_removal.push(MetadataRecord::RemoveTopic {
            topic_id: uuid::Uuid::from_bytes([7; 16]),
        });
        assert_eq!(entries_of(big_removal).len(), 1);
    }
}
