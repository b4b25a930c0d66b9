//! `/v3/clusters` and `/v3/clusters/{cluster_id}`: the one cluster this broker belongs to, and
//! the check every other v3 path starts with — the cluster id in the path is this cluster's, or
//! the answer is 404.
//!
//! Both come from a Metadata request made as the caller ([`metadata`]), so the brokers, the
//! controller and the topics a v3 answer shows are what a Kafka client of the same principal
//! would see (topics it may not Describe are not there).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::metadata::Metadata as MetadataApi;
use serde::Serialize;

use super::errors;
use super::request::{PathParams, Urls};
use super::resource::{Collection, Metadata, Related};
use crate::{Caller, RestApi, RestError};

/// The Metadata version v3 asks at (topic ids, authorized operations).
const METADATA_VERSION: i16 = 12;

/// Which topics a [`metadata`] call asks about.
#[derive(Debug, Clone, Copy)]
pub enum Topics<'a> {
    /// None: brokers, controller and cluster id only.
    None,
    /// Every topic the caller may Describe.
    All,
    /// One topic by name.
    Named(&'a str),
}

/// Metadata as `caller` sees it, after checking that `cluster_id` is this cluster's (404 if not).
/// `include_operations` asks for each topic's authorized operations.
pub async fn metadata(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    topics: Topics<'_>,
    include_operations: bool,
) -> Result<MetadataResponse, RestError> {
    let request = MetadataRequest::default()
        .with_topics(match topics {
            Topics::None => Some(Vec::new()),
            Topics::All => None,
            Topics::Named(name) => Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))]),
        })
        .with_allow_auto_topic_creation(false)
        .with_include_topic_authorized_operations(include_operations);
    let response = api
        .gateway
        .call::<MetadataApi>(caller, METADATA_VERSION, request)
        .await?;
    if response.cluster_id.as_ref().map(|c| c.as_str()) != Some(cluster_id) {
        return Err(errors::cluster_not_found(cluster_id));
    }
    Ok(response)
}

/// Confluent's `ClusterData`.
#[derive(Debug, Serialize)]
pub struct ClusterData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    controller: Option<Related>,
    acls: Related,
    brokers: Related,
    broker_configs: Related,
    consumer_groups: Related,
    topics: Related,
    partition_reassignments: Related,
}

fn cluster_data(urls: &Urls, cluster_id: &str, controller_id: i32) -> ClusterData {
    let at = |tail: &[&str]| {
        let mut segments = vec!["clusters", cluster_id];
        segments.extend_from_slice(tail);
        Related::to(urls.v3(&segments))
    };
    ClusterData {
        kind: "KafkaCluster",
        metadata: Metadata::new(urls.v3(&["clusters", cluster_id]), cluster_id, &[]),
        cluster_id: cluster_id.to_string(),
        controller: (controller_id >= 0).then(|| at(&["brokers", &controller_id.to_string()])),
        acls: at(&["acls"]),
        brokers: at(&["brokers"]),
        broker_configs: at(&["broker-configs"]),
        consumer_groups: at(&["consumer-groups"]),
        topics: at(&["topics"]),
        partition_reassignments: at(&["topics", "-", "partitions", "-", "reassignment"]),
    }
}

/// `GET /v3/clusters`: this cluster.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
) -> Result<Json<Collection<ClusterData>>, RestError> {
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    let response = api
        .gateway
        .call::<MetadataApi>(&caller, METADATA_VERSION, request)
        .await?;
    let data = match &response.cluster_id {
        Some(id) => vec![cluster_data(&urls, id.as_str(), response.controller_id.0)],
        None => Vec::new(),
    };
    Ok(Json(Collection::new(
        "KafkaClusterList",
        urls.v3(&["clusters"]),
        data,
    )))
}

/// `GET /v3/clusters/{cluster_id}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams(cluster_id): PathParams<String>,
) -> Result<Json<ClusterData>, RestError> {
    let response = metadata(&api, &caller, &cluster_id, Topics::None, false).await?;
    Ok(Json(cluster_data(
        &urls,
        &cluster_id,
        response.controller_id.0,
    )))
}
