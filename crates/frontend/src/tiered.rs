//! What the front end knows of tiered storage (decision 0073): the log start offset clients
//! see (the remote log's start when the object store holds older data than the local log), and
//! the reads below the local log start — consumer Fetch and timestamp lookups — answered from the
//! object store through `millrace_tiered::remote_read`. Followers never read remote data: a
//! follower below the leader's local start restarts its log there (replication's out-of-range
//! rule), so a replica rebuilt after a lost disk copies only the local tail.

use std::sync::Arc;

use millrace_cluster::remote_log::RemoteLog;
use millrace_replication::HostedPartition;
use millrace_store::TopicPartition;
use millrace_tiered::remote_read::{RemotePartition, RemoteRecords};
use uuid::Uuid;

use crate::error_codes::{KafkaError, KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE};
use crate::BrokerContext;

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
    let part = RemotePartition {
        topic: &wanted.tp.topic,
        topic_id: wanted.topic_id,
        partition: wanted.tp.partition,
    };
    let started = std::time::Instant::now();
    let result = reader
        .read(
            &part,
            seg,
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
        KafkaError::new(KAFKA_STORAGE_ERROR, e.to_string())
    })
}

/// ListOffsets by timestamp below the local log: (timestamp, offset) from the remote log.
pub async fn offset_for_timestamp(
    ctx: &BrokerContext,
    tp: &TopicPartition,
    topic_id: Uuid,
    remote: &RemoteLog,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, KafkaError> {
    let Some(reader) = ctx.remote.as_ref() else {
        return Ok(None);
    };
    let part = RemotePartition {
        topic: &tp.topic,
        topic_id,
        partition: tp.partition,
    };
    reader
        .offset_for_timestamp(&part, remote, timestamp)
        .await
        .map_err(|e| {
            millrace_metrics::global().record_remote_request("read", 0.0, true);
            KafkaError::new(KAFKA_STORAGE_ERROR, e.to_string())
        })
}
