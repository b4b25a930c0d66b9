//! Damaged batches: what a damaged range of a segment is, and the store-wide board of partitions
//! that hold one or need a scrub soon. The scrubber (`scrub.rs`) and reads (`log/read.rs`) find
//! damage; the partition's log keeps its ranges (`log/damage.rs`); replication reads the board to
//! know which partitions to repair from a replica, and the scrubber to know which to scan first.
//!
//! Invariants: a range names whole batches `[from, to)` at `[position, position + len)` of the
//! sealed segment `segment_base`, between two valid batches (or a segment end); ranges of one
//! partition never overlap. The board only ever names partitions; their ranges live in the log.

use std::collections::BTreeSet;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::TopicPartition;

/// Batches of a sealed segment that failed their CRC or structure check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DamagedRange {
    /// The first offset of the damaged batches (the offset after the last valid batch before).
    pub from: i64,
    /// The offset after them (the base offset of the next valid batch, or the segment's end).
    pub to: i64,
    /// The segment holding them.
    pub segment_base: i64,
    /// Their byte position in the segment's `.log`.
    pub position: u64,
    /// Their length in bytes.
    pub len: u64,
}

impl DamagedRange {
    /// Whether `offset` is one of the damaged offsets.
    pub fn contains(&self, offset: i64) -> bool {
        self.from <= offset && offset < self.to
    }
}

/// Partitions with damaged ranges (for repair) and partitions a read found damage in before the
/// scrubber did (to scan first). Shared by the store, its logs and the scrubber.
#[derive(Debug)]
pub(crate) struct DamageBoard {
    state: Mutex<Board>,
    /// Bumped at every change, so repair and the scrubber can wait for one.
    changes: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Board {
    damaged: BTreeSet<TopicPartition>,
    to_scan: BTreeSet<TopicPartition>,
}

impl Default for DamageBoard {
    fn default() -> Self {
        DamageBoard {
            state: Mutex::new(Board::default()),
            changes: watch::Sender::new(0),
        }
    }
}

impl DamageBoard {
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// `tp` holds damaged ranges (or no longer does).
    pub(crate) fn set_damaged(&self, tp: &TopicPartition, damaged: bool) {
        let changed = {
            let mut state = self.state.lock();
            if damaged {
                state.damaged.insert(tp.clone())
            } else {
                state.damaged.remove(tp)
            }
        };
        if changed {
            self.changed();
        }
    }

    /// A read found a bad batch in `tp`: the scrubber scans it next.
    pub(crate) fn request_scan(&self, tp: &TopicPartition) {
        if self.state.lock().to_scan.insert(tp.clone()) {
            self.changed();
        }
    }

    /// Takes the partitions whose scan a read requested.
    pub(crate) fn take_scan_requests(&self) -> Vec<TopicPartition> {
        std::mem::take(&mut self.state.lock().to_scan)
            .into_iter()
            .collect()
    }

    /// Partitions holding damaged ranges.
    pub(crate) fn damaged(&self) -> Vec<TopicPartition> {
        self.state.lock().damaged.iter().cloned().collect()
    }

    /// A receiver that sees every change of the board.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
