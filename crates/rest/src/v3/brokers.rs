//! `/v3/clusters/{cluster_id}/brokers[/{broker_id}]`: the live brokers as Metadata lists them
//! for the caller (id, the Kafka listener's host and port, rack), sorted by id.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use serde::Serialize;

use super::clusters::{metadata, Topics};
use super::errors;
use super::request::{PathParams, Urls};
use super::resource::{Collection, Metadata, Related};
use crate::{Caller, RestApi, RestError};

/// Confluent's `BrokerData`.
#[derive(Debug, Serialize)]
pub struct BrokerData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    broker_id: i32,
    host: Option<String>,
    port: Option<i32>,
    rack: Option<String>,
    configs: Related,
    partition_replicas: Related,
}

fn broker_data(urls: &Urls, cluster_id: &str, broker: &MetadataResponseBroker) -> BrokerData {
    let id = broker.node_id.0.to_string();
    let at = |tail: &str| Related::to(urls.v3(&["clusters", cluster_id, "brokers", &id, tail]));
    BrokerData {
        kind: "KafkaBroker",
        metadata: Metadata::new(
            urls.v3(&["clusters", cluster_id, "brokers", &id]),
            cluster_id,
            &[("broker", &id)],
        ),
        cluster_id: cluster_id.to_string(),
        broker_id: broker.node_id.0,
        host: Some(broker.host.to_string()),
        port: Some(broker.port),
        rack: broker.rack.as_ref().map(|r| r.to_string()),
        configs: at("configs"),
        partition_replicas: at("partition-replicas"),
    }
}

/// The live brokers of cluster `cluster_id`, sorted by id (404 for another cluster).
pub async fn live_brokers(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
) -> Result<Vec<MetadataResponseBroker>, RestError> {
    let mut brokers = metadata(api, caller, cluster_id, Topics::None, false)
        .await?
        .brokers;
    brokers.sort_by_key(|b| b.node_id.0);
    Ok(brokers)
}

/// 404 unless broker `broker_id` is live in cluster `cluster_id`.
pub async fn check_broker(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    broker_id: i32,
) -> Result<MetadataResponseBroker, RestError> {
    live_brokers(api, caller, cluster_id)
        .await?
        .into_iter()
        .find(|b| b.node_id.0 == broker_id)
        .ok_or_else(|| errors::not_found(format!("Broker {broker_id} cannot be found.")))
}

/// `GET /v3/clusters/{cluster_id}/brokers`.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams(cluster_id): PathParams<String>,
) -> Result<Json<Collection<BrokerData>>, RestError> {
    let brokers = live_brokers(&api, &caller, &cluster_id).await?;
    Ok(Json(Collection::new(
        "KafkaBrokerList",
        urls.v3(&["clusters", &cluster_id, "brokers"]),
        brokers
            .iter()
            .map(|b| broker_data(&urls, &cluster_id, b))
            .collect(),
    )))
}

/// `GET /v3/clusters/{cluster_id}/brokers/{broker_id}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, broker_id)): PathParams<(String, i32)>,
) -> Result<Json<BrokerData>, RestError> {
    let broker = check_broker(&api, &caller, &cluster_id, broker_id).await?;
    Ok(Json(broker_data(&urls, &cluster_id, &broker)))
}
