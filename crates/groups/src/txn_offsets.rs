//! Transactional offset commits (TxnOffsetCommit, `sendOffsetsToTransaction`): offsets written to
//! `__consumer_offsets` inside a producer's transaction, in a transactional batch under the
//! producer's id and epoch, pending until the transaction's marker reaches that partition. A
//! COMMIT marker makes them the group's committed offsets, an ABORT marker drops them (Kafka's
//! `GroupMetadata.pendingTransactionalOffsetCommits`).
//!
//! Rules: pending offsets are never answered by OffsetFetch (a `require_stable` fetch of a
//! partition with one gets UNSTABLE_OFFSET_COMMIT); on COMMIT a pending offset replaces the
//! committed one only if its record is newer than the last non-transactional commit of that
//! partition (record offsets compare, as in Kafka); pending offsets are rebuilt by the replay from
//! the transactional batches and markers in the log. One per shard, guarded by the shard lock.

use std::collections::{BTreeMap, HashMap};

use crate::records::OffsetValue;

/// (group, topic, partition).
pub(crate) type OffsetKey = (String, String, i32);

/// The pending transactional offsets of one `__consumer_offsets` partition.
#[derive(Debug, Clone, Default)]
pub(crate) struct TxnOffsets {
    /// Per producer id: per key, the record offset and the value.
    pending: BTreeMap<i64, BTreeMap<OffsetKey, (i64, OffsetValue)>>,
    /// Record offset of the latest non-transactional commit of each key (while any transaction is
    /// pending; cleared when none is).
    plain: HashMap<OffsetKey, i64>,
}

impl TxnOffsets {
    /// Producer `producer_id` wrote `value` for `key` at `record_offset` inside its transaction.
    pub(crate) fn add_pending(
        &mut self,
        producer_id: i64,
        key: OffsetKey,
        record_offset: i64,
        value: OffsetValue,
    ) {
        self.pending
            .entry(producer_id)
            .or_default()
            .insert(key, (record_offset, value));
    }

    /// A non-transactional commit of `key` at `record_offset`.
    pub(crate) fn note_plain(&mut self, key: OffsetKey, record_offset: i64) {
        if !self.pending.is_empty() {
            self.plain.insert(key, record_offset);
        }
    }

    /// Whether any transaction has pending offsets here.
    pub(crate) fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a pending offset exists for `group`'s `topic`/`partition`.
    pub(crate) fn is_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        let key = (group.to_string(), topic.to_string(), partition);
        self.pending
            .values()
            .any(|offsets| offsets.contains_key(&key))
    }

    /// Producer `producer_id`'s marker: on commit, the offsets that become committed.
    pub(crate) fn complete(
        &mut self,
        producer_id: i64,
        commit: bool,
    ) -> Vec<(OffsetKey, OffsetValue)> {
        let Some(offsets) = self.pending.remove(&producer_id) else {
            return Vec::new();
        };
        let applied = if commit {
            offsets
                .into_iter()
                .filter(|(key, (record_offset, _))| {
                    self.plain
                        .get(key)
                        .is_none_or(|plain| plain < record_offset)
                })
                .map(|(key, (_, value))| (key, value))
                .collect()
        } else {
            Vec::new()
        };
        if self.pending.is_empty() {
            self.plain.clear();
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(offset: i64) -> OffsetValue {
        OffsetValue {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
            expire_timestamp_ms: -1,
        }
    }

    fn key(p: i32) -> OffsetKey {
        ("g".into(), "t".into(), p)
    }

    #[test]
    fn commit_applies_abort_drops_and_newer_plain_commits_win() {
        let mut t = TxnOffsets::default();
        t.add_pending(7, key(0), 10, value(100));
        t.add_pending(7, key(1), 11, value(200));
        t.add_pending(8, key(0), 12, value(300));
        assert!(t.is_pending("g", "t", 0) && !t.is_pending("g", "t", 2));
        t.note_plain(key(1), 13); // newer than producer 7's record for partition 1
        let applied = t.complete(7, true);
        assert_eq!(applied, vec![(key(0), value(100))]);
        assert!(t.is_pending("g", "t", 0), "producer 8 still pending");
        assert!(t.complete(8, false).is_empty());
        assert!(!t.any_pending());
        assert!(t.complete(9, true).is_empty(), "unknown producer");
    }
}
