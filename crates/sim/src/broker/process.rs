//! A simulated broker process starting on its disk and stopping: a crash (`kill -9` or a power
//! loss, through the disk's crash model) or the end of a controlled shutdown.

use millrace_cluster::image::MetadataImage;
use millrace_replication::ReplicaLog;
use uuid::Uuid;

use crate::limits::{HW_CHECKPOINT_MS, REPLICA_TICK_MS};
use crate::world::World;

use super::*;

impl World {
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
        b.offline.clear();
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
}
