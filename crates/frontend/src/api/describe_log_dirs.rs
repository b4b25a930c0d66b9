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
use crate::BrokerContext;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: DescribeLogDirsRequest,
    _version: i16,
) -> DescribeLogDirsResponse {
    let cluster = &ctx.cluster;
    let wanted: Option<BTreeMap<String, Vec<i32>>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect()
    });
    let mut topics = Vec::new();
    for topic in cluster.metadata.topics() {
        let partitions: Vec<i32> = match &wanted {
            None => (0..topic.partitions).collect(),
            Some(w) => match w.get(&topic.name) {
                Some(ps) => ps
                    .iter()
                    .copied()
                    .filter(|p| (0..topic.partitions).contains(p))
                    .collect(),
                None => continue,
            },
        };
        let partitions = partitions
            .into_iter()
            .filter_map(|p| {
                let log = cluster.partition_log(&topic.name, p)?;
                Some(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p)
                        .with_partition_size(log.size_bytes() as i64)
                        .with_offset_lag(0),
                )
            })
            .collect();
        topics.push(
            DescribeLogDirsTopic::default()
                .with_name(topic_name(&topic.name))
                .with_partitions(partitions),
        );
    }
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&ctx.data_dir))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1);
    DescribeLogDirsResponse::default().with_results(vec![result])
}
