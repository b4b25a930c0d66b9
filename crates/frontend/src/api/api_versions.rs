//! ApiVersions (key 18): the advertised table from [`crate::versions`].
//!
//! For v3+ the response carries no feature fields (checklist §0.11: Debian's kcat fails on them),
//! and a version above ours gets the v0 body with UNSUPPORTED_VERSION plus our list so that the
//! client retries at a version we speak.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::error_codes::UNSUPPORTED_VERSION;
use crate::versions::ADVERTISED;

fn api_keys() -> Vec<ApiVersion> {
    ADVERTISED
        .iter()
        .map(|r| {
            ApiVersion::default()
                .with_api_key(r.key as i16)
                .with_min_version(r.min)
                .with_max_version(r.max)
        })
        .collect()
}

/// The normal answer. Client software name/version are accepted as they come (lenient, unlike
/// Kafka's INVALID_REQUEST on odd names).
pub fn handle(_request: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The answer to a version above ours, to be encoded at v0.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(api_keys())
}
