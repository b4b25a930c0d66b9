//! What replication needs of a log beyond the leader append: the follower append (the leader's
//! batches as the leader stored them, offsets and leader epochs kept), the start of a leader epoch
//! at the log end, and restarting a log at an offset (a follower behind the leader's log start).
//!
//! Rules:
//! - A follower append validates structure, CRC and the store's size bound (not the topic's
//!   `max.message.bytes`, which may have been lowered after the leader accepted the batch; nor the
//!   compacted-topic key rule, which the leader applied), requires the batches to continue the log
//!   exactly, and goes through the same write path as the leader append (`write_batches`): the
//!   producer state and the leader-epoch cache are rebuilt from the batch headers, the flush
//!   policy applies.
//! - Batches entirely below the log end are skipped (the leader answers from the batch that
//!   *contains* the fetch offset); a batch that straddles it is refused (`UnexpectedOffset`), and
//!   the caller restarts the log at that batch.
//! - `begin_leader_epoch` writes the leader-epoch checkpoint before it returns (KIP-101: the epoch
//!   start must survive a crash of the new leader).

use bytes::Bytes;

use super::append::walk_append;
use super::{now_ms, PartitionLog};
use crate::batch::{BatchError, BatchHeader};
use crate::batch_walk::{Validation, WalkChecks};
use crate::error::{AppendError, StoreError};
use crate::limits::BATCH_BYTES_MAX;

/// What a follower append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicatedAppend {
    /// First offset written (the log end before the append); equals `next_offset` when every
    /// batch was already there.
    pub first_offset: i64,
    /// The log end after the append.
    pub next_offset: i64,
}

fn structural(e: BatchError) -> AppendError {
    AppendError::CorruptMessage(format!("replicated batch: {e}"))
}

impl PartitionLog {
    /// Appends batches copied from the leader, keeping their offsets and leader epochs.
    pub fn append_replicated(&self, records: Bytes) -> Result<ReplicatedAppend, AppendError> {
        self.writable()?;
        let config = self.config();
        let checks = WalkChecks {
            validation: Validation::Stored,
            batch_bytes_max: Some(BATCH_BYTES_MAX),
        };
        let mut batches = walk_append(&records, checks, structural, |walked| Ok(walked.header))?;
        let mut inner = self.inner.lock();
        self.writable()?;
        let leo = inner.log_end_offset;
        // Skip what we already have; refuse a batch that straddles our end.
        let skip = batches
            .iter()
            .take_while(|(_, h)| h.next_offset() <= leo)
            .count();
        let batches = batches.split_off(skip);
        let Some((start, first)) = batches.first().copied() else {
            return Ok(ReplicatedAppend {
                first_offset: leo,
                next_offset: leo,
            });
        };
        if first.base_offset != leo {
            return Err(AppendError::UnexpectedOffset {
                base_offset: first.base_offset,
                log_end_offset: leo,
            });
        }
        let bytes = records.get(start..).unwrap_or(&[]);
        let batches: Vec<(usize, BatchHeader)> =
            batches.into_iter().map(|(p, h)| (p - start, h)).collect();
        let queue = self.write_batches(&mut inner, bytes, &batches, now_ms(), &config)?;
        let next = inner.log_end_offset;
        drop(inner);
        if queue {
            self.enqueue_flush();
        }
        Ok(ReplicatedAppend {
            first_offset: leo,
            next_offset: next,
        })
    }

    /// Records that leader epoch `epoch` starts at the log end; the leader-epoch checkpoint is on
    /// disk when this returns — unless the disk is full: then the write is left to the flusher
    /// (the recovery point does not pass it until it is written) and this returns `Ok`. A no-op
    /// if the log already knows `epoch` or a later one.
    pub fn begin_leader_epoch(&self, epoch: i32) -> Result<(), StoreError> {
        self.writable()?;
        let mut inner = self.inner.lock();
        let leo = inner.log_end_offset;
        if !inner.epochs.assign(epoch, leo) {
            return Ok(());
        }
        let (version, entries) = inner.next_epochs();
        let written = self.write_epoch_checkpoint(version, &entries);
        if written.is_err() {
            // The epoch is in memory already (a later call for it is a no-op): the flusher
            // retries the write.
            inner.pending.epochs = Some((version, entries));
            drop(inner);
            self.enqueue_flush();
        }
        match written {
            // A full disk does not refuse leadership: the batches of this epoch carry it in
            // their headers (recovery rebuilds the cache past the recovery point from them), and
            // the recovery point does not pass the pending checkpoint until it is written.
            Err(e) if e.is_no_space() => {
                tracing::warn!(partition = %self.tp, epoch, "leader-epoch checkpoint found the disk full; retried later");
                Ok(())
            }
            other => other,
        }
    }

    /// Removes every record and restarts the log at `offset` (log start = log end = `offset`), as
    /// a follower whose log ends below the leader's log start must (Kafka's
    /// `truncateFullyAndStartAt`).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), StoreError> {
        self.restart_at(offset.max(0))
    }
}
