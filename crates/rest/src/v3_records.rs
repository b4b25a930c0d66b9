//! REST v3 produce: `POST /v3/clusters/{cluster_id}/topics/{topic_name}/records`, as Confluent's
//! v3 OpenAPI document defines `ProduceRequest` and `ProduceResponse`: one record per JSON object
//! (`partition_id`, `headers` [{`name`, `value` in base64}], `key`/`value` {`type`: BINARY, JSON or
//! STRING, `data`}, `timestamp`), answered with a delivery report (`error_code` 200, `partition_id`,
//! `offset`, `timestamp`, the key's and value's type and size) or an error report (`error_code`,
//! `message`).
//!
//! Two forms, as Confluent serves them:
//! - a body with a Content-Length holding one record: one report, with the HTTP status of its
//!   outcome (200, or the error's status);
//! - a stream (no Content-Length, i.e. `Transfer-Encoding: chunked` on HTTP/1.1 or an HTTP/2 body
//!   without a length) or a body of several records back to back: status 200 and one report per
//!   record, in order, each a JSON object on its own line, sent as the records are acknowledged.
//!   Records that arrive together are produced together ([`produce::produce`]); a record the
//!   group's produce refuses as a whole (an unknown partition) is then produced alone, so each
//!   report is the record's own.
//!
//! Bounds: one record's JSON at most `millrace.rest.request.bytes.max` (a longer one ends the stream
//! with a 413 report); [`STREAM_IDLE_TIMEOUT`] without bytes ends a stream; records produced
//! together at most [`STREAM_GROUP_RECORDS_MAX`].
//!
//! Schema formats (AVRO, PROTOBUF, JSONSCHEMA, or no `type`) need a schema registry, which
//! Millrace does not have: 422 42207, as Confluent's proxy answers without one. Bad base64 is 400
//! naming the field, as Confluent's document shows it (`data=1 is not a base64 string`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{code, RestError};
use crate::gateway::Caller;
use crate::produce::{self, ProduceRecord, RecordOutcome};
use crate::records::OutgoingRecord;
use crate::v2::body::BASE64;
use crate::v2::body::{self, RawBody, SERIALIZATION_ERROR};
use crate::v2::time::{format_rfc3339, parse_rfc3339};
use crate::RestApi;

/// How long a stream may send nothing before it is ended.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Records of a stream produced in one go at most.
pub const STREAM_GROUP_RECORDS_MAX: usize = 1000;
/// Reports buffered toward a slow reader of the answer before reading the stream pauses.
const REPORTS_QUEUED_MAX: usize = 64;
/// Confluent's 42206: the body holds no record.
const INVALID_PAYLOAD: i32 = 42206;

/// The v3 produce routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new().route(
        "/v3/clusters/{cluster_id}/topics/{topic_name}/records",
        post(produce_records),
    )
}

/// One record of a v3 produce request.
#[derive(Debug, Default, Deserialize)]
struct ProduceRequest {
    #[serde(default)]
    partition_id: Option<i32>,
    #[serde(default)]
    headers: Option<Vec<HeaderJson>>,
    #[serde(default)]
    key: Option<DataJson>,
    #[serde(default)]
    value: Option<DataJson>,
    #[serde(default)]
    timestamp: Option<String>,
}

#[derive(Debug, Deserialize)]
struct HeaderJson {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

/// A key or value: its type and data (the schema fields are read only to be refused).
#[derive(Debug, Deserialize)]
struct DataJson {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    schema_id: Option<Value>,
    #[serde(default)]
    schema_version: Option<Value>,
    #[serde(default)]
    schema: Option<Value>,
    #[serde(default)]
    subject: Option<Value>,
}

/// A record read from the body, ready to produce, with what its report repeats.
struct Prepared {
    record: ProduceRecord,
    key_type: Option<(String, usize)>,
    value_type: Option<(String, usize)>,
}

async fn produce_records(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Path((cluster_id, topic)): Path<(String, String)>,
    request: Request,
) -> Response {
    if let Err(e) = check_cluster(&api, &cluster_id) {
        return e.into_response();
    }
    let headers = request.headers().clone();
    if !content_type_is_json(&headers) {
        return body::unsupported_media_type(&headers, "application/json").into_response();
    }
    let target = Target {
        api,
        caller,
        cluster_id,
        topic,
    };
    if headers.contains_key(header::CONTENT_LENGTH) {
        let raw = match whole_body(request).await {
            Ok(raw) => raw,
            Err(e) => return e.into_response(),
        };
        return buffered(target, raw).await;
    }
    streamed(target, request.into_body())
}

/// Where records go and as whom.
#[derive(Clone)]
struct Target {
    api: Arc<RestApi>,
    caller: Caller,
    cluster_id: String,
    topic: String,
}

/// The whole body of `request`, within the body limit.
async fn whole_body(request: Request) -> Result<Bytes, RestError> {
    use axum::extract::FromRequest;
    RawBody::from_request(request, &()).await.map(|b| b.0)
}

/// A body with a length: one record answers alone; several answer line by line.
async fn buffered(target: Target, raw: Bytes) -> Response {
    let (values, trailing) = split_values(&raw);
    if values.is_empty() {
        let error = match trailing {
            Some(e) => e,
            None => RestError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                INVALID_PAYLOAD,
                "Payload error. Request body is empty. Data is required.",
            ),
        };
        return error.into_response();
    }
    if values.len() == 1 && trailing.is_none() {
        let mut reports = produce_group(&target, values).await;
        let (status, report) = reports
            .pop()
            .unwrap_or_else(|| error_report(&RestError::internal("no report for the record")));
        return json(status, report);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(REPORTS_QUEUED_MAX);
    tokio::spawn(async move {
        for group in values.chunks(STREAM_GROUP_RECORDS_MAX) {
            for (_, report) in produce_group(&target, group.to_vec()).await {
                if tx.send(line(&report)).await.is_err() {
                    return;
                }
            }
        }
        if let Some(e) = trailing {
            let _ = tx.send(line(&error_report(&e).1)).await;
        }
    });
    stream_response(rx)
}

/// A body without a length: records are read, produced and reported as they arrive.
fn streamed(target: Target, request_body: Body) -> Response {
    let limit = target.api.config.request_bytes_max;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(REPORTS_QUEUED_MAX);
    tokio::spawn(async move {
        let mut data = request_body.into_data_stream();
        let mut buffer = BytesMut::new();
        loop {
            let chunk = match tokio::time::timeout(STREAM_IDLE_TIMEOUT, data.next()).await {
                Ok(Some(Ok(chunk))) => Some(chunk),
                Ok(None) => None,
                Ok(Some(Err(_))) | Err(_) => return,
            };
            let done = chunk.is_none();
            if let Some(chunk) = chunk {
                buffer.extend_from_slice(&chunk);
            }
            let (values, consumed, error) = take_values(&buffer, done);
            let _ = buffer.split_to(consumed);
            for group in values.chunks(STREAM_GROUP_RECORDS_MAX) {
                for (_, report) in produce_group(&target, group.to_vec()).await {
                    if tx.send(line(&report)).await.is_err() {
                        return;
                    }
                }
            }
            if let Some(e) = error {
                let _ = tx.send(line(&error_report(&e).1)).await;
                return;
            }
            if buffer.len() > limit {
                let e = RestError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    code::PAYLOAD_TOO_LARGE,
                    "a record of the stream is above millrace.rest.request.bytes.max",
                );
                let _ = tx.send(line(&error_report(&e).1)).await;
                return;
            }
            if done {
                return;
            }
        }
    });
    stream_response(rx)
}

/// 200 with the reports as they come, one per line.
fn stream_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The JSON values of a whole body, and the error that ended it early, if one did.
fn split_values(raw: &[u8]) -> (Vec<Value>, Option<RestError>) {
    let (values, _, error) = take_values(raw, true);
    (values, error)
}

/// The complete JSON values at the front of `buffer`, how many bytes they (and the whitespace
/// after them) took, and a syntax error (only at the end of the stream, `done`, is a cut value
/// an error; before, it waits for more bytes).
fn take_values(buffer: &[u8], done: bool) -> (Vec<Value>, usize, Option<RestError>) {
    let mut values = Vec::new();
    let mut stream = serde_json::Deserializer::from_slice(buffer).into_iter::<Value>();
    let mut consumed = 0;
    loop {
        match stream.next() {
            None => break,
            Some(Ok(value)) => {
                values.push(value);
                consumed = stream.byte_offset();
            }
            Some(Err(e)) if e.is_eof() && !done => break,
            Some(Err(e)) => {
                let error = RestError::new(
                    StatusCode::BAD_REQUEST,
                    400,
                    format!("Bad Request: the body is not a stream of JSON records ({e})"),
                );
                return (values, buffer.len(), Some(error));
            }
        }
    }
    // Whitespace after the last value is consumed too.
    while buffer.get(consumed).is_some_and(u8::is_ascii_whitespace) {
        consumed += 1;
    }
    (values, consumed, None)
}

/// Produces the records `values` hold and answers one report per value, in order.
async fn produce_group(target: &Target, values: Vec<Value>) -> Vec<(StatusCode, Bytes)> {
    let prepared: Vec<Result<Prepared, RestError>> = values.into_iter().map(prepare).collect();
    let mut reports: Vec<Option<(StatusCode, Bytes)>> = vec![None; prepared.len()];
    let mut good = Vec::new();
    for (i, p) in prepared.into_iter().enumerate() {
        match p {
            Ok(p) => good.push((i, p)),
            Err(e) => reports[i] = Some(error_report(&e)),
        }
    }
    let records: Vec<ProduceRecord> = good.iter().map(|(_, p)| p.record.clone()).collect();
    let outcomes = if records.is_empty() {
        Ok(Vec::new())
    } else {
        produce::produce(&target.api.gateway, &target.caller, &target.topic, records).await
    };
    match outcomes {
        Ok(outcomes) => {
            for ((i, p), outcome) in good.iter().zip(outcomes) {
                reports[*i] = Some(report(target, p, &outcome));
            }
        }
        Err(e) if good.len() == 1 => {
            if let Some((i, _)) = good.first() {
                reports[*i] = Some(error_report(&e));
            }
        }
        Err(_) => {
            // One record spoiled the group (an unknown partition): produce each alone.
            for (i, p) in &good {
                let alone = produce::produce(
                    &target.api.gateway,
                    &target.caller,
                    &target.topic,
                    vec![p.record.clone()],
                )
                .await;
                reports[*i] = Some(match alone {
                    Ok(mut o) => match o.pop() {
                        Some(outcome) => report(target, p, &outcome),
                        None => error_report(&RestError::internal("no outcome")),
                    },
                    Err(e) => error_report(&e),
                });
            }
        }
    }
    reports
        .into_iter()
        .map(|r| r.unwrap_or_else(|| error_report(&RestError::internal("no report"))))
        .collect()
}

/// A record's report: 200 with where it went, or the Kafka error.
fn report(target: &Target, prepared: &Prepared, outcome: &RecordOutcome) -> (StatusCode, Bytes) {
    match outcome {
        RecordOutcome::Written {
            partition,
            offset,
            timestamp_ms,
        } => {
            let data = |d: &Option<(String, usize)>| {
                d.as_ref().map(|(kind, size)| DataReport {
                    kind: kind.clone(),
                    size: *size,
                })
            };
            let delivered = DeliveryReport {
                error_code: 200,
                cluster_id: target.cluster_id.clone(),
                topic_name: target.topic.clone(),
                partition_id: *partition,
                offset: *offset,
                timestamp: format_rfc3339(*timestamp_ms),
                key: data(&prepared.key_type),
                value: data(&prepared.value_type),
            };
            (StatusCode::OK, to_json(&delivered))
        }
        RecordOutcome::Failed {
            partition,
            error_code,
            message,
        } => error_report(&RestError::kafka(
            *error_code,
            &format!("partition {}-{partition}: {message}", target.topic),
        )),
    }
}

/// A delivery report, its fields in the document's order.
#[derive(Debug, Serialize)]
struct DeliveryReport {
    error_code: i32,
    cluster_id: String,
    topic_name: String,
    partition_id: i32,
    offset: i64,
    timestamp: String,
    key: Option<DataReport>,
    value: Option<DataReport>,
}

#[derive(Debug, Serialize)]
struct DataReport {
    #[serde(rename = "type")]
    kind: String,
    size: usize,
}

#[derive(Debug, Serialize)]
struct ErrorReport<'a> {
    error_code: i32,
    message: &'a str,
}

/// An error report and the status a one-record request answers with.
fn error_report(e: &RestError) -> (StatusCode, Bytes) {
    let report = ErrorReport {
        error_code: e.error_code,
        message: &e.message,
    };
    (e.status, to_json(&report))
}

/// A report's JSON, its fields in the struct's order.
fn to_json<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec()))
}

/// One JSON value as the record `value` holds: partition, headers, key, value, timestamp.
fn prepare(value: Value) -> Result<Prepared, RestError> {
    if !value.is_object() {
        // serde would read a struct from an array too; a record is a JSON object.
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            400,
            "Bad Request: a produce request is a JSON object",
        ));
    }
    let request: ProduceRequest = serde_json::from_value(value).map_err(|e| {
        RestError::new(
            StatusCode::BAD_REQUEST,
            400,
            format!("Bad Request: not a produce request ({e})"),
        )
    })?;
    if let Some(p) = request.partition_id {
        if p < 0 {
            return Err(RestError::new(
                StatusCode::NOT_FOUND,
                code::PARTITION_NOT_FOUND,
                "Partition not found.",
            ));
        }
    }
    let timestamp = match &request.timestamp {
        None => None,
        Some(t) => Some(parse_rfc3339(t).ok_or_else(|| {
            RestError::new(
                StatusCode::BAD_REQUEST,
                400,
                format!("Bad Request: timestamp={t:?} is not an ISO-8601 date-time"),
            )
        })?),
    };
    let mut headers = Vec::new();
    for (i, h) in request.headers.unwrap_or_default().into_iter().enumerate() {
        let value = match h.value {
            None => None,
            Some(v) => Some(Bytes::from(BASE64.decode(v.as_bytes()).map_err(|_| {
                RestError::new(
                    StatusCode::BAD_REQUEST,
                    400,
                    format!("Bad Request: headers[{i}].value={v:?} is not a base64 string."),
                )
            })?)),
        };
        headers.push((Bytes::from(h.name.into_bytes()), value));
    }
    let (key, key_type) = data(request.key, "key")?;
    let (value, value_type) = data(request.value, "value")?;
    Ok(Prepared {
        record: ProduceRecord {
            partition: request.partition_id,
            record: OutgoingRecord {
                key,
                value,
                headers,
                timestamp,
            },
        },
        key_type,
        value_type,
    })
}

/// A key's or value's bytes and its reported type and size.
#[allow(clippy::type_complexity)]
fn data(
    data: Option<DataJson>,
    field: &str,
) -> Result<(Option<Bytes>, Option<(String, usize)>), RestError> {
    let Some(d) = data else {
        return Ok((None, None));
    };
    let kind = d.kind.as_deref().map(str::to_ascii_uppercase);
    let schema_asked = d.schema_id.is_some()
        || d.schema_version.is_some()
        || d.schema.is_some()
        || d.subject.is_some();
    let no_registry = || {
        RestError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            SERIALIZATION_ERROR,
            format!(
                "Error serializing message. {field}: schema formats need a Schema Registry, and \
                 Millrace has none: use type BINARY, JSON or STRING"
            ),
        )
    };
    let kind = match kind.as_deref() {
        Some(k @ ("BINARY" | "JSON" | "STRING")) if !schema_asked => k.to_string(),
        _ => return Err(no_registry()),
    };
    let bytes = match d.data {
        None | Some(Value::Null) => None,
        Some(value) => Some(match kind.as_str() {
            "BINARY" => {
                let Value::String(text) = &value else {
                    return Err(bad_data(field, &value, "is not a base64 string."));
                };
                Bytes::from(
                    BASE64
                        .decode(text.as_bytes())
                        .map_err(|_| bad_data(field, &value, "is not a valid base64 string."))?,
                )
            }
            "STRING" => {
                let Value::String(text) = value else {
                    return Err(bad_data(field, &value, "is not a string."));
                };
                Bytes::from(text.into_bytes())
            }
            _ => Bytes::from(serde_json::to_vec(&value).map_err(|e| {
                RestError::new(StatusCode::BAD_REQUEST, 400, format!("{field}: {e}"))
            })?),
        }),
    };
    let size = bytes.as_ref().map_or(0, Bytes::len);
    Ok((bytes, Some((kind, size))))
}

fn bad_data(field: &str, value: &Value, what: &str) -> RestError {
    RestError::new(
        StatusCode::BAD_REQUEST,
        400,
        format!("Bad Request: {field}.data={value} {what}"),
    )
}

/// 404 unless `cluster_id` is this cluster's id.
fn check_cluster(api: &RestApi, cluster_id: &str) -> Result<(), RestError> {
    let image = api.gateway.image()?;
    if image.cluster_id.as_deref() == Some(cluster_id) {
        return Ok(());
    }
    Err(RestError::new(
        StatusCode::NOT_FOUND,
        404,
        format!("Cluster {cluster_id} not found."),
    ))
}

/// v3 reads `application/json` (and a body without a Content-Type).
fn content_type_is_json(headers: &HeaderMap) -> bool {
    matches!(
        body::Media::content_type(headers),
        body::Media::Json | body::Media::Any
    )
}

fn json(status: StatusCode, report: Bytes) -> Response {
    let mut response = (status, report).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A report as one line of a stream.
fn line(report: &Bytes) -> Bytes {
    let mut out = BytesMut::with_capacity(report.len() + 1);
    out.extend_from_slice(report);
    out.extend_from_slice(b"\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_back_to_back_are_split_and_a_cut_one_waits() {
        let (values, consumed, error) = take_values(
            br#"{"value":{"type":"JSON","data":1}} {"value":{"type":"JS"#,
            false,
        );
        assert_eq!(values.len(), 1);
        assert!(error.is_none());
        assert_eq!(consumed, 35);
        let (values, _, error) = take_values(br#"{"a":1}{"b":2}"#, true);
        assert_eq!(values.len(), 2);
        assert!(error.is_none());
        let (values, _, error) = take_values(br#"{"a":1} {"b":"#, true);
        assert_eq!(values.len(), 1);
        assert!(error.is_some(), "a cut record at the end is an error");
        let (values, _, error) = take_values(b"{\"a\":1} nope", true);
        assert_eq!(values.len(), 1);
        assert_eq!(error.map(|e| e.status), Some(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn a_v3_record_becomes_kafka_bytes() {
        let p = prepare(serde_json::json!({
            "partition_id": 1,
            "headers": [{"name": "h", "value": "SGVhZGVyLTE="}, {"name": "n", "value": null}],
            "key": {"type": "BINARY", "data": "Zm9vYmFy"},
            "value": {"type": "JSON", "data": {"foo": "bar"}},
            "timestamp": "2021-02-05T19:14:42Z"
        }))
        .expect("a record");
        assert_eq!(p.record.partition, Some(1));
        assert_eq!(p.record.record.key.as_deref(), Some(&b"foobar"[..]));
        assert_eq!(
            p.record.record.value.as_deref(),
            Some(&br#"{"foo":"bar"}"#[..])
        );
        assert_eq!(p.record.record.headers.len(), 2);
        assert_eq!(
            p.record.record.headers[0].1.as_deref(),
            Some(&b"Header-1"[..])
        );
        assert_eq!(p.record.record.headers[1].1, None);
        assert_eq!(p.record.record.timestamp, Some(1_612_552_482_000));
        assert_eq!(p.key_type, Some(("BINARY".to_string(), 6)));
        assert_eq!(p.value_type, Some(("JSON".to_string(), 13)));

        let e = prepare(serde_json::json!({"value": {"type": "BINARY", "data": 1}}))
            .err()
            .expect("not base64");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("value.data=1"), "{}", e.message);
        let e = prepare(serde_json::json!([null, null]))
            .err()
            .expect("an array is no record");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let e = prepare(serde_json::json!({"value": {"type": "AVRO", "data": 1}}))
            .err()
            .expect("avro");
        assert_eq!(e.error_code, SERIALIZATION_ERROR);
        let e = prepare(serde_json::json!({"value": {"data": 1}}))
            .err()
            .expect("no type: a schema");
        assert_eq!(e.error_code, SERIALIZATION_ERROR);
        let p = prepare(serde_json::json!({"value": {"type": "STRING", "data": "My message"}}))
            .expect("string");
        assert_eq!(p.record.record.value.as_deref(), Some(&b"My message"[..]));
        assert!(p.record.record.key.is_none());
    }
}
