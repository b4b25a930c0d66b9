//! `/v3/clusters/{cluster_id}/topics/{topic_name}/partitions[/{partition_id}]`: a topic's
//! partitions as Metadata shows them to the caller, with links to the leader's replica, the
//! replicas and the reassignment (Confluent's `PartitionData`).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use kafka_protocol::messages::metadata_response::MetadataResponsePartition;
use serde::Serialize;

use super::errors;
use super::request::{PathParams, Urls};
use super::resource::{Collection, Metadata, Related};
use super::topics::describe_topic;
use crate::{Caller, RestApi, RestError};

/// Confluent's `PartitionData`.
#[derive(Debug, Serialize)]
pub struct PartitionData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    topic_name: String,
    partition_id: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<Related>,
    replicas: Related,
    reassignment: Related,
}

fn partition_data(
    urls: &Urls,
    cluster_id: &str,
    topic: &str,
    partition: &MetadataResponsePartition,
) -> PartitionData {
    let id = partition.partition_index.to_string();
    let at = |tail: &[&str]| {
        let mut segments = vec!["clusters", cluster_id, "topics", topic, "partitions", &id];
        segments.extend_from_slice(tail);
        urls.v3(&segments)
    };
    let leader = partition.leader_id.0;
    PartitionData {
        kind: "KafkaPartition",
        metadata: Metadata::new(at(&[]), cluster_id, &[("topic", topic), ("partition", &id)]),
        cluster_id: cluster_id.to_string(),
        topic_name: topic.to_string(),
        partition_id: partition.partition_index,
        leader: (leader >= 0).then(|| Related::to(at(&["replicas", &leader.to_string()]))),
        replicas: Related::to(at(&["replicas"])),
        reassignment: Related::to(at(&["reassignment"])),
    }
}

async fn partitions_of(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    topic: &str,
) -> Result<Vec<MetadataResponsePartition>, RestError> {
    let mut partitions = describe_topic(api, caller, cluster_id, topic, false)
        .await?
        .partitions;
    partitions.sort_by_key(|p| p.partition_index);
    Ok(partitions)
}

/// `GET …/topics/{topic_name}/partitions`.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, topic)): PathParams<(String, String)>,
) -> Result<Json<Collection<PartitionData>>, RestError> {
    let partitions = partitions_of(&api, &caller, &cluster_id, &topic).await?;
    Ok(Json(Collection::new(
        "KafkaPartitionList",
        urls.v3(&["clusters", &cluster_id, "topics", &topic, "partitions"]),
        partitions
            .iter()
            .map(|p| partition_data(&urls, &cluster_id, &topic, p))
            .collect(),
    )))
}

/// `GET …/topics/{topic_name}/partitions/{partition_id}`: 404 for a partition the topic does
/// not have.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, topic, partition)): PathParams<(String, String, i32)>,
) -> Result<Json<PartitionData>, RestError> {
    let partitions = partitions_of(&api, &caller, &cluster_id, &topic).await?;
    let found = partitions
        .iter()
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| {
            errors::not_found(format!(
                "Partition {partition} of topic {topic} cannot be found."
            ))
        })?;
    Ok(Json(partition_data(&urls, &cluster_id, &topic, found)))
}
