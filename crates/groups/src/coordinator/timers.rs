//! The coordinator's timers: member session expiry and rebalance deadlines of classic and KIP-848
//! consumer groups, session expiry of KIP-932 share group members, offset expiry (offsets.retention.minutes, every
//! [`EXPIRY_CHECK_INTERVAL_MS`]) and the periodic sled snapshot (every [`SNAPSHOT_INTERVAL_MS`]).
//!
//! [`GroupCoordinator::run_timers`] ticks every `TIMER_TICK_MS` until told to stop;
//! [`GroupCoordinator::tick`] takes each loaded shard's lock in turn. Nobody waits for the records a
//! tick writes: consumer member removals that do not commit get their groups written again, and
//! expiry tombstones that do not commit are written again by a later pass.
//!
//! Not here: the group state machines the deadlines step (`group.rs`, `consumer_group.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::classic::log_transition;
use super::encode::{encode_group_records, group_tombstones};
use super::shard::Shard;
use super::{now_ms, GroupCoordinator};
use crate::consumer_group::ConsumerGroup;
use crate::group::GroupState;
use crate::limits::TIMER_TICK_MS;
use crate::records::{self, RecordKey};

/// How often Empty groups are checked for expired offsets (Kafka's
/// offsets.retention.check.interval.ms is 600 s; a shorter period costs little here).
const EXPIRY_CHECK_INTERVAL_MS: i64 = 60_000;

/// How often changed shards are written to the sled snapshot.
const SNAPSHOT_INTERVAL_MS: i64 = 60_000;

impl GroupCoordinator {
    /// One timer pass: session expiry, rebalance deadlines, and (when `expire`) offset expiry.
    pub fn tick(&self, expire: bool) {
        let now = now_ms();
        for shard in &self.shards {
            let mut shard = shard.lock();
            if shard.leadership.loaded().is_none() {
                continue;
            }
            let mut removals = Vec::new();
            let mut removed_from = Vec::new();
            let mut share_removed_from = Vec::new();
            for (id, entry) in shard.groups.iter_mut() {
                if let Some(share) = entry.share.as_mut() {
                    if share.next_deadline_ms().is_some_and(|d| d <= now) {
                        for member in share.tick(now) {
                            info!(group = %id, member = %member, group_epoch = share.group_epoch(), "share group member removed (session timeout)");
                        }
                        let records = share.take_records();
                        if !records.is_empty() {
                            share_removed_from.push(id.clone());
                            removals.extend(encode_group_records(records));
                        }
                    }
                    continue;
                }
                let Some(consumer) = entry.consumer.as_mut() else {
                    continue;
                };
                if consumer.next_deadline_ms().is_some_and(|d| d <= now) {
                    for member in consumer.tick(now) {
                        info!(group = %id, member = %member, group_epoch = consumer.group_epoch(), "consumer group member removed (session or rebalance timeout)");
                    }
                    let records = consumer.take_records();
                    if !records.is_empty() {
                        removed_from.push(id.clone());
                        removals.extend(encode_group_records(records));
                    }
                }
            }
            // Nobody waits for these. If they cannot be appended or do not commit, the groups are
            // written whole with their next records (a new coordinator would otherwise find the
            // removed members still owning partitions that others now hold).
            if !removals.is_empty() {
                let load_id = shard.load_id().unwrap_or(0);
                match self.append(&mut shard, &removals) {
                    Ok(committed) => {
                        let me = self.me.clone();
                        tokio::spawn(async move {
                            if committed.await.is_err() {
                                if let Some(c) = me.upgrade() {
                                    for id in &removed_from {
                                        c.consumer_records_not_durable(id, load_id);
                                    }
                                    for id in &share_removed_from {
                                        c.share_records_not_durable(id, load_id);
                                    }
                                }
                            }
                        });
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot write group member removals");
                        for id in &removed_from {
                            if let Some(c) =
                                shard.groups.get_mut(id).and_then(|e| e.consumer.as_mut())
                            {
                                c.mark_all_dirty();
                            }
                        }
                        for id in &share_removed_from {
                            if let Some(s) = shard.groups.get_mut(id).and_then(|e| e.share.as_mut())
                            {
                                s.mark_all_dirty();
                            }
                        }
                    }
                }
            }
            let due: Vec<String> = shard
                .groups
                .iter()
                .filter(|(_, e)| e.group.next_deadline_ms().is_some_and(|d| d <= now))
                .map(|(id, _)| id.clone())
                .collect();
            let mut deliveries = Vec::new();
            for id in due {
                let effects = match shard.groups.get_mut(&id) {
                    Some(e) => {
                        let before = (e.group.state(), e.group.generation());
                        let effects = e.group.tick(now);
                        log_transition(&e.group, before);
                        effects
                    }
                    None => continue,
                };
                deliveries.push(self.apply_effects(&mut shard, &id, effects));
            }
            if expire {
                self.expire_offsets(&mut shard, now);
            }
            drop(shard);
            for d in deliveries {
                d.send();
            }
        }
    }

    /// Removes expired offsets of Empty groups, and Empty groups left with no offsets.
    fn expire_offsets(&self, shard: &mut Shard, now: i64) {
        let retention = self.config.offsets_retention_ms;
        let mut tombstones = Vec::new();
        let mut dead = Vec::new();
        for (id, entry) in shard.groups.iter_mut() {
            // Share groups have no committed offsets and do not expire.
            if entry.active_consumer().is_some() || entry.share.is_some() {
                continue;
            }
            let empty_since = entry.consumer.as_ref().map(ConsumerGroup::empty_since_ms);
            let g = &mut entry.group;
            for tp in g.expired_offsets_since(now, retention, empty_since) {
                g.offsets.remove(&tp);
                tombstones.push((
                    records::encode_key(&RecordKey::Offset {
                        group: id.clone(),
                        topic: tp.0,
                        partition: tp.1,
                    }),
                    None,
                ));
            }
            if g.state() == GroupState::Empty && g.offsets.is_empty() && g.is_empty() {
                tombstones.extend(group_tombstones(g, false));
                if let Some(c) = &entry.consumer {
                    tombstones.extend(encode_group_records(c.tombstones()));
                }
                dead.push(id.clone());
            }
        }
        for id in &dead {
            shard.groups.remove(id);
        }
        if !tombstones.is_empty() {
            info!(
                partition = shard.partition,
                records = tombstones.len(),
                groups_removed = dead.len(),
                "expired offsets"
            );
            // Nobody waits for these: tombstones that are refused or do not commit are written
            // again by the first expiry pass after the next load, as the offsets are still expired.
            if let Err(e) = self.append(shard, &tombstones) {
                warn!(error = %e, "cannot write offset expiry tombstones");
            }
        }
    }

    /// Runs the timers until `stop` resolves.
    pub async fn run_timers(self: Arc<Self>, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let mut last_expiry = now_ms();
        let mut last_snapshot = now_ms();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(Duration::from_millis(TIMER_TICK_MS)) => {}
            }
            let now = now_ms();
            let expire = now - last_expiry >= EXPIRY_CHECK_INTERVAL_MS;
            if expire {
                last_expiry = now;
            }
            self.tick(expire);
            if now - last_snapshot >= SNAPSHOT_INTERVAL_MS {
                last_snapshot = now;
                let me = self.clone();
                let _ = tokio::task::spawn_blocking(move || me.write_snapshots(false)).await;
            }
        }
    }
}
