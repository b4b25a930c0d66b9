//! DescribeLogDirs (key 35): the one data directory and each partition's size on disk.
//! Total and usable bytes are reported as unknown (-1): reading them needs `statvfs`, which is
//! `unsafe` through libc, and the crate forbids unsafe code.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeLogDirs: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeLogDirs, versions 1..=4, DescribeLogDirsRequest,
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
    let cluster = &ctx.cluster;
    let wanted: Option<BTreeMap<String, Vec<i32>>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect()
    });
    // The replicas hosted here, by topic.
    let mut hosted: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    let _ = cluster;
    let mut replicas = ctx.replicas.hosted();
    replicas.sort_by(|a, b| a.tp.cmp(&b.tp));
    for replica in replicas {
        let tp = &replica.tp;
        let wanted_here = match &wanted {
            None => true,
            Some(w) => w
                .get(&tp.topic)
                .is_some_and(|ps| ps.contains(&tp.partition)),
        };
        if !wanted_here {
            continue;
        }
        // Kafka's offset lag: how far this replica's log end is behind the high watermark.
        let lag = (replica.log.high_watermark() - replica.log.log_end_offset()).max(0);
        hosted.entry(tp.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(tp.partition)
                .with_partition_size(replica.log.size_bytes() as i64)
                .with_offset_lag(lag),
        );
    }
    let topics: Vec<DescribeLogDirsTopic> = hosted
        .into_iter()
        .map(|(name, partitions)| {
            DescribeLogDirsTopic::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&ctx.data_dir))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1);
    DescribeLogDirsResponse::default().with_results(vec![result])
}
