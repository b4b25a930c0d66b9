//! Writing the sled snapshot ([`crate::snapshot`]) of the partitions loaded here: which shards
//! (those that changed since their last snapshot, or all of them at clean shutdown), when (after a
//! load that replayed records, every `SNAPSHOT_INTERVAL_MS` from the timers, at shutdown), and a
//! shard's state as records ([`materialize`]).
//!
//! Invariant: the snapshot only shortens replay; the log stays the source of truth. A shard with
//! transactional offsets pending is not written (a replay from it would miss them), and neither is
//! one whose batch mark cannot be read from the log.
//!
//! Locking: a shard's lock is held while its state is materialized, never while reading the log
//! or writing sled. Reading the snapshot back is in `replay.rs`, called by the loader.

use millrace_store::PartitionLog;
use tracing::debug;

use super::encode::encode_group_records;
use super::shard::Shard;
use super::GroupCoordinator;
use crate::records::{self, RecordKey};
use crate::replay;
use crate::snapshot::PartitionSnapshot;

impl GroupCoordinator {
    /// Writes every loaded shard that changed (or all, with `all`) to the sled snapshot.
    pub(super) fn write_snapshots(&self, all: bool) {
        if self.snapshot_store().is_none() {
            return;
        }
        for p in 0..self.partition_count() {
            self.write_snapshot(p, all);
        }
        if let Some(store) = self.snapshot_store() {
            store.flush();
        }
    }

    /// Writes one loaded shard's snapshot if it changed (or always, with `always`). The batch mark
    /// is read from the log without the shard lock: the batch below the snapshot's offset does not
    /// change while this broker leads, and a wrong mark only makes the snapshot unusable.
    pub(super) fn write_snapshot(&self, partition: i32, always: bool) {
        let Some(store) = self.snapshot_store() else {
            return;
        };
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return;
        };
        let (mut snap, log) = {
            let mut shard = shard.lock();
            let Some(led) = shard.leadership.loaded().cloned() else {
                return;
            };
            if !(always || shard.dirty) {
                return;
            }
            if shard.txn.any_pending() {
                // The snapshot holds no pending offsets: a replay from it would miss records
                // that a later COMMIT marker makes committed. Written once none is pending.
                shard.dirty = true;
                return;
            }
            shard.dirty = false;
            (materialize(&shard, &led.log), led.log)
        };
        snap.last_batch = replay::batch_mark_before(&log, snap.next_offset);
        if snap.next_offset > 0 && snap.last_batch.is_none() {
            debug!(
                partition,
                next_offset = snap.next_offset,
                "no batch mark for the snapshot; not written"
            );
            return;
        }
        store.write(partition, &snap);
    }
}

/// The shard's latest value per key, as records, with the log offset they reflect (the batch mark
/// is left for the caller to read from the log).
fn materialize(shard: &Shard, log: &PartitionLog) -> PartitionSnapshot {
    let mut entries = Vec::new();
    for (id, entry) in &shard.groups {
        let g = &entry.group;
        if g.protocol_type().is_some() || g.generation() > 0 {
            entries.push((
                records::encode_key(&RecordKey::Group { group: id.clone() }),
                records::encode_group_value(&g.metadata_value()),
            ));
        }
        for ((topic, partition), o) in &g.offsets {
            entries.push((
                records::encode_key(&RecordKey::Offset {
                    group: id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                records::encode_offset_value(o),
            ));
        }
        if let Some(c) = &entry.consumer {
            entries.extend(
                encode_group_records(c.all_records())
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v))),
            );
        }
        if let Some(s) = &entry.share {
            entries.extend(
                encode_group_records(s.all_records())
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v))),
            );
        }
    }
    PartitionSnapshot {
        next_offset: log.log_end_offset(),
        last_batch: None,
        entries,
    }
}
