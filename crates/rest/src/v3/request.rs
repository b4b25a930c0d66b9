//! What a v3 handler takes from an HTTP request, with Confluent's answers when it cannot:
//! [`JsonBody`] (the body as JSON: 415 for another content type, 413 above the body limit, 422 for
//! an empty body, 400 naming the field for JSON that does not fit), [`PathParams`] (404 for a path
//! parameter of the wrong type, as JAX-RS answers), [`QueryParams`] (400) and [`Urls`] (the base
//! of the `self` and `related` links in the answers).
//!
//! The JSON is parsed once, here; handlers see typed values only.

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::{CONTENT_TYPE, HOST};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::error::{code, RestError};

use super::errors;

/// A request body parsed as JSON into `T`.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = RestError;

    async fn from_request(request: Request, state: &S) -> Result<Self, RestError> {
        if !is_json(request.headers()) {
            return Err(RestError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code::UNSUPPORTED_MEDIA_TYPE,
                "HTTP 415 Unsupported Media Type",
            ));
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    RestError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        code::PAYLOAD_TOO_LARGE,
                        "The request body is larger than the server accepts.",
                    )
                } else {
                    RestError::bad_request(rejection.body_text())
                }
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(errors::invalid_payload(
                "Request body is empty. Data is required.",
            ));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            // The message names the field (`configs[0].name: invalid type: …`).
            Err(rejection) => Err(RestError::bad_request(rejection.body_text())),
        }
    }
}

/// Whether the request says its body is JSON (`application/json`, parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// Path parameters parsed into `T`; a parameter that does not parse (a broker id that is not a
/// number) names no resource: 404.
pub struct PathParams<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, RestError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PathParams(value)),
            Err(_) => Err(errors::not_found("HTTP 404 Not Found")),
        }
    }
}

/// Query parameters parsed into `T`; 400 naming the parameter when they do not parse.
pub struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, RestError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(QueryParams(value)),
            Err(rejection) => Err(RestError::bad_request(rejection.body_text())),
        }
    }
}

/// For optional body fields the document does not mark nullable: absent is `None`, `null` is
/// refused like any other value of the wrong type. Use with `#[serde(default, deserialize_with =
/// "present")]`.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The base of the links in an answer: the scheme and authority the client used (`Host`, or the
/// HTTP/2 `:authority`), so links resolve from where the client stands.
#[derive(Debug, Clone)]
pub struct Urls {
    base: String,
}

impl Urls {
    /// Links under `base` (`http://host:port`).
    pub fn new(base: impl Into<String>) -> Self {
        Self { base: base.into() }
    }

    /// The URL of `segments` below `/v3`, each segment percent-encoded.
    pub fn v3(&self, segments: &[&str]) -> String {
        let mut url = String::with_capacity(self.base.len() + 64);
        url.push_str(&self.base);
        url.push_str("/v3");
        for segment in segments {
            url.push('/');
            encode_segment(segment, &mut url);
        }
        url
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Urls {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, RestError> {
        let authority = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| {
                parts
                    .headers
                    .get(HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_string)
            });
        let scheme = parts.uri.scheme_str().unwrap_or("http");
        Ok(match authority {
            Some(authority) => Urls::new(format!("{scheme}://{authority}")),
            // No authority at all (an HTTP/1.0 client): links relative to the server's root.
            None => Urls::new(""),
        })
    }
}

/// Appends `segment` percent-encoded as one path segment (RFC 3986 unreserved characters kept).
fn encode_segment(segment: &str, out: &mut String) {
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Urls;

    fn check(segments: &[&str], expected: &str) {
        assert_eq!(Urls::new("http://h:1").v3(segments), expected);
    }

    #[test]
    fn segments_are_percent_encoded() {
        check(&["clusters", "c-1"], "http://h:1/v3/clusters/c-1");
        check(
            &["consumer-groups", "a b/c"],
            "http://h:1/v3/consumer-groups/a%20b%2Fc",
        );
        check(&["topics", "t.x_y~"], "http://h:1/v3/topics/t.x_y~");
        check(&["g", "é"], "http://h:1/v3/g/%C3%A9");
    }
}
