//! SASL/SCRAM: credentials created and removed with AlterUserScramCredentials (the salted password
//! on the wire, as the admin client sends it), listed with DescribeUserScramCredentials, kept in
//! the metadata log across a restart, and checked by a SCRAM-SHA-256 / SHA-512 exchange written
//! here from RFC 5802 (librdkafka as built for these tests has no SCRAM: it needs OpenSSL; the real
//! clients run in `compat-tests`). A wrong password and an unknown user fail alike at the proof.

mod common;
#[path = "common/scram.rs"]
mod scram_credentials;

use std::net::SocketAddr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use common::*;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use ring::{digest, hmac, pbkdf2};
use scram_credentials::{salted_password, upsertion, SHA256, SHA512};

fn algorithms(
    mechanism: i8,
) -> (
    pbkdf2::Algorithm,
    hmac::Algorithm,
    &'static digest::Algorithm,
) {
    match mechanism {
        SHA256 => (
            pbkdf2::PBKDF2_HMAC_SHA256,
            hmac::HMAC_SHA256,
            &digest::SHA256,
        ),
        _ => (
            pbkdf2::PBKDF2_HMAC_SHA512,
            hmac::HMAC_SHA512,
            &digest::SHA512,
        ),
    }
}

fn mac(mechanism: i8, key: &[u8], data: &[u8]) -> Vec<u8> {
    let (_, alg, _) = algorithms(mechanism);
    hmac::sign(&hmac::Key::new(alg, key), data)
        .as_ref()
        .to_vec()
}

fn mechanism_name(mechanism: i8) -> &'static str {
    if mechanism == SHA256 {
        "SCRAM-SHA-256"
    } else {
        "SCRAM-SHA-512"
    }
}

/// A SCRAM exchange on a new connection: Ok(()) once the server proved it knows the key too, or
/// the server's error (code, message).
async fn scram_login(
    addr: SocketAddr,
    mechanism: i8,
    user: &str,
    password: &str,
) -> Result<RawConn, (i16, String)> {
    let mut conn = RawConn::connect(addr).await;
    let handshake = conn
        .request(
            1,
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(mechanism_name(mechanism))),
        )
        .await;
    assert_eq!(
        handshake.error_code,
        0,
        "handshake {}",
        mechanism_name(mechanism)
    );
    let client_first_bare = format!("n={user},r=fyko+d2lbbFgONRv9qkxdawL");
    let first = conn
        .request(
            2,
            &SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from(format!("n,,{client_first_bare}"))),
        )
        .await;
    if first.error_code != 0 {
        return Err((
            first.error_code,
            first
                .error_message
                .map(|m| m.to_string())
                .unwrap_or_default(),
        ));
    }
    let server_first = String::from_utf8(first.auth_bytes.to_vec()).expect("utf-8");
    let fields: Vec<&str> = server_first.split(',').collect();
    let nonce = fields[0].strip_prefix("r=").expect("nonce");
    let salt = BASE64
        .decode(fields[1].strip_prefix("s=").expect("salt"))
        .expect("base64 salt");
    let iterations: u32 = fields[2]
        .strip_prefix("i=")
        .expect("iterations")
        .parse()
        .expect("number");
    let salted = salted_password(mechanism, password, &salt, iterations);
    let client_key = mac(mechanism, &salted, b"Client Key");
    let (_, _, digest_alg) = algorithms(mechanism);
    let stored_key = digest::digest(digest_alg, &client_key).as_ref().to_vec();
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = mac(mechanism, &stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let last = conn
        .request(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(format!(
                "{without_proof},p={}",
                BASE64.encode(proof)
            ))),
        )
        .await;
    if last.error_code != 0 {
        return Err((
            last.error_code,
            last.error_message
                .map(|m| m.to_string())
                .unwrap_or_default(),
        ));
    }
    let server_key = mac(mechanism, &salted, b"Server Key");
    let expected = format!(
        "v={}",
        BASE64.encode(mac(mechanism, &server_key, auth_message.as_bytes()))
    );
    assert_eq!(
        String::from_utf8(last.auth_bytes.to_vec()).expect("utf-8"),
        expected,
        "the server's signature proves it holds the credential"
    );
    Ok(conn)
}

async fn describe(
    conn: &mut RawConn,
    users: Option<&[&str]>,
) -> Vec<(String, i16, Vec<(i8, i32)>)> {
    let request = DescribeUserScramCredentialsRequest::default().with_users(users.map(|u| {
        u.iter()
            .map(|n| UserName::default().with_name(StrBytes::from_string(n.to_string())))
            .collect()
    }));
    let response = conn.request(0, &request).await;
    assert_eq!(response.error_code, 0);
    response
        .results
        .into_iter()
        .map(|r| {
            (
                r.user.to_string(),
                r.error_code,
                r.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            )
        })
        .collect()
}

#[tokio::test]
async fn scram_users_are_managed_through_the_admin_apis_and_survive_a_restart() {
    let mut broker = Broker::start_with(&[
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
    ]);
    let mut admin = RawConn::connect(broker.addr()).await;
    // Nobody yet: everyone fails the same way.
    let sasl = broker.listener_addr("SASL_PLAINTEXT");
    let nobody = scram_login(sasl, SHA256, "alice", "alice-secret")
        .await
        .err()
        .expect("no users yet");
    assert_eq!(nobody.0, 58);

    let response = admin
        .request(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                upsertion("alice", SHA256, "alice-secret", 4096),
                upsertion("bob", SHA512, "bob-secret", 8192),
                upsertion("carol", SHA256, "carol-secret", 100),
            ]),
        )
        .await;
    let results: Vec<(String, i16)> = response
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(
        results,
        [("alice".into(), 0), ("bob".into(), 0), ("carol".into(), 93)],
        "too few iterations: UNACCEPTABLE_CREDENTIAL"
    );
    assert_eq!(
        describe(&mut admin, None).await,
        [
            ("alice".to_string(), 0, vec![(SHA256, 4096)]),
            ("bob".to_string(), 0, vec![(SHA512, 8192)]),
        ]
    );
    let named = describe(&mut admin, Some(&["bob", "zed"])).await;
    assert_eq!(named[0].1, 0);
    assert_eq!(named[1].1, 91, "an unknown user: RESOURCE_NOT_FOUND");

    // SCRAM logins: the right password, a wrong one, an unknown user, the wrong mechanism.
    let mut alice = scram_login(sasl, SHA256, "alice", "alice-secret")
        .await
        .expect("alice logs in");
    assert_eq!(
        metadata(&mut alice, Some(&[]), false).await.brokers[0].port,
        i32::from(sasl.port())
    );
    scram_login(sasl, SHA512, "bob", "bob-secret")
        .await
        .expect("bob logs in");
    let wrong = scram_login(sasl, SHA256, "alice", "bob-secret")
        .await
        .err()
        .expect("wrong password");
    let unknown = scram_login(sasl, SHA256, "mallory", "alice-secret")
        .await
        .err()
        .expect("unknown user");
    let other_mechanism = scram_login(sasl, SHA512, "alice", "alice-secret")
        .await
        .err()
        .expect("alice has no SHA-512 credential");
    assert_eq!(wrong.0, 58);
    assert_eq!(
        wrong, unknown,
        "a wrong password and an unknown user read the same"
    );
    assert_eq!(other_mechanism.0, 58);

    // Deleting a credential that does not exist: RESOURCE_NOT_FOUND; deleting alice's: gone.
    let response = admin
        .request(
            0,
            &AlterUserScramCredentialsRequest::default().with_deletions(vec![
                ScramCredentialDeletion::default()
                    .with_name(StrBytes::from_static_str("alice"))
                    .with_mechanism(SHA256),
                ScramCredentialDeletion::default()
                    .with_name(StrBytes::from_static_str("bob"))
                    .with_mechanism(SHA256),
            ]),
        )
        .await;
    let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [0, 91]);
    assert_eq!(
        scram_login(sasl, SHA256, "alice", "alice-secret")
            .await
            .err()
            .map(|e| e.0),
        Some(58),
        "a deleted credential no longer authenticates"
    );

    // The credentials are in the metadata log: bob's survives a restart.
    broker.terminate();
    broker.restart_on_new_port();
    let sasl = broker.listener_addr("SASL_PLAINTEXT");
    scram_login(sasl, SHA512, "bob", "bob-secret")
        .await
        .expect("bob logs in after the restart");
    let mut admin = RawConn::connect(broker.addr()).await;
    assert_eq!(
        describe(&mut admin, None).await,
        [("bob".to_string(), 0, vec![(SHA512, 8192)])]
    );
    // No quotas are set: none to describe, and a bad filter is refused as Kafka refuses it.
    let quotas = admin
        .request(
            1,
            &DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
                .with_entity_type(StrBytes::from_static_str("user"))
                .with_match_type(2)
                .with_match(None)]),
        )
        .await;
    assert_eq!(
        (quotas.error_code, quotas.entries.map(|e| e.len())),
        (0, Some(0))
    );
    let quotas = admin
        .request(
            1,
            &DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
                .with_entity_type(StrBytes::from_static_str("team"))
                .with_match_type(2)
                .with_match(None)]),
        )
        .await;
    // Kafka 4.1.1: UNSUPPORTED_VERSION "Unsupported entity type team".
    assert_eq!(quotas.error_code, 35);
}
