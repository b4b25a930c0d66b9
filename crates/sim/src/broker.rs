//! One simulated broker process: its state, its timers, and the executor of the replication
//! driver (the broker's `ReplicaManager` is the other one). The parts, one concept each:
//! - `process.rs`: start on its disk, crash (`kill -9`, power loss), end of a controlled shutdown;
//! - `lifecycle.rs`: registration with a fresh incarnation id, heartbeats, re-registration on
//!   STALE_BROKER_EPOCH, controlled shutdown, controller calls (the ISR sender's `AlterPartitions`
//!   among them);
//! - `metadata.rs`: catching up on the committed metadata log with its own delay, and handing each
//!   hosted partition its state through the driver's [`HostedReplica::on_metadata`] (a broker leads
//!   only when its image shows *this incarnation* registered and unfenced);
//! - `replication.rs`: the driver's actions carried out (ISR proposals, `acks=all` answers), the
//!   group-commit flush, follower fetches as the driver's `LeaderFetcher` decides them and their
//!   answers through `apply_answer`, and the leader's side of a follower fetch;
//! - `clients.rs`: produces, metadata requests, replies.
//!
//! A failed log dir (`faults.rs`) puts some of a broker's replicas in `offline`: they refuse
//! produces, fetch nothing and apply no fetch answer, and the heartbeat reports them, until the
//! broker restarts (the dir is rescanned then; its data is intact).
//!
//! The logs live on the broker's "disk": they survive a crash through [`SimLog`]'s crash model,
//! while everything else (the replica state machines, registrations, fetch state) is rebuilt.

use std::collections::BTreeMap;

use millrace_cluster::image::MetadataImage;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};
use millrace_replication::driver::fetch::LeaderFetcher;
use millrace_replication::driver::HostedReplica;
use millrace_replication::isr_changes::IsrChangeSender;
use millrace_replication::{PartitionError, ReplicaConfig};
use uuid::Uuid;

use crate::limits::{FETCH_BACKOFF_MS, HW_CHECKPOINT_MS, REPLICA_TICK_MS};
use crate::log::SimLog;
use crate::net::{FetchRequest, PartitionErrorCode};
use crate::world::{Ev, World};

mod clients;
mod lifecycle;
mod metadata;
mod process;
mod replication;

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
    /// Partitions whose replica is on a log dir that failed in this incarnation: no produce, no
    /// fetching, reported in every heartbeat; the dir comes back at the next start.
    pub offline: std::collections::BTreeSet<i32>,
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
            offline: std::collections::BTreeSet::new(),
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
}
