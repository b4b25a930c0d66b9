//! ApiVersions (key 18): the advertised table ([`crate::versions::ADVERTISED`], handed in as
//! [`Call::advertised`]).
//!
//! v3+ reports the features of [`FEATURES`] as Kafka 4.1 does (KIP-584): the
//! supported ranges (v3 leaves out those whose minimum is 0, KIP-1022, as older clients reject a
//! range starting at 0), the finalized levels, and as their epoch the offset of the metadata image.
//! A version above ours gets the v0 body with UNSUPPORTED_VERSION plus our list so that the client
//! retries at a version we speak.
//!
//! v5 (KIP-1242) carries the cluster id and node id the client means to reach, both or neither
//! (one alone: INVALID_REQUEST); a cluster id or node id that is not this broker's answers
//! REBOOTSTRAP_REQUIRED with no API table, so the client looks for its cluster again — Kafka
//! 4.4's answers, codes and empty table alike.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

use super::str_bytes;
use crate::error_codes::{INVALID_REQUEST, REBOOTSTRAP_REQUIRED, UNSUPPORTED_VERSION};
use crate::handler::{response_fields, ApiHandler, ApiRange, Call, Reply, Versions};

/// ApiVersions: its key, versions, handler and error codes, for [`crate::registry`].
pub struct ApiVersions;

impl ApiHandler for ApiVersions {
    const KEY: ApiKey = ApiKey::ApiVersions;
    const VERSIONS: Versions = 0..=5;
    const BEFORE_AUTHENTICATION: bool = true;
    const REQUEST_QUOTA_EXEMPT: bool = true;
    type Request = ApiVersionsRequest;
    type Response = ApiVersionsResponse;

    fn handle(call: Call<'_>, request: ApiVersionsRequest) -> Reply<ApiVersionsResponse> {
        let epoch = i64::try_from(call.ctx.cluster.image().offset).unwrap_or(i64::MAX);
        let share = call.ctx.shares.settings.enabled;
        let identity = (call.ctx.cluster.cluster_id(), call.ctx.cluster.node_id());
        if let Err(code) = check_expected_node(&request, call.version, &identity.0, identity.1) {
            return Reply::Now(ApiVersionsResponse::default().with_error_code(code));
        }
        Reply::Now(handle(request, call.version, epoch, call.advertised, share))
    }
}

response_fields!(ApiVersionsResponse: errors[error_code], throttle_time_ms);

/// A feature as ApiVersions v3+ reports it (KIP-584): the levels this broker supports and the
/// level finalized in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
    pub finalized: i16,
}

/// The features Millrace reports, with Kafka 4.1.1's levels for what it implements:
/// `metadata.version` 27 (4.1-IV1, the protocol surface it speaks), `group.version` 1 (KIP-848
/// consumer groups), `eligible.leader.replicas.version` 1 (KIP-966). Not reported:
/// `transaction.version` (so that clients use transaction version 0: EndTxn ≤ v4 and explicit
/// AddPartitionsToTxn; KIP-890 part 2 is not served yet),
/// `kraft.version` (the controller quorum is Millrace's own, not KRaft's). `share.version`
/// ([`SHARE_VERSION`]) is reported apart: finalized only where share groups are on.
pub const FEATURES: &[Feature] = &[
    Feature {
        name: "group.version",
        min: 0,
        max: 1,
        finalized: 1,
    },
    Feature {
        name: "metadata.version",
        min: 7,
        max: 27,
        finalized: 27,
    },
    Feature {
        name: "eligible.leader.replicas.version",
        min: 0,
        max: 1,
        finalized: 1,
    },
];

/// `share.version` (KIP-932): level 1 serves share groups (Kafka 4.2's level); level 2 (Kafka
/// 4.4's dead-letter queues, KIP-1191) is not supported. Finalized at 1 with
/// `millrace.share.groups.enable=true`, else not finalized (level 0), and the share APIs answer
/// UNSUPPORTED_VERSION as Kafka's do.
pub const SHARE_VERSION: Feature = Feature {
    name: "share.version",
    min: 0,
    max: 1,
    finalized: 1,
};

/// First version with the client's expected cluster id and node id (KIP-1242).
const EXPECTED_NODE_VERSION_MIN: i16 = 5;
/// `node_id` when the client names no node.
const NO_NODE_ID: i32 = -1;

/// KIP-1242's check of the node a v5+ client means to reach: both of `cluster_id` and `node_id`
/// or neither (INVALID_REQUEST), and both this broker's (else REBOOTSTRAP_REQUIRED).
pub fn check_expected_node(
    request: &ApiVersionsRequest,
    version: i16,
    cluster_id: &str,
    node_id: i32,
) -> Result<(), i16> {
    if version < EXPECTED_NODE_VERSION_MIN {
        return Ok(());
    }
    match (&request.cluster_id, request.node_id) {
        (None, NO_NODE_ID) => Ok(()),
        (Some(expected), n) if n != NO_NODE_ID => {
            if expected.as_str() == cluster_id && n == node_id {
                Ok(())
            } else {
                Err(REBOOTSTRAP_REQUIRED)
            }
        }
        _ => Err(INVALID_REQUEST),
    }
}

fn api_keys(advertised: &[ApiRange]) -> Vec<ApiVersion> {
    advertised
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
    advertised: &[ApiRange],
    share_groups: bool,
) -> ApiVersionsResponse {
    let response = ApiVersionsResponse::default().with_api_keys(api_keys(advertised));
    if version < 3 {
        return response;
    }
    let supported = FEATURES
        .iter()
        .chain(std::iter::once(&SHARE_VERSION))
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
        .chain(share_groups.then_some(&SHARE_VERSION))
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
pub fn unsupported_version_response(advertised: &[ApiRange]) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(api_keys(advertised))
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
        let old = handle(ApiVersionsRequest::default(), 2, 9, &[], false);
        assert!(old.supported_features.is_empty() && old.finalized_features.is_empty());
        // v3: KIP-1022 leaves out supported ranges that start at 0.
        let v3 = handle(ApiVersionsRequest::default(), 3, 9, &[], false);
        assert_eq!(names(&v3), vec!["metadata.version".to_string()]);
        let v4 = handle(ApiVersionsRequest::default(), 4, 9, &[], false);
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

    #[test]
    fn v5_checks_the_cluster_and_node_the_client_means_to_reach() {
        let ask = |cluster: Option<&str>, node: i32| {
            ApiVersionsRequest::default()
                .with_cluster_id(cluster.map(str_bytes))
                .with_node_id(node)
        };
        let check = |r: &ApiVersionsRequest, v| check_expected_node(r, v, "c1", 3);
        assert_eq!(check(&ask(None, -1), 5), Ok(()));
        assert_eq!(check(&ask(Some("c1"), 3), 5), Ok(()));
        assert_eq!(check(&ask(Some("c2"), 3), 5), Err(REBOOTSTRAP_REQUIRED));
        assert_eq!(check(&ask(Some("c1"), 4), 5), Err(REBOOTSTRAP_REQUIRED));
        assert_eq!(check(&ask(Some("c1"), -1), 5), Err(INVALID_REQUEST));
        assert_eq!(check(&ask(None, 3), 5), Err(INVALID_REQUEST));
        // Below v5 the fields do not exist.
        assert_eq!(check(&ask(Some("c2"), 4), 4), Ok(()));
    }

    #[test]
    fn share_version_is_finalized_only_where_share_groups_are_on() {
        let finalized = |r: &ApiVersionsResponse| {
            r.finalized_features
                .iter()
                .find(|f| f.name.as_str() == "share.version")
                .map(|f| (f.min_version_level, f.max_version_level))
        };
        let off = handle(ApiVersionsRequest::default(), 4, 9, &[], false);
        assert!(names(&off).contains(&"share.version".to_string()));
        assert_eq!(finalized(&off), None);
        let on = handle(ApiVersionsRequest::default(), 4, 9, &[], true);
        assert_eq!(finalized(&on), Some((1, 1)));
        // Supported 0..1: v3 leaves it out (KIP-1022).
        let v3 = handle(ApiVersionsRequest::default(), 3, 9, &[], true);
        assert!(!names(&v3).contains(&"share.version".to_string()));
    }
}
