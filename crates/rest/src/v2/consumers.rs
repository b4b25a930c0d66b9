//! REST v2's consumer paths (Confluent's `ConsumersResource`): create and delete an instance,
//! subscribe (topics or a pattern) or assign partitions, seek, read records, commit and read
//! committed offsets. The instances themselves are in [`super::instances`]; this module reads
//! the requests and writes the answers.
//!
//! As Confluent's proxy: a commit of listed offsets commits each `offset + 1` (the listed offset
//! is the last one consumed); an empty commit commits what was consumed; `GET …/offsets` answers
//! the committed offsets as they are stored. Reading with an `Accept` that names another embedded
//! format than the instance's is 406 40601.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::body::{self, EmbeddedFormat, Media, RawBody};
use super::instances::{
    Instance, OffsetReset, Settings, Subscription, INSTANCE_NAME_BYTES_MAX,
    PARTITIONS_PER_REQUEST_MAX, PATTERN_BYTES_MAX, READ_BYTES_MAX, REQUEST_TIMEOUT_DEFAULT,
    REQUEST_TIMEOUT_MAX,
};
use super::time::parse_rfc3339;
use crate::consume::OffsetSpec;
use crate::error::{code, RestError};
use crate::gateway::Caller;
use crate::membership::{Committed, TopicPartition};
use crate::RestApi;

/// `POST /consumers/{group}`'s body; every field optional.
#[derive(Debug, Default, Deserialize)]
struct CreateBody {
    /// Kept for Confluent's old clients: names the instance (and wins over `name`).
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default, rename = "auto.offset.reset")]
    auto_offset_reset: Option<String>,
    #[serde(default, rename = "auto.commit.enable")]
    auto_commit_enable: Option<Value>,
    #[serde(default, rename = "fetch.min.bytes", alias = "responseMinBytes")]
    fetch_min_bytes: Option<Value>,
    #[serde(
        default,
        rename = "consumer.request.timeout.ms",
        alias = "requestWaitMs"
    )]
    request_timeout_ms: Option<Value>,
}

#[derive(Debug, Serialize)]
struct CreatedJson {
    instance_id: String,
    base_uri: String,
}

/// `POST /consumers/{group}`: a new instance; `{"instance_id", "base_uri"}`.
pub async fn create(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path(group): Path<String>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    body::require_json(&headers)?;
    let request: CreateBody = body::parse_optional(&raw)?.unwrap_or_default();
    let name = match request.id.or(request.name) {
        Some(name) => name,
        None => format!("rest-consumer-{}", uuid::Uuid::new_v4()),
    };
    if name.is_empty() || name.len() > INSTANCE_NAME_BYTES_MAX || name.contains('/') {
        return Err(RestError::unprocessable(format!(
            "name: an instance name is 1 to {INSTANCE_NAME_BYTES_MAX} bytes without '/'"
        )));
    }
    let settings = settings(&request_fields(
        request.format,
        request.auto_offset_reset,
        request.auto_commit_enable,
        request.fetch_min_bytes,
        request.request_timeout_ms,
    ))?;
    api.gateway.context()?;
    let instance = Instance::new(&group, &name, settings, caller);
    api.v2.insert(&api, instance)?;
    let base_uri = format!(
        "{}/consumers/{}/instances/{}",
        origin(&headers),
        path_segment(&group),
        path_segment(&name)
    );
    Ok(body::v2_ok(&CreatedJson {
        instance_id: name,
        base_uri,
    }))
}

/// The creation fields, before they are checked.
struct Fields {
    format: Option<String>,
    reset: Option<String>,
    auto_commit: Option<Value>,
    fetch_min_bytes: Option<Value>,
    request_timeout_ms: Option<Value>,
}

fn request_fields(
    format: Option<String>,
    reset: Option<String>,
    auto_commit: Option<Value>,
    fetch_min_bytes: Option<Value>,
    request_timeout_ms: Option<Value>,
) -> Fields {
    Fields {
        format,
        reset,
        auto_commit,
        fetch_min_bytes,
        request_timeout_ms,
    }
}

/// An instance's settings from its creation fields: Confluent's defaults (binary, latest,
/// auto-commit on, reads wait 1 s); an unknown format is 422, a bad setting 42204.
fn settings(fields: &Fields) -> Result<Settings, RestError> {
    let format = match &fields.format {
        None => EmbeddedFormat::Binary,
        Some(f) => EmbeddedFormat::from_name(f)
            .ok_or_else(|| RestError::unprocessable("Invalid format type."))?,
    };
    let reset = match fields
        .reset
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("latest") | Some("largest") => OffsetReset::Latest,
        Some("earliest") | Some("smallest") => OffsetReset::Earliest,
        Some("none") => OffsetReset::None,
        Some(other) => {
            return Err(invalid_config(format!(
                "Invalid value {other} for configuration auto.offset.reset: String must be one \
                 of: latest, earliest, none"
            )))
        }
    };
    let auto_commit = match &fields.auto_commit {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(other) => {
            return Err(invalid_config(format!(
                "Invalid value {other} for configuration enable.auto.commit: Expected value to \
                 be either true or false"
            )))
        }
    };
    let fetch_min_bytes = integer(&fields.fetch_min_bytes, "fetch.min.bytes")?.unwrap_or(-1);
    let request_timeout = match integer(&fields.request_timeout_ms, "consumer.request.timeout.ms")?
    {
        None => REQUEST_TIMEOUT_DEFAULT,
        Some(ms) if ms < 0 => REQUEST_TIMEOUT_DEFAULT,
        Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(REQUEST_TIMEOUT_MAX),
    };
    if format.needs_schema() {
        return Err(format.no_schema_registry());
    }
    Ok(Settings {
        format,
        reset,
        auto_commit,
        fetch_min_bytes,
        request_timeout,
    })
}

/// An integer setting given as a number or a numeric string.
fn integer(value: &Option<Value>, key: &str) -> Result<Option<i64>, RestError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| invalid_config(format!("{key}: {n} is not an integer"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| invalid_config(format!("{key}: {s:?} is not an integer"))),
        Some(other) => Err(invalid_config(format!("{key}: {other} is not an integer"))),
    }
}

/// Confluent's 42204.
fn invalid_config(message: String) -> RestError {
    RestError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        code::INVALID_CONSUMER_CONFIG,
        format!("Invalid consumer configuration: {message}"),
    )
}

/// `DELETE /consumers/{g}/instances/{i}`: commits (when auto-committing), leaves the group,
/// forgets the instance; 204.
pub async fn delete(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
) -> Result<Response, RestError> {
    let slot = api.v2.remove(&group, &name, &caller)?;
    let mut instance = slot.instance.lock().await;
    instance.close(&api.gateway, &caller).await;
    Ok(body::no_content())
}

#[derive(Debug, Deserialize)]
struct SubscribeBody {
    #[serde(default)]
    topics: Option<Vec<String>>,
    #[serde(default)]
    topic_pattern: Option<String>,
}

/// `POST …/subscription`: `{"topics": [...]}` or `{"topic_pattern": "..."}`; 204.
pub async fn subscribe(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    body::require_json(&headers)?;
    let request: SubscribeBody = body::parse(&raw)?;
    let subscription = match (request.topics, request.topic_pattern) {
        (Some(topics), _) if topics.len() > PARTITIONS_PER_REQUEST_MAX => {
            return Err(RestError::unprocessable(format!(
                "topics: at most {PARTITIONS_PER_REQUEST_MAX}"
            )))
        }
        (Some(topics), _) if topics.iter().any(|t| t.trim().is_empty()) => {
            return Err(RestError::unprocessable(
                "topics: a topic name may not be empty",
            ))
        }
        (Some(topics), _) => Subscription::Topics(topics),
        (None, Some(source)) => {
            if source.len() > PATTERN_BYTES_MAX {
                return Err(RestError::unprocessable(format!(
                    "topic_pattern: at most {PATTERN_BYTES_MAX} bytes"
                )));
            }
            let regex = regex::Regex::new(&format!("^(?:{source})$")).map_err(|e| {
                RestError::unprocessable(format!("topic_pattern: not a valid pattern ({e})"))
            })?;
            Subscription::Pattern { source, regex }
        }
        (None, None) => {
            return Err(RestError::unprocessable(
                "topics or topic_pattern is required",
            ))
        }
    };
    let mut instance = api.v2.lock(&group, &name, &caller).await?;
    if matches!(&subscription, Subscription::Topics(t) if t.is_empty()) {
        instance.unsubscribe(&api.gateway, &caller).await;
    } else {
        instance
            .subscribe(&api.gateway, &caller, subscription)
            .await?;
    }
    Ok(body::no_content())
}

/// `GET …/subscription`: `{"topics": [...]}`.
pub async fn subscription(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
) -> Result<Response, RestError> {
    let instance = api.v2.lock(&group, &name, &caller).await?;
    Ok(body::v2_ok(
        &serde_json::json!({ "topics": instance.subscribed_topics() }),
    ))
}

/// `DELETE …/subscription`; 204.
pub async fn unsubscribe(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
) -> Result<Response, RestError> {
    let mut instance = api.v2.lock(&group, &name, &caller).await?;
    instance.unsubscribe(&api.gateway, &caller).await;
    Ok(body::no_content())
}

/// A partition in a request or an answer.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct PartitionJson {
    topic: String,
    partition: i32,
}

/// `{"partitions": [...]}` in an answer.
#[derive(Debug, Serialize)]
struct PartitionsJson {
    partitions: Vec<PartitionJson>,
}

/// `{"offsets": [...]}` in an answer.
#[derive(Debug, Serialize)]
struct OffsetsJson {
    offsets: Vec<CommittedJson>,
}

#[derive(Debug, Deserialize)]
struct PartitionsBody {
    partitions: Vec<PartitionJson>,
}

fn partitions_of(body: PartitionsBody) -> Result<Vec<TopicPartition>, RestError> {
    if body.partitions.len() > PARTITIONS_PER_REQUEST_MAX {
        return Err(RestError::unprocessable(format!(
            "partitions: at most {PARTITIONS_PER_REQUEST_MAX}"
        )));
    }
    let mut out: Vec<TopicPartition> = body
        .partitions
        .into_iter()
        .map(|p| (p.topic, p.partition))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// `POST …/assignments`: `{"partitions": [{"topic", "partition"}]}`; 204.
pub async fn assign(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    body::require_json(&headers)?;
    let partitions = partitions_of(body::parse(&raw)?)?;
    let image = api.gateway.image()?;
    for (topic, partition) in &partitions {
        let Some(t) = image.topic(topic) else {
            return Err(RestError::topic_not_found(topic));
        };
        if t.partition(*partition).is_none() {
            return Err(RestError::partition_not_found(topic, *partition));
        }
    }
    let mut instance = api.v2.lock(&group, &name, &caller).await?;
    instance.assign(partitions)?;
    Ok(body::no_content())
}

/// `GET …/assignments`: `{"partitions": [...]}` (manual, or what the group assigned).
pub async fn assignment(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
) -> Result<Response, RestError> {
    let instance = api.v2.lock(&group, &name, &caller).await?;
    let partitions: Vec<PartitionJson> = instance
        .assigned()
        .into_iter()
        .map(|(topic, partition)| PartitionJson { topic, partition })
        .collect();
    Ok(body::v2_ok(&PartitionsJson { partitions }))
}

#[derive(Debug, Deserialize)]
struct OffsetJson {
    topic: String,
    partition: i32,
    offset: i64,
    #[serde(default)]
    metadata: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TimestampJson {
    topic: String,
    partition: i32,
    timestamp: String,
}

#[derive(Debug, Deserialize)]
struct SeekBody {
    #[serde(default)]
    offsets: Vec<OffsetJson>,
    #[serde(default)]
    timestamps: Vec<TimestampJson>,
}

/// `POST …/positions`: `{"offsets": [{"topic","partition","offset"}], "timestamps":
/// [{"topic","partition","timestamp"}]}`; 204. A partition not assigned is 409 40903.
pub async fn seek(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    body::require_json(&headers)?;
    let request: SeekBody = body::parse(&raw)?;
    if request.offsets.len() + request.timestamps.len() > PARTITIONS_PER_REQUEST_MAX {
        return Err(RestError::unprocessable(format!(
            "offsets, timestamps: at most {PARTITIONS_PER_REQUEST_MAX} partitions"
        )));
    }
    let mut offsets = Vec::new();
    for (i, o) in request.offsets.into_iter().enumerate() {
        if o.offset < 0 {
            return Err(RestError::unprocessable(format!(
                "offsets[{i}].offset: must be 0 or more"
            )));
        }
        offsets.push(((o.topic, o.partition), o.offset));
    }
    let mut by_time = Vec::new();
    for (i, t) in request.timestamps.into_iter().enumerate() {
        let ms = parse_rfc3339(&t.timestamp).ok_or_else(|| {
            RestError::unprocessable(format!(
                "timestamps[{i}].timestamp: {:?} is not an ISO-8601 date-time",
                t.timestamp
            ))
        })?;
        by_time.push(((t.topic, t.partition), OffsetSpec::Timestamp(ms)));
    }
    let mut instance = api.v2.lock(&group, &name, &caller).await?;
    instance.seek(&offsets)?;
    instance.seek_to(&api.gateway, &caller, &by_time).await?;
    Ok(body::no_content())
}

/// `POST …/positions/beginning`: `{"partitions": [...]}`; 204.
pub async fn seek_to_beginning(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    seek_to(
        &api,
        &caller,
        &group,
        &name,
        &headers,
        &raw,
        OffsetSpec::Earliest,
    )
    .await
}

/// `POST …/positions/end`: `{"partitions": [...]}`; 204.
pub async fn seek_to_end(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    seek_to(
        &api,
        &caller,
        &group,
        &name,
        &headers,
        &raw,
        OffsetSpec::Latest,
    )
    .await
}

async fn seek_to(
    api: &RestApi,
    caller: &Caller,
    group: &str,
    name: &str,
    headers: &HeaderMap,
    raw: &[u8],
    spec: OffsetSpec,
) -> Result<Response, RestError> {
    body::require_json(headers)?;
    let partitions = partitions_of(body::parse(raw)?)?;
    let with_spec: Vec<(TopicPartition, OffsetSpec)> =
        partitions.into_iter().map(|tp| (tp, spec)).collect();
    let mut instance = api.v2.lock(group, name, caller).await?;
    instance.seek_to(&api.gateway, caller, &with_spec).await?;
    Ok(body::no_content())
}

/// `GET …/records`'s query.
#[derive(Debug, Deserialize)]
pub struct ReadQuery {
    #[serde(default)]
    timeout: Option<i64>,
    #[serde(default)]
    max_bytes: Option<i64>,
}

/// `GET …/records?timeout=&max_bytes=`: `[{"topic","key","value","partition","offset"}]` in the
/// instance's format.
pub async fn records(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    query: Result<Query<ReadQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, RestError> {
    let Query(query) = query.map_err(|e| {
        RestError::bad_request(format!(
            "timeout and max_bytes are integers (milliseconds, bytes): {}",
            e.body_text()
        ))
    })?;
    let mut instance = api.v2.lock(&group, &name, &caller).await?;
    let format = instance.settings.format;
    check_accept(&headers, format)?;
    let timeout = match query.timeout {
        Some(ms) if ms >= 0 => {
            Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(REQUEST_TIMEOUT_MAX)
        }
        _ => instance.settings.request_timeout,
    };
    let max_bytes = match query.max_bytes {
        Some(b) if b > 0 => b.min(READ_BYTES_MAX),
        _ => READ_BYTES_MAX,
    };
    let records = instance
        .read(&api.gateway, &caller, timeout, max_bytes)
        .await?;
    Ok(body::json_response(
        StatusCode::OK,
        &format.media_type(),
        &records,
    ))
}

/// 406 40601 when `Accept` asks only for other embedded formats than the instance's; plain 406
/// when it accepts nothing v2 answers.
fn check_accept(headers: &HeaderMap, format: EmbeddedFormat) -> Result<(), RestError> {
    let accepted = Media::accepted(headers);
    let fits = accepted.iter().any(|m| match m {
        Media::Any | Media::V2 | Media::Json => true,
        Media::Embedded(f) => *f == format,
        Media::Other => false,
    });
    if fits {
        return Ok(());
    }
    if accepted.iter().any(|m| matches!(m, Media::Embedded(_))) {
        return Err(RestError::new(
            StatusCode::NOT_ACCEPTABLE,
            code::CONSUMER_FORMAT_MISMATCH,
            "The requested embedded data format does not match the deserializer for this \
             consumer instance",
        ));
    }
    let asked = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Err(RestError::new(
        StatusCode::NOT_ACCEPTABLE,
        code::NOT_ACCEPTABLE,
        format!(
            "HTTP 406 Not Acceptable: {asked} (this instance answers {})",
            format.media_type()
        ),
    ))
}

/// `{"offsets": [...]}`; Redpanda's pandaproxy names the list `partitions`.
#[derive(Debug, Deserialize)]
struct CommitBody {
    #[serde(default, alias = "partitions")]
    offsets: Option<Vec<OffsetJson>>,
}

/// `POST …/offsets`: commits each listed `offset + 1`, or (no body) what the instance consumed;
/// 200 with `[]`, as Confluent's proxy answers.
pub async fn commit(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    body::require_json(&headers)?;
    let request: Option<CommitBody> = body::parse_optional(&raw)?;
    let listed = request.and_then(|r| r.offsets);
    let mut instance = api.v2.lock(&group, &name, &caller).await?;
    match listed {
        None => instance.commit_positions(&api.gateway, &caller).await?,
        Some(offsets) => {
            if offsets.len() > PARTITIONS_PER_REQUEST_MAX {
                return Err(RestError::unprocessable(format!(
                    "offsets: at most {PARTITIONS_PER_REQUEST_MAX}"
                )));
            }
            let mut to_commit = BTreeMap::new();
            for (i, o) in offsets.into_iter().enumerate() {
                let next = o.offset.checked_add(1).filter(|n| *n >= 0).ok_or_else(|| {
                    RestError::unprocessable(format!("offsets[{i}].offset: out of range"))
                })?;
                to_commit.insert(
                    (o.topic, o.partition),
                    Committed {
                        offset: next,
                        metadata: o.metadata,
                    },
                );
            }
            if to_commit.is_empty() {
                instance.commit_positions(&api.gateway, &caller).await?;
            } else {
                instance.commit(&api.gateway, &caller, &to_commit).await?;
            }
        }
    }
    Ok(body::v2_ok(&Vec::<Value>::new()))
}

#[derive(Debug, Serialize)]
struct CommittedJson {
    topic: String,
    partition: i32,
    offset: i64,
    metadata: String,
}

/// `GET …/offsets` with `{"partitions": [...]}`: `{"offsets": [{"topic","partition","offset",
/// "metadata"}]}` for the partitions with a committed offset. No body is 40402, as Confluent
/// answers it.
pub async fn committed(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((group, name)): Path<(String, String)>,
    RawBody(raw): RawBody,
) -> Result<Response, RestError> {
    let Some(request) = body::parse_optional::<PartitionsBody>(&raw)? else {
        return Err(RestError::new(
            StatusCode::NOT_FOUND,
            code::PARTITION_NOT_FOUND,
            "Partition not found.",
        ));
    };
    let partitions = partitions_of(request)?;
    let instance = api.v2.lock(&group, &name, &caller).await?;
    let found =
        crate::membership::committed(&api.gateway, &caller, &instance.group, Some(&partitions))
            .await?;
    let offsets: Vec<CommittedJson> = partitions
        .iter()
        .filter_map(|tp| {
            found.get(tp).map(|c| CommittedJson {
                topic: tp.0.clone(),
                partition: tp.1,
                offset: c.offset,
                metadata: c.metadata.clone().unwrap_or_default(),
            })
        })
        .collect();
    Ok(body::v2_ok(&OffsetsJson { offsets }))
}

/// `scheme://host[:port]` the client used, for `base_uri`.
fn origin(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .filter(|s| *s == "https" || *s == "http")
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

/// `text` as one URL path segment (percent-encoding what is not unreserved).
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: serde_json::Value) -> Fields {
        let body: CreateBody = serde_json::from_value(pairs).expect("body");
        request_fields(
            body.format,
            body.auto_offset_reset,
            body.auto_commit_enable,
            body.fetch_min_bytes,
            body.request_timeout_ms,
        )
    }

    #[test]
    fn creation_settings_take_confluents_defaults_and_spellings() {
        let s = settings(&fields(serde_json::json!({}))).expect("defaults");
        assert_eq!(s.format, EmbeddedFormat::Binary);
        assert_eq!(s.reset, OffsetReset::Latest);
        assert!(s.auto_commit);
        assert_eq!(s.request_timeout, REQUEST_TIMEOUT_DEFAULT);
        let s = settings(&fields(serde_json::json!({
            "format": "JSON", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
            "fetch.min.bytes": "100", "consumer.request.timeout.ms": 250
        })))
        .expect("given");
        assert_eq!(s.format, EmbeddedFormat::Json);
        assert_eq!(s.reset, OffsetReset::Earliest);
        assert!(!s.auto_commit);
        assert_eq!(s.fetch_min_bytes, 100);
        assert_eq!(s.request_timeout, Duration::from_millis(250));
        let e = settings(&fields(
            serde_json::json!({"auto.offset.reset": "sometimes"}),
        ))
        .expect_err("bad reset");
        assert_eq!(e.error_code, code::INVALID_CONSUMER_CONFIG);
        let e = settings(&fields(serde_json::json!({"format": "xml"}))).expect_err("bad format");
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        let e = settings(&fields(serde_json::json!({"format": "avro"}))).expect_err("avro");
        assert_eq!(e.error_code, super::super::body::SERIALIZATION_ERROR);
    }

    #[test]
    fn accept_must_fit_the_instance_format() {
        let mut headers = HeaderMap::new();
        assert!(check_accept(&headers, EmbeddedFormat::Json).is_ok());
        headers.insert(
            header::ACCEPT,
            "application/vnd.kafka.binary.v2+json"
                .parse()
                .expect("value"),
        );
        assert!(check_accept(&headers, EmbeddedFormat::Binary).is_ok());
        let e = check_accept(&headers, EmbeddedFormat::Json).expect_err("mismatch");
        assert_eq!(e.error_code, code::CONSUMER_FORMAT_MISMATCH);
        headers.insert(header::ACCEPT, "text/html".parse().expect("value"));
        let e = check_accept(&headers, EmbeddedFormat::Json).expect_err("not v2");
        assert_eq!(e.error_code, code::NOT_ACCEPTABLE);
    }

    #[test]
    fn base_uris_are_escaped() {
        assert_eq!(path_segment("my group/1"), "my%20group%2F1");
        assert_eq!(path_segment("rest-consumer-1.a_b~"), "rest-consumer-1.a_b~");
    }
}
