//! The invariants, checked after every step (and the final ones after the cluster healed and
//! converged). Each failure names what broke; the world adds the seed and the step.
//!
//! After every step:
//! - **one leader per (partition, leader epoch)**: no two brokers — and no two incarnations of one
//!   broker — ever act as leader of the same leader epoch;
//! - **a replica's high watermark never decreases** while its process lives (truncating below it
//!   is only legal after an unclean election; a restart resumes from the checkpoint);
//! - **replicas are identical below their high watermarks**: every record below any replica's
//!   HW equals the one every other replica has there (one *committed* sequence per partition,
//!   compared incrementally, leader epoch and value);
//! - **no acknowledged acks=all write lost**: an acknowledged (offset, value) never disagrees
//!   with the committed sequence;
//! - **the HW never exceeds the ISR's durable log end**: for the leader the committed image
//!   names, and for every replica acting as leader against the ISR it knows, the HW is at most the
//!   durable log end of every ISR member (and of itself).
//!
//! After every committed metadata entry (the image every broker will apply):
//! - **leader epochs and partition epochs only rise**;
//! - **no fenced broker in an ISR**; the leader is active and in the ISR; ISR and ELR are
//!   disjoint.
//!
//! After healing, once converged: **metadata images converge** (every broker's image equals the
//! committed one), every replica's log equals the leader's, and every acknowledged write is in
//! the leader's log below its HW, at the offset its acknowledgement named.

use std::collections::BTreeMap;

use millrace_cluster::image::NO_LEADER;
use millrace_replication::ReplicaLog;

use crate::broker::TOPIC;
use crate::log::Record;
use crate::world::World;

/// What the checker remembers between steps.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    /// (partition, leader epoch) → (broker, incarnation) that acted as its leader.
    leaders: BTreeMap<(i32, i32), (i32, u64)>,
    /// (broker, partition) → (incarnation, high watermark last seen).
    hw_seen: BTreeMap<(i32, i32), (u64, i64)>,
    /// The committed records of each partition, from offset 0.
    committed: Vec<Vec<Record>>,
    /// (broker, partition) → offset below which its log was compared with `committed`.
    verified: BTreeMap<(i32, i32), i64>,
    /// Acknowledged writes: offset → value, per partition.
    acks: Vec<BTreeMap<i64, u64>>,
    /// Per partition: (leader epoch, partition epoch) in the committed image.
    image_epochs: BTreeMap<i32, (i32, i32)>,
}

impl Checker {
    pub fn new(partitions: i32) -> Self {
        let n = usize::try_from(partitions).unwrap_or(0);
        Self {
            committed: vec![Vec::new(); n],
            acks: vec![BTreeMap::new(); n],
            ..Self::default()
        }
    }

    /// A digest of what was committed and acknowledged.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        let mut mix = |x: u64| {
            h ^= x;
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        };
        for c in &self.committed {
            mix(c.len() as u64);
            for r in c {
                mix(r.value);
                mix(r.leader_epoch as u64);
            }
        }
        for a in &self.acks {
            for (o, v) in a {
                mix(*o as u64);
                mix(*v);
            }
        }
        h
    }

    pub fn acked(&self, p: i32) -> Option<&BTreeMap<i64, u64>> {
        self.acks.get(usize::try_from(p).ok()?)
    }
}

fn idx(p: i32) -> usize {
    usize::try_from(p).unwrap_or(usize::MAX)
}

impl World {
    /// The invariants after one step.
    pub fn check_step(&mut self) {
        if let Err(what) = self.check_replicas() {
            self.fail(what);
            return;
        }
        if let Err(what) = self.check_high_watermark_bound() {
            self.fail(what);
        }
    }

    fn check_replicas(&mut self) -> Result<(), String> {
        let checker = &mut self.checker;
        for (&id, b) in &self.brokers {
            if !b.alive {
                continue;
            }
            for (&p, h) in &b.hosted {
                let log = &h.partition.log;
                if let Some((leader, epoch)) = h.partition.replica().leader() {
                    if h.partition.is_leader() && leader == id {
                        let me = (id, b.incarnation);
                        let first = *checker.leaders.entry((p, epoch)).or_insert(me);
                        if first != me {
                            return Err(format!(
                                "two leaders of p{p} leader epoch {epoch}: broker {} (incarnation {}) and broker {id} (incarnation {})",
                                first.0, first.1, b.incarnation
                            ));
                        }
                    }
                }
                let hw = log.high_watermark();
                let leo = log.log_end_offset();
                if hw > leo || log.durable_end_offset() > leo {
                    return Err(format!(
                        "broker {id} p{p}: HW {hw} or durable end {} past the log end {leo}",
                        log.durable_end_offset()
                    ));
                }
                match checker.hw_seen.get(&(id, p)) {
                    Some(&(inc, before)) if inc == b.incarnation && hw < before => {
                        return Err(format!(
                            "broker {id} p{p}: high watermark went back from {before} to {hw} (log end {leo}, epochs {:?})",
                            log.epochs()
                        ));
                    }
                    _ => {}
                }
                checker.hw_seen.insert((id, p), (b.incarnation, hw));
                let verified = checker.verified.entry((id, p)).or_insert(0);
                if let Some(from) = log.take_rewritten_from() {
                    *verified = (*verified).min(from);
                }
                let from = (*verified).max(log.log_start_offset());
                let Some(committed) = checker.committed.get_mut(idx(p)) else {
                    continue;
                };
                for offset in from..hw {
                    let Some(rec) = log.record(offset) else {
                        return Err(format!(
                            "broker {id} p{p}: no record at {offset} below its HW {hw}"
                        ));
                    };
                    let at = usize::try_from(offset).unwrap_or(usize::MAX);
                    match committed.get(at) {
                        Some(c) if *c != rec => {
                            return Err(format!(
                                "replicas differ below the HW: broker {id} p{p} offset {offset} holds {rec:?}, committed is {c:?} (HW {hw})"
                            ));
                        }
                        Some(_) => {}
                        None if at == committed.len() => {
                            committed.push(rec);
                            if let Some(&v) = checker.acks.get(idx(p)).and_then(|a| a.get(&offset))
                            {
                                if v != rec.value {
                                    return Err(format!(
                                        "acknowledged write lost: p{p} offset {offset} was acknowledged with value {v}, committed is {rec:?} (broker {id})"
                                    ));
                                }
                            }
                        }
                        None => {}
                    }
                }
                *verified = (*verified).max(hw);
            }
        }
        Ok(())
    }

    fn durable_end(&self, broker: i32, p: i32) -> i64 {
        self.brokers
            .get(&broker)
            .and_then(|b| b.hosted.get(&p))
            .map_or(0, |h| h.partition.log.durable_end_offset())
    }

    fn check_high_watermark_bound(&self) -> Result<(), String> {
        // The leader the committed image names, against the committed ISR.
        if let Some(topic) = self.quorum.image.topic(TOPIC) {
            for (index, reg) in topic.partitions.iter().enumerate() {
                let p = i32::try_from(index).unwrap_or(i32::MAX);
                let Some(b) = self.brokers.get(&reg.leader).filter(|b| b.alive) else {
                    continue;
                };
                let Some(h) = b.hosted.get(&p) else {
                    continue;
                };
                if !h.partition.is_leader()
                    || h.partition.replica().leader().map(|(_, e)| e) != Some(reg.leader_epoch)
                {
                    continue;
                }
                let hw = h.partition.log.high_watermark();
                for &m in reg.isr.iter().chain(std::iter::once(&reg.leader)) {
                    let d = self.durable_end(m, p);
                    if hw > d {
                        return Err(format!(
                            "p{p}: leader {} HW {hw} exceeds the durable log end {d} of ISR member {m} (ISR {:?}, leader epoch {})",
                            reg.leader, reg.isr, reg.leader_epoch
                        ));
                    }
                }
            }
        }
        // Every replica acting as leader, against the ISR it knows.
        for (&id, b) in &self.brokers {
            if !b.alive {
                continue;
            }
            for (&p, h) in &b.hosted {
                let Some(isr) = h.partition.replica().isr() else {
                    continue;
                };
                let hw = h.partition.log.high_watermark();
                for &m in isr.iter().chain(std::iter::once(&id)) {
                    let d = self.durable_end(m, p);
                    if hw > d {
                        return Err(format!(
                            "p{p}: acting leader {id} HW {hw} exceeds the durable log end {d} of ISR member {m} (its ISR {isr:?})"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A producer received an acknowledgement.
    pub fn on_ack(&mut self, p: i32, offset: i64, value: u64) {
        let Some(acks) = self.checker.acks.get_mut(idx(p)) else {
            return;
        };
        if let Some(&v) = acks.get(&offset) {
            if v != value {
                self.fail(format!(
                    "p{p} offset {offset} acknowledged twice, with values {v} and {value}"
                ));
                return;
            }
        }
        acks.insert(offset, value);
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        if let Some(c) = self.checker.committed.get(idx(p)).and_then(|c| c.get(at)) {
            if c.value != value {
                let c = *c;
                self.fail(format!(
                    "acknowledged write lost: p{p} offset {offset} acknowledged with value {value}, committed is {c:?}"
                ));
            }
        }
    }

    /// The invariants of a newly committed metadata image.
    pub fn check_committed_image(&mut self, offset: u64) {
        let image = &self.quorum.image;
        let Some(topic) = image.topic(TOPIC) else {
            return;
        };
        let mut problem = None;
        let mut leader_changes = 0;
        for (index, reg) in topic.partitions.iter().enumerate() {
            let p = i32::try_from(index).unwrap_or(i32::MAX);
            let now = (reg.leader_epoch, reg.partition_epoch);
            if let Some(&before) = self.checker.image_epochs.get(&p) {
                if now.0 < before.0 || now.1 < before.1 {
                    problem = Some(format!(
                        "p{p}: (leader epoch, partition epoch) went from {before:?} to {now:?} at metadata offset {offset}"
                    ));
                }
                if now.0 > before.0 {
                    leader_changes += 1;
                }
            }
            self.checker.image_epochs.insert(p, now);
            for m in &reg.isr {
                if image.broker(*m).is_none_or(|r| r.fenced) {
                    problem = Some(format!(
                        "p{p}: fenced or unregistered broker {m} in the ISR {:?} at metadata offset {offset}",
                        reg.isr
                    ));
                }
            }
            if reg.leader != NO_LEADER
                && (!reg.isr.contains(&reg.leader) || !image.is_active(reg.leader))
            {
                problem = Some(format!(
                    "p{p}: leader {} is inactive or outside the ISR {:?} at metadata offset {offset}",
                    reg.leader, reg.isr
                ));
            }
            if reg.elr.iter().any(|b| reg.isr.contains(b)) {
                problem = Some(format!(
                    "p{p}: ISR {:?} and ELR {:?} overlap at metadata offset {offset}",
                    reg.isr, reg.elr
                ));
            }
        }
        self.stats.leader_changes += leader_changes;
        if let Some(what) = problem {
            self.fail(what);
        }
    }

    /// Whether the healed cluster has converged; the reason when not.
    pub fn converged(&mut self) -> Result<(), String> {
        if !self.quorum.is_active() || !self.quorum.idle() {
            return Err("no active, idle controller".into());
        }
        if !self.admin.topic_created {
            return Err("the topic was never created".into());
        }
        let committed = self.quorum.log.len() as u64;
        for b in self.brokers.values() {
            if !b.running() || b.shutting_down {
                return Err(format!("broker {} is not running", b.id));
            }
            if !b.is_current() || b.registration.is_none_or(|r| r.fenced) {
                return Err(format!("broker {} is not registered and unfenced", b.id));
            }
            if b.image.offset != committed || b.image != self.quorum.image {
                return Err(format!(
                    "broker {}'s image (offset {}) differs from the committed one (offset {committed})",
                    b.id, b.image.offset
                ));
            }
        }
        if let Some(pr) = self.producers.values().find(|p| !p.idle()) {
            return Err(format!("a producer still waits for an answer: {pr:?}"));
        }
        let Some(topic) = self.quorum.image.topic(TOPIC).cloned() else {
            return Err("no topic in the image".into());
        };
        let mut offline = 0;
        for (index, reg) in topic.partitions.iter().enumerate() {
            let p = i32::try_from(index).unwrap_or(i32::MAX);
            if reg.leader == NO_LEADER {
                if self.cfg.unclean_restarts && reg.isr.is_empty() && reg.elr.is_empty() {
                    // KIP-966: every replica that held the committed records restarted
                    // uncleanly; the partition stays offline until an unclean election.
                    offline += 1;
                    continue;
                }
                return Err(format!("p{p} has no leader: {reg:?}"));
            }
            let mut isr = reg.isr.clone();
            let mut replicas = reg.replicas.clone();
            isr.sort_unstable();
            replicas.sort_unstable();
            if isr != replicas {
                return Err(format!(
                    "p{p}: ISR {:?} is not every replica {:?}",
                    reg.isr, reg.replicas
                ));
            }
            let Some(lh) = self.brokers.get(&reg.leader).and_then(|b| b.hosted.get(&p)) else {
                return Err(format!("p{p}: leader {} does not host it", reg.leader));
            };
            if !lh.partition.is_leader()
                || lh.partition.replica().leader().map(|(_, e)| e) != Some(reg.leader_epoch)
            {
                return Err(format!(
                    "p{p}: broker {} does not act as leader yet",
                    reg.leader
                ));
            }
            let leo = lh.partition.log.log_end_offset();
            for r in &reg.replicas {
                let Some(h) = self.brokers.get(r).and_then(|b| b.hosted.get(&p)) else {
                    return Err(format!("p{p}: replica {r} does not host it"));
                };
                let log = &h.partition.log;
                if log.log_end_offset() != leo || log.high_watermark() != leo {
                    return Err(format!(
                        "p{p}: replica {r} log end {} HW {} vs leader log end {leo}",
                        log.log_end_offset(),
                        log.high_watermark()
                    ));
                }
            }
        }
        self.stats.offline_partitions_at_end = offline;
        Ok(())
    }

    /// After convergence: equal logs, every acknowledged write present.
    pub fn final_checks(&mut self) {
        let Some(topic) = self.quorum.image.topic(TOPIC).cloned() else {
            return;
        };
        for (index, reg) in topic.partitions.iter().enumerate() {
            let p = i32::try_from(index).unwrap_or(i32::MAX);
            if reg.leader == NO_LEADER {
                continue;
            }
            let Some(lh) = self.brokers.get(&reg.leader).and_then(|b| b.hosted.get(&p)) else {
                continue;
            };
            let (leader_start, leader_records) = lh.partition.log.snapshot();
            let hw = lh.partition.log.high_watermark();
            for r in &reg.replicas {
                let Some((start, records)) = self
                    .brokers
                    .get(r)
                    .and_then(|b| b.hosted.get(&p))
                    .map(|h| h.partition.log.snapshot())
                else {
                    continue;
                };
                // Compare where both still hold records (retention may have moved either start).
                let from = start.max(leader_start);
                let tail = |s: i64, recs: &[Record]| -> Vec<Record> {
                    recs.iter()
                        .skip(usize::try_from(from - s).unwrap_or(0))
                        .copied()
                        .collect()
                };
                if tail(start, &records) != tail(leader_start, &leader_records) {
                    self.fail(format!(
                        "p{p}: replica {r}'s log differs from leader {}'s after convergence",
                        reg.leader
                    ));
                    return;
                }
            }
            // Records below the leader's log start were deleted on purpose, not lost.
            let lost = self.checker.acked(p).and_then(|acks| {
                acks.range(leader_start..)
                    .find(|(o, v)| {
                        **o >= hw || lh.partition.log.record(**o).map(|r| r.value) != Some(**v)
                    })
                    .map(|(o, v)| (*o, *v))
            });
            if let Some((o, v)) = lost {
                let found = lh.partition.log.record(o);
                self.fail(format!(
                    "acknowledged write lost: p{p} offset {o} acknowledged with value {v}; after healing the leader has {found:?} (HW {hw})"
                ));
                return;
            }
        }
    }
}
