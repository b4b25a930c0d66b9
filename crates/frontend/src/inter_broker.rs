//! What this node presents to the others, built from its config at start-up: on their
//! inter-broker listener (replication's [`InterBrokerSecurity`], which every broker-to-broker
//! connection runs) and on the controller listener (the quorum's [`ControllerTlsHandle`]).
//!
//! The inter-broker listener:
//!
//! - **TLS** when the listener's protocol is SSL or SASL_SSL: the listener's own `ssl.*` settings
//!   (`listener.name.<name>.ssl.*` first). The truststore checks the other brokers' certificates,
//!   and their names against the address dialled unless `ssl.endpoint.identification.algorithm`
//!   is empty; the keystore's certificate is this broker's client certificate (for
//!   `ssl.client.auth=required`). A changed keystore or truststore file is read again by the next
//!   connection.
//! - **SASL** when it is SASL_PLAINTEXT or SASL_SSL: `sasl.mechanism.inter.broker.protocol`
//!   (Kafka's default GSSAPI is not served, so it must be named), which the listener must enable,
//!   with the `username` and `password` of the listener's JAAS line for that mechanism
//!   (`listener.name.<name>.<mechanism>.sasl.jaas.config`), as Kafka's brokers take their own
//!   credentials. PLAIN and SCRAM-SHA-256/512 are served; a SCRAM user must exist in the metadata
//!   log before the brokers can use it.
//!
//! The controller listener (`controller.listener.names`, its first name; Kafka's key): PLAINTEXT,
//! or SSL as mutual TLS — client certificates are required whatever `ssl.client.auth` says, as
//! they are the quorum's only authentication, and the node's keystore certificate is both its
//! server and its client certificate (so it needs both extended key usages, or none). Its TLS
//! settings are `listener.name.<name>.ssl.*`, else `ssl.*`. SASL is not served there.
//!
//! Every problem is a [`InterBrokerError`] naming the key; the broker does not start. A single
//! node (no `controller.quorum.voters`) never connects to another broker, so there an unusable
//! TLS client side (no truststore: Kafka would use the JVM's) is only a warning.

use std::sync::Arc;

use millrace_cluster::listeners::SecurityProtocol;
use millrace_cluster::BrokerConfig;
use millrace_quorum::tls::{ControllerTls, ControllerTlsHandle};
use millrace_replication::client_security::{
    ClientTls, InterBrokerSecurity, SaslClient, SaslExchange,
};
use parking_lot::RwLock;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::info;

use crate::sasl::{parse_jaas, Mechanism};
use crate::scram::ScramClientExchange;
use crate::tls::{FileStamps, TlsError, TlsListener, TlsSettings};

/// Why this broker cannot talk to the others as configured.
#[derive(Debug, thiserror::Error)]
pub enum InterBrokerError {
    #[error("{key}: {reason}")]
    Config { key: String, reason: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The security of this broker's connections to the others.
pub fn security(config: &BrokerConfig) -> Result<InterBrokerSecurity, InterBrokerError> {
    let listener = config
        .inter_broker_listener()
        .map_err(|e| InterBrokerError::Config {
            key: "inter.broker.listener.name".to_string(),
            reason: e.to_string(),
        })?;
    let name = listener.address.name.as_str();
    let tls = match listener.protocol {
        SecurityProtocol::Ssl | SecurityProtocol::SaslSsl => {
            let built = TlsSettings::from_config(config, name)
                .and_then(|settings| PeerTls::new(settings, verifies_hostname(config, name)));
            match built {
                Ok(client) => Some(client as Arc<dyn ClientTls>),
                // A single node never connects to another broker: what Kafka accepts there (no
                // truststore, relying on the JVM's) only gets a warning.
                Err(e) if config.explicit("controller.quorum.voters").is_none() => {
                    tracing::warn!(error = %e, "the inter-broker listener's TLS client side is unusable; a single node does not need it");
                    None
                }
                Err(e) => return Err(e.into()),
            }
        }
        SecurityProtocol::Plaintext | SecurityProtocol::SaslPlaintext => None,
    };
    let sasl = match listener.protocol {
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
            Some(sasl_client(config, name)?)
        }
        SecurityProtocol::Plaintext | SecurityProtocol::Ssl => None,
    };
    Ok(InterBrokerSecurity { tls, sasl })
}

/// Whether the other end's certificate must name the address dialled
/// (`ssl.endpoint.identification.algorithm`, `https` by default; empty turns it off).
fn verifies_hostname(config: &BrokerConfig, listener: &str) -> bool {
    !config
        .listener_get(listener, "ssl.endpoint.identification.algorithm")
        .unwrap_or("https")
        .trim()
        .is_empty()
}

/// Mutual TLS on the controller listener, or `None` for PLAINTEXT (also when
/// `controller.listener.names` is not set, and on a single node, which has no controller
/// listener).
pub fn controller_tls(
    config: &BrokerConfig,
) -> Result<Option<ControllerTlsHandle>, InterBrokerError> {
    const KEY: &str = "controller.listener.names";
    // A single node (no controller.quorum.voters) has no controller listener at all.
    let (Some(names), Some(_)) = (
        config.explicit(KEY),
        config.explicit("controller.quorum.voters"),
    ) else {
        return Ok(None);
    };
    let wrong = |reason: String| InterBrokerError::Config {
        key: KEY.to_string(),
        reason,
    };
    let name = names
        .split(',')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_uppercase();
    let map = config
        .security_protocol_map()
        .map_err(|e| wrong(e.to_string()))?;
    match map.get(&name) {
        None => Err(wrong(format!(
            "{name} has no security protocol in listener.security.protocol.map"
        ))),
        Some(SecurityProtocol::Plaintext) => Ok(None),
        Some(SecurityProtocol::Ssl) => {
            let settings =
                TlsSettings::from_config(config, &name)?.requiring_client_certificates()?;
            let tls = QuorumTls {
                server: TlsListener::new(settings.clone())?,
                client: PeerTls::new(settings, verifies_hostname(config, &name))?,
            };
            Ok(Some(ControllerTlsHandle(Arc::new(tls))))
        }
        Some(other) => Err(wrong(format!(
            "the controller listener {name} is {}: it serves PLAINTEXT or SSL (mutual TLS)",
            other.name()
        ))),
    }
}

/// Both ends of the controller listener's TLS, each reloaded when its files change.
struct QuorumTls {
    server: Arc<TlsListener>,
    client: Arc<PeerTls>,
}

impl ControllerTls for QuorumTls {
    fn acceptor(&self) -> TlsAcceptor {
        self.server.reload_if_changed();
        self.server.acceptor()
    }

    fn connector(&self) -> Result<TlsConnector, String> {
        self.client.connector()
    }
}

fn sasl_client(
    config: &BrokerConfig,
    listener: &str,
) -> Result<Arc<dyn SaslClient>, InterBrokerError> {
    const KEY: &str = "sasl.mechanism.inter.broker.protocol";
    let wrong = |key: &str, reason: String| InterBrokerError::Config {
        key: key.to_string(),
        reason,
    };
    let name = config.get(KEY).unwrap_or("GSSAPI").trim();
    let mechanism = Mechanism::parse(name).ok_or_else(|| {
        wrong(
            KEY,
            format!(
                "{name} is not served between brokers (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are)"
            ),
        )
    })?;
    let enabled = config
        .listener_get(listener, "sasl.enabled.mechanisms")
        .unwrap_or("GSSAPI");
    if !enabled.split(',').any(|m| m.trim() == name) {
        return Err(wrong(
            KEY,
            format!(
                "{name} must be in the inter-broker listener {listener}'s sasl.enabled.mechanisms \
                 ({enabled})"
            ),
        ));
    }
    let jaas_key = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        listener.to_ascii_lowercase(),
        name.to_ascii_lowercase()
    );
    let text = config.explicit(&jaas_key).ok_or_else(|| {
        wrong(
            &jaas_key,
            "the broker's own username and password for the other brokers go here".to_string(),
        )
    })?;
    let (_, options) = parse_jaas(text).map_err(|e| wrong(&jaas_key, e))?;
    let (Some(user), Some(password)) = (options.get("username"), options.get("password")) else {
        return Err(wrong(
            &jaas_key,
            "needs username=\"…\" and password=\"…\": the broker's own credentials".to_string(),
        ));
    };
    Ok(Arc::new(Credentials {
        mechanism,
        user: user.clone(),
        password: password.clone(),
    }))
}

/// This broker's SASL credentials for one mechanism. `Debug` never shows the password.
struct Credentials {
    mechanism: Mechanism,
    user: String,
    password: String,
}

impl SaslClient for Credentials {
    fn mechanism(&self) -> &str {
        self.mechanism.name()
    }

    fn start(&self) -> Box<dyn SaslExchange> {
        match self.mechanism {
            Mechanism::Plain => Box::new(PlainExchange {
                token: Some(format!("\0{}\0{}", self.user, self.password).into_bytes()),
            }),
            Mechanism::Scram(m) => {
                Box::new(ScramClientExchange::new(m, &self.user, &self.password))
            }
        }
    }
}

/// PLAIN (RFC 4616): one token, `NUL user NUL password`; the server's empty answer ends it.
struct PlainExchange {
    token: Option<Vec<u8>>,
}

impl SaslExchange for PlainExchange {
    fn respond(&mut self, challenge: Option<&[u8]>) -> Result<Option<Vec<u8>>, String> {
        match challenge {
            None => Ok(self.token.take()),
            Some(_) => Ok(None),
        }
    }
}

impl SaslExchange for ScramClientExchange {
    fn respond(&mut self, challenge: Option<&[u8]>) -> Result<Option<Vec<u8>>, String> {
        ScramClientExchange::respond(self, challenge)
    }
}

/// The TLS client side, rebuilt when its files change.
struct PeerTls {
    settings: TlsSettings,
    verify_hostname: bool,
    current: RwLock<(TlsConnector, FileStamps)>,
}

impl PeerTls {
    /// Builds the configuration once; an error stops the broker at start-up.
    fn new(settings: TlsSettings, verify_hostname: bool) -> Result<Arc<Self>, TlsError> {
        let stamps = settings.stamps();
        let config = settings.build_client(verify_hostname)?;
        Ok(Arc::new(Self {
            settings,
            verify_hostname,
            current: RwLock::new((TlsConnector::from(Arc::new(config)), stamps)),
        }))
    }
}

impl ClientTls for PeerTls {
    fn connector(&self) -> Result<TlsConnector, String> {
        let stamps = self.settings.stamps();
        if stamps == self.current.read().1 {
            return Ok(self.current.read().0.clone());
        }
        // A file that cannot be loaded (half written, say) keeps the previous configuration.
        match self.settings.build_client(self.verify_hostname) {
            Ok(config) => {
                let connector = TlsConnector::from(Arc::new(config));
                *self.current.write() = (connector.clone(), stamps);
                info!(
                    listener = %self.settings.listener(),
                    "TLS files changed; new inter-broker connections use them"
                );
                Ok(connector)
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS files changed but cannot be loaded; keeping the previous ones");
                self.current.write().1 = stamps;
                Ok(self.current.read().0.clone())
            }
        }
    }
}
