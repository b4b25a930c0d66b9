//! Tiered storage's configuration rules (KIP-405 and KIP-950, decision 0073) as Apache Kafka 4
//! applies them: which topic configs may go with `remote.storage.enable`, and which broker
//! settings must go together. The keys themselves (names, types, defaults, synonyms) are in the
//! registry, `config.rs`; this module owns only the rules between keys.
//!
//! Where it sits: the controller runs [`BrokerConfig::check_topic_configs`] on every CreateTopics,
//! AlterConfigs and IncrementalAlterConfigs, after [`TopicConfigs::new`] has checked each value on
//! its own, so the rules live in one place whichever broker the request came in on (in a cluster
//! it is the active controller's own `remote.log.storage.system.enable` that counts, as in Kafka).
//! [`BrokerConfig::from_layers`] runs [`BrokerConfig::check_remote_storage`] at start-up.
//!
//! The topic rules, over the effective values (the topic's override, else the broker's synonym,
//! else the default), in Kafka's order (`LogConfig.validateTopicLogConfigValues`):
//! - `remote.storage.enable=true` needs `remote.log.storage.system.enable=true`;
//! - not on a compacted topic (`cleanup.policy` containing `compact`);
//! - `local.retention.bytes` at most `retention.bytes` and `local.retention.ms` at most
//!   `retention.ms`, where -2 means "as retention" and is always allowed, and -1 (unbounded) is
//!   refused unless retention is unbounded too;
//! - with `remote.log.copy.disable=true`, local retention equals retention (or is -2);
//! - `remote.storage.enable` going from true to false needs `remote.log.delete.on.disable=true`.
//!
//! Every refusal is a [`ConfigError::InvalidValue`] naming the key (INVALID_CONFIG at the edge),
//! with Kafka's meaning in Millrace's words.
//!
//! Deliberately not here: whether the object store at `millrace.remote.storage.url` is usable
//! (the remote log manager finds out when it starts), and Kafka's `remote.log.copy.lag.*`, which
//! Millrace does not have.

use crate::config::{parse_cleanup_policy, BrokerConfig, ConfigError, TopicConfigs};
use crate::config_error::invalid;

const MAX_PENDING_BYTES: u64 = 10 * 1024 * 1024 * 1024;
const CACHE_BYTES: u64 = 64 * 1024 * 1024;
const ORPHAN_GRACE_MS: u64 = 600_000;
/// Kafka's `remote.log.manager.task.interval.ms` default.
const TASK_INTERVAL_MS: u64 = 30_000;
/// Kafka's `remote.fetch.max.wait.ms` default.
const REMOTE_FETCH_MAX_WAIT_MS: u64 = 500;

/// Local retention -2: "the same as `retention.*`" (Kafka's `DEFAULT_LOCAL_RETENTION_*`).
const LOCAL_RETENTION_AS_RETENTION: i64 = -2;
/// Retention -1: unbounded.
const UNBOUNDED: i64 = -1;

/// The broker's tiered-storage settings, read once from [`BrokerConfig`] for the code that runs
/// tiered storage (the remote log manager, produce's back-pressure, remote reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteStorageConfig {
    /// `remote.log.storage.system.enable`: tiered storage runs on this broker.
    pub remote_log_storage_system_enable: bool,
    /// `millrace.remote.storage.url`: the object store; always set when the system is enabled.
    pub remote_storage_url: Option<String>,
    /// `millrace.remote.storage.max.pending.bytes`: local bytes of closed segments not yet
    /// uploaded, above which produce to tiered topics is refused with a retriable error.
    pub remote_storage_max_pending_bytes: u64,
    /// `millrace.remote.storage.cache.bytes`: memory for remote segment data being read.
    pub remote_storage_cache_bytes: u64,
    /// `millrace.remote.storage.orphan.grace.ms`: age before an unreferenced object is deleted.
    pub remote_storage_orphan_grace_ms: u64,
    /// `remote.log.manager.task.interval.ms`: period of the copy and remote-retention tasks.
    pub remote_log_manager_task_interval_ms: u64,
    /// `remote.fetch.max.wait.ms`: the longest a fetch waits for remote data.
    pub remote_fetch_max_wait_ms: u64,
}

impl BrokerConfig {
    /// `remote.log.storage.system.enable`: whether topics may use remote storage here.
    pub fn remote_log_storage_system_enable(&self) -> bool {
        self.bool_or("remote.log.storage.system.enable", false)
    }

    /// `millrace.remote.storage.url`, if set and not blank.
    pub fn remote_storage_url(&self) -> Option<String> {
        self.explicit("millrace.remote.storage.url")
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_string)
    }

    /// Every tiered-storage setting of this broker.
    pub fn remote_storage(&self) -> RemoteStorageConfig {
        let non_negative = |key: &str, fallback: u64| {
            self.long(key)
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(fallback)
        };
        RemoteStorageConfig {
            remote_log_storage_system_enable: self.remote_log_storage_system_enable(),
            remote_storage_url: self.remote_storage_url(),
            remote_storage_max_pending_bytes: non_negative(
                "millrace.remote.storage.max.pending.bytes",
                MAX_PENDING_BYTES,
            ),
            remote_storage_cache_bytes: non_negative(
                "millrace.remote.storage.cache.bytes",
                CACHE_BYTES,
            ),
            remote_storage_orphan_grace_ms: non_negative(
                "millrace.remote.storage.orphan.grace.ms",
                ORPHAN_GRACE_MS,
            ),
            remote_log_manager_task_interval_ms: non_negative(
                "remote.log.manager.task.interval.ms",
                TASK_INTERVAL_MS,
            ),
            remote_fetch_max_wait_ms: non_negative(
                "remote.fetch.max.wait.ms",
                REMOTE_FETCH_MAX_WAIT_MS,
            ),
        }
    }

    /// The start-up rules: an enabled system needs `millrace.remote.storage.url`, and (Kafka's
    /// `validateBrokerLogConfigValues`) the broker's local retention defaults must fit within
    /// its retention defaults.
    pub(crate) fn check_remote_storage(&self) -> Result<(), ConfigError> {
        if !self.remote_log_storage_system_enable() {
            return Ok(());
        }
        if self.remote_storage_url().is_none() {
            return Err(invalid(
                "millrace.remote.storage.url",
                self.explicit("millrace.remote.storage.url")
                    .unwrap_or_default(),
                "must be set when remote.log.storage.system.enable=true: it names the object \
                 store that holds tiered segments",
            ));
        }
        let value = |topic_key: &str, broker_key: &str| {
            let text = self.topic_default(topic_key).unwrap_or_default();
            text.trim()
                .parse::<i64>()
                .map_err(|_| invalid(broker_key, &text, "not a long"))
        };
        check_local_retention(
            (
                "log.local.retention.bytes",
                value("local.retention.bytes", "log.local.retention.bytes")?,
            ),
            (
                "log.retention.bytes",
                value("retention.bytes", "log.retention.bytes")?,
            ),
        )?;
        check_local_retention(
            (
                "log.local.retention.ms",
                value("local.retention.ms", "log.local.retention.ms")?,
            ),
            (
                "log.retention.ms",
                value("retention.ms", "log.retention.ms")?,
            ),
        )
    }

    /// A line to log at start-up when the settings are odd but usable: an object store named
    /// while tiered storage is off.
    pub fn remote_storage_warning(&self) -> Option<String> {
        let url = self.remote_storage_url()?;
        (!self.remote_log_storage_system_enable()).then(|| {
            format!(
                "millrace.remote.storage.url is set ({url}) but remote.log.storage.system.enable \
                 is false: tiered storage stays off"
            )
        })
    }

    /// Kafka's tiered-storage rules for a topic whose overrides go from `existing` (empty for a
    /// new topic) to `next`; see the module comment.
    pub fn check_topic_configs(
        &self,
        existing: &TopicConfigs,
        next: &TopicConfigs,
    ) -> Result<(), ConfigError> {
        let value = |key: &str| self.topic_value(next, key).unwrap_or_default();
        let long = |key: &str| {
            let text = value(key);
            text.trim()
                .parse::<i64>()
                .map_err(|_| invalid(key, &text, "not a long"))
        };
        let flag = |key: &str| value(key).trim().eq_ignore_ascii_case("true");

        if !flag("remote.storage.enable") {
            let was_enabled = existing
                .get("remote.storage.enable")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
            if was_enabled && !flag("remote.log.delete.on.disable") {
                return Err(invalid(
                    "remote.storage.enable",
                    &value("remote.storage.enable"),
                    "remote storage cannot be turned off while its remote data is kept. To keep \
                     the remote data and make the topic read-only there, set \
                     remote.storage.enable=true and remote.log.copy.disable=true; to turn remote \
                     storage off and delete the remote data, set remote.storage.enable=false and \
                     remote.log.delete.on.disable=true",
                ));
            }
            return Ok(());
        }
        if !self.remote_log_storage_system_enable() {
            return Err(invalid(
                "remote.storage.enable",
                &value("remote.storage.enable"),
                "Tiered Storage functionality is disabled in the broker \
                 (remote.log.storage.system.enable=false), so a topic cannot be configured with \
                 remote log storage",
            ));
        }
        let policy = value("cleanup.policy");
        if parse_cleanup_policy(&policy).is_some_and(|p| p.compact) {
            return Err(invalid(
                "cleanup.policy",
                &policy,
                "remote log storage is unsupported for compacted topics (remote.storage.enable=true)",
            ));
        }
        let (local_bytes, bytes) = (long("local.retention.bytes")?, long("retention.bytes")?);
        let (local_ms, ms) = (long("local.retention.ms")?, long("retention.ms")?);
        check_local_retention(
            ("local.retention.bytes", local_bytes),
            ("retention.bytes", bytes),
        )?;
        check_local_retention(("local.retention.ms", local_ms), ("retention.ms", ms))?;
        if flag("remote.log.copy.disable") {
            for (local_key, local, key, total) in [
                (
                    "local.retention.bytes",
                    local_bytes,
                    "retention.bytes",
                    bytes,
                ),
                ("local.retention.ms", local_ms, "retention.ms", ms),
            ] {
                if local != LOCAL_RETENTION_AS_RETENTION && local != total {
                    return Err(invalid(
                        local_key,
                        &local.to_string(),
                        format!(
                            "must equal {key} ({total}) when remote.log.copy.disable=true, since \
                             no more segments are copied to remote storage"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Local retention within retention (Kafka's `validateRemoteStorageRetentionSize/Time`): with
/// retention bounded, local retention is -2 (the same), or bounded and no larger.
fn check_local_retention(
    (local_key, local): (&str, i64),
    (key, total): (&str, i64),
) -> Result<(), ConfigError> {
    if total <= UNBOUNDED || local == LOCAL_RETENTION_AS_RETENTION {
        return Ok(());
    }
    if local == UNBOUNDED {
        return Err(invalid(
            local_key,
            &local.to_string(),
            format!("must not be -1 (unbounded) while {key} is {total}"),
        ));
    }
    if local > total {
        return Err(invalid(
            local_key,
            &local.to_string(),
            format!("must not be more than {key} ({total})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{CACHE_BYTES_DEFAULT, MAX_PENDING_BYTES_DEFAULT, ORPHAN_GRACE_MS_DEFAULT};
    use std::collections::BTreeMap;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn topic(pairs: &[(&str, &str)]) -> TopicConfigs {
        TopicConfigs::new(map(pairs)).expect("valid topic configs")
    }

    /// A broker with tiered storage on, plus `extra`.
    fn tiered_broker(extra: &[(&str, &str)]) -> BrokerConfig {
        let mut pairs = vec![
            ("remote.log.storage.system.enable", "true"),
            ("millrace.remote.storage.url", "file:///var/tmp/tiered"),
        ];
        pairs.extend_from_slice(extra);
        BrokerConfig::from_layers([&map(&pairs)]).expect("valid broker config")
    }

    /// Checks a new topic with `pairs` on `broker`: `Ok(())`, or the refused key and a piece of
    /// the reason.
    fn check(broker: &BrokerConfig, pairs: &[(&str, &str)], expected: Result<(), (&str, &str)>) {
        check_change(broker, &[], pairs, expected);
    }

    fn check_change(
        broker: &BrokerConfig,
        before: &[(&str, &str)],
        after: &[(&str, &str)],
        expected: Result<(), (&str, &str)>,
    ) {
        let got = broker.check_topic_configs(&topic(before), &topic(after));
        match (expected, &got) {
            (Ok(()), Ok(())) => {}
            (
                Err((key, reason)),
                Err(ConfigError::InvalidValue {
                    key: k, reason: r, ..
                }),
            ) if k == key && r.contains(reason) => {}
            (expected, got) => {
                panic!("{before:?} -> {after:?}: expected {expected:?}, got {got:?}")
            }
        }
    }

    #[test]
    fn remote_storage_needs_the_system_enabled() {
        let off = BrokerConfig::default();
        check(
            &off,
            &[("remote.storage.enable", "true")],
            Err((
                "remote.storage.enable",
                "Tiered Storage functionality is disabled",
            )),
        );
        check(&off, &[("remote.storage.enable", "false")], Ok(()));
        check(&off, &[("local.retention.ms", "1000")], Ok(()));
        check(
            &tiered_broker(&[]),
            &[("remote.storage.enable", "true")],
            Ok(()),
        );
    }

    #[test]
    fn remote_storage_refuses_compacted_topics() {
        let on = tiered_broker(&[]);
        for policy in ["compact", "compact,delete", "delete,compact"] {
            check(
                &on,
                &[
                    ("remote.storage.enable", "true"),
                    ("cleanup.policy", policy),
                ],
                Err(("cleanup.policy", "compacted")),
            );
        }
        check(
            &on,
            &[
                ("remote.storage.enable", "true"),
                ("cleanup.policy", "delete"),
            ],
            Ok(()),
        );
        // A compacting broker default counts as the topic's policy.
        let compacting = tiered_broker(&[("log.cleanup.policy", "compact")]);
        check(
            &compacting,
            &[("remote.storage.enable", "true")],
            Err(("cleanup.policy", "compacted")),
        );
        // Compaction without remote storage is none of these rules' business.
        check(&on, &[("cleanup.policy", "compact")], Ok(()));
    }

    #[test]
    fn local_retention_bytes_within_retention_bytes() {
        let on = tiered_broker(&[]);
        let tiered = |local: &'static str, total: &'static str| {
            [
                ("remote.storage.enable", "true"),
                ("local.retention.bytes", local),
                ("retention.bytes", total),
            ]
        };
        check(&on, &tiered("100", "100"), Ok(()));
        check(&on, &tiered("99", "100"), Ok(()));
        check(&on, &tiered("-2", "100"), Ok(()));
        check(
            &on,
            &tiered("101", "100"),
            Err(("local.retention.bytes", "more than retention.bytes (100)")),
        );
        check(
            &on,
            &tiered("-1", "100"),
            Err(("local.retention.bytes", "must not be -1")),
        );
        // Unbounded retention bounds nothing.
        check(&on, &tiered("-1", "-1"), Ok(()));
        check(&on, &tiered("5000", "-1"), Ok(()));
        // Not tiered: local retention is not used, so not checked.
        check(
            &on,
            &[("local.retention.bytes", "101"), ("retention.bytes", "100")],
            Ok(()),
        );
        // The broker's retention default counts when the topic has none.
        let bounded = tiered_broker(&[("log.retention.bytes", "100")]);
        check(
            &bounded,
            &[
                ("remote.storage.enable", "true"),
                ("local.retention.bytes", "200"),
            ],
            Err(("local.retention.bytes", "more than retention.bytes (100)")),
        );
    }

    #[test]
    fn local_retention_ms_within_retention_ms() {
        let on = tiered_broker(&[]);
        // Kafka's default retention.ms is 7 days.
        check(
            &on,
            &[
                ("remote.storage.enable", "true"),
                ("local.retention.ms", "604800001"),
            ],
            Err(("local.retention.ms", "more than retention.ms (604800000)")),
        );
        check(
            &on,
            &[
                ("remote.storage.enable", "true"),
                ("local.retention.ms", "3600000"),
            ],
            Ok(()),
        );
        check(
            &on,
            &[
                ("remote.storage.enable", "true"),
                ("local.retention.ms", "-1"),
            ],
            Err(("local.retention.ms", "must not be -1")),
        );
        check(
            &on,
            &[
                ("remote.storage.enable", "true"),
                ("local.retention.ms", "-1"),
                ("retention.ms", "-1"),
            ],
            Ok(()),
        );
        // The broker's local retention default (log.local.retention.ms) is checked for a topic
        // that inherits it, against the topic's own retention.ms.
        let broker = tiered_broker(&[("log.local.retention.ms", "3600000")]);
        check(
            &broker,
            &[("remote.storage.enable", "true"), ("retention.ms", "60000")],
            Err(("local.retention.ms", "more than retention.ms (60000)")),
        );
    }

    #[test]
    fn copy_disabled_means_local_retention_is_retention() {
        let on = tiered_broker(&[]);
        let read_only = |local_key: &'static str, local: &'static str| {
            [
                ("remote.storage.enable", "true"),
                ("remote.log.copy.disable", "true"),
                ("retention.ms", "86400000"),
                ("retention.bytes", "1000"),
                (local_key, local),
            ]
        };
        check(&on, &read_only("local.retention.ms", "-2"), Ok(()));
        check(&on, &read_only("local.retention.ms", "86400000"), Ok(()));
        check(
            &on,
            &read_only("local.retention.ms", "3600000"),
            Err(("local.retention.ms", "remote.log.copy.disable=true")),
        );
        check(&on, &read_only("local.retention.bytes", "1000"), Ok(()));
        check(
            &on,
            &read_only("local.retention.bytes", "500"),
            Err(("local.retention.bytes", "remote.log.copy.disable=true")),
        );
    }

    #[test]
    fn turning_remote_storage_off_needs_delete_on_disable() {
        let on = tiered_broker(&[]);
        let was = [("remote.storage.enable", "true")];
        check_change(
            &on,
            &was,
            &[("remote.storage.enable", "false")],
            Err(("remote.storage.enable", "remote.log.delete.on.disable=true")),
        );
        // Deleting the override is turning it off too.
        check_change(
            &on,
            &was,
            &[],
            Err(("remote.storage.enable", "remote.log.delete.on.disable=true")),
        );
        check_change(
            &on,
            &was,
            &[
                ("remote.storage.enable", "false"),
                ("remote.log.delete.on.disable", "true"),
            ],
            Ok(()),
        );
        // Keeping the data read-only is the other way out.
        check_change(
            &on,
            &was,
            &[
                ("remote.storage.enable", "true"),
                ("remote.log.copy.disable", "true"),
            ],
            Ok(()),
        );
        // A topic that was never tiered may say false.
        check_change(&on, &[], &[("remote.storage.enable", "false")], Ok(()));
        // Off at the broker: turning a tiered topic off (and deleting) is still allowed.
        check_change(
            &BrokerConfig::default(),
            &was,
            &[
                ("remote.storage.enable", "false"),
                ("remote.log.delete.on.disable", "true"),
            ],
            Ok(()),
        );
    }

    #[test]
    fn an_enabled_system_needs_a_url() {
        let err =
            BrokerConfig::from_layers([&map(&[("remote.log.storage.system.enable", "true")])])
                .expect_err("no url");
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "millrace.remote.storage.url"),
            "{err}"
        );
        assert!(
            err.to_string().contains("remote.log.storage.system.enable"),
            "{err}"
        );
        assert!(BrokerConfig::from_layers([&map(&[
            ("remote.log.storage.system.enable", "true"),
            ("millrace.remote.storage.url", "  "),
        ])])
        .is_err());
        let on = tiered_broker(&[]);
        assert_eq!(on.remote_storage_warning(), None);
        // A url without the system: accepted, with a warning.
        let idle = BrokerConfig::from_layers([&map(&[(
            "millrace.remote.storage.url",
            "file:///var/tmp/tiered",
        )])])
        .expect("a url alone is accepted");
        let warning = idle.remote_storage_warning().expect("a warning");
        assert!(
            warning.contains("remote.log.storage.system.enable"),
            "{warning}"
        );
    }

    #[test]
    fn broker_local_retention_within_broker_retention() {
        let err = BrokerConfig::from_layers([&map(&[
            ("remote.log.storage.system.enable", "true"),
            ("millrace.remote.storage.url", "file:///x"),
            ("log.retention.bytes", "100"),
            ("log.local.retention.bytes", "200"),
        ])])
        .expect_err("local above total");
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "log.local.retention.bytes"),
            "{err}"
        );
        let err = BrokerConfig::from_layers([&map(&[
            ("remote.log.storage.system.enable", "true"),
            ("millrace.remote.storage.url", "file:///x"),
            ("log.retention.hours", "1"),
            ("log.local.retention.ms", "7200000"),
        ])])
        .expect_err("local above total");
        assert!(
            err.to_string().contains("log.retention.ms (3600000)"),
            "{err}"
        );
        // Without the system, Kafka does not check them.
        assert!(BrokerConfig::from_layers([&map(&[
            ("log.retention.bytes", "100"),
            ("log.local.retention.bytes", "200"),
        ])])
        .is_ok());
    }

    #[test]
    fn settings_and_defaults() {
        let c = BrokerConfig::default().remote_storage();
        assert_eq!(
            c,
            RemoteStorageConfig {
                remote_log_storage_system_enable: false,
                remote_storage_url: None,
                remote_storage_max_pending_bytes: 10 * 1024 * 1024 * 1024,
                remote_storage_cache_bytes: 64 * 1024 * 1024,
                remote_storage_orphan_grace_ms: 600_000,
                remote_log_manager_task_interval_ms: 30_000,
                remote_fetch_max_wait_ms: 500,
            }
        );
        // The registry's defaults (what DescribeConfigs shows) are the same numbers.
        for (text, number) in [
            (MAX_PENDING_BYTES_DEFAULT, MAX_PENDING_BYTES),
            (CACHE_BYTES_DEFAULT, CACHE_BYTES),
            (ORPHAN_GRACE_MS_DEFAULT, ORPHAN_GRACE_MS),
        ] {
            assert_eq!(text.parse::<u64>().ok(), Some(number));
        }
        let c = tiered_broker(&[
            ("millrace.remote.storage.max.pending.bytes", "1000"),
            ("remote.fetch.max.wait.ms", "100"),
        ])
        .remote_storage();
        assert!(c.remote_log_storage_system_enable);
        assert_eq!(
            c.remote_storage_url.as_deref(),
            Some("file:///var/tmp/tiered")
        );
        assert_eq!(c.remote_storage_max_pending_bytes, 1000);
        assert_eq!(c.remote_fetch_max_wait_ms, 100);
        for (key, bad) in [
            ("millrace.remote.storage.max.pending.bytes", "0"),
            ("millrace.remote.storage.cache.bytes", "-1"),
            ("remote.fetch.max.wait.ms", "0"),
            ("remote.log.manager.task.interval.ms", "0"),
            ("log.local.retention.ms", "-3"),
        ] {
            assert!(
                BrokerConfig::from_layers([&map(&[(key, bad)])]).is_err(),
                "{key}={bad}"
            );
        }
    }
}
