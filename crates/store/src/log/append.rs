//! Appending: the leader append (validate every record, idempotent producer checks, assign
//! offsets) and the one write path every append goes through once its offsets are decided
//! (`write_batches`: roll if needed, one `pwrite`, index, producer state, leader-epoch cache,
//! flush policy). A follower append (replication) validates the leader's batches and calls
//! `write_batches` with the leader's offsets unchanged.
//!
//! Size rule: a batch larger than the topic's `max.message.bytes` or than `BATCH_BYTES_MAX` (the
//! largest batch recovery reads back) is refused with `MessageTooLarge`, so every batch that
//! reaches a segment is one that recovery accepts.

use bytes::BytesMut;

use super::{now_ms, AppendInfo, LogInner, PartitionLog};
use crate::batch::{self, BatchError, BatchHeader};
use crate::batch_walk::{BatchWalk, Validation, WalkChecks, WalkError, WalkedBatch};
use crate::config::{FlushPolicy, LogConfig, TimestampType};
use crate::control;
use crate::error::{AppendError, StoreError};
use crate::limits::{
    BATCHES_PER_APPEND_MAX, BATCH_BYTES_MAX, SEGMENT_BYTES_MAX, SEGMENT_RELATIVE_OFFSET_MAX,
};
use crate::producer_state::{Check, Staged};
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::validator::{self, RecordRules, TimestampWindow};

fn batch_error(e: BatchError) -> AppendError {
    match e {
        BatchError::BadMagic(_) | BatchError::BadCount(_) => {
            AppendError::InvalidRecord(e.to_string())
        }
        _ => AppendError::CorruptMessage(e.to_string()),
    }
}

/// The largest batch (bytes, with its 12-byte prefix) an append accepts for a topic.
pub(crate) fn batch_bytes_max(config: &LogConfig) -> usize {
    usize::try_from(config.max_message_bytes)
        .unwrap_or(usize::MAX)
        .min(BATCH_BYTES_MAX)
}

/// The topic's per-record rules at `now`.
fn record_rules(config: &LogConfig, now: i64) -> RecordRules {
    RecordRules {
        require_keys: config.cleanup_policy.compact,
        timestamps: (config.message_timestamp_type == TimestampType::CreateTime).then_some(
            TimestampWindow {
                now_ms: now,
                before_max_ms: config.message_timestamp_before_max_ms,
                after_max_ms: config.message_timestamp_after_max_ms,
            },
        ),
    }
}

/// Walks the batches of one append with `checks` → (position, header) of each, `each` giving
/// the header kept for a batch; a batch over `checks.batch_bytes_max` is `MessageTooLarge`, one
/// that fails validation goes through `invalid`, and more than `BATCHES_PER_APPEND_MAX` batches
/// are refused.
pub(super) fn walk_append(
    records: &[u8],
    checks: WalkChecks,
    invalid: fn(BatchError) -> AppendError,
    mut each: impl FnMut(&WalkedBatch<'_>) -> Result<BatchHeader, AppendError>,
) -> Result<Vec<(usize, BatchHeader)>, AppendError> {
    let mut batches: Vec<(usize, BatchHeader)> = Vec::new();
    for walked in BatchWalk::new(records, checks) {
        let walked = walked.map_err(|e| match e {
            WalkError::TooLarge { size, max } => AppendError::MessageTooLarge { size, max },
            WalkError::Invalid(e) => invalid(e),
        })?;
        batches.push((walked.position, each(&walked)?));
        if batches.len() > BATCHES_PER_APPEND_MAX {
            return Err(AppendError::InvalidRecord(format!(
                "more than {BATCHES_PER_APPEND_MAX} batches in one append"
            )));
        }
    }
    Ok(batches)
}

/// Validates every batch of a client's `records`: structure, CRC and size (`batch::validate`),
/// then every record (`validator`) → (position, header) of each, the header's maxTimestamp being
/// the largest record timestamp.
fn validate_batches(
    records: &[u8],
    config: &LogConfig,
    now: i64,
) -> Result<Vec<(usize, BatchHeader)>, AppendError> {
    let rules = record_rules(config, now);
    let checks = WalkChecks {
        validation: Validation::Client,
        // The size check comes first: a batch too large to accept must never be read whole.
        batch_bytes_max: Some(batch_bytes_max(config)),
    };
    let batches = walk_append(records, checks, batch_error, |walked| {
        let mut h = walked.header;
        h.max_timestamp = validator::check_client_batch(walked.bytes, &h, &rules)?.max_timestamp;
        Ok(h)
    })?;
    if batches.is_empty() {
        return Err(AppendError::InvalidRecord("no record batch".into()));
    }
    Ok(batches)
}

impl PartitionLog {
    /// `Err(StoreError::DiskFull)` when the file system holding this partition's log dir has
    /// less than `min_free` bytes free (`millrace.log.dir.min.free.bytes`; 0: no check). Asked
    /// by the produce path before a client append; replication and the coordinators' own appends
    /// do not ask, so they go on until the disk is really full.
    pub fn check_free_space(&self, min_free: u64) -> Result<(), StoreError> {
        let dir = self.dir();
        let log_dir = dir.parent().unwrap_or(&dir);
        crate::free_space::check(log_dir, min_free)
    }

    /// Appends one or more v2 batches as the partition's leader; see `API.md`.
    ///
    /// `records` is validated where it lies and copied only once it passed: a refused batch (a
    /// decompression bomb, say) costs no second buffer.
    pub fn append(
        &self,
        records: impl AsRef<[u8]>,
        leader_epoch: i32,
    ) -> Result<AppendInfo, AppendError> {
        self.writable()?;
        let config = self.config();
        let ts_type = config.message_timestamp_type;
        let now = now_ms();
        let mut batches = validate_batches(records.as_ref(), &config, now)?;
        // The store patches offsets, epochs and timestamps into its own copy.
        let mut records = BytesMut::from(records.as_ref());
        let mut inner = self.inner.lock();
        self.writable()?;

        // Producer checks; each batch of a request against the state the earlier ones leave.
        let mut staged = Staged::default();
        let mut duplicates = Vec::new();
        for (_, h) in &batches {
            let check = if batches.len() > 1 {
                inner.producers.check_staged(h, &mut staged)?
            } else {
                inner.producers.check(h)?
            };
            if let Check::Duplicate(meta) = check {
                duplicates.push(meta);
            }
        }
        if let (Some(first), Some(last)) = (duplicates.first(), duplicates.last()) {
            if duplicates.len() != batches.len() {
                return Err(AppendError::OutOfOrderSequence(
                    "duplicate batch mixed with new batches in one request".into(),
                ));
            }
            return Ok(AppendInfo {
                base_offset: first.first_offset,
                last_offset: last.last_offset,
                log_append_time_ms: if ts_type == TimestampType::LogAppendTime {
                    first.timestamp
                } else {
                    -1
                },
                log_start_offset: self.offsets.log_start(),
                duplicate: true,
            });
        }

        // Assign offsets: patch baseOffset and partitionLeaderEpoch (outside the CRC).
        let base_offset = inner.log_end_offset;
        let mut next = base_offset;
        for (pos, h) in batches.iter_mut() {
            let b = records
                .get_mut(*pos..*pos + h.total_size())
                .unwrap_or(&mut []);
            batch::set_base_offset(b, next);
            batch::set_partition_leader_epoch(b, leader_epoch);
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            if ts_type == TimestampType::LogAppendTime {
                batch::set_log_append_time(b, now);
                h.max_timestamp = now;
                h.attributes |= batch::ATTR_LOG_APPEND_TIME;
            } else {
                batch::set_create_time(b, h.max_timestamp);
                h.attributes &= !batch::ATTR_LOG_APPEND_TIME;
            }
            next = h.next_offset();
        }
        let queue = self.write_batches(&mut inner, &records, &batches, now, &config)?;
        drop(inner);
        if queue {
            self.enqueue_flush();
        }
        Ok(AppendInfo {
            base_offset,
            last_offset: next - 1,
            log_append_time_ms: if ts_type == TimestampType::LogAppendTime {
                now
            } else {
                -1
            },
            log_start_offset: self.offsets.log_start(),
            duplicate: false,
        })
    }

    /// The one write path: `records` holds validated `batches` whose offsets are decided — the
    /// first starts at the log end offset, each next one right after the previous, and each
    /// carries its leader epoch. Rolls if needed, writes them with one `pwrite` (cut back on
    /// failure), indexes them, updates producer state and the leader-epoch cache from their
    /// headers and applies the flush policy. Returns whether the flusher must be queued.
    pub(super) fn write_batches(
        &self,
        inner: &mut LogInner,
        records: &[u8],
        batches: &[(usize, BatchHeader)],
        now: i64,
        config: &LogConfig,
    ) -> Result<bool, AppendError> {
        let (Some((_, first)), Some((_, last))) = (batches.first(), batches.last()) else {
            return Err(AppendError::InvalidRecord("no record batch".into()));
        };
        let mut expected = inner.log_end_offset;
        for (_, h) in batches {
            if h.base_offset != expected {
                return Err(StoreError::Corrupt(format!(
                    "{}: batch at offset {} written where {expected} was expected",
                    self.tp, h.base_offset
                ))
                .into());
            }
            expected = h.next_offset();
        }
        let (base_offset, last_offset) = (first.base_offset, last.last_offset());
        self.maybe_roll(inner, records.len() as u64, last_offset, now, config)?;

        let active_base = inner.active_base();
        let Some(seg) = inner.segments.get_mut(&active_base) else {
            return Err(StoreError::Corrupt("partition has no active segment".into()).into());
        };
        let pre_size = seg.size;
        if pre_size.saturating_add(records.len() as u64) > SEGMENT_BYTES_MAX {
            return Err(AppendError::MessageTooLarge {
                size: records.len(),
                max: batch_bytes_max(config),
            });
        }
        let file = self.segment_file(seg, true)?;
        if let Err(e) = self.shared.storage.write_at(&file, records, pre_size) {
            let path = seg.log_path(&self.dir());
            // Cut a torn write back so no partial batch is ever visible; if even that fails the
            // file's state is unknown and the data dir goes offline.
            if let Err(e2) = self.shared.storage.set_len(&file, pre_size) {
                self.log_dir().mark_offline(format!(
                    "append to {} failed ({e}) and could not be rolled back ({e2})",
                    path.display()
                ));
            }
            return Err(StoreError::io(format!("append to {}", path.display()), e).into());
        }
        crate::flusher::count_written(records.len());
        // Every batch here was validated (CRC included) before it was written.
        seg.checked.appended_at(pre_size);
        let mut record_count = 0i64;
        for (pos, h) in batches {
            seg.track_batch(pre_size + *pos as u64, h, config.index_interval_bytes);
            record_count += i64::from(h.record_count);
        }
        let mut epochs_changed = false;
        for (pos, h) in batches {
            let marker = if h.is_control() {
                records
                    .get(*pos..*pos + h.total_size())
                    .and_then(|b| control::parse_marker(b, h))
            } else {
                None
            };
            inner.producers.update(h, marker);
            epochs_changed |= inner.epochs.assign(h.partition_leader_epoch, h.base_offset);
        }
        let next = last_offset.saturating_add(1);
        inner.log_end_offset = next;
        self.log_end
            .store(next, std::sync::atomic::Ordering::SeqCst);
        if epochs_changed {
            // Deferred to the flusher: no fsync under the partition lock, and recovery rebuilds
            // the entries past the recovery point from batch headers anyway.
            inner.stage_epochs();
        }
        debug_assert!(base_offset < next);

        Ok(match self.shared.config.flush_policy {
            FlushPolicy::Always => {
                if let Err(e) = self.shared.storage.sync(&file) {
                    let err = StoreError::io(format!("fdatasync {}", self.tp), e);
                    self.log_dir().mark_offline(err.to_string());
                    return Err(err.into());
                }
                // The recovery point stays with the flusher: it also covers index files and the
                // leader-epoch checkpoint, which this fsync does not.
                self.publish_durable(next);
                !inner.pending.is_empty()
            }
            FlushPolicy::Never => {
                self.publish_durable(next);
                inner.messages_since_flush += record_count;
                if inner.messages_since_flush >= config.flush_messages {
                    inner.pending.flush_active = true;
                }
                !inner.pending.is_empty()
            }
            FlushPolicy::Batch => true,
        })
    }

    fn maybe_roll(
        &self,
        inner: &mut LogInner,
        append_bytes: u64,
        last_offset: i64,
        now: i64,
        config: &LogConfig,
    ) -> Result<(), StoreError> {
        let Some(active) = inner.segments.values().next_back() else {
            return Err(StoreError::Corrupt(
                "partition has no active segment".into(),
            ));
        };
        let overflow = last_offset - active.base_offset > SEGMENT_RELATIVE_OFFSET_MAX;
        let full = active.size > 0
            && (active.size + append_bytes > config.effective_segment_bytes()
                || now.saturating_sub(active.created_ms) >= config.segment_ms
                || active.indexes_full());
        if overflow || full {
            self.roll(inner, now, config)?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at the log end offset.
    fn roll(&self, inner: &mut LogInner, now: i64, config: &LogConfig) -> Result<(), StoreError> {
        let new_base = inner.log_end_offset;
        let active_base = inner.active_base();
        if new_base == active_base {
            return Ok(());
        }
        if let Some(seg) = inner.segments.get_mut(&active_base) {
            seg.finish_time_index();
        }
        if let Some(seg) = inner.segments.get(&active_base) {
            self.write_index_files(seg)?;
        }
        let new_path = segment::segment_path(&self.dir(), new_base, LOG_SUFFIX);
        self.shared
            .cache
            .get(&new_path, true)
            .map_err(|e| StoreError::io(format!("create {}", new_path.display()), e))?;
        inner
            .segments
            .insert(new_base, Segment::new_empty(new_base, config, now));
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            inner
                .pending
                .sync_paths
                .push(segment::segment_path(&self.dir(), active_base, suffix));
        }
        inner.pending.sync_dir = true;
        let snapshot = inner.producers.encode();
        inner.pending.snapshots.push((new_base, snapshot));
        if self.shared.config.flush_policy == FlushPolicy::Always {
            self.shared
                .storage
                .sync_dir(&self.dir())
                .map_err(|e| StoreError::io(format!("fsync {}", self.dir().display()), e))?;
        }
        Ok(())
    }

    /// `segment.ms`: roll an idle active segment that is too old.
    pub(crate) fn maybe_roll_for_time(&self, now: i64) -> Result<bool, StoreError> {
        let config = self.config();
        let mut inner = self.inner.lock();
        let rolled = match inner.segments.values().next_back() {
            Some(a) if a.size > 0 && now.saturating_sub(a.created_ms) >= config.segment_ms => {
                self.roll(&mut inner, now, &config)?;
                true
            }
            _ => false,
        };
        drop(inner);
        if rolled {
            self.enqueue_flush();
        }
        Ok(rolled)
    }
}
