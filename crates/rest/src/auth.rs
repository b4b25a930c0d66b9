//! Who an HTTP client is: the principal every Kafka handler it reaches sees, so that ACLs and
//! quotas follow from it alone (`millrace.http.authentication`, docs/http.md).
//!
//! - `none`: the client certificate's principal when TLS verified one (`ssl.client.auth`, mapped
//!   by `ssl.principal.mapping.rules` as on a Kafka SSL listener), else `User:ANONYMOUS`.
//! - `basic`: an `Authorization: Basic` header is checked against the broker's SASL users — the
//!   SASL/PLAIN users of the HTTP listener's `listener.name.<name>.plain.sasl.jaas.config`, then
//!   the SCRAM credentials of the metadata image (the password run through PBKDF2 with the stored
//!   salt and iterations, StoredKey and ServerKey compared in constant time) — and gives
//!   `User:<name>`. Without the header a verified client certificate counts; without either, or
//!   with credentials that do not match, the answer is 401 with `WWW-Authenticate: Basic
//!   realm="millrace"` and Confluent's body (40101), after `connection.failed.authentication.delay.ms`.
//!   An unknown user and a wrong password read the same and cost the same PBKDF2.
//!
//! Checked SCRAM passwords are remembered for [`AUTH_CACHE_TTL`] ([`AUTH_CACHE_ENTRIES_MAX`]
//! entries, keyed by an HMAC of user and password under a per-process key, never the password),
//! so that PBKDF2 does not run on every request; an entry keeps the StoredKey it matched, so a
//! credential changed or deleted since takes effect at once.
//!
//! The operator's routes (`/metrics`, `/health`, `/ready`, `/remote-log`) are not asked for
//! credentials unless `millrace.http.authentication.operator.routes=true`; the server decides
//! that ([`Authentication::operator_routes`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use millrace_cluster::acl::ANONYMOUS_PRINCIPAL;
use millrace_cluster::config_rest::{HttpAuthentication, RestConfig};
use millrace_cluster::scram::{ScramCredential, ScramMechanism};
use millrace_cluster::BrokerConfig;
use millrace_frontend::sasl::{PlainUsers, SaslConfigError};
use parking_lot::Mutex;
use ring::hmac;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::debug;

use crate::error::{code, RestError};
use crate::limits::{
    AUTH_CACHE_ENTRIES_MAX, AUTH_CACHE_TTL, AUTH_DERIVATIONS_CONCURRENT_MAX,
    BASIC_CREDENTIALS_BYTES_MAX,
};

/// The realm a 401 names.
pub const REALM: &str = "millrace";

/// SCRAM credentials by user and mechanism (the metadata image's; `None` before the broker
/// serves or for an unknown user).
pub type CredentialLookup =
    Arc<dyn Fn(&str, ScramMechanism) -> Option<ScramCredential> + Send + Sync>;

/// Why a client is refused (the detail goes to the debug log, never to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no credentials")]
    Missing,
    #[error("the Authorization header is not Basic credentials")]
    Malformed,
    #[error("invalid username or password")]
    Invalid,
}

impl Refusal {
    /// 401 with the Basic challenge and Confluent's body.
    pub fn response(&self) -> Response {
        let message = match self {
            Refusal::Missing => "Authentication required",
            Refusal::Malformed | Refusal::Invalid => "Invalid username or password",
        };
        let mut response =
            RestError::new(StatusCode::UNAUTHORIZED, code::UNAUTHORIZED, message).into_response();
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Basic realm="millrace""#),
        );
        response
    }
}

/// A remembered successful SCRAM check.
struct Entry {
    user: String,
    mechanism: ScramMechanism,
    /// The StoredKey it matched: the entry holds while the credential is the same.
    stored_key: Vec<u8>,
    at: Instant,
}

/// Checked SCRAM passwords, bounded in number and age.
struct Verified {
    key: hmac::Key,
    entries: HashMap<[u8; 32], Entry>,
}

impl Verified {
    fn new() -> Self {
        let mut secret = [0u8; 32];
        // On failure the key is all zeros: the cache keys are then guessable, but they are
        // never shown to anyone.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            entries: HashMap::new(),
        }
    }

    fn id(&self, user: &str, password: &str) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(user.as_bytes());
        ctx.update(&[0]);
        ctx.update(password.as_bytes());
        let mut id = [0u8; 32];
        id.copy_from_slice(&ctx.sign().as_ref()[..32]);
        id
    }

    /// The entry for `id` if it is fresh and its credential unchanged.
    fn holds(
        &mut self,
        id: &[u8; 32],
        credentials: impl Fn(&str, ScramMechanism) -> Option<ScramCredential>,
    ) -> Option<String> {
        let entry = self.entries.get(id)?;
        let current = credentials(&entry.user, entry.mechanism);
        if entry.at.elapsed() < AUTH_CACHE_TTL
            && current.is_some_and(|c| c.stored_key == entry.stored_key)
        {
            return Some(entry.user.clone());
        }
        self.entries.remove(id);
        None
    }

    fn remember(&mut self, id: [u8; 32], entry: Entry) {
        if self.entries.len() >= AUTH_CACHE_ENTRIES_MAX {
            self.entries.retain(|_, e| e.at.elapsed() < AUTH_CACHE_TTL);
        }
        if self.entries.len() >= AUTH_CACHE_ENTRIES_MAX {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.at)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(id, entry);
    }
}

/// The HTTP listener's authentication.
pub struct Authentication {
    mode: HttpAuthentication,
    operator_routes: bool,
    failed_delay: Duration,
    plain: PlainUsers,
    /// SCRAM credentials: the metadata image's, once the server has the API; none before.
    credentials: OnceLock<CredentialLookup>,
    verified: Mutex<Verified>,
    derivations: Arc<Semaphore>,
    /// PBKDF2 runs so far (what the cache saves, seen by tests).
    derived: AtomicUsize,
}

impl Authentication {
    /// `mode` with PLAIN users `plain` (SCRAM users once [`Self::use_scram_credentials`]);
    /// refused clients wait `failed_delay`; `operator_routes`: the operator's routes ask for
    /// credentials too.
    pub fn new(
        mode: HttpAuthentication,
        operator_routes: bool,
        failed_delay: Duration,
        plain: PlainUsers,
    ) -> Self {
        Self {
            mode,
            operator_routes,
            failed_delay,
            plain,
            credentials: OnceLock::new(),
            verified: Mutex::new(Verified::new()),
            derivations: Arc::new(Semaphore::new(AUTH_DERIVATIONS_CONCURRENT_MAX)),
            derived: AtomicUsize::new(0),
        }
    }

    /// The settings of `rest` with the PLAIN users of its listener name in `config`.
    pub fn from_config(config: &BrokerConfig, rest: &RestConfig) -> Result<Self, SaslConfigError> {
        let plain = PlainUsers::from_config(config, &rest.listener_name)?.unwrap_or_default();
        Ok(Self::new(
            rest.authentication,
            rest.authenticate_operator_routes,
            rest.failed_authentication_delay,
            plain,
        ))
    }

    /// SCRAM users from now on are those of `credentials` (the first call wins).
    pub fn use_scram_credentials(&self, credentials: CredentialLookup) -> &Self {
        let _ = self.credentials.set(credentials);
        self
    }

    /// `user`'s SCRAM credential for `mechanism`, if there are SCRAM users yet.
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.credentials
            .get()
            .and_then(|lookup| lookup(user, mechanism))
    }

    /// Whether the operator's routes ask for credentials.
    pub fn operator_routes(&self) -> bool {
        self.operator_routes && self.mode != HttpAuthentication::None
    }

    /// The principal of a request with `headers` on a connection whose verified client
    /// certificate maps to `certificate` (`User:<name>`), or why it is refused (after the
    /// failed-authentication delay).
    pub async fn principal(
        &self,
        headers: &HeaderMap,
        certificate: Option<&str>,
    ) -> Result<String, Refusal> {
        let basic = headers.get(AUTHORIZATION);
        match (self.mode, basic, certificate) {
            (HttpAuthentication::None, _, Some(cert)) => Ok(cert.to_string()),
            (HttpAuthentication::None, _, None) => Ok(ANONYMOUS_PRINCIPAL.to_string()),
            (HttpAuthentication::Basic, None, Some(cert)) => Ok(cert.to_string()),
            (HttpAuthentication::Basic, None, None) => Err(self.refuse(Refusal::Missing).await),
            (HttpAuthentication::Basic, Some(value), _) => {
                let Some((user, password)) = basic_credentials(value) else {
                    return Err(self.refuse(Refusal::Malformed).await);
                };
                if self.check(&user, &password).await {
                    Ok(format!("User:{user}"))
                } else {
                    Err(self.refuse(Refusal::Invalid).await)
                }
            }
        }
    }

    async fn refuse(&self, refusal: Refusal) -> Refusal {
        debug!(reason = %refusal, "HTTP authentication refused");
        millrace_metrics::global().authentication_failures.inc();
        tokio::time::sleep(self.failed_delay).await;
        refusal
    }

    /// Whether `password` is `user`'s: a PLAIN user's, else a SCRAM user's (either mechanism).
    async fn check(&self, user: &str, password: &str) -> bool {
        if user.is_empty() || password.is_empty() {
            return false;
        }
        if self.plain.contains(user) {
            return self.plain.check(user, password);
        }
        let id = {
            let mut verified = self.verified.lock();
            let id = verified.id(user, password);
            if verified
                .holds(&id, |u, m| self.scram_credential(u, m))
                .is_some()
            {
                return true;
            }
            id
        };
        let credentials: Vec<ScramCredential> = ScramMechanism::ALL
            .into_iter()
            .filter_map(|m| self.scram_credential(user, m))
            .collect();
        let Ok(_permit) = self.derivations.clone().acquire_owned().await else {
            return false;
        };
        self.derived
            .fetch_add(credentials.len().max(1), Ordering::Relaxed);
        let (user_owned, password_owned) = (user.to_string(), password.to_string());
        let matched = tokio::task::spawn_blocking(move || {
            if credentials.is_empty() {
                // An unknown user costs what a known one does.
                millrace_frontend::scram::verify_password(
                    ScramMechanism::Sha512,
                    &user_owned,
                    &password_owned,
                    None,
                );
                return None;
            }
            credentials.into_iter().find(|c| {
                millrace_frontend::scram::verify_password(
                    c.mechanism,
                    &user_owned,
                    &password_owned,
                    Some(c),
                )
            })
        })
        .await
        .ok()
        .flatten();
        let Some(credential) = matched else {
            return false;
        };
        self.verified.lock().remember(
            id,
            Entry {
                user: user.to_string(),
                mechanism: credential.mechanism,
                stored_key: credential.stored_key,
                at: Instant::now(),
            },
        );
        true
    }
}

/// `Basic base64(user:password)` (RFC 7617; the scheme in any case) → (user, password).
fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let value = value.as_bytes();
    if value.len() > BASIC_CREDENTIALS_BYTES_MAX {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The principal of a verified client certificate (DER), by `ssl.principal.mapping.rules`;
/// `None` when its subject cannot be read or no rule applies (Kafka closes such a connection).
pub fn certificate_principal(
    cert_der: &[u8],
    mapper: &millrace_frontend::principal::PrincipalMapper,
) -> Option<String> {
    let subject = millrace_frontend::principal::subject_name(cert_der)?;
    mapper.name(&subject).map(|name| format!("User:{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn plain_users(line: &str) -> PlainUsers {
        let layer: BTreeMap<String, String> = [(
            "listener.name.http.plain.sasl.jaas.config".to_string(),
            line.to_string(),
        )]
        .into_iter()
        .collect();
        let config = BrokerConfig::from_layers([&layer]).expect("config");
        PlainUsers::from_config(&config, "HTTP")
            .expect("users")
            .expect("a line")
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).expect("header"),
        );
        headers
    }

    /// A SCRAM credential as AlterUserScramCredentials would store it.
    fn scram(m: ScramMechanism, password: &str) -> ScramCredential {
        let salt = b"a-salt-of-16-byt".to_vec();
        let alg = match m {
            ScramMechanism::Sha256 => ring::pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => ring::pbkdf2::PBKDF2_HMAC_SHA512,
        };
        let mut salted = vec![0u8; if m == ScramMechanism::Sha256 { 32 } else { 64 }];
        ring::pbkdf2::derive(
            alg,
            std::num::NonZeroU32::new(4096).expect("rounds"),
            &salt,
            password.as_bytes(),
            &mut salted,
        );
        let (stored_key, server_key) = millrace_frontend::scram::derive_keys(m, &salted);
        ScramCredential {
            mechanism: m,
            salt,
            stored_key,
            server_key,
            iterations: 4096,
        }
    }

    #[tokio::test]
    async fn basic_credentials_map_to_plain_and_scram_users() {
        let store: Arc<Mutex<Option<ScramCredential>>> =
            Arc::new(Mutex::new(Some(scram(ScramMechanism::Sha512, "carol-pw"))));
        let lookups = Arc::new(AtomicUsize::new(0));
        let (s, l) = (store.clone(), lookups.clone());
        let credentials: CredentialLookup = Arc::new(move |user: &str, m: ScramMechanism| {
            l.fetch_add(1, Ordering::Relaxed);
            (user == "carol")
                .then(|| s.lock().clone())
                .flatten()
                .filter(|c| c.mechanism == m)
        });
        let auth = Authentication::new(
            HttpAuthentication::Basic,
            false,
            Duration::ZERO,
            plain_users(
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";"#,
            ),
        );
        auth.use_scram_credentials(credentials);
        let ok = |r: Result<String, Refusal>| r.expect("authenticated");
        assert_eq!(
            ok(auth.principal(&basic("alice", "alice-pw"), None).await),
            "User:alice"
        );
        assert_eq!(
            ok(auth.principal(&basic("carol", "carol-pw"), None).await),
            "User:carol"
        );
        for (user, password) in [
            ("alice", "nope"),
            ("carol", "nope"),
            ("dave", "x"),
            ("alice", ""),
        ] {
            let refused = auth.principal(&basic(user, password), None).await;
            assert_eq!(refused, Err(Refusal::Invalid), "{user}");
        }
        assert_eq!(
            auth.principal(&HeaderMap::new(), None).await,
            Err(Refusal::Missing)
        );
        let mut bearer = HeaderMap::new();
        bearer.insert(AUTHORIZATION, HeaderValue::from_static("Bearer abc"));
        assert_eq!(auth.principal(&bearer, None).await, Err(Refusal::Malformed));
        // A verified certificate counts when no header is sent.
        assert_eq!(
            ok(auth.principal(&HeaderMap::new(), Some("User:bob")).await),
            "User:bob"
        );
        // Remembered: a second check of carol's password finds the entry (its credential is
        // looked up to see that it did not change) and runs no PBKDF2.
        let derived = auth.derived.load(Ordering::Relaxed);
        assert!(auth.check("carol", "carol-pw").await);
        assert_eq!(
            auth.derived.load(Ordering::Relaxed),
            derived,
            "no PBKDF2 again"
        );
        // A changed credential takes effect at once, the remembered check notwithstanding.
        *store.lock() = Some(scram(ScramMechanism::Sha512, "carol-new"));
        assert!(!auth.check("carol", "carol-pw").await);
        assert!(auth.check("carol", "carol-new").await);
        *store.lock() = None;
        assert!(!auth.check("carol", "carol-new").await);
        assert!(lookups.load(Ordering::Relaxed) > 0);
    }

    #[tokio::test]
    async fn without_basic_the_principal_is_the_certificate_or_anonymous() {
        let auth = Authentication::new(
            HttpAuthentication::None,
            true,
            Duration::ZERO,
            PlainUsers::default(),
        );
        assert!(!auth.operator_routes(), "nothing to ask for without basic");
        let headers = basic("alice", "whatever");
        assert_eq!(
            auth.principal(&headers, None).await.as_deref(),
            Ok(ANONYMOUS_PRINCIPAL)
        );
        assert_eq!(
            auth.principal(&headers, Some("User:CN=bob"))
                .await
                .as_deref(),
            Ok("User:CN=bob")
        );
    }

    #[test]
    fn basic_headers_are_read_as_rfc_7617_says() {
        let check = |value: &str, want: Option<(&str, &str)>| {
            let got = basic_credentials(&HeaderValue::from_str(value).expect("header"));
            assert_eq!(
                got.as_ref().map(|(u, p)| (u.as_str(), p.as_str())),
                want,
                "{value}"
            );
        };
        check("Basic YWxpY2U6cHc=", Some(("alice", "pw")));
        check("basic YWxpY2U6cHc6Og==", Some(("alice", "pw::")));
        check("Basic YWxpY2U=", None); // no colon
        check("Basic !!!", None);
        check("Digest YWxpY2U6cHc=", None);
        check("Basic", None);
        let long = format!("Basic {}", "A".repeat(BASIC_CREDENTIALS_BYTES_MAX));
        check(&long, None);
    }
}
