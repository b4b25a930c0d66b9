//! The one table of API keys and version ranges Millrace advertises in ApiVersions, and accepts.
//!
//! Ranges follow Kafka 4.1's (protocol-checklist §2.1), trimmed to what is implemented, and keep
//! the exact versions old librdkafka looks for (§2.3): Produce 0 (gzip/snappy), Produce 3 + Fetch 4
//! (MsgVer2), Produce 7 + Fetch 10 (zstd), FindCoordinator 0 (lz4), ListOffsets 1 (offsets by time),
//! and for the balanced consumer OffsetCommit 2, OffsetFetch 1, JoinGroup/SyncGroup/Heartbeat/
//! LeaveGroup 0.
//! Produce v0-2 are advertised like Kafka 4 does but refused when they arrive (the connection is
//! closed), since magic 0/1 message sets are gone.

use std::sync::OnceLock;

use kafka_protocol::messages::ApiKey;

/// An advertised (key, min, max).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

const fn range(key: ApiKey, min: i16, max: i16) -> ApiRange {
    ApiRange { key, min, max }
}

/// Everything Millrace answers. A key missing here closes the connection when it arrives.
pub const ADVERTISED: &[ApiRange] = &[
    range(ApiKey::Produce, 0, 13),
    range(ApiKey::Fetch, 4, 17),
    range(ApiKey::ListOffsets, 1, 10),
    range(ApiKey::Metadata, 0, 12),
    range(ApiKey::FindCoordinator, 0, 6),
    range(ApiKey::ApiVersions, 0, 4),
    range(ApiKey::SaslHandshake, 0, 1),
    range(ApiKey::SaslAuthenticate, 0, 2),
    range(ApiKey::DescribeUserScramCredentials, 0, 0),
    range(ApiKey::AlterUserScramCredentials, 0, 0),
    range(ApiKey::DescribeClientQuotas, 0, 1),
    range(ApiKey::AlterClientQuotas, 0, 1),
    range(ApiKey::DescribeAcls, 1, 3),
    range(ApiKey::CreateAcls, 1, 3),
    range(ApiKey::DeleteAcls, 1, 3),
    range(ApiKey::CreateTopics, 2, 7),
    range(ApiKey::DeleteTopics, 1, 6),
    range(ApiKey::CreatePartitions, 0, 3),
    range(ApiKey::ElectLeaders, 0, 2),
    range(ApiKey::AlterPartitionReassignments, 0, 0),
    range(ApiKey::ListPartitionReassignments, 0, 0),
    range(ApiKey::InitProducerId, 0, 5),
    range(ApiKey::DescribeConfigs, 1, 4),
    range(ApiKey::ListConfigResources, 0, 1),
    range(ApiKey::AlterConfigs, 0, 2),
    range(ApiKey::IncrementalAlterConfigs, 0, 1),
    range(ApiKey::DeleteRecords, 0, 2),
    range(ApiKey::OffsetForLeaderEpoch, 2, 4),
    range(ApiKey::DescribeLogDirs, 1, 4),
    range(ApiKey::DescribeProducers, 0, 0),
    range(ApiKey::AddPartitionsToTxn, 0, 3),
    range(ApiKey::AddOffsetsToTxn, 0, 4),
    range(ApiKey::TxnOffsetCommit, 0, 4),
    range(ApiKey::EndTxn, 0, 4),
    range(ApiKey::WriteTxnMarkers, 1, 1),
    range(ApiKey::DescribeTransactions, 0, 0),
    range(ApiKey::ListTransactions, 0, 1),
    range(ApiKey::DescribeTopicPartitions, 0, 0),
    range(ApiKey::DescribeCluster, 0, 1),
    range(ApiKey::OffsetCommit, 2, 9),
    range(ApiKey::OffsetFetch, 1, 9),
    range(ApiKey::JoinGroup, 0, 9),
    range(ApiKey::Heartbeat, 0, 4),
    range(ApiKey::LeaveGroup, 0, 5),
    range(ApiKey::SyncGroup, 0, 5),
    range(ApiKey::DescribeGroups, 0, 5),
    range(ApiKey::ListGroups, 0, 5),
    range(ApiKey::DeleteGroups, 0, 2),
    range(ApiKey::OffsetDelete, 0, 0),
    range(ApiKey::ConsumerGroupHeartbeat, 0, 1),
    range(ApiKey::ConsumerGroupDescribe, 0, 1),
];

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
/// `kraft.version` (the controller quorum is Millrace's own, not KRaft's), `share.version`.
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

/// Lowest Produce version that is actually served (magic 2 record batches).
pub const PRODUCE_VERSION_SERVED_MIN: i16 = 3;

/// The advertised range of `key`, if it is served at all.
pub fn advertised(key: ApiKey) -> Option<ApiRange> {
    ADVERTISED.iter().copied().find(|r| r.key == key)
}

/// The API's name as Kafka spells it ("Produce", "Fetch"), for metric labels; "Unknown" for a key
/// Millrace does not serve. The names are made once, for the advertised keys only.
pub fn api_name(key: ApiKey) -> &'static str {
    static NAMES: OnceLock<Vec<(ApiKey, &'static str)>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            ADVERTISED
                .iter()
                .map(|r| {
                    let name: &'static str = Box::leak(format!("{:?}", r.key).into_boxed_str());
                    (r.key, name)
                })
                .collect()
        })
        .iter()
        .find(|(k, _)| *k == key)
        .map_or("Unknown", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_is_within_the_crate_schema() {
        for r in ADVERTISED {
            let schema = r.key.valid_versions();
            assert!(
                r.max <= schema.max,
                "{:?} max {} > schema {}",
                r.key,
                r.max,
                schema.max
            );
            assert!(r.min <= r.max);
        }
    }

    #[test]
    fn librdkafka_exact_versions_are_present() {
        let has = |k: ApiKey, v: i16| advertised(k).is_some_and(|r| r.min <= v && v <= r.max);
        assert!(has(ApiKey::Produce, 0));
        assert!(has(ApiKey::Produce, 3) && has(ApiKey::Fetch, 4));
        assert!(has(ApiKey::Produce, 7) && has(ApiKey::Fetch, 10));
        assert!(has(ApiKey::FindCoordinator, 0));
        assert!(has(ApiKey::ListOffsets, 1));
        // The balanced consumer (§2.3).
        assert!(has(ApiKey::OffsetCommit, 2));
        assert!(has(ApiKey::OffsetFetch, 1));
        for key in [
            ApiKey::JoinGroup,
            ApiKey::SyncGroup,
            ApiKey::Heartbeat,
            ApiKey::LeaveGroup,
        ] {
            assert!(has(key, 0), "{key:?} 0");
        }
    }
}
