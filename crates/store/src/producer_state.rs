//! Idempotent producer state of one partition: per producer id, the producer epoch and the last
//! `PRODUCER_BATCH_CACHE` batches (first/last sequence, first/last offset, timestamp).
//!
//! Rules (protocol-checklist §3): producerId -1 → no checks. Duplicate first: same epoch and a
//! cached batch with the same first AND last sequence → not appended, original offsets returned.
//! Older epoch → InvalidProducerEpoch. Newer epoch → only firstSeq 0. Same epoch → firstSeq must
//! be lastSeq + 1 (wrapping at i32::MAX to 0). Unknown producer id → any sequence.
//!
//! Snapshots (`<offset, 20 digits>.snapshot`) hold the state as of an offset; the binary layout is
//! in docs/log-format.md. After an unclean stop the state is rebuilt from the latest snapshot
//! plus the batch headers after it. Pure data; the partition mutex guards it.

use std::collections::{BTreeMap, VecDeque};

use crate::batch::{sequence_add, BatchHeader};
use crate::error::AppendError;
use crate::limits::{PRODUCERS_PER_SNAPSHOT_MAX, PRODUCER_BATCH_CACHE};

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
    /// Last sequence appended.
    pub last_sequence: i32,
    /// Last offset appended.
    pub last_offset: i64,
    /// Timestamp of the last batch.
    pub last_timestamp: i64,
    /// Recent batches, oldest first.
    pub batches: Vec<BatchMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Producer {
    epoch: i16,
    batches: VecDeque<BatchMetadata>,
}

/// Result of checking one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Append it.
    Append,
    /// A retry of this cached batch: do not append.
    Duplicate(BatchMetadata),
}

/// All producers of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProducerStates {
    producers: BTreeMap<i64, Producer>,
}

impl ProducerStates {
    /// Checks one batch against the current state (does not change it).
    pub(crate) fn check(&self, h: &BatchHeader) -> Result<Check, AppendError> {
        if !h.has_producer_id() {
            return Ok(Check::Append);
        }
        let Some(p) = self.producers.get(&h.producer_id) else {
            return Ok(Check::Append);
        };
        let first = h.base_sequence;
        let last = h.last_sequence();
        if h.producer_epoch == p.epoch {
            if let Some(dup) = p
                .batches
                .iter()
                .find(|b| b.first_sequence == first && b.last_sequence == last)
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

    /// Records an appended batch (also used when replaying the log).
    pub(crate) fn update(&mut self, h: &BatchHeader, first_offset: i64, timestamp: i64) {
        if !h.has_producer_id() {
            return;
        }
        let meta = BatchMetadata {
            first_sequence: h.base_sequence,
            last_sequence: h.last_sequence(),
            first_offset,
            last_offset: first_offset + i64::from(h.last_offset_delta.max(0)),
            timestamp,
        };
        let p = self.producers.entry(h.producer_id).or_insert(Producer {
            epoch: h.producer_epoch,
            batches: VecDeque::new(),
        });
        if h.producer_epoch != p.epoch {
            p.epoch = h.producer_epoch;
            p.batches.clear();
        }
        if p.batches.len() >= PRODUCER_BATCH_CACHE {
            p.batches.pop_front();
        }
        p.batches.push_back(meta);
    }

    /// Forgets producers whose last batch ends before `log_start_offset` (after retention).
    pub(crate) fn remove_before(&mut self, log_start_offset: i64) {
        self.producers.retain(|_, p| {
            p.batches
                .back()
                .is_some_and(|b| b.last_offset >= log_start_offset)
        });
    }

    pub(crate) fn entries(&self) -> Vec<ProducerStateEntry> {
        self.producers
            .iter()
            .filter_map(|(pid, p)| {
                let last = p.batches.back()?;
                Some(ProducerStateEntry {
                    producer_id: *pid,
                    producer_epoch: p.epoch,
                    last_sequence: last.last_sequence,
                    last_offset: last.last_offset,
                    last_timestamp: last.timestamp,
                    batches: p.batches.iter().copied().collect(),
                })
            })
            .collect()
    }

    /// Snapshot payload (without the checkpoint envelope, see `checkpoint.rs`).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (pid, p) in &self.producers {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&p.epoch.to_be_bytes());
            out.push(p.batches.len() as u8);
            for b in &p.batches {
                out.extend_from_slice(&b.first_sequence.to_be_bytes());
                out.extend_from_slice(&b.last_sequence.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.timestamp.to_be_bytes());
            }
        }
        out
    }

    /// Decodes a snapshot payload; `None` if malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Option<ProducerStates> {
        let mut r = Reader { bytes, pos: 0 };
        let n = r.u32()? as usize;
        if n > PRODUCERS_PER_SNAPSHOT_MAX {
            return None;
        }
        let mut producers = BTreeMap::new();
        for _ in 0..n {
            let pid = r.i64()?;
            let epoch = r.i16()?;
            let count = usize::from(r.u8()?);
            if count == 0 || count > PRODUCER_BATCH_CACHE {
                return None;
            }
            let mut batches = VecDeque::with_capacity(count);
            for _ in 0..count {
                batches.push_back(BatchMetadata {
                    first_sequence: r.i32()?,
                    last_sequence: r.i32()?,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    timestamp: r.i64()?,
                });
            }
            producers.insert(pid, Producer { epoch, batches });
        }
        if r.pos != bytes.len() {
            return None;
        }
        Some(ProducerStates { producers })
    }
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

    fn check(s: &ProducerStates, h: BatchHeader, expected: &str) {
        let got = match s.check(&h) {
            Ok(Check::Append) => "append".to_string(),
            Ok(Check::Duplicate(m)) => format!("dup@{}", m.first_offset),
            Err(AppendError::OutOfOrderSequence(_)) => "out_of_order".to_string(),
            Err(AppendError::InvalidProducerEpoch(_)) => "bad_epoch".to_string(),
            Err(e) => format!("{e}"),
        };
        assert_eq!(got, expected, "{h:?}");
    }

    #[test]
    fn idempotence_rules() {
        let mut s = ProducerStates::default();
        check(&s, header(-1, -1, -1, 1), "append");
        check(&s, header(7, 0, 42, 3), "append"); // unknown pid: any sequence
        s.update(&header(7, 0, 0, 3), 0, 1); // seq 0..2 at offsets 0..2
        s.update(&header(7, 0, 3, 2), 3, 1); // seq 3..4 at 3..4
        check(&s, header(7, 0, 5, 1), "append");
        check(&s, header(7, 0, 3, 2), "dup@3");
        check(&s, header(7, 0, 0, 3), "dup@0");
        check(&s, header(7, 0, 3, 1), "out_of_order"); // same first, different last
        check(&s, header(7, 0, 6, 1), "out_of_order"); // gap
        check(&s, header(7, 1, 0, 1), "append"); // new epoch from 0
        check(&s, header(7, 1, 5, 1), "out_of_order");
        check(&s, header(7, -1, 5, 1), "bad_epoch");
        for i in 0..5 {
            s.update(&header(7, 0, 5 + i, 1), 5 + i as i64, 1);
        }
        check(&s, header(7, 0, 0, 3), "out_of_order"); // left the 5-batch window
        let decoded = ProducerStates::decode(&s.encode()).expect("decode");
        assert_eq!(decoded, s);
        assert!(ProducerStates::decode(&s.encode()[1..]).is_none());
        s.update(&header(7, 2, 0, 1), 100, 1);
        assert_eq!(s.entries()[0].batches.len(), 1);
        s.remove_before(101);
        assert!(s.entries().is_empty());
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut s = ProducerStates::default();
        s.update(&header(9, 0, i32::MAX - 1, 2), 0, 1);
        check(&s, header(9, 0, 0, 1), "append");
        check(&s, header(9, 0, 1, 1), "out_of_order");
    }
}
