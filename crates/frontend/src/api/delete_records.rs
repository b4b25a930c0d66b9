//! DeleteRecords (key 21): advance a partition's log start offset. Offset -1 means "up to the high
//! watermark"; an offset above the high watermark is OFFSET_OUT_OF_RANGE, as in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::leadership;
use crate::authz::Authz;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, NONE, OFFSET_OUT_OF_RANGE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DeleteRecords: its key, versions, handler and error codes, for [`crate::registry`].
    DeleteRecords, versions 0..=2, DeleteRecordsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request)),
}

response_fields!(DeleteRecordsResponse: errors[topics[partitions[error_code]]], throttle_time_ms);

/// DeleteRecords' "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let allowed = authz.topic(AclOperation::Delete, &name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| delete_before(ctx, allowed, &name, p.partition_index, p.offset))
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

/// One partition: moves its log start to `offset` (or the high watermark).
fn delete_before(
    ctx: &Arc<BrokerContext>,
    allowed: bool,
    name: &str,
    partition: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let out = DeleteRecordsPartitionResult::default().with_partition_index(partition);
    let log = match leadership::led_log(ctx, allowed, name, partition) {
        Ok(log) => log,
        Err(code) => return out.with_low_watermark(-1).with_error_code(code),
    };
    let high_watermark = log.high_watermark();
    let target = if offset == HIGH_WATERMARK {
        high_watermark
    } else {
        offset
    };
    if target < 0 || target > high_watermark {
        return out
            .with_low_watermark(-1)
            .with_error_code(OFFSET_OUT_OF_RANGE);
    }
    match log.delete_records_before(target) {
        Ok(low) => out.with_low_watermark(low).with_error_code(NONE),
        Err(e) => out
            .with_low_watermark(-1)
            .with_error_code(error_codes::from_store(&e, &format!("{name}-{partition}")).code),
    }
}
