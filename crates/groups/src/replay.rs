//! Replay of one `__consumer_offsets` partition into groups: what a new leader of the partition
//! does before it serves the partition's groups (Kafka's coordinator load).
//!
//! Where it sits: the coordinator's loader threads call [`replay`] with the partition's log and
//! the sled snapshot, without holding any lock, and install the result only if the leadership it
//! was started for is still current.
//!
//! Invariants:
//! - the replay reads up to the log end offset it saw when it started (a leader's log is the
//!   truth: records above the high watermark are its own and will be committed or stay with it);
//! - a snapshot is used only if [`snapshot_matches`] the log; otherwise the replay starts at the
//!   log start offset, so a stale or foreign snapshot costs time, never data;
//! - a replay that cannot reach that log end (read error, a batch that does not validate) fails as
//!   a whole: serving a partial state would silently move committed offsets backwards.
//!
//! Not here: locking, leadership, the snapshot's storage (`snapshot.rs`).

use std::collections::BTreeMap;

use bytes::Bytes;
use millrace_store::batch_walk::{BatchWalk, Validation, WalkChecks};
use millrace_store::records::{self as store_records, Record};
use millrace_store::{PartitionLog, ReadUpperBound};
use tracing::{debug, warn};

use crate::consumer_group::{ConsumerGroup, ConsumerGroupConfig, ConsumerGroupRecords};
use crate::group::{Group, GroupConfig};
use crate::limits::{MARK_READ_BYTES, RECORD_BYTES_MAX, REPLAY_READ_BYTES};
use crate::records::{self, RecordKey, RecordValue};
use crate::share_group::{ShareGroup, ShareGroupConfig, ShareGroupRecords};
use crate::snapshot::{BatchMark, PartitionSnapshot};
use crate::txn_offsets::TxnOffsets;

/// What a replay produced.
#[derive(Debug)]
pub(crate) struct Replayed {
    pub groups: BTreeMap<String, Group>,
    /// KIP-848 consumer groups, by group id (their offsets are in `groups`).
    pub consumer_groups: BTreeMap<String, ConsumerGroup>,
    /// KIP-932 share groups, by group id.
    pub share_groups: BTreeMap<String, ShareGroup>,
    /// Offsets of transactions with no marker yet.
    pub txn: TxnOffsets,
    /// Records applied from the log (not counting the snapshot's).
    pub records: usize,
    /// Whether the replay started from the snapshot.
    pub from_snapshot: bool,
    /// The log end offset the replay read up to.
    pub log_end_offset: i64,
}

/// Why a replay did not produce a state to serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReplayError {
    /// The log could not be read at `offset`.
    #[error("cannot read __consumer_offsets at offset {offset}: {reason}")]
    Read { offset: i64, reason: String },
    /// The log holds no valid batch at `offset`, below its log end.
    #[error("no valid batch at offset {offset} of __consumer_offsets: {reason}")]
    Unreadable { offset: i64, reason: String },
    /// The leadership the replay was for ended (or changed) meanwhile.
    #[error("the load was superseded")]
    Superseded,
}

/// The broker settings each kind of group is rebuilt with.
pub(crate) struct ReplayConfigs<'a> {
    pub group: &'a GroupConfig,
    pub consumer: &'a ConsumerGroupConfig,
    pub share: &'a ShareGroupConfig,
}

/// The records replayed so far: classic groups (with every group's offsets) as they stand, and
/// the records of consumer and share groups, built into groups once the replay ends.
#[derive(Default)]
struct Replaying {
    groups: BTreeMap<String, Group>,
    consumers: BTreeMap<String, ConsumerGroupRecords>,
    shares: BTreeMap<String, ShareGroupRecords>,
}

/// Replays `log` (after `snapshot`, if it matches the log) into groups. `superseded` is asked
/// between reads; once it says yes the replay stops with [`ReplayError::Superseded`].
pub(crate) fn replay(
    partition: i32,
    log: &PartitionLog,
    snapshot: Option<PartitionSnapshot>,
    configs: &ReplayConfigs<'_>,
    now_ms: i64,
    superseded: &dyn Fn() -> bool,
) -> Result<Replayed, ReplayError> {
    let config = configs.group;
    let log_start = log.log_start_offset();
    let log_end = log.log_end_offset();
    let mut replaying = Replaying::default();
    let mut from = log_start;
    let mut from_snapshot = false;
    if let Some(snap) = snapshot {
        if snapshot_matches(&snap, log) {
            for (k, v) in &snap.entries {
                apply_record(partition, &mut replaying, k, Some(v), config, now_ms);
            }
            from = snap.next_offset;
            from_snapshot = true;
        } else {
            debug!(
                partition,
                snapshot = snap.next_offset,
                log_start,
                log_end,
                "snapshot does not match the log; full replay"
            );
        }
    }
    let mut records = 0usize;
    let mut txn = TxnOffsets::default();
    while from < log_end {
        if superseded() {
            return Err(ReplayError::Superseded);
        }
        let read = log
            .read(from, REPLAY_READ_BYTES, ReadUpperBound::LogEnd, true)
            .map_err(|e| ReplayError::Read {
                offset: from,
                reason: e.to_string(),
            })?;
        let (raw, next, errors) = decode_batches(&read.records);
        for e in &errors {
            warn!(partition, error = %e, "skipping unreadable records in __consumer_offsets");
        }
        for item in raw {
            let r = match item {
                Item::Marker {
                    offset,
                    producer_id,
                    commit,
                } => {
                    if offset >= from && offset < log_end {
                        for ((group, topic, p), value) in txn.complete(producer_id, commit) {
                            replaying
                                .groups
                                .entry(group.clone())
                                .or_insert_with(|| Group::new(&group, config, now_ms))
                                .offsets
                                .insert((topic, p), value);
                        }
                    }
                    continue;
                }
                Item::Record {
                    record,
                    producer_id,
                } => {
                    if let Some(producer_id) = producer_id {
                        if record.offset >= from && record.offset < log_end {
                            pend(&mut txn, producer_id, &record);
                        }
                        continue;
                    }
                    record
                }
            };
            if r.offset < from || r.offset >= log_end {
                continue;
            }
            if let Some(key) = &r.key {
                if let Ok(Some(RecordKey::Offset {
                    group,
                    topic,
                    partition: p,
                })) = records::decode_key(key)
                {
                    txn.note_plain((group, topic, p), r.offset);
                }
                apply_record(
                    partition,
                    &mut replaying,
                    key,
                    r.value.as_ref(),
                    config,
                    now_ms,
                );
                records += 1;
            }
        }
        match next {
            Some(n) if n > from => from = n,
            _ => {
                return Err(ReplayError::Unreadable {
                    offset: from,
                    reason: if errors.is_empty() {
                        "the read returned no batch".to_string()
                    } else {
                        errors.join("; ")
                    },
                })
            }
        }
    }
    let Replaying {
        mut groups,
        consumers,
        shares,
    } = replaying;
    let consumer_groups: BTreeMap<String, ConsumerGroup> = consumers
        .into_iter()
        .filter_map(|(id, records)| {
            records
                .build(&id, configs.consumer, now_ms)
                .map(|g| (id, g))
        })
        .collect();
    let share_groups: BTreeMap<String, ShareGroup> = shares
        .into_iter()
        .filter_map(|(id, records)| records.build(&id, configs.share, now_ms).map(|g| (id, g)))
        .collect();
    // Groups that replay left with nothing in them are not groups.
    groups.retain(|id, g: &mut Group| {
        !(g.is_empty()
            && g.offsets.is_empty()
            && g.protocol_type().is_none()
            && !consumer_groups.contains_key(id)
            && !share_groups.contains_key(id))
    });
    Ok(Replayed {
        groups,
        consumer_groups,
        share_groups,
        txn,
        records,
        from_snapshot,
        log_end_offset: log_end,
    })
}

/// Whether `snap` describes a prefix of `log`: its offset lies within the log, and the batch that
/// ends just below it is the one the snapshot saw (same [`BatchMark`]).
pub(crate) fn snapshot_matches(snap: &PartitionSnapshot, log: &PartitionLog) -> bool {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    if snap.next_offset < start || snap.next_offset > end {
        return false;
    }
    if snap.next_offset == 0 {
        return snap.last_batch.is_none() && snap.entries.is_empty();
    }
    match snap.last_batch {
        Some(mark) => batch_mark_before(log, snap.next_offset) == Some(mark),
        None => false,
    }
}

/// The mark of the batch of `log` whose last offset is `next_offset - 1`, if there is one.
pub(crate) fn batch_mark_before(log: &PartitionLog, next_offset: i64) -> Option<BatchMark> {
    let last = next_offset.checked_sub(1).filter(|l| *l >= 0)?;
    let read = log
        .read(last, MARK_READ_BYTES, ReadUpperBound::LogEnd, true)
        .ok()?;
    let h = millrace_store::batch::validate_stored(&read.records).ok()?;
    (h.base_offset <= last && h.last_offset() == last).then_some(BatchMark {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        crc: h.crc,
    })
}

/// Applies one record (key, value or tombstone) to `groups`; undecodable records are skipped with
/// a warning, as they cannot belong to any group this coordinator serves.
fn apply_record(
    partition: i32,
    replaying: &mut Replaying,
    key: &[u8],
    value: Option<&Bytes>,
    config: &GroupConfig,
    now_ms: i64,
) {
    let key = match records::decode_key(key) {
        Ok(Some(k)) => k,
        Ok(None) => return,
        Err(e) => {
            warn!(partition, error = %e, "skipping undecodable key");
            return;
        }
    };
    let value = match value {
        None => None,
        Some(v) => match records::decode_value(&key, v) {
            Ok(v) => Some(v),
            Err(e) => {
                warn!(partition, error = %e, "skipping undecodable value");
                return;
            }
        },
    };
    match (key, value) {
        (
            RecordKey::Offset {
                group,
                topic,
                partition: p,
            },
            value,
        ) => {
            let g = replaying
                .groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group, config, now_ms));
            match value {
                Some(RecordValue::Offset(o)) => {
                    g.offsets.insert((topic, p), o);
                }
                _ => {
                    g.offsets.remove(&(topic, p));
                }
            }
        }
        (RecordKey::Group { group }, Some(RecordValue::Group(v))) => {
            let g = replaying
                .groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group, config, now_ms));
            g.restore(v, now_ms);
        }
        (
            key @ (RecordKey::ConsumerGroup { .. }
            | RecordKey::ConsumerMember { .. }
            | RecordKey::ConsumerTargetEpoch { .. }
            | RecordKey::ConsumerTarget { .. }
            | RecordKey::ConsumerCurrent { .. }),
            value,
        ) => {
            replaying
                .consumers
                .entry(key.group().to_string())
                .or_default()
                .apply(&key, value);
        }
        (
            key @ (RecordKey::ShareGroup { .. }
            | RecordKey::ShareMember { .. }
            | RecordKey::ShareTargetEpoch { .. }
            | RecordKey::ShareTarget { .. }
            | RecordKey::ShareCurrent { .. }
            | RecordKey::ShareStatePartitions { .. }),
            value,
        ) => {
            replaying
                .shares
                .entry(key.group().to_string())
                .or_default()
                .apply(&key, value);
        }
        (RecordKey::Group { group }, _) => {
            if let Some(old) = replaying.groups.remove(&group) {
                if !old.offsets.is_empty() {
                    let mut fresh = Group::new(&group, config, now_ms);
                    fresh.offsets = old.offsets;
                    replaying.groups.insert(group, fresh);
                }
            }
        }
    }
}

/// What a replay reads from a batch.
enum Item {
    /// A data record; `producer_id` set for a transactional batch's (TxnOffsetCommit).
    Record {
        record: Record,
        producer_id: Option<i64>,
    },
    /// A transaction marker.
    Marker {
        offset: i64,
        producer_id: i64,
        commit: bool,
    },
}

/// A transactional offset commit record: pending for its producer.
fn pend(txn: &mut TxnOffsets, producer_id: i64, r: &Record) {
    let Some(key) = &r.key else {
        return;
    };
    let Ok(Some(key @ RecordKey::Offset { .. })) = records::decode_key(key) else {
        return;
    };
    let Some(value) = &r.value else {
        return;
    };
    let Ok(RecordValue::Offset(value)) = records::decode_value(&key, value) else {
        return;
    };
    if let RecordKey::Offset {
        group,
        topic,
        partition,
    } = key
    {
        txn.add_pending(producer_id, (group, topic, partition), r.offset, value);
    }
}

/// The records and markers in `bytes` (whole batches, as a log read returns them), the offset
/// after the last batch read (`None` if none), and why anything was skipped. Stops at the first
/// batch that does not validate.
fn decode_batches(bytes: &[u8]) -> (Vec<Item>, Option<i64>, Vec<String>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut next = None;
    let checks = WalkChecks {
        validation: Validation::Stored,
        batch_bytes_max: None,
    };
    let mut walk = BatchWalk::new(bytes, checks);
    while let Some(walked) = walk.next() {
        let (h, batch) = match walked {
            Ok(w) => (w.header, w.bytes),
            Err(e) => {
                errors.push(format!("batch at byte {}: {e}", walk.position()));
                break;
            }
        };
        next = Some(h.next_offset());
        if h.is_control() {
            if let Some(m) = millrace_store::parse_marker(batch, &h) {
                out.push(Item::Marker {
                    offset: h.base_offset,
                    producer_id: h.producer_id,
                    commit: m.commit,
                });
            }
        } else {
            let producer_id = h.is_transactional().then_some(h.producer_id);
            match store_records::decode_records(batch) {
                Ok((_, recs)) => out.extend(
                    recs.into_iter()
                        .filter(|r| {
                            let fits = |b: &Option<Bytes>| {
                                b.as_ref().is_none_or(|b| b.len() <= RECORD_BYTES_MAX)
                            };
                            fits(&r.key) && fits(&r.value)
                        })
                        .map(|record| Item::Record {
                            record,
                            producer_id,
                        }),
                ),
                Err(e) => errors.push(format!("batch at offset {}: {e}", h.base_offset)),
            }
        }
    }
    (out, next, errors)
}
