//! The metadata quorum and the active controller.
//!
//! The quorum is modelled, not simulated message by message: one linearizable log of committed
//! [`MetadataBatch`]es, led by one of the voter brokers (the *host* of the active controller).
//! An entry commits after a seeded latency while the host is running and in touch with a
//! majority of voters. The active controller is a real [`Controller`], driven as
//! `ControllerService` drives it: one decision at a time on the committed image, its records
//! committed before it answers and takes the next — as one entry, or split by the service's own
//! [`entries_of`] into a metadata transaction of several when they exceed the seed's
//! `entry_bytes_max` (which the quorum enforces on every entry); ticks every
//! `CONTROLLER_TICK_MS` through the same queue.
//!
//! Failover (the host crashed, paused past the election timeout, cut from the majority, or a
//! forced resignation): the proposals not yet committed are lost or survive (a random prefix,
//! committed later by the next leader *without an answer*; a prefix that ends inside a
//! transaction leaves it open), queued requests are dropped (their brokers time out and retry),
//! and after an election delay a new host runs a *fresh* `Controller` that commits a barrier
//! entry, aborts a transaction left open ([`activation_records`]) and then calls `activate` —
//! the service's activation, whose soft state (broker sessions) starts over.
//!
//! Brokers send controller requests to the current host (they follow the quorum's leader as the
//! client does); a request that reaches a node that is not the host is answered NOT_CONTROLLER.

use std::collections::VecDeque;

use millrace_cluster::config::BrokerConfig;
use millrace_cluster::image::MetadataImage;
use millrace_cluster::records::{MetadataBatch, MetadataRecord};
use millrace_controller::limits::CONTROLLER_TICK_MS;
use millrace_controller::{
    activation_records, entries_of, Controller, ControllerConfig, ControllerError,
    ControllerRequest, ControllerResponse,
};
use uuid::Uuid;

use crate::config::SimConfig;
use crate::limits::{
    CONTROLLER_QUEUE_MAX, ELECTION_TIMEOUT_MAX_MS, ELECTION_TIMEOUT_MIN_MS, QUORUM_CHECK_MS,
};
use crate::net::Body;
use crate::rng::{splitmix64, Rng};
use crate::world::{Ev, World};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuorumTimer {
    Commit,
    Tick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reply {
    to: i32,
    to_incarnation: u64,
    req_id: u64,
}

#[derive(Debug)]
enum Purpose {
    Barrier,
    Bootstrap,
    /// The abort of a transaction the previous controller left open.
    Abort,
    /// An entry of a decision spread over several, other than its last.
    Part,
    Decision {
        reply: Reply,
        response: ControllerResponse,
    },
    Tick,
    /// Survived a failover: committed without an answer.
    Carried,
}

#[derive(Debug)]
struct Proposal {
    batch: MetadataBatch,
    purpose: Purpose,
}

#[derive(Debug)]
enum Job {
    Request {
        reply: Reply,
        req: ControllerRequest,
    },
    Tick,
}

/// The metadata log, its committed image and the active controller.
pub(crate) struct Quorum {
    /// Committed entries; entry `i` has log offset `i + 1`.
    pub log: Vec<MetadataBatch>,
    /// The committed image (what the active controller decides on).
    pub image: MetadataImage,
    /// The voter hosting the active controller.
    pub host: Option<i32>,
    /// Rises at every failover and election; timers of older generations are void.
    pub generation: u64,
    controller: Option<Controller>,
    config: ControllerConfig,
    activated: bool,
    busy: bool,
    uncommitted: VecDeque<Proposal>,
    /// The later entries of the decision being committed: as in the service, each is proposed
    /// once the one before it has committed.
    unproposed: VecDeque<Proposal>,
    queue: VecDeque<Job>,
    tick_queued: bool,
    commit_scheduled: bool,
    unhealthy_deadline: Option<i64>,
    electing: bool,
    id_state: u64,
}

impl Quorum {
    pub fn new(cfg: &SimConfig, rng: &mut Rng) -> Self {
        let config = ControllerConfig {
            session_timeout_ms: cfg.session_timeout_ms,
            ..ControllerConfig::new(BrokerConfig::default())
        };
        Self {
            log: Vec::new(),
            image: MetadataImage::default(),
            host: None,
            generation: 0,
            controller: None,
            config,
            activated: false,
            busy: false,
            uncommitted: VecDeque::new(),
            unproposed: VecDeque::new(),
            queue: VecDeque::new(),
            tick_queued: false,
            commit_scheduled: false,
            unhealthy_deadline: None,
            electing: false,
            id_state: rng.next_u64(),
        }
    }

    pub fn is_active(&self) -> bool {
        self.host.is_some() && self.activated
    }

    pub fn idle(&self) -> bool {
        self.uncommitted.is_empty() && !self.busy && self.queue.is_empty()
    }
}

impl World {
    /// Whether voter `h`, as quorum leader, reaches a majority of voters (itself included).
    fn reaches_majority(&self, h: i32) -> bool {
        if !self.brokers.get(&h).is_some_and(|b| b.running()) {
            return false;
        }
        let reached = (1..=self.cfg.voters)
            .filter(|&v| {
                v == h
                    || (self.brokers.get(&v).is_some_and(|b| b.running())
                        && self.net.connected(h, v))
            })
            .count();
        reached > usize::try_from(self.cfg.voters).unwrap_or(0) / 2
    }

    fn qtimer(&mut self, delay_ms: i64, timer: QuorumTimer) {
        let generation = self.quorum.generation;
        self.after(delay_ms, Ev::Quorum { generation, timer });
    }

    /// A controller request reached broker `at`.
    pub fn controller_request(
        &mut self,
        at: i32,
        from: i32,
        from_incarnation: u64,
        req_id: u64,
        req: ControllerRequest,
    ) {
        let reply = Reply {
            to: from,
            to_incarnation: from_incarnation,
            req_id,
        };
        if self.quorum.host != Some(at) || self.quorum.controller.is_none() {
            let leader = self.quorum.host;
            self.answer(
                at,
                reply,
                ControllerResponse::Error {
                    error: ControllerError::NotController { leader },
                },
            );
            return;
        }
        if self.quorum.queue.len() >= CONTROLLER_QUEUE_MAX {
            self.answer(
                at,
                reply,
                ControllerResponse::Error {
                    error: ControllerError::Timeout("the controller's queue is full".into()),
                },
            );
            return;
        }
        self.quorum.queue.push_back(Job::Request { reply, req });
        self.pump();
    }

    fn answer(&mut self, from: i32, reply: Reply, resp: ControllerResponse) {
        self.reply(
            from,
            reply.to,
            reply.to_incarnation,
            Body::ControllerResponse {
                req_id: reply.req_id,
                resp,
            },
        );
    }

    /// Takes the next decision while none is in flight.
    fn pump(&mut self) {
        let now = self.now;
        loop {
            let Some(host) = self.quorum.host else {
                return;
            };
            if self.quorum.busy || !self.quorum.activated {
                return;
            }
            let Some(job) = self.quorum.queue.pop_front() else {
                return;
            };
            let internal = match &job {
                Job::Request {
                    req: ControllerRequest::AlterPartitions { changes, .. },
                    ..
                } => self.draw_internal_error(changes.len()),
                _ => None,
            };
            let q = &mut self.quorum;
            let Some(controller) = q.controller.as_mut() else {
                return;
            };
            match job {
                Job::Request { reply, req } => {
                    let summary = if self.tracing {
                        format!("{req:?}")
                    } else {
                        String::new()
                    };
                    if let Some(InternalError::BeforeDeciding(response)) = internal {
                        self.trace(|| {
                            format!("controller@{host}: {summary} -> internal error (fault)")
                        });
                        self.answer(host, reply, response);
                        continue;
                    }
                    let mut decision = controller.handle(&q.image, req, now);
                    if let Some(InternalError::AfterDeciding(response)) = internal {
                        decision.response = response;
                    }
                    if decision.records.is_empty() {
                        self.trace(|| {
                            format!("controller@{host}: {summary} -> {:?}", decision.response)
                        });
                        self.answer(host, reply, decision.response);
                        continue;
                    }
                    self.trace(|| {
                        format!(
                            "controller@{host}: {summary} -> propose {:?}",
                            decision.records
                        )
                    });
                    self.propose(
                        decision.records,
                        Purpose::Decision {
                            reply,
                            response: decision.response,
                        },
                    );
                    self.quorum.busy = true;
                    return;
                }
                Job::Tick => {
                    q.tick_queued = false;
                    let records = controller.tick(&q.image, now);
                    if records.is_empty() {
                        continue;
                    }
                    self.trace(|| format!("controller@{host}: tick -> propose {records:?}"));
                    self.propose(records, Purpose::Tick);
                    self.quorum.busy = true;
                    return;
                }
            }
        }
    }

    /// Whether the controller answers this `AlterPartitions` request of `changes` changes with
    /// an internal error (the fault `alter_partition_internal_per_mille`), and how.
    fn draw_internal_error(&mut self, changes: usize) -> Option<InternalError> {
        let rate = self.cfg.alter_partition_internal_per_mille;
        if rate == 0 || self.phase != crate::world::Phase::Faults || !self.rng.chance(rate) {
            return None;
        }
        self.stats.alter_partition_internal_errors += 1;
        let error = ControllerError::Internal("simulated internal error".into());
        let per_change = ControllerResponse::AlterPartitions {
            results: vec![Err(error.clone()); changes],
        };
        Some(match self.rng.below(3) {
            0 => InternalError::BeforeDeciding(per_change),
            1 => InternalError::AfterDeciding(per_change),
            _ => InternalError::BeforeDeciding(ControllerResponse::Error { error }),
        })
    }

    /// Proposes one decision's records: one entry, or several (a metadata transaction) split as
    /// the service splits them; the purpose goes with the last.
    fn propose(&mut self, records: Vec<MetadataRecord>, purpose: Purpose) {
        let entries = match entries_of(records, self.cfg.entry_bytes_max) {
            Ok(entries) => entries,
            Err(e) => {
                self.fail(format!(
                    "a decision could not be split into entries of {} bytes: {e}",
                    self.cfg.entry_bytes_max
                ));
                return;
            }
        };
        if entries.len() > 1 {
            self.stats.metadata_transactions += 1;
        }
        let last = entries.len().saturating_sub(1);
        let mut purpose = Some(purpose);
        let mut proposals: VecDeque<Proposal> = entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| Proposal {
                batch: MetadataBatch::new(entry),
                purpose: if i == last {
                    purpose.take().unwrap_or(Purpose::Part)
                } else {
                    Purpose::Part
                },
            })
            .collect();
        let Some(first) = proposals.pop_front() else {
            return;
        };
        self.quorum.unproposed = proposals;
        self.enqueue(first);
    }

    /// Hands one entry to the quorum; it commits after a seeded latency.
    fn enqueue(&mut self, proposal: Proposal) {
        self.quorum.uncommitted.push_back(proposal);
        if !self.quorum.commit_scheduled {
            self.quorum.commit_scheduled = true;
            let latency = self
                .rng
                .range(self.cfg.commit_latency_ms.0, self.cfg.commit_latency_ms.1);
            self.qtimer(latency, QuorumTimer::Commit);
        }
    }

    pub fn quorum_timer(&mut self, timer: QuorumTimer) {
        match timer {
            QuorumTimer::Commit => {
                self.quorum.commit_scheduled = false;
                if self.quorum.uncommitted.is_empty() {
                    return;
                }
                let Some(host) = self.quorum.host else {
                    return;
                };
                if !self.reaches_majority(host) {
                    // Raft cannot commit; the health check fails the leader over.
                    self.quorum.commit_scheduled = true;
                    self.qtimer(QUORUM_CHECK_MS, QuorumTimer::Commit);
                    return;
                }
                self.commit_all(host);
            }
            QuorumTimer::Tick => {
                if self.quorum.activated && !self.quorum.tick_queued {
                    self.quorum.tick_queued = true;
                    self.quorum.queue.push_back(Job::Tick);
                    self.pump();
                }
                self.qtimer(CONTROLLER_TICK_MS as i64, QuorumTimer::Tick);
            }
        }
    }

    fn commit_all(&mut self, host: i32) {
        let mut next_entry = None;
        while let Some(p) = self.quorum.uncommitted.pop_front() {
            let bytes = match p.batch.encode() {
                Ok(b) => b.len(),
                Err(e) => {
                    self.fail(format!("an entry could not be encoded: {e}"));
                    return;
                }
            };
            if bytes > self.cfg.entry_bytes_max {
                self.fail(format!(
                    "an entry of {bytes} bytes exceeds the quorum's bound of {}",
                    self.cfg.entry_bytes_max
                ));
                return;
            }
            let offset = self.quorum.log.len() as u64 + 1;
            if let Some(open) = self.quorum.image.transaction.as_ref() {
                if p.batch
                    .records
                    .iter()
                    .any(|r| matches!(r, MetadataRecord::BeginTransaction { .. }))
                {
                    // The image would drop the open one; no controller may rely on that.
                    let what = format!(
                        "the entry at offset {offset} begins a transaction inside \"{}\", left open at offset {}",
                        open.name, open.start_offset
                    );
                    self.fail(what);
                    return;
                }
            }
            self.quorum.image.apply_batch(offset, &p.batch);
            self.quorum.log.push(p.batch);
            self.stats.metadata_entries += 1;
            self.check_committed_image(offset);
            // The barrier comes before the abort of what an earlier controller left open.
            let ends_a_decision = !matches!(
                p.purpose,
                Purpose::Part | Purpose::Carried | Purpose::Barrier
            );
            if let Some(open) = self
                .quorum
                .image
                .transaction
                .as_ref()
                .filter(|_| ends_a_decision)
            {
                // A whole decision is committed, yet a transaction is open: its records are held
                // back with those of an earlier, unfinished decision (a controller that did not
                // abort what its predecessor left open) and may never take effect.
                let what = format!(
                    "the entry at offset {offset} ends a decision inside the transaction \"{}\" left open at offset {}",
                    open.name, open.start_offset
                );
                self.fail(what);
                return;
            }
            match p.purpose {
                Purpose::Barrier => {
                    let abort = activation_records(&self.quorum.image);
                    if !abort.is_empty() {
                        self.trace(|| format!("controller@{host}: {abort:?}"));
                        self.quorum.uncommitted.push_back(Proposal {
                            batch: MetadataBatch::new(abort),
                            purpose: Purpose::Abort,
                        });
                    } else if self.quorum.image.cluster_id.is_none() {
                        let cluster_id = format!("sim-{:016x}", self.rng.next_u64());
                        self.trace(|| format!("controller@{host}: bootstrap {cluster_id}"));
                        self.quorum.uncommitted.push_back(Proposal {
                            batch: MetadataBatch::new(vec![MetadataRecord::Bootstrap {
                                cluster_id,
                            }]),
                            purpose: Purpose::Bootstrap,
                        });
                    } else {
                        self.activate(host);
                    }
                }
                Purpose::Bootstrap => self.activate(host),
                Purpose::Abort => {
                    self.stats.transactions_aborted += 1;
                    self.activate(host);
                }
                Purpose::Decision {
                    reply,
                    mut response,
                } => {
                    if let ControllerResponse::Registered { broker_epoch } = &mut response {
                        if *broker_epoch < 0 {
                            *broker_epoch = i64::try_from(offset).unwrap_or(i64::MAX);
                        }
                    }
                    self.quorum.busy = false;
                    self.answer(host, reply, response);
                }
                Purpose::Tick => self.quorum.busy = false,
                Purpose::Part => next_entry = self.quorum.unproposed.pop_front(),
                Purpose::Carried => {}
            }
        }
        if let Some(p) = next_entry {
            self.enqueue(p);
        }
        self.trace(|| format!("quorum: committed up to {}", self.quorum.log.len()));
        let ids: Vec<i32> = self.brokers.keys().copied().collect();
        for id in ids {
            self.schedule_metadata(id);
        }
        self.pump();
    }

    fn activate(&mut self, host: i32) {
        let now = self.now;
        let q = &mut self.quorum;
        if let Some(c) = q.controller.as_mut() {
            c.activate(&q.image, now);
            q.activated = true;
        }
        self.trace(|| {
            format!(
                "controller@{host}: active (generation {})",
                self.quorum.generation
            )
        });
    }

    /// The quorum's health check: elects a controller when there is none, fails an unhealthy one
    /// over after the election timeout.
    pub fn quorum_check(&mut self) {
        match self.quorum.host {
            None => {
                if !self.quorum.electing {
                    self.start_election();
                }
            }
            Some(h) => {
                if self.reaches_majority(h) {
                    self.quorum.unhealthy_deadline = None;
                } else {
                    let timeout = self
                        .rng
                        .range(ELECTION_TIMEOUT_MIN_MS, ELECTION_TIMEOUT_MAX_MS);
                    let deadline = *self
                        .quorum
                        .unhealthy_deadline
                        .get_or_insert(self.now + timeout);
                    if self.now >= deadline {
                        self.fail_over("the active controller lost its quorum");
                    }
                }
            }
        }
        self.after(QUORUM_CHECK_MS, Ev::QuorumCheck);
    }

    fn start_election(&mut self) {
        self.quorum.electing = true;
        let generation = self.quorum.generation;
        let delay = self
            .rng
            .range(ELECTION_TIMEOUT_MIN_MS, ELECTION_TIMEOUT_MAX_MS);
        self.after(delay, Ev::Elect { generation });
    }

    /// The active controller goes away: uncommitted proposals survive as a random prefix (to be
    /// committed, unanswered, by the next leader) or are lost; queued requests are dropped.
    pub fn fail_over(&mut self, why: &str) {
        let Some(old) = self.quorum.host else {
            return;
        };
        let q = &mut self.quorum;
        let n = q.uncommitted.len();
        let keep = usize::try_from(self.rng.range(0, n as i64)).unwrap_or(0);
        q.uncommitted.truncate(keep);
        if !q.unproposed.is_empty()
            || q.uncommitted
                .back()
                .is_some_and(|p| matches!(p.purpose, Purpose::Part))
        {
            // The controller goes between two entries of one decision: its transaction stays
            // open until the next controller aborts it.
            self.stats.decisions_cut += 1;
        }
        q.unproposed.clear();
        for p in &mut q.uncommitted {
            p.purpose = Purpose::Carried;
        }
        q.queue.clear();
        q.controller = None;
        q.activated = false;
        q.busy = false;
        q.tick_queued = false;
        q.commit_scheduled = false;
        q.unhealthy_deadline = None;
        q.host = None;
        q.generation += 1;
        self.stats.controller_failovers += 1;
        self.stats.lost_proposals += (n - keep) as u64;
        self.trace(|| format!("quorum: controller@{old} replaced ({why}); {keep} of {n} uncommitted proposals survive"));
        self.start_election();
    }

    pub fn elect(&mut self, generation: u64) {
        if generation != self.quorum.generation || self.quorum.host.is_some() {
            return;
        }
        let candidates: Vec<i32> = (1..=self.cfg.voters)
            .filter(|&v| self.reaches_majority(v))
            .collect();
        let Some(h) = self.rng.pick(&candidates) else {
            self.after(200, Ev::Elect { generation });
            return;
        };
        let mut id_state = self.quorum.id_state;
        self.quorum.id_state = splitmix64(&mut id_state);
        let config = self.quorum.config.clone();
        let controller = Controller::with_id_generator(
            config,
            Box::new(move || {
                let hi = splitmix64(&mut id_state);
                let lo = splitmix64(&mut id_state);
                Uuid::from_u64_pair(hi, lo)
            }),
        );
        let q = &mut self.quorum;
        q.host = Some(h);
        q.generation += 1;
        q.electing = false;
        q.controller = Some(controller);
        q.activated = false;
        q.busy = false;
        self.trace(|| {
            format!(
                "quorum: broker {h} leads the quorum (generation {})",
                self.quorum.generation
            )
        });
        // The barrier: once it is committed the image holds every earlier entry.
        self.propose(Vec::new(), Purpose::Barrier);
        self.qtimer(CONTROLLER_TICK_MS as i64, QuorumTimer::Tick);
    }
}

/// How the controller fails an `AlterPartitions` request (a fault), with the answer it gives.
enum InternalError {
    /// Nothing was decided or committed.
    BeforeDeciding(ControllerResponse),
    /// The decision commits as usual; only the answer says it failed.
    AfterDeciding(ControllerResponse),
}
