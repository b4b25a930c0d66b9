//! DescribeLogDirs (key 35): every log dir of this broker (`log.dirs`, in order), each hosted
//! replica's size on disk, replicas being moved into a dir as future replicas (`is_future_key`),
//! and (v4) the file system's total and usable bytes from `statvfs` (`Store::describe_log_dirs`).
//! An offline dir is answered with KAFKA_STORAGE_ERROR and no partitions, as Kafka answers it.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{CLUSTER_AUTHORIZATION_FAILED, KAFKA_STORAGE_ERROR};
use millrace_cluster::acl::AclOperation;
use millrace_store::{LogDirInfo, TopicPartition};

use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeLogDirs: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeLogDirs, versions 1..=5, DescribeLogDirsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

// The top-level code exists from v3 (it is 0 below that).
response_fields!(
    DescribeLogDirsResponse:
    errors[error_code, results[error_code]],
    throttle_time_ms
);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeLogDirsRequest,
    _version: i16,
) -> DescribeLogDirsResponse {
    if !authz.cluster(AclOperation::Describe) {
        return DescribeLogDirsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED);
    }
    let wanted: Option<BTreeMap<String, Vec<i32>>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect()
    });
    let is_wanted = |tp: &TopicPartition| match &wanted {
        None => true,
        Some(w) => w
            .get(&tp.topic)
            .is_some_and(|ps| ps.contains(&tp.partition)),
    };
    let results = ctx
        .replicas
        .store()
        .describe_log_dirs()
        .into_iter()
        .map(|dir| describe_dir(ctx, dir, &is_wanted))
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

/// One log dir's entry.
fn describe_dir(
    ctx: &Arc<BrokerContext>,
    dir: LogDirInfo,
    is_wanted: &dyn Fn(&TopicPartition) -> bool,
) -> DescribeLogDirsResult {
    let path = dir.path.display().to_string();
    let out = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&path))
        .with_total_bytes(dir.total_bytes.map_or(-1, clamp))
        .with_usable_bytes(dir.usable_bytes.map_or(-1, clamp));
    if dir.offline.is_some() {
        return out.with_error_code(KAFKA_STORAGE_ERROR);
    }
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for (tp, size) in dir.partitions.iter().filter(|(tp, _)| is_wanted(tp)) {
        // Kafka's offset lag: how far this replica's log end is behind the high watermark.
        let lag = ctx.replicas.store().partition(tp).map_or(0, |log| {
            (log.high_watermark() - log.log_end_offset()).max(0)
        });
        by_topic.entry(tp.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(tp.partition)
                .with_partition_size(clamp(*size))
                .with_offset_lag(lag),
        );
    }
    for (tp, copied, lag) in dir.futures.iter().filter(|(tp, _, _)| is_wanted(tp)) {
        by_topic.entry(tp.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(tp.partition)
                .with_partition_size(clamp(*copied))
                .with_offset_lag(*lag)
                .with_is_future_key(true),
        );
    }
    let topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            DescribeLogDirsTopic::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    out.with_topics(topics)
}

fn clamp(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
