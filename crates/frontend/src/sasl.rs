//! SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners: the settings of each listener
//! (Kafka's `sasl.enabled.mechanisms`, `listener.name.<name>.<mechanism>.sasl.jaas.config`,
//! `connections.max.reauth.ms`, `connection.failed.authentication.delay.ms`) and the per-connection
//! [`Authenticator`], which Kafka's SaslHandshake (v0 with bare tokens, v1 with SaslAuthenticate)
//! exchanges drive.
//!
//! Kafka's rules, kept here:
//! - Before a connection has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate
//!   are answered; any other request closes it ([`Authenticator::admits`]).
//! - A mechanism that is not enabled gets UNSUPPORTED_SASL_MECHANISM with the enabled list, and the
//!   connection closes.
//! - A failed authentication gets SASL_AUTHENTICATION_FAILED with a message that never says which
//!   part was wrong (an unknown user and a wrong password read the same), after
//!   `connection.failed.authentication.delay.ms`, and the connection closes.
//! - KIP-368: with `connections.max.reauth.ms` > 0 the answer carries the session lifetime; the
//!   client re-authenticates (a new SaslHandshake and SaslAuthenticate on the same connection, same
//!   mechanism, same principal) before it ends, and a request after it ended closes the connection.
//!
//! Served mechanisms: PLAIN (users from the JAAS line's `user_<name>="<password>"` entries).
//! SCRAM-SHA-256 and SCRAM-SHA-512 (credentials from the metadata log, [`crate::scram`]).
//! GSSAPI and OAUTHBEARER are refused at start-up, naming the key.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use millrace_cluster::scram::{ScramCredential, ScramMechanism};
use millrace_cluster::BrokerConfig;

use crate::constant_time::constant_time_eq;
use crate::error_codes::{
    ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
};
use crate::scram::{self, ScramPending};

/// The JAAS login module of PLAIN.
const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// Kafka's default `sasl.server.max.receive.size`: the largest frame before authentication.
pub const SASL_SERVER_MAX_RECEIVE_DEFAULT: usize = 524_288;

/// What a client is told when its credentials do not match, whatever did not match.
pub const INVALID_CREDENTIALS: &str = "Authentication failed: Invalid username or password";

/// Why a listener's SASL settings are unusable (the broker does not start).
#[derive(Debug, thiserror::Error)]
#[error("listener {listener}: {key}: {reason}")]
pub struct SaslConfigError {
    pub listener: String,
    pub key: String,
    pub reason: String,
}

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            other => ScramMechanism::from_name(other).map(Mechanism::Scram),
        }
    }
}

/// One SASL listener's settings. `Debug` names PLAIN's users, never their passwords.
#[derive(Clone)]
pub struct SaslSettings {
    listener: String,
    mechanisms: Vec<Mechanism>,
    /// PLAIN's users.
    plain_users: PlainUsers,
    /// `connections.max.reauth.ms`; `None` = sessions do not expire.
    pub reauth: Option<Duration>,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_delay: Duration,
    /// `sasl.server.max.receive.size`: the largest frame before authentication.
    pub max_receive: usize,
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings")
            .field("listener", &self.listener)
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users)
            .field("reauth", &self.reauth)
            .finish_non_exhaustive()
    }
}

impl SaslSettings {
    /// The settings of listener `listener` (upper case), or the first problem.
    pub fn from_config(config: &BrokerConfig, listener: &str) -> Result<Self, SaslConfigError> {
        let wrong = |key: &str, reason: String| SaslConfigError {
            listener: listener.to_string(),
            key: key.to_string(),
            reason,
        };
        let enabled = config
            .listener_get(listener, "sasl.enabled.mechanisms")
            .unwrap_or("GSSAPI");
        let mut mechanisms = Vec::new();
        for name in enabled.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let mechanism = Mechanism::parse(name).ok_or_else(|| {
                wrong(
                    "sasl.enabled.mechanisms",
                    format!("{name} is not served (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are)"),
                )
            })?;
            if !mechanisms.contains(&mechanism) {
                mechanisms.push(mechanism);
            }
        }
        if mechanisms.is_empty() {
            return Err(wrong(
                "sasl.enabled.mechanisms",
                "no mechanism enabled".to_string(),
            ));
        }
        let plain_users = if mechanisms.contains(&Mechanism::Plain) {
            PlainUsers::from_config(config, listener)?.ok_or_else(|| {
                wrong(
                    &PlainUsers::jaas_key(listener),
                    "PLAIN needs the listener's JAAS line with user_<name>=\"<password>\" entries"
                        .to_string(),
                )
            })?
        } else {
            PlainUsers::default()
        };
        // Validated as non-negative numbers by the config registry.
        let number = |key: &str, default: u64| {
            config
                .listener_get(listener, key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        let reauth = match number("connections.max.reauth.ms", 0) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        Ok(Self {
            listener: listener.to_string(),
            mechanisms,
            plain_users,
            reauth,
            failed_delay: Duration::from_millis(number(
                "connection.failed.authentication.delay.ms",
                100,
            )),
            max_receive: usize::try_from(number(
                "sasl.server.max.receive.size",
                SASL_SERVER_MAX_RECEIVE_DEFAULT as u64,
            ))
            .unwrap_or(SASL_SERVER_MAX_RECEIVE_DEFAULT),
        })
    }

    /// The enabled mechanisms' names, as SaslHandshake lists them.
    pub fn mechanism_names(&self) -> Vec<&'static str> {
        self.mechanisms.iter().map(|m| m.name()).collect()
    }

    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`. The principal's name, or the
    /// message for the client.
    fn check_plain(&self, token: &[u8]) -> Result<String, String> {
        // At most 4 parts, however many NULs the token holds.
        let parts: Vec<&[u8]> = token.splitn(4, |b| *b == 0).collect();
        let [authzid, user, password] = parts[..] else {
            return Err(format!(
                "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
                parts.len()
            ));
        };
        let (Ok(authzid), Ok(user), Ok(password)) = (
            std::str::from_utf8(authzid),
            std::str::from_utf8(user),
            std::str::from_utf8(password),
        ) else {
            return Err("Invalid SASL/PLAIN response: not UTF-8".to_string());
        };
        if user.is_empty() {
            return Err("Authentication failed: username not specified".to_string());
        }
        if password.is_empty() {
            return Err("Authentication failed: password not specified".to_string());
        }
        if !authzid.is_empty() && authzid != user {
            return Err(
                "Authentication failed: Client requested an authorization id that is different \
                 from username"
                    .to_string(),
            );
        }
        if self.plain_users.check(user, password) {
            Ok(user.to_string())
        } else {
            Err(INVALID_CREDENTIALS.to_string())
        }
    }
}

/// PLAIN's users of one listener: the `user_<name>="<password>"` entries of its
/// `listener.name.<name>.plain.sasl.jaas.config`. `Debug` names the users, never their passwords.
#[derive(Clone, Default)]
pub struct PlainUsers(BTreeMap<String, String>);

impl std::fmt::Debug for PlainUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl PlainUsers {
    /// The key of listener `listener`'s PLAIN JAAS line.
    pub fn jaas_key(listener: &str) -> String {
        format!(
            "listener.name.{}.plain.sasl.jaas.config",
            listener.to_ascii_lowercase()
        )
    }

    /// The users of listener `listener` (upper case); `None` when it has no PLAIN JAAS line; an
    /// error for a line that is not PLAIN's or names nobody.
    pub fn from_config(
        config: &BrokerConfig,
        listener: &str,
    ) -> Result<Option<Self>, SaslConfigError> {
        let key = Self::jaas_key(listener);
        let wrong = |reason: String| SaslConfigError {
            listener: listener.to_string(),
            key: key.clone(),
            reason,
        };
        let Some(text) = config.explicit(&key) else {
            return Ok(None);
        };
        let (module, options) = parse_jaas(text).map_err(wrong)?;
        if module != PLAIN_LOGIN_MODULE {
            return Err(wrong(format!(
                "login module {module}: PLAIN uses {PLAIN_LOGIN_MODULE}"
            )));
        }
        let users: BTreeMap<String, String> = options
            .into_iter()
            .filter_map(|(name, password)| {
                name.strip_prefix("user_")
                    .map(|user| (user.to_string(), password))
            })
            .collect();
        if users.is_empty() {
            return Err(wrong(
                "no user_<name>=\"<password>\" entry: nobody could authenticate".to_string(),
            ));
        }
        Ok(Some(Self(users)))
    }

    /// Whether `user` is one of them.
    pub fn contains(&self, user: &str) -> bool {
        self.0.contains_key(user)
    }

    /// Whether `password` is `user`'s. Compared in time independent of where they differ; an
    /// unknown user is compared against an empty password, so both failures take the same path.
    pub fn check(&self, user: &str, password: &str) -> bool {
        let expected = self.0.get(user).map_or("", String::as_str);
        constant_time_eq(expected.as_bytes(), password.as_bytes()) && self.0.contains_key(user)
    }
}

/// A JAAS line: `LoginModule flag key="value" key=value ...;` → (module, options). Values may
/// be quoted (with `\` escapes) or bare words.
pub fn parse_jaas(text: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let mut chars = text.trim().chars().peekable();
    let word = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> String {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut out = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == ';' || c == '=' {
                break;
            }
            out.push(c);
            chars.next();
        }
        out
    };
    let module = word(&mut chars);
    if module.is_empty() {
        return Err("empty JAAS configuration".to_string());
    }
    let flag = word(&mut chars);
    if !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str()) {
        return Err(format!(
            "JAAS control flag '{flag}' after {module}: expected required, requisite, \
             sufficient or optional"
        ));
    }
    let mut options = BTreeMap::new();
    loop {
        let key = word(&mut chars);
        if key.is_empty() {
            match chars.next() {
                Some(';') => break,
                None => return Err("the JAAS configuration does not end with ';'".to_string()),
                Some(c) => return Err(format!("unexpected '{c}' in the JAAS configuration")),
            }
        }
        if chars.next() != Some('=') {
            return Err(format!("JAAS option {key}: expected {key}=value"));
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(format!("JAAS option {key}: unterminated value")),
                    },
                    Some(c) => value.push(c),
                    None => return Err(format!("JAAS option {key}: unterminated value")),
                }
            }
            value
        } else {
            word(&mut chars)
        };
        options.insert(key, value);
    }
    if chars.any(|c| !c.is_whitespace()) {
        return Err("only one login module per JAAS configuration".to_string());
    }
    Ok((module, options))
}

/// An exchange in progress.
#[derive(Debug, Clone)]
enum Exchange {
    /// None: the next SASL request must be a SaslHandshake.
    Idle,
    /// SaslHandshake chose a mechanism; SaslAuthenticate comes next.
    Handshaken(Mechanism),
    /// SCRAM sent its server-first message; the client-final message comes next.
    Scram(Box<ScramPending>),
}

/// An authenticated session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authenticated {
    principal: String,
    mechanism: Mechanism,
    expires: Option<Instant>,
}

/// The outcome of one SASL request, for the handler to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answer with success: `auth_bytes` for the client (SCRAM's server messages), and
    /// SaslAuthenticate's `session_lifetime_ms` once authenticated.
    Ok {
        session_lifetime_ms: i64,
        auth_bytes: Vec<u8>,
    },
    /// Answer with this error code and message, then close the connection.
    Refuse { code: i16, message: String },
}

impl Step {
    fn ok() -> Self {
        Step::Ok {
            session_lifetime_ms: 0,
            auth_bytes: Vec::new(),
        }
    }

    fn refuse(code: i16, message: impl Into<String>) -> Self {
        Step::Refuse {
            code,
            message: message.into(),
        }
    }
}

/// SCRAM credentials by user and mechanism (the metadata image's).
pub type CredentialLookup<'a> = &'a dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>;

/// One connection's authentication.
#[derive(Debug)]
pub struct Authenticator {
    settings: std::sync::Arc<SaslSettings>,
    exchange: Exchange,
    /// The exchange began with SaslHandshake v0: its tokens come in bare frames (no request
    /// header) and go back the same way, as before KIP-152.
    raw_tokens: bool,
    /// Set once authenticated; kept while a re-authentication runs (KIP-368).
    session: Option<Authenticated>,
}

impl Authenticator {
    pub fn new(settings: std::sync::Arc<SaslSettings>) -> Self {
        Self {
            settings,
            exchange: Exchange::Idle,
            raw_tokens: false,
            session: None,
        }
    }

    /// The largest frame this connection may send now: `Some(sasl.server.max.receive.size)`
    /// until it has authenticated (and while bare v0 tokens are expected), `None` after.
    pub fn pre_auth_frame_bytes_max(&self) -> Option<usize> {
        (self.session.is_none() || self.expects_raw_token()).then_some(self.settings.max_receive)
    }

    /// Whether the next frame is a bare SASL token (after SaslHandshake v0), not a request.
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens && !matches!(self.exchange, Exchange::Idle)
    }

    pub fn settings(&self) -> &SaslSettings {
        &self.settings
    }

    /// The authenticated principal (`User:<name>`), if any.
    pub fn principal(&self) -> Option<String> {
        self.session
            .as_ref()
            .map(|s| format!("User:{}", s.principal))
    }

    /// Whether a request of a non-SASL API may be served now: `Err` with the reason to close the
    /// connection otherwise (not authenticated yet, or the session ended).
    pub fn admits(&self, now: Instant) -> Result<(), String> {
        match &self.session {
            None => Err("a request before SASL authentication".to_string()),
            Some(Authenticated {
                expires: Some(at), ..
            }) if now >= *at => Err(
                "the SASL session ended (connections.max.reauth.ms) without re-authentication"
                    .to_string(),
            ),
            Some(_) => Ok(()),
        }
    }

    /// SaslHandshake with `mechanism`; `raw_tokens` for v0 (tokens in bare frames follow).
    pub fn handshake(&mut self, mechanism: &str, raw_tokens: bool) -> Step {
        let Some(m) = Mechanism::parse(mechanism).filter(|m| self.settings.mechanisms.contains(m))
        else {
            return Step::refuse(
                UNSUPPORTED_SASL_MECHANISM,
                format!("Unsupported SASL mechanism {mechanism}"),
            );
        };
        if !matches!(self.exchange, Exchange::Idle) {
            return Step::refuse(ILLEGAL_SASL_STATE, "Unexpected SaslHandshake");
        }
        if self.session.as_ref().is_some_and(|s| s.mechanism != m) {
            return Step::refuse(
                ILLEGAL_SASL_STATE,
                "SASL mechanism must not change on re-authentication",
            );
        }
        if raw_tokens && self.session.is_some() {
            return Step::refuse(
                ILLEGAL_SASL_STATE,
                "Re-authentication needs SaslHandshake v1 and SaslAuthenticate",
            );
        }
        self.exchange = Exchange::Handshaken(m);
        self.raw_tokens = raw_tokens;
        Step::ok()
    }

    /// SaslAuthenticate carrying `token`; SCRAM credentials from `credentials`.
    pub fn authenticate(
        &mut self,
        token: &[u8],
        now: Instant,
        credentials: CredentialLookup<'_>,
    ) -> Step {
        let exchange = std::mem::replace(&mut self.exchange, Exchange::Idle);
        let outcome = match exchange {
            Exchange::Idle => {
                return Step::refuse(
                    ILLEGAL_SASL_STATE,
                    "SaslAuthenticate without a SaslHandshake before it",
                )
            }
            Exchange::Handshaken(Mechanism::Plain) => self
                .settings
                .check_plain(token)
                .map(|user| (user, Mechanism::Plain, Vec::new())),
            Exchange::Handshaken(Mechanism::Scram(m)) => {
                return match scram::first(m, token, credentials) {
                    Ok((server_first, pending)) => {
                        self.exchange = Exchange::Scram(Box::new(pending));
                        Step::Ok {
                            session_lifetime_ms: 0,
                            auth_bytes: server_first,
                        }
                    }
                    Err(message) => Step::refuse(SASL_AUTHENTICATION_FAILED, message),
                };
            }
            Exchange::Scram(pending) => {
                scram::finish(&pending, token).map(|(user, server_final)| {
                    (user, Mechanism::Scram(pending.mechanism()), server_final)
                })
            }
        };
        let (principal, mechanism, auth_bytes) = match outcome {
            Ok(done) => done,
            Err(message) => return Step::refuse(SASL_AUTHENTICATION_FAILED, message),
        };
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.principal != principal)
        {
            return Step::refuse(
                SASL_AUTHENTICATION_FAILED,
                "Cannot change principals during re-authentication",
            );
        }
        let lifetime = self.settings.reauth;
        self.session = Some(Authenticated {
            principal,
            mechanism,
            expires: lifetime.map(|d| now + d),
        });
        Step::Ok {
            session_lifetime_ms: lifetime
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            auth_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const NO_SCRAM: fn(&str, ScramMechanism) -> Option<ScramCredential> = |_, _| None;

    const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice \"quoted\" secret";"#;

    fn settings(extra: &[(&str, &str)]) -> Result<SaslSettings, SaslConfigError> {
        let mut layer: BTreeMap<String, String> = [
            ("listeners", "PLAINTEXT://h:1,SASL_PLAINTEXT://h:2"),
            ("sasl.enabled.mechanisms", "PLAIN"),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            layer.insert(k.to_string(), v.to_string());
        }
        let config = BrokerConfig::from_layers([&layer]).expect("config");
        SaslSettings::from_config(&config, "SASL_PLAINTEXT")
    }

    #[test]
    fn jaas_lines_parse_as_kafka_writes_them() {
        let (module, options) = parse_jaas(JAAS).expect("parses");
        assert_eq!(module, PLAIN_LOGIN_MODULE);
        assert_eq!(options["user_alice"], "alice \"quoted\" secret");
        assert_eq!(options["username"], "admin");
        for bad in [
            "",
            "M required user_a=\"x\"",
            "M maybe user_a=\"x\";",
            "M required user_a \"x\";",
            "M required user_a=\"x;",
            "M required; N required;",
        ] {
            assert!(parse_jaas(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unusable_settings_name_their_key() {
        for (extra, key) in [
            (
                vec![("sasl.enabled.mechanisms", "PLAIN,OAUTHBEARER")],
                "sasl.enabled.mechanisms",
            ),
            (
                vec![(
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b\";",
                )],
                "plain.sasl.jaas.config",
            ),
            (
                vec![(
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                    "com.example.Other required user_a=\"b\";",
                )],
                "plain.sasl.jaas.config",
            ),
        ] {
            let err = settings(&extra).expect_err(&format!("{extra:?}")).to_string();
            assert!(err.contains(key), "{extra:?}: {err}");
        }
        // Kafka's default mechanism list is GSSAPI, which is not served.
        let mut layer = BTreeMap::new();
        layer.insert(
            "listeners".to_string(),
            "PLAINTEXT://h:1,SASL_PLAINTEXT://h:2".to_string(),
        );
        let config = BrokerConfig::from_layers([&layer]).expect("config");
        let err = SaslSettings::from_config(&config, "SASL_PLAINTEXT")
            .expect_err("GSSAPI")
            .to_string();
        assert!(err.contains("GSSAPI"), "{err}");
    }

    #[test]
    fn plain_authenticates_known_users_and_refuses_the_rest_alike() {
        let s = Arc::new(settings(&[]).expect("settings"));
        let now = Instant::now();
        let mut a = Authenticator::new(s.clone());
        assert!(a.admits(now).is_err(), "nothing before authentication");
        assert!(matches!(a.handshake("PLAIN", false), Step::Ok { .. }));
        assert!(a.admits(now).is_err());
        assert_eq!(
            a.authenticate(b"\0admin\0admin-secret", now, &NO_SCRAM),
            Step::Ok {
                session_lifetime_ms: 0,
                auth_bytes: Vec::new(),
            }
        );
        assert_eq!(a.principal().as_deref(), Some("User:admin"));
        assert!(a.admits(now + Duration::from_secs(3600)).is_ok());

        let refused = |token: &[u8]| {
            let mut a = Authenticator::new(s.clone());
            assert!(matches!(a.handshake("PLAIN", false), Step::Ok { .. }));
            match a.authenticate(token, now, &NO_SCRAM) {
                Step::Refuse { code, message } => {
                    assert_eq!(code, SASL_AUTHENTICATION_FAILED);
                    assert!(a.admits(now).is_err());
                    message
                }
                ok => panic!("{token:?} authenticated: {ok:?}"),
            }
        };
        // A wrong password and an unknown user read the same.
        assert_eq!(refused(b"\0admin\0wrong"), INVALID_CREDENTIALS);
        assert_eq!(refused(b"\0nobody\0admin-secret"), INVALID_CREDENTIALS);
        assert_eq!(refused(b"\0nobody\0"), refused(b"\0admin\0"));
        assert!(refused(b"admin\0admin-secret").contains("3 tokens"));
        assert!(refused(b"alice\0admin\0admin-secret").contains("authorization id"));
        // An authorization id equal to the user is accepted.
        let mut a = Authenticator::new(s.clone());
        a.handshake("PLAIN", false);
        assert!(matches!(
            a.authenticate(b"admin\0admin\0admin-secret", now, &NO_SCRAM),
            Step::Ok { .. }
        ));

        let mut a = Authenticator::new(s.clone());
        assert!(matches!(
            a.handshake("SCRAM-SHA-256", false),
            Step::Refuse {
                code: UNSUPPORTED_SASL_MECHANISM,
                ..
            }
        ));
        let mut a = Authenticator::new(s);
        assert!(matches!(
            a.authenticate(b"\0admin\0admin-secret", now, &NO_SCRAM),
            Step::Refuse {
                code: ILLEGAL_SASL_STATE,
                ..
            }
        ));
    }

    #[test]
    fn sessions_end_without_reauthentication_and_keep_their_principal() {
        let s = Arc::new(settings(&[("connections.max.reauth.ms", "1000")]).expect("settings"));
        let now = Instant::now();
        let mut a = Authenticator::new(s);
        a.handshake("PLAIN", false);
        assert_eq!(
            a.authenticate(b"\0alice\0alice \"quoted\" secret", now, &NO_SCRAM),
            Step::Ok {
                session_lifetime_ms: 1000,
                auth_bytes: Vec::new(),
            }
        );
        assert!(a.admits(now + Duration::from_millis(999)).is_ok());
        assert!(a.admits(now + Duration::from_millis(1000)).is_err());
        // Re-authentication renews the session; another principal is refused.
        let later = now + Duration::from_millis(900);
        assert!(matches!(a.handshake("PLAIN", false), Step::Ok { .. }));
        assert!(
            a.admits(later).is_ok(),
            "still served while re-authenticating"
        );
        assert!(matches!(
            a.authenticate(b"\0alice\0alice \"quoted\" secret", later, &NO_SCRAM),
            Step::Ok { .. }
        ));
        assert!(a.admits(now + Duration::from_millis(1800)).is_ok());
        assert!(matches!(a.handshake("PLAIN", false), Step::Ok { .. }));
        assert!(matches!(
            a.authenticate(b"\0admin\0admin-secret", later, &NO_SCRAM),
            Step::Refuse {
                code: SASL_AUTHENTICATION_FAILED,
                ..
            }
        ));
    }
}
