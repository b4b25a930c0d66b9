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
//! **Invariant:** no entry exceeds `DECISION_ENTRY_BYTES_TARGET`: a larger decision (bootstrap
//! included) is a metadata transaction over several entries (`entries.rs`); a transaction left
//! open by a lost leadership or an unknown outcome is aborted at the next activation, before any
//! decision. A decision that can never fit is answered with an error, logged once and counted
//! (`millrace_controller_decisions_refused_total`), never retried here.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use millrace_cluster::image::SharedImage;
use millrace_cluster::records::{new_cluster_id, MetadataBatch, MetadataRecord};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::controller::{Controller, ControllerConfig, Decision};
use crate::entries::{activation_records, entries_of};
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
        if let ControllerRequest::DescribeQuorum = req {
            // A read of the quorum's own progress: nothing to decide over the image.
            return match self.quorum.describe() {
                Some(description) => ControllerResponse::Quorum { description },
                None => not_controller(),
            };
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
        response.to_wire()
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

    /// Commits the decision's records (if any) and returns its answer once the last of its
    /// entries is committed (one entry, or a metadata transaction over several: `entries_of`). A
    /// failure stops the rest: the requester retries against the image as it is, and an
    /// unfinished transaction is aborted by the next activation.
    async fn commit(&mut self, decision: Decision) -> ControllerResponse {
        match self.commit_records(decision.records).await {
            Ok(None) => decision.response,
            Ok(Some(offset)) => {
                let mut response = decision.response;
                if let ControllerResponse::Registered { broker_epoch } = &mut response {
                    // The registration took effect at the decision's last entry.
                    if *broker_epoch < 0 {
                        *broker_epoch = i64::try_from(offset).unwrap_or(i64::MAX);
                    }
                }
                response
            }
            Err(error) => ControllerResponse::Error { error },
        }
    }

    /// Commits `records` as one decision; the offset of its last entry (`None`: nothing to
    /// commit).
    async fn commit_records(
        &mut self,
        records: Vec<MetadataRecord>,
    ) -> Result<Option<u64>, ControllerError> {
        if records.is_empty() {
            return Ok(None);
        }
        let count = records.len();
        let entries = match entries_of(records, DECISION_ENTRY_BYTES_TARGET) {
            Ok(entries) => entries,
            Err(e) => return Err(refused(count, &e.to_string())),
        };
        if entries.len() > 1 {
            millrace_metrics::global()
                .controller_metadata_transactions
                .inc();
            info!(
                records = count,
                entries = entries.len(),
                "committing a large decision as a metadata transaction"
            );
        }
        let mut offset = 0;
        for entry in entries {
            match self.propose(MetadataBatch::new(entry)).await {
                Ok(o) => offset = o,
                Err(ProposeError::NotLeader { leader }) => {
                    self.active_term = None;
                    return Err(ControllerError::NotController { leader });
                }
                Err(ProposeError::Unknown(reason)) => {
                    // The entry may still commit: the next decision must see it first.
                    self.active_term = None;
                    warn!(%reason, "metadata proposal outcome unknown");
                    return Err(ControllerError::Timeout(reason));
                }
                Err(ProposeError::Refused(reason)) => {
                    // Not appended. Entries before it may have begun a transaction: a new
                    // activation aborts it before the next decision.
                    self.active_term = None;
                    return Err(refused(count, &reason));
                }
            }
        }
        Ok(Some(offset))
    }

    async fn propose(&self, batch: MetadataBatch) -> Result<u64, ProposeError> {
        let timeout = Duration::from_millis(PROPOSE_TIMEOUT_MS);
        let bytes = batch
            .encode()
            .map_err(|e| ProposeError::Refused(e.to_string()))?;
        match tokio::time::timeout(timeout, self.quorum.propose(bytes)).await {
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
        let abort = activation_records(&self.image.current());
        if !abort.is_empty() {
            if let Err(e) = self.propose(MetadataBatch::new(abort)).await {
                warn!(error = %e, "could not abort the metadata transaction left open");
                return false;
            }
            millrace_metrics::global()
                .controller_metadata_transactions_aborted
                .inc();
            warn!("aborted a metadata transaction that the previous controller did not end");
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
            // Committed like a decision: a migrated data directory of many partitions is a
            // transaction of several entries.
            if let Err(e) = self.commit_records(records).await {
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

/// A decision that can never be committed: one error line and a count, then an answer the
/// requester cannot mistake for a transient failure (Kafka's POLICY_VIOLATION for an "excessively
/// large batch operation").
fn refused(records: usize, reason: &str) -> ControllerError {
    millrace_metrics::global()
        .controller_decisions_refused
        .inc();
    error!(
        records,
        %reason, "controller decision refused: it cannot be committed to the metadata log"
    );
    ControllerError::PolicyViolation(format!(
        "Unable to perform excessively large batch operation: {reason}"
    ))
}
