//! `/v3/clusters/{cluster_id}/topics/{topic_name}/configs…`: a topic's configs — list, get,
//! update one (`PUT`, a SET), reset one (`DELETE`), and `configs:alter`, a batch of SETs and
//! DELETEs applied together (or only validated).
//!
//! As in Confluent's proxy, a change to a config the topic does not have is refused with 404
//! before anything is sent, so a typo is not taken for a new override.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use serde::{Deserialize, Serialize};

use super::clusters::{metadata, Topics};
use super::configs::{self, AlterCommand, AlterOp, ConfigData, RESOURCE_TOPIC};
use super::request::{present, JsonBody, PathParams, Urls};
use super::resource::{Collection, Metadata};
use crate::{Caller, RestApi, RestError};

/// The topic a config belongs to.
#[derive(Debug, Serialize)]
pub struct TopicOwner {
    topic_name: String,
}

/// Confluent's `TopicConfigData`.
pub type TopicConfigData = ConfigData<TopicOwner>;

fn config_data(
    urls: &Urls,
    cluster_id: &str,
    topic: &str,
    entry: &DescribeConfigsResourceResult,
) -> TopicConfigData {
    let name = entry.name.as_str();
    ConfigData::new(
        "KafkaTopicConfig",
        Metadata::new(
            urls.v3(&["clusters", cluster_id, "topics", topic, "configs", name]),
            cluster_id,
            &[("topic", topic), ("config", name)],
        ),
        cluster_id,
        TopicOwner {
            topic_name: topic.to_string(),
        },
        entry,
    )
}

/// Every config of `topic` in cluster `cluster_id` (404 for another cluster or an unknown topic).
async fn describe(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    topic: &str,
) -> Result<Vec<DescribeConfigsResourceResult>, RestError> {
    metadata(api, caller, cluster_id, Topics::None, false).await?;
    let node = api.gateway.node_id()?;
    configs::describe(api, caller, node, RESOURCE_TOPIC, topic).await
}

/// `GET …/topics/{topic_name}/configs`.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, topic)): PathParams<(String, String)>,
) -> Result<Json<Collection<TopicConfigData>>, RestError> {
    let entries = describe(&api, &caller, &cluster_id, &topic).await?;
    Ok(Json(Collection::new(
        "KafkaTopicConfigList",
        urls.v3(&["clusters", &cluster_id, "topics", &topic, "configs"]),
        entries
            .iter()
            .map(|e| config_data(&urls, &cluster_id, &topic, e))
            .collect(),
    )))
}

/// `GET …/topics/{topic_name}/configs/{name}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, topic, name)): PathParams<(String, String, String)>,
) -> Result<Json<TopicConfigData>, RestError> {
    let entries = describe(&api, &caller, &cluster_id, &topic).await?;
    let entry = entries
        .iter()
        .find(|e| e.name.as_str() == name)
        .ok_or_else(|| configs::config_not_found(&name, RESOURCE_TOPIC, &topic, &cluster_id))?;
    Ok(Json(config_data(&urls, &cluster_id, &topic, entry)))
}

/// Confluent's `UpdateConfigRequestData`.
#[derive(Debug, Deserialize)]
pub struct UpdateConfigBody {
    #[serde(default)]
    value: Option<String>,
}

/// `PUT …/topics/{topic_name}/configs/{name}`: sets the config; 204.
pub async fn update(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    PathParams((cluster_id, topic, name)): PathParams<(String, String, String)>,
    JsonBody(body): JsonBody<UpdateConfigBody>,
) -> Result<StatusCode, RestError> {
    let command = AlterCommand {
        name,
        op: AlterOp::Set,
        value: body.value,
    };
    apply(&api, &caller, &cluster_id, &topic, &[command], false).await
}

/// `DELETE …/topics/{topic_name}/configs/{name}`: resets the config to its default; 204.
pub async fn reset(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    PathParams((cluster_id, topic, name)): PathParams<(String, String, String)>,
) -> Result<StatusCode, RestError> {
    let command = AlterCommand {
        name,
        op: AlterOp::Delete,
        value: None,
    };
    apply(&api, &caller, &cluster_id, &topic, &[command], false).await
}

/// One entry of a `configs:alter` batch.
#[derive(Debug, Deserialize)]
pub struct AlterEntry {
    name: String,
    #[serde(default)]
    value: Option<String>,
    /// `SET` (the default) or `DELETE`.
    #[serde(default)]
    operation: Option<String>,
}

/// Confluent's `AlterConfigBatchRequestData`.
#[derive(Debug, Deserialize)]
pub struct AlterBatchBody {
    data: Vec<AlterEntry>,
    #[serde(default, deserialize_with = "present")]
    validate_only: Option<bool>,
}

/// `POST …/topics/{topic_name}/configs:alter`: every change at once (or, with `validate_only`,
/// only checked); 204.
pub async fn alter_batch(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    PathParams((cluster_id, topic)): PathParams<(String, String)>,
    JsonBody(body): JsonBody<AlterBatchBody>,
) -> Result<StatusCode, RestError> {
    let commands = body
        .data
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let op = match entry.operation.as_deref() {
                None => AlterOp::Set,
                Some("SET") => AlterOp::Set,
                Some("DELETE") => AlterOp::Delete,
                Some(other) => {
                    return Err(RestError::bad_request(format!(
                        "data[{i}].operation: unknown operation `{other}`, expected SET or DELETE"
                    )))
                }
            };
            Ok(AlterCommand {
                name: entry.name,
                op,
                value: entry.value,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let validate_only = body.validate_only.unwrap_or(false);
    apply(&api, &caller, &cluster_id, &topic, &commands, validate_only).await
}

/// Checks that `topic` has every config `commands` name, then applies them: 204.
async fn apply(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    topic: &str,
    commands: &[AlterCommand],
    validate_only: bool,
) -> Result<StatusCode, RestError> {
    let entries = describe(api, caller, cluster_id, topic).await?;
    configs::check_known(
        &entries,
        commands.iter().map(|c| c.name.as_str()),
        RESOURCE_TOPIC,
        topic,
        cluster_id,
    )?;
    configs::alter(api, caller, RESOURCE_TOPIC, topic, commands, validate_only).await?;
    Ok(StatusCode::NO_CONTENT)
}
