//! The server side of SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks it in
//! SaslAuthenticate tokens: client-first → server-first → client-final → server-final, with the
//! credentials of the metadata log ([`millrace_cluster::scram`]).
//!
//! - No channel binding (`p=` is refused; `n` and `y` are accepted — RFC 5802 allows `y`, Kafka
//!   takes only `n`) and no delegation tokens (`tokenauth=true` is refused).
//! - Every failure reads as Kafka's "Authentication failed during authentication due to invalid
//!   credentials with SASL mechanism …", but for an authorization id other than the user's name.
//! - An unknown user is not told so at once: it gets a server-first message with a salt derived
//!   from its name and a per-process secret (shaped like the salts Kafka's admin client makes,
//!   with its default 4096 iterations), and fails at the proof like a wrong password, with the same
//!   message. (Kafka fails an unknown user at the first message.) Asking two brokers, or one
//!   broker before and after a restart, still tells a real user (same salt) from an unknown one.
//! - [`derive_keys`] turns a salted password (what AlterUserScramCredentials carries) into the
//!   StoredKey and ServerKey the log keeps.
//! - [`verify_password`] checks a plain password against a credential without the exchange (the
//!   HTTP listener's Basic authentication): PBKDF2 with the credential's salt and iterations, then
//!   StoredKey and ServerKey compared in constant time. An unknown user costs the same PBKDF2.

use std::num::NonZeroU32;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use millrace_cluster::scram::{
    ScramCredential, ScramMechanism, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN,
};
use ring::{digest, hmac, rand::SecureRandom};

use crate::constant_time::constant_time_eq;

/// Longest client message accepted (a user name and a nonce take a few dozen bytes; this bounds
/// what an unauthenticated client can make the server keep).
const SCRAM_CLIENT_MESSAGE_BYTES_MAX: usize = 4096;
/// Kafka's answer to an authorization id that is not the user's name.
const AUTHORIZATION_ID_MISMATCH: &str =
    "Authentication failed: Client requested an authorization id that is different from username";
/// Random bytes in the server's part of the nonce.
const SERVER_NONCE_BYTES: usize = 24;
/// Characters of the salt made up for an unknown user: what Kafka's admin client generates (a
/// 130-bit random number in base 36, about 26 characters), so that it looks like a real one.
const DECOY_SALT_CHARS: usize = 26;

fn hmac_alg(m: ScramMechanism) -> hmac::Algorithm {
    match m {
        ScramMechanism::Sha256 => hmac::HMAC_SHA256,
        ScramMechanism::Sha512 => hmac::HMAC_SHA512,
    }
}

fn digest_alg(m: ScramMechanism) -> &'static digest::Algorithm {
    match m {
        ScramMechanism::Sha256 => &digest::SHA256,
        ScramMechanism::Sha512 => &digest::SHA512,
    }
}

fn mac(m: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac_alg(m), key), data)
        .as_ref()
        .to_vec()
}

fn hash(m: ScramMechanism, data: &[u8]) -> Vec<u8> {
    digest::digest(digest_alg(m), data).as_ref().to_vec()
}

/// (StoredKey, ServerKey) of a salted password.
pub fn derive_keys(m: ScramMechanism, salted_password: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let client_key = mac(m, salted_password, b"Client Key");
    (hash(m, &client_key), mac(m, salted_password, b"Server Key"))
}

/// SaltedPassword = PBKDF2(password, salt, iterations) with the mechanism's HMAC (RFC 5802's Hi).
fn salted_password(
    m: ScramMechanism,
    password: &str,
    salt: &[u8],
    iterations: NonZeroU32,
) -> Vec<u8> {
    let alg = match m {
        ScramMechanism::Sha256 => ring::pbkdf2::PBKDF2_HMAC_SHA256,
        ScramMechanism::Sha512 => ring::pbkdf2::PBKDF2_HMAC_SHA512,
    };
    let mut out = vec![0u8; digest_alg(m).output_len()];
    ring::pbkdf2::derive(alg, iterations, salt, password.as_bytes(), &mut out);
    out
}

/// Whether `password` is the one `credential` was made from (`user`'s, for `mechanism`). With no
/// credential (an unknown user) the same work is done with a decoy salt and `false` comes back,
/// so that the time taken does not tell a user from a stranger. CPU-bound for milliseconds (4096
/// to 16384 PBKDF2 rounds): call it off the async runtime's threads.
pub fn verify_password(
    mechanism: ScramMechanism,
    user: &str,
    password: &str,
    credential: Option<&ScramCredential>,
) -> bool {
    let iterations = |n: i32| NonZeroU32::new(u32::try_from(n).unwrap_or(0));
    match credential {
        Some(c) if c.mechanism == mechanism => {
            // Iterations outside Kafka's bounds cannot have been stored (the controller checks);
            // refuse rather than run an unbounded derivation.
            let Some(rounds) = iterations(c.iterations)
                .filter(|_| (SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&c.iterations))
            else {
                return false;
            };
            let salted = salted_password(mechanism, password, &c.salt, rounds);
            let (stored_key, server_key) = derive_keys(mechanism, &salted);
            // Both compared, always, so that the time does not depend on which differs.
            let stored = constant_time_eq(&stored_key, &c.stored_key);
            let server = constant_time_eq(&server_key, &c.server_key);
            stored & server
        }
        _ => {
            if let Some(rounds) = iterations(SCRAM_ITERATIONS_MIN) {
                let _ = salted_password(mechanism, password, &decoy_salt(mechanism, user), rounds);
            }
            false
        }
    }
}

/// A secret for this process, for decoy salts.
fn process_secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut secret = [0u8; 32];
        // On failure the secret stays zero: decoy salts are then guessable, nothing else.
        let _ = ring::rand::SystemRandom::new().fill(&mut secret);
        secret
    })
}

/// A salt for an unknown user: the same for the same name while this process runs, base-36
/// characters like the salts Kafka's admin client makes.
fn decoy_salt(mechanism: ScramMechanism, user: &str) -> Vec<u8> {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    mac(mechanism, process_secret(), user.as_bytes())
        .iter()
        .take(DECOY_SALT_CHARS)
        .map(|b| DIGITS[usize::from(*b) % DIGITS.len()])
        .collect()
}

fn random_nonce() -> Result<String, String> {
    let mut bytes = [0u8; SERVER_NONCE_BYTES];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no randomness for the SCRAM nonce".to_string())?;
    Ok(BASE64.encode(bytes))
}

/// The exchange after the server-first message. `Debug` shows the user and mechanism only.
#[derive(Clone)]
pub struct ScramPending {
    mechanism: ScramMechanism,
    user: String,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    /// `None`: an unknown user, failed at the proof.
    credential: Option<ScramCredential>,
}

impl std::fmt::Debug for ScramPending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramPending")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl ScramPending {
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }
}

/// `saslname` of RFC 5802: `=2C` is `,`, `=3D` is `=`, any other `=` is an error.
fn decode_saslname(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err("Invalid SCRAM username encoding".to_string()),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What a client is told when the exchange fails (Kafka's text for any SCRAM failure but an
/// authorization id different from the user).
fn failure(mechanism: ScramMechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL \
         mechanism {}",
        mechanism.name()
    )
}

/// Handles client-first: the server-first message to send, and the exchange to finish. Errors are
/// what the client is told: Kafka's one message (the detail is logged at debug).
pub fn first(
    mechanism: ScramMechanism,
    message: &[u8],
    lookup: &dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>,
) -> Result<(Vec<u8>, ScramPending), String> {
    if message.len() > SCRAM_CLIENT_MESSAGE_BYTES_MAX {
        tracing::debug!(bytes = message.len(), "SCRAM client-first message too long");
        return Err(failure(mechanism));
    }
    parse_first(mechanism, message, lookup).map_err(|detail| {
        if detail.starts_with(AUTHORIZATION_ID_MISMATCH) {
            detail
        } else {
            tracing::debug!(%detail, "SCRAM client-first message refused");
            failure(mechanism)
        }
    })
}

fn parse_first(
    mechanism: ScramMechanism,
    message: &[u8],
    lookup: &dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>,
) -> Result<(Vec<u8>, ScramPending), String> {
    let text = std::str::from_utf8(message)
        .map_err(|_| "Invalid SCRAM client first message: not UTF-8".to_string())?;
    let (cbind, rest) = text
        .split_once(',')
        .ok_or_else(|| "Invalid SCRAM client first message".to_string())?;
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => return Err("SCRAM channel binding is not supported".into()),
        _ => return Err("Invalid SCRAM client first message".to_string()),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or_else(|| "Invalid SCRAM client first message".to_string())?;
    let gs2_header = &text[..text.len() - bare.len()];
    let mut user = None;
    let mut client_nonce = None;
    for (i, attribute) in bare.split(',').enumerate() {
        let (key, value) = attribute
            .split_once('=')
            .ok_or_else(|| "Invalid SCRAM client first message".to_string())?;
        match (i, key) {
            (0, "n") => user = Some(decode_saslname(value)?),
            (1, "r") if !value.is_empty() => client_nonce = Some(value),
            (0 | 1, _) => return Err("Invalid SCRAM client first message".to_string()),
            (_, "tokenauth") if value.eq_ignore_ascii_case("true") => {
                return Err("SCRAM delegation tokens are not supported".to_string())
            }
            _ => {} // extensions
        }
    }
    let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
        return Err("Invalid SCRAM client first message".to_string());
    };
    if let Some(authzid) = authzid.strip_prefix("a=") {
        if decode_saslname(authzid)? != user {
            return Err(AUTHORIZATION_ID_MISMATCH.to_string());
        }
    } else if !authzid.is_empty() {
        return Err("Invalid SCRAM client first message".to_string());
    }
    let credential = lookup(&user, mechanism);
    let (salt, iterations) = match &credential {
        Some(c) => (c.salt.clone(), c.iterations),
        None => (decoy_salt(mechanism, &user), SCRAM_ITERATIONS_MIN),
    };
    let nonce = format!("{client_nonce}{}", random_nonce()?);
    let server_first = format!("r={nonce},s={},i={iterations}", BASE64.encode(&salt));
    Ok((
        server_first.clone().into_bytes(),
        ScramPending {
            mechanism,
            user,
            gs2_header: gs2_header.to_string(),
            client_first_bare: bare.to_string(),
            server_first,
            nonce,
            credential,
        },
    ))
}

/// Handles client-final: the authenticated user and the server-final message, or why not. A
/// wrong proof and an unknown user give the same error.
pub fn finish(pending: &ScramPending, message: &[u8]) -> Result<(String, Vec<u8>), String> {
    let failed = || failure(pending.mechanism);
    if message.len() > SCRAM_CLIENT_MESSAGE_BYTES_MAX {
        return Err(failed());
    }
    let text = std::str::from_utf8(message).map_err(|_| failed())?;
    let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(failed)?;
    let mut attributes = without_proof.split(',');
    let binding = attributes
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or_else(failed)?;
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or_else(failed)?;
    if BASE64.decode(binding).ok().as_deref() != Some(pending.gs2_header.as_bytes())
        || nonce != pending.nonce
    {
        return Err(failed());
    }
    let proof = BASE64.decode(proof).map_err(|_| failed())?;
    let Some(credential) = &pending.credential else {
        return Err(failed());
    };
    let m = pending.mechanism;
    let auth_message = format!(
        "{},{},{}",
        pending.client_first_bare, pending.server_first, without_proof
    );
    let client_signature = mac(m, &credential.stored_key, auth_message.as_bytes());
    if proof.len() != client_signature.len() {
        return Err(failed());
    }
    let client_key: Vec<u8> = proof
        .iter()
        .zip(&client_signature)
        .map(|(p, s)| p ^ s)
        .collect();
    if !constant_time_eq(&hash(m, &client_key), &credential.stored_key) {
        return Err(failed());
    }
    let server_signature = mac(m, &credential.server_key, auth_message.as_bytes());
    Ok((
        pending.user.clone(),
        format!("v={}", BASE64.encode(server_signature)).into_bytes(),
    ))
}

/// `saslname` of RFC 5802 from a user name: `,` is `=2C`, `=` is `=3D`.
fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// Where a client-side exchange stands.
enum ClientStep {
    Start,
    SentFirst {
        client_first_bare: String,
        nonce: String,
    },
    SentFinal {
        server_signature: Vec<u8>,
    },
    Done,
}

/// The client side of one SCRAM exchange: this broker authenticating to another broker's
/// listener with its own user and password (`sasl.mechanism.inter.broker.protocol`). The
/// server's iteration count must lie within Kafka's bounds, its nonce must extend the client's,
/// and its final signature must prove it knows the credential.
pub struct ScramClientExchange {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    step: ClientStep,
}

impl ScramClientExchange {
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> Self {
        Self {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            step: ClientStep::Start,
        }
    }

    /// The next message, given the server's last one (`None` at the start); `Ok(None)` once the
    /// server has proved itself.
    pub fn respond(&mut self, challenge: Option<&[u8]>) -> Result<Option<Vec<u8>>, String> {
        let m = self.mechanism;
        match (
            std::mem::replace(&mut self.step, ClientStep::Done),
            challenge,
        ) {
            (ClientStep::Start, None) => {
                let nonce = random_nonce()?;
                let client_first_bare = format!("n={},r={nonce}", encode_saslname(&self.user));
                let message = format!("n,,{client_first_bare}").into_bytes();
                self.step = ClientStep::SentFirst {
                    client_first_bare,
                    nonce,
                };
                Ok(Some(message))
            }
            (
                ClientStep::SentFirst {
                    client_first_bare,
                    nonce,
                },
                Some(server_first),
            ) => {
                let server_first = std::str::from_utf8(server_first)
                    .map_err(|_| "server-first message is not UTF-8".to_string())?;
                let mut combined = None;
                let mut salt = None;
                let mut iterations = None;
                for attribute in server_first.split(',') {
                    match attribute.split_once('=') {
                        Some(("r", v)) => combined = Some(v),
                        Some(("s", v)) => salt = BASE64.decode(v).ok(),
                        Some(("i", v)) => iterations = v.parse::<i32>().ok(),
                        Some(("e", v)) => return Err(format!("server error: {v}")),
                        _ => {}
                    }
                }
                let (Some(combined), Some(salt), Some(iterations)) = (combined, salt, iterations)
                else {
                    return Err(format!("bad server-first message {server_first:?}"));
                };
                if !combined.starts_with(&nonce) || combined.len() == nonce.len() {
                    return Err("the server's nonce does not extend the client's".to_string());
                }
                let rounds = NonZeroU32::new(u32::try_from(iterations).unwrap_or(0))
                    .filter(|_| (SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations))
                    .ok_or_else(|| format!("{iterations} iterations is outside Kafka's bounds"))?;
                let salted = salted_password(m, &self.password, &salt, rounds);
                let client_key = mac(m, &salted, b"Client Key");
                let without_proof = format!("c={},r={combined}", BASE64.encode("n,,"));
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let client_signature = mac(m, &hash(m, &client_key), auth_message.as_bytes());
                let proof: Vec<u8> = client_key
                    .iter()
                    .zip(&client_signature)
                    .map(|(k, s)| k ^ s)
                    .collect();
                let server_key = mac(m, &salted, b"Server Key");
                self.step = ClientStep::SentFinal {
                    server_signature: mac(m, &server_key, auth_message.as_bytes()),
                };
                Ok(Some(
                    format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
                ))
            }
            (ClientStep::SentFinal { server_signature }, Some(server_final)) => {
                let text = std::str::from_utf8(server_final)
                    .map_err(|_| "server-final message is not UTF-8".to_string())?;
                if let Some(error) = text.strip_prefix("e=") {
                    return Err(format!("server error: {error}"));
                }
                let signature = text
                    .strip_prefix("v=")
                    .and_then(|v| BASE64.decode(v).ok())
                    .ok_or_else(|| format!("bad server-final message {text:?}"))?;
                if !constant_time_eq(&signature, &server_signature) {
                    return Err("the server's signature is wrong: it does not hold the \
                                credential"
                        .to_string());
                }
                Ok(None)
            }
            _ => Err("SCRAM exchange out of order".to_string()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// SaltedPassword for the tests' credentials.
    pub(crate) fn salted(
        m: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Vec<u8> {
        salted_password(
            m,
            password,
            salt,
            NonZeroU32::new(iterations).expect("iterations"),
        )
    }

    pub(crate) fn credential(m: ScramMechanism, password: &str) -> ScramCredential {
        let salt = b"pepper-and-salt!".to_vec();
        let salted = salted(m, password, &salt, 4096);
        let (stored_key, server_key) = derive_keys(m, &salted);
        ScramCredential {
            mechanism: m,
            salt,
            stored_key,
            server_key,
            iterations: 4096,
        }
    }

    /// Runs this module's client through an exchange with its server; the server's error, or the
    /// client's when the server fails to prove itself.
    fn exchange(
        m: ScramMechanism,
        user: &str,
        password: &str,
        known: &ScramCredential,
    ) -> Result<(), String> {
        let lookup =
            |u: &str, mech: ScramMechanism| (u == "alice" && mech == m).then(|| known.clone());
        let mut client = ScramClientExchange::new(m, user, password);
        let client_first = client.respond(None)?.expect("client-first");
        let (server_first, pending) = first(m, &client_first, &lookup)?;
        let client_final = client.respond(Some(&server_first))?.expect("client-final");
        let (who, server_final) = finish(&pending, &client_final)?;
        assert_eq!(who, user);
        assert_eq!(
            client.respond(Some(&server_final))?,
            None,
            "the server proves it knows the key"
        );
        Ok(())
    }

    #[test]
    fn the_client_refuses_a_server_that_does_not_know_the_credential() {
        let m = ScramMechanism::Sha256;
        let mut client = ScramClientExchange::new(m, "broker", "secret");
        let client_first =
            String::from_utf8(client.respond(None).expect("first").expect("some")).expect("utf-8");
        let nonce = client_first.rsplit_once("r=").expect("nonce").1;
        let server_first = format!("r={nonce}server,s={},i=4096", BASE64.encode(b"salt"));
        client
            .respond(Some(server_first.as_bytes()))
            .expect("final")
            .expect("some");
        let forged = format!("v={}", BASE64.encode([0u8; 32]));
        let e = client.respond(Some(forged.as_bytes())).expect_err("forged");
        assert!(e.contains("signature"), "{e}");
        // A nonce that does not extend the client's, and too few iterations, are refused too.
        let mut client = ScramClientExchange::new(m, "broker", "secret");
        client.respond(None).expect("first");
        let e = client
            .respond(Some(b"r=other,s=c2FsdA==,i=4096"))
            .expect_err("nonce");
        assert!(e.contains("nonce"), "{e}");
        let mut client = ScramClientExchange::new(m, "broker", "secret");
        let first =
            String::from_utf8(client.respond(None).expect("first").expect("some")).expect("utf-8");
        let nonce = first.rsplit_once("r=").expect("nonce").1;
        let e = client
            .respond(Some(format!("r={nonce}x,s=c2FsdA==,i=1").as_bytes()))
            .expect_err("iterations");
        assert!(e.contains("iterations"), "{e}");
    }

    #[test]
    fn scram_accepts_the_password_and_refuses_the_rest_alike() {
        for m in ScramMechanism::ALL {
            let known = credential(m, "alice-secret");
            exchange(m, "alice", "alice-secret", &known).expect("alice");
            let wrong = exchange(m, "alice", "wrong", &known).expect_err("wrong password");
            let unknown = exchange(m, "mallory", "alice-secret", &known).expect_err("unknown");
            assert_eq!(wrong, unknown);
            assert!(wrong.contains(m.name()), "{wrong}");
        }
    }

    #[test]
    fn malformed_and_unsupported_first_messages_are_refused() {
        let lookup = |_: &str, _: ScramMechanism| None;
        for bad in [
            &b""[..],
            b"n,,",
            b"p=tls-unique,,n=a,r=x",
            b"n,,r=x,n=a",
            b"n,,n=a",
            b"n,,n=a,r=",
            b"n,,n=a=2,r=x",
            b"n,a=bob,n=alice,r=x",
            b"n,,n=a,r=x,tokenauth=true",
            b"\xff,,n=a,r=x",
        ] {
            assert!(
                first(ScramMechanism::Sha256, bad, &lookup).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Extensions other than tokenauth are ignored; y is accepted; saslname decoding.
        let (_, pending) =
            first(ScramMechanism::Sha256, b"y,,n=a=2Cb=3D,r=x,ext=1", &lookup).expect("ok");
        assert_eq!(pending.user, "a,b=");
        assert!(finish(&pending, b"c=eSws,r=nope,p=AAAA").is_err());
    }

    #[test]
    fn a_plain_password_is_checked_against_the_stored_keys() {
        for m in ScramMechanism::ALL {
            let known = credential(m, "alice-secret");
            assert!(verify_password(m, "alice", "alice-secret", Some(&known)));
            assert!(!verify_password(m, "alice", "alice-secret!", Some(&known)));
            assert!(!verify_password(m, "alice", "", Some(&known)));
            assert!(!verify_password(m, "mallory", "alice-secret", None));
            // A credential of the other mechanism, or with iterations out of bounds, never matches.
            let other = ScramMechanism::ALL
                .into_iter()
                .find(|o| *o != m)
                .expect("two");
            assert!(!verify_password(
                other,
                "alice",
                "alice-secret",
                Some(&known)
            ));
            let mut unbounded = known.clone();
            unbounded.iterations = SCRAM_ITERATIONS_MAX + 1;
            assert!(!verify_password(
                m,
                "alice",
                "alice-secret",
                Some(&unbounded)
            ));
        }
    }
}
