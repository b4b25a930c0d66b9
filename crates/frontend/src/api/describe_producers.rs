//! DescribeProducers (key 61): the producers a partition tracks (producer id, producer
//! epoch, last sequence, last timestamp), with the coordinator epoch of each producer's last
//! transaction marker and the first offset of its open transaction (-1 when none).

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use millrace_store::PartitionLog;

use super::leadership;
use crate::authz::Authz;
use millrace_cluster::acl::AclOperation;

use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeProducers: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeProducers, versions 0..=0, DescribeProducersRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request)),
}

response_fields!(
    DescribeProducersResponse:
    errors[topics[partitions[error_code]]],
    throttle_time_ms
);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request.topics.into_iter();
    DescribeProducersResponse::default()
        .with_topics(topics.map(|t| describe_topic(ctx, authz, t)).collect())
}

/// One topic: each partition asked for, if the client may read the topic.
fn describe_topic(ctx: &Arc<BrokerContext>, authz: &Authz, topic: TopicRequest) -> TopicResponse {
    let name = topic.name.0.to_string();
    let allowed = authz.topic(AclOperation::Read, &name);
    let partitions = topic.partition_indexes.iter().map(|&p| {
        let log = leadership::led_log(ctx, allowed, &name, p);
        describe_partition(p, log)
    });
    TopicResponse::default()
        .with_name(topic.name)
        .with_partitions(partitions.collect())
}

/// One partition: the producers its log tracks.
fn describe_partition(partition: i32, log: Result<Arc<PartitionLog>, i16>) -> PartitionResponse {
    let out = PartitionResponse::default().with_partition_index(partition);
    let log = match log {
        Ok(log) => log,
        Err(code) => return out.with_error_code(code),
    };
    let producers = log
        .producer_states()
        .into_iter()
        .map(|s| {
            ProducerState::default()
                .with_producer_id(ProducerId(s.producer_id))
                .with_producer_epoch(i32::from(s.producer_epoch))
                .with_last_sequence(s.last_sequence)
                .with_last_timestamp(s.last_timestamp)
                .with_coordinator_epoch(s.coordinator_epoch)
                .with_current_txn_start_offset(s.current_txn_first_offset.unwrap_or(-1))
        })
        .collect();
    out.with_active_producers(producers)
}
