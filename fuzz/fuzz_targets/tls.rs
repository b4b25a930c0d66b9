//! Fuzz target: TLS on a listener. Mode 0 (first byte 0): the rest, split at 0xFF bytes, is the
//! PEM text of `ssl.keystore.certificate.chain`, `ssl.keystore.key` and
//! `ssl.truststore.certificates`, built by `millrace_frontend::tls::TlsSettings` as at start-up
//! (with `ssl.client.auth=requested`). Otherwise the input is what a client sends to a TLS
//! listener: fed to a rustls server connection configured as the broker configures one, with its
//! answers drained. Checks: no panic; errors are results.

#![no_main]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use millrace_cluster::BrokerConfig;
use millrace_frontend::tls::TlsSettings;

fn config(pairs: &[(&str, &str)]) -> Option<BrokerConfig> {
    let layer: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    BrokerConfig::from_layers([&layer]).ok()
}

/// An SSL listener with inline PEM keystore and truststore, client certificates requested.
fn pem_config(chain: &str, key: &str, trust: &str) -> Option<BrokerConfig> {
    config(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", chain),
        ("ssl.keystore.key", key),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.certificates", trust),
        ("ssl.client.auth", "requested"),
    ])
}

/// The server configuration: a certificate made once, client certificates requested.
fn server() -> Arc<rustls::ServerConfig> {
    static SERVER: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let ca_key = rcgen::KeyPair::generate().expect("key");
            let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca = ca.self_signed(&ca_key).expect("ca");
            let key = rcgen::KeyPair::generate().expect("key");
            let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
                .expect("params")
                .signed_by(&key, &ca, &ca_key)
                .expect("cert");
            let (chain, key, trust) = (cert.pem(), key.serialize_pem(), ca.pem());
            let c = pem_config(&chain, &key, &trust).expect("config");
            Arc::new(
                TlsSettings::from_config(&c, "SSL")
                    .and_then(|s| s.build())
                    .expect("TLS settings"),
            )
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    if let Some((0, rest)) = data.split_first() {
        let mut parts = rest.split(|b| *b == 0xFF).map(String::from_utf8_lossy);
        let chain = parts.next().unwrap_or_default();
        let key = parts.next().unwrap_or_default();
        let trust = parts.next().unwrap_or_default();
        if let Some(c) = pem_config(&chain, &key, &trust) {
            let _ = TlsSettings::from_config(&c, "SSL").and_then(|s| s.build());
        }
        return;
    }
    let Ok(mut connection) = rustls::ServerConnection::new(server()) else {
        return;
    };
    let mut input = data;
    let mut sink = Vec::new();
    while !input.is_empty() {
        match connection.read_tls(&mut input) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if connection.process_new_packets().is_err() {
            let _ = connection.write_tls(&mut sink);
            break;
        }
        while connection.wants_write() {
            if connection.write_tls(&mut sink).is_err() {
                break;
            }
        }
        sink.clear();
    }
});
