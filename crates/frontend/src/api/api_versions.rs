//! ApiVersions (key 18): the advertised table from [`crate::versions`].
//!
//! v3+ reports the features of [`crate::versions::FEATURES`] as Kafka 4.1 does (KIP-584): the
//! supported ranges (v3 leaves out those whose minimum is 0, KIP-1022, as older clients reject a
//! range starting at 0), the finalized levels, and as their epoch the offset of the metadata image.
//! A version above ours gets the v0 body with UNSUPPORTED_VERSION plus our list so that the client
//! retries at a version we speak.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use super::str_bytes;
use crate::error_codes::UNSUPPORTED_VERSION;
use crate::versions::{ADVERTISED, FEATURES};

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
/// Kafka's INVALID_REQUEST on odd names). `features_epoch` is the metadata image's offset.
pub fn handle(
    _request: ApiVersionsRequest,
    version: i16,
    features_epoch: i64,
) -> ApiVersionsResponse {
    let response = ApiVersionsResponse::default().with_api_keys(api_keys());
    if version < 3 {
        return response;
    }
    let supported = FEATURES
        .iter()
        .filter(|f| version >= 4 || f.min > 0)
        .map(|f| {
            SupportedFeatureKey::default()
                .with_name(str_bytes(f.name))
                .with_min_version(f.min)
                .with_max_version(f.max)
        })
        .collect();
    let finalized = FEATURES
        .iter()
        .map(|f| {
            FinalizedFeatureKey::default()
                .with_name(str_bytes(f.name))
                .with_min_version_level(f.finalized)
                .with_max_version_level(f.finalized)
        })
        .collect();
    response
        .with_supported_features(supported)
        .with_finalized_features_epoch(features_epoch)
        .with_finalized_features(finalized)
}

/// The answer to a version above ours, to be encoded at v0.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(api_keys())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: &ApiVersionsResponse) -> Vec<String> {
        r.supported_features
            .iter()
            .map(|f| f.name.to_string())
            .collect()
    }

    #[test]
    fn features_as_kafka_41_reports_them() {
        let old = handle(ApiVersionsRequest::default(), 2, 9);
        assert!(old.supported_features.is_empty() && old.finalized_features.is_empty());
        // v3: KIP-1022 leaves out supported ranges that start at 0.
        let v3 = handle(ApiVersionsRequest::default(), 3, 9);
        assert_eq!(names(&v3), vec!["metadata.version".to_string()]);
        let v4 = handle(ApiVersionsRequest::default(), 4, 9);
        assert!(names(&v4).contains(&"group.version".to_string()));
        for r in [&v3, &v4] {
            assert_eq!(r.finalized_features_epoch, 9);
            let group = r
                .finalized_features
                .iter()
                .find(|f| f.name.as_str() == "group.version")
                .expect("group.version finalized");
            assert_eq!((group.min_version_level, group.max_version_level), (1, 1));
        }
    }
}
