//! A tiered partition's remote log as the metadata log records it (decision 0073): the segments
//! whose upload to the object store is committed, oldest first, and the remote log start offset.
//! Kafka keeps this in its `__remote_log_metadata` topic; Millrace keeps it in the metadata log,
//! so it is replicated by the controller quorum, survives the loss of any broker, and every broker
//! sees it in the same image as the partition's leader and leader epoch.
//!
//! **Invariant:** a partition's remote segments are contiguous and never overlap: a segment is
//! committed only when it starts exactly where the last one ended (or, for the first, at or above
//! the remote log start), by the partition's current leader in its current leader epoch (the
//! controller checks both; `RemoteLog::check_commit`). So no offset is ever owned by two segments,
//! and of two brokers that both believed they led, only one commit wins.
//! **Invariant:** segments leave oldest first (`RemoteLog::delete_through`): retention never
//! leaves a hole in the middle of the remote log.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One committed remote segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    /// The uploader's id for this copy (names its objects).
    pub segment_id: Uuid,
    pub base_offset: i64,
    /// Its last offset (inclusive).
    pub end_offset: i64,
    /// The leader epoch of the broker that uploaded and committed it.
    pub leader_epoch: i32,
    /// The largest batch timestamp in it (-1 when none).
    pub max_timestamp: i64,
    /// Bytes of its `.log` object.
    pub size_bytes: u64,
    /// The leader epochs of its batches: (epoch, first offset in this segment), ascending.
    pub epochs: Vec<(i32, i64)>,
}

/// Why a commit or a deletion is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteLogError {
    #[error("remote segment {base}..={end} does not follow the remote log end {expected}")]
    NotContiguous { base: i64, end: i64, expected: i64 },
    #[error("remote segment {base}..={end} is empty or inverted")]
    Malformed { base: i64, end: i64 },
}

/// The remote log of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLog {
    /// The first offset the remote log still holds data for (raised by retention); 0 at first.
    pub log_start_offset: i64,
    /// Committed segments, oldest first, contiguous.
    pub segments: Vec<RemoteSegment>,
}

impl RemoteLog {
    /// The offset just past the last committed segment: where the next upload starts; `None`
    /// before the first upload.
    pub fn end_offset(&self) -> Option<i64> {
        self.segments.last().map(|s| s.end_offset + 1)
    }

    /// The first offset readable from the remote log, if it holds any segment.
    pub fn start_offset(&self) -> Option<i64> {
        self.segments
            .first()
            .map(|s| s.base_offset.max(self.log_start_offset))
    }

    /// Bytes of all committed segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes).sum()
    }

    /// The segment holding `offset`, if any.
    pub fn segment_for(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.end_offset < offset);
        self.segments
            .get(i)
            .filter(|s| s.base_offset <= offset && offset >= self.log_start_offset)
    }

    /// Whether `segment` may be committed next: it starts where the remote log ends (the first
    /// one: at or above the remote log start) and is not empty.
    pub fn check_commit(&self, segment: &RemoteSegment) -> Result<(), RemoteLogError> {
        if segment.end_offset < segment.base_offset || segment.base_offset < 0 {
            return Err(RemoteLogError::Malformed {
                base: segment.base_offset,
                end: segment.end_offset,
            });
        }
        let contiguous = match self.end_offset() {
            Some(end) => segment.base_offset == end,
            None => segment.base_offset >= self.log_start_offset,
        };
        if contiguous {
            Ok(())
        } else {
            Err(RemoteLogError::NotContiguous {
                base: segment.base_offset,
                end: segment.end_offset,
                expected: self.end_offset().unwrap_or(self.log_start_offset),
            })
        }
    }

    /// Applies a committed segment (skipped, returning false, if it does not follow: the
    /// controller checked, so this only guards a log written by a faulty build).
    pub fn commit(&mut self, segment: RemoteSegment) -> bool {
        if self.check_commit(&segment).is_err() {
            return false;
        }
        self.segments.push(segment);
        true
    }

    /// Drops the segments that end at or below `through_end_offset`, oldest first, and raises
    /// the remote log start to `log_start_offset`. Returns the segments dropped.
    pub fn delete_through(
        &mut self,
        through_end_offset: i64,
        log_start_offset: i64,
    ) -> Vec<RemoteSegment> {
        let n = self
            .segments
            .partition_point(|s| s.end_offset <= through_end_offset);
        let dropped: Vec<RemoteSegment> = self.segments.drain(..n).collect();
        self.log_start_offset = self.log_start_offset.max(log_start_offset);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: i64, end: i64) -> RemoteSegment {
        RemoteSegment {
            segment_id: Uuid::from_u128(base as u128 + 1),
            base_offset: base,
            end_offset: end,
            leader_epoch: 0,
            max_timestamp: -1,
            size_bytes: 100,
            epochs: vec![(0, base)],
        }
    }

    #[test]
    fn segments_must_be_contiguous() {
        let mut log = RemoteLog::default();
        assert!(log.commit(seg(0, 9)));
        assert!(log.commit(seg(10, 19)));
        // A second copy of the same offsets (another leader's upload) is refused.
        assert!(matches!(
            log.check_commit(&seg(10, 19)),
            Err(RemoteLogError::NotContiguous { expected: 20, .. })
        ));
        assert!(!log.commit(seg(5, 25)));
        assert!(!log.commit(seg(21, 30)));
        assert!(matches!(
            log.check_commit(&seg(20, 19)),
            Err(RemoteLogError::Malformed { .. })
        ));
        assert_eq!(log.end_offset(), Some(20));
        assert_eq!(log.segment_for(15).map(|s| s.base_offset), Some(10));
        assert_eq!(log.segment_for(20), None);
    }

    #[test]
    fn deletion_is_oldest_first_and_raises_the_start() {
        let mut log = RemoteLog::default();
        for b in (0..50).step_by(10) {
            assert!(log.commit(seg(b, b + 9)));
        }
        let dropped = log.delete_through(19, 20);
        assert_eq!(dropped.len(), 2);
        assert_eq!(log.start_offset(), Some(20));
        assert_eq!(log.segment_for(5), None);
        // Emptied: the next upload may start at the start offset or later, not below it.
        log.delete_through(49, 50);
        assert_eq!(log.end_offset(), None);
        assert!(log.check_commit(&seg(40, 49)).is_err());
        assert!(log.commit(seg(50, 59)));
    }
}
