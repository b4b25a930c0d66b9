//! ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3, v7+), earliest local (-4,
//! v8+), latest tiered (-5, v9+), earliest pending upload (-6, v11+), or the first offset whose
//! timestamp is at or after a given time.
//!
//! Tiered storage (KIP-405, decision 0073): "earliest" is the log start offset clients see (the
//! remote log's start when the object store holds older data), "earliest local" the local log's
//! start, "latest tiered" the highest offset in the object store (-1 when none, or for a topic
//! without remote storage, as Kafka answers), "earliest pending upload" the first offset not in the
//! object store yet (KIP-1023: one past the highest uploaded offset, the log start while nothing
//! is uploaded, -1 for a topic without remote storage). A timestamp lookup on a tiered partition searches
//! the remote log first (its offsets precede the local ones) and is answered later, once the
//! remote time index is read.
//!
//! "Latest" is the high watermark, or for `read_committed` (isolation level 1) the last stable
//! offset; a timestamp lookup finds only offsets below that same bound. Only the partition's
//! leader answers, with a current leader epoch (v4+, KIP-320); a new leader answers
//! OFFSET_NOT_AVAILABLE for the latest offset until its high watermark reaches the start of its
//! leader epoch (KIP-207: before that it may be lower than what the previous leader exposed).

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use millrace_cluster::remote_log::RemoteLog;
use millrace_replication::HostedPartition;
use millrace_store::TopicPartition;

use super::leadership;
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use crate::error_codes::{self, OFFSET_NOT_AVAILABLE, UNSUPPORTED_VERSION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::tiered;
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// ListOffsets: its key, versions, handler and error codes, for [`crate::registry`].
    ListOffsets, versions 1..=11, ListOffsetsRequest,
    |call, request| {
        let (response, pending) = handle(call.ctx, &call.authz, request, call.version);
        if pending.is_empty() {
            Reply::Now(response)
        } else {
            let ctx = Arc::clone(call.ctx);
            Reply::later(remote_lookups(ctx, response, pending))
        }
    },
}

response_fields!(ListOffsetsResponse: errors[topics[partitions[error_code]]], throttle_time_ms);

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
const LATEST_TIERED_TIMESTAMP: i64 = -5;
const EARLIEST_PENDING_UPLOAD_TIMESTAMP: i64 = -6;
/// First version that knows MAX_TIMESTAMP.
const MAX_TIMESTAMP_VERSION_MIN: i16 = 7;
/// First version that knows EARLIEST_LOCAL_TIMESTAMP (KIP-405).
const EARLIEST_LOCAL_VERSION_MIN: i16 = 8;
/// First version that knows LATEST_TIERED_TIMESTAMP (KIP-1005).
const LATEST_TIERED_VERSION_MIN: i16 = 9;
/// First version that knows EARLIEST_PENDING_UPLOAD_TIMESTAMP (KIP-1023).
const EARLIEST_PENDING_UPLOAD_VERSION_MIN: i16 = 11;
/// `isolation_level` of read_committed.
const READ_COMMITTED: i8 = 1;
/// First version with `leader_epoch` in the response.
const LEADER_EPOCH_VERSION_MIN: i16 = 4;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ListOffsetsRequest,
    version: i16,
) -> (ListOffsetsResponse, Vec<RemoteLookup>) {
    let read_committed = request.isolation_level == READ_COMMITTED;
    let mut pending = Vec::new();
    let topics = request
        .topics
        .into_iter()
        .enumerate()
        .map(|(topic_index, topic)| {
            let name = topic.name.0.to_string();
            let described = authz.topic(AclOperation::Describe, &name);
            let partitions = topic
                .partitions
                .into_iter()
                .enumerate()
                .map(|(partition_index, p)| {
                    let mut out = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let tp = TopicPartition::new(&name, p.partition_index);
                    let expected = if version >= LEADER_EPOCH_VERSION_MIN {
                        p.current_leader_epoch
                    } else {
                        -1
                    };
                    if !described {
                        out.error_code = TOPIC_AUTHORIZATION_FAILED;
                        return out;
                    }
                    let answer = match leadership::leader_replica(ctx, &tp, expected) {
                        Err(refusal) => Err(refusal.error.code),
                        Ok(hosted) => {
                            // A timestamp the remote log reaches is answered later, from it.
                            let remote = (p.timestamp >= 0)
                                .then(|| remote_search(ctx, &hosted, p.timestamp))
                                .flatten();
                            let leader_epoch = hosted.leader().map_or(-1, |(_, e)| e);
                            match remote {
                                Some(remote) => {
                                    pending.push(RemoteLookup {
                                        topic_index,
                                        partition_index,
                                        tp: tp.clone(),
                                        topic_id: hosted.topic_id,
                                        remote,
                                        timestamp: p.timestamp,
                                        visible: visible_end(&hosted, read_committed),
                                        leader_epoch,
                                        with_epoch: version >= LEADER_EPOCH_VERSION_MIN,
                                    });
                                    Ok(((-1, -1), -1))
                                }
                                None => lookup(
                                    ctx,
                                    &hosted,
                                    p.timestamp,
                                    read_committed,
                                    version,
                                    &tp.to_string(),
                                )
                                .map(|found| (found, leader_epoch)),
                            }
                        }
                    };
                    match answer {
                        Ok(((offset, timestamp), leader_epoch)) => {
                            out.offset = offset;
                            out.timestamp = timestamp;
                            if version >= LEADER_EPOCH_VERSION_MIN && offset >= 0 {
                                out.leader_epoch = leader_epoch;
                            }
                        }
                        Err(code) => out.error_code = code,
                    }
                    out
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    (ListOffsetsResponse::default().with_topics(topics), pending)
}

/// A timestamp lookup the remote log answers.
pub struct RemoteLookup {
    topic_index: usize,
    partition_index: usize,
    tp: TopicPartition,
    topic_id: uuid::Uuid,
    remote: Arc<RemoteLog>,
    timestamp: i64,
    visible: i64,
    leader_epoch: i32,
    with_epoch: bool,
}

/// The remote log to search for `timestamp`: a tiered partition whose remote log holds a batch
/// that late.
fn remote_search(
    ctx: &BrokerContext,
    hosted: &HostedPartition,
    timestamp: i64,
) -> Option<Arc<RemoteLog>> {
    ctx.remote.as_ref()?;
    tiered::remote_log(ctx, hosted).filter(|r| {
        r.segments
            .iter()
            .any(|s| s.max_timestamp >= timestamp && s.end_offset >= r.log_start_offset)
    })
}

fn visible_end(hosted: &HostedPartition, read_committed: bool) -> i64 {
    if read_committed {
        hosted.log.last_stable_offset()
    } else {
        hosted.log.high_watermark()
    }
}

/// Answers the remote timestamp lookups and fills them into the response.
async fn remote_lookups(
    ctx: Arc<BrokerContext>,
    mut response: ListOffsetsResponse,
    pending: Vec<RemoteLookup>,
) -> ListOffsetsResponse {
    for p in pending {
        let found =
            tiered::offset_for_timestamp(&ctx, &p.tp, p.topic_id, &p.remote, p.timestamp).await;
        let Some(out) = response
            .topics
            .get_mut(p.topic_index)
            .and_then(|t| t.partitions.get_mut(p.partition_index))
        else {
            continue;
        };
        match found {
            Ok(Some((timestamp, offset))) if offset < p.visible => {
                out.offset = offset;
                out.timestamp = timestamp;
                if p.with_epoch {
                    out.leader_epoch = p.leader_epoch;
                }
            }
            Ok(_) => {}
            Err(e) => out.error_code = e.code,
        }
    }
    response
}

/// (offset, timestamp) for one partition; -1/-1 when no record matches. `read_committed` sees
/// only offsets below the last stable offset (Kafka's `isolation_level` 1).
fn lookup(
    ctx: &BrokerContext,
    hosted: &HostedPartition,
    timestamp: i64,
    read_committed: bool,
    version: i16,
    context: &str,
) -> Result<(i64, i64), i16> {
    let log = &hosted.log;
    let visible = if read_committed {
        log.last_stable_offset()
    } else {
        log.high_watermark()
    };
    let confirmed = hosted
        .epoch_start_offset()
        .is_none_or(|start| log.high_watermark() >= start);
    match timestamp {
        LATEST | MAX_TIMESTAMP if !confirmed => Err(OFFSET_NOT_AVAILABLE),
        LATEST => Ok((visible, -1)),
        EARLIEST => Ok((tiered::log_start_offset(ctx, hosted), -1)),
        EARLIEST_LOCAL_TIMESTAMP if version >= EARLIEST_LOCAL_VERSION_MIN => {
            Ok((log.log_start_offset(), -1))
        }
        LATEST_TIERED_TIMESTAMP if version >= LATEST_TIERED_VERSION_MIN => {
            Ok((tiered::latest_tiered_offset(ctx, hosted), -1))
        }
        EARLIEST_PENDING_UPLOAD_TIMESTAMP if version >= EARLIEST_PENDING_UPLOAD_VERSION_MIN => {
            Ok((tiered::earliest_pending_upload_offset(ctx, hosted), -1))
        }
        MAX_TIMESTAMP if version < MAX_TIMESTAMP_VERSION_MIN => Err(UNSUPPORTED_VERSION),
        MAX_TIMESTAMP => crate::blocking::run(|| log.max_timestamp())
            .map(|found| {
                found
                    .filter(|&(offset, _)| offset < visible)
                    .unwrap_or((-1, -1))
            })
            .map_err(|e| error_codes::from_store(&e, context).code),
        ts if ts < 0 => Err(UNSUPPORTED_VERSION),
        // Only offsets below the high watermark (last stable offset) are visible to consumers.
        // May read the time index and scan a segment: off the shared runtime thread.
        ts => crate::blocking::run(|| log.offset_for_timestamp(ts))
            .map(|found| {
                found
                    .filter(|&(offset, _)| offset < visible)
                    .unwrap_or((-1, -1))
            })
            .map_err(|e| error_codes::from_store(&e, context).code),
    }
}
