//! Metadata (key 3): brokers, cluster id, controller, and topics with their partitions.
//!
//! `topics = null` (or an empty list at v0) means every topic; `[]` at v1+ means none. A missing
//! topic is created when the request allows it (v4+ `allow_auto_topic_creation`, always before)
//! and `auto.create.topics.enable` is on; otherwise UNKNOWN_TOPIC_OR_PARTITION. v12+ may name
//! topics by id only. Every partition is led by this broker at leader epoch [`LEADER_EPOCH`].

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use millrace_cluster::{validate_topic_name, NewTopic, TopicMetadata, LEADER_EPOCH};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::error_codes::{
    self, INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::BrokerContext;

/// Topics Kafka marks internal.
pub const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let cluster = &ctx.cluster;
    let node_id = cluster.node_id();
    let mut response = MetadataResponse::default().with_brokers(
        cluster
            .brokers()
            .into_iter()
            .map(|b| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.node_id))
                    .with_host(str_bytes(&b.host))
                    .with_port(i32::from(b.port))
            })
            .collect(),
    );
    if version >= 1 {
        response.controller_id = BrokerId(cluster.controller_id());
    }
    if version >= 2 {
        response.cluster_id = Some(str_bytes(&cluster.cluster_id()));
    }

    let all = match &request.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let auto_create =
        (version < 4 || request.allow_auto_topic_creation) && cluster.config.auto_create_topics();
    let topics = if all {
        cluster
            .metadata
            .topics()
            .iter()
            .map(|t| describe(t, node_id, version))
            .collect()
    } else {
        request
            .topics
            .iter()
            .flatten()
            .map(|wanted| match &wanted.name {
                Some(name) => lookup_by_name(ctx, name.0.as_str(), auto_create, version),
                None => lookup_by_id(ctx, wanted.topic_id, version),
            })
            .collect()
    };
    response.topics = topics;
    response
}

fn lookup_by_name(
    ctx: &Arc<BrokerContext>,
    name: &str,
    auto_create: bool,
    version: i16,
) -> MetadataResponseTopic {
    let cluster = &ctx.cluster;
    let node_id = cluster.node_id();
    if let Some(topic) = cluster.metadata.topic(name) {
        return describe(&topic, node_id, version);
    }
    let error = |code: i16| {
        MetadataResponseTopic::default()
            .with_name(Some(topic_name(name)))
            .with_error_code(code)
    };
    if validate_topic_name(name).is_err() {
        return error(INVALID_TOPIC_EXCEPTION);
    }
    if !auto_create {
        return error(UNKNOWN_TOPIC_OR_PARTITION);
    }
    let new = NewTopic {
        name: name.to_string(),
        ..NewTopic::default()
    };
    match cluster.create_topic(&new) {
        Ok(topic) => describe(&topic, node_id, version),
        // Lost a race with another creator: describe what is there now.
        Err(millrace_cluster::AdminError::TopicAlreadyExists(_)) => {
            match cluster.metadata.topic(name) {
                Some(topic) => describe(&topic, node_id, version),
                None => error(UNKNOWN_TOPIC_OR_PARTITION),
            }
        }
        Err(e) => error(error_codes::from_admin(&e, name).code),
    }
}

fn lookup_by_id(ctx: &Arc<BrokerContext>, id: Uuid, version: i16) -> MetadataResponseTopic {
    match ctx.cluster.metadata.topic_by_id(id) {
        Some(topic) => describe(&topic, ctx.cluster.node_id(), version),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(UNKNOWN_TOPIC_ID),
    }
}

fn describe(topic: &TopicMetadata, node_id: i32, version: i16) -> MetadataResponseTopic {
    let partitions = (0..topic.partitions)
        .map(|p| {
            let mut partition = MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(node_id))
                .with_replica_nodes(vec![BrokerId(node_id)])
                .with_isr_nodes(vec![BrokerId(node_id)]);
            if version >= 7 {
                partition.leader_epoch = LEADER_EPOCH;
            }
            partition
        })
        .collect();
    let mut out = MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_partitions(partitions);
    if version >= 1 {
        out.is_internal = INTERNAL_TOPICS.contains(&topic.name.as_str());
    }
    if version >= 10 {
        out.topic_id = topic.topic_id;
    }
    out
}
