//! Transactions on the log: appending a marker (the coordinator ends a transaction here), the
//! last stable offset (how far a `read_committed` consumer may read) and the aborted transactions
//! a read must report. The rules themselves are `producer_state`'s; a follower's markers arrive
//! through `append_replicated` and take the same write path.

use super::{now_ms, LogInner, PartitionLog};
use crate::batch;
use crate::control::{self, Marker};
use crate::error::{AppendError, StoreError};
use crate::producer_state::AbortedTxn;

impl PartitionLog {
    /// Appends the transaction marker `marker` of `producer_id` at `producer_epoch` as the
    /// partition's leader in `leader_epoch`; returns its offset. The caller waits for it to be
    /// durable (as for an acks=all produce) before counting the marker written.
    pub fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
        leader_epoch: i32,
    ) -> Result<i64, AppendError> {
        self.writable()?;
        let config = self.config();
        let now = now_ms();
        let mut records = control::encode_marker_batch(producer_id, producer_epoch, marker, now);
        let mut inner = self.inner.lock();
        self.writable()?;
        inner
            .producers
            .check_marker(producer_id, producer_epoch, marker)?;
        let offset = inner.log_end_offset;
        batch::set_base_offset(&mut records, offset);
        batch::set_partition_leader_epoch(&mut records, leader_epoch);
        let h = batch::validate_stored(&records)
            .map_err(|e| StoreError::Corrupt(format!("{}: marker batch: {e}", self.tp)))?;
        let queue = self.write_batches(&mut inner, &records, &[(0, h)], now, &config)?;
        drop(inner);
        if queue {
            self.enqueue_flush();
        }
        Ok(offset)
    }

    /// The sequence the next batch of `producer_id` at `producer_epoch` must start with here
    /// (a coordinator writing for a producer: TxnOffsetCommit's records).
    pub fn next_sequence(&self, producer_id: i64, producer_epoch: i16) -> i32 {
        self.inner
            .lock()
            .producers
            .next_sequence(producer_id, producer_epoch)
    }

    /// The last stable offset: a `read_committed` consumer reads below it.
    pub fn last_stable_offset(&self) -> i64 {
        let mut inner = self.inner.lock();
        self.last_stable_locked(&mut inner)
    }

    /// The last stable offset, under the partition lock: the high watermark, or the first offset
    /// of the oldest transaction still undecided below it.
    pub(super) fn last_stable_locked(&self, inner: &mut LogInner) -> i64 {
        let hwm = self.offsets.high_watermark();
        let last_stable = inner
            .producers
            .first_unstable_offset(hwm)
            .map_or(hwm, |first| first.min(hwm));
        last_stable.max(self.offsets.log_start())
    }

    /// The aborted transactions a `read_committed` read of `[from, upper)` reports, in marker
    /// order: those with a marker at or after `from` that began before `upper`.
    pub fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.inner.lock().producers.aborted_between(from, upper)
    }
}
