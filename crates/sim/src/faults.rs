//! Fault injection, from the seed: crashes (`kill -9` or power loss, then a restart on the same
//! disk), pauses (SIGSTOP, some longer than the session timeout), network partitions (one broker
//! isolated, a one-way cut, a split of the brokers in two, a producer cut from a broker),
//! controller failovers, leader kills (sometimes back to back: the new leader is killed before
//! it settles), controlled shutdowns, preferred-leader elections and record deletion on a leader
//! (retention / DeleteRecords, which sends lagging followers down the out-of-range path). At the end of the fault
//! phase everything heals: cuts are lifted, paused brokers resume, crashed ones restart, the
//! producers stop; then the cluster must converge.

use millrace_replication::ReplicaLog;

use crate::limits::{ADMIN_NODE, DRAIN_CHECK_MS, DRAIN_MAX_MS, PRODUCER_NODE_BASE};
use crate::world::{Ev, Phase, World};

/// A scheduled fault event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Inject the next random fault.
    Next,
    Restart {
        broker: i32,
    },
    Resume {
        broker: i32,
    },
    Heal {
        cut: u64,
    },
    /// Kill the current leader of a partition; `chain` more kills of its successors follow.
    LeaderKill {
        partition: i32,
        chain: u32,
    },
    /// The operator replaced the failed disk of that incarnation of the broker: a restart.
    DiskReplaced {
        broker: i32,
        incarnation: u64,
    },
}

impl World {
    fn running_brokers(&self) -> Vec<i32> {
        self.brokers
            .values()
            .filter(|b| b.running() && !b.shutting_down)
            .map(|b| b.id)
            .collect()
    }

    /// Brokers that are down, paused or on their way down.
    fn impaired(&self) -> usize {
        self.brokers
            .values()
            .filter(|b| !b.running() || b.shutting_down)
            .count()
    }

    /// Whether one more broker may go down: never the last one running, and a second (or third)
    /// at a time only now and then, so that runs see double failures and lost quorums without
    /// spending most of their time in them.
    fn may_impair(&mut self) -> bool {
        let impaired = self.impaired();
        impaired + 1 < self.brokers.len() && (impaired == 0 || self.rng.chance(250))
    }

    pub fn fault(&mut self, f: Fault) {
        match f {
            Fault::Next => {
                if self.phase != Phase::Faults {
                    return;
                }
                self.inject();
                let next = self.rng.exp_ms(self.cfg.fault_mean_interval_ms);
                self.after(next, Ev::Fault(Fault::Next));
            }
            Fault::Restart { broker } => {
                if self.brokers.get(&broker).is_some_and(|b| !b.alive) {
                    self.start_broker(broker);
                }
            }
            Fault::Resume { broker } => self.resume(broker),
            Fault::DiskReplaced {
                broker,
                incarnation,
            } => {
                let same = self
                    .brokers
                    .get(&broker)
                    .is_some_and(|b| b.alive && b.incarnation == incarnation);
                if same {
                    self.trace(|| format!("fault: broker {broker} restarts on its replaced disk"));
                    self.crash(broker, false);
                }
            }
            Fault::Heal { cut } => {
                self.net.heal(cut);
                self.trace(|| format!("net: cut {cut} healed"));
            }
            Fault::LeaderKill { partition, chain } => {
                if self.phase != Phase::Faults {
                    return;
                }
                let leader = self
                    .quorum
                    .image
                    .partition(crate::broker::TOPIC, partition)
                    .map_or(-1, |r| r.leader);
                if leader >= 0 && self.running_brokers().contains(&leader) && self.may_impair() {
                    self.stats.leader_kills += 1;
                    self.trace(|| format!("fault: kill leader {leader} of p{partition}"));
                    self.crash(leader, true);
                }
                if chain > 0 {
                    let delay = self.rng.range(50, 1_500);
                    self.after(
                        delay,
                        Ev::Fault(Fault::LeaderKill {
                            partition,
                            chain: chain - 1,
                        }),
                    );
                }
            }
        }
    }

    fn crash(&mut self, id: i32, power_loss: bool) {
        self.stats.crashes += 1;
        if power_loss {
            self.stats.power_losses += 1;
        }
        self.stop_broker(id, Some(power_loss));
        if let Some(b) = self.brokers.get_mut(&id) {
            b.restart_scheduled = true;
        }
        let down = self.rng.range(200, 8_000);
        self.after(down, Ev::Fault(Fault::Restart { broker: id }));
    }

    fn resume(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if !b.alive || !b.paused {
            return;
        }
        b.paused = false;
        self.trace(|| format!("fault: broker {id} resumed"));
        self.release_deferred(id);
    }

    fn inject(&mut self) {
        let running = self.running_brokers();
        let kind = self.rng.below(100);
        match kind {
            // Crash: kill -9 or power loss, restart later on the same disk.
            0..=19 => {
                if !self.may_impair() {
                    return;
                }
                let Some(id) = self.rng.pick(&running) else {
                    return;
                };
                let power_loss = self.rng.chance(600);
                self.trace(|| format!("fault: crash broker {id} (power loss: {power_loss})"));
                self.crash(id, power_loss);
            }
            // Pause (SIGSTOP), half of them past the session timeout.
            20..=34 => {
                if !self.may_impair() {
                    return;
                }
                let Some(id) = self.rng.pick(&running) else {
                    return;
                };
                let session = self.cfg.session_timeout_ms;
                let long = self.rng.chance(500);
                let ms = if long {
                    self.rng.range(session + 500, session * 2)
                } else {
                    self.rng.range(100, 3_000)
                };
                self.stats.pauses += 1;
                if long {
                    self.stats.long_pauses += 1;
                }
                if let Some(b) = self.brokers.get_mut(&id) {
                    b.paused = true;
                }
                self.trace(|| format!("fault: pause broker {id} for {ms} ms"));
                self.after(ms, Ev::Fault(Fault::Resume { broker: id }));
            }
            // Network partitions.
            35..=54 => self.partition_network(),
            // Controller failover.
            55..=64 => {
                if self.quorum.host.is_some() {
                    self.fail_over("forced resignation");
                }
            }
            // Leader kill, sometimes back to back.
            65..=74 => {
                let p =
                    i32::try_from(self.rng.below(self.cfg.partitions.max(1) as u64)).unwrap_or(0);
                let chain = if self.rng.chance(500) {
                    u32::try_from(self.rng.range(1, 2)).unwrap_or(1)
                } else {
                    0
                };
                self.fault(Fault::LeaderKill {
                    partition: p,
                    chain,
                });
            }
            // Controlled shutdown.
            75..=84 => {
                if !self.may_impair() {
                    return;
                }
                let registered: Vec<i32> = running
                    .iter()
                    .copied()
                    .filter(|id| {
                        self.brokers
                            .get(id)
                            .is_some_and(|b| b.registration.is_some_and(|r| !r.fenced))
                    })
                    .collect();
                let Some(id) = self.rng.pick(&registered) else {
                    return;
                };
                self.stats.controlled_shutdowns += 1;
                self.begin_controlled_shutdown(id);
            }
            // Retention / DeleteRecords on a leader, up to a point at or below its HW.
            90..=99 => {
                let p =
                    i32::try_from(self.rng.below(self.cfg.partitions.max(1) as u64)).unwrap_or(0);
                let leader = self
                    .quorum
                    .image
                    .partition(crate::broker::TOPIC, p)
                    .map_or(-1, |r| r.leader);
                let Some(h) = self
                    .brokers
                    .get(&leader)
                    .filter(|b| b.running())
                    .and_then(|b| b.hosted.get(&p))
                else {
                    return;
                };
                let log = &h.partition.log;
                let (start, hw) = (log.log_start_offset(), log.high_watermark());
                let target = self.rng.range(start, hw);
                let new_start = log.delete_records_before(target);
                self.stats.deletions += 1;
                self.trace(|| {
                    format!("fault: delete records of p{p} below {new_start} on leader {leader}")
                });
            }
            // A log dir fails: one or two replicas of a broker go offline until it restarts.
            85..=86 => self.fail_log_dir(&running),
            // Preferred-leader election (87..=89).
            _ => {
                self.stats.preferred_elections += 1;
                self.trace(|| "fault: preferred leader election".to_string());
                self.admin_preferred_election();
            }
        }
    }

    /// Some replicas of a running broker land on a failed log dir: they take no writes and leave
    /// the ISR (the controller's rule, driven by the heartbeat) until the broker restarts, which
    /// an operator does after a while (`DiskReplaced`).
    fn fail_log_dir(&mut self, running: &[i32]) {
        if !self.may_impair() {
            return;
        }
        let Some(id) = self.rng.pick(running) else {
            return;
        };
        let hosted: Vec<i32> = self
            .brokers
            .get(&id)
            .map(|b| b.hosted.keys().copied().collect())
            .unwrap_or_default();
        let mut failed = Vec::new();
        for _ in 0..self.rng.range(1, 2) {
            if let Some(p) = self.rng.pick(&hosted) {
                failed.push(p);
            }
        }
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if failed.is_empty() {
            return;
        }
        b.offline.extend(failed.iter().copied());
        let incarnation = b.incarnation;
        self.stats.dir_failures += 1;
        self.trace(|| format!("fault: a log dir of broker {id} fails: p{failed:?} offline"));
        self.schedule_heartbeat(id, 0);
        let replaced = self.rng.range(1_000, 8_000);
        self.after(
            replaced,
            Ev::Fault(Fault::DiskReplaced {
                broker: id,
                incarnation,
            }),
        );
    }

    fn partition_network(&mut self) {
        let brokers: Vec<i32> = self.brokers.keys().copied().collect();
        let mut nodes = brokers.clone();
        nodes.extend((0..self.cfg.partitions).map(|p| PRODUCER_NODE_BASE + p));
        nodes.push(ADMIN_NODE);
        let mut links = Vec::new();
        let what = match self.rng.below(4) {
            0 => {
                let Some(b) = self.rng.pick(&brokers) else {
                    return;
                };
                for &n in &nodes {
                    if n != b {
                        links.push((b, n));
                        links.push((n, b));
                    }
                }
                format!("isolate broker {b}")
            }
            1 => {
                let (Some(a), Some(b)) = (self.rng.pick(&brokers), self.rng.pick(&brokers)) else {
                    return;
                };
                if a == b {
                    return;
                }
                links.push((a, b));
                format!("one-way cut {a} -> {b}")
            }
            2 => {
                let side: Vec<i32> = brokers
                    .iter()
                    .copied()
                    .filter(|_| self.rng.chance(500))
                    .collect();
                if side.is_empty() || side.len() == brokers.len() {
                    return;
                }
                for &a in &side {
                    for &b in &brokers {
                        if !side.contains(&b) {
                            links.push((a, b));
                            links.push((b, a));
                        }
                    }
                }
                format!("split {side:?} from the rest")
            }
            _ => {
                let p =
                    i32::try_from(self.rng.below(self.cfg.partitions.max(1) as u64)).unwrap_or(0);
                let Some(b) = self.rng.pick(&brokers) else {
                    return;
                };
                let c = PRODUCER_NODE_BASE + p;
                links.push((c, b));
                links.push((b, c));
                format!("cut producer p{p} from broker {b}")
            }
        };
        self.stats.partitions += 1;
        let cut = self.net.cut(links);
        let ms = self.rng.range(300, 10_000);
        self.trace(|| format!("fault: {what} for {ms} ms (cut {cut})"));
        self.after(ms, Ev::Fault(Fault::Heal { cut }));
    }

    /// The end of the fault phase: heal everything, stop producing, wait for convergence.
    pub fn end_faults(&mut self) {
        self.phase = Phase::Draining {
            deadline_ms: self.now + DRAIN_MAX_MS,
        };
        self.trace(|| "faults over: healing".to_string());
        self.net.heal_all();
        self.stop_producers();
        let ids: Vec<i32> = self.brokers.keys().copied().collect();
        // A failed log dir is replaced: its broker restarts (after resuming, if paused).
        for &id in &ids {
            let failed_dir = self
                .brokers
                .get(&id)
                .is_some_and(|b| b.alive && !b.offline.is_empty());
            if failed_dir {
                self.resume(id);
                self.stop_broker(id, Some(false));
            }
        }
        for id in ids {
            let (alive, paused) = match self.brokers.get(&id) {
                Some(b) => (b.alive, b.paused),
                None => continue,
            };
            if alive && paused {
                self.resume(id);
            } else if !alive {
                self.start_broker(id);
            }
        }
        self.after(DRAIN_CHECK_MS, Ev::DrainCheck);
    }

    pub fn drain_check(&mut self) {
        let Phase::Draining { deadline_ms } = self.phase else {
            return;
        };
        match self.converged() {
            Ok(()) => {
                self.final_checks();
                self.phase = Phase::Done;
            }
            Err(why) if self.now >= deadline_ms => {
                self.fail(format!(
                    "no convergence {DRAIN_MAX_MS} ms after healing: {why}"
                ));
            }
            Err(_) => self.after(DRAIN_CHECK_MS, Ev::DrainCheck),
        }
    }
}
