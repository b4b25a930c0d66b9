//! One simulated broker process, wired the way the real broker will wire the same pieces:
//! - lifecycle (`millrace_controller::lifecycle`): register with a fresh incarnation id, heartbeat
//!   (fast while fenced or shutting down), re-register on STALE_BROKER_EPOCH, controlled shutdown;
//! - metadata: applies the committed metadata log in order, with its own delay, while it can reach
//!   the active controller; hands each hosted partition its committed state — but leads only when
//!   its image shows *this incarnation* registered and unfenced (`BrokerLifecycle::is_current`);
//! - per hosted partition a [`Partition`] over a [`SimLog`], with the `acks=all` purgatory
//!   (answered once the high watermark passes the records, NOT_LEADER_OR_FOLLOWER when the leader
//!   epoch moves, REQUEST_TIMED_OUT at its deadline);
//! - the fetcher: one outstanding fetch per (follower, leader broker) covering every partition
//!   it follows there; the next fetch only once what the last one appended is durable; diverging
//!   epoch → truncate; out of range → `on_fetch_out_of_range`;
//! - the leader's fetch handler, holding an empty fetch up to `FETCH_MAX_WAIT_MS` (woken by an
//!   append);
//! - a group-commit flusher (`log.flush.policy=batch`) and the high-watermark checkpoint.
//!
//! The logs live on the broker's "disk": they survive a crash through [`SimLog`]'s crash model,
//! while everything else (the replica state machines, registrations, fetch state) is rebuilt.

use std::collections::{BTreeMap, VecDeque};

use millrace_cluster::image::MetadataImage;
use millrace_controller::limits::ISR_CHANGES_PER_REQUEST_MAX;
use millrace_controller::messages::IsrChange;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};
use millrace_replication::isr_changes::{self, Batchable};
use millrace_replication::replica::AlterPartitionError;
use millrace_replication::{
    Action, FollowerFetchDecision, Partition, PartitionError, PartitionState, ReplicaConfig,
    ReplicaLog,
};
use uuid::Uuid;

use crate::config::Broken;
use crate::limits::{
    CONTROLLER_REQUEST_TIMEOUT_MS, FETCH_BACKOFF_MS, FETCH_MAX_WAIT_MS, FETCH_RECORDS_MAX,
    FETCH_TIMEOUT_MS, HW_CHECKPOINT_MS, METADATA_RETRY_MS, PRODUCE_TIMEOUT_MS, REGISTER_RETRY_MS,
    REPLICA_TICK_MS,
};
use crate::log::SimLog;
use crate::net::{
    Body, FetchPartition, FetchRequest, FetchResponse, FetchResult, PartitionErrorCode,
};
use crate::world::{Ev, World};

use millrace_controller::limits::{CONTROLLER_RETRY_MS, FAST_HEARTBEAT_MS};

/// The simulated topic's name.
pub const TOPIC: &str = "sim";

/// A broker's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BrokerTimer {
    Register,
    Heartbeat { generation: u64 },
    Flush,
    ReplicaTick,
    HwCheckpoint,
    Metadata,
    FetchRetry { leader: i32 },
    FetchTimeout { leader: i32, fetch_id: u64 },
    FetchWake { park_id: u64 },
    ControllerRetry { req_id: u64 },
    ControllerDeadline { req_id: u64 },
    AlterPartitionUnsent { partition: i32 },
}

/// This broker's registration as the controller answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registration {
    pub broker_epoch: i64,
    pub fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallKind {
    Register,
    Heartbeat {
        want_shutdown: bool,
    },
    /// One `AlterPartitions` request: its changes' partitions, in order.
    AlterPartitions {
        partitions: Vec<i32>,
    },
}

/// One leader's ISR proposal waiting for the broker's next `AlterPartitions` request, batched as
/// the real broker batches them (`millrace_replication::isr_changes`).
#[derive(Debug, Clone)]
pub(crate) struct ProposedIsr {
    broker_epoch: i64,
    change: IsrChange,
}

impl Batchable for ProposedIsr {
    fn broker_epoch(&self) -> i64 {
        self.broker_epoch
    }
    fn partition(&self) -> (Uuid, i32) {
        (self.change.topic_id, self.change.partition)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ControllerCall {
    kind: CallKind,
    req: ControllerRequest,
}

/// An `acks=all` produce waiting for the high watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingProduce {
    req_id: u64,
    client: i32,
    leader_epoch: i32,
    base: i64,
    end: i64,
    deadline: i64,
}

/// One hosted partition.
#[derive(Debug)]
pub(crate) struct Hosted {
    pub partition: Partition<SimLog>,
    /// The committed state last handed to the partition.
    delivered: Option<PartitionState>,
    purgatory: Vec<PendingProduce>,
}

/// Fetch state towards one leader broker.
#[derive(Debug, Default, Clone, Copy)]
struct Fetcher {
    in_flight: Option<u64>,
    waiting_durable: bool,
    backoff_until: i64,
}

/// A follower fetch held at the leader.
#[derive(Debug, Clone)]
struct Parked {
    follower: i32,
    follower_incarnation: u64,
    req: FetchRequest,
}

/// One broker process (and its disk).
#[derive(Debug)]
pub(crate) struct Broker {
    pub id: i32,
    pub alive: bool,
    pub paused: bool,
    /// Rises at every start.
    pub incarnation: u64,
    pub incarnation_id: Uuid,
    pub deferred: Vec<Ev>,
    pub image: MetadataImage,
    pub registration: Option<Registration>,
    pub shutting_down: bool,
    /// What the next registration says about the previous run.
    clean_shutdown: bool,
    pub hosted: BTreeMap<i32, Hosted>,
    fetchers: BTreeMap<i32, Fetcher>,
    parked: BTreeMap<u64, Parked>,
    calls: BTreeMap<u64, ControllerCall>,
    /// ISR proposals not yet sent, and whether an `AlterPartitions` request is out (one at a
    /// time, as the real broker sends them).
    isr_pending: VecDeque<ProposedIsr>,
    isr_in_flight: bool,
    next_id: u64,
    flush_scheduled: bool,
    metadata_scheduled: bool,
    heartbeat_generation: u64,
    /// A restart is scheduled (the broker is down on purpose).
    pub restart_scheduled: bool,
}

impl Broker {
    pub fn new(id: i32) -> Self {
        Self {
            id,
            alive: false,
            paused: false,
            incarnation: 0,
            incarnation_id: Uuid::nil(),
            deferred: Vec::new(),
            image: MetadataImage::default(),
            registration: None,
            shutting_down: false,
            clean_shutdown: true,
            hosted: BTreeMap::new(),
            fetchers: BTreeMap::new(),
            parked: BTreeMap::new(),
            calls: BTreeMap::new(),
            isr_pending: VecDeque::new(),
            isr_in_flight: false,
            next_id: 1,
            flush_scheduled: false,
            metadata_scheduled: false,
            heartbeat_generation: 0,
            restart_scheduled: false,
        }
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Whether the image shows this incarnation registered and unfenced: only then may it lead.
    pub fn is_current(&self) -> bool {
        self.image
            .broker(self.id)
            .is_some_and(|r| r.incarnation_id == self.incarnation_id && !r.fenced)
    }

    /// Whether the broker is up and running (not crashed, not paused).
    pub fn running(&self) -> bool {
        self.alive && !self.paused
    }
}

fn error_code(e: PartitionError, log_start_offset: i64) -> PartitionErrorCode {
    match e {
        PartitionError::NotLeader { .. } => PartitionErrorCode::NotLeaderOrFollower,
        PartitionError::FencedLeaderEpoch => PartitionErrorCode::FencedLeaderEpoch,
        PartitionError::UnknownLeaderEpoch => PartitionErrorCode::UnknownLeaderEpoch,
        PartitionError::NotEnoughReplicas => PartitionErrorCode::NotEnoughReplicas,
        PartitionError::OffsetOutOfRange => {
            PartitionErrorCode::OffsetOutOfRange { log_start_offset }
        }
        PartitionError::Storage => PartitionErrorCode::Storage,
    }
}

impl World {
    pub fn replica_config(&self) -> ReplicaConfig {
        ReplicaConfig {
            replica_lag_time_max_ms: self.cfg.replica_lag_time_max_ms,
            min_insync_replicas: self.cfg.min_insync_replicas,
        }
    }

    fn btimer(&mut self, id: i32, delay_ms: i64, timer: BrokerTimer) {
        let incarnation = self.incarnation(id);
        self.after(
            delay_ms,
            Ev::Broker {
                id,
                incarnation,
                timer,
            },
        );
    }

    /// Starts (or restarts) broker `id` on its disk.
    pub fn start_broker(&mut self, id: i32) {
        let incarnation_id = Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
        let config = self.replica_config();
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        b.alive = true;
        b.paused = false;
        b.restart_scheduled = false;
        b.incarnation += 1;
        b.incarnation_id = incarnation_id;
        b.deferred.clear();
        b.image = MetadataImage::default();
        b.registration = None;
        b.shutting_down = false;
        b.fetchers.clear();
        b.parked.clear();
        b.calls.clear();
        b.isr_pending.clear();
        b.isr_in_flight = false;
        b.flush_scheduled = false;
        b.metadata_scheduled = false;
        let mut unsynced = false;
        for h in b.hosted.values_mut() {
            let log = std::mem::take(&mut h.partition.log);
            unsynced |= log.has_unsynced();
            h.partition = Partition::new(id, log, config);
            h.delivered = None;
            h.purgatory.clear();
        }
        let clean = b.clean_shutdown;
        self.trace(|| format!("broker {id}: started (clean_shutdown={clean})"));
        let jitter = self.rng.range(0, 20);
        self.btimer(id, jitter, BrokerTimer::Register);
        self.btimer(id, REPLICA_TICK_MS, BrokerTimer::ReplicaTick);
        self.btimer(id, HW_CHECKPOINT_MS, BrokerTimer::HwCheckpoint);
        self.schedule_metadata(id);
        if unsynced {
            self.schedule_flush(id);
        }
    }

    /// Stops broker `id`: `Some(power_loss)` is a crash (`kill -9` or a power loss), `None` the end
    /// of a controlled shutdown (everything synced, high watermarks checkpointed).
    pub fn stop_broker(&mut self, id: i32, crash: Option<bool>) {
        let unclean_restarts = self.cfg.unclean_restarts;
        let mut torn_draws = Vec::new();
        if let Some(b) = self.brokers.get(&id) {
            for h in b.hosted.values() {
                let log = &h.partition.log;
                let unsynced = log.log_end_offset() - log.durable_end_offset();
                torn_draws.push(unsynced);
            }
        }
        let torn: Vec<i64> = torn_draws
            .into_iter()
            .map(|n| {
                if self.rng.chance(500) {
                    0
                } else {
                    self.rng.range(0, n)
                }
            })
            .collect();
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        b.alive = false;
        b.paused = false;
        b.deferred.clear();
        b.registration = None;
        b.fetchers.clear();
        b.parked.clear();
        b.calls.clear();
        b.isr_pending.clear();
        b.isr_in_flight = false;
        let mut lost = 0;
        for (h, torn) in b.hosted.values_mut().zip(torn) {
            h.purgatory.clear();
            let log = &h.partition.log;
            match crash {
                Some(true) => lost += log.power_loss(torn),
                Some(false) => log.kill(),
                None => {
                    log.sync();
                    log.checkpoint_high_watermark();
                }
            }
        }
        b.clean_shutdown = crash.is_none() || !unclean_restarts;
        self.stats.records_lost_to_power_loss += lost;
        self.trace(|| format!("broker {id}: stopped ({crash:?}), {lost} unsynced records lost"));
    }

    pub fn broker_timer(&mut self, id: i32, timer: BrokerTimer) {
        match timer {
            BrokerTimer::Register => self.register(id),
            BrokerTimer::Heartbeat { generation } => {
                let current = self
                    .brokers
                    .get(&id)
                    .is_some_and(|b| b.heartbeat_generation == generation);
                if current {
                    self.heartbeat(id);
                }
            }
            BrokerTimer::Flush => self.flush(id),
            BrokerTimer::ReplicaTick => {
                let parts: Vec<i32> = self
                    .brokers
                    .get(&id)
                    .map(|b| b.hosted.keys().copied().collect())
                    .unwrap_or_default();
                for p in parts {
                    let now = self.now;
                    let actions = match self.hosted_mut(id, p) {
                        Some(h) if h.partition.is_leader() => h.partition.tick(now),
                        _ => Vec::new(),
                    };
                    self.handle_actions(id, p, actions);
                }
                self.btimer(id, REPLICA_TICK_MS, BrokerTimer::ReplicaTick);
            }
            BrokerTimer::HwCheckpoint => {
                if let Some(b) = self.brokers.get(&id) {
                    for h in b.hosted.values() {
                        h.partition.log.checkpoint_high_watermark();
                    }
                }
                self.btimer(id, HW_CHECKPOINT_MS, BrokerTimer::HwCheckpoint);
            }
            BrokerTimer::Metadata => self.catch_up_metadata(id),
            BrokerTimer::FetchRetry { leader } => self.maybe_fetch(id, leader),
            BrokerTimer::FetchTimeout { leader, fetch_id } => {
                let timed_out = match self
                    .brokers
                    .get_mut(&id)
                    .and_then(|b| b.fetchers.get_mut(&leader))
                {
                    Some(f) if f.in_flight == Some(fetch_id) => {
                        f.in_flight = None;
                        true
                    }
                    _ => false,
                };
                if timed_out {
                    self.maybe_fetch(id, leader);
                }
            }
            BrokerTimer::FetchWake { park_id } => {
                let parked = self
                    .brokers
                    .get_mut(&id)
                    .and_then(|b| b.parked.remove(&park_id));
                if let Some(p) = parked {
                    self.leader_fetch(id, p.follower, p.follower_incarnation, p.req, false);
                }
            }
            BrokerTimer::ControllerRetry { req_id } => self.send_call(id, req_id),
            BrokerTimer::ControllerDeadline { req_id } => {
                let call = self
                    .brokers
                    .get_mut(&id)
                    .and_then(|b| b.calls.remove(&req_id));
                if let Some(call) = call {
                    let resp = ControllerResponse::Error {
                        error: ControllerError::Timeout("no answer from the controller".into()),
                    };
                    self.call_done(id, call.kind, resp);
                }
            }
            BrokerTimer::AlterPartitionUnsent { partition } => {
                let now = self.now;
                let actions = match self.hosted_mut(id, partition) {
                    Some(h) => h
                        .partition
                        .on_alter_partition(Err(AlterPartitionError::Retriable), now),
                    None => Vec::new(),
                };
                self.handle_actions(id, partition, actions);
            }
        }
    }

    pub fn hosted_mut(&mut self, id: i32, p: i32) -> Option<&mut Hosted> {
        self.brokers.get_mut(&id)?.hosted.get_mut(&p)
    }

    // ---------------------------------------------------------------- lifecycle

    fn register(&mut self, id: i32) {
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        if b.registration.is_some() || b.calls.values().any(|c| c.kind == CallKind::Register) {
            return;
        }
        let req = ControllerRequest::RegisterBroker {
            node_id: id,
            incarnation_id: b.incarnation_id,
            host: "127.0.0.1".into(),
            port: u16::try_from(9090 + id).unwrap_or(9090),
            rack: None,
            listeners: Vec::new(),
            clean_shutdown: b.clean_shutdown,
        };
        self.controller_call(id, CallKind::Register, req);
    }

    fn schedule_heartbeat(&mut self, id: i32, delay_ms: i64) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        b.heartbeat_generation += 1;
        let generation = b.heartbeat_generation;
        self.btimer(id, delay_ms, BrokerTimer::Heartbeat { generation });
    }

    fn heartbeat(&mut self, id: i32) {
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        let Some(reg) = b.registration else {
            return;
        };
        if b.calls
            .values()
            .any(|c| matches!(c.kind, CallKind::Heartbeat { .. }))
        {
            return;
        }
        let want_shutdown = b.shutting_down;
        let req = ControllerRequest::BrokerHeartbeat {
            node_id: id,
            broker_epoch: reg.broker_epoch,
            metadata_offset: b.image.offset,
            want_fence: false,
            want_shutdown,
        };
        self.controller_call(id, CallKind::Heartbeat { want_shutdown }, req);
    }

    /// Asks for a controlled shutdown (the broker stops once the controller lets it go).
    pub fn begin_controlled_shutdown(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if !b.alive || b.shutting_down {
            return;
        }
        b.shutting_down = true;
        self.trace(|| format!("broker {id}: controlled shutdown requested"));
        self.schedule_heartbeat(id, 0);
    }

    fn controller_call(&mut self, id: i32, kind: CallKind, req: ControllerRequest) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        let req_id = b.next_id();
        b.calls.insert(req_id, ControllerCall { kind, req });
        self.btimer(
            id,
            CONTROLLER_REQUEST_TIMEOUT_MS,
            BrokerTimer::ControllerDeadline { req_id },
        );
        self.send_call(id, req_id);
    }

    /// (Re)sends an outstanding controller call to the active controller, or waits for one.
    fn send_call(&mut self, id: i32, req_id: u64) {
        let Some(call) = self.brokers.get(&id).and_then(|b| b.calls.get(&req_id)) else {
            return;
        };
        let req = call.req.clone();
        match self.quorum.host {
            Some(h) => self.send(id, h, Body::ControllerRequest { req_id, req }),
            None => self.btimer(
                id,
                CONTROLLER_RETRY_MS as i64,
                BrokerTimer::ControllerRetry { req_id },
            ),
        }
    }

    pub fn broker_controller_response(&mut self, id: i32, req_id: u64, resp: ControllerResponse) {
        if matches!(
            resp,
            ControllerResponse::Error {
                error: ControllerError::NotController { .. }
            }
        ) {
            // Follow the controller (the client retries until its deadline).
            self.btimer(
                id,
                CONTROLLER_RETRY_MS as i64,
                BrokerTimer::ControllerRetry { req_id },
            );
            return;
        }
        let call = self
            .brokers
            .get_mut(&id)
            .and_then(|b| b.calls.remove(&req_id));
        if let Some(call) = call {
            self.call_done(id, call.kind, resp);
        }
    }

    fn call_done(&mut self, id: i32, kind: CallKind, resp: ControllerResponse) {
        match kind {
            CallKind::Register => match resp {
                ControllerResponse::Registered { broker_epoch } => {
                    if let Some(b) = self.brokers.get_mut(&id) {
                        b.registration = Some(Registration {
                            broker_epoch,
                            fenced: true,
                        });
                    }
                    self.trace(|| format!("broker {id}: registered, broker epoch {broker_epoch}"));
                    self.schedule_heartbeat(id, FAST_HEARTBEAT_MS as i64);
                }
                other => {
                    self.trace(|| format!("broker {id}: registration failed: {other:?}"));
                    self.btimer(id, REGISTER_RETRY_MS, BrokerTimer::Register);
                }
            },
            CallKind::Heartbeat { want_shutdown } => {
                match resp {
                    ControllerResponse::Heartbeat {
                        is_fenced,
                        should_shut_down,
                        ..
                    } => {
                        let changed = match self
                            .brokers
                            .get_mut(&id)
                            .and_then(|b| b.registration.as_mut())
                        {
                            Some(r) => {
                                let changed = r.fenced != is_fenced;
                                r.fenced = is_fenced;
                                changed
                            }
                            None => false,
                        };
                        if changed {
                            self.trace(|| format!("broker {id}: fenced={is_fenced}"));
                        }
                        if should_shut_down && want_shutdown {
                            self.finish_controlled_shutdown(id);
                            return;
                        }
                    }
                    ControllerResponse::Error {
                        error: ControllerError::StaleBrokerEpoch,
                    } => {
                        self.trace(|| {
                            format!("broker {id}: stale broker epoch; registering again")
                        });
                        if let Some(b) = self.brokers.get_mut(&id) {
                            b.registration = None;
                        }
                        self.btimer(id, 0, BrokerTimer::Register);
                        return;
                    }
                    _ => {}
                }
                let fast = self
                    .brokers
                    .get(&id)
                    .is_some_and(|b| b.shutting_down || b.registration.is_none_or(|r| r.fenced));
                let delay = if fast {
                    FAST_HEARTBEAT_MS as i64
                } else {
                    self.cfg.heartbeat_interval_ms
                };
                self.schedule_heartbeat(id, delay);
            }
            CallKind::AlterPartitions { partitions } => {
                if let Some(b) = self.brokers.get_mut(&id) {
                    b.isr_in_flight = false;
                }
                let now = self.now;
                let answers = isr_changes::answers(resp, partitions.len());
                for (partition, (result, _)) in partitions.into_iter().zip(answers) {
                    self.trace(|| {
                        format!("broker {id}: p{partition} AlterPartition answered {result:?}")
                    });
                    let actions = match self.hosted_mut(id, partition) {
                        Some(h) => h.partition.on_alter_partition(result, now),
                        None => Vec::new(),
                    };
                    self.handle_actions(id, partition, actions);
                }
                self.send_isr_changes(id);
            }
        }
    }

    /// Sends the pending ISR proposals as one `AlterPartitions` request, unless one is out.
    fn send_isr_changes(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if b.isr_in_flight {
            return;
        }
        let batch = isr_changes::take_batch(&mut b.isr_pending, ISR_CHANGES_PER_REQUEST_MAX);
        let Some(broker_epoch) = batch.first().map(|p| p.broker_epoch) else {
            return;
        };
        b.isr_in_flight = true;
        let partitions = batch.iter().map(|p| p.change.partition).collect();
        let req = ControllerRequest::AlterPartitions {
            node_id: id,
            broker_epoch,
            changes: batch.into_iter().map(|p| p.change).collect(),
        };
        self.controller_call(id, CallKind::AlterPartitions { partitions }, req);
    }

    fn finish_controlled_shutdown(&mut self, id: i32) {
        self.trace(|| format!("broker {id}: controlled shutdown complete"));
        self.stop_broker(id, None);
        let down = if matches!(self.phase, crate::world::Phase::Faults) {
            self.rng.range(500, 5_000)
        } else {
            self.rng.range(10, 500)
        };
        if let Some(b) = self.brokers.get_mut(&id) {
            b.restart_scheduled = true;
        }
        self.after(
            down,
            Ev::Fault(crate::faults::Fault::Restart { broker: id }),
        );
    }

    // ---------------------------------------------------------------- metadata

    /// Catches up on committed metadata soon (each broker with its own delay).
    pub fn schedule_metadata(&mut self, id: i32) {
        let delay = self
            .rng
            .range(self.cfg.metadata_delay_ms.0, self.cfg.metadata_delay_ms.1);
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if !b.alive || b.metadata_scheduled {
            return;
        }
        b.metadata_scheduled = true;
        self.btimer(id, delay, BrokerTimer::Metadata);
    }

    fn catch_up_metadata(&mut self, id: i32) {
        if let Some(b) = self.brokers.get_mut(&id) {
            b.metadata_scheduled = false;
        }
        let reachable = self.quorum.host.is_some_and(|h| {
            h == id
                || (self.brokers.get(&h).is_some_and(Broker::running) && self.net.connected(h, id))
        });
        let committed = self.quorum.log.len() as u64;
        let behind = self
            .brokers
            .get(&id)
            .is_some_and(|b| b.image.offset < committed);
        if !behind {
            return;
        }
        if !reachable {
            if let Some(b) = self.brokers.get_mut(&id) {
                b.metadata_scheduled = true;
            }
            self.btimer(id, METADATA_RETRY_MS, BrokerTimer::Metadata);
            return;
        }
        let log = &self.quorum.log;
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        while b.image.offset < committed {
            let offset = b.image.offset + 1;
            let Some(batch) = usize::try_from(offset - 1).ok().and_then(|i| log.get(i)) else {
                break;
            };
            b.image.apply_batch(offset, batch);
        }
        let applied = b.image.offset;
        self.trace(|| format!("broker {id}: metadata applied up to {applied}"));
        self.on_image(id);
    }

    /// Hands every hosted partition its committed state and restarts fetchers.
    fn on_image(&mut self, id: i32) {
        let config = self.replica_config();
        let now = self.now;
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        let Some(topic) = b.image.topic(TOPIC).cloned() else {
            return;
        };
        let current = b.is_current() || self.cfg.broken == Some(Broken::LeadWithoutRegistration);
        for (index, reg) in topic.partitions.iter().enumerate() {
            let p = i32::try_from(index).unwrap_or(i32::MAX);
            if !reg.replicas.contains(&id) {
                continue;
            }
            let state = PartitionState {
                leader: reg.leader,
                leader_epoch: reg.leader_epoch,
                partition_epoch: reg.partition_epoch,
                isr: reg.isr.clone(),
                replicas: reg.replicas.clone(),
            };
            let Some(b) = self.brokers.get_mut(&id) else {
                return;
            };
            let h = b.hosted.entry(p).or_insert_with(|| Hosted {
                partition: Partition::new(id, SimLog::default(), config),
                delivered: None,
                purgatory: Vec::new(),
            });
            if h.delivered.as_ref() == Some(&state) {
                continue;
            }
            if state.leader == id && !current {
                // Not this incarnation's to lead yet (BrokerLifecycle::is_current).
                continue;
            }
            let was = h.partition.replica().leader();
            let result = h.partition.on_metadata(state.clone(), config, now);
            h.delivered = Some(state);
            let is = h.partition.replica().leader();
            match result {
                Ok(actions) => {
                    if was != is {
                        self.trace(|| {
                            format!("broker {id}: p{p} now follows {is:?} (was {was:?})")
                        });
                    }
                    self.handle_actions(id, p, actions);
                }
                Err(e) => self.fail(format!("broker {id} p{p}: on_metadata failed: {e:?}")),
            }
        }
        let leaders: Vec<i32> = self
            .brokers
            .get(&id)
            .map(|b| {
                let mut l: Vec<i32> = b
                    .hosted
                    .values()
                    .filter_map(|h| h.partition.fetch_position().map(|pos| pos.leader))
                    .collect();
                l.sort_unstable();
                l.dedup();
                l
            })
            .unwrap_or_default();
        for leader in leaders {
            self.maybe_fetch(id, leader);
        }
    }

    // ---------------------------------------------------------------- partitions

    /// Carries out what a partition asked for, then answers the produces it can.
    pub fn handle_actions(&mut self, id: i32, p: i32, actions: Vec<Action>) {
        for action in actions {
            if let Action::AlterPartition {
                leader_epoch,
                partition_epoch,
                isr,
            } = action
            {
                let Some(b) = self.brokers.get(&id) else {
                    return;
                };
                let topic_id = b.image.topic(TOPIC).map(|t| t.topic_id);
                match (b.registration, topic_id) {
                    (Some(reg), Some(topic_id)) => {
                        self.trace(|| format!("broker {id}: p{p} proposes ISR {isr:?} (leader epoch {leader_epoch}, partition epoch {partition_epoch})"));
                        if let Some(b) = self.brokers.get_mut(&id) {
                            b.isr_pending.push_back(ProposedIsr {
                                broker_epoch: reg.broker_epoch,
                                change: IsrChange {
                                    topic_id,
                                    partition: p,
                                    leader_epoch,
                                    partition_epoch,
                                    new_isr: isr,
                                },
                            });
                        }
                        self.send_isr_changes(id);
                    }
                    _ => self.btimer(id, 0, BrokerTimer::AlterPartitionUnsent { partition: p }),
                }
            }
        }
        self.check_purgatory(id, p);
    }

    /// Answers the produces whose records the high watermark passed (or that cannot complete).
    fn check_purgatory(&mut self, id: i32, p: i32) {
        let now = self.now;
        let Some(h) = self.hosted_mut(id, p) else {
            return;
        };
        if h.purgatory.is_empty() {
            return;
        }
        let leading = h
            .partition
            .is_leader()
            .then(|| h.partition.replica().leader().map(|(_, e)| e))
            .flatten();
        let hw = h.partition.log.high_watermark();
        let under_min_isr = h.partition.replica().is_under_min_isr();
        let mut answers = Vec::new();
        h.purgatory.retain(|pp| {
            let result = if leading != Some(pp.leader_epoch) {
                Err(PartitionErrorCode::NotLeaderOrFollower)
            } else if hw >= pp.end {
                if under_min_isr {
                    Err(PartitionErrorCode::NotEnoughReplicasAfterAppend)
                } else {
                    Ok(pp.base)
                }
            } else if now >= pp.deadline {
                Err(PartitionErrorCode::RequestTimedOut)
            } else {
                return true;
            };
            answers.push((pp.client, pp.req_id, result));
            false
        });
        for (client, req_id, result) in answers {
            self.send(id, client, Body::ProduceResponse { req_id, result });
        }
    }

    fn schedule_flush(&mut self, id: i32) {
        let delay = self
            .rng
            .range(self.cfg.flush_delay_ms.0, self.cfg.flush_delay_ms.1);
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if b.flush_scheduled {
            return;
        }
        b.flush_scheduled = true;
        self.btimer(id, delay, BrokerTimer::Flush);
    }

    /// The group-commit fsync of every partition with unsynced records.
    fn flush(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        b.flush_scheduled = false;
        let mut leaders = Vec::new();
        for (p, h) in &b.hosted {
            if h.partition.log.sync() && h.partition.is_leader() {
                leaders.push(*p);
            }
        }
        let waiting: Vec<i32> = b
            .fetchers
            .iter_mut()
            .filter(|(_, f)| f.waiting_durable)
            .map(|(l, f)| {
                f.waiting_durable = false;
                *l
            })
            .collect();
        for p in leaders {
            let actions = match self.hosted_mut(id, p) {
                Some(h) => h.partition.on_local_durable(),
                None => Vec::new(),
            };
            self.handle_actions(id, p, actions);
        }
        for leader in waiting {
            self.maybe_fetch(id, leader);
        }
    }

    // ---------------------------------------------------------------- fetching

    /// Sends the next fetch to `leader` unless one is outstanding, appended records are not yet
    /// durable, or the fetcher backs off.
    pub fn maybe_fetch(&mut self, id: i32, leader: i32) {
        if leader == id || leader < 0 {
            return;
        }
        let fetch_before_durable = self.cfg.broken == Some(Broken::FetchBeforeDurable);
        let now = self.now;
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if !b.alive {
            return;
        }
        let f = b.fetchers.entry(leader).or_default();
        if f.in_flight.is_some() || f.waiting_durable || now < f.backoff_until {
            return;
        }
        let mut parts = Vec::new();
        let mut unsynced = false;
        for (p, h) in &b.hosted {
            let Some(pos) = h.partition.fetch_position() else {
                continue;
            };
            if pos.leader != leader {
                continue;
            }
            unsynced |= h.partition.log.has_unsynced();
            parts.push(FetchPartition {
                partition: *p,
                fetch_offset: pos.fetch_offset,
                last_fetched_epoch: pos.last_fetched_epoch,
                current_leader_epoch: pos.leader_epoch,
            });
        }
        if parts.is_empty() {
            return;
        }
        if unsynced && !fetch_before_durable {
            if let Some(f) = b.fetchers.get_mut(&leader) {
                f.waiting_durable = true;
            }
            self.schedule_flush(id);
            return;
        }
        let fetch_id = b.next_id();
        if let Some(f) = b.fetchers.get_mut(&leader) {
            f.in_flight = Some(fetch_id);
        }
        let broker_epoch = b.registration.map_or(-1, |r| r.broker_epoch);
        self.trace(|| {
            let pos: Vec<String> = parts
                .iter()
                .map(|fp| {
                    format!(
                        "p{}@{}/e{}",
                        fp.partition, fp.fetch_offset, fp.last_fetched_epoch
                    )
                })
                .collect();
            format!(
                "broker {id}: fetch {fetch_id} from {leader}: {}",
                pos.join(" ")
            )
        });
        self.send(
            id,
            leader,
            Body::Fetch(FetchRequest {
                fetch_id,
                replica_id: id,
                broker_epoch,
                partitions: parts,
            }),
        );
        self.btimer(
            id,
            FETCH_TIMEOUT_MS,
            BrokerTimer::FetchTimeout { leader, fetch_id },
        );
    }

    /// The leader's side of a follower fetch. On the first pass a fetch that finds no new
    /// records anywhere is held (woken by an append or after `FETCH_MAX_WAIT_MS`); the second pass
    /// answers whatever it finds.
    pub fn leader_fetch(
        &mut self,
        id: i32,
        follower: i32,
        follower_incarnation: u64,
        req: FetchRequest,
        first_pass: bool,
    ) {
        let now = self.now;
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        let eligible = b
            .image
            .broker(req.replica_id)
            .is_some_and(|r| r.is_active() && r.broker_epoch == req.broker_epoch);
        let mut results = Vec::with_capacity(req.partitions.len());
        let mut nothing_new = true;
        let mut acts = Vec::new();
        for fp in &req.partitions {
            let Some(h) = b.hosted.get_mut(&fp.partition) else {
                nothing_new = false;
                results.push((
                    fp.clone(),
                    FetchResult::Error(PartitionErrorCode::UnknownTopicOrPartition),
                ));
                continue;
            };
            let log_start = h.partition.log.log_start_offset();
            let result = match h.partition.on_follower_fetch(
                req.replica_id,
                req.broker_epoch,
                fp.current_leader_epoch,
                fp.fetch_offset,
                fp.last_fetched_epoch,
                eligible,
                now,
            ) {
                Ok((FollowerFetchDecision::Serve { high_watermark }, actions)) => {
                    acts.push((fp.partition, actions));
                    let records = h.partition.log.read(fp.fetch_offset, FETCH_RECORDS_MAX);
                    if !records.is_empty() {
                        nothing_new = false;
                    }
                    FetchResult::Records {
                        records,
                        high_watermark,
                        log_start_offset: log_start,
                    }
                }
                Ok((FollowerFetchDecision::Diverging { epoch, end_offset }, _)) => {
                    nothing_new = false;
                    FetchResult::Diverging { epoch, end_offset }
                }
                Err(e) => {
                    nothing_new = false;
                    FetchResult::Error(error_code(e, log_start))
                }
            };
            results.push((fp.clone(), result));
        }
        if first_pass && nothing_new {
            let park_id = b.next_id();
            b.parked.insert(
                park_id,
                Parked {
                    follower,
                    follower_incarnation,
                    req,
                },
            );
            for (p, actions) in acts {
                self.handle_actions(id, p, actions);
            }
            self.btimer(id, FETCH_MAX_WAIT_MS, BrokerTimer::FetchWake { park_id });
            return;
        }
        for (p, actions) in acts {
            self.handle_actions(id, p, actions);
        }
        self.trace(|| {
            let rs: Vec<String> = results
                .iter()
                .map(|(fp, r)| match r {
                    FetchResult::Records {
                        records,
                        high_watermark,
                        ..
                    } => format!(
                        "p{}: {} records, hw {high_watermark}",
                        fp.partition,
                        records.len()
                    ),
                    other => format!("p{}: {other:?}", fp.partition),
                })
                .collect();
            format!(
                "broker {id}: answers fetch {} of {follower}: {}",
                req.fetch_id,
                rs.join(" ")
            )
        });
        let body = Body::FetchResponse(FetchResponse {
            fetch_id: req.fetch_id,
            partitions: results,
        });
        self.reply(id, follower, follower_incarnation, body);
    }

    /// Wakes the fetches held on partition `p` (records arrived).
    fn wake_parked(&mut self, id: i32, p: i32) {
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        let woken: Vec<u64> = b
            .parked
            .iter()
            .filter(|(_, pk)| pk.req.partitions.iter().any(|fp| fp.partition == p))
            .map(|(k, _)| *k)
            .collect();
        for park_id in woken {
            self.btimer(id, 0, BrokerTimer::FetchWake { park_id });
        }
    }

    /// The follower's side of a fetch answer.
    pub fn follower_fetch_response(&mut self, id: i32, leader: i32, resp: FetchResponse) {
        let fetch_before_durable = self.cfg.broken == Some(Broken::FetchBeforeDurable);
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        match b.fetchers.get_mut(&leader) {
            Some(f) if f.in_flight == Some(resp.fetch_id) => f.in_flight = None,
            _ => return,
        }
        let n = resp.partitions.len();
        let mut failed = 0;
        let mut appended = false;
        let mut acts = Vec::new();
        let mut truncations = Vec::new();
        let mut resets = Vec::new();
        let mut storage_error = None;
        for (fp, result) in resp.partitions {
            let Some(h) = b.hosted.get_mut(&fp.partition) else {
                failed += 1;
                continue;
            };
            let Some(pos) = h.partition.fetch_position() else {
                failed += 1;
                continue;
            };
            if pos.leader != leader
                || pos.leader_epoch != fp.current_leader_epoch
                || pos.fetch_offset != fp.fetch_offset
                || pos.last_fetched_epoch != fp.last_fetched_epoch
            {
                // Our state moved since this fetch was sent: its answer is stale.
                continue;
            }
            match result {
                FetchResult::Records {
                    records,
                    high_watermark,
                    log_start_offset,
                } => {
                    if !records.is_empty()
                        && h.partition.log.append_replicated(fp.fetch_offset, &records)
                    {
                        appended = true;
                    }
                    acts.push((
                        fp.partition,
                        h.partition.on_leader_high_watermark(high_watermark),
                    ));
                    // Kafka's follower follows the leader's log start (never past its own HW).
                    h.partition.log.delete_records_before(log_start_offset);
                }
                FetchResult::Diverging { epoch, end_offset } => {
                    let before = h.partition.log.log_end_offset();
                    match h.partition.on_diverging_epoch(epoch, end_offset) {
                        Ok(after) => {
                            truncations.push((fp.partition, epoch, end_offset, before, after))
                        }
                        Err(e) => storage_error = Some(format!("{e:?}")),
                    }
                }
                FetchResult::Error(PartitionErrorCode::OffsetOutOfRange { log_start_offset }) => {
                    let before = h.partition.log.log_start_offset();
                    if let Err(e) = h.partition.on_fetch_out_of_range(log_start_offset) {
                        storage_error = Some(format!("{e:?}"));
                    }
                    if h.partition.log.log_start_offset() != before {
                        resets.push((fp.partition, log_start_offset));
                    }
                }
                FetchResult::Error(_) => failed += 1,
            }
        }
        if appended {
            if let Some(f) = b.fetchers.get_mut(&leader) {
                f.waiting_durable = !fetch_before_durable;
            }
        }
        if failed == n && n > 0 {
            if let Some(f) = b.fetchers.get_mut(&leader) {
                f.backoff_until = self.now + FETCH_BACKOFF_MS;
            }
            self.btimer(id, FETCH_BACKOFF_MS, BrokerTimer::FetchRetry { leader });
        }
        if let Some(e) = storage_error {
            self.fail(format!("broker {id}: follower truncation failed: {e}"));
        }
        for (p, start) in resets {
            self.stats.log_resets += 1;
            self.trace(|| {
                format!("broker {id}: p{p} behind {leader}'s log start: log restarted at {start}")
            });
        }
        for (p, epoch, end_offset, before, after) in truncations {
            self.stats.divergence_truncations += 1;
            self.trace(|| format!("broker {id}: p{p} diverging epoch {epoch} end {end_offset} from {leader}: log end {before} -> {after}"));
        }
        for (p, actions) in acts {
            self.handle_actions(id, p, actions);
        }
        if appended {
            self.schedule_flush(id);
        }
        self.maybe_fetch(id, leader);
    }

    // ---------------------------------------------------------------- clients

    /// An `acks=all` produce at (what the client thinks is) the leader.
    pub fn leader_produce(&mut self, id: i32, client: i32, req_id: u64, p: i32, values: Vec<u64>) {
        let now = self.now;
        self.stats.produce_requests += 1;
        let result = match self.hosted_mut(id, p) {
            None => Err(PartitionErrorCode::NotLeaderOrFollower),
            Some(h) => match h.partition.check_append(true) {
                Err(e) => Err(error_code(e, 0)),
                Ok(epoch) => {
                    let (base, end) = h.partition.log.append_as_leader(epoch, &values);
                    h.purgatory.push(PendingProduce {
                        req_id,
                        client,
                        leader_epoch: epoch,
                        base,
                        end,
                        deadline: now + PRODUCE_TIMEOUT_MS,
                    });
                    Ok((epoch, base, end))
                }
            },
        };
        match result {
            Err(code) => {
                self.stats.produce_refused += 1;
                self.send(
                    id,
                    client,
                    Body::ProduceResponse {
                        req_id,
                        result: Err(code),
                    },
                );
            }
            Ok((epoch, base, end)) => {
                self.trace(|| format!("broker {id}: p{p} appended {values:?} at {base}..{end} (leader epoch {epoch})"));
                self.schedule_flush(id);
                self.wake_parked(id, p);
            }
        }
    }

    pub fn broker_metadata_request(&mut self, id: i32, client: i32, req_id: u64) {
        let partitions = self.cfg.partitions;
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        let leaders = (0..partitions)
            .map(|p| b.image.partition(TOPIC, p).map_or(-1, |r| r.leader))
            .collect();
        self.send(id, client, Body::MetadataResponse { req_id, leaders });
    }

    /// Sends an answer to the incarnation that asked.
    pub fn reply(&mut self, from: i32, to: i32, to_incarnation: u64, body: Body) {
        if self.incarnation(to) != to_incarnation {
            return;
        }
        self.send(from, to, body);
    }
}
