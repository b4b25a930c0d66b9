//! What this broker presents when it connects to another broker's inter-broker listener
//! (`inter.broker.listener.name`, else `security.inter.broker.protocol`): TLS as that listener's
//! protocol asks, and a SASL exchange with the broker's own credentials
//! (`sasl.mechanism.inter.broker.protocol`).
//!
//! This crate only applies it: the broker builds an [`InterBrokerSecurity`] from its config at
//! start-up (`millrace_frontend::inter_broker`, which owns the listeners' TLS files and SASL
//! settings) and [`crate::client::BrokerConnection::connect`] runs it on each new connection.
//! The TLS side is a [`ClientTls`], asked for a connector at every connect, so that a replaced
//! keystore or truststore is used by the next connection without a restart while the open ones
//! keep theirs.

use std::sync::Arc;

use tokio_rustls::TlsConnector;

/// The TLS client side of inter-broker connections.
pub trait ClientTls: Send + Sync {
    /// The connector for a new connection (built from the files as they are now).
    fn connector(&self) -> Result<TlsConnector, String>;
}

/// One SASL exchange, client side, as the tokens SaslAuthenticate carries.
pub trait SaslExchange: Send {
    /// The next token to send, given the server's answer to the previous one (`None` before the
    /// first); `Ok(None)` once the exchange is complete. An error is a server the client must not
    /// trust (a bad SCRAM signature, say).
    fn respond(&mut self, challenge: Option<&[u8]>) -> Result<Option<Vec<u8>>, String>;
}

/// A SASL mechanism with this broker's credentials for it.
pub trait SaslClient: Send + Sync {
    /// The mechanism's name, as SaslHandshake carries it.
    fn mechanism(&self) -> &str;
    /// A new exchange.
    fn start(&self) -> Box<dyn SaslExchange>;
}

/// How to connect to another broker. The default is PLAINTEXT: neither TLS nor SASL.
#[derive(Clone, Default)]
pub struct InterBrokerSecurity {
    pub tls: Option<Arc<dyn ClientTls>>,
    pub sasl: Option<Arc<dyn SaslClient>>,
}

impl InterBrokerSecurity {
    /// Kafka's name of the security protocol this speaks.
    pub fn protocol_name(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}

impl std::fmt::Debug for InterBrokerSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerSecurity")
            .field("protocol", &self.protocol_name())
            .field("mechanism", &self.sasl.as_ref().map(|s| s.mechanism()))
            .finish()
    }
}
