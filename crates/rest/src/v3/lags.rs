//! `/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lag-summary` and `…/lags[/
//! {topic_name}/partitions/{partition_id}]`: how far a group's committed offsets are behind the
//! ends of their partitions.
//!
//! The committed offsets come from the group's coordinator (OffsetFetch, every partition the
//! group committed and the caller may Describe); each partition's end is its last stable offset,
//! asked of its leader (ListOffsets, latest, READ_COMMITTED) — as Confluent's proxy computes it.
//! A lag is never negative. Partitions whose end cannot be read (no leader, deleted) are left
//! out. A group with no committed offsets answers 404.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::list_offsets::ListOffsets;
use millrace_frontend::api::offset_fetch::OffsetFetch;
use millrace_frontend::error_codes as kafka;
use serde::Serialize;
use tracing::debug;

use super::consumer_groups::find_group;
use super::errors;
use super::groups::GroupView;
use super::request::{PathParams, Urls};
use super::resource::{crn, Collection, Metadata, Related};
use crate::{Caller, RestApi, RestError};

/// v7: one group, `topics = null` for all it committed.
const OFFSET_FETCH_VERSION: i16 = 7;
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' "latest" timestamp.
const LATEST_TIMESTAMP: i64 = -1;
/// READ_COMMITTED: the end is the last stable offset.
const READ_COMMITTED: i8 = 1;
/// How long a leader may take to answer ListOffsets.
const LIST_OFFSETS_TIMEOUT_MS: i32 = 30_000;

/// One partition's lag.
#[derive(Debug, Clone)]
struct Lag {
    topic: String,
    partition: i32,
    current_offset: i64,
    log_end_offset: i64,
}

impl Lag {
    fn lag(&self) -> i64 {
        self.log_end_offset
            .saturating_sub(self.current_offset)
            .max(0)
    }
}

/// The group's committed offsets, by (topic, partition).
async fn committed(
    api: &RestApi,
    caller: &Caller,
    group: &GroupView,
) -> Result<BTreeMap<(String, i32), i64>, RestError> {
    let request = OffsetFetchRequest::default()
        .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
            group.group_id.clone(),
        )))
        .with_topics(None);
    let response = api
        .gateway
        .call_on::<OffsetFetch>(group.coordinator, caller, OFFSET_FETCH_VERSION, request)
        .await?;
    if response.error_code != kafka::NONE {
        return Err(errors::kafka(
            response.error_code,
            None,
            &format!("group {}", group.group_id),
        ));
    }
    let mut out = BTreeMap::new();
    for topic in &response.topics {
        for p in &topic.partitions {
            if p.error_code == kafka::NONE && p.committed_offset >= 0 {
                out.insert(
                    (topic.name.0.to_string(), p.partition_index),
                    p.committed_offset,
                );
            }
        }
    }
    Ok(out)
}

/// The last stable offset of each of `partitions` whose leader answers.
async fn ends(
    api: &RestApi,
    caller: &Caller,
    partitions: impl Iterator<Item = &(String, i32)>,
) -> Result<BTreeMap<(String, i32), i64>, RestError> {
    let mut by_leader: BTreeMap<i32, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
    for (topic, partition) in partitions {
        match api.gateway.leader_of(topic, *partition) {
            Ok(leader) => by_leader
                .entry(leader)
                .or_default()
                .entry(topic)
                .or_default()
                .push(*partition),
            Err(e) => debug!(topic, partition, error = %e, "no end offset for the lag"),
        }
    }
    let mut out = BTreeMap::new();
    for (leader, topics) in by_leader {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(READ_COMMITTED)
            .with_timeout_ms(LIST_OFFSETS_TIMEOUT_MS)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                            .with_partitions(
                                partitions
                                    .into_iter()
                                    .map(|p| {
                                        ListOffsetsPartition::default()
                                            .with_partition_index(p)
                                            .with_current_leader_epoch(-1)
                                            .with_timestamp(LATEST_TIMESTAMP)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let response = api
            .gateway
            .call_on::<ListOffsets>(leader, caller, LIST_OFFSETS_VERSION, request)
            .await?;
        for topic in &response.topics {
            for p in &topic.partitions {
                if p.error_code == kafka::NONE && p.offset >= 0 {
                    out.insert((topic.name.0.to_string(), p.partition_index), p.offset);
                } else {
                    debug!(
                        topic = %topic.name.0,
                        partition = p.partition_index,
                        error = kafka::error_name(p.error_code),
                        "no end offset for the lag"
                    );
                }
            }
        }
    }
    Ok(out)
}

/// Every lag of `group`, by (topic, partition); 404 when the group committed nothing.
async fn lags(api: &RestApi, caller: &Caller, group: &GroupView) -> Result<Vec<Lag>, RestError> {
    let committed = committed(api, caller, group).await?;
    if committed.is_empty() {
        return Err(errors::not_found(
            "Consumer group offsets could not be found.",
        ));
    }
    let ends = ends(api, caller, committed.keys()).await?;
    Ok(committed
        .into_iter()
        .filter_map(|(key, current_offset)| {
            let log_end_offset = *ends.get(&key)?;
            Some(Lag {
                topic: key.0,
                partition: key.1,
                current_offset,
                log_end_offset,
            })
        })
        .collect())
}

/// The member a partition is assigned to: (consumer id, instance id, client id), empty when none.
fn owner(group: &GroupView, topic: &str, partition: i32) -> (String, Option<String>, String) {
    group
        .owner_of(topic, partition)
        .map(|m| {
            (
                m.consumer_id.clone(),
                m.instance_id.clone(),
                m.client_id.clone(),
            )
        })
        .unwrap_or_default()
}

/// Confluent's `ConsumerLagData`.
#[derive(Debug, Serialize)]
pub struct ConsumerLagData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    consumer_group_id: String,
    topic_name: String,
    partition_id: i32,
    current_offset: i64,
    log_end_offset: i64,
    lag: i64,
    consumer_id: String,
    instance_id: Option<String>,
    client_id: String,
}

fn lag_data(urls: &Urls, cluster_id: &str, group: &GroupView, lag: &Lag) -> ConsumerLagData {
    let p = lag.partition.to_string();
    let (consumer_id, instance_id, client_id) = owner(group, &lag.topic, lag.partition);
    ConsumerLagData {
        kind: "KafkaConsumerLag",
        metadata: Metadata::new(
            urls.v3(&[
                "clusters",
                cluster_id,
                "consumer-groups",
                &group.group_id,
                "lags",
                &lag.topic,
                "partitions",
                &p,
            ]),
            cluster_id,
            &[
                ("consumer-group", &group.group_id),
                ("lag", &lag.topic),
                ("partition", &p),
            ],
        ),
        cluster_id: cluster_id.to_string(),
        consumer_group_id: group.group_id.clone(),
        topic_name: lag.topic.clone(),
        partition_id: lag.partition,
        current_offset: lag.current_offset,
        log_end_offset: lag.log_end_offset,
        lag: lag.lag(),
        consumer_id,
        instance_id,
        client_id,
    }
}

/// `GET …/consumer-groups/{consumer_group_id}/lags`: largest lag first, then by topic and
/// partition.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group)): PathParams<(String, String)>,
) -> Result<Json<Collection<ConsumerLagData>>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let mut all = lags(&api, &caller, &g).await?;
    if all.is_empty() {
        return Err(errors::not_found("Consumer lags not found."));
    }
    all.sort_by(|a, b| {
        b.lag()
            .cmp(&a.lag())
            .then_with(|| a.topic.cmp(&b.topic))
            .then_with(|| a.partition.cmp(&b.partition))
    });
    Ok(Json(Collection::new(
        "KafkaConsumerLagList",
        urls.v3(&["clusters", &cluster_id, "consumer-groups", &group, "lags"]),
        all.iter()
            .map(|l| lag_data(&urls, &cluster_id, &g, l))
            .collect(),
    )))
}

/// `GET …/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}`.
pub async fn get(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group, topic, partition)): PathParams<(String, String, String, i32)>,
) -> Result<Json<ConsumerLagData>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let all = lags(&api, &caller, &g).await?;
    let lag = all
        .iter()
        .find(|l| l.topic == topic && l.partition == partition)
        .ok_or_else(|| {
            errors::not_found(format!(
                "Consumer lag of group {group} on partition {partition} of topic {topic} cannot be found."
            ))
        })?;
    Ok(Json(lag_data(&urls, &cluster_id, &g, lag)))
}

/// Confluent's `ConsumerGroupLagSummaryData`.
#[derive(Debug, Serialize)]
pub struct LagSummaryData {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    consumer_group_id: String,
    max_lag_consumer_id: String,
    max_lag_instance_id: Option<String>,
    max_lag_client_id: String,
    max_lag_topic_name: String,
    max_lag_partition_id: i32,
    max_lag: i64,
    total_lag: i64,
    max_lag_consumer: Related,
    max_lag_partition: Related,
}

/// The partition with the largest lag (the first of equals) and the sum of all lags.
fn summarize(all: &[Lag]) -> Option<(&Lag, i64)> {
    let mut max: Option<&Lag> = None;
    let mut total: i64 = 0;
    for lag in all {
        if max.is_none_or(|m| m.lag() < lag.lag()) {
            max = Some(lag);
        }
        total = total.saturating_add(lag.lag());
    }
    max.map(|m| (m, total))
}

/// `GET …/consumer-groups/{consumer_group_id}/lag-summary`.
pub async fn summary(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    urls: Urls,
    PathParams((cluster_id, group)): PathParams<(String, String)>,
) -> Result<Json<LagSummaryData>, RestError> {
    let g = find_group(&api, &caller, &cluster_id, &group).await?;
    let all = lags(&api, &caller, &g).await?;
    let (max, total) =
        summarize(&all).ok_or_else(|| errors::not_found("Consumer lags not found."))?;
    let (consumer_id, instance_id, client_id) = owner(&g, &max.topic, max.partition);
    let p = max.partition.to_string();
    Ok(Json(LagSummaryData {
        kind: "KafkaConsumerGroupLagSummary",
        metadata: Metadata {
            self_url: urls.v3(&[
                "clusters",
                &cluster_id,
                "consumer-groups",
                &group,
                "lag-summary",
            ]),
            resource_name: format!(
                "{}/lag-summary",
                crn(&cluster_id, &[("consumer-group", &group)])
            ),
        },
        cluster_id: cluster_id.clone(),
        consumer_group_id: group.clone(),
        max_lag_consumer: Related::to(urls.v3(&[
            "clusters",
            &cluster_id,
            "consumer-groups",
            &group,
            "consumers",
            &consumer_id,
        ])),
        max_lag_partition: Related::to(urls.v3(&[
            "clusters",
            &cluster_id,
            "topics",
            &max.topic,
            "partitions",
            &p,
        ])),
        max_lag_consumer_id: consumer_id,
        max_lag_instance_id: instance_id,
        max_lag_client_id: client_id,
        max_lag_topic_name: max.topic.clone(),
        max_lag_partition_id: max.partition,
        max_lag: max.lag(),
        total_lag: total,
    }))
}

#[cfg(test)]
mod tests {
    use super::{summarize, Lag};

    fn lag(topic: &str, partition: i32, current_offset: i64, log_end_offset: i64) -> Lag {
        Lag {
            topic: topic.to_string(),
            partition,
            current_offset,
            log_end_offset,
        }
    }

    #[test]
    fn the_summary_keeps_the_first_largest_lag_and_sums_them() {
        let all = [lag("a", 0, 5, 10), lag("a", 1, 0, 10), lag("b", 0, 3, 13)];
        let (max, total) = summarize(&all).expect("lags");
        assert_eq!((max.topic.as_str(), max.partition, max.lag()), ("a", 1, 10));
        assert_eq!(total, 25);
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn a_lag_is_never_negative() {
        assert_eq!(lag("a", 0, 12, 10).lag(), 0);
        let one = [lag("a", 0, 12, 10)];
        let (max, total) = summarize(&one).expect("one lag");
        assert_eq!((max.lag(), total), (0, 0));
    }
}
