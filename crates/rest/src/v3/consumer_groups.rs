//! `/v3/clusters/{cluster_id}/consumer-groups…`: consumer groups, their consumers (members) and
//! each consumer's assigned partitions, in Confluent's shapes (`ConsumerGroupData`,
//! `ConsumerData`, `ConsumerAssignmentData`), from [`super::groups`].
//!
//! A group, consumer or assignment that does not exist answers 404; a group the caller may not
//! Describe is not listed, and naming it answers 403.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;

use super::brokers::live_brokers;
use super::clusters::{metadata, Topics};
use super::errors;
use super::groups::{self, GroupView, MemberView};
use super::request::{PathParams, Urls};
use super::resource::{Collection, Metadata, Related};
use crate::{Caller, RestApi, RestError};

/// Confluent's `ConsumerGroupData`.
#[derive(Debug, Serialize)]
pub struct ConsumerGroupData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    consumer_group_id: String,
    is_simple: bool,
    partition_assignor: String,
    state: &'static str,
    #[serde(rename = "type")]
    group_type: &'static str,
    is_mixed_consumer_group: bool,
    coordinator: Related,
    consumers: Related,
    lag_summary: Related,
}

fn group_data(urls: &Urls, cluster_id: &str, g: &GroupView) -> ConsumerGroupData {
    let at = |tail: &str| {
        Related::to(urls.v3(&["clusters", cluster_id, "consumer-groups", &g.group_id, tail]))
    };
    ConsumerGroupData {
        kind: "KafkaConsumerGroup",
        metadata: Metadata::new(
            urls.v3(&["clusters", cluster_id, "consumer-groups", &g.group_id]),
            cluster_id,
            &[("consumer-group", &g.group_id)],
        ),
        cluster_id: cluster_id.to_string(),
        consumer_group_id: g.group_id.clone(),
        is_simple: g.is_simple,
        partition_assignor: g.partition_assignor.clone(),
        state: g.state,
        group_type: g.group_type,
        is_mixed_consumer_group: g.is_mixed,
        coordinator: Related::to(urls.v3(&[
            "clusters",
            cluster_id,
            "brokers",
            &g.coordinator.to_string(),
        ])),
        consumers: at("consumers"),
        lag_summary: at("lag-summary"),
    }
}

/// Confluent's `ConsumerData`.
#[derive(Debug, Serialize)]
pub struct ConsumerData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    consumer_group_id: String,
    consumer_id: String,
    instance_id: Option<String>,
    client_id: String,
    assignments: Related,
}

fn consumer_data(urls: &Urls, cluster_id: &str, group: &str, m: &MemberView) -> ConsumerData {
    let path = [
        "clusters",
        cluster_id,
        "consumer-groups",
        group,
        "consumers",
        &m.consumer_id,
    ];
    let mut assignments = path.to_vec();
    assignments.push("assignments");
    ConsumerData {
        kind: "KafkaConsumer",
        metadata: Metadata::new(
            urls.v3(&path),
            cluster_id,
            &[("consumer-group", group), ("consumer", &m.consumer_id)],
        ),
        cluster_id: cluster_id.to_string(),
        consumer_group_id: group.to_string(),
        consumer_id: m.consumer_id.clone(),
        instance_id: m.instance_id.clone(),
        client_id: m.client_id.clone(),
        assignments: Related::to(urls.v3(&assignments)),
    }
}

/// Confluent's `ConsumerAssignmentData`.
#[derive(Debug, Serialize)]
pub struct ConsumerAssignmentData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    consumer_group_id: String,
    consumer_id: String,
    topic_name: String,
    partition_id: i32,
    partition: Related,
    lag: Related,
}

fn assignment_data(
    urls: &Urls,
    cluster_id: &str,
    group: &str,
    consumer: &str,
    (topic, partition): (&str, i32),
) -> ConsumerAssignmentData {
    let p = partition.to_string();
    ConsumerAssignmentData {
        kind: "KafkaConsumerAssignment",
        metadata: Metadata::new(
            urls.v3(&[
                "clusters",
                cluster_id,
                "consumer-groups",
                group,
                "consumers",
                consumer,
                "assignments",
                topic,
                "partitions",
                &p,
            ]),
            cluster_id,
            &[
                ("consumer-group", group),
                ("consumer", consumer),
                ("assignment", topic),
                ("partition", &p),
            ],
        ),
        cluster_id: cluster_id.to_string(),
        consumer_group_id: group.to_string(),
        consumer_id: consumer.to_string(),
        topic_name: topic.to_string(),
        partition_id: partition,
        partition: Related::to(urls.v3(&[
            "clusters",
            cluster_id,
            "topics",
            topic,
            "partitions",
            &p,
        ])),
        lag: Related::to(urls.v3(&[
            "clusters",
            cluster_id,
            "consumer-groups",
            group,
            "lags",
            topic,
            "partitions",
            &p,
        ])),
    }
}

/// Group `group` of cluster `cluster_id`: 404 for another cluster or a group that does not exist.
pub async fn find_group(
    api: &RestApi,
    caller: &Caller,
    cluster_id: &str,
    group: &str,
) -> Result<GroupView, RestError> {
    metadata(api, caller, cluster_id, Topics::None, false).await?;
    groups::describe(api, caller, group)
        .await?
        .ok_or_else(|| errors::not_found(format!("Consumer group {group} cannot be found.")))
}

fn find_member<'a>(g: &'a GroupView, consumer: &str) -> Result<&'a MemberView, RestError> {
    g.members
        .iter()
        .find(|m| m.consumer_id == consumer)
        .ok_or_else(|| {
            errors::not_found(format!(
                "Consumer {consumer} cannot be found in consumer group {}.",
                g.group_id
            ))
        })
}

/// `GET …/consumer-groups`.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams(cluster_id): PathParams<String>,
) -> Result<Json<Collection<ConsumerGroupData>>, RestError> {
    let brokers: Vec<i32> = live_brokers(&api, &caller, &cluster_id)
        .await?
        .iter()
        .map(|b| b.node_id.0)
        .collect();
    let views = groups::list(&api, &caller, &brokers).await?;
    Ok(Json(Collection::new(
        "KafkaConsumerGroupList",
        urls.v3(&["clusters", &cluster_id, "consumer-groups"]),
        views
            .iter()
            .map(|g| group_data(&urls, &cluster_id, g))
            .collect(),
    )))
}

/// `GET …/consumer-groups/{consumer_group_id}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group)): PathParams<(String, String)>,
) -> Result<Json<ConsumerGroupData>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    Ok(Json(group_data(&urls, &cluster_id, &g)))
}

/// `GET …/consumer-groups/{consumer_group_id}/consumers`: sorted by consumer id.
pub async fn list_consumers(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group)): PathParams<(String, String)>,
) -> Result<Json<Collection<ConsumerData>>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let mut members: Vec<&MemberView> = g.members.iter().collect();
    members.sort_by(|a, b| a.consumer_id.cmp(&b.consumer_id));
    Ok(Json(Collection::new(
        "KafkaConsumerList",
        urls.v3(&[
            "clusters",
            &cluster_id,
            "consumer-groups",
            &group,
            "consumers",
        ]),
        members
            .into_iter()
            .map(|m| consumer_data(&urls, &cluster_id, &group, m))
            .collect(),
    )))
}

/// `GET …/consumer-groups/{consumer_group_id}/consumers/{consumer_id}`.
pub async fn get_consumer(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group, consumer)): PathParams<(String, String, String)>,
) -> Result<Json<ConsumerData>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let m = find_member(&g, &consumer)?;
    Ok(Json(consumer_data(&urls, &cluster_id, &group, m)))
}

/// `GET …/consumers/{consumer_id}/assignments`.
pub async fn list_assignments(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group, consumer)): PathParams<(String, String, String)>,
) -> Result<Json<Collection<ConsumerAssignmentData>>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let m = find_member(&g, &consumer)?;
    Ok(Json(Collection::new(
        "KafkaConsumerAssignmentList",
        urls.v3(&[
            "clusters",
            &cluster_id,
            "consumer-groups",
            &group,
            "consumers",
            &consumer,
            "assignments",
        ]),
        m.assignments
            .iter()
            .map(|(t, p)| assignment_data(&urls, &cluster_id, &group, &consumer, (t, *p)))
            .collect(),
    )))
}

/// `GET …/consumers/{consumer_id}/assignments/{topic_name}/partitions/{partition_id}`.
pub async fn get_assignment(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group, consumer, topic, partition)): PathParams<(
        String,
        String,
        String,
        String,
        i32,
    )>,
) -> Result<Json<ConsumerAssignmentData>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let m = find_member(&g, &consumer)?;
    if !m
        .assignments
        .iter()
        .any(|(t, p)| *t == topic && *p == partition)
    {
        return Err(errors::not_found(format!(
            "Consumer {consumer} is not assigned partition {partition} of topic {topic}."
        )));
    }
    Ok(Json(assignment_data(
        &urls,
        &cluster_id,
        &group,
        &consumer,
        (&topic, partition),
    )))
}
