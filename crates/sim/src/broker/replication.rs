//! The simulated broker as the replication driver's executor: carries out the driver's actions
//! (ISR proposals, `acks=all` answers), runs the group-commit flush, sends the fetches the driver's
//! `LeaderFetcher` decides and applies their answers with `apply_answer`, and serves followers'
//! fetches as a leader (holding an empty one up to `FETCH_MAX_WAIT_MS`, woken by an append).

use std::collections::BTreeMap;

use millrace_replication::driver::acks::AckError;
use millrace_replication::driver::fetch::{
    apply_answer, FetchAnswer, FetchStep, Followed, LeaderFetcher,
};
use millrace_replication::{Action, FollowerFetchDecision, ReplicaLog};

use crate::config::Broken;
use crate::limits::{FETCH_MAX_WAIT_MS, FETCH_RECORDS_MAX, FETCH_TIMEOUT_MS};
use crate::net::{
    Body, FetchPartition, FetchRequest, FetchResponse, FetchResult, PartitionErrorCode,
};
use crate::world::World;

use super::*;

impl World {
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

    pub(crate) fn schedule_flush(&mut self, id: i32) {
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
    pub(crate) fn flush(&mut self, id: i32) {
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
        let offline = &b.offline;
        let followed: Vec<Followed<i32>> = b
            .hosted
            .iter()
            .filter(|(p, _)| !offline.contains(p))
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
    pub(crate) fn wake_parked(&mut self, id: i32, p: i32) {
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
            if b.offline.contains(&fp.partition) {
                continue;
            }
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
}
