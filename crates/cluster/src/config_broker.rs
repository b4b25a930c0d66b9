//! Dynamic broker configs (Kafka's `kafka-configs --entity-type brokers`): the BROKER resource
//! configs kept in the metadata log, per broker (`--entity-name ID`, DYNAMIC_BROKER_CONFIG) and
//! for the whole cluster (`--entity-default`, resource name "", DYNAMIC_DEFAULT_BROKER_CONFIG),
//! which keys may be set that way, and how a set is checked.
//!
//! Precedence (Kafka's): a broker's own dynamic value, else the cluster default's, else the
//! static config file's, else the key's default — [`DynamicBrokerConfigs::layer_over`]
//! layers them, and every reader that takes its config from the image sees a change at the next
//! committed entry.
//!
//! Which keys (the list is `config::is_dynamic_broker_key`, next to the registry it reads):
//! the broker synonyms of topic configs (`log.retention.ms`, `message.max.bytes`,
//! `min.insync.replicas`, `log.cleanup.policy`, ...; Kafka's `DynamicLogConfig`), which Kafka
//! lets both a broker and the cluster default set. Millrace applies them live: they are the
//! defaults of every topic without its own override, and the replica manager hands each log
//! its config again whenever the image changes. And the replication throttles
//! (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`, KIP-73), which the
//! replica manager's quotas take at each image (`millrace_replication::throttle`). Every other
//! broker key is refused with Kafka's "Cannot update these configs dynamically" (INVALID_REQUEST),
//! naming it — Kafka also refuses
//! its read-only keys so; the keys Kafka reconfigures live and Millrace does not yet (thread
//! pools, listeners' certificates, quotas' window) are refused the same way. A bad value is
//! INVALID_REQUEST too, "Invalid value V for configuration K: ...", as Kafka 4.4 answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{
    broker_def, list_with_change, validate_value, BrokerConfig, ConfigChange, ConfigOp, ConfigType,
};
use crate::config_error::{invalid, ConfigError};
use crate::limits::BROKER_CONFIG_BYTES_MAX;

/// Whether `key` may be set as a dynamic broker config (the list lives with the registry).
pub use crate::config::is_dynamic_broker_key as is_dynamic;

/// The dynamic broker configs in the metadata image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicBrokerConfigs {
    /// The cluster-wide default (resource name "").
    #[serde(default)]
    pub default: BTreeMap<String, String>,
    /// Per broker id (never empty sets).
    #[serde(default)]
    pub brokers: BTreeMap<i32, BTreeMap<String, String>>,
}

/// No dynamic configs.
static NONE: BTreeMap<String, String> = BTreeMap::new();

impl DynamicBrokerConfigs {
    /// `config` with these dynamic configs over it: its broker's own (by `node.id`), then the
    /// cluster default's.
    pub fn layer_over(&self, config: &BrokerConfig) -> BrokerConfig {
        let own = self.brokers.get(&config.node_id()).unwrap_or(&NONE);
        config.with_dynamic_layers(own, &self.default)
    }

    /// The set of one resource: `None` is the cluster default.
    pub fn of(&self, broker: Option<i32>) -> Option<&BTreeMap<String, String>> {
        match broker {
            None => Some(&self.default),
            Some(id) => self.brokers.get(&id),
        }
    }

    /// Replaces one resource's set (an empty set removes it).
    pub fn replace(&mut self, broker: Option<i32>, configs: BTreeMap<String, String>) {
        match broker {
            None => self.default = configs,
            Some(id) if configs.is_empty() => {
                self.brokers.remove(&id);
            }
            Some(id) => {
                self.brokers.insert(id, configs);
            }
        }
    }
}

/// Why a BROKER resource's change was refused: Kafka 4.4 answers a key it does not reconfigure
/// and a bad value INVALID_REQUEST; a set over the size bound is INVALID_CONFIG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerConfigError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidConfig(String),
}

impl From<ConfigError> for BrokerConfigError {
    fn from(e: ConfigError) -> Self {
        Self::InvalidConfig(e.to_string())
    }
}

/// The BROKER resource a name denotes: "" the cluster default, digits a broker id.
pub fn parse_resource(name: &str) -> Result<Option<i32>, BrokerConfigError> {
    if name.is_empty() {
        return Ok(None);
    }
    name.parse::<i32>()
        .ok()
        .filter(|id| *id >= 0)
        .map(Some)
        .ok_or_else(|| BrokerConfigError::InvalidRequest(format!("Invalid broker name {name}")))
}

/// Checks a resource's whole new set: every key dynamic (else Kafka's "Cannot update these
/// configs dynamically", naming each), every value of its type, the set within
/// `BROKER_CONFIG_BYTES_MAX`. Returns it with values trimmed.
pub fn check(
    configs: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, BrokerConfigError> {
    let fixed: Vec<&str> = configs
        .keys()
        .map(String::as_str)
        .filter(|k| !is_dynamic(k))
        .collect();
    if !fixed.is_empty() {
        return Err(BrokerConfigError::InvalidRequest(format!(
            "Cannot update these configs dynamically: [{}]",
            fixed.join(", ")
        )));
    }
    let mut out = BTreeMap::new();
    let mut bytes = 0usize;
    for (key, value) in configs {
        let ty = broker_def(&key).map_or(ConfigType::Str, |d| d.ty);
        check_value(&key, &value, ty)?;
        bytes = bytes.saturating_add(key.len() + value.len());
        out.insert(key, value.trim().to_string());
    }
    if bytes > BROKER_CONFIG_BYTES_MAX {
        return Err(BrokerConfigError::InvalidConfig(format!(
            "The dynamic configs take {bytes} bytes; at most {BROKER_CONFIG_BYTES_MAX} are allowed."
        )));
    }
    Ok(out)
}

/// One value against its key's type, refused as Kafka 4.4 answers a BROKER resource's bad
/// value: INVALID_REQUEST, "Invalid value V for configuration K: REASON".
fn check_value(key: &str, value: &str, ty: ConfigType) -> Result<(), BrokerConfigError> {
    let kafka_reason = match ty {
        ConfigType::Int { .. } if value.trim().parse::<i64>().is_err() => {
            Some("Not a number of type INT".to_string())
        }
        ConfigType::Long { .. } if value.trim().parse::<i64>().is_err() => {
            Some("Not a number of type LONG".to_string())
        }
        _ => match validate_value(key, value, ty) {
            Ok(()) => None,
            Err(ConfigError::InvalidValue { reason, .. }) => Some(reason),
            Err(other) => Some(other.to_string()),
        },
    };
    match kafka_reason {
        None => Ok(()),
        Some(reason) => Err(BrokerConfigError::InvalidRequest(format!(
            "Invalid value {value} for configuration {key}: {reason}"
        ))),
    }
}

/// Applies IncrementalAlterConfigs operations to a resource's current set. APPEND and SUBTRACT
/// apply to list keys only (`log.cleanup.policy`), starting from `effective` (the value in force
/// when the resource does not set it), as Kafka does.
pub fn with_changes(
    current: &BTreeMap<String, String>,
    changes: &[ConfigChange],
    effective: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, BrokerConfigError> {
    let mut next = current.clone();
    for change in changes {
        match change.op {
            ConfigOp::Set => {
                let value = change.value.clone().ok_or_else(|| {
                    BrokerConfigError::InvalidRequest(format!(
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
                let is_list = broker_def(&change.name)
                    .is_some_and(|d| matches!(d.ty, ConfigType::CleanupPolicy | ConfigType::List));
                if !is_list {
                    return Err(invalid(
                        &change.name,
                        change.value.as_deref().unwrap_or(""),
                        "APPEND and SUBTRACT apply only to list configs",
                    )
                    .into());
                }
                let start = next
                    .get(&change.name)
                    .cloned()
                    .or_else(|| effective(&change.name))
                    .unwrap_or_default();
                next.insert(change.name.clone(), list_with_change(&start, change));
            }
        }
    }
    check(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_synonyms_are_dynamic_and_the_rest_is_refused_by_name() {
        assert!(is_dynamic("message.max.bytes"));
        assert!(is_dynamic("log.retention.ms"));
        assert!(is_dynamic("log.retention.hours"));
        assert!(is_dynamic("min.insync.replicas"));
        assert!(!is_dynamic("log.dirs"));
        assert!(!is_dynamic("node.id"));
        let err = check(set(&[
            ("log.dirs", "/tmp/x"),
            ("message.max.bytes", "2000"),
        ]))
        .expect_err("log.dirs is static");
        assert_eq!(
            err,
            BrokerConfigError::InvalidRequest(
                "Cannot update these configs dynamically: [log.dirs]".into()
            )
        );
    }

    #[test]
    fn values_are_checked_against_their_type() {
        let err = check(set(&[("message.max.bytes", "abc")])).expect_err("not a number");
        assert_eq!(
            err,
            BrokerConfigError::InvalidRequest(
                "Invalid value abc for configuration message.max.bytes: Not a number of type INT"
                    .into()
            )
        );
        assert_eq!(
            check(set(&[("message.max.bytes", " 2000 ")])).expect("valid"),
            set(&[("message.max.bytes", "2000")])
        );
    }

    #[test]
    fn incremental_changes_set_delete_and_append_to_lists_only() {
        let current = set(&[("message.max.bytes", "2000")]);
        let change = |name: &str, op, value: Option<&str>| ConfigChange {
            name: name.into(),
            op,
            value: value.map(str::to_string),
        };
        let next = with_changes(
            &current,
            &[
                change("message.max.bytes", ConfigOp::Delete, None),
                change("log.cleanup.policy", ConfigOp::Append, Some("compact")),
            ],
            |_| Some("delete".into()),
        )
        .expect("valid");
        assert_eq!(next, set(&[("log.cleanup.policy", "delete,compact")]));
        assert!(with_changes(
            &current,
            &[change("message.max.bytes", ConfigOp::Append, Some("1"))],
            |_| None
        )
        .is_err());
    }

    #[test]
    fn a_brokers_own_value_beats_the_default_which_beats_the_static_one() {
        use crate::config::ConfigSource;
        let static_layer = set(&[("node.id", "1"), ("message.max.bytes", "5000")]);
        let config = BrokerConfig::from_layers([&static_layer]).expect("valid");
        let mut dynamic = DynamicBrokerConfigs::default();
        dynamic.replace(
            None,
            set(&[("message.max.bytes", "2000"), ("log.retention.ms", "7")]),
        );
        dynamic.replace(Some(2), set(&[("log.retention.ms", "9")]));
        let effective = dynamic.layer_over(&config);
        assert_eq!(effective.get("message.max.bytes"), Some("2000"));
        assert_eq!(
            effective.source("message.max.bytes"),
            ConfigSource::DynamicDefaultBrokerConfig
        );
        // Broker 2's own value is not this broker's (node 1).
        assert_eq!(effective.get("log.retention.ms"), Some("7"));
        dynamic.replace(Some(1), set(&[("message.max.bytes", "10000")]));
        let effective = dynamic.layer_over(&config);
        assert_eq!(effective.get("message.max.bytes"), Some("10000"));
        assert_eq!(
            effective.source("message.max.bytes"),
            ConfigSource::DynamicBrokerConfig
        );
        // A topic without its own value takes the layered default (what the logs are given).
        let topic = crate::config::TopicConfigs::default();
        assert_eq!(effective.log_config(&topic).retention_ms, 7);
        // DescribeConfigs lists every layer, highest first, then the default.
        let entry = effective
            .describe_broker()
            .into_iter()
            .find(|e| e.name == "message.max.bytes")
            .expect("described");
        let sources: Vec<_> = entry.synonyms.iter().map(|s| s.source).collect();
        assert_eq!(
            sources,
            [
                ConfigSource::DynamicBrokerConfig,
                ConfigSource::DynamicDefaultBrokerConfig,
                ConfigSource::StaticBrokerConfig,
                ConfigSource::DefaultConfig
            ]
        );
        assert!(!entry.read_only);
        // Removing a broker's last key removes its set.
        dynamic.replace(Some(1), BTreeMap::new());
        assert!(dynamic.of(Some(1)).is_none());
    }

    #[test]
    fn resource_names() {
        assert_eq!(parse_resource(""), Ok(None));
        assert_eq!(parse_resource("3"), Ok(Some(3)));
        assert!(parse_resource("x").is_err());
        assert!(parse_resource("-1").is_err());
    }
}
