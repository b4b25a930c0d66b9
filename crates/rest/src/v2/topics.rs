//! REST v2's topics, partitions and brokers (Confluent's `TopicsResource`, `PartitionsResource`,
//! `BrokersResource`) and produce (`ProduceToTopicAction`, `ProduceToPartitionAction`).
//!
//! Metadata comes from Metadata (v12) on this broker — so a topic the caller may not Describe is
//! not listed and answers 403 — configs from DescribeConfigs, offsets from ListOffsets on the
//! partition's leader ([`consume::resolve_offset`]); records go through [`produce::produce`].
//!
//! `GET /topics` lists the topics without the internal ones (Kafka's `listTopics()` default).
//! Produce answers one entry per record in the request's order: `partition` and `offset`, or
//! `error_code` (1: a Kafka error, 2: a retriable one, as Confluent's reference documents them;
//! 40301/40101 for authorization/authentication, which also make the status 403/401) and `error`.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    DescribeConfigsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::describe_configs::{DescribeConfigs, RESOURCE_TOPIC};
use millrace_frontend::api::metadata::Metadata;
use millrace_frontend::error_codes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::body::BASE64;
use super::body::{self, EmbeddedFormat, Media, RawBody};
use super::instances::{record_json, READ_BYTES_MAX, REQUEST_TIMEOUT_MAX};
use crate::consume::{self, FetchLimits, FetchPosition, OffsetSpec};
use crate::error::{code, RestError};
use crate::gateway::Caller;
use crate::produce::{self, ProduceRecord, RecordOutcome};
use crate::records::OutgoingRecord;
use crate::RestApi;

/// Metadata v12: topic names and ids, no cluster authorized operations.
const METADATA_VERSION: i16 = 12;
/// DescribeConfigs v4.
const DESCRIBE_CONFIGS_VERSION: i16 = 4;
/// Confluent's per-record code for a non-retriable Kafka error.
pub const RECORD_ERROR: i32 = 1;
/// Confluent's per-record code for a retriable Kafka error.
pub const RECORD_RETRIABLE_ERROR: i32 = 2;

/// A partition as v2 shows it.
#[derive(Debug, Serialize)]
pub struct PartitionJson {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<ReplicaJson>,
}

/// One replica of a partition.
#[derive(Debug, Serialize)]
pub struct ReplicaJson {
    pub broker: i32,
    pub leader: bool,
    pub in_sync: bool,
}

/// `GET /topics/{t}`.
#[derive(Debug, Serialize)]
struct TopicJson {
    name: String,
    configs: BTreeMap<String, Option<String>>,
    partitions: Vec<PartitionJson>,
}

/// `GET /topics/{t}/partitions/{p}/offsets`.
#[derive(Debug, Serialize)]
struct OffsetsJson {
    beginning_offset: i64,
    end_offset: i64,
}

/// `GET /topics`: the names of the topics the caller may describe, internal ones left out.
pub async fn list(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, RestError> {
    let response = metadata(&api, &caller, None).await?;
    let mut names: Vec<String> = response
        .topics
        .iter()
        .filter(|t| t.error_code == error_codes::NONE && !t.is_internal)
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    names.sort();
    Ok(body::v2_ok(&names))
}

/// `GET /topics/{t}`: name, configs (every config with its effective value; sensitive ones
/// null) and partitions.
pub async fn describe(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path(topic): Path<String>,
) -> Result<Response, RestError> {
    let response = metadata(&api, &caller, Some(&topic)).await?;
    let described = topic_of(&response, &topic)?;
    let partitions = partitions_json(described);
    let configs = topic_configs(&api, &caller, &topic).await?;
    Ok(body::v2_ok(&TopicJson {
        name: topic,
        configs,
        partitions,
    }))
}

/// `GET /topics/{t}/partitions`.
pub async fn partitions(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path(topic): Path<String>,
) -> Result<Response, RestError> {
    let response = metadata(&api, &caller, Some(&topic)).await?;
    Ok(body::v2_ok(&partitions_json(topic_of(&response, &topic)?)))
}

/// `GET /topics/{t}/partitions/{p}`.
pub async fn partition(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((topic, partition)): Path<(String, String)>,
) -> Result<Response, RestError> {
    let partition = partition_id(&partition)?;
    let response = metadata(&api, &caller, Some(&topic)).await?;
    let described = topic_of(&response, &topic)?;
    let found = partitions_json(described)
        .into_iter()
        .find(|p| p.partition == partition)
        .ok_or_else(|| RestError::partition_not_found(&topic, partition))?;
    Ok(body::v2_ok(&found))
}

/// `GET /topics/{t}/partitions/{p}/offsets`: the log start offset and the high watermark, from
/// the partition's leader.
pub async fn offsets(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((topic, partition)): Path<(String, String)>,
) -> Result<Response, RestError> {
    let partition = partition_id(&partition)?;
    let (beginning, end) = futures::future::try_join(
        consume::resolve_offset(
            &api.gateway,
            &caller,
            &topic,
            partition,
            OffsetSpec::Earliest,
        ),
        consume::resolve_offset(&api.gateway, &caller, &topic, partition, OffsetSpec::Latest),
    )
    .await?;
    Ok(body::v2_ok(&OffsetsJson {
        beginning_offset: beginning,
        end_offset: end,
    }))
}

/// `GET /brokers`: `{"brokers": [ids]}`.
pub async fn brokers(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, RestError> {
    let request = MetadataRequest::default()
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(false);
    let response = api
        .gateway
        .call::<Metadata>(&caller, METADATA_VERSION, request)
        .await?;
    let mut ids: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    Ok(body::v2_ok(&serde_json::json!({ "brokers": ids })))
}

/// `GET /topics/{t}/partitions/{p}/records`'s query (Redpanda's: all three are required there).
#[derive(Debug, Deserialize)]
pub struct PartitionReadQuery {
    offset: i64,
    #[serde(default)]
    timeout: Option<i64>,
    #[serde(default)]
    max_bytes: Option<i64>,
}

/// `GET /topics/{t}/partitions/{p}/records?offset=&timeout=&max_bytes=` (Redpanda's pandaproxy):
/// the records of one partition from `offset`, in the format `Accept` names (binary unless it
/// names json), waiting up to `timeout` ms for some.
pub async fn partition_records(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((topic, partition)): Path<(String, String)>,
    query: Result<Query<PartitionReadQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, RestError> {
    let partition = partition_id(&partition)?;
    let Query(query) = query.map_err(|e| {
        RestError::bad_request(format!(
            "offset (required), timeout and max_bytes are integers: {}",
            e.body_text()
        ))
    })?;
    let format = Media::accepted(&headers)
        .into_iter()
        .find_map(|m| match m {
            Media::Embedded(f) => Some(f),
            _ => None,
        })
        .unwrap_or(EmbeddedFormat::Binary);
    if format.needs_schema() {
        return Err(format.no_schema_registry());
    }
    if query.offset < 0 {
        return Err(RestError::unprocessable("offset: must be 0 or more"));
    }
    let timeout = Duration::from_millis(u64::try_from(query.timeout.unwrap_or(1000)).unwrap_or(0))
        .min(REQUEST_TIMEOUT_MAX);
    let max_bytes = query
        .max_bytes
        .filter(|b| *b > 0)
        .map_or(READ_BYTES_MAX, |b| b.min(READ_BYTES_MAX));
    let position = FetchPosition {
        topic: topic.clone(),
        partition,
        offset: query.offset,
    };
    let limits = FetchLimits {
        max_bytes: i32::try_from(max_bytes).unwrap_or(i32::MAX),
        partition_max_bytes: i32::try_from(max_bytes).unwrap_or(i32::MAX),
        max_wait: timeout,
    };
    let fetched = consume::fetch(&api.gateway, &caller, &[position], limits).await?;
    let mut out = Vec::new();
    let mut bytes = 0i64;
    for p in fetched {
        if p.error_code != error_codes::NONE {
            return Err(RestError::kafka(
                p.error_code,
                &format!("partition {topic}-{partition}"),
            ));
        }
        for record in &p.records {
            let size = record.key.as_ref().map_or(0, |k| k.len())
                + record.value.as_ref().map_or(0, |v| v.len());
            let size = i64::try_from(size).unwrap_or(i64::MAX);
            if !out.is_empty() && bytes.saturating_add(size) > max_bytes {
                break;
            }
            bytes = bytes.saturating_add(size);
            out.push(record_json(format, &topic, partition, record)?);
        }
    }
    Ok(body::json_response(
        StatusCode::OK,
        &format.media_type(),
        &out,
    ))
}

/// `POST /topics/{t}`.
pub async fn produce(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    produce_records(&api, &caller, &topic, None, &headers, &raw).await
}

/// `POST /topics/{t}/partitions/{p}`: records without their own `partition` go to `p`.
pub async fn produce_to_partition(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((topic, partition)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    let partition = partition_id(&partition)?;
    produce_records(&api, &caller, &topic, Some(partition), &headers, &raw).await
}

/// A v2 produce request's body (`key_schema`, `value_schema` and their ids are for schema
/// formats, which are refused before the body is read).
#[derive(Debug, Deserialize)]
struct ProduceBody {
    records: Vec<ProduceBodyRecord>,
}

/// Keys and values stay unparsed JSON text until their format says what to make of them: a JSON
/// value is stored as the client wrote it (no parse into a tree and no re-serialization, the
/// produce path's largest cost), a base64 string is decoded.
#[derive(Debug, Deserialize)]
struct ProduceBodyRecord {
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    key: Option<Box<RawValue>>,
    #[serde(default)]
    value: Option<Box<RawValue>>,
}

/// A produce answer.
#[derive(Debug, Serialize)]
struct ProducedJson {
    offsets: Vec<OffsetJson>,
    key_schema_id: Option<i32>,
    value_schema_id: Option<i32>,
}

/// One entry of a produce answer.
#[derive(Debug, Serialize)]
struct OffsetJson {
    partition: Option<i32>,
    offset: Option<i64>,
    error_code: Option<i32>,
    error: Option<String>,
}

async fn produce_records(
    api: &RestApi,
    caller: &Caller,
    topic: &str,
    partition: Option<i32>,
    headers: &HeaderMap,
    raw: &[u8],
) -> Result<Response, RestError> {
    let format = match Media::content_type(headers) {
        Media::Embedded(format) if format.needs_schema() => return Err(format.no_schema_registry()),
        Media::Embedded(format) => format,
        _ => {
            return Err(body::unsupported_media_type(
                headers,
                "application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json",
            ))
        }
    };
    let request: ProduceBody = body::parse(raw)?;
    if request.records.is_empty() {
        return Err(RestError::unprocessable("records: may not be empty"));
    }
    let mut records = Vec::with_capacity(request.records.len());
    for (i, r) in request.records.into_iter().enumerate() {
        records.push(ProduceRecord {
            partition: r.partition.or(partition),
            record: OutgoingRecord {
                key: embedded(format, r.key.as_deref(), || format!("records[{i}].key"))?,
                value: embedded(format, r.value.as_deref(), || format!("records[{i}].value"))?,
                headers: Vec::new(),
                timestamp: None,
            },
        });
    }
    let outcomes = produce::produce(&api.gateway, caller, topic, records).await?;
    let mut status = StatusCode::OK;
    let offsets: Vec<OffsetJson> = outcomes
        .iter()
        .map(|o| match o {
            RecordOutcome::Written {
                partition, offset, ..
            } => OffsetJson {
                partition: Some(*partition),
                offset: Some(*offset),
                error_code: None,
                error: None,
            },
            RecordOutcome::Failed {
                error_code,
                message,
                ..
            } => {
                let rest_code = record_error_code(*error_code, o.is_retriable());
                if rest_code == code::FORBIDDEN {
                    status = StatusCode::FORBIDDEN;
                } else if rest_code == code::UNAUTHORIZED && status == StatusCode::OK {
                    status = StatusCode::UNAUTHORIZED;
                }
                OffsetJson {
                    partition: None,
                    offset: None,
                    error_code: Some(rest_code),
                    error: Some(message.clone()),
                }
            }
        })
        .collect();
    Ok(body::json_response(
        status,
        body::V2_JSON,
        &ProducedJson {
            offsets,
            key_schema_id: None,
            value_schema_id: None,
        },
    ))
}

/// Confluent's per-record code for a Kafka error code.
fn record_error_code(kafka_code: i16, retriable: bool) -> i32 {
    match kafka_code {
        error_codes::TOPIC_AUTHORIZATION_FAILED
        | error_codes::CLUSTER_AUTHORIZATION_FAILED
        | error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => code::FORBIDDEN,
        error_codes::SASL_AUTHENTICATION_FAILED => code::UNAUTHORIZED,
        _ if retriable => RECORD_RETRIABLE_ERROR,
        _ => RECORD_ERROR,
    }
}

/// A key or value in `format` as the bytes Kafka keeps: base64-decoded (binary), or the JSON
/// value's text as the client sent it (json); null stays null. `field` names it in an error.
pub fn embedded(
    format: EmbeddedFormat,
    value: Option<&RawValue>,
    field: impl Fn() -> String,
) -> Result<Option<Bytes>, RestError> {
    let Some(value) = value.filter(|v| v.get() != "null") else {
        return Ok(None);
    };
    match format {
        EmbeddedFormat::Binary => {
            let text: std::borrow::Cow<'_, str> =
                serde_json::from_str(value.get()).map_err(|_| {
                    RestError::unprocessable(format!(
                        "{}: {} is not a base64 string",
                        field(),
                        value.get()
                    ))
                })?;
            BASE64
                .decode(text.as_bytes())
                .map(|b| Some(Bytes::from(b)))
                .map_err(|e| {
                    RestError::unprocessable(format!("{}: not valid base64 ({e})", field()))
                })
        }
        EmbeddedFormat::Json => Ok(Some(Bytes::copy_from_slice(value.get().as_bytes()))),
        schema => Err(schema.no_schema_registry()),
    }
}

/// A partition number from a path; anything else is Jersey's plain 404, as Confluent answers it.
pub fn partition_id(text: &str) -> Result<i32, RestError> {
    text.parse::<i32>()
        .map_err(|_| RestError::new(StatusCode::NOT_FOUND, code::NOT_FOUND, "HTTP 404 Not Found"))
}

/// Metadata for one topic (`Some`) or every topic (`None`), never creating one.
async fn metadata(
    api: &RestApi,
    caller: &Caller,
    topic: Option<&str>,
) -> Result<MetadataResponse, RestError> {
    let topics = topic.map(|t| {
        vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))]
    });
    let request = MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false);
    api.gateway
        .call::<Metadata>(caller, METADATA_VERSION, request)
        .await
}

/// `topic`'s entry in a Metadata answer: 40401 when it does not exist, 403 when the caller may
/// not describe it.
fn topic_of<'a>(
    response: &'a MetadataResponse,
    topic: &str,
) -> Result<&'a MetadataResponseTopic, RestError> {
    let found = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .ok_or_else(|| RestError::topic_not_found(topic))?;
    match found.error_code {
        error_codes::NONE => Ok(found),
        error_codes::UNKNOWN_TOPIC_OR_PARTITION | error_codes::INVALID_TOPIC_EXCEPTION => {
            Err(RestError::topic_not_found(topic))
        }
        other => Err(RestError::kafka(other, &format!("topic {topic}"))),
    }
}

/// A Metadata topic's partitions as v2 shows them, in partition order.
fn partitions_json(topic: &MetadataResponseTopic) -> Vec<PartitionJson> {
    let mut out: Vec<PartitionJson> = topic.partitions.iter().map(partition_json).collect();
    out.sort_by_key(|p| p.partition);
    out
}

fn partition_json(p: &MetadataResponsePartition) -> PartitionJson {
    PartitionJson {
        partition: p.partition_index,
        leader: p.leader_id.0,
        replicas: p
            .replica_nodes
            .iter()
            .map(|r| ReplicaJson {
                broker: r.0,
                leader: r.0 == p.leader_id.0,
                in_sync: p.isr_nodes.contains(r),
            })
            .collect(),
    }
}

/// Every config of `topic` with its effective value (null for a sensitive one).
async fn topic_configs(
    api: &RestApi,
    caller: &Caller,
    topic: &str,
) -> Result<BTreeMap<String, Option<String>>, RestError> {
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(None)]);
    let response = api
        .gateway
        .call::<DescribeConfigs>(caller, DESCRIBE_CONFIGS_VERSION, request)
        .await?;
    let result = response
        .results
        .into_iter()
        .next()
        .ok_or_else(|| RestError::internal("DescribeConfigs answered no resource"))?;
    if result.error_code != error_codes::NONE {
        return Err(match result.error_code {
            error_codes::UNKNOWN_TOPIC_OR_PARTITION => RestError::topic_not_found(topic),
            other => RestError::kafka(other, &format!("topic {topic}")),
        });
    }
    Ok(result
        .configs
        .into_iter()
        .map(|c| {
            let value = if c.is_sensitive {
                None
            } else {
                c.value.map(|v| v.to_string())
            };
            (c.name.to_string(), value)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(value: serde_json::Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).expect("raw")
    }

    #[test]
    fn keys_and_values_become_kafka_bytes() {
        let b = embedded(
            EmbeddedFormat::Binary,
            Some(&*raw(serde_json::json!("aGVsbG8="))),
            || "k".to_string(),
        )
        .expect("base64");
        assert_eq!(b.as_deref(), Some(&b"hello"[..]));
        let b = embedded(
            EmbeddedFormat::Binary,
            Some(&*raw(serde_json::json!("aGVsbG8"))),
            || "k".to_string(),
        )
        .expect("unpadded base64");
        assert_eq!(b.as_deref(), Some(&b"hello"[..]));
        let e = embedded(
            EmbeddedFormat::Binary,
            Some(&*raw(serde_json::json!("!!"))),
            || "records[3].value".to_string(),
        )
        .expect_err("not base64");
        assert!(e.message.starts_with("records[3].value"), "{}", e.message);
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        let e = embedded(
            EmbeddedFormat::Binary,
            Some(&*raw(serde_json::json!(12))),
            || "k".to_string(),
        )
        .expect_err("a number is not base64");
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        let j = embedded(
            EmbeddedFormat::Json,
            Some(&*raw(serde_json::json!({"a": [1, 2], "b": "x"}))),
            || "v".to_string(),
        )
        .expect("json");
        assert_eq!(j.as_deref(), Some(&br#"{"a":[1,2],"b":"x"}"#[..]));
        assert_eq!(
            embedded(
                EmbeddedFormat::Json,
                Some(&*raw(serde_json::Value::Null)),
                || "v".to_string()
            )
            .expect("null"),
            None
        );
        assert!(embedded(
            EmbeddedFormat::Avro,
            Some(&*raw(serde_json::json!(1))),
            || "v".to_string()
        )
        .is_err());
    }

    #[test]
    fn record_errors_use_confluents_codes() {
        assert_eq!(
            record_error_code(error_codes::TOPIC_AUTHORIZATION_FAILED, false),
            code::FORBIDDEN
        );
        assert_eq!(
            record_error_code(error_codes::NOT_LEADER_OR_FOLLOWER, true),
            RECORD_RETRIABLE_ERROR
        );
        assert_eq!(
            record_error_code(error_codes::MESSAGE_TOO_LARGE, false),
            RECORD_ERROR
        );
    }
}
