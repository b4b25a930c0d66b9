//! Listeners: the addresses the broker accepts Kafka clients on and the security protocol of each
//! — what a listener is and how Kafka's `listeners` and `advertised.listeners` write one:
//!
//! - A listener is `NAME://host:port`; a bare `host:port` is the listener named `PLAINTEXT`. Names
//!   compare in upper case and appear once. An empty host binds every interface.
//! - A listener name maps to a [`SecurityProtocol`] through `listener.security.protocol.map`
//!   ([`SECURITY_PROTOCOL_MAP_DEFAULT`]); per-listener settings are `listener.name.<name>.<key>`
//!   ([`LISTENER_PREFIX`]).
//!
//! Where it sits: below the configuration. The key registry (`config.rs`) checks listener lists
//! with [`parse_listener_list`]; Kafka's rules over a whole configuration (the protocol map, the
//! advertised subset, the inter-broker listener, listener-prefixed settings) are `BrokerConfig`'s
//! listener methods, next to its other checks in `config.rs`. The metadata image and records
//! carry [`ListenerAddress`]es for every broker.
//!
//! Every protocol is served: TLS by `frontend::tls`, SASL by `frontend::sasl`, whose settings are
//! checked at start-up, so a listener never serves without the security it names.

use serde::{Deserialize, Serialize};

use crate::config_error::{invalid, ConfigError};

/// The address of a listener when none is configured.
pub const LISTENERS_DEFAULT: &str = "PLAINTEXT://127.0.0.1:9092";
/// Kafka's default `listener.security.protocol.map`.
pub const SECURITY_PROTOCOL_MAP_DEFAULT: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";
/// The prefix of per-listener settings (`listener.name.<name>.<key>`).
pub const LISTENER_PREFIX: &str = "listener.name.";

/// A listener's security protocol (Kafka's `SecurityProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's names, upper case as Kafka writes them (parsed case-insensitively).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(Self::Plaintext),
            "SSL" => Some(Self::Ssl),
            "SASL_PLAINTEXT" => Some(Self::SaslPlaintext),
            "SASL_SSL" => Some(Self::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections are wrapped in TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether connections authenticate with SASL first.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A named listener address: what `listeners` and `advertised.listeners` list, and what a broker
/// registers for each of its listeners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerAddress {
    /// Upper case.
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for ListenerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.name, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.name, self.host, self.port)
        }
    }
}

/// A listener to bind, with its security protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub address: ListenerAddress,
    pub protocol: SecurityProtocol,
}

/// One `NAME://host:port` or `host:port` (the `PLAINTEXT` listener). IPv6 hosts in brackets.
pub fn parse_listener(key: &str, value: &str, text: &str) -> Result<ListenerAddress, ConfigError> {
    let text = text.trim();
    let (name, rest) = match text.split_once("://") {
        Some((name, rest)) => (name.trim().to_ascii_uppercase(), rest),
        None => ("PLAINTEXT".to_string(), text),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(invalid(
            key,
            value,
            format!("listener {text}: bad listener name"),
        ));
    }
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| invalid(key, value, format!("listener {text}: expected host:port")))?;
    let port: u16 = port
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, format!("listener {text}: bad port")))?;
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    Ok(ListenerAddress {
        name,
        host: host.to_string(),
        port,
    })
}

/// A comma-separated listener list; each name at most once.
pub fn parse_listener_list(key: &str, value: &str) -> Result<Vec<ListenerAddress>, ConfigError> {
    let mut out: Vec<ListenerAddress> = Vec::new();
    for text in value.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let listener = parse_listener(key, value, text)?;
        if out.iter().any(|l| l.name == listener.name) {
            return Err(invalid(
                key,
                value,
                format!("listener name {} appears twice", listener.name),
            ));
        }
        out.push(listener);
    }
    Ok(out)
}

/// Replaces the listener named `PLAINTEXT` in `list` with `host:port` (adding it first when there
/// is none): what the `--listen` and `--advertised-listener` flags do.
pub fn with_plaintext_listener(list: Option<&str>, host_port: &str) -> String {
    let plaintext = format!("PLAINTEXT://{}", host_port.trim());
    let mut entries = vec![plaintext];
    for entry in list
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let name = entry
            .split_once("://")
            .map_or("PLAINTEXT".to_string(), |(n, _)| {
                n.trim().to_ascii_uppercase()
            });
        if name != "PLAINTEXT" {
            entries.push(entry.to_string());
        }
    }
    entries.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plaintext_flag_replaces_or_adds_the_plaintext_listener() {
        assert_eq!(
            with_plaintext_listener(None, "127.0.0.1:0"),
            "PLAINTEXT://127.0.0.1:0"
        );
        assert_eq!(
            with_plaintext_listener(Some("SSL://h:2,PLAINTEXT://h:1"), "127.0.0.1:0"),
            "PLAINTEXT://127.0.0.1:0,SSL://h:2"
        );
        assert_eq!(
            with_plaintext_listener(Some("h:1"), "h:5"),
            "PLAINTEXT://h:5"
        );
    }
}
