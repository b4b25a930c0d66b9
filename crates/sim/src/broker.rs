//! One simulated broker process: the replication driver's second executor (the broker's
//! `ReplicaManager` is the first), wired the way the real broker wires the same pieces:
//! - lifecycle (`millrace_controller::lifecycle`): register with a fresh incarnation id, heartbeat
//!   (fast while fenced or shutting down), re-register on STALE_BROKER_EPOCH, controlled shutdown;
//! - metadata: applies the committed metadata log in order, with its own delay, while it can reach
//!   the active controller; hands each hosted partition its committed state — but leads only when
//!   its image shows *this incarnation* registered and unfenced (`BrokerLifecycle::is_current`);
//! - per hosted partition the driver's [`HostedReplica`] over a [`SimLog`], with its `acks=all`
//!   waits (`driver::acks`: answered once the high watermark passes the records,
//!   NOT_LEADER_OR_FOLLOWER when the leader epoch moves, REQUEST_TIMED_OUT at its deadline);
//! - the fetcher: the driver's [`LeaderFetcher`] per (follower, leader broker) — one outstanding
//!   fetch covering every partition it follows there, the next only once what the last one
//!   appended is durable — and [`apply_answer`] per partition (diverging epoch → truncate, out of
//!   range → restart at the leader's log start);
//! - the ISR changes, sent through the driver's [`IsrChangeSender`], one `AlterPartitions` at a
//!   time;
//! - the leader's fetch handler, holding an empty fetch up to `FETCH_MAX_WAIT_MS` (woken by an
//!   append);
//! - a group-commit flusher (`log.flush.policy=batch`) and the high-watermark checkpoint.
//!
//! The logs live on the broker's "disk": they survive a crash through [`SimLog`]'s crash model,
//! while everything else (the replica state machines, registrations, fetch state) is rebuilt.

use std::collections::BTreeMap;

use millrace_cluster::image::MetadataImage;
use millrace_controller::limits::ISR_CHANGES_PER_REQUEST_MAX;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};
use millrace_replication::driver::acks::AckError;
use millrace_replication::driver::fetch::{
    apply_answer, FetchAnswer, FetchStep, Followed, LeaderFetcher,
};
use millrace_replication::driver::HostedReplica;
use millrace_replication::isr_changes::IsrChangeSender;
use millrace_replication::{
    Action, FollowerFetchDecision, PartitionError, PartitionState, ReplicaConfig, ReplicaLog,
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
    /// The `AlterPartitions` request the driver's ISR sender has out.
    AlterPartitions,
}

#[derive(Debug, Clone)]
pub(crate) struct ControllerCall {
    kind: CallKind,
    req: ControllerRequest,
}

/// An `acks=all` produce waiting for the high watermark (in the driver's `AckWaits`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiter {
    req_id: u64,
    client: i32,
    base: i64,
}

/// One hosted partition: the replication driver's replica over a simulated log.
pub(crate) type Hosted = HostedReplica<SimLog, Waiter>;

/// What a fetch answer did, for the stats and the trace.
enum FetchNote {
    Truncated { p: i32, before: i64, after: i64 },
    Restarted { p: i32, start: i64 },
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
    /// The driver's fetch state per leader broker.
    fetchers: BTreeMap<i32, LeaderFetcher<i32>>,
    parked: BTreeMap<u64, Parked>,
    calls: BTreeMap<u64, ControllerCall>,
    /// The driver's ISR change sender (targets: partition indexes).
    isr_changes: IsrChangeSender<i32>,
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
            isr_changes: IsrChangeSender::default(),
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
        b.isr_changes.clear();
        b.flush_scheduled = false;
        b.metadata_scheduled = false;
        let mut unsynced = false;
        for h in b.hosted.values_mut() {
            let log = std::mem::take(&mut h.partition.log);
            unsynced |= log.has_unsynced();
            *h = Hosted::new(id, log, config);
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
        b.isr_changes.clear();
        let mut lost = 0;
        for (h, torn) in b.hosted.values_mut().zip(torn) {
            h.acks = Default::default();
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
                    // (Also answers the acks=all waits whose deadline passed.)
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
                let now = self.now;
                let timed_out = match self
                    .brokers
                    .get_mut(&id)
                    .and_then(|b| b.fetchers.get_mut(&leader))
                {
                    Some(f) if f.in_flight() == Some(fetch_id) => {
                        f.on_failure(Some(fetch_id), now, FETCH_BACKOFF_MS);
                        true
                    }
                    _ => false,
                };
                if timed_out {
                    self.btimer(id, FETCH_BACKOFF_MS, BrokerTimer::FetchRetry { leader });
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
            CallKind::AlterPartitions => {
                let now = self.now;
                let answered = match self.brokers.get_mut(&id) {
                    Some(b) => b.isr_changes.on_response(resp),
                    None => Vec::new(),
                };
                for (partition, (result, _)) in answered {
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

    /// Sends the driver's next `AlterPartitions` request, unless one is out.
    fn send_isr_changes(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if let Some(req) = b.isr_changes.next_request(id, ISR_CHANGES_PER_REQUEST_MAX) {
            self.controller_call(id, CallKind::AlterPartitions, req);
        }
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
            let image = &b.image;
            let h = b
                .hosted
                .entry(p)
                .or_insert_with(|| Hosted::new(id, SimLog::default(), config));
            let was = h.partition.replica().leader();
            let result = h.on_metadata(state, current, config, now, |r| !image.is_active(r));
            let is = h.partition.replica().leader();
            match result {
                Ok(outcome) => {
                    if was != is {
                        self.trace(|| {
                            format!("broker {id}: p{p} now follows {is:?} (was {was:?})")
                        });
                    }
                    self.handle_actions(id, p, outcome.actions);
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

    /// Carries out what a partition asked for through the driver (`HostedReplica::after`): ISR
    /// changes go to the broker's sender, released `acks=all` produces are answered.
    pub fn handle_actions(&mut self, id: i32, p: i32, actions: Vec<Action>) {
        let now = self.now;
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        let topic_id = b.image.topic(TOPIC).map(|t| t.topic_id).unwrap_or_default();
        let broker_epoch = b.registration.map(|r| r.broker_epoch);
        let Some(h) = b.hosted.get_mut(&p) else {
            return;
        };
        let after = h.after(actions, (topic_id, p), broker_epoch, now);
        let proposed = !after.proposals.is_empty();
        let mut lines = Vec::new();
        for proposal in after.proposals {
            let c = &proposal.change;
            lines.push(format!(
                "broker {id}: p{p} proposes ISR {:?} (leader epoch {}, partition epoch {})",
                c.new_isr, c.leader_epoch, c.partition_epoch
            ));
            b.isr_changes.propose(proposal, p);
        }
        for line in lines {
            self.trace(|| line);
        }
        for (w, result) in after.acks {
            let result = result.map(|()| w.base).map_err(|e| match e {
                AckError::Timeout => PartitionErrorCode::RequestTimedOut,
                AckError::NotLeader => PartitionErrorCode::NotLeaderOrFollower,
                AckError::NotEnoughReplicasAfterAppend => {
                    PartitionErrorCode::NotEnoughReplicasAfterAppend
                }
                AckError::Storage => PartitionErrorCode::Storage,
            });
            self.send(
                id,
                w.client,
                Body::ProduceResponse {
                    req_id: w.req_id,
                    result,
                },
            );
        }
        if proposed {
            self.send_isr_changes(id);
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
            .filter(|(_, f)| f.waiting_durable())
            .map(|(l, f)| {
                f.on_durable();
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

    /// Sends the next fetch to `leader` when the driver's fetcher says so (none outstanding,
    /// appended records durable, not backing off).
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
        let followed: Vec<Followed<i32>> = b
            .hosted
            .iter()
            .filter_map(|(p, h)| {
                Some(Followed {
                    key: *p,
                    position: h.partition.fetch_position()?,
                    unsynced: h.partition.log.has_unsynced(),
                })
            })
            .collect();
        let f = b.fetchers.entry(leader).or_insert_with(|| {
            let f = LeaderFetcher::new(leader);
            if fetch_before_durable {
                f.fetch_before_durable()
            } else {
                f
            }
        });
        let (fetch_id, sent) = match f.next(now, followed) {
            FetchStep::Send {
                fetch_id,
                partitions,
            } => (fetch_id, partitions),
            FetchStep::WaitDurable => {
                self.schedule_flush(id);
                return;
            }
            FetchStep::Idle { retry_at_ms } => {
                if let Some(at) = retry_at_ms {
                    self.btimer(id, (at - now).max(0), BrokerTimer::FetchRetry { leader });
                }
                return;
            }
        };
        let parts: Vec<FetchPartition> = sent
            .iter()
            .map(|(p, pos)| FetchPartition {
                partition: *p,
                fetch_offset: pos.fetch_offset,
                last_fetched_epoch: pos.last_fetched_epoch,
                current_leader_epoch: pos.leader_epoch,
            })
            .collect();
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

    /// The follower's side of a fetch answer: each partition's part through the driver's
    /// `apply_answer`.
    pub fn follower_fetch_response(&mut self, id: i32, leader: i32, resp: FetchResponse) {
        let now = self.now;
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        let Some(f) = b.fetchers.get_mut(&leader) else {
            return;
        };
        let Some(sent) = f.on_answer(resp.fetch_id) else {
            return;
        };
        let sent: BTreeMap<i32, _> = sent.into_iter().collect();
        let mut appended = false;
        let mut acts = Vec::new();
        let mut notes = Vec::new();
        let mut storage_error = None;
        for (fp, result) in resp.partitions {
            let (Some(h), Some(position)) =
                (b.hosted.get_mut(&fp.partition), sent.get(&fp.partition))
            else {
                continue;
            };
            let answer = match result {
                FetchResult::Records {
                    records,
                    high_watermark,
                    log_start_offset,
                } => FetchAnswer::Records {
                    records: (!records.is_empty()).then_some(records),
                    high_watermark,
                    log_start_offset,
                },
                FetchResult::Diverging { epoch, end_offset } => {
                    FetchAnswer::Diverging { epoch, end_offset }
                }
                FetchResult::Error(PartitionErrorCode::OffsetOutOfRange { log_start_offset }) => {
                    FetchAnswer::OutOfRange { log_start_offset }
                }
                FetchResult::Error(_) => FetchAnswer::Error,
            };
            let outcome = apply_answer(&mut h.partition, position, answer);
            appended |= outcome.appended;
            if outcome.back_off {
                if let Some(f) = b.fetchers.get_mut(&leader) {
                    f.back_off_partition(fp.partition, now);
                }
            }
            if let Some(failure) = outcome.failure {
                storage_error = Some(failure);
            }
            if let Some((before, after)) = outcome.truncated {
                notes.push(FetchNote::Truncated {
                    p: fp.partition,
                    before,
                    after,
                });
            }
            if let Some(start) = outcome.restarted_at {
                notes.push(FetchNote::Restarted {
                    p: fp.partition,
                    start,
                });
            }
            acts.push((fp.partition, outcome.actions));
        }
        if let Some(f) = b.fetchers.get_mut(&leader) {
            f.answered(appended);
        }
        if let Some(e) = storage_error {
            self.fail(format!(
                "broker {id}: fetch answer from {leader} not applied: {e}"
            ));
        }
        for note in notes {
            match note {
                FetchNote::Restarted { p, start } => {
                    self.stats.log_resets += 1;
                    self.trace(|| {
                        format!("broker {id}: p{p} behind {leader}'s log start: log restarted at {start}")
                    });
                }
                FetchNote::Truncated { p, before, after } => {
                    self.stats.divergence_truncations += 1;
                    self.trace(|| {
                        format!(
                            "broker {id}: p{p} diverges from {leader}: log end {before} -> {after}"
                        )
                    });
                }
            }
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
                    let waiter = Waiter {
                        req_id,
                        client,
                        base,
                    };
                    h.acks.add(waiter, epoch, end, now + PRODUCE_TIMEOUT_MS);
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
