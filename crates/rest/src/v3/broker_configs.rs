//! `/v3/clusters/{cluster_id}/brokers/{broker_id}/configs[/{name}]`: a broker's configs, read
//! only — dynamic broker configs are changed with IncrementalAlterConfigs (`kafka-configs`); the
//! update, reset and `configs:alter` paths of Confluent's reference are not served here yet (405).
//!
//! A broker's configs are known to that broker only: DescribeConfigs goes to it (forwarded when
//! it is another broker).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use serde::Serialize;

use super::brokers::check_broker;
use super::configs::{self, ConfigData, RESOURCE_BROKER};
use super::request::{PathParams, Urls};
use super::resource::{Collection, Metadata};
use crate::{Caller, RestApi, RestError};

/// The broker a config belongs to.
#[derive(Debug, Serialize)]
pub struct BrokerOwner {
    broker_id: i32,
}

/// Confluent's `BrokerConfigData`.
pub type BrokerConfigData = ConfigData<BrokerOwner>;

fn config_data(
    urls: &Urls,
    cluster_id: &str,
    broker_id: i32,
    entry: &DescribeConfigsResourceResult,
) -> BrokerConfigData {
    let name = entry.name.as_str();
    let id = broker_id.to_string();
    ConfigData::new(
        "KafkaBrokerConfig",
        Metadata::new(
            urls.v3(&["clusters", cluster_id, "brokers", &id, "configs", name]),
            cluster_id,
            &[("broker", &id), ("config", name)],
        ),
        cluster_id,
        BrokerOwner { broker_id },
        entry,
    )
}

/// Every config of live broker `broker_id` (404 for another cluster or an unknown broker).
async fn describe(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    broker_id: i32,
) -> Result<Vec<DescribeConfigsResourceResult>, RestError> {
    check_broker(api, caller, cluster_id, broker_id).await?;
    configs::describe(
        api,
        caller,
        broker_id,
        RESOURCE_BROKER,
        &broker_id.to_string(),
    )
    .await
}

/// `GET …/brokers/{broker_id}/configs`.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, broker_id)): PathParams<(String, i32)>,
) -> Result<Json<Collection<BrokerConfigData>>, RestError> {
    let entries = describe(&api, &caller, &cluster_id, broker_id).await?;
    Ok(Json(Collection::new(
        "KafkaBrokerConfigList",
        urls.v3(&[
            "clusters",
            &cluster_id,
            "brokers",
            &broker_id.to_string(),
            "configs",
        ]),
        entries
            .iter()
            .map(|e| config_data(&urls, &cluster_id, broker_id, e))
            .collect(),
    )))
}

/// `GET …/brokers/{broker_id}/configs/{name}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, broker_id, name)): PathParams<(String, i32, String)>,
) -> Result<Json<BrokerConfigData>, RestError> {
    let entries = describe(&api, &caller, &cluster_id, broker_id).await?;
    let entry = entries
        .iter()
        .find(|e| e.name.as_str() == name)
        .ok_or_else(|| {
            configs::config_not_found(&name, RESOURCE_BROKER, &broker_id.to_string(), &cluster_id)
        })?;
    Ok(Json(config_data(&urls, &cluster_id, broker_id, entry)))
}
