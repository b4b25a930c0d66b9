//! Why a configuration was rejected ([`ConfigError`]), and the one constructor every check uses for
//! a bad value ([`invalid`]), so that each message names the key and the value.
//!
//! Where it sits: below both the key registry and `BrokerConfig` (`config.rs`) and the listener
//! syntax (`listeners.rs`), which reject values in the same words; `config` re-exports the type,
//! so `config::ConfigError` and the crate root's `ConfigError` are this one.

/// Why a configuration was rejected. The message always names the key.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown config key '{0}'")]
    UnknownKey(String),
    #[error("invalid value '{value}' for config '{key}': {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    /// Refused in Kafka's own words (group configs answer Kafka's exact messages).
    #[error("{0}")]
    Refused(String),
}

/// `value` of `key` is refused, for `reason`.
pub(crate) fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}
