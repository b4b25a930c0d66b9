//! The API keys and version ranges Millrace advertises in ApiVersions, and accepts:
//! [`ADVERTISED`], derived from [`crate::registry::APIS`] — each API's range is written once, in
//! its module's [`crate::handler::ApiHandler`] impl.
//!
//! Ranges follow Kafka 4.1's (protocol-checklist §2.1), trimmed to what is implemented, and keep
//! the exact versions old librdkafka looks for (§2.3): Produce 0 (gzip/snappy), Produce 3 + Fetch 4
//! (MsgVer2), Produce 7 + Fetch 10 (zstd), FindCoordinator 0 (lz4), ListOffsets 1 (offsets by time),
//! and for the balanced consumer OffsetCommit 2, OffsetFetch 1, JoinGroup/SyncGroup/Heartbeat/
//! LeaveGroup 0 (the tests below check them).
//! Produce v0-2 are advertised like Kafka 4 does but refused when they arrive (the connection is
//! closed), since magic 0/1 message sets are gone (`SERVED_MIN` in `api/produce.rs`).

use std::sync::OnceLock;

use kafka_protocol::messages::ApiKey;

pub use crate::handler::ApiRange;
use crate::registry::{self, APIS};

/// Everything Millrace answers, in the order ApiVersions lists it. A key missing here closes the
/// connection when it arrives.
pub const ADVERTISED: &[ApiRange] = &ranges::<{ APIS.len() }>();

/// The ranges of the registry's entries, in its order.
const fn ranges<const N: usize>() -> [ApiRange; N] {
    let mut ranges = [ApiRange {
        key: ApiKey::Produce,
        min: 0,
        max: 0,
    }; N];
    let mut i = 0;
    while i < N {
        let api = &APIS[i];
        ranges[i] = ApiRange {
            key: api.key,
            min: api.min,
            max: api.max,
        };
        i += 1;
    }
    ranges
}

/// The advertised range of `key`, if it is served at all.
pub fn advertised(key: ApiKey) -> Option<ApiRange> {
    registry::find(key).map(|api| ApiRange {
        key: api.key,
        min: api.min,
        max: api.max,
    })
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
