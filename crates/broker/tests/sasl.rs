//! SASL/PLAIN on SASL_PLAINTEXT listeners: librdkafka (rust-rdkafka) authenticates, produces and
//! consumes; on the wire, nothing but ApiVersions and the SASL exchange is answered before
//! authentication, a wrong password and an unknown user are refused alike and the connection
//! closes, an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM, a session ends after
//! `connections.max.reauth.ms` unless re-authenticated (KIP-368), and a listener without SASL
//! answers the SASL APIs with ILLEGAL_SASL_STATE. The same listeners are exercised with
//! confluent-kafka, kcat, the Java client and franz-go in `compat-tests`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::Consumer;
use rdkafka::producer::FutureRecord;
use rdkafka::Message;

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_alice=\"alice-secret\" user_bob=\"bob-secret\";";
/// Kafka's text for a wrong password and an unknown user alike.
const INVALID: &str = "Authentication failed: Invalid username or password";

fn sasl_broker(extra: &[&str]) -> Broker {
    let jaas = format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}");
    let mut settings = vec![
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        jaas.as_str(),
    ];
    settings.extend_from_slice(extra);
    Broker::start_with(&settings)
}

fn handshake(mechanism: &'static str) -> SaslHandshakeRequest {
    SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism))
}

fn plain_token(user: &str, password: &str) -> SaslAuthenticateRequest {
    SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from(format!("\0{user}\0{password}").into_bytes()))
}

/// A raw connection authenticated as `user`.
async fn authenticated(addr: SocketAddr, user: &str, password: &str) -> (RawConn, i64) {
    let mut conn = RawConn::connect(addr).await;
    let response = conn.request(1, &handshake("PLAIN")).await;
    assert_eq!(response.error_code, 0, "handshake: {response:?}");
    let response = conn.request(2, &plain_token(user, password)).await;
    assert_eq!(response.error_code, 0, "authenticate: {response:?}");
    (conn, response.session_lifetime_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_authenticates_with_plain_and_round_trips() {
    let broker = sasl_broker(&[]);
    let sasl = broker.listener_addr("SASL_PLAINTEXT").to_string();
    let auth = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanisms", "PLAIN"),
        ("sasl.username", "alice"),
        ("sasl.password", "alice-secret"),
    ];
    let topic = unique_topic("sasl");
    let producer = producer_at(&sasl, &auth);
    for i in 0..20 {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::to(&topic).key("k").payload(&value),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce over SASL/PLAIN: {e}"));
    }
    let consumer = consumer_at(&sasl, &auth);
    assign(&consumer, &topic, &[(0, rdkafka::Offset::Beginning)]);
    let got = recv_n(&consumer, 20, Duration::from_secs(20)).await;
    let values: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(values, (0..20).map(|i| format!("v{i}")).collect::<Vec<_>>());
    // Metadata names the SASL listener to its clients.
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("metadata");
    assert_eq!(
        md.brokers()[0].port(),
        i32::from(broker.listener_addr("SASL_PLAINTEXT").port())
    );
    // A wrong password gets nowhere.
    let wrong = consumer_at(
        &sasl,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", "not-it"),
        ],
    );
    assert!(
        wrong
            .fetch_metadata(Some(&topic), Duration::from_secs(3))
            .is_err(),
        "metadata with a wrong password"
    );
}

#[tokio::test]
async fn nothing_but_the_sasl_exchange_is_served_before_authentication() {
    let broker = sasl_broker(&[]);
    let sasl = broker.listener_addr("SASL_PLAINTEXT");

    // ApiVersions is answered, and lists the SASL APIs; Metadata closes the connection.
    let mut conn = RawConn::connect(sasl).await;
    let versions = api_versions(&mut conn, 3).await;
    assert_eq!(versions.error_code, 0);
    for key in [17, 36] {
        assert!(
            versions.api_keys.iter().any(|k| k.api_key == key),
            "ApiVersions lists key {key}"
        );
    }
    let correlation_id = conn.next_correlation_id();
    conn.write_all(&frame(
        12,
        correlation_id,
        &kafka_protocol::messages::MetadataRequest::default(),
    ))
    .await;
    conn.expect_closed(IO_TIMEOUT, "Metadata before authentication")
        .await;

    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut conn = RawConn::connect(sasl).await;
    let response = conn.request(1, &handshake("SCRAM-SHA-256")).await;
    assert_eq!(response.error_code, 33);
    let mechanisms: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(mechanisms, ["PLAIN"]);
    conn.expect_closed(IO_TIMEOUT, "after an unsupported mechanism")
        .await;

    // SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE, closed.
    let mut conn = RawConn::connect(sasl).await;
    let response = conn.request(2, &plain_token("alice", "alice-secret")).await;
    assert_eq!(response.error_code, 34);
    conn.expect_closed(IO_TIMEOUT, "authenticate before handshake")
        .await;

    // A wrong password and an unknown user: the same answer, after the failure delay, closed.
    let mut messages = Vec::new();
    for (user, password) in [("alice", "bob-secret"), ("mallory", "alice-secret")] {
        let mut conn = RawConn::connect(sasl).await;
        assert_eq!(conn.request(1, &handshake("PLAIN")).await.error_code, 0);
        let started = Instant::now();
        let response = conn.request(2, &plain_token(user, password)).await;
        assert!(
            started.elapsed() >= Duration::from_millis(90),
            "a failed authentication is answered after connection.failed.authentication.delay.ms"
        );
        assert_eq!(response.error_code, 58, "{user}");
        messages.push(response.error_message.map(|m| m.to_string()));
        conn.expect_closed(IO_TIMEOUT, "after a failed authentication")
            .await;
    }
    assert_eq!(messages[0].as_deref(), Some(INVALID));
    assert_eq!(messages[0], messages[1]);

    // The right password: everything is served, in the SASL listener's addresses.
    let (mut conn, lifetime) = authenticated(sasl, "bob", "bob-secret").await;
    assert_eq!(
        lifetime, 0,
        "no connections.max.reauth.ms: no session lifetime"
    );
    let md = metadata(&mut conn, Some(&[]), false).await;
    assert_eq!(md.brokers[0].port, i32::from(sasl.port()));

    // The PLAINTEXT listener has no SASL: ILLEGAL_SASL_STATE, and the connection stays.
    let mut plain = RawConn::connect(broker.addr()).await;
    assert_eq!(plain.request(1, &handshake("PLAIN")).await.error_code, 34);
    assert_eq!(
        plain
            .request(2, &plain_token("alice", "alice-secret"))
            .await
            .error_code,
        34
    );
    assert_eq!(api_versions(&mut plain, 3).await.error_code, 0);
}

#[tokio::test]
async fn saslhandshake_v0_takes_the_tokens_in_bare_frames() {
    // librdkafka before 2.11.1 (kcat on Debian) uses PLAIN only with SaslHandshake v0.
    let broker = sasl_broker(&[]);
    let sasl = broker.listener_addr("SASL_PLAINTEXT");
    let mut conn = RawConn::connect(sasl).await;
    assert_eq!(conn.request(0, &handshake("PLAIN")).await.error_code, 0);
    conn.write_all(&length_prefixed(b"\0alice\0alice-secret"))
        .await;
    let answer = conn
        .read_frame(IO_TIMEOUT)
        .await
        .expect("an empty token back");
    assert!(
        answer.is_empty(),
        "PLAIN's server token is empty: {answer:?}"
    );
    let md = metadata(&mut conn, Some(&[]), false).await;
    assert_eq!(md.brokers[0].port, i32::from(sasl.port()));
    // Re-authentication needs v1: a v0 handshake on an authenticated connection is refused.
    let response = conn.request(0, &handshake("PLAIN")).await;
    assert_eq!(response.error_code, 34);
    conn.expect_closed(IO_TIMEOUT, "a v0 re-authentication")
        .await;

    // A wrong password: the connection closes without an answer.
    let mut conn = RawConn::connect(sasl).await;
    assert_eq!(conn.request(0, &handshake("PLAIN")).await.error_code, 0);
    conn.write_all(&length_prefixed(b"\0alice\0bob-secret"))
        .await;
    conn.expect_closed(IO_TIMEOUT, "a wrong password in a bare token")
        .await;
}

#[tokio::test]
async fn frames_before_authentication_are_bounded_by_sasl_server_max_receive_size() {
    let broker = sasl_broker(&[]);
    let sasl = broker.listener_addr("SASL_PLAINTEXT");
    // Kafka's default bound, 512 KiB: a larger frame before authentication closes the connection
    // as soon as its size arrives (nothing is reserved or read for it).
    let mut conn = RawConn::connect(sasl).await;
    conn.write_all(&(600 * 1024_i32).to_be_bytes()).await;
    conn.expect_closed(IO_TIMEOUT, "a 600 KiB frame before authentication")
        .await;
    // The same bound holds between the handshake and the token.
    let mut conn = RawConn::connect(sasl).await;
    assert_eq!(conn.request(1, &handshake("PLAIN")).await.error_code, 0);
    conn.write_all(&(600 * 1024_i32).to_be_bytes()).await;
    conn.expect_closed(IO_TIMEOUT, "a 600 KiB token").await;
    // Once authenticated, socket.request.max.bytes applies: a 700 KiB batch is produced.
    let topic = unique_topic("sasl-big");
    ensure_topics(broker.addr(), &[&topic]).await;
    let (mut conn, _) = authenticated(sasl, "alice", "alice-secret").await;
    let value = vec![b'x'; 700 * 1024];
    let batch = encode_batch(&[record(Some(b"k"), Some(&value), now_ms())]);
    assert!(batch.len() > 600 * 1024);
    produce_batch(&mut conn, &topic, 0, batch).await;
}

#[tokio::test]
async fn a_session_ends_after_connections_max_reauth_ms_unless_renewed() {
    const LIFETIME_MS: u64 = 1500;
    let broker = sasl_broker(&["connections.max.reauth.ms=1500"]);
    let sasl = broker.listener_addr("SASL_PLAINTEXT");

    let (mut lapsing, lifetime) = authenticated(sasl, "alice", "alice-secret").await;
    assert_eq!(lifetime, 1500, "session_lifetime_ms");
    let (mut renewing, _) = authenticated(sasl, "alice", "alice-secret").await;
    assert_eq!(api_versions(&mut lapsing, 3).await.error_code, 0);
    metadata(&mut lapsing, Some(&[]), false).await;

    // Renewed before the end: a new SaslHandshake and SaslAuthenticate on the same connection.
    tokio::time::sleep(Duration::from_millis(LIFETIME_MS * 2 / 3)).await;
    assert_eq!(renewing.request(1, &handshake("PLAIN")).await.error_code, 0);
    let response = renewing
        .request(2, &plain_token("alice", "alice-secret"))
        .await;
    assert_eq!(response.error_code, 0);
    assert_eq!(response.session_lifetime_ms, 1500);
    tokio::time::sleep(Duration::from_millis(LIFETIME_MS * 2 / 3)).await;
    // Past the first session's end: the renewed connection is served, the other is closed.
    metadata(&mut renewing, Some(&[]), false).await;
    let correlation_id = lapsing.next_correlation_id();
    lapsing
        .write_all(&frame(
            12,
            correlation_id,
            &kafka_protocol::messages::MetadataRequest::default(),
        ))
        .await;
    lapsing
        .expect_closed(IO_TIMEOUT, "a request after the session ended")
        .await;

    // Re-authenticating as someone else is refused.
    assert_eq!(renewing.request(1, &handshake("PLAIN")).await.error_code, 0);
    let response = renewing.request(2, &plain_token("bob", "bob-secret")).await;
    assert_eq!(response.error_code, 58);
    renewing
        .expect_closed(IO_TIMEOUT, "re-authentication as another user")
        .await;
}

#[test]
fn unusable_sasl_settings_stop_the_broker_naming_the_key() {
    let sasl = [
        "--listen",
        "127.0.0.1:0",
        "--set",
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
    ];
    // Kafka's default mechanism, GSSAPI, is not served; nor is a PLAIN listener without users.
    assert_refused(&sasl, &["sasl.enabled.mechanisms", "GSSAPI"]);
    let plain = [&sasl[..], &["--set", "sasl.enabled.mechanisms=PLAIN"]].concat();
    assert_refused(
        &plain,
        &["listener.name.sasl_plaintext.plain.sasl.jaas.config"],
    );
    let no_users = [
        &plain[..],
        &[
            "--set",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"a\" password=\"b\";",
        ],
    ]
    .concat();
    assert_refused(&no_users, &["no user_"]);
}
