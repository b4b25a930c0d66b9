//! Request bodies and media types of the REST Proxy API: the body read whole within
//! `millrace.rest.request.bytes.max` (413 above it, with Confluent's body), JSON read into the
//! request's type with the failing field named (`records[2].partition: invalid type …`, 422),
//! Confluent's content types (`application/vnd.kafka[.<format>].v2+json`, `application/json`)
//! told apart, and JSON answers with the v2 content type.
//!
//! Used by v2 and by v3's produce ([`crate::v3_records`]).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{code, RestError};

/// Base64 as Confluent reads it: the standard alphabet, padding optional.
pub const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Confluent's 42207: a key or value could not be serialized (error.rs's [`code`] has the
/// common codes).
pub const SERIALIZATION_ERROR: i32 = 42207;

/// `application/vnd.kafka.v2+json`: v2 without embedded data.
pub const V2_JSON: &str = "application/vnd.kafka.v2+json";
/// `application/vnd.kafka.binary.v2+json`.
pub const V2_BINARY: &str = "application/vnd.kafka.binary.v2+json";
/// `application/vnd.kafka.json.v2+json`.
pub const V2_JSON_EMBEDDED: &str = "application/vnd.kafka.json.v2+json";

/// The embedded format of keys and values (Confluent's `EmbeddedFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddedFormat {
    /// Base64 in JSON strings; the bytes as they are in Kafka.
    Binary,
    /// Any JSON value; Kafka holds its compact serialization.
    Json,
    /// Schema Registry formats: not served (Millrace has no schema registry).
    Avro,
    Protobuf,
    JsonSchema,
}

impl EmbeddedFormat {
    /// The format named in a content type's `vnd.kafka.<name>.v2` or in a consumer's `format`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "binary" => Some(Self::Binary),
            "json" => Some(Self::Json),
            "avro" => Some(Self::Avro),
            "protobuf" => Some(Self::Protobuf),
            "jsonschema" => Some(Self::JsonSchema),
            _ => None,
        }
    }

    /// Its name in a content type and in a consumer's `format`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::Json => "json",
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
            Self::JsonSchema => "jsonschema",
        }
    }

    /// Whether the format needs a schema registry.
    pub fn needs_schema(self) -> bool {
        matches!(self, Self::Avro | Self::Protobuf | Self::JsonSchema)
    }

    /// `application/vnd.kafka.<name>.v2+json`.
    pub fn media_type(self) -> String {
        format!("application/vnd.kafka.{}.v2+json", self.name())
    }

    /// Confluent's answer when a schema format is asked for without a schema registry (its
    /// `SchemaRecordSerializerThrowing`: 422, 42207).
    pub fn no_schema_registry(self) -> RestError {
        RestError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            SERIALIZATION_ERROR,
            format!(
                "Error serializing message. The {} format needs a Schema Registry, and Millrace has \
                 none: produce binary or json.",
                self.name()
            ),
        )
    }
}

/// What a Content-Type (or one Accept entry) says, in v2's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// No header, `*/*`, `application/*`.
    Any,
    /// `application/vnd.kafka.v2+json`.
    V2,
    /// `application/vnd.kafka.<format>.v2+json`.
    Embedded(EmbeddedFormat),
    /// `application/json` (and `application/octet-stream`, which Confluent reads as JSON too).
    Json,
    /// Anything else.
    Other,
}

impl Media {
    /// Reads one media type, parameters (`; charset=utf-8`, `; q=0.9`) ignored.
    pub fn parse(value: &str) -> Self {
        let essence = value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "" | "*/*" | "application/*" => Self::Any,
            "application/json" | "application/octet-stream" => Self::Json,
            "application/vnd.kafka.v2+json" => Self::V2,
            other => other
                .strip_prefix("application/vnd.kafka.")
                .and_then(|rest| rest.strip_suffix(".v2+json"))
                .and_then(EmbeddedFormat::from_name)
                .map_or(Self::Other, Self::Embedded),
        }
    }

    /// The request's Content-Type.
    pub fn content_type(headers: &HeaderMap) -> Self {
        match headers.get(header::CONTENT_TYPE) {
            None => Self::Any,
            Some(v) => v.to_str().map_or(Self::Other, Self::parse),
        }
    }

    /// Every media type the request's Accept lists (`[Any]` without one).
    pub fn accepted(headers: &HeaderMap) -> Vec<Self> {
        let mut out: Vec<Self> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(Self::parse)
            .collect();
        if out.is_empty() {
            out.push(Self::Any);
        }
        out
    }
}

/// 415 with Confluent's body for a Content-Type a path does not read.
pub fn unsupported_media_type(headers: &HeaderMap, accepted: &str) -> RestError {
    let got = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    RestError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        code::UNSUPPORTED_MEDIA_TYPE,
        format!("HTTP 415 Unsupported Media Type: {got} (this path reads {accepted})"),
    )
}

/// Checks that a JSON body without embedded data comes as v2 JSON, plain JSON, or without a
/// Content-Type (what Confluent's consumer and metadata paths read; a consumer path also
/// takes the embedded types).
pub fn require_json(headers: &HeaderMap) -> Result<(), RestError> {
    match Media::content_type(headers) {
        Media::Any | Media::V2 | Media::Json | Media::Embedded(_) => Ok(()),
        Media::Other => Err(unsupported_media_type(
            headers,
            "application/vnd.kafka.v2+json or application/json",
        )),
    }
}

/// A request body, read whole within the body limit.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = RestError;

    async fn from_request(request: Request, state: &S) -> Result<Self, RestError> {
        match Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(Self(bytes)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(RestError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    code::PAYLOAD_TOO_LARGE,
                    "HTTP 413 Payload Too Large: the body is above millrace.rest.request.bytes.max",
                ))
            }
            Err(rejection) => Err(RestError::bad_request(rejection.body_text())),
        }
    }
}

/// `bytes` as a `T`; 422 naming the field that does not fit (or the syntax error's place).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RestError> {
    axum::Json::<T>::from_bytes(bytes)
        .map(|json| json.0)
        .map_err(|rejection| RestError::unprocessable(rejection.body_text()))
}

/// `bytes` as a `T`, or `None` for an empty (or all-whitespace) body.
pub fn parse_optional<T: DeserializeOwned>(bytes: &[u8]) -> Result<Option<T>, RestError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    parse(bytes).map(Some)
}

/// A JSON answer with the given content type.
pub fn json_response<T: Serialize>(status: StatusCode, media_type: &str, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = (status, body).into_response();
            if let Ok(v) = HeaderValue::from_str(media_type) {
                response.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            response
        }
        Err(e) => RestError::internal(format!("cannot write the answer: {e}")).into_response(),
    }
}

/// A 200 JSON answer with v2's content type.
pub fn v2_ok<T: Serialize>(value: &T) -> Response {
    json_response(StatusCode::OK, V2_JSON, value)
}

/// 204 with no body (Confluent's answer to deletes, subscriptions, seeks).
pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &str, expected: Media) {
        assert_eq!(Media::parse(value), expected, "{value}");
    }

    #[test]
    fn media_types_are_told_apart() {
        check("application/vnd.kafka.v2+json", Media::V2);
        check(
            "application/vnd.kafka.binary.v2+json",
            Media::Embedded(EmbeddedFormat::Binary),
        );
        check(
            "application/vnd.kafka.json.v2+json; charset=utf-8",
            Media::Embedded(EmbeddedFormat::Json),
        );
        check(
            "application/vnd.kafka.avro.v2+json",
            Media::Embedded(EmbeddedFormat::Avro),
        );
        check("Application/JSON", Media::Json);
        check("*/*", Media::Any);
        check("text/plain", Media::Other);
        check("application/vnd.kafka.binary.v1+json", Media::Other);
        check("application/vnd.kafka.xml.v2+json", Media::Other);
    }

    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[allow(dead_code)]
        records: Vec<Record>,
    }
    #[derive(serde::Deserialize, Debug)]
    struct Record {
        #[allow(dead_code)]
        partition: Option<i32>,
    }

    #[test]
    fn a_field_that_does_not_fit_is_named() {
        let e = parse::<Body>(br#"{"records":[{"partition":1},{"partition":"x"}]}"#)
            .expect_err("a string partition");
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(e.message.contains("records[1].partition"), "{}", e.message);
        let e = parse::<Body>(b"{\"records\":[").expect_err("cut JSON");
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(parse_optional::<Body>(b" \n").expect("empty").is_none());
    }
}
