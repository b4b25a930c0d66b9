//! Group configs: the dynamic configs of a GROUP config resource (type 32), as Apache Kafka 4.4's
//! `GroupConfig` defines them — KIP-848's `consumer.*`, KIP-932/KIP-1240's `share.*`, KIP-1071's
//! `streams.*` and KIP-1191's dead-letter-queue keys. A group's configs are set with
//! IncrementalAlterConfigs (or AlterConfigs, a whole replacement), may exist before the group
//! does, and outlive it (Kafka 4.4 keeps them when the group is deleted).
//!
//! Where it sits: the controller checks a group's whole new set with
//! [`BrokerConfig::check_group_configs`] and commits it in the metadata log
//! (`MetadataRecord::GroupConfigs`), so every broker's image holds it; DescribeConfigs answers
//! [`BrokerConfig::describe_group`]; the group coordinator and the share partitions obey
//! [`BrokerConfig::group_settings`].
//!
//! Kafka's rules, in its order (`GroupConfig.validate`): every name must be a group config
//! ("Unknown group config name: X"); `streams.rack.aware.assignment.tags` holds no tag twice;
//! each value parses as its type and passes its own validator (`atLeast`, a set of words); each
//! value lies within the broker's bounds for it (`group.share.min.record.lock.duration.ms` …
//! `group.share.max.record.lock.duration.ms`, and so on); a session timeout exceeds its heartbeat
//! interval (the broker's value standing in for one not set); `streams.assignor.name` names an
//! assignor the broker has; the DLQ topic is not an internal (`__`) topic. Every refusal is a
//! [`ConfigError::Refused`] in Kafka's words, which the front end answers as INVALID_CONFIG.
//! IncrementalAlterConfigs' APPEND and SUBTRACT are refused for every group key, the one LIST key
//! included, as Kafka 4.4 refuses them.
//!
//! Values are checked against the broker's bounds when they are set; if the bounds change later,
//! a stored value outside them is clamped when it is used ([`BrokerConfig::group_settings`],
//! Kafka's `GroupConfig.evaluate`), and DescribeConfigs still shows the stored value.
//!
//! Kafka's internal keys (`*.assignor.offload.enable`, `streams.task.offset.interval.ms`,
//! `streams.num.warmup.replicas`, `streams.acceptable.recovery.lag`) may be set, and are
//! described only when set, as Kafka does. Millrace serves no Streams groups: the `streams.*`
//! keys are validated and stored only. The broker keys Millrace does not have
//! (`group.streams.*`, `group.consumer.assignment.interval.ms` and their bounds) stand at
//! Kafka's defaults.

use std::collections::BTreeMap;

use crate::config::{
    BrokerConfig, ConfigChange, ConfigEntry, ConfigError, ConfigOp, ConfigSource, ConfigSynonym,
    ConfigType,
};

/// The assignors a Streams group may name (`group.streams.assignors`, Kafka's default).
const STREAMS_ASSIGNORS: &[&str] = &["sticky"];

/// The broker's bounds on a group config (Kafka's `validateIntRange`, `validateIntMax`,
/// `validateIntMin`): each bound is a broker key and its value where the broker has no such key.
#[derive(Debug, Clone, Copy)]
enum Bound {
    None,
    Range {
        min_key: &'static str,
        min: i64,
        max_key: &'static str,
        max: i64,
    },
    Max {
        key: &'static str,
        max: i64,
    },
    Min {
        key: &'static str,
        min: i64,
    },
}

/// How a group config's value parses (Kafka's `ConfigDef` type and validator).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// INT with `atLeast(min)`.
    Int(i64),
    /// LONG with `atLeast(min)`.
    Long(i64),
    Bool,
    Str,
    List,
    /// `share.auto.offset.reset`: `latest`, `earliest` or `by_duration:<ISO-8601 duration>`.
    AutoOffsetReset,
    /// `share.isolation.level`.
    IsolationLevel,
}

impl Kind {
    fn config_type(self) -> ConfigType {
        match self {
            Kind::Int(min) => ConfigType::Int {
                min,
                max: i64::from(i32::MAX),
            },
            Kind::Long(min) => ConfigType::Long { min, max: i64::MAX },
            Kind::Bool => ConfigType::Bool,
            Kind::List => ConfigType::List,
            Kind::Str | Kind::AutoOffsetReset | Kind::IsolationLevel => ConfigType::Str,
        }
    }

    /// Kafka's name of the type in "Not a number of type X".
    fn type_name(self) -> &'static str {
        match self {
            Kind::Long(_) => "LONG",
            _ => "INT",
        }
    }
}

/// One group config.
#[derive(Debug)]
pub struct GroupConfigDef {
    pub name: &'static str,
    kind: Kind,
    /// The value when neither the group nor the broker sets one (Kafka's default).
    default: &'static str,
    /// The broker key whose value a group without its own stands at (Kafka's
    /// `ALL_GROUP_CONFIG_SYNONYMS`).
    broker_synonym: Option<&'static str>,
    bound: Bound,
    /// Kafka's internal keys: described only when set.
    internal: bool,
}

const fn group(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    broker_synonym: Option<&'static str>,
    bound: Bound,
) -> GroupConfigDef {
    GroupConfigDef {
        name,
        kind,
        default,
        broker_synonym,
        bound,
        internal: false,
    }
}

const fn internal(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    broker_synonym: &'static str,
    bound: Bound,
) -> GroupConfigDef {
    GroupConfigDef {
        name,
        kind,
        default,
        broker_synonym: Some(broker_synonym),
        bound,
        internal: true,
    }
}

const fn range(min_key: &'static str, min: i64, max_key: &'static str, max: i64) -> Bound {
    Bound::Range {
        min_key,
        min,
        max_key,
        max,
    }
}

/// Every group config, in Kafka's order (`GroupConfig.CONFIG_DEF`).
pub static GROUP_CONFIGS: &[GroupConfigDef] = &[
    group(
        "consumer.session.timeout.ms",
        Kind::Int(1),
        "45000",
        Some("group.consumer.session.timeout.ms"),
        range(
            "group.consumer.min.session.timeout.ms",
            45_000,
            "group.consumer.max.session.timeout.ms",
            60_000,
        ),
    ),
    group(
        "consumer.heartbeat.interval.ms",
        Kind::Int(1),
        "5000",
        Some("group.consumer.heartbeat.interval.ms"),
        range(
            "group.consumer.min.heartbeat.interval.ms",
            5_000,
            "group.consumer.max.heartbeat.interval.ms",
            15_000,
        ),
    ),
    group(
        "consumer.assignment.interval.ms",
        Kind::Int(0),
        "1000",
        Some("group.consumer.assignment.interval.ms"),
        range(
            "group.consumer.min.assignment.interval.ms",
            0,
            "group.consumer.max.assignment.interval.ms",
            15_000,
        ),
    ),
    internal(
        "consumer.assignor.offload.enable",
        Kind::Bool,
        "true",
        "group.consumer.assignor.offload.enable",
        Bound::None,
    ),
    group(
        "share.session.timeout.ms",
        Kind::Int(1),
        "45000",
        Some("group.share.session.timeout.ms"),
        range(
            "group.share.min.session.timeout.ms",
            45_000,
            "group.share.max.session.timeout.ms",
            60_000,
        ),
    ),
    group(
        "share.heartbeat.interval.ms",
        Kind::Int(1),
        "5000",
        Some("group.share.heartbeat.interval.ms"),
        range(
            "group.share.min.heartbeat.interval.ms",
            5_000,
            "group.share.max.heartbeat.interval.ms",
            15_000,
        ),
    ),
    group(
        "share.record.lock.duration.ms",
        Kind::Int(1_000),
        "30000",
        Some("group.share.record.lock.duration.ms"),
        range(
            "group.share.min.record.lock.duration.ms",
            15_000,
            "group.share.max.record.lock.duration.ms",
            60_000,
        ),
    ),
    group(
        "share.delivery.count.limit",
        Kind::Int(2),
        "5",
        Some("group.share.delivery.count.limit"),
        range(
            "group.share.min.delivery.count.limit",
            2,
            "group.share.max.delivery.count.limit",
            10,
        ),
    ),
    group(
        "share.partition.max.record.locks",
        Kind::Int(100),
        "2000",
        Some("group.share.partition.max.record.locks"),
        range(
            "group.share.min.partition.max.record.locks",
            100,
            "group.share.max.partition.max.record.locks",
            4_000,
        ),
    ),
    group(
        "share.auto.offset.reset",
        Kind::AutoOffsetReset,
        "latest",
        None,
        Bound::None,
    ),
    group(
        "share.isolation.level",
        Kind::IsolationLevel,
        "read_uncommitted",
        None,
        Bound::None,
    ),
    group(
        "share.renew.acknowledge.enable",
        Kind::Bool,
        "true",
        None,
        Bound::None,
    ),
    group(
        "share.assignment.interval.ms",
        Kind::Int(0),
        "1000",
        Some("group.share.assignment.interval.ms"),
        range(
            "group.share.min.assignment.interval.ms",
            0,
            "group.share.max.assignment.interval.ms",
            15_000,
        ),
    ),
    internal(
        "share.assignor.offload.enable",
        Kind::Bool,
        "true",
        "group.share.assignor.offload.enable",
        Bound::None,
    ),
    group(
        "streams.session.timeout.ms",
        Kind::Int(1),
        "45000",
        Some("group.streams.session.timeout.ms"),
        range(
            "group.streams.min.session.timeout.ms",
            45_000,
            "group.streams.max.session.timeout.ms",
            60_000,
        ),
    ),
    group(
        "streams.heartbeat.interval.ms",
        Kind::Int(1),
        "5000",
        Some("group.streams.heartbeat.interval.ms"),
        range(
            "group.streams.min.heartbeat.interval.ms",
            5_000,
            "group.streams.max.heartbeat.interval.ms",
            15_000,
        ),
    ),
    group(
        "streams.num.standby.replicas",
        Kind::Int(0),
        "0",
        Some("group.streams.num.standby.replicas"),
        Bound::Max {
            key: "group.streams.max.standby.replicas",
            max: 2,
        },
    ),
    group(
        "streams.initial.rebalance.delay.ms",
        Kind::Int(0),
        "3000",
        Some("group.streams.initial.rebalance.delay.ms"),
        Bound::None,
    ),
    group(
        "streams.assignment.interval.ms",
        Kind::Int(0),
        "1000",
        Some("group.streams.assignment.interval.ms"),
        range(
            "group.streams.min.assignment.interval.ms",
            0,
            "group.streams.max.assignment.interval.ms",
            15_000,
        ),
    ),
    internal(
        "streams.assignor.offload.enable",
        Kind::Bool,
        "true",
        "group.streams.assignor.offload.enable",
        Bound::None,
    ),
    internal(
        "streams.task.offset.interval.ms",
        Kind::Int(1),
        "60000",
        "group.streams.task.offset.interval.ms",
        Bound::Min {
            key: "group.streams.min.task.offset.interval.ms",
            min: 15_000,
        },
    ),
    internal(
        "streams.num.warmup.replicas",
        Kind::Int(0),
        "2",
        "group.streams.num.warmup.replicas",
        Bound::Max {
            key: "group.streams.max.warmup.replicas",
            max: 20,
        },
    ),
    group(
        "streams.rack.aware.assignment.tags",
        Kind::List,
        "",
        Some("group.streams.rack.aware.assignment.tags"),
        Bound::None,
    ),
    internal(
        "streams.acceptable.recovery.lag",
        Kind::Long(0),
        "10000",
        "group.streams.acceptable.recovery.lag",
        Bound::None,
    ),
    group(
        "streams.assignor.name",
        Kind::Str,
        "sticky",
        Some("group.streams.assignors"),
        Bound::None,
    ),
    group(
        "errors.deadletterqueue.topic.name",
        Kind::Str,
        "",
        None,
        Bound::None,
    ),
    group(
        "errors.deadletterqueue.copy.record.enable",
        Kind::Bool,
        "false",
        None,
        Bound::None,
    ),
];

/// The (session timeout, heartbeat interval) pairs whose session must exceed the interval.
const SESSION_OVER_HEARTBEAT: &[(&str, &str)] = &[
    (
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    ),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    (
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
    ),
];

fn group_def(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// Where a new share partition starts (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareAutoOffsetReset {
    /// The high watermark when the share partition is initialized (Kafka's default).
    Latest,
    /// The log start offset.
    Earliest,
    /// The first offset whose timestamp is at or after now minus this many milliseconds.
    ByDuration { duration_ms: i64 },
}

/// Which records a share group is delivered (`share.isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareIsolationLevel {
    /// Up to the high watermark (Kafka's default).
    ReadUncommitted,
    /// Up to the last stable offset; records of aborted transactions are never delivered.
    ReadCommitted,
}

/// What one group obeys: its own configs where it has them (clamped to the broker's bounds),
/// the broker's `group.consumer.*` / `group.share.*` values where not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSettings {
    pub consumer_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
    pub share_session_timeout_ms: i32,
    pub share_heartbeat_interval_ms: i32,
    pub share_record_lock_duration_ms: i64,
    pub share_delivery_count_limit: i16,
    pub share_partition_max_record_locks: u32,
    pub share_auto_offset_reset: ShareAutoOffsetReset,
    pub share_isolation_level: ShareIsolationLevel,
    pub share_renew_acknowledge_enable: bool,
}

/// A group's dynamic configs: only the keys set on that group, each value valid on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupConfigs(BTreeMap<String, String>);

impl GroupConfigs {
    /// AlterConfigs' whole new set: every name a group config, every value its type and within
    /// its own validator (the broker's bounds are [`BrokerConfig::check_group_configs`]'s).
    pub fn new(entries: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        if let Some(unknown) = entries.keys().find(|k| group_def(k).is_none()) {
            return Err(ConfigError::Refused(format!(
                "Unknown group config name: {unknown}"
            )));
        }
        if let Some(tags) = entries.get("streams.rack.aware.assignment.tags") {
            let tags: Vec<&str> = list_items(tags);
            if (1..tags.len()).any(|i| tags[..i].contains(&tags[i])) {
                return Err(ConfigError::Refused(
                    "streams.rack.aware.assignment.tags must not contain duplicate tag keys."
                        .into(),
                ));
            }
        }
        let mut out = BTreeMap::new();
        // Parsed in Kafka's definition order, so the first bad value named is Kafka's.
        for def in GROUP_CONFIGS {
            if let Some(value) = entries.get(def.name) {
                let value = value.trim();
                parse(def, value)?;
                out.insert(def.name.to_string(), value.to_string());
            }
        }
        Ok(Self(out))
    }

    /// IncrementalAlterConfigs' SET and DELETE applied, the result checked as [`Self::new`]: as
    /// in Kafka, deleting a key that is not set (known or not) changes nothing, and APPEND or
    /// SUBTRACT is refused for any key. (A SET without a value is the controller's
    /// INVALID_REQUEST, before this.)
    pub fn with_changes(&self, changes: &[ConfigChange]) -> Result<Self, ConfigError> {
        let mut next = self.0.clone();
        for change in changes {
            match change.op {
                ConfigOp::Set => {
                    let value = change.value.clone().ok_or_else(|| {
                        ConfigError::Refused(format!(
                            "Null value not supported for : {}",
                            change.name
                        ))
                    })?;
                    next.insert(change.name.clone(), value);
                }
                ConfigOp::Delete => {
                    next.remove(&change.name);
                }
                ConfigOp::Append | ConfigOp::Subtract => {
                    let op = if change.op == ConfigOp::Append {
                        "APPEND"
                    } else {
                        "SUBTRACT"
                    };
                    return Err(ConfigError::Refused(format!(
                        "Can't {op} to key {} because its type is not LIST.",
                        change.name
                    )));
                }
            }
        }
        Self::new(next)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// A comma-separated list's items, trimmed, empty ones dropped.
fn list_items(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Kafka's `ConfigException` wording for a value its type or validator refuses.
fn refused(def: &GroupConfigDef, value: &str, why: &str) -> ConfigError {
    ConfigError::Refused(format!(
        "Invalid value {value} for configuration {}: {why}",
        def.name
    ))
}

/// Parses `value` of `def` (already trimmed): its number, if it is one.
fn parse(def: &GroupConfigDef, value: &str) -> Result<Option<i64>, ConfigError> {
    match def.kind {
        Kind::Int(min) | Kind::Long(min) => {
            let n = match def.kind {
                Kind::Int(_) => value.parse::<i32>().map(i64::from).ok(),
                _ => value.parse::<i64>().ok(),
            }
            .ok_or_else(|| {
                refused(
                    def,
                    value,
                    &format!("Not a number of type {}", def.kind.type_name()),
                )
            })?;
            if n < min {
                return Err(refused(
                    def,
                    value,
                    &format!("Value must be at least {min}"),
                ));
            }
            Ok(Some(n))
        }
        Kind::Bool => {
            if value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false") {
                Ok(None)
            } else {
                Err(refused(
                    def,
                    value,
                    "Expected value to be either true or false",
                ))
            }
        }
        Kind::IsolationLevel => match value {
            "read_committed" | "read_uncommitted" => Ok(None),
            _ => Err(refused(
                def,
                value,
                "String must be one of: read_committed, read_uncommitted",
            )),
        },
        Kind::AutoOffsetReset => match parse_share_auto_offset_reset(value) {
            Some(_) => Ok(None),
            None => Err(refused(
                def,
                value,
                &format!(
                    "Invalid value `{value}` for configuration {}. The value must be either \
                     'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
                    def.name
                ),
            )),
        },
        Kind::Str | Kind::List => Ok(None),
    }
}

/// `share.auto.offset.reset`'s value: `latest`, `earliest`, or `by_duration:` and a
/// non-negative ISO-8601 duration (Java's `Duration.parse`: `PnDTnHnMn.nS`, each part optional
/// but one, signs allowed on the whole and on each part), all case-sensitive but the duration.
pub fn parse_share_auto_offset_reset(value: &str) -> Option<ShareAutoOffsetReset> {
    match value {
        "latest" => Some(ShareAutoOffsetReset::Latest),
        "earliest" => Some(ShareAutoOffsetReset::Earliest),
        _ => {
            let duration_ms = parse_iso_duration_ms(value.strip_prefix("by_duration:")?)?;
            (duration_ms >= 0).then_some(ShareAutoOffsetReset::ByDuration { duration_ms })
        }
    }
}

/// Milliseconds of an ISO-8601 duration as Java's `Duration.parse` reads it (fractions of a
/// second below a millisecond dropped); `None` when it does not parse or overflows.
fn parse_iso_duration_ms(text: &str) -> Option<i64> {
    let upper = text.to_ascii_uppercase();
    let (negative, rest) = match upper.as_bytes().first()? {
        b'-' => (true, &upper[1..]),
        b'+' => (false, &upper[1..]),
        _ => (false, upper.as_str()),
    };
    let rest = rest.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return None,
        None => (rest, None),
    };
    let mut total: i128 = 0;
    let mut parts = 0;
    if !date.is_empty() {
        total += i128::from(signed_number(date.strip_suffix('D')?)?) * 86_400_000;
        parts += 1;
    }
    if let Some(mut t) = time {
        for (unit, ms) in [('H', 3_600_000i128), ('M', 60_000)] {
            if let Some(at) = t.find(unit) {
                total += i128::from(signed_number(&t[..at])?) * ms;
                t = &t[at + 1..];
                parts += 1;
            }
        }
        if !t.is_empty() {
            let seconds = t.strip_suffix('S')?;
            let (whole, fraction) = match seconds.split_once(['.', ',']) {
                Some((w, f)) => (w, f),
                None => (seconds, ""),
            };
            if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let whole = i128::from(signed_number(whole)?);
            let millis = fraction
                .bytes()
                .chain(std::iter::repeat(b'0'))
                .take(3)
                .fold(0i128, |acc, b| acc * 10 + i128::from(b - b'0'));
            let millis = if whole < 0 || seconds.starts_with('-') {
                -millis
            } else {
                millis
            };
            total += whole * 1000 + millis;
            parts += 1;
        }
    }
    if parts == 0 {
        return None;
    }
    i64::try_from(if negative { -total } else { total }).ok()
}

/// An optionally signed run of ASCII digits.
fn signed_number(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl BrokerConfig {
    /// A broker key's value as a number: set, the registry's default, or `fallback` for a key
    /// Millrace does not have.
    fn group_bound(&self, key: &str, fallback: i64) -> i64 {
        self.long_or(key, fallback)
    }

    /// The broker's value a group without its own stands at.
    fn group_fallback(&self, def: &GroupConfigDef) -> String {
        let broker = def.broker_synonym.and_then(|k| self.get(k));
        match (def.name, broker) {
            // `group.streams.assignors` is a list; its first is the default assignor.
            ("streams.assignor.name", Some(list)) => list_items(list)
                .first()
                .map_or(def.default, |s| s)
                .to_string(),
            (_, Some(v)) => v.to_string(),
            (_, None) => def.default.to_string(),
        }
    }

    /// Kafka's `GroupConfig.validateValues` of a group's whole new set (each value already
    /// passed [`GroupConfigs::new`]) against this broker's bounds.
    pub fn check_group_configs(&self, configs: &GroupConfigs) -> Result<(), ConfigError> {
        let number = |key: &str| configs.get(key).and_then(|v| v.parse::<i64>().ok());
        for def in GROUP_CONFIGS {
            let Some(value) = number(def.name) else {
                continue;
            };
            let name = def.name;
            match def.bound {
                Bound::None => {}
                Bound::Range {
                    min_key,
                    min,
                    max_key,
                    max,
                } => {
                    let (min, max) = (
                        self.group_bound(min_key, min),
                        self.group_bound(max_key, max),
                    );
                    if value < min || value > max {
                        return Err(ConfigError::Refused(format!(
                            "{name} must be in the range {min} to {max} inclusive."
                        )));
                    }
                }
                Bound::Max { key, max } => {
                    let max = self.group_bound(key, max);
                    if value > max {
                        return Err(ConfigError::Refused(format!(
                            "{name} must be less than or equal to {max}"
                        )));
                    }
                }
                Bound::Min { key, min } => {
                    let min = self.group_bound(key, min);
                    if value < min {
                        return Err(ConfigError::Refused(format!(
                            "{name} must be greater than or equal to {min}"
                        )));
                    }
                }
            }
        }
        if let Some(name) = configs.get("streams.assignor.name") {
            if !STREAMS_ASSIGNORS.contains(&name) {
                return Err(ConfigError::Refused(format!(
                    "streams.assignor.name '{name}' is not a registered task assignor. \
                     Registered assignors are: [{}].",
                    STREAMS_ASSIGNORS.join(", ")
                )));
            }
        }
        for &(session_key, interval_key) in SESSION_OVER_HEARTBEAT {
            if configs.get(session_key).is_none() && configs.get(interval_key).is_none() {
                continue;
            }
            let effective = |key: &str| {
                number(key).unwrap_or_else(|| {
                    group_def(key)
                        .and_then(|d| self.group_fallback(d).parse().ok())
                        .unwrap_or(0)
                })
            };
            if effective(session_key) <= effective(interval_key) {
                return Err(ConfigError::Refused(format!(
                    "{session_key} must be greater than {interval_key}"
                )));
            }
        }
        if configs
            .get("errors.deadletterqueue.topic.name")
            .is_some_and(|t| t.starts_with("__"))
        {
            return Err(ConfigError::Refused(
                "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'".into(),
            ));
        }
        Ok(())
    }

    /// Every group config of a group with `configs` (DescribeConfigs for a GROUP resource), as
    /// Kafka answers: the group's value (source DYNAMIC_GROUP_CONFIG), else the broker's
    /// (STATIC_BROKER_CONFIG when the operator set it), else the default; the synonyms in that
    /// order, a key without a broker synonym listing itself at its default. Internal keys only
    /// when the group sets them.
    pub fn describe_group(&self, configs: &GroupConfigs) -> Vec<ConfigEntry> {
        GROUP_CONFIGS
            .iter()
            .filter(|d| !d.internal || configs.get(d.name).is_some())
            .map(|d| {
                let mut synonyms = Vec::new();
                if let Some(v) = configs.get(d.name) {
                    synonyms.push(ConfigSynonym {
                        name: d.name.to_string(),
                        value: Some(v.to_string()),
                        source: ConfigSource::DynamicGroupConfig,
                    });
                }
                let synonym = d.broker_synonym.unwrap_or(d.name);
                if let Some(v) = d.broker_synonym.and_then(|k| self.explicit(k)) {
                    synonyms.push(ConfigSynonym {
                        name: synonym.to_string(),
                        value: Some(v.to_string()),
                        source: ConfigSource::StaticBrokerConfig,
                    });
                }
                synonyms.push(ConfigSynonym {
                    name: synonym.to_string(),
                    value: Some(d.default.to_string()),
                    source: ConfigSource::DefaultConfig,
                });
                let value = configs
                    .get(d.name)
                    .map_or_else(|| self.group_fallback(d), str::to_string);
                ConfigEntry {
                    name: d.name,
                    value: Some(value),
                    source: synonyms
                        .first()
                        .map_or(ConfigSource::DefaultConfig, |s| s.source),
                    read_only: false,
                    sensitive: false,
                    ty: d.kind.config_type(),
                    synonyms,
                }
            })
            .collect()
    }

    /// What a group obeys (Kafka's `GroupConfig.evaluate`): its own value clamped to the
    /// broker's current bounds, else the broker's value.
    pub fn group_settings(&self, configs: Option<&GroupConfigs>) -> GroupSettings {
        let number = |name: &str| -> i64 {
            let Some(def) = group_def(name) else {
                return 0;
            };
            let fallback = self.group_fallback(def).parse::<i64>().unwrap_or(0);
            let Some(own) = configs
                .and_then(|c| c.get(name))
                .and_then(|v| v.parse::<i64>().ok())
            else {
                return fallback;
            };
            match def.bound {
                Bound::Range {
                    min_key,
                    min,
                    max_key,
                    max,
                } => {
                    let (min, max) = (
                        self.group_bound(min_key, min),
                        self.group_bound(max_key, max),
                    );
                    if min <= max {
                        own.clamp(min, max)
                    } else {
                        own
                    }
                }
                Bound::Max { key, max } => own.min(self.group_bound(key, max)),
                Bound::Min { key, min } => own.max(self.group_bound(key, min)),
                Bound::None => own,
            }
        };
        let text = |name: &str| {
            configs
                .and_then(|c| c.get(name))
                .map(str::to_string)
                .or_else(|| group_def(name).map(|d| self.group_fallback(d)))
                .unwrap_or_default()
        };
        let int = |name: &str| i32::try_from(number(name)).unwrap_or(i32::MAX);
        GroupSettings {
            consumer_session_timeout_ms: int("consumer.session.timeout.ms"),
            consumer_heartbeat_interval_ms: int("consumer.heartbeat.interval.ms"),
            share_session_timeout_ms: int("share.session.timeout.ms"),
            share_heartbeat_interval_ms: int("share.heartbeat.interval.ms"),
            share_record_lock_duration_ms: number("share.record.lock.duration.ms"),
            share_delivery_count_limit: i16::try_from(number("share.delivery.count.limit"))
                .unwrap_or(i16::MAX),
            share_partition_max_record_locks: u32::try_from(number(
                "share.partition.max.record.locks",
            ))
            .unwrap_or(u32::MAX),
            share_auto_offset_reset: parse_share_auto_offset_reset(&text(
                "share.auto.offset.reset",
            ))
            .unwrap_or(ShareAutoOffsetReset::Latest),
            share_isolation_level: if text("share.isolation.level") == "read_committed" {
                ShareIsolationLevel::ReadCommitted
            } else {
                ShareIsolationLevel::ReadUncommitted
            },
            share_renew_acknowledge_enable: !text("share.renew.acknowledge.enable")
                .eq_ignore_ascii_case("false"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> Result<GroupConfigs, ConfigError> {
        GroupConfigs::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// Checks a group's set against the default broker: `Ok` or Kafka's message.
    fn check(pairs: &[(&str, &str)], expected: Result<(), &str>) {
        let broker = BrokerConfig::default();
        let got = configs(pairs).and_then(|c| broker.check_group_configs(&c));
        match (got, expected) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(message)) => assert_eq!(e.to_string(), message, "{pairs:?}"),
            (got, expected) => panic!("{pairs:?}: {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn kafkas_messages() {
        check(&[("share.record.lock.duration.ms", "15000")], Ok(()));
        check(
            &[("share.record.lock.duration.ms", "14999")],
            Err("share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
        );
        check(
            &[("share.record.lock.duration.ms", "999")],
            Err("Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
        );
        check(
            &[("share.record.lock.duration.ms", "abc")],
            Err("Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type INT"),
        );
        check(
            &[("share.delivery.count.limit", "11")],
            Err("share.delivery.count.limit must be in the range 2 to 10 inclusive."),
        );
        check(
            &[("no.such", "1")],
            Err("Unknown group config name: no.such"),
        );
        check(
            &[("share.isolation.level", "READ_COMMITTED")],
            Err("Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted"),
        );
        check(
            &[("share.auto.offset.reset", "bogus")],
            Err("Invalid value bogus for configuration share.auto.offset.reset: Invalid value `bogus` for configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."),
        );
        check(
            &[("streams.num.standby.replicas", "3")],
            Err("streams.num.standby.replicas must be less than or equal to 2"),
        );
        check(
            &[
                ("share.heartbeat.interval.ms", "15000"),
                ("share.session.timeout.ms", "15000"),
            ],
            Err("share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
        );
        check(
            &[("errors.deadletterqueue.topic.name", "__x")],
            Err("errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
        );
        check(
            &[("share.renew.acknowledge.enable", "maybe")],
            Err("Invalid value maybe for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
        );
        check(
            &[("streams.assignor.name", "greedy")],
            Err("streams.assignor.name 'greedy' is not a registered task assignor. Registered assignors are: [sticky]."),
        );
        check(
            &[("streams.rack.aware.assignment.tags", "a,b,a")],
            Err("streams.rack.aware.assignment.tags must not contain duplicate tag keys."),
        );
    }

    #[test]
    fn session_must_exceed_the_interval_with_the_brokers_value_standing_in() {
        let layer: BTreeMap<String, String> = [
            ("group.share.min.session.timeout.ms", "1000"),
            ("group.share.session.timeout.ms", "6000"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let broker = BrokerConfig::from_layers([&layer]).expect("valid broker config");
        let set = configs(&[("share.session.timeout.ms", "5000")]).expect("parses");
        assert_eq!(
            broker.check_group_configs(&set).map_err(|e| e.to_string()),
            Err("share.session.timeout.ms must be greater than share.heartbeat.interval.ms".into())
        );
    }

    #[test]
    fn iso_durations_as_java_reads_them() {
        let ms = |s: &str| parse_iso_duration_ms(s);
        assert_eq!(ms("PT1H"), Some(3_600_000));
        assert_eq!(ms("pt1h"), Some(3_600_000));
        assert_eq!(ms("P1DT1H"), Some(25 * 3_600_000));
        assert_eq!(ms("PT1.5S"), Some(1_500));
        assert_eq!(ms("PT0S"), Some(0));
        assert_eq!(ms("+PT1H"), Some(3_600_000));
        assert_eq!(ms("P-1DT25H"), Some(3_600_000));
        assert_eq!(ms("-PT1H"), Some(-3_600_000));
        for bad in [
            "",
            "P",
            "PT",
            "T1H",
            "PT1H ",
            " PT1H",
            "P1H",
            "PT1.1234567891S",
            "PTXS",
        ] {
            assert_eq!(ms(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_share_auto_offset_reset("by_duration:PT-1H"),
            None,
            "negative durations are refused"
        );
        assert_eq!(parse_share_auto_offset_reset("BY_DURATION:PT1H"), None);
        assert_eq!(parse_share_auto_offset_reset("Latest"), None);
    }

    #[test]
    fn settings_fall_back_to_the_broker_and_clamp_to_its_bounds() {
        let broker = BrokerConfig::default();
        let plain = broker.group_settings(None);
        assert_eq!(plain.share_record_lock_duration_ms, 30_000);
        assert_eq!(plain.share_auto_offset_reset, ShareAutoOffsetReset::Latest);
        let set = configs(&[
            ("share.record.lock.duration.ms", "15000"),
            ("share.delivery.count.limit", "2"),
            ("share.auto.offset.reset", "by_duration:PT1M"),
            ("share.isolation.level", "read_committed"),
            ("consumer.session.timeout.ms", "50000"),
        ])
        .expect("parses");
        let s = broker.group_settings(Some(&set));
        assert_eq!(s.share_record_lock_duration_ms, 15_000);
        assert_eq!(s.share_delivery_count_limit, 2);
        assert_eq!(
            s.share_auto_offset_reset,
            ShareAutoOffsetReset::ByDuration {
                duration_ms: 60_000
            }
        );
        assert_eq!(s.share_isolation_level, ShareIsolationLevel::ReadCommitted);
        assert_eq!(s.consumer_session_timeout_ms, 50_000);
        // A stored value outside bounds that narrowed since is clamped at use.
        let narrow: BTreeMap<String, String> =
            [("group.share.min.record.lock.duration.ms", "20000")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let narrow = BrokerConfig::from_layers([&narrow]).expect("valid broker config");
        assert_eq!(
            narrow
                .group_settings(Some(&set))
                .share_record_lock_duration_ms,
            20_000
        );
    }

    #[test]
    fn append_and_subtract_are_refused() {
        let change = |op| ConfigChange {
            name: "streams.rack.aware.assignment.tags".into(),
            op,
            value: Some("a".into()),
        };
        for op in [ConfigOp::Append, ConfigOp::Subtract] {
            let err = GroupConfigs::default()
                .with_changes(&[change(op)])
                .expect_err("refused");
            assert!(
                err.to_string().contains("because its type is not LIST"),
                "{err}"
            );
        }
        let set = GroupConfigs::default()
            .with_changes(&[change(ConfigOp::Set)])
            .expect("set");
        assert_eq!(set.get("streams.rack.aware.assignment.tags"), Some("a"));
        // As Kafka: APPEND is refused even for an unknown key, deleting one changes nothing.
        let unknown = |op| ConfigChange {
            name: "no.such".into(),
            op,
            value: Some("x".into()),
        };
        let err = set
            .with_changes(&[unknown(ConfigOp::Append)])
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "Can't APPEND to key no.such because its type is not LIST."
        );
        assert_eq!(
            set.with_changes(&[unknown(ConfigOp::Delete)]),
            Ok(set.clone())
        );
    }

    #[test]
    fn describe_shows_sources_and_hides_unset_internal_keys() {
        let broker = BrokerConfig::default();
        let set = configs(&[
            ("share.record.lock.duration.ms", "15000"),
            ("consumer.assignor.offload.enable", "false"),
        ])
        .expect("parses");
        let entries = broker.describe_group(&set);
        let lock = entries
            .iter()
            .find(|e| e.name == "share.record.lock.duration.ms")
            .expect("listed");
        assert_eq!(lock.value.as_deref(), Some("15000"));
        assert_eq!(lock.source, ConfigSource::DynamicGroupConfig);
        assert_eq!(lock.synonyms[1].name, "group.share.record.lock.duration.ms");
        assert_eq!(lock.synonyms[1].source, ConfigSource::DefaultConfig);
        let reset = entries
            .iter()
            .find(|e| e.name == "share.auto.offset.reset")
            .expect("listed");
        assert_eq!(reset.source, ConfigSource::DefaultConfig);
        assert_eq!(reset.synonyms[0].name, "share.auto.offset.reset");
        assert!(entries
            .iter()
            .any(|e| e.name == "consumer.assignor.offload.enable"));
        assert!(!entries
            .iter()
            .any(|e| e.name == "share.assignor.offload.enable"));
        assert_eq!(
            broker.describe_group(&GroupConfigs::default()).len(),
            GROUP_CONFIGS.iter().filter(|d| !d.internal).count()
        );
    }
}
