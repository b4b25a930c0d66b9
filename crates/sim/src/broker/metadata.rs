//! A simulated broker catching up on committed metadata (with its own delay, while it can reach the
//! active controller) and handing each hosted partition its state through the replication driver.

use millrace_replication::PartitionState;

use crate::config::Broken;
use crate::limits::METADATA_RETRY_MS;
use crate::log::SimLog;
use crate::world::World;

use super::*;

impl World {
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

    pub(crate) fn catch_up_metadata(&mut self, id: i32) {
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
    pub(crate) fn on_image(&mut self, id: i32) {
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
}
