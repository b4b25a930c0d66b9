//! Reads below the local log start (decision 0073): a consumer Fetch whose offset lies in a
//! committed remote segment is answered from the object store — the segment's index (cached)
//! gives a position, ranged GETs through the chunk cache fetch the bytes (the next chunk is
//! prefetched for a sequential reader), and whole batches are cut out, each CRC-checked: a
//! damaged or missing object fails the read with a clear error, never a silent gap. Timestamp
//! lookups (ListOffsets) below the local log use the segments' largest timestamps and remote
//! time indexes.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use millrace_cluster::remote_log::{RemoteLog, RemoteSegment};
use millrace_store::batch::{self, BatchPrefix};
use millrace_store::limits::LOG_OVERHEAD_BYTES;
use millrace_store::{AbortedTxn, TopicId};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::error::TieredError;
use crate::layout::{ObjectKind, SegmentObjects};
use crate::remote_storage::RemoteStorage;
use crate::segment_walk::decode_pairs;

/// Remote segments whose indexes stay cached (each is a few KiB).
pub const INDEXES_CACHED_MAX: usize = 4096;
/// Bytes a read fetches at least (whole batches are cut out of it).
pub const READ_BYTES_MIN: u64 = 64 * 1024;
/// Bytes: the largest batch a remote read accepts.
pub const REMOTE_BATCH_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// What a remote read returns.
#[derive(Debug, Clone, Default)]
pub struct RemoteRecords {
    /// Whole batches starting with the one holding the fetch offset.
    pub records: Bytes,
    /// For read_committed: aborted transactions the batches may hold records of.
    pub aborted: Vec<AbortedTxn>,
}

/// A remote segment's parsed indexes and transaction index.
#[derive(Debug)]
struct SegmentIndexes {
    /// (offset, position).
    index: Vec<(i64, u64)>,
    /// (largest timestamp so far, offset).
    time_index: Vec<(i64, i64)>,
    /// (producer id, first offset, marker offset).
    aborted: Vec<(i64, i64, i64)>,
}

/// Remote reads of one broker.
pub struct RemoteReader {
    storage: RemoteStorage,
    indexes: Mutex<HashMap<Uuid, Arc<SegmentIndexes>>>,
}

/// Which partition a read is for.
#[derive(Debug, Clone)]
pub struct RemotePartition<'a> {
    pub topic: &'a str,
    pub topic_id: Uuid,
    pub partition: i32,
}

impl RemotePartition<'_> {
    fn objects(&self, seg: &RemoteSegment) -> SegmentObjects {
        SegmentObjects {
            topic: self.topic.to_string(),
            topic_id: TopicId::from_bytes(*self.topic_id.as_bytes()),
            partition: self.partition,
            base_offset: seg.base_offset,
            segment_id: seg.segment_id,
        }
    }
}

fn corrupt(key: &str, detail: impl std::fmt::Display) -> TieredError {
    TieredError::Corrupt {
        key: key.to_string(),
        detail: detail.to_string(),
    }
}

impl RemoteReader {
    pub fn new(storage: RemoteStorage) -> RemoteReader {
        RemoteReader {
            storage,
            indexes: Mutex::new(HashMap::new()),
        }
    }

    async fn indexes(
        &self,
        part: &RemotePartition<'_>,
        seg: &RemoteSegment,
    ) -> Result<Arc<SegmentIndexes>, TieredError> {
        if let Some(found) = self.indexes.lock().get(&seg.segment_id) {
            return Ok(Arc::clone(found));
        }
        let objects = part.objects(seg);
        let key = objects.key(ObjectKind::Index);
        let index = decode_pairs(&self.storage.get(&key).await?)
            .ok_or_else(|| corrupt(&key, "not a whole number of index entries"))?;
        let key = objects.key(ObjectKind::TimeIndex);
        let time_index = decode_pairs(&self.storage.get(&key).await?)
            .ok_or_else(|| corrupt(&key, "not a whole number of time index entries"))?
            .into_iter()
            .map(|(ts, off)| (ts, off as i64))
            .collect();
        let key = objects.key(ObjectKind::TxnIndex);
        let aborted: Vec<(i64, i64, i64)> =
            serde_json::from_slice(&self.storage.get(&key).await?).map_err(|e| corrupt(&key, e))?;
        let loaded = Arc::new(SegmentIndexes {
            index,
            time_index,
            aborted,
        });
        let mut cache = self.indexes.lock();
        if cache.len() >= INDEXES_CACHED_MAX {
            // Coarse eviction: indexes are cheap to fetch again.
            cache.clear();
        }
        cache.insert(seg.segment_id, Arc::clone(&loaded));
        Ok(loaded)
    }

    /// Drops what is cached for a segment (deleted by retention).
    pub fn forget(&self, segment_id: Uuid) {
        self.indexes.lock().remove(&segment_id);
    }

    /// Reads whole batches of `seg` from the one holding `offset`: up to `max_bytes`, or the
    /// first batch whole when `min_one`. For read_committed, the aborted transactions of the
    /// range read.
    pub async fn read(
        &self,
        part: &RemotePartition<'_>,
        seg: &RemoteSegment,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        read_committed: bool,
    ) -> Result<RemoteRecords, TieredError> {
        let indexes = self.indexes(part, seg).await?;
        let key = part.objects(seg).key(ObjectKind::Log);
        let size = seg.size_bytes;
        let i = indexes.index.partition_point(|(o, _)| *o <= offset);
        let mut pos = i
            .checked_sub(1)
            .and_then(|i| indexes.index.get(i))
            .map_or(0, |(_, p)| *p);
        let want = (max_bytes as u64).max(READ_BYTES_MIN);
        let mut window_at = pos;
        let mut window = self.fetch(&key, size, pos, pos + want).await?;
        // Byte range taken, in object positions.
        let mut taken: Option<(u64, u64)> = None;
        let mut last_offset = offset - 1;
        while pos + LOG_OVERHEAD_BYTES as u64 <= size {
            let window_end = window_at + window.len() as u64;
            if pos + 17 > window_end.min(size) && pos + 17 <= size {
                if taken.is_some() {
                    break;
                }
                window = self.fetch(&key, size, pos, pos + want).await?;
                window_at = pos;
            }
            let head = window.get((pos - window_at) as usize..).unwrap_or(&[]);
            let prefix = BatchPrefix::parse(head)
                .map_err(|e| corrupt(&key, format!("at byte {pos}: {e}")))?;
            let total = prefix.total_size() as u64;
            if total > REMOTE_BATCH_BYTES_MAX || pos + total > size {
                return Err(corrupt(
                    &key,
                    format!("batch of {total} bytes at byte {pos}"),
                ));
            }
            if let Some((from, end)) = taken {
                if end - from + total > max_bytes as u64 {
                    break;
                }
            }
            if pos + total > window_at + window.len() as u64 {
                if taken.is_some() {
                    break;
                }
                window = self.fetch(&key, size, pos, pos + total.max(want)).await?;
                window_at = pos;
            }
            let at = (pos - window_at) as usize;
            let whole = window
                .get(at..at + total as usize)
                .ok_or_else(|| corrupt(&key, format!("short read at byte {pos}")))?;
            let h = batch::validate_stored(whole)
                .map_err(|e| corrupt(&key, format!("at byte {pos}: {e}")))?;
            if h.last_offset() >= offset {
                match taken {
                    None if total > max_bytes as u64 && !min_one => break,
                    None => taken = Some((pos, pos + total)),
                    Some((from, _)) => taken = Some((from, pos + total)),
                }
                last_offset = h.last_offset();
            }
            pos += total;
        }
        let records = match taken {
            Some((from, end)) => {
                window.slice((from - window_at) as usize..(end - window_at) as usize)
            }
            None => Bytes::new(),
        };
        let aborted = if read_committed && !records.is_empty() {
            indexes
                .aborted
                .iter()
                .filter(|(_, first, marker)| *marker >= offset && *first <= last_offset)
                .map(|(pid, first, marker)| AbortedTxn {
                    producer_id: *pid,
                    first_offset: *first,
                    last_offset: *marker,
                    last_stable_offset: -1,
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(RemoteRecords { records, aborted })
    }

    async fn fetch(&self, key: &str, size: u64, from: u64, to: u64) -> Result<Bytes, TieredError> {
        let to = to.min(size);
        if from >= to {
            return Ok(Bytes::new());
        }
        let bytes = self.storage.read_range(key, size, from..to, true).await?;
        if bytes.len() as u64 != to - from {
            return Err(corrupt(
                key,
                format!("asked bytes {from}..{to}, got {}", bytes.len()),
            ));
        }
        Ok(bytes)
    }

    /// The first offset whose batch's largest timestamp is at or after `timestamp`, from the
    /// remote log: (that timestamp, offset). `None` when no remote batch is that late.
    pub async fn offset_for_timestamp(
        &self,
        part: &RemotePartition<'_>,
        remote: &RemoteLog,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, TieredError> {
        let Some(seg) = remote
            .segments
            .iter()
            .find(|s| s.max_timestamp >= timestamp && s.end_offset >= remote.log_start_offset)
        else {
            return Ok(None);
        };
        let indexes = self.indexes(part, seg).await?;
        // The time index holds each rise of the running maximum: the first entry at or after
        // the timestamp is the first batch whose largest timestamp reaches it.
        Ok(indexes
            .time_index
            .iter()
            .find(|(ts, _)| *ts >= timestamp)
            .map(|(ts, off)| (*ts, (*off).max(remote.log_start_offset))))
    }
}
