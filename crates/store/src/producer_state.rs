//! Producer state of one partition (Kafka's `ProducerStateManager`): per producer id, the epoch,
//! the last `PRODUCER_BATCH_CACHE` batches (first/last sequence, first/last offset, timestamp),
//! the coordinator epoch of its last marker and the first offset of its ongoing transaction; and
//! the partition's transactions: ongoing ones, completed ones whose marker may still be above the
//! high watermark, and aborted ones (what Kafka keeps in `.txnindex` files).
//!
//! Idempotence rules (protocol-checklist §3): producerId -1 → no checks. Duplicate first: same
//! epoch and a cached batch with the same first AND last sequence → not appended, original offsets
//! returned; for a transactional batch only a cached batch of the producer's ongoing transaction
//! here counts (Kafka matches ended transactions' batches too; decision 0076). Older epoch →
//! InvalidProducerEpoch. Newer epoch → only firstSeq 0. Same epoch → firstSeq must be lastSeq + 1
//! (wrapping at i32::MAX to 0). Unknown producer id → any sequence.
//!
//! Transaction rules (Kafka's `ProducerAppendInfo`): a transactional batch of a producer with no
//! ongoing transaction here starts one at its first offset; a non-transactional batch while one is
//! ongoing is refused (INVALID_TXN_STATE). A marker needs an epoch at least the producer's and a
//! coordinator epoch at least the last marker's; it ends the ongoing transaction (if any), takes
//! the marker's epoch (clearing the batch cache when it is newer) and, for ABORT, records the
//! aborted transaction `[first offset, marker offset]`. The last stable offset is the first offset
//! of the oldest transaction that is ongoing or whose marker is not yet below the high watermark.
//!
//! Snapshots (`<offset, 20 digits>.snapshot`) hold the state as of an offset; the binary layout is
//! in docs/log-format.md (v1 is still read). After an unclean stop the state is rebuilt from the
//! latest snapshot plus the batches after it. Pure data; the partition mutex guards it.

use std::collections::{BTreeMap, VecDeque};

use crate::batch::{sequence_add, BatchHeader};
use crate::control::Marker;
use crate::error::AppendError;
use crate::limits::{
    ABORTED_TXNS_PER_SNAPSHOT_MAX, PRODUCERS_PER_SNAPSHOT_MAX, PRODUCER_BATCH_CACHE,
};

/// Snapshot payload version without transactions.
const SNAPSHOT_V1: u16 = 1;
/// Snapshot payload version with transactions.
pub(crate) const SNAPSHOT_V2: u16 = 2;
/// "No offset" in a snapshot (no ongoing transaction).
const NO_OFFSET: i64 = -1;

/// Metadata of one appended batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// First sequence.
    pub first_sequence: i32,
    /// Last sequence.
    pub last_sequence: i32,
    /// First offset.
    pub first_offset: i64,
    /// Last offset.
    pub last_offset: i64,
    /// The batch's maxTimestamp (or append time).
    pub timestamp: i64,
}

/// State of one producer id, as exposed by `PartitionLog::producer_states`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    /// Producer id.
    pub producer_id: i64,
    /// Current producer epoch.
    pub producer_epoch: i16,
    /// Last sequence appended (-1: none since the epoch began).
    pub last_sequence: i32,
    /// Last offset of its data (-1: none known).
    pub last_offset: i64,
    /// Timestamp of its last batch or marker.
    pub last_timestamp: i64,
    /// Coordinator epoch of its last marker (-1: none).
    pub coordinator_epoch: i32,
    /// First offset of its ongoing transaction on this partition.
    pub current_txn_first_offset: Option<i64>,
    /// Recent batches, oldest first.
    pub batches: Vec<BatchMetadata>,
}

/// An aborted transaction of this partition (an entry of Kafka's `.txnindex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of its first record here.
    pub first_offset: i64,
    /// Offset of its ABORT marker.
    pub last_offset: i64,
    /// The last stable offset once the marker was written: every transaction aborted later began
    /// at or after it (lets a lookup stop early).
    pub last_stable_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Producer {
    epoch: i16,
    batches: VecDeque<BatchMetadata>,
    /// Last data offset and last batch or marker timestamp, kept when `batches` is emptied.
    last_offset: i64,
    last_timestamp: i64,
    coordinator_epoch: i32,
    txn_first_offset: Option<i64>,
}

impl Producer {
    fn new(epoch: i16) -> Producer {
        Producer {
            epoch,
            batches: VecDeque::new(),
            last_offset: NO_OFFSET,
            last_timestamp: NO_OFFSET,
            coordinator_epoch: -1,
            txn_first_offset: None,
        }
    }

    /// Takes `epoch`, forgetting the batches of an older one.
    fn bump_epoch(&mut self, epoch: i16) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
    }

    fn add_batch(&mut self, meta: BatchMetadata) {
        if self.batches.len() >= PRODUCER_BATCH_CACHE {
            self.batches.pop_front();
        }
        self.batches.push_back(meta);
        self.last_offset = meta.last_offset;
        self.last_timestamp = meta.timestamp;
    }
}

/// Result of checking one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Append it.
    Append,
    /// A retry of this cached batch: do not append.
    Duplicate(BatchMetadata),
}

/// Producers touched by the earlier batches of one append, checked against before the append
/// is written (the real state changes only in `write_batches`).
#[derive(Debug, Default)]
pub(crate) struct Staged(BTreeMap<i64, Producer>);

/// All producers and transactions of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProducerStates {
    producers: BTreeMap<i64, Producer>,
    /// Ongoing transactions: first offset → producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Completed transactions whose marker may be at or above the high watermark: first offset →
    /// marker offset.
    completed: BTreeMap<i64, i64>,
    /// Aborted transactions by marker offset.
    aborted: BTreeMap<i64, AbortedTxn>,
}

/// Checks one data batch against its producer's state (`None`: an unknown producer).
fn check_producer(p: Option<&Producer>, h: &BatchHeader) -> Result<Check, AppendError> {
    let Some(p) = p else {
        return Ok(Check::Append);
    };
    let first = h.base_sequence;
    let last = h.last_sequence();
    if h.producer_epoch == p.epoch {
        if let Some(dup) = p
            .batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
            .filter(|b| !h.is_transactional() || in_ongoing_txn(p, b))
        {
            return Ok(Check::Duplicate(*dup));
        }
    }
    if h.producer_epoch < p.epoch {
        return Err(AppendError::InvalidProducerEpoch(format!(
            "producer {} epoch {} is older than current epoch {}",
            h.producer_id, h.producer_epoch, p.epoch
        )));
    }
    if p.txn_first_offset.is_some() && !h.is_transactional() {
        return Err(AppendError::InvalidTxnState(format!(
            "Expected transactional write from producer {} at offset {:?} in partition",
            h.producer_id, p.txn_first_offset
        )));
    }
    if h.producer_epoch > p.epoch {
        if first != 0 {
            return Err(AppendError::OutOfOrderSequence(format!(
                "producer {} new epoch {} must start at sequence 0, got {first}",
                h.producer_id, h.producer_epoch
            )));
        }
        return Ok(Check::Append);
    }
    match p.batches.back() {
        Some(prev) if sequence_add(prev.last_sequence, 1) != first => {
            Err(AppendError::OutOfOrderSequence(format!(
                "producer {} epoch {}: expected sequence {}, got {first}",
                h.producer_id,
                h.producer_epoch,
                sequence_add(prev.last_sequence, 1)
            )))
        }
        _ => Ok(Check::Append),
    }
}

/// Whether cached batch `b` belongs to `p`'s ongoing transaction here. A transactional batch
/// that matches a batch of an ended transaction is no retry: the client resolves every batch
/// before EndTxn, and the coordinator's own abort bumps the epoch; it is a client that reused
/// the sequences of a batch it gave up on (librdkafka after purging a possibly written batch on
/// abort), and answering it as a duplicate would acknowledge records never written.
fn in_ongoing_txn(p: &Producer, b: &BatchMetadata) -> bool {
    p.txn_first_offset
        .is_some_and(|txn_first| b.first_offset >= txn_first)
}

/// Applies a data batch at `first_offset` to its producer; returns whether it began a transaction.
fn apply_data(p: &mut Producer, h: &BatchHeader, first_offset: i64, timestamp: i64) -> bool {
    p.bump_epoch(h.producer_epoch);
    p.add_batch(BatchMetadata {
        first_sequence: h.base_sequence,
        last_sequence: h.last_sequence(),
        first_offset,
        last_offset: first_offset + i64::from(h.last_offset_delta.max(0)),
        timestamp,
    });
    if h.is_transactional() && p.txn_first_offset.is_none() {
        p.txn_first_offset = Some(first_offset);
        return true;
    }
    false
}

impl ProducerStates {
    /// Checks one data batch against the current state (does not change it).
    pub(crate) fn check(&self, h: &BatchHeader) -> Result<Check, AppendError> {
        if !h.has_producer_id() {
            return Ok(Check::Append);
        }
        check_producer(self.producers.get(&h.producer_id), h)
    }

    /// As `check`, for one of several batches of an append: against the state the earlier ones
    /// will leave (`staged`), which an appendable batch then joins.
    pub(crate) fn check_staged(
        &self,
        h: &BatchHeader,
        staged: &mut Staged,
    ) -> Result<Check, AppendError> {
        if !h.has_producer_id() {
            return Ok(Check::Append);
        }
        let current = staged
            .0
            .get(&h.producer_id)
            .or_else(|| self.producers.get(&h.producer_id));
        let check = check_producer(current, h)?;
        if check == Check::Append {
            let mut p = current
                .cloned()
                .unwrap_or_else(|| Producer::new(h.producer_epoch));
            apply_data(&mut p, h, 0, h.max_timestamp);
            staged.0.insert(h.producer_id, p);
        }
        Ok(check)
    }

    /// The sequence a next batch of `producer_id` at `producer_epoch` must start with.
    pub(crate) fn next_sequence(&self, producer_id: i64, producer_epoch: i16) -> i32 {
        match self.producers.get(&producer_id) {
            Some(p) if p.epoch == producer_epoch => p
                .batches
                .back()
                .map_or(0, |b| sequence_add(b.last_sequence, 1)),
            _ => 0,
        }
    }

    /// Checks a marker of `producer_id` against the producer's state: its epoch must not be older
    /// than the producer's, nor its coordinator epoch older than the last marker's.
    pub(crate) fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
    ) -> Result<(), AppendError> {
        let Some(p) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if producer_epoch < p.epoch {
            return Err(AppendError::InvalidProducerEpoch(format!(
                "marker of producer {producer_id} has epoch {producer_epoch}, older than current \
                 epoch {}",
                p.epoch
            )));
        }
        if marker.coordinator_epoch < p.coordinator_epoch {
            return Err(AppendError::CoordinatorFenced(format!(
                "marker of producer {producer_id} has coordinator epoch {}, older than {}",
                marker.coordinator_epoch, p.coordinator_epoch
            )));
        }
        Ok(())
    }

    /// Records an appended batch at `h.base_offset` (also when replaying the log); `marker` is
    /// the marker a control batch holds.
    pub(crate) fn update(&mut self, h: &BatchHeader, marker: Option<Marker>) {
        if !h.has_producer_id() {
            return;
        }
        let p = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| Producer::new(h.producer_epoch));
        if !h.is_control() {
            if apply_data(p, h, h.base_offset, h.max_timestamp) {
                self.ongoing.insert(h.base_offset, h.producer_id);
            }
            return;
        }
        let Some(marker) = marker else {
            return;
        };
        p.bump_epoch(h.producer_epoch);
        p.coordinator_epoch = marker.coordinator_epoch;
        p.last_timestamp = h.max_timestamp;
        let Some(first) = p.txn_first_offset.take() else {
            return;
        };
        self.ongoing.remove(&first);
        let marker_offset = h.base_offset;
        self.completed.insert(first, marker_offset);
        if !marker.commit {
            let last_stable_offset = self
                .ongoing
                .keys()
                .next()
                .copied()
                .unwrap_or(marker_offset + 1);
            self.aborted.insert(
                marker_offset,
                AbortedTxn {
                    producer_id: h.producer_id,
                    first_offset: first,
                    last_offset: marker_offset,
                    last_stable_offset,
                },
            );
        }
    }

    /// The first offset of the oldest transaction that is ongoing or whose marker is at or above
    /// `high_watermark` (forgetting completed ones wholly below it); `None` if there is none.
    pub(crate) fn first_unstable_offset(&mut self, high_watermark: i64) -> Option<i64> {
        self.completed.retain(|_, marker| *marker >= high_watermark);
        let ongoing = self.ongoing.keys().next().copied();
        let completed = self.completed.keys().next().copied();
        match (ongoing, completed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The aborted transactions a read of `[from, upper)` must report: those whose marker is at
    /// or after `from` and that began before `upper`.
    pub(crate) fn aborted_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let mut out = Vec::new();
        for txn in self.aborted.range(from..).map(|(_, t)| t) {
            if txn.first_offset < upper {
                out.push(*txn);
            }
            if txn.last_stable_offset >= upper {
                break;
            }
        }
        out
    }

    /// Forgets what lies wholly below `log_start_offset` (after retention): producers whose last
    /// data is there and that have no ongoing transaction, and aborted transactions.
    pub(crate) fn remove_before(&mut self, log_start_offset: i64) {
        self.producers
            .retain(|_, p| p.txn_first_offset.is_some() || p.last_offset >= log_start_offset);
        self.aborted = self.aborted.split_off(&log_start_offset);
        self.completed
            .retain(|_, marker| *marker >= log_start_offset);
    }

    pub(crate) fn entries(&self) -> Vec<ProducerStateEntry> {
        self.producers
            .iter()
            .map(|(pid, p)| ProducerStateEntry {
                producer_id: *pid,
                producer_epoch: p.epoch,
                last_sequence: p.batches.back().map_or(-1, |b| b.last_sequence),
                last_offset: p.last_offset,
                last_timestamp: p.last_timestamp,
                coordinator_epoch: p.coordinator_epoch,
                current_txn_first_offset: p.txn_first_offset,
                batches: p.batches.iter().copied().collect(),
            })
            .collect()
    }

    /// Snapshot payload (version `SNAPSHOT_V2`, without the checkpoint envelope, see
    /// `checkpoint.rs`).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (pid, p) in &self.producers {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&p.epoch.to_be_bytes());
            out.extend_from_slice(&p.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&p.txn_first_offset.unwrap_or(NO_OFFSET).to_be_bytes());
            out.extend_from_slice(&p.last_offset.to_be_bytes());
            out.extend_from_slice(&p.last_timestamp.to_be_bytes());
            out.push(p.batches.len() as u8);
            for b in &p.batches {
                encode_batch_meta(&mut out, b);
            }
        }
        out.extend_from_slice(&(self.completed.len() as u32).to_be_bytes());
        for (first, marker) in &self.completed {
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&marker.to_be_bytes());
        }
        out.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        for t in self.aborted.values() {
            for v in [
                t.producer_id,
                t.first_offset,
                t.last_offset,
                t.last_stable_offset,
            ] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        out
    }

    /// Decodes a snapshot payload of `version` (1 or 2); `None` if malformed.
    pub(crate) fn decode(version: u16, bytes: &[u8]) -> Option<ProducerStates> {
        let mut r = Reader { bytes, pos: 0 };
        let n = r.u32()? as usize;
        if n > PRODUCERS_PER_SNAPSHOT_MAX {
            return None;
        }
        let mut s = ProducerStates::default();
        for _ in 0..n {
            let pid = r.i64()?;
            let mut p = Producer::new(r.i16()?);
            if version >= SNAPSHOT_V2 {
                p.coordinator_epoch = r.i32()?;
                p.txn_first_offset = Some(r.i64()?).filter(|o| *o >= 0);
                p.last_offset = r.i64()?;
                p.last_timestamp = r.i64()?;
            }
            let count = usize::from(r.u8()?);
            let least = usize::from(version == SNAPSHOT_V1);
            if count < least || count > PRODUCER_BATCH_CACHE {
                return None;
            }
            for _ in 0..count {
                let b = BatchMetadata {
                    first_sequence: r.i32()?,
                    last_sequence: r.i32()?,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    timestamp: r.i64()?,
                };
                if version == SNAPSHOT_V1 {
                    p.last_offset = b.last_offset;
                    p.last_timestamp = b.timestamp;
                }
                p.batches.push_back(b);
            }
            if let Some(first) = p.txn_first_offset {
                s.ongoing.insert(first, pid);
            }
            s.producers.insert(pid, p);
        }
        if version >= SNAPSHOT_V2 {
            let n = r.u32()? as usize;
            if n > ABORTED_TXNS_PER_SNAPSHOT_MAX {
                return None;
            }
            for _ in 0..n {
                let first = r.i64()?;
                s.completed.insert(first, r.i64()?);
            }
            let n = r.u32()? as usize;
            if n > ABORTED_TXNS_PER_SNAPSHOT_MAX {
                return None;
            }
            for _ in 0..n {
                let t = AbortedTxn {
                    producer_id: r.i64()?,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    last_stable_offset: r.i64()?,
                };
                s.aborted.insert(t.last_offset, t);
            }
        }
        if r.pos != bytes.len() {
            return None;
        }
        Some(s)
    }
}

fn encode_batch_meta(out: &mut Vec<u8>, b: &BatchMetadata) {
    out.extend_from_slice(&b.first_sequence.to_be_bytes());
    out.extend_from_slice(&b.last_sequence.to_be_bytes());
    out.extend_from_slice(&b.first_offset.to_be_bytes());
    out.extend_from_slice(&b.last_offset.to_be_bytes());
    out.extend_from_slice(&b.timestamp.to_be_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(N)?)?;
        self.pos += N;
        s.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch;
    use crate::testing::encode_batch;

    fn header(pid: i64, epoch: i16, seq: i32, records: usize) -> BatchHeader {
        let recs: Vec<crate::testing::TestRecord<'_>> =
            (0..records).map(|_| (None, Some(&b"v"[..]), 1)).collect();
        batch::validate(&encode_batch(&recs, pid, epoch, seq)).expect("valid")
    }

    fn at(mut h: BatchHeader, offset: i64) -> BatchHeader {
        h.base_offset = offset;
        h.max_timestamp = 1;
        h
    }

    fn check(s: &ProducerStates, h: BatchHeader, expected: &str) {
        let got = match s.check(&h) {
            Ok(Check::Append) => "append".to_string(),
            Ok(Check::Duplicate(m)) => format!("dup@{}", m.first_offset),
            Err(AppendError::OutOfOrderSequence(_)) => "out_of_order".to_string(),
            Err(AppendError::InvalidProducerEpoch(_)) => "bad_epoch".to_string(),
            Err(AppendError::InvalidTxnState(_)) => "bad_txn_state".to_string(),
            Err(e) => format!("{e}"),
        };
        assert_eq!(got, expected, "{h:?}");
    }

    #[test]
    fn idempotence_rules() {
        let mut s = ProducerStates::default();
        check(&s, header(-1, -1, -1, 1), "append");
        check(&s, header(7, 0, 42, 3), "append"); // unknown pid: any sequence
        s.update(&at(header(7, 0, 0, 3), 0), None); // seq 0..2 at offsets 0..2
        s.update(&at(header(7, 0, 3, 2), 3), None); // seq 3..4 at 3..4
        check(&s, header(7, 0, 5, 1), "append");
        check(&s, header(7, 0, 3, 2), "dup@3");
        check(&s, header(7, 0, 0, 3), "dup@0");
        check(&s, header(7, 0, 3, 1), "out_of_order"); // same first, different last
        check(&s, header(7, 0, 6, 1), "out_of_order"); // gap
        check(&s, header(7, 1, 0, 1), "append"); // new epoch from 0
        check(&s, header(7, 1, 5, 1), "out_of_order");
        check(&s, header(7, -1, 5, 1), "bad_epoch");
        for i in 0..5 {
            s.update(&at(header(7, 0, 5 + i, 1), 5 + i as i64), None);
        }
        check(&s, header(7, 0, 0, 3), "out_of_order"); // left the 5-batch window
        let decoded = ProducerStates::decode(SNAPSHOT_V2, &s.encode()).expect("decode");
        assert_eq!(decoded, s);
        assert!(ProducerStates::decode(SNAPSHOT_V2, &s.encode()[1..]).is_none());
        s.update(&at(header(7, 2, 0, 1), 100), None);
        assert_eq!(s.entries()[0].batches.len(), 1);
        s.remove_before(101);
        assert!(s.entries().is_empty());
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut s = ProducerStates::default();
        s.update(&at(header(9, 0, i32::MAX - 1, 2), 0), None);
        check(&s, header(9, 0, 0, 1), "append");
        check(&s, header(9, 0, 1, 1), "out_of_order");
    }

    fn txn(h: BatchHeader) -> BatchHeader {
        let mut h = h;
        h.attributes |= batch::ATTR_TRANSACTIONAL;
        h
    }

    fn marker_at(
        pid: i64,
        epoch: i16,
        offset: i64,
        commit: bool,
        coordinator_epoch: i32,
    ) -> (BatchHeader, Marker) {
        let m = Marker {
            commit,
            coordinator_epoch,
        };
        let b = crate::control::encode_marker_batch(pid, epoch, m, 1);
        let h = batch::validate_stored(&b).expect("valid marker");
        (at(h, offset), m)
    }

    #[test]
    fn transactions_and_markers() {
        let mut s = ProducerStates::default();
        s.update(&at(txn(header(1, 0, 0, 2)), 0), None); // offsets 0..1
        s.update(&at(txn(header(2, 0, 0, 1)), 2), None);
        assert_eq!(s.first_unstable_offset(10), Some(0));
        check(&s, header(1, 0, 2, 1), "bad_txn_state");
        check(&s, txn(header(1, 0, 2, 1)), "append");
        let (h, m) = marker_at(1, 0, 3, false, 5);
        s.update(&h, Some(m));
        let aborted = AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 3,
            last_stable_offset: 2,
        };
        assert_eq!(s.aborted_between(0, 4), vec![aborted]);
        assert_eq!(
            s.first_unstable_offset(3),
            Some(0),
            "marker not below the high watermark yet"
        );
        assert_eq!(s.first_unstable_offset(4), Some(2));
        check(&s, header(1, 0, 2, 1), "append"); // no transaction any more
        assert!(matches!(
            s.check_marker(
                1,
                0,
                Marker {
                    commit: true,
                    coordinator_epoch: 4
                }
            ),
            Err(AppendError::CoordinatorFenced(_))
        ));
        assert!(matches!(
            s.check_marker(
                1,
                -1,
                Marker {
                    commit: true,
                    coordinator_epoch: 5
                }
            ),
            Err(AppendError::InvalidProducerEpoch(_))
        ));
        assert!(s.check_marker(9, 0, m).is_ok(), "unknown producer");
        let (h, m) = marker_at(2, 1, 4, true, 5); // a bumped epoch (KIP-890)
        s.update(&h, Some(m));
        assert_eq!(s.first_unstable_offset(5), None);
        assert_eq!(s.aborted_between(4, 5), vec![]);
        assert_eq!(s.aborted_between(0, 1), vec![aborted]);
        let p2 = s
            .entries()
            .into_iter()
            .find(|e| e.producer_id == 2)
            .expect("producer 2");
        assert_eq!(
            (
                p2.producer_epoch,
                p2.last_sequence,
                p2.coordinator_epoch,
                p2.current_txn_first_offset
            ),
            (1, -1, 5, None)
        );
        check(&s, txn(header(2, 1, 0, 1)), "append");
        check(&s, txn(header(2, 1, 3, 1)), "append"); // no batch in this epoch yet: any sequence
        check(&s, txn(header(2, 0, 0, 1)), "bad_epoch");
        // An ongoing transaction survives a snapshot; a v1 snapshot is still read.
        s.update(&at(txn(header(2, 1, 0, 1)), 5), None);
        let decoded = ProducerStates::decode(SNAPSHOT_V2, &s.encode()).expect("decode");
        assert_eq!(decoded, s);
        let mut copy = decoded;
        assert_eq!(copy.first_unstable_offset(6), Some(5));
        let mut v1 = Vec::new();
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&7i64.to_be_bytes());
        v1.extend_from_slice(&3i16.to_be_bytes());
        v1.push(1);
        encode_batch_meta(
            &mut v1,
            &BatchMetadata {
                first_sequence: 0,
                last_sequence: 1,
                first_offset: 10,
                last_offset: 11,
                timestamp: 9,
            },
        );
        let old = ProducerStates::decode(SNAPSHOT_V1, &v1).expect("v1");
        assert_eq!(
            (
                old.entries()[0].last_offset,
                old.entries()[0].last_timestamp
            ),
            (11, 9)
        );
        // Retention keeps producers with an ongoing transaction and drops old aborted entries.
        s.remove_before(5);
        assert_eq!(s.aborted_between(0, 10), vec![]);
        assert!(s.entries().iter().any(|e| e.producer_id == 2));
        s.remove_before(6);
        assert!(
            s.entries().iter().any(|e| e.producer_id == 2),
            "ongoing transaction keeps its producer"
        );
    }

    /// The fault harness's lost write (ctp `x1#36`): a transaction's batch (seq 748..797) is
    /// written, its response lost, the client purges it on abort and reuses its sequences in the
    /// next transaction. That batch is no retry, so it must not be answered as a duplicate.
    #[test]
    fn a_batch_of_an_ended_transaction_is_no_duplicate() {
        let mut s = ProducerStates::default();
        s.update(&at(txn(header(1, 0, 698, 50)), 722), None);
        let (h, m) = marker_at(1, 0, 772, true, 7);
        s.update(&h, Some(m));
        s.update(&at(txn(header(1, 0, 748, 50)), 773), None);
        check(&s, txn(header(1, 0, 748, 50)), "dup@773"); // a retry inside its transaction
        let (h, m) = marker_at(1, 0, 823, false, 7);
        s.update(&h, Some(m));
        let (h, m) = marker_at(1, 0, 824, false, 8); // the next coordinator's retry
        s.update(&h, Some(m));
        check(&s, txn(header(1, 0, 748, 50)), "out_of_order");
        check(&s, txn(header(1, 0, 698, 50)), "out_of_order");
        check(&s, header(1, 0, 748, 50), "dup@773"); // not transactional: Kafka's rule
        check(&s, txn(header(1, 0, 798, 50)), "append");
        // The next transaction's own batches are duplicates again, an older one's are not.
        s.update(&at(txn(header(1, 0, 798, 50)), 825), None);
        check(&s, txn(header(1, 0, 798, 50)), "dup@825");
        check(&s, txn(header(1, 0, 748, 50)), "out_of_order");
    }

    #[test]
    fn staged_checks_see_earlier_batches() {
        let s = ProducerStates::default();
        let mut staged = Staged::default();
        assert_eq!(
            s.check_staged(&header(3, 0, 0, 2), &mut staged).ok(),
            Some(Check::Append)
        );
        assert!(matches!(
            s.check_staged(&header(3, 0, 5, 1), &mut staged),
            Err(AppendError::OutOfOrderSequence(_))
        ));
        assert_eq!(
            s.check_staged(&header(3, 0, 2, 1), &mut staged).ok(),
            Some(Check::Append)
        );
        assert_eq!(s, ProducerStates::default(), "staging changes nothing");
    }
}
