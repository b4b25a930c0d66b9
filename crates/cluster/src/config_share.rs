//! Share groups' broker configuration rules (KIP-932, KIP-1240, KIP-1263) as Apache Kafka 4.4
//! applies them at start-up: the `group.share.*` keys that must go together. The keys themselves
//! (names, types, defaults, each one's own range, all Kafka's) are in the registry, `config.rs`;
//! this module owns only the rules between keys.
//!
//! Where it sits: [`BrokerConfig::from_layers`] runs [`BrokerConfig::check_share_groups`] after
//! every value passed its own range check. The rules, in Kafka's order (`ShareGroupConfig` and
//! `GroupCoordinatorConfig` constructors):
//! - `min ≤ value ≤ max` for the delivery count limit, the record lock limit per share
//!   partition, the record lock duration, the heartbeat interval, the session timeout and the
//!   assignment interval, against their `group.share.min.*` and `group.share.max.*` keys (and
//!   each `max` at least its `min`);
//! - `group.share.max.share.sessions` at least `group.share.max.size` (every member of the
//!   largest group can hold a share session);
//! - the heartbeat interval below the session timeout;
//! - `group.share.assignors` names exactly one assignor, and Millrace has only `simple`
//!   (Kafka also accepts its class name).
//!
//! Every refusal is a [`ConfigError::InvalidValue`] naming the key, with Kafka's wording
//! ("X must be greater than or equal to Y").
//!
//! [`BrokerConfig::share`] reads the broker-wide settings ([`ShareConfig`]), and Millrace's
//! own `millrace.share.groups.enable`: on by default, as share groups are in Kafka 4.2+ (decision
//! 0077); off, the share APIs answer UNSUPPORTED_VERSION. Kafka 4.4 gates share groups with the
//! `share.version` feature instead, which Millrace finalizes at 1 when this is on.
//!
//! Deliberately not here: the per-group dynamic configs (`share.*` on GROUP resources, and what a
//! group obeys with the broker's values standing in: `config_group.rs`), the share coordinator's
//! `share.coordinator.*` keys.

use crate::config::{BrokerConfig, ConfigError};
use crate::config_error::invalid;

/// `group.share.assignors`' one assignor, by short name and by Kafka's class name.
const SIMPLE_ASSIGNOR: &str = "simple";
const SIMPLE_ASSIGNOR_CLASS: &str = "org.apache.kafka.coordinator.group.assignor.SimpleAssignor";

/// (value key, min key, max key, value default, min default, max default).
type Bounded = (&'static str, &'static str, &'static str, i64, i64, i64);

/// Each value key with the keys bounding it, in Kafka's order of checks.
const BOUNDED: &[Bounded] = &[
    (
        "group.share.delivery.count.limit",
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
        5,
        2,
        10,
    ),
    (
        "group.share.partition.max.record.locks",
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
        2_000,
        100,
        4_000,
    ),
    (
        "group.share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
        30_000,
        15_000,
        60_000,
    ),
    (
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
        5_000,
        5_000,
        15_000,
    ),
    (
        "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
        45_000,
        45_000,
        60_000,
    ),
    (
        "group.share.assignment.interval.ms",
        "group.share.min.assignment.interval.ms",
        "group.share.max.assignment.interval.ms",
        1_000,
        0,
        15_000,
    ),
];

impl BrokerConfig {
    /// Kafka's start-up checks between the `group.share.*` keys (see the module comment).
    pub(crate) fn check_share_groups(&self) -> Result<(), ConfigError> {
        let at_least = |key: &str, value: i64, other: &str, bound: i64| {
            if value >= bound {
                Ok(())
            } else {
                Err(invalid(
                    key,
                    &value.to_string(),
                    format!("{key} must be greater than or equal to {other} ({bound})"),
                ))
            }
        };
        let at_most = |key: &str, value: i64, other: &str, bound: i64| {
            if value <= bound {
                Ok(())
            } else {
                Err(invalid(
                    key,
                    &value.to_string(),
                    format!("{key} must be less than or equal to {other} ({bound})"),
                ))
            }
        };
        for &(key, min_key, max_key, fallback, min_fallback, max_fallback) in BOUNDED {
            let value = self.long_or(key, fallback);
            let (min, max) = (
                self.long_or(min_key, min_fallback),
                self.long_or(max_key, max_fallback),
            );
            at_least(max_key, max, min_key, min)?;
            at_least(key, value, min_key, min)?;
            at_most(key, value, max_key, max)?;
        }
        let max_size = self.long_or("group.share.max.size", 200);
        at_least(
            "group.share.max.share.sessions",
            self.long_or("group.share.max.share.sessions", 2_000),
            "group.share.max.size",
            max_size,
        )?;
        let (interval, session) = (
            self.long_or("group.share.heartbeat.interval.ms", 5_000),
            self.long_or("group.share.session.timeout.ms", 45_000),
        );
        if interval >= session {
            return Err(invalid(
                "group.share.heartbeat.interval.ms",
                &interval.to_string(),
                format!(
                    "group.share.heartbeat.interval.ms must be less than \
                     group.share.session.timeout.ms ({session})"
                ),
            ));
        }
        self.check_share_assignors()
    }

    /// `group.share.assignors` names exactly one assignor, one Millrace has.
    fn check_share_assignors(&self) -> Result<(), ConfigError> {
        let key = "group.share.assignors";
        let Some(value) = self.get(key) else {
            return Ok(());
        };
        let names: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if names.len() != 1 {
            return Err(invalid(
                key,
                value,
                format!(
                    "{key} must contain exactly one assignor, but found {}",
                    names.len()
                ),
            ));
        }
        if names
            .iter()
            .any(|n| *n != SIMPLE_ASSIGNOR && *n != SIMPLE_ASSIGNOR_CLASS)
        {
            return Err(invalid(
                key,
                value,
                format!(
                    "unknown assignor: {SIMPLE_ASSIGNOR} ({SIMPLE_ASSIGNOR_CLASS}) is available"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn check(pairs: &[(&str, &str)], refused_key: Option<&str>) {
        let layer: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match (BrokerConfig::from_layers([&layer]), refused_key) {
            (Ok(_), None) => {}
            (Err(e), Some(key)) => assert!(e.to_string().contains(key), "{pairs:?}: {e}"),
            (result, expected) => panic!("{pairs:?}: {result:?}, expected refusal of {expected:?}"),
        }
    }

    #[test]
    fn defaults_and_kafkas_ranges() {
        check(&[], None);
        // Each key's own range (Kafka's ConfigDef validators).
        check(
            &[("group.share.max.size", "1001")],
            Some("group.share.max.size"),
        );
        check(
            &[("group.share.max.size", "0")],
            Some("group.share.max.size"),
        );
        check(
            &[("group.share.delivery.count.limit", "11")],
            Some("group.share.delivery.count.limit"),
        );
        check(
            &[("group.share.record.lock.duration.ms", "999")],
            Some("group.share.record.lock.duration.ms"),
        );
        check(
            &[("group.share.min.partition.max.record.locks", "99")],
            Some("group.share.min.partition.max.record.locks"),
        );
        check(
            &[("group.share.session.timeout.ms", "0")],
            Some("group.share.session.timeout.ms"),
        );
        check(
            &[("group.share.assignor.offload.enable", "maybe")],
            Some("offload"),
        );
    }

    #[test]
    fn values_stay_within_their_min_and_max() {
        check(
            &[("group.share.session.timeout.ms", "30000")],
            Some("group.share.session.timeout.ms"),
        );
        check(
            &[
                ("group.share.session.timeout.ms", "30000"),
                ("group.share.min.session.timeout.ms", "30000"),
            ],
            None,
        );
        check(
            &[
                ("group.share.delivery.count.limit", "10"),
                ("group.share.max.delivery.count.limit", "8"),
            ],
            Some("group.share.delivery.count.limit"),
        );
        check(
            &[("group.share.record.lock.duration.ms", "70000")],
            Some("group.share.max.record.lock.duration.ms"),
        );
        check(
            &[("group.share.max.heartbeat.interval.ms", "4000")],
            Some("group.share.max.heartbeat.interval.ms"),
        );
        check(
            &[("group.share.assignment.interval.ms", "20000")],
            Some("group.share.assignment.interval.ms"),
        );
    }

    #[test]
    fn cross_key_rules() {
        check(
            &[
                ("group.share.max.size", "1000"),
                ("group.share.max.share.sessions", "999"),
            ],
            Some("group.share.max.share.sessions"),
        );
        check(
            &[
                ("group.share.heartbeat.interval.ms", "15000"),
                ("group.share.session.timeout.ms", "15000"),
                ("group.share.min.session.timeout.ms", "1000"),
            ],
            Some("group.share.heartbeat.interval.ms"),
        );
        check(&[("group.share.assignors", SIMPLE_ASSIGNOR_CLASS)], None);
        check(
            &[("group.share.assignors", "simple,simple")],
            Some("exactly one"),
        );
        check(
            &[("group.share.assignors", "com.example.Mine")],
            Some("group.share.assignors"),
        );
    }
}

/// Whether share groups are served, and how many share sessions a broker holds. What each
/// share partition obeys (lock duration, delivery-count limit, in-flight window, where it starts)
/// is per group: [`BrokerConfig::group_settings`] (`config_group.rs`), the broker's
/// `group.share.*` values standing in where the group sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// `millrace.share.groups.enable`.
    pub enabled: bool,
    /// `group.share.max.share.sessions`.
    pub max_share_sessions: usize,
}

impl BrokerConfig {
    /// Share groups' broker-wide settings.
    pub fn share(&self) -> ShareConfig {
        ShareConfig {
            enabled: self.bool_or("millrace.share.groups.enable", true),
            max_share_sessions: usize::try_from(
                self.long_or("group.share.max.share.sessions", 2_000),
            )
            .unwrap_or(0),
        }
    }
}
