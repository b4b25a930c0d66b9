//! Metadata (key 3): live brokers, cluster id, controller, and topics with their partitions'
//! leaders, leader epochs, replicas, ISR and offline replicas — all from the committed metadata
//! image, the same on every broker.
//!
//! `topics = null` (or an empty list at v0) means every topic; `[]` at v1+ means none. A missing
//! topic is created when the request allows it (v4+ `allow_auto_topic_creation`, always before)
//! and `auto.create.topics.enable` is on: the controller commits it, and this answer says
//! LEADER_NOT_AVAILABLE for it unless the image here already shows it (the client asks again, as
//! with Kafka). v12+ may name topics by id only. A partition without a leader answers
//! LEADER_NOT_AVAILABLE.
//!
//! With an authorizer: topics the client may not Describe are left out of "every topic" and
//! answer TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs Create on the cluster or the
//! topic.
//!
//! `controller_id`: the active controller when it is a live broker, else this broker — as Kafka's
//! KRaft brokers do, since clients send admin requests to any broker and brokers forward them.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use millrace_cluster::image::{MetadataImage, TopicImage};
use millrace_cluster::validate_topic_name;
use millrace_controller::messages::TopicSpec;
use millrace_controller::{ControllerRequest, ControllerResponse};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{
    self, INVALID_TOPIC_EXCEPTION, LEADER_NOT_AVAILABLE, TOPIC_ALREADY_EXISTS,
    TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE_NAME};

api_handler! {
    /// Metadata: its key, versions, handler and error codes, for [`crate::registry`].
    Metadata, versions 0..=13, MetadataRequest,
    |call, request| {
        let listener = call.session.listener.clone();
        Reply::later(handle(call.ctx.clone(), call.authz, request, call.version, listener))
    },
}

// The top-level code exists from v13 (it is 0 below that).
response_fields!(
    MetadataResponse:
    errors[error_code, topics[error_code, partitions[error_code]]],
    throttle_time_ms
);

/// Topics Kafka marks internal.
pub const INTERNAL_TOPICS: &[&str] = &[
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// First version with `include_topic_authorized_operations` (and the cluster's, until v10).
const TOPIC_AUTHORIZED_OPERATIONS_VERSION_MIN: i16 = 8;
/// Last version with `include_cluster_authorized_operations` (DescribeCluster took it over).
const CLUSTER_AUTHORIZED_OPERATIONS_VERSION_MAX: i16 = 10;

/// How long an auto-creation may wait for the controller before the answer goes out without it.
const AUTO_CREATE_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for a just-created topic to reach this broker's image.
const IMAGE_CATCH_UP_WAIT: Duration = Duration::from_millis(500);

/// The `controller_id` clients see.
pub fn controller_id(ctx: &BrokerContext) -> i32 {
    let image = ctx.cluster.image();
    match ctx.controller.controller_id() {
        Some(id) if image.broker(id).is_some_and(|b| !b.fenced) => id,
        _ => ctx.cluster.node_id(),
    }
}

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: MetadataRequest,
    version: i16,
    listener: Arc<str>,
) -> MetadataResponse {
    let all = match &request.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let auto_create = (version < 4 || request.allow_auto_topic_creation)
        && ctx.cluster.config.auto_create_topics();
    let topics = if all {
        let image = ctx.cluster.image();
        // Topics the client may not describe are left out, as if they did not exist.
        image
            .topics
            .values()
            .filter(|t| authz.topic(AclOperation::Describe, &t.name))
            .map(|t| describe(&image, t, version))
            .collect()
    } else {
        let mut out = Vec::new();
        for wanted in request.topics.iter().flatten() {
            out.push(match &wanted.name {
                Some(name) => {
                    let name = name.0.as_str();
                    if !authz.topic(AclOperation::Describe, name) {
                        // Named but not describable: refused before looking, so its existence
                        // is not disclosed.
                        MetadataResponseTopic::default()
                            .with_name(Some(topic_name(name)))
                            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    } else {
                        // Auto-creation needs Create on the cluster or on the topic.
                        let may_create = auto_create
                            && (authz.cluster(AclOperation::Create)
                                || authz.topic(AclOperation::Create, name));
                        lookup_by_name(&ctx, name, auto_create, may_create, version).await
                    }
                }
                None => lookup_by_id(&ctx, &authz, wanted.topic_id, version),
            });
        }
        out
    };
    let mut topics: Vec<MetadataResponseTopic> = topics;
    if version >= TOPIC_AUTHORIZED_OPERATIONS_VERSION_MIN
        && request.include_topic_authorized_operations
    {
        for topic in topics.iter_mut().filter(|t| t.error_code == 0) {
            if let Some(ops) = topic
                .name
                .as_ref()
                .and_then(|n| authz.operations(ResourceType::Topic, n.0.as_str()))
            {
                topic.topic_authorized_operations = ops;
            }
        }
    }
    // The broker list last, so it includes whatever the lookups waited for. Each broker as the
    // client's listener reaches it; one without that listener is left out, as in Kafka.
    let image = ctx.cluster.image();
    let mut response = MetadataResponse::default().with_brokers(
        image
            .live_brokers()
            .filter_map(|b| {
                let (host, port) = b.endpoint_for(&listener)?;
                let mut broker = MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.node_id))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port));
                if version >= 1 {
                    broker.rack = b.rack.as_deref().map(str_bytes);
                }
                Some(broker)
            })
            .collect(),
    );
    if version >= 1 {
        response.controller_id = BrokerId(controller_id(&ctx));
    }
    if version >= 2 {
        response.cluster_id = image.cluster_id.as_deref().map(str_bytes);
    }
    if (TOPIC_AUTHORIZED_OPERATIONS_VERSION_MIN..=CLUSTER_AUTHORIZED_OPERATIONS_VERSION_MAX)
        .contains(&version)
        && request.include_cluster_authorized_operations
    {
        // Kafka: the operations when the client may Describe the cluster, else none (0).
        if let Some(ops) = authz.operations(ResourceType::Cluster, CLUSTER_RESOURCE_NAME) {
            response.cluster_authorized_operations = if authz.cluster(AclOperation::Describe) {
                ops
            } else {
                0
            };
        }
    }
    response.topics = topics;
    response
}

async fn lookup_by_name(
    ctx: &Arc<BrokerContext>,
    name: &str,
    auto_create: bool,
    may_create: bool,
    version: i16,
) -> MetadataResponseTopic {
    {
        let image = ctx.cluster.image();
        if let Some(topic) = image.topic(name) {
            return describe(&image, topic, version);
        }
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
    if !may_create {
        return error(TOPIC_AUTHORIZATION_FAILED);
    }
    let request = ControllerRequest::CreateTopics {
        topics: vec![TopicSpec {
            name: name.to_string(),
            ..TopicSpec::default()
        }],
        validate_only: false,
    };
    let code = match ctx.controller.request(request, AUTO_CREATE_WAIT).await {
        ControllerResponse::CreateTopics { results } => match results.into_iter().next() {
            Some((_, Ok(_))) => LEADER_NOT_AVAILABLE,
            Some((_, Err(e))) => match error_codes::from_controller(&e, name).code {
                // Lost a race with another creator.
                TOPIC_ALREADY_EXISTS => LEADER_NOT_AVAILABLE,
                code => code,
            },
            None => LEADER_NOT_AVAILABLE,
        },
        ControllerResponse::Error { error } => error_codes::from_controller(&error, name).code,
        _ => LEADER_NOT_AVAILABLE,
    };
    if code == LEADER_NOT_AVAILABLE {
        // Committed: describe it if this broker's image has it within a moment.
        if let Some(described) = wait_for_topic(ctx, name, version).await {
            return described;
        }
    }
    error(code)
}

async fn wait_for_topic(
    ctx: &Arc<BrokerContext>,
    name: &str,
    version: i16,
) -> Option<MetadataResponseTopic> {
    let mut changes = ctx.cluster.shared_image().subscribe();
    let deadline = tokio::time::Instant::now() + IMAGE_CATCH_UP_WAIT;
    loop {
        {
            let image = ctx.cluster.image();
            if let Some(topic) = image.topic(name) {
                let all_led = topic.partitions.iter().all(|p| p.has_leader());
                if all_led {
                    // And this broker's replicas act on it (a Produce right after finds its leader).
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    ctx.replicas.wait_applied(image.offset, left).await;
                    return Some(describe(&image, topic, version));
                }
            }
        }
        if tokio::time::timeout_at(deadline, changes.changed())
            .await
            .is_err()
        {
            return None;
        }
    }
}

fn lookup_by_id(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    id: Uuid,
    version: i16,
) -> MetadataResponseTopic {
    let image = ctx.cluster.image();
    match image.topic_by_id(id) {
        // Topic ids are not secret (Kafka): the id comes back, the name does not.
        Some(topic) if !authz.topic(AclOperation::Describe, &topic.name) => {
            MetadataResponseTopic::default()
                .with_topic_id(id)
                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
        }
        Some(topic) => describe(&image, topic, version),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(UNKNOWN_TOPIC_ID),
    }
}

fn describe(image: &MetadataImage, topic: &TopicImage, version: i16) -> MetadataResponseTopic {
    let ids = |v: &[i32]| v.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(index, reg)| {
            let mut partition = MetadataResponsePartition::default()
                .with_partition_index(i32::try_from(index).unwrap_or(i32::MAX))
                .with_leader_id(BrokerId(reg.leader))
                .with_replica_nodes(ids(&reg.replicas))
                .with_isr_nodes(ids(&reg.isr));
            if !reg.has_leader() {
                partition.error_code = LEADER_NOT_AVAILABLE;
            }
            if version >= 5 {
                let offline: Vec<i32> = reg
                    .replicas
                    .iter()
                    .copied()
                    .filter(|b| image.broker(*b).is_none_or(|r| r.fenced))
                    .collect();
                partition.offline_replicas = ids(&offline);
            }
            if version >= 7 {
                partition.leader_epoch = reg.leader_epoch;
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
