//! Listeners: the addresses the broker accepts Kafka clients on, the security protocol of each,
//! the addresses it advertises for them, and which one the brokers use among themselves — Kafka's
//! `listeners`, `advertised.listeners`, `listener.security.protocol.map`,
//! `inter.broker.listener.name` and `security.inter.broker.protocol`, with Kafka's rules:
//!
//! - A listener is `NAME://host:port`; a bare `host:port` is the listener named `PLAINTEXT`. Names
//!   compare in upper case and appear once. An empty host binds every interface.
//! - Each name maps to a security protocol through `listener.security.protocol.map` (by default
//!   each protocol's own name maps to itself), so `MTLS://…` with `MTLS:SSL` is a second TLS
//!   listener with its own settings.
//! - `advertised.listeners` names a subset of the listeners; a listener it leaves out advertises
//!   its own address.
//! - The inter-broker listener is `inter.broker.listener.name`, else the listener named after
//!   `security.inter.broker.protocol` (PLAINTEXT). Brokers replicate over PLAINTEXT only for now,
//!   so a cluster (`controller.quorum.voters` set) refuses any other inter-broker protocol.
//! - Per-listener settings: `listener.name.<name>.<key>` (the name in lower case) overrides `<key>`
//!   for that listener only ([`BrokerConfig::listener_get`]).
//!
//! Every protocol is served: TLS by `frontend::tls`, SASL by `frontend::sasl`, whose settings are
//! checked at start-up, so a listener never serves without the security it names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, BrokerConfig, ConfigError};

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

impl BrokerConfig {
    /// `listener.security.protocol.map`: listener name (upper case) → protocol.
    pub fn security_protocol_map(&self) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
        let key = "listener.security.protocol.map";
        let value = self.get(key).unwrap_or(SECURITY_PROTOCOL_MAP_DEFAULT);
        let mut map = BTreeMap::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, protocol) = entry
                .split_once(':')
                .ok_or_else(|| invalid(key, value, format!("{entry}: expected NAME:PROTOCOL")))?;
            let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
                invalid(
                    key,
                    value,
                    format!("{entry}: unknown security protocol {protocol}"),
                )
            })?;
            if map
                .insert(name.trim().to_ascii_uppercase(), protocol)
                .is_some()
            {
                return Err(invalid(key, value, format!("{name} appears twice")));
            }
        }
        Ok(map)
    }

    /// The listeners to bind, in the order given, each with its security protocol.
    pub fn listeners(&self) -> Result<Vec<Listener>, ConfigError> {
        let key = "listeners";
        let value = self.get(key).unwrap_or(LISTENERS_DEFAULT);
        let map = self.security_protocol_map()?;
        let addresses = parse_listener_list(key, value)?;
        if addresses.is_empty() {
            return Err(invalid(key, value, "no listener"));
        }
        let mut out = Vec::with_capacity(addresses.len());
        for address in addresses {
            let protocol = *map.get(&address.name).ok_or_else(|| {
                invalid(
                    key,
                    value,
                    format!(
                        "listener {}: no security protocol for it in \
                         listener.security.protocol.map",
                        address.name
                    ),
                )
            })?;
            if address.port != 0
                && out
                    .iter()
                    .any(|l: &Listener| l.address.port == address.port)
            {
                return Err(invalid(
                    key,
                    value,
                    format!("port {} is used by two listeners", address.port),
                ));
            }
            out.push(Listener { address, protocol });
        }
        Ok(out)
    }

    /// `advertised.listeners` as set (each a listener's name); listeners it leaves out advertise
    /// their bound address.
    pub fn advertised_listeners(&self) -> Result<Vec<ListenerAddress>, ConfigError> {
        let key = "advertised.listeners";
        let Some(value) = self.explicit(key) else {
            return Ok(Vec::new());
        };
        let listeners = self.listeners()?;
        let advertised = parse_listener_list(key, value)?;
        for a in &advertised {
            if !listeners.iter().any(|l| l.address.name == a.name) {
                return Err(invalid(
                    key,
                    value,
                    format!("{} is not a listener in 'listeners'", a.name),
                ));
            }
            if a.host == "0.0.0.0" || a.host == "::" {
                return Err(invalid(
                    key,
                    value,
                    format!("{}: a wildcard address cannot be advertised", a.name),
                ));
            }
        }
        Ok(advertised)
    }

    /// The listener the brokers reach each other on.
    pub fn inter_broker_listener(&self) -> Result<Listener, ConfigError> {
        let listeners = self.listeners()?;
        let (key, name) = match self.explicit("inter.broker.listener.name") {
            Some(name) => (
                "inter.broker.listener.name",
                name.trim().to_ascii_uppercase(),
            ),
            None => (
                "security.inter.broker.protocol",
                self.get("security.inter.broker.protocol")
                    .unwrap_or("PLAINTEXT")
                    .trim()
                    .to_ascii_uppercase(),
            ),
        };
        let listener = listeners
            .into_iter()
            .find(|l| l.address.name == name)
            .ok_or_else(|| {
                invalid(
                    key,
                    &name,
                    "must name a listener in 'listeners' (the brokers' own listener)",
                )
            })?;
        if self.explicit("controller.quorum.voters").is_some()
            && listener.protocol != SecurityProtocol::Plaintext
        {
            return Err(invalid(
                key,
                &name,
                format!(
                    "the inter-broker listener is {}; brokers replicate over PLAINTEXT only for now",
                    listener.protocol.name()
                ),
            ));
        }
        Ok(listener)
    }

    /// A setting for one listener: `listener.name.<name>.<key>` if set, else `<key>` (set or
    /// default), as Kafka resolves listener-prefixed configs.
    pub fn listener_get(&self, listener: &str, key: &str) -> Option<&str> {
        let prefixed = format!("{LISTENER_PREFIX}{}.{key}", listener.to_ascii_lowercase());
        self.explicit(&prefixed).or_else(|| self.get(key))
    }

    /// Every listener rule at once; run when the config is built.
    pub(crate) fn check_listeners(&self) -> Result<(), ConfigError> {
        self.advertised_listeners()?;
        self.inter_broker_listener()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let layer: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BrokerConfig::from_layers([&layer])
    }

    #[test]
    fn listeners_map_names_to_protocols() {
        let c = config(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,SSL://:9093,mtls://[::1]:9094",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            ),
        ])
        .unwrap();
        let l = c.listeners().unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].address.host, "0.0.0.0");
        assert_eq!(l[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[2].address.name, "MTLS");
        assert_eq!(l[2].address.host, "::1");
        assert_eq!(l[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(c.inter_broker_listener().unwrap().address.port, 9092);
        assert_eq!(l[2].address.to_string(), "MTLS://[::1]:9094");
    }

    #[test]
    fn bad_listener_sets_are_refused_naming_the_key() {
        for (pairs, key) in [
            (
                vec![("listeners", "PLAINTEXT://h:1,PLAINTEXT://h:2")],
                "listeners",
            ),
            (
                vec![("listeners", "PLAINTEXT://h:1,SSL://h:1")],
                "listeners",
            ),
            (
                vec![("listeners", "PLAINTEXT://h:1,OTHER://h:2")],
                "listeners",
            ),
            (vec![("listeners", "PLAINTEXT://h")], "listeners"),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1"),
                    ("advertised.listeners", "SSL://h:2"),
                ],
                "advertised.listeners",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1"),
                    ("advertised.listeners", "PLAINTEXT://0.0.0.0:1"),
                ],
                "advertised.listeners",
            ),
            (
                vec![("listeners", "SSL://h:1")],
                "security.inter.broker.protocol",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1"),
                    ("inter.broker.listener.name", "SSL"),
                ],
                "inter.broker.listener.name",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1,SSL://h:2"),
                    ("inter.broker.listener.name", "SSL"),
                    ("controller.quorum.voters", "1@h:3"),
                ],
                "inter.broker.listener.name",
            ),
            (
                vec![("listener.security.protocol.map", "PLAINTEXT:TLS")],
                "listener.security.protocol.map",
            ),
        ] {
            let err = config(&pairs).expect_err(&format!("{pairs:?}")).to_string();
            assert!(err.contains(&format!("'{key}'")), "{pairs:?}: {err}");
        }
        // A single-node broker may use its TLS listener as the "inter-broker" one.
        config(&[
            ("listeners", "SSL://h:1"),
            ("inter.broker.listener.name", "SSL"),
        ])
        .unwrap();
    }

    #[test]
    fn listener_prefixed_settings_override_for_that_listener_only() {
        let c = config(&[
            ("listeners", "PLAINTEXT://h:1,SSL://h:2,MTLS://h:3"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            ),
            ("listener.name.mtls.ssl.client.auth", "required"),
        ])
        .unwrap();
        assert_eq!(c.listener_get("MTLS", "ssl.client.auth"), Some("required"));
        assert_eq!(c.listener_get("SSL", "ssl.client.auth"), Some("none"));
        let err = config(&[("listener.name.mtls.ssl.client.auth", "sometimes")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("listener.name.mtls.ssl.client.auth"), "{err}");
        let err = config(&[("listener.name.mtls.num.partitions", "3")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown config key"), "{err}");
    }

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
