//! What the front end knows of tiered storage (decision 0073): the log start offset clients
//! see (the remote log's start when the object store holds older data than the local log), and
//! the reads below the local log start — consumer Fetch and timestamp lookups — answered from the
//! object store through [`RemoteReads`] (the broker's is `millrace_tiered::remote_read`, so the
//! front end does not link the object-store client). Followers never read remote data: a
//! follower below the leader's local start restarts its log there (replication's out-of-range
//! rule), so a replica rebuilt after a lost disk copies only the local tail.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use millrace_cluster::remote_log::RemoteLog;
use millrace_cluster::remote_log::RemoteSegment;
use millrace_replication::HostedPartition;
use millrace_store::AbortedTxn;
use millrace_store::TopicPartition;
use uuid::Uuid;

use crate::error_codes::{KafkaError, KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE};
use crate::BrokerContext;

/// What a remote read returns.
#[derive(Debug, Clone, Default)]
pub struct RemoteRecords {
    /// Whole batches starting with the one holding the fetch offset.
    pub records: Bytes,
    /// For read_committed: aborted transactions the batches may hold records of.
    pub aborted: Vec<AbortedTxn>,
}

/// Reads from the object store, as the front end needs them; errors are the operator's words
/// (a missing or corrupt object, the store unreachable).
pub trait RemoteReads: Send + Sync {
    /// Whole batches of `segment` from the one holding `offset`: up to `max_bytes`, or the first
    /// batch whole when `min_one`.
    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        tp: TopicPartition,
        topic_id: Uuid,
        segment: RemoteSegment,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        read_committed: bool,
    ) -> BoxFuture<'static, Result<RemoteRecords, String>>;

    /// (timestamp, offset) of the first remote batch whose largest timestamp reaches
    /// `timestamp`.
    fn offset_for_timestamp(
        &self,
        tp: TopicPartition,
        topic_id: Uuid,
        remote: Arc<RemoteLog>,
        timestamp: i64,
    ) -> BoxFuture<'static, Result<Option<(i64, i64)>, String>>;
}

/// The committed remote log of a hosted partition, if its topic is tiered and has one.
pub fn remote_log(ctx: &BrokerContext, hosted: &HostedPartition) -> Option<Arc<RemoteLog>> {
    // A broker without tiered storage pays nothing here on its fetch path.
    ctx.remote.as_ref()?;
    if !hosted.log.config().remote_storage_enable {
        return None;
    }
    ctx.replicas
        .image()
        .remote_log(hosted.topic_id, hosted.tp.partition)
        .cloned()
}

/// The log start offset clients see: the remote log's start when it holds data below the local
/// log start, else the local log start.
pub fn log_start_offset(ctx: &BrokerContext, hosted: &HostedPartition) -> i64 {
    let local = hosted.log.log_start_offset();
    remote_log(ctx, hosted)
        .and_then(|r| r.start_offset())
        .map_or(local, |remote| remote.min(local))
}

/// The highest offset in the object store (ListOffsets LATEST_TIERED), -1 when none.
pub fn latest_tiered_offset(ctx: &BrokerContext, hosted: &HostedPartition) -> i64 {
    remote_log(ctx, hosted)
        .and_then(|r| r.segments.last().map(|s| s.end_offset))
        .unwrap_or(-1)
}

/// The first offset not in the object store yet (ListOffsets EARLIEST_PENDING_UPLOAD, KIP-1023,
/// as Kafka's `UnifiedLog` answers it): one past the highest uploaded offset (at least the log
/// start); the log start while nothing is uploaded; -1 for a topic without remote storage.
pub fn earliest_pending_upload_offset(ctx: &BrokerContext, hosted: &HostedPartition) -> i64 {
    if ctx.remote.is_none() || !hosted.log.config().remote_storage_enable {
        return -1;
    }
    let log_start = log_start_offset(ctx, hosted);
    match latest_tiered_offset(ctx, hosted) {
        // Nothing uploaded: the whole log is pending, unless the local log starts above the log
        // start (uploads this leader does not know of yet), where Kafka answers -1.
        -1 if hosted.log.log_start_offset() == log_start => log_start,
        -1 => -1,
        highest => highest.saturating_add(1).max(log_start),
    }
}

/// A consumer read that the object store must answer: the offset is below the local log start
/// and inside a committed remote segment.
#[derive(Debug, Clone)]
pub struct RemoteWanted {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub offset: i64,
    pub remote: Arc<RemoteLog>,
}

/// Whether a consumer read of `offset` goes to the object store.
pub fn remote_wanted(
    ctx: &BrokerContext,
    hosted: &HostedPartition,
    offset: i64,
) -> Option<RemoteWanted> {
    ctx.remote.as_ref()?;
    if offset >= hosted.log.log_start_offset() {
        return None;
    }
    let remote = remote_log(ctx, hosted)?;
    remote.segment_for(offset)?;
    Some(RemoteWanted {
        tp: hosted.tp.clone(),
        topic_id: hosted.topic_id,
        offset,
        remote,
    })
}

/// Reads whole batches from the remote segment holding the wanted offset.
pub async fn read(
    ctx: &BrokerContext,
    wanted: &RemoteWanted,
    max_bytes: usize,
    min_one: bool,
    read_committed: bool,
) -> Result<RemoteRecords, KafkaError> {
    let Some(reader) = ctx.remote.as_ref() else {
        return Err(KafkaError::code(OFFSET_OUT_OF_RANGE));
    };
    let Some(seg) = wanted.remote.segment_for(wanted.offset) else {
        return Err(KafkaError::code(OFFSET_OUT_OF_RANGE));
    };
    let started = std::time::Instant::now();
    let result = reader
        .read(
            wanted.tp.clone(),
            wanted.topic_id,
            seg.clone(),
            wanted.offset,
            max_bytes,
            min_one,
            read_committed,
        )
        .await;
    // A whole remote read (index, ranged GETs, checks) as op "read": its latency, and its
    // failures — missing or corrupt objects included — in the remote error counter.
    millrace_metrics::global().record_remote_request(
        "read",
        started.elapsed().as_secs_f64(),
        result.is_err(),
    );
    result.map_err(|e| {
        tracing::warn!(partition = %wanted.tp, offset = wanted.offset, error = %e, "remote read failed");
        KafkaError::new(KAFKA_STORAGE_ERROR, e)
    })
}

/// ListOffsets by timestamp below the local log: (timestamp, offset) from the remote log.
pub async fn offset_for_timestamp(
    ctx: &BrokerContext,
    tp: &TopicPartition,
    topic_id: Uuid,
    remote: &Arc<RemoteLog>,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, KafkaError> {
    let Some(reader) = ctx.remote.as_ref() else {
        return Ok(None);
    };
    reader
        .offset_for_timestamp(tp.clone(), topic_id, Arc::clone(remote), timestamp)
        .await
        .map_err(|e| {
            millrace_metrics::global().record_remote_request("read", 0.0, true);
            KafkaError::new(KAFKA_STORAGE_ERROR, e)
        })
}
