//! The world: every node, the network, the clock and the event queue, and the loop that runs one
//! seed. One event is one step; the invariants are checked after every step
//! ([`crate::check`]).
//!
//! Determinism: time is a number moved only by the queue; events at the same time run in the
//! order they were scheduled (a sequence number breaks ties); every random draw comes from the
//! seeded [`Rng`]; every collection iterated is ordered (`BTreeMap`, `Vec`).
//!
//! Paused processes (SIGSTOP): events addressed to a paused broker (messages, its timers, and the
//! active controller's timers when it lives there) wait in its `deferred` list and run, in order,
//! when it resumes. Crashed processes: their events are dropped (a timer or message names the
//! incarnation it was meant for).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

use crate::broker::{Broker, BrokerTimer};
use crate::check::Checker;
use crate::client::{Admin, AdminTimer, Producer, ProducerTimer};
use crate::config::SimConfig;
use crate::faults::Fault;
use crate::limits::{PRODUCER_NODE_BASE, STEPS_MAX};
use crate::net::{Body, Message, Net};
use crate::quorum::{Quorum, QuorumTimer};
use crate::rng::Rng;

/// Something that happens at a point in time.
#[derive(Debug)]
pub(crate) enum Ev {
    Deliver(Message),
    Broker {
        id: i32,
        incarnation: u64,
        timer: BrokerTimer,
    },
    Producer {
        partition: i32,
        timer: ProducerTimer,
    },
    Admin(AdminTimer),
    Quorum {
        generation: u64,
        timer: QuorumTimer,
    },
    QuorumCheck,
    Elect {
        generation: u64,
    },
    Fault(Fault),
    EndFaults,
    DrainCheck,
}

impl Ev {
    fn tag(&self) -> u64 {
        match self {
            Ev::Deliver(_) => 1,
            Ev::Broker { .. } => 2,
            Ev::Producer { .. } => 3,
            Ev::Admin(_) => 4,
            Ev::Quorum { .. } => 5,
            Ev::QuorumCheck => 6,
            Ev::Elect { .. } => 7,
            Ev::Fault(_) => 8,
            Ev::EndFaults => 9,
            Ev::DrainCheck => 10,
        }
    }
}

struct Scheduled {
    at: i64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Faults,
    /// Everything healed; waiting for the cluster to converge, until the deadline.
    Draining {
        deadline_ms: i64,
    },
    Done,
}

/// Figures of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub steps: u64,
    pub sim_ms: i64,
    pub crashes: u64,
    pub power_losses: u64,
    pub records_lost_to_power_loss: i64,
    pub pauses: u64,
    pub long_pauses: u64,
    pub partitions: u64,
    pub controller_failovers: u64,
    pub lost_proposals: u64,
    pub leader_kills: u64,
    pub controlled_shutdowns: u64,
    pub preferred_elections: u64,
    /// Log dirs failed (some replicas of a broker offline until it restarts).
    pub dir_failures: u64,
    pub deletions: u64,
    pub metadata_entries: u64,
    /// Decisions committed as a metadata transaction of several entries.
    pub metadata_transactions: u64,
    /// Failovers whose surviving proposals ended inside such a transaction.
    pub decisions_cut: u64,
    /// Transactions left open that a new controller aborted.
    pub transactions_aborted: u64,
    /// `AlterPartitions` requests the controller answered with an internal error (a fault).
    pub alter_partition_internal_errors: u64,
    pub leader_changes: u64,
    pub produce_requests: u64,
    pub produce_refused: u64,
    pub acked_records: u64,
    pub divergence_truncations: u64,
    pub log_resets: u64,
    pub messages: u64,
    pub messages_dropped: u64,
    pub offline_partitions_at_end: u64,
}

impl Stats {
    pub fn faults(&self) -> u64 {
        self.crashes
            + self.pauses
            + self.partitions
            + self.controller_failovers
            + self.leader_kills
            + self.controlled_shutdowns
            + self.preferred_elections
            + self.dir_failures
            + self.deletions
    }

    pub fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.sim_ms += o.sim_ms;
        self.crashes += o.crashes;
        self.power_losses += o.power_losses;
        self.records_lost_to_power_loss += o.records_lost_to_power_loss;
        self.pauses += o.pauses;
        self.long_pauses += o.long_pauses;
        self.partitions += o.partitions;
        self.controller_failovers += o.controller_failovers;
        self.lost_proposals += o.lost_proposals;
        self.leader_kills += o.leader_kills;
        self.controlled_shutdowns += o.controlled_shutdowns;
        self.preferred_elections += o.preferred_elections;
        self.dir_failures += o.dir_failures;
        self.deletions += o.deletions;
        self.metadata_entries += o.metadata_entries;
        self.metadata_transactions += o.metadata_transactions;
        self.decisions_cut += o.decisions_cut;
        self.transactions_aborted += o.transactions_aborted;
        self.alter_partition_internal_errors += o.alter_partition_internal_errors;
        self.leader_changes += o.leader_changes;
        self.produce_requests += o.produce_requests;
        self.produce_refused += o.produce_refused;
        self.acked_records += o.acked_records;
        self.divergence_truncations += o.divergence_truncations;
        self.log_resets += o.log_resets;
        self.messages += o.messages;
        self.messages_dropped += o.messages_dropped;
        self.offline_partitions_at_end += o.offline_partitions_at_end;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} steps, {} s simulated, {} faults ({} crashes of which {} power losses losing {} \
             unsynced records, {} pauses of which {} past the session timeout, {} partitions, {} \
             controller failovers losing {} proposals, {} leader kills, {} controlled shutdowns, {} \
             preferred elections, {} log dir failures, {} record deletions), {} metadata entries ({} transactions, {} \
             cut by a failover, {} aborted), {} AlterPartitions answered with an internal error, \
             {} leader changes, {} \
             divergence truncations, {} out-of-range log restarts, {} produce requests ({} \
             refused), {} records acknowledged, {} messages ({} dropped), {} partitions offline at \
             the end",
            self.steps,
            self.sim_ms / 1000,
            self.faults(),
            self.crashes,
            self.power_losses,
            self.records_lost_to_power_loss,
            self.pauses,
            self.long_pauses,
            self.partitions,
            self.controller_failovers,
            self.lost_proposals,
            self.leader_kills,
            self.controlled_shutdowns,
            self.preferred_elections,
            self.dir_failures,
            self.deletions,
            self.metadata_entries,
            self.metadata_transactions,
            self.decisions_cut,
            self.transactions_aborted,
            self.alter_partition_internal_errors,
            self.leader_changes,
            self.divergence_truncations,
            self.log_resets,
            self.produce_requests,
            self.produce_refused,
            self.acked_records,
            self.messages,
            self.messages_dropped,
            self.offline_partitions_at_end,
        )
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub seed: u64,
    /// The deliberately broken setting the run had, if any.
    pub broken: Option<crate::config::Broken>,
    pub step: u64,
    pub now_ms: i64,
    pub what: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} failed at step {} (t={} ms): {}",
            self.seed, self.step, self.now_ms, self.what
        )?;
        match self.broken {
            None => write!(
                f,
                "\n  rerun with a trace: MILLRACE_SIM_SEED={} cargo test -p millrace-sim --test sim -- --nocapture",
                self.seed
            ),
            Some(b) => write!(
                f,
                "\n  (broken on purpose: {b:?}; rerun with millrace_sim::run(SimConfig::broken({}, Broken::{b:?}), true))",
                self.seed
            ),
        }
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seed: u64,
    pub stats: Stats,
    /// A digest of everything that happened: equal digests, equal runs.
    pub digest: u64,
    pub failure: Option<Failure>,
}

/// The simulated world of one seed.
pub(crate) struct World {
    pub cfg: SimConfig,
    pub rng: Rng,
    pub now: i64,
    pub step: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    pub brokers: BTreeMap<i32, Broker>,
    pub quorum: Quorum,
    pub producers: BTreeMap<i32, Producer>,
    pub admin: Admin,
    pub net: Net,
    pub checker: Checker,
    pub stats: Stats,
    pub phase: Phase,
    pub tracing: bool,
    pub failure: Option<String>,
    pub next_value: u64,
    digest: u64,
}

/// FNV-1a over 64-bit words.
fn mix(h: u64, x: u64) -> u64 {
    let mut h = h;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

impl World {
    pub fn new(cfg: SimConfig, tracing: bool) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let quorum = Quorum::new(&cfg, &mut rng);
        let brokers = (1..=cfg.brokers).map(|id| (id, Broker::new(id))).collect();
        let producers = (0..cfg.partitions)
            .map(|p| (p, Producer::new(PRODUCER_NODE_BASE + p, p)))
            .collect();
        let checker = Checker::new(cfg.partitions);
        Self {
            cfg,
            rng,
            now: 0,
            step: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            brokers,
            quorum,
            producers,
            admin: Admin::default(),
            net: Net::default(),
            checker,
            stats: Stats::default(),
            phase: Phase::Faults,
            tracing,
            failure: None,
            next_value: 1,
            digest: 0xCBF2_9CE4_8422_2325,
        }
    }

    /// Prints one trace line when tracing (the closure runs only then).
    pub fn trace(&self, line: impl FnOnce() -> String) {
        if self.tracing {
            eprintln!("{:>7} {:>7}ms  {}", self.step, self.now, line());
        }
    }

    /// Records a failed invariant (the first one wins) and stops the run after this step.
    pub fn fail(&mut self, what: String) {
        if self.failure.is_none() {
            self.trace(|| format!("FAILED: {what}"));
            self.failure = Some(what);
        }
    }

    pub fn schedule(&mut self, at: i64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        }));
    }

    pub fn after(&mut self, delay_ms: i64, ev: Ev) {
        self.schedule(self.now.saturating_add(delay_ms.max(0)), ev);
    }

    /// The incarnation of a node (clients never restart: 0).
    pub fn incarnation(&self, node: i32) -> u64 {
        self.brokers.get(&node).map_or(0, |b| b.incarnation)
    }

    /// Sends a message (lost at random; cut links are checked at delivery).
    pub fn send(&mut self, from: i32, to: i32, body: Body) {
        self.stats.messages += 1;
        let local = from == to;
        if !local && self.rng.chance(self.cfg.loss_per_mille) {
            self.stats.messages_dropped += 1;
            self.trace(|| format!("net: {} {from}->{to} lost", body.kind()));
            return;
        }
        let delay = self.net.delay(
            &mut self.rng,
            self.cfg.link_delay_ms,
            self.cfg.jitter_ms,
            from,
            to,
        );
        let msg = Message {
            from,
            to,
            from_incarnation: self.incarnation(from),
            to_incarnation: self.incarnation(to),
            body,
        };
        self.after(delay, Ev::Deliver(msg));
    }

    /// Runs until done, a failed invariant, or the step bound.
    pub fn run(mut self) -> Outcome {
        self.start();
        while self.phase != Phase::Done && self.failure.is_none() {
            let Some(Reverse(next)) = self.queue.pop() else {
                self.fail("the event queue ran dry".into());
                break;
            };
            self.now = next.at;
            self.step += 1;
            self.digest = mix(
                mix(mix(self.digest, self.step), self.now as u64),
                next.ev.tag(),
            );
            if self.step > STEPS_MAX {
                self.fail(format!("more than {STEPS_MAX} steps: a livelock"));
                break;
            }
            self.dispatch(next.ev);
            if self.failure.is_none() {
                self.check_step();
            }
        }
        self.stats.steps = self.step;
        self.stats.sim_ms = self.now;
        self.digest = mix(self.digest, self.checker.digest());
        Outcome {
            seed: self.cfg.seed,
            stats: self.stats.clone(),
            digest: self.digest,
            failure: self.failure.take().map(|what| Failure {
                seed: self.cfg.seed,
                broken: self.cfg.broken,
                step: self.step,
                now_ms: self.now,
                what,
            }),
        }
    }

    fn start(&mut self) {
        self.trace(|| format!("config: {:?}", self.cfg));
        let ids: Vec<i32> = self.brokers.keys().copied().collect();
        for id in ids {
            self.start_broker(id);
        }
        self.after(0, Ev::QuorumCheck);
        self.after(50, Ev::Admin(AdminTimer::CreateTopic));
        let first = self.rng.exp_ms(self.cfg.fault_mean_interval_ms) + 2_000;
        self.after(first, Ev::Fault(Fault::Next));
        self.after(self.cfg.fault_phase_ms, Ev::EndFaults);
    }

    /// Whether events for broker `id` must wait (it is paused).
    fn paused(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|b| b.alive && b.paused)
    }

    fn defer(&mut self, id: i32, ev: Ev) {
        if let Some(b) = self.brokers.get_mut(&id) {
            b.deferred.push(ev);
        }
    }

    /// Runs the events a paused broker missed, in order.
    pub fn release_deferred(&mut self, id: i32) {
        let deferred = match self.brokers.get_mut(&id) {
            Some(b) => std::mem::take(&mut b.deferred),
            None => return,
        };
        for ev in deferred {
            self.after(0, ev);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver(msg) => {
                if !self.net.link_up(msg.from, msg.to) {
                    self.stats.messages_dropped += 1;
                    self.trace(|| format!("net: {} {}->{} cut", msg.body.kind(), msg.from, msg.to));
                    return;
                }
                if self.paused(msg.to) {
                    let to = msg.to;
                    self.defer(to, Ev::Deliver(msg));
                    return;
                }
                if msg.to_incarnation != self.incarnation(msg.to) || !self.node_alive(msg.to) {
                    self.stats.messages_dropped += 1;
                    return;
                }
                self.deliver(msg);
            }
            Ev::Broker {
                id,
                incarnation,
                timer,
            } => {
                let Some(b) = self.brokers.get(&id) else {
                    return;
                };
                if !b.alive || b.incarnation != incarnation {
                    return;
                }
                if b.paused {
                    self.defer(
                        id,
                        Ev::Broker {
                            id,
                            incarnation,
                            timer,
                        },
                    );
                    return;
                }
                self.broker_timer(id, timer);
            }
            Ev::Producer { partition, timer } => self.producer_timer(partition, timer),
            Ev::Admin(timer) => self.admin_timer(timer),
            Ev::Quorum { generation, timer } => {
                if generation != self.quorum.generation {
                    return;
                }
                if let Some(h) = self.quorum.host {
                    if self.paused(h) {
                        self.defer(h, Ev::Quorum { generation, timer });
                        return;
                    }
                }
                self.quorum_timer(timer);
            }
            Ev::QuorumCheck => self.quorum_check(),
            Ev::Elect { generation } => self.elect(generation),
            Ev::Fault(f) => self.fault(f),
            Ev::EndFaults => self.end_faults(),
            Ev::DrainCheck => self.drain_check(),
        }
    }

    fn node_alive(&self, node: i32) -> bool {
        match self.brokers.get(&node) {
            Some(b) => b.alive,
            None => true,
        }
    }

    fn deliver(&mut self, msg: Message) {
        let Message {
            from,
            to,
            from_incarnation,
            body,
            ..
        } = msg;
        if to >= PRODUCER_NODE_BASE {
            self.client_message(to, from, body);
            return;
        }
        match body {
            Body::ControllerRequest { req_id, req } => {
                self.controller_request(to, from, from_incarnation, req_id, req)
            }
            Body::ControllerResponse { req_id, resp } => {
                self.broker_controller_response(to, req_id, resp)
            }
            Body::Fetch(req) => self.leader_fetch(to, from, from_incarnation, req, true),
            Body::FetchResponse(resp) => self.follower_fetch_response(to, from, resp),
            Body::Produce {
                req_id,
                partition,
                values,
            } => self.leader_produce(to, from, req_id, partition, values),
            Body::MetadataRequest { req_id } => self.broker_metadata_request(to, from, req_id),
            Body::ProduceResponse { .. } | Body::MetadataResponse { .. } => {}
        }
    }

    /// A fresh value no other record has.
    pub fn new_value(&mut self) -> u64 {
        let v = self.next_value;
        self.next_value += 1;
        v
    }
}
