//! ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3, v7+), or the first offset
//! whose timestamp is at or after a given time.
//!
//! "Latest" is the high watermark (equal to the last stable offset, with no transactions).

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use millrace_cluster::LEADER_EPOCH;
use millrace_store::PartitionLog;

use crate::error_codes::{self, UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_VERSION};
use crate::BrokerContext;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// First version that knows MAX_TIMESTAMP.
const MAX_TIMESTAMP_VERSION_MIN: i16 = 7;
/// First version with `leader_epoch` in the response.
const LEADER_EPOCH_VERSION_MIN: i16 = 4;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let mut out = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let answer = match ctx.cluster.partition_log(&name, p.partition_index) {
                        None => Err(UNKNOWN_TOPIC_OR_PARTITION),
                        Some(log) => lookup(
                            &log,
                            p.timestamp,
                            version,
                            &format!("{name}-{}", p.partition_index),
                        ),
                    };
                    match answer {
                        Ok((offset, timestamp)) => {
                            out.offset = offset;
                            out.timestamp = timestamp;
                            if version >= LEADER_EPOCH_VERSION_MIN && offset >= 0 {
                                out.leader_epoch = LEADER_EPOCH;
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
    ListOffsetsResponse::default().with_topics(topics)
}

/// (offset, timestamp) for one partition; -1/-1 when no record matches.
fn lookup(
    log: &PartitionLog,
    timestamp: i64,
    version: i16,
    context: &str,
) -> Result<(i64, i64), i16> {
    match timestamp {
        LATEST => Ok((log.high_watermark(), -1)),
        EARLIEST => Ok((log.log_start_offset(), -1)),
        MAX_TIMESTAMP if version < MAX_TIMESTAMP_VERSION_MIN => Err(UNSUPPORTED_VERSION),
        MAX_TIMESTAMP => log
            .max_timestamp()
            .map(|found| {
                found
                    .filter(|&(offset, _)| offset < log.high_watermark())
                    .unwrap_or((-1, -1))
            })
            .map_err(|e| error_codes::from_store(&e, context).code),
        ts if ts < 0 => Err(UNSUPPORTED_VERSION),
        // Only offsets below the high watermark are visible to consumers.
        ts => log
            .offset_for_timestamp(ts)
            .map(|found| {
                found
                    .filter(|&(offset, _)| offset < log.high_watermark())
                    .unwrap_or((-1, -1))
            })
            .map_err(|e| error_codes::from_store(&e, context).code),
    }
}
