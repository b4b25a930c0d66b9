//! Fuzz target: the SASL authenticator of a connection (`millrace_frontend::sasl`) driven by an
//! arbitrary sequence of SaslHandshake and SaslAuthenticate steps: PLAIN and SCRAM-SHA-256/512
//! tokens, v0 (bare tokens) and v1, re-authentication, session expiry. Checks: no panic, and the
//! invariants a connection relies on — nothing is admitted before an authentication succeeded,
//! and a principal never changes once set.
//!
//! Input: a list of steps, each `op: u8, len: u8, token: [u8; len]` (a short tail is the token).
//! `op % 4`: 0 handshake (mechanism = the token as text; bit 2 = v0), 1 and 2 authenticate,
//! 3 a request arriving `token.len() * 100` ms later (the session may have ended).

#![no_main]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use millrace_cluster::scram::{ScramCredential, ScramMechanism};
use millrace_cluster::BrokerConfig;
use millrace_frontend::sasl::{Authenticator, SaslSettings, Step};

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_alice=\"alice-secret\";";

fn settings() -> Arc<SaslSettings> {
    static SETTINGS: OnceLock<Arc<SaslSettings>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            let layer: BTreeMap<String, String> = [
                ("listeners", "PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2"),
                ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
                ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
                ("connections.max.reauth.ms", "1000"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            let config = BrokerConfig::from_layers([&layer]).expect("config");
            Arc::new(SaslSettings::from_config(&config, "SASL_PLAINTEXT").expect("settings"))
        })
        .clone()
}

/// alice's credential for both SCRAM mechanisms (keys from a fixed "salted password").
fn credential(mechanism: ScramMechanism) -> ScramCredential {
    let (stored_key, server_key) =
        millrace_frontend::scram::derive_keys(mechanism, b"a salted password");
    ScramCredential {
        mechanism,
        salt: b"salt".to_vec(),
        stored_key,
        server_key,
        iterations: 4096,
    }
}

fuzz_target!(|data: &[u8]| {
    let lookup = |user: &str, mechanism: ScramMechanism| (user == "alice").then(|| credential(mechanism));
    let mut auth = Authenticator::new(settings());
    let start = Instant::now();
    let mut now = start;
    let mut principal: Option<String> = None;
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        let (len, tail) = tail.split_first().map_or((0, tail), |(l, t)| (*l as usize, t));
        let (token, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        let step = match op % 4 {
            0 => Some(auth.handshake(&String::from_utf8_lossy(token), op & 4 != 0)),
            1 | 2 => Some(auth.authenticate(token, now, &lookup)),
            _ => {
                now += Duration::from_millis(token.len() as u64 * 100);
                let _ = auth.admits(now);
                None
            }
        };
        let _ = auth.expects_raw_token();
        match (&principal, auth.principal()) {
            (None, None) => assert!(auth.admits(now).is_err(), "admitted before authentication"),
            (Some(before), Some(after)) => assert_eq!(before, &after, "the principal changed"),
            (Some(_), None) => panic!("an authenticated session lost its principal"),
            (None, Some(after)) => principal = Some(after),
        }
        if matches!(step, Some(Step::Refuse { .. })) {
            // The connection closes on any refusal.
            return;
        }
    }
});
