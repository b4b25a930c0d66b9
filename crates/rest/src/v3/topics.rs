//! `/v3/clusters/{cluster_id}/topics[/{topic_name}]`: list, create, get, grow (PATCH) and delete
//! topics, through Metadata, CreateTopics, CreatePartitions and DeleteTopics made as the caller.
//!
//! Creating answers 201 with the topic and a `Location` header (200 with `validate_only`);
//! deleting answers 204. The Kafka handlers answer once this broker's metadata image shows the
//! change, so a GET right after a create (or delete) sees it. A topic the caller may not Describe
//! is not listed, and naming it answers 403.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::create_partitions::CreatePartitions;
use millrace_frontend::api::create_topics::CreateTopics;
use millrace_frontend::api::delete_topics::DeleteTopics;
use millrace_frontend::error_codes as kafka;
use serde::{Deserialize, Serialize};

use super::clusters::{metadata, Topics};
use super::errors;
use super::request::{present, JsonBody, PathParams, QueryParams, Urls};
use super::resource::{Collection, Metadata, Related};
use crate::{Caller, RestApi, RestError};

const CREATE_TOPICS_VERSION: i16 = 7;
const CREATE_PARTITIONS_VERSION: i16 = 3;
const DELETE_TOPICS_VERSION: i16 = 6;
/// How long the controller may take to create, grow or delete a topic.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
/// Kafka's "not computed" value of `topic_authorized_operations`.
const OPERATIONS_NOT_COMPUTED: i32 = i32::MIN;

/// Kafka's ACL operations by bit (AclOperation codes), as v3 names them.
const OPERATION_NAMES: &[(i32, &str)] = &[
    (3, "READ"),
    (4, "WRITE"),
    (5, "CREATE"),
    (6, "DELETE"),
    (7, "ALTER"),
    (8, "DESCRIBE"),
    (9, "CLUSTER_ACTION"),
    (10, "DESCRIBE_CONFIGS"),
    (11, "ALTER_CONFIGS"),
    (12, "IDEMPOTENT_WRITE"),
];
/// What a topic allows without an authorizer: every operation that applies to topics.
const TOPIC_OPERATIONS_ALL: &[&str] = &[
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
];

/// Confluent's `TopicData`.
#[derive(Debug, Serialize)]
pub struct TopicData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    topic_name: String,
    is_internal: bool,
    replication_factor: i32,
    partitions_count: i32,
    partitions: Related,
    configs: Related,
    partition_reassignments: Related,
    #[serde(skip_serializing_if = "Option::is_none")]
    authorized_operations: Option<Vec<&'static str>>,
}

/// What a topic's answer says, whatever request it comes from.
struct TopicFacts<'a> {
    name: &'a str,
    is_internal: bool,
    replication_factor: i32,
    partitions_count: i32,
    authorized_operations: Option<Vec<&'static str>>,
}

fn topic_data(urls: &Urls, cluster_id: &str, topic: TopicFacts<'_>) -> TopicData {
    let at = |tail: &[&str]| {
        let mut segments = vec!["clusters", cluster_id, "topics", topic.name];
        segments.extend_from_slice(tail);
        urls.v3(&segments)
    };
    TopicData {
        kind: "KafkaTopic",
        metadata: Metadata::new(at(&[]), cluster_id, &[("topic", topic.name)]),
        cluster_id: cluster_id.to_string(),
        topic_name: topic.name.to_string(),
        is_internal: topic.is_internal,
        replication_factor: topic.replication_factor,
        partitions_count: topic.partitions_count,
        partitions: Related::to(at(&["partitions"])),
        configs: Related::to(at(&["configs"])),
        partition_reassignments: Related::to(at(&["partitions", "-", "reassignment"])),
        authorized_operations: topic.authorized_operations,
    }
}

fn from_metadata<'a>(topic: &'a MetadataResponseTopic, operations: bool) -> TopicFacts<'a> {
    TopicFacts {
        name: topic.name.as_ref().map_or("", |n| n.0.as_str()),
        is_internal: topic.is_internal,
        // Kafka's admin client reports the first partition's replica count.
        replication_factor: topic
            .partitions
            .iter()
            .min_by_key(|p| p.partition_index)
            .map_or(0, |p| {
                i32::try_from(p.replica_nodes.len()).unwrap_or(i32::MAX)
            }),
        partitions_count: i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX),
        authorized_operations: operations
            .then(|| operation_names(topic.topic_authorized_operations)),
    }
}

/// The names of the operations set in Kafka's `authorized_operations` bit field.
fn operation_names(bits: i32) -> Vec<&'static str> {
    if bits == OPERATIONS_NOT_COMPUTED {
        return TOPIC_OPERATIONS_ALL.to_vec();
    }
    OPERATION_NAMES
        .iter()
        .filter(|(bit, _)| bits & (1 << bit) != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// The topic named `topic` as `caller` sees it: 404 40403 if it does not exist (or cannot, its
/// name being invalid), 403 if the caller may not Describe it.
pub async fn describe_topic(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    topic: &str,
    include_operations: bool,
) -> Result<MetadataResponseTopic, RestError> {
    let response = metadata(
        api,
        caller,
        cluster_id,
        Topics::Named(topic),
        include_operations,
    )
    .await?;
    let found = response
        .topics
        .into_iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic));
    match found {
        Some(t) if t.error_code == kafka::NONE => Ok(t),
        Some(t) if t.error_code == kafka::INVALID_TOPIC_EXCEPTION => {
            Err(errors::unknown_topic_or_partition())
        }
        Some(t) => Err(errors::kafka(t.error_code, None, &format!("topic {topic}"))),
        None => Err(errors::unknown_topic_or_partition()),
    }
}

/// `GET /v3/clusters/{cluster_id}/topics`: every topic the caller may Describe, by name.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams(cluster_id): PathParams<String>,
) -> Result<Json<Collection<TopicData>>, RestError> {
    let response = metadata(&api, &caller, &cluster_id, Topics::All, false).await?;
    let mut topics: Vec<&MetadataResponseTopic> = response
        .topics
        .iter()
        .filter(|t| t.error_code == kafka::NONE && t.name.is_some())
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(Collection::new(
        "KafkaTopicList",
        urls.v3(&["clusters", &cluster_id, "topics"]),
        topics
            .into_iter()
            .map(|t| topic_data(&urls, &cluster_id, from_metadata(t, false)))
            .collect(),
    )))
}

/// `include_authorized_operations` of `GET …/topics/{topic_name}`.
#[derive(Debug, Deserialize)]
pub struct GetTopicQuery {
    #[serde(default)]
    include_authorized_operations: bool,
}

/// `GET /v3/clusters/{cluster_id}/topics/{topic_name}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, topic)): PathParams<(String, String)>,
    QueryParams(query): QueryParams<GetTopicQuery>,
) -> Result<Json<TopicData>, RestError> {
    let operations = query.include_authorized_operations;
    let described = describe_topic(&api, &caller, &cluster_id, &topic, operations).await?;
    Ok(Json(topic_data(
        &urls,
        &cluster_id,
        from_metadata(&described, operations),
    )))
}

/// One `configs` entry of a create request.
#[derive(Debug, Deserialize)]
pub struct ConfigEntry {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

/// Confluent's `CreateTopicRequestData`.
#[derive(Debug, Deserialize)]
pub struct CreateTopicBody {
    topic_name: String,
    #[serde(default, deserialize_with = "present")]
    partitions_count: Option<i32>,
    #[serde(default, deserialize_with = "present")]
    replication_factor: Option<i16>,
    /// Partition id → broker ids.
    #[serde(default, deserialize_with = "present")]
    replicas_assignments: Option<BTreeMap<i32, Vec<i32>>>,
    #[serde(default, deserialize_with = "present")]
    configs: Option<Vec<ConfigEntry>>,
    #[serde(default, deserialize_with = "present")]
    validate_only: Option<bool>,
}

/// `POST /v3/clusters/{cluster_id}/topics`: 201 and the topic (200 with `validate_only`).
pub async fn create(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams(cluster_id): PathParams<String>,
    JsonBody(body): JsonBody<CreateTopicBody>,
) -> Result<Response, RestError> {
    metadata(&api, &caller, &cluster_id, Topics::None, false).await?;
    if millrace_cluster::validate_topic_name(&body.topic_name).is_err() {
        return Err(errors::invalid_payload("Invalid topic name."));
    }
    let validate_only = body.validate_only.unwrap_or(false);
    let assignments: Vec<CreatableReplicaAssignment> = body
        .replicas_assignments
        .iter()
        .flatten()
        .map(|(partition, brokers)| {
            CreatableReplicaAssignment::default()
                .with_partition_index(*partition)
                .with_broker_ids(brokers.iter().copied().map(BrokerId).collect())
        })
        .collect();
    // Explicit assignments decide the partition count and replication factor, as in Kafka's
    // NewTopic.
    let (partitions, replication_factor) = if assignments.is_empty() {
        (
            body.partitions_count.unwrap_or(-1),
            body.replication_factor.unwrap_or(-1),
        )
    } else {
        (-1, -1)
    };
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(body.topic_name.clone())))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_assignments(assignments)
        .with_configs(
            body.configs
                .iter()
                .flatten()
                .map(|c| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(c.name.clone()))
                        .with_value(c.value.clone().map(StrBytes::from_string))
                })
                .collect(),
        );
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_validate_only(validate_only);
    let response = api
        .gateway
        .call::<CreateTopics>(&caller, CREATE_TOPICS_VERSION, request)
        .await?;
    let what = format!("topic {}", body.topic_name);
    let result =
        response.topics.into_iter().next().ok_or_else(|| {
            RestError::internal(format!("{what}: CreateTopics answered no topic"))
        })?;
    if result.error_code != kafka::NONE {
        return Err(errors::kafka(
            result.error_code,
            result.error_message.as_deref(),
            &what,
        ));
    }
    // Without DescribeConfigs on the topic Kafka leaves the numbers out (-1); then the request's
    // own, as Confluent answers.
    let partitions_count = match result.num_partitions {
        n if n >= 0 => n,
        _ => body.partitions_count.unwrap_or(0).max(0),
    };
    let replication_factor = match result.replication_factor {
        n if n >= 0 => i32::from(n),
        _ => i32::from(body.replication_factor.unwrap_or(0).max(0)),
    };
    let data = topic_data(
        &urls,
        &cluster_id,
        TopicFacts {
            name: &body.topic_name,
            is_internal: false,
            replication_factor,
            partitions_count,
            authorized_operations: None,
        },
    );
    let status = if validate_only {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let location = data.metadata.self_url.clone();
    Ok((status, [(LOCATION, location)], Json(data)).into_response())
}

/// Confluent's `UpdatePartitionCountRequestData`.
#[derive(Debug, Deserialize)]
pub struct UpdatePartitionCountBody {
    partitions_count: i32,
}

/// `PATCH /v3/clusters/{cluster_id}/topics/{topic_name}`: grow the topic to `partitions_count`
/// partitions; the topic as it is then.
pub async fn update_partition_count(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, topic)): PathParams<(String, String)>,
    JsonBody(body): JsonBody<UpdatePartitionCountBody>,
) -> Result<Json<TopicData>, RestError> {
    describe_topic(&api, &caller, &cluster_id, &topic, false).await?;
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.clone())))
            .with_count(body.partitions_count)
            .with_assignments(None)])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = api
        .gateway
        .call::<CreatePartitions>(&caller, CREATE_PARTITIONS_VERSION, request)
        .await?;
    let what = format!("topic {topic}");
    if let Some(result) = response
        .results
        .into_iter()
        .find(|r| r.error_code != kafka::NONE)
    {
        return Err(errors::kafka(
            result.error_code,
            result.error_message.as_deref(),
            &what,
        ));
    }
    let described = describe_topic(&api, &caller, &cluster_id, &topic, false).await?;
    Ok(Json(topic_data(
        &urls,
        &cluster_id,
        from_metadata(&described, false),
    )))
}

/// `DELETE /v3/clusters/{cluster_id}/topics/{topic_name}`: 204.
pub async fn delete(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    PathParams((cluster_id, topic)): PathParams<(String, String)>,
) -> Result<StatusCode, RestError> {
    metadata(&api, &caller, &cluster_id, Topics::None, false).await?;
    if millrace_cluster::validate_topic_name(&topic).is_err() {
        return Err(errors::unknown_topic_or_partition());
    }
    let request = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.clone()))))])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = api
        .gateway
        .call::<DeleteTopics>(&caller, DELETE_TOPICS_VERSION, request)
        .await?;
    let what = format!("topic {topic}");
    match response.responses.into_iter().next() {
        Some(r) if r.error_code == kafka::NONE => Ok(StatusCode::NO_CONTENT),
        Some(r) => Err(errors::kafka(
            r.error_code,
            r.error_message.as_deref(),
            &what,
        )),
        None => Err(RestError::internal(format!(
            "{what}: DeleteTopics answered no topic"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::operation_names;

    #[test]
    fn operation_bits_are_named() {
        assert_eq!(
            operation_names((1 << 3) | (1 << 8)),
            vec!["READ", "DESCRIBE"]
        );
        assert_eq!(operation_names(0), Vec::<&str>::new());
        assert_eq!(operation_names(i32::MIN).len(), 8);
    }
}
