//! What a connection knows about its client, for every request it carries: the peer's address,
//! the listener it came in on (Metadata and the other endpoint-bearing responses answer in that
//! listener's addresses, as Kafka does) and, on a SASL listener, its authentication
//! ([`crate::sasl::Authenticator`]). Only the connection's reader touches it, one request at a
//! time, so the order of SASL steps is the order of the requests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use millrace_cluster::acl::ANONYMOUS_PRINCIPAL;
use parking_lot::Mutex;

use crate::quota::Throttle;
use crate::sasl::{Authenticator, SaslSettings};
use crate::share_partitions::ShareConnection;

/// One client connection's identity.
#[derive(Debug)]
pub struct Session {
    pub peer: SocketAddr,
    /// The listener's name, upper case (`PLAINTEXT`, `SSL`, or an operator's own name).
    pub listener: Arc<str>,
    /// `Some` on a SASL listener.
    pub sasl: Option<Mutex<Authenticator>>,
    /// `User:<name>` from a TLS client certificate (`ssl.principal.mapping.rules` applied), or as
    /// another front end authenticated it ([`Session::authenticated`]).
    tls_principal: Option<String>,
    /// Until when a quota keeps this connection muted.
    pub throttle: Throttle,
    /// Set by a request whose answer must be the connection's last (a failed authentication).
    close_after: AtomicBool,
    /// The connection's share sessions (KIP-932), made by its first share request; dropped
    /// with the connection, which ends them and releases their members' records.
    pub share: OnceLock<ShareConnection>,
}

impl Session {
    pub fn new(peer: SocketAddr, listener: Arc<str>, sasl: Option<Arc<SaslSettings>>) -> Self {
        Self {
            peer,
            listener,
            sasl: sasl.map(|s| Mutex::new(Authenticator::new(s))),
            tls_principal: None,
            throttle: Throttle::default(),
            close_after: AtomicBool::new(false),
            share: OnceLock::new(),
        }
    }

    /// A client that proved who it is some other way (the HTTP API's authentication): `principal`
    /// as `User:<name>`, answered in `listener`'s addresses.
    pub fn authenticated(peer: SocketAddr, listener: Arc<str>, principal: String) -> Self {
        let mut session = Self::new(peer, listener, None);
        session.tls_principal = Some(principal);
        session
    }

    /// A client of the listener named `PLAINTEXT` (tests, fuzzing).
    pub fn plaintext(peer: SocketAddr) -> Self {
        Self::new(peer, Arc::from("PLAINTEXT"), None)
    }

    /// The principal a TLS client certificate proved (set once, after the handshake).
    pub fn set_tls_principal(&mut self, principal: String) {
        self.tls_principal = Some(principal);
    }

    /// Who the client is, for the authorizer: the SASL principal once authenticated, else the
    /// TLS client certificate's, else `User:ANONYMOUS`.
    pub fn principal(&self) -> String {
        if let Some(principal) = self.sasl.as_ref().and_then(|s| s.lock().principal()) {
            return principal;
        }
        self.tls_principal
            .clone()
            .unwrap_or_else(|| ANONYMOUS_PRINCIPAL.to_string())
    }

    /// The user name quotas know the client by: the principal's name (`ANONYMOUS` when not
    /// authenticated), as Kafka's quota entities name users.
    pub fn quota_user(&self) -> String {
        let principal = self.principal();
        match principal.split_once(':') {
            Some((_, name)) => name.to_string(),
            None => principal,
        }
    }

    /// Asks the connection to close once the current request's answer is sent.
    pub fn close_after_this(&self) {
        self.close_after.store(true, Ordering::Release);
    }

    /// Whether the connection must stop reading requests.
    pub fn closing(&self) -> bool {
        self.close_after.load(Ordering::Acquire)
    }
}
