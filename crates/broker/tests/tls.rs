//! TLS listeners: a broker with PLAINTEXT, SSL and MTLS (SSL with `ssl.client.auth=required`)
//! listeners, spoken to over rustls. Metadata answers in the client's own listener's addresses;
//! fetched segment bytes arrive intact over TLS; clients that fail the handshake are refused
//! without affecting anyone else; a replaced keystore serves new connections without a restart;
//! an unusable keystore stops the broker at start-up naming the key; with the authorizer on, an
//! mTLS client's principal is its certificate's subject through `ssl.principal.mapping.rules`. The same listeners are
//! exercised with real clients (confluent-kafka, kcat, the Java client, franz-go) in
//! `compat-tests`.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FetchRequest, FindCoordinatorRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Longest wait for the broker to pick up a replaced keystore (it checks every second).
const RELOAD_WITHIN: Duration = Duration::from_secs(15);

/// A certificate and its key, as PEM and as DER.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    cert: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Leaf {
    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key_der.clone().into())
    }
}

struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca { cert, key }
    }

    fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// A certificate for `127.0.0.1` and `localhost` (server) or a client named `cn`.
    fn issue(&self, cn: &str, server: bool) -> Leaf {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let sans = if server {
            vec!["localhost".to_string(), "127.0.0.1".to_string()]
        } else {
            Vec::new()
        };
        let mut params = rcgen::CertificateParams::new(sans).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
}

/// The files of a TLS broker.
struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
    server: Leaf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("pki dir");
        let ca = Ca::new("millrace test CA");
        let server = ca.issue("broker", true);
        let pki = Pki { dir, ca, server };
        std::fs::write(pki.ca_path(), pki.ca.cert.pem()).expect("write CA");
        pki.write_keystore(&pki.server);
        pki
    }

    fn keystore_path(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Writes chain + key to a staging file and renames it over the keystore (an atomic swap).
    fn write_keystore(&self, leaf: &Leaf) {
        let staged = self.dir.path().join("server.pem.new");
        std::fs::write(&staged, format!("{}{}", leaf.cert_pem, leaf.key_pem)).expect("write");
        std::fs::rename(&staged, self.keystore_path()).expect("rename keystore");
    }

    fn settings(&self) -> Vec<String> {
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        vec![
            "listeners=SSL://127.0.0.1:0,MTLS://127.0.0.1:0".to_string(),
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL".to_string(),
            "ssl.keystore.type=PEM".to_string(),
            format!("ssl.keystore.location={}", path(&self.keystore_path())),
            "ssl.truststore.type=PEM".to_string(),
            format!("ssl.truststore.location={}", path(&self.ca_path())),
            "listener.name.mtls.ssl.client.auth=required".to_string(),
        ]
    }

    fn start_broker(&self) -> Broker {
        let settings = self.settings();
        let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
        Broker::start_with(&refs)
    }
}

/// A TLS session to `addr` trusting `roots`, with a client certificate when given.
async fn tls_connect(
    addr: SocketAddr,
    roots: &[CertificateDer<'static>],
    client: Option<&Leaf>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).expect("root");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(store);
    let config = match client {
        Some(leaf) => builder
            .with_client_auth_cert(vec![leaf.cert.clone()], leaf.key())
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").expect("server name");
    tokio::time::timeout(
        IO_TIMEOUT,
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::other("TLS handshake timed out"))?
}

async fn tls_conn(
    addr: SocketAddr,
    roots: &[CertificateDer<'static>],
    client: Option<&Leaf>,
) -> RawConn {
    let stream = tls_connect(addr, roots, client)
        .await
        .unwrap_or_else(|e| panic!("TLS connection to {addr}: {e}"));
    RawConn::over(Box::new(stream))
}

/// Asserts that a client with these credentials gets no Kafka answer: the handshake fails, or
/// (TLS 1.3 checks the client's certificate after the client's side is done) the first request
/// finds the connection closed.
async fn assert_handshake_refused(
    addr: SocketAddr,
    roots: &[CertificateDer<'static>],
    client: Option<&Leaf>,
    what: &str,
) {
    let Ok(stream) = tls_connect(addr, roots, client).await else {
        return;
    };
    let mut conn = RawConn::over(Box::new(stream));
    let correlation_id = conn.next_correlation_id();
    let request = frame(3, correlation_id, &api_versions_request());
    // The write itself may fail once the broker's alert has arrived.
    let _ = tokio::time::timeout(
        IO_TIMEOUT,
        tokio::io::AsyncWriteExt::write_all(&mut conn.stream, &request),
    )
    .await;
    match conn.read_frame(IO_TIMEOUT).await {
        Err(ReadEnd::Closed { partial: 0 }) => {}
        other => panic!("{what}: expected the connection closed without an answer, got {other:?}"),
    }
}

/// The broker's node in a Metadata answer: (host, port).
async fn metadata_broker(conn: &mut RawConn) -> (String, i32) {
    let response = metadata(conn, Some(&[]), false).await;
    assert_eq!(
        response.brokers.len(),
        1,
        "one broker: {:?}",
        response.brokers
    );
    let b = &response.brokers[0];
    (b.host.to_string(), b.port)
}

/// Values of `count` records of `size` bytes each.
fn big_records(count: usize, size: usize) -> Vec<kafka_protocol::records::Record> {
    (0..count)
        .map(|i| {
            let value = vec![b'a' + (i % 26) as u8; size];
            record(Some(format!("k{i}").as_bytes()), Some(&value), now_ms())
        })
        .collect()
}

fn fetch_all(topic: &str) -> FetchRequest {
    fetch_request(topic, 0, 0, 0, 1)
}

#[tokio::test]
async fn ssl_listeners_answer_in_their_own_addresses_and_carry_fetched_segments_intact() {
    let pki = Pki::new();
    let broker = pki.start_broker();
    let ssl = broker.listener_addr("SSL");
    let mtls = broker.listener_addr("MTLS");
    assert_ne!(ssl.port(), broker.addr().port());
    let roots = [pki.ca.der()];

    let mut secure = tls_conn(ssl, &roots, None).await;
    let versions = api_versions(&mut secure, 3).await;
    assert_eq!(versions.error_code, 0);
    // Each client is told the address of the listener it came in on.
    assert_eq!(
        metadata_broker(&mut secure).await,
        ("127.0.0.1".to_string(), i32::from(ssl.port()))
    );
    let mut plain = RawConn::connect(broker.addr()).await;
    assert_eq!(
        metadata_broker(&mut plain).await,
        ("127.0.0.1".to_string(), i32::from(broker.addr().port()))
    );
    let client = pki.ca.issue("alice", false);
    let mut mutual = tls_conn(mtls, &roots, Some(&client)).await;
    assert_eq!(
        metadata_broker(&mut mutual).await,
        ("127.0.0.1".to_string(), i32::from(mtls.port()))
    );
    // FindCoordinator too (the offsets topic is created on the first ask; poll for its leader).
    let deadline = Instant::now() + IO_TIMEOUT * 3;
    loop {
        let response = secure
            .request(
                3,
                &FindCoordinatorRequest::default()
                    .with_key(StrBytes::from_static_str("tls-group"))
                    .with_key_type(0),
            )
            .await;
        if response.error_code == 0 {
            assert_eq!(
                response.port,
                i32::from(ssl.port()),
                "coordinator on the SSL listener"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no coordinator: {response:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // More than one TLS read piece (256 KiB) of segment bytes, fetched over TLS and over
    // plaintext (sendfile): the same bytes.
    let topic = unique_topic("tls");
    ensure_topics(broker.addr(), &[&topic]).await;
    for _ in 0..3 {
        produce_batch(&mut plain, &topic, 0, encode_batch(&big_records(100, 1500))).await;
    }
    let over_tls = secure.request(12, &fetch_all(&topic)).await;
    let over_tcp = plain.request(12, &fetch_all(&topic)).await;
    let tls_records: Option<Bytes> = only_partition(&over_tls).records.clone();
    let tcp_records: Option<Bytes> = only_partition(&over_tcp).records.clone();
    let len = tls_records.as_ref().map_or(0, Bytes::len);
    assert!(len > 256 * 1024 + 100_000, "fetched {len} bytes");
    assert_eq!(
        tls_records, tcp_records,
        "TLS and sendfile deliver the same bytes"
    );
    assert_eq!(decode_records(&tls_records).len(), 300);
}

#[tokio::test]
async fn clients_failing_the_handshake_are_refused_and_nobody_else_is_affected() {
    let pki = Pki::new();
    let broker = pki.start_broker();
    let ssl = broker.listener_addr("SSL");
    let mtls = broker.listener_addr("MTLS");
    let roots = [pki.ca.der()];
    let mut plain = RawConn::connect(broker.addr()).await;
    let mut secure = tls_conn(ssl, &roots, None).await;

    // A plaintext Kafka client on the TLS port: closed, no answer.
    let mut wrong_port = RawConn::connect(ssl).await;
    let correlation_id = wrong_port.next_correlation_id();
    wrong_port
        .write_all(&frame(3, correlation_id, &api_versions_request()))
        .await;
    // At most a TLS alert record (content type 21) comes back before the close.
    let mut received = Vec::new();
    tokio::time::timeout(
        IO_TIMEOUT,
        tokio::io::AsyncReadExt::read_to_end(&mut wrong_port.stream, &mut received),
    )
    .await
    .expect("the SSL listener did not close a plaintext client's connection")
    .ok();
    assert!(
        received.is_empty() || (received[0] == 21 && received.len() <= 16),
        "a plaintext client got {received:?}, not a TLS alert and a close"
    );
    // A client that does not trust the broker's CA.
    let other = Ca::new("another CA");
    assert!(
        tls_connect(ssl, &[other.der()], None).await.is_err(),
        "a client must not accept a certificate from a CA it does not trust"
    );
    // MTLS: no client certificate; one from a CA the broker does not trust.
    assert_handshake_refused(mtls, &roots, None, "no client certificate").await;
    let stranger = other.issue("mallory", false);
    assert_handshake_refused(
        mtls,
        &roots,
        Some(&stranger),
        "untrusted client certificate",
    )
    .await;
    // A trusted client certificate is served.
    let alice = pki.ca.issue("alice", false);
    let mut mutual = tls_conn(mtls, &roots, Some(&alice)).await;
    assert_eq!(api_versions(&mut mutual, 3).await.error_code, 0);

    // The connections open all along still work, and new ones are accepted.
    assert_eq!(api_versions(&mut plain, 3).await.error_code, 0);
    assert_eq!(api_versions(&mut secure, 3).await.error_code, 0);
    assert_broker_answers(broker.addr(), "PLAINTEXT after the refusals").await;
    let mut again = tls_conn(ssl, &roots, None).await;
    assert_eq!(api_versions(&mut again, 3).await.error_code, 0);
}

/// Metadata for one topic by name: its error code.
async fn topic_error(conn: &mut RawConn, topic: &str) -> i16 {
    let request =
        MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]));
    let response = conn.request(9, &request).await;
    response.topics[0].error_code
}

#[tokio::test]
async fn mtls_principals_come_from_the_subject_through_the_mapping_rules() {
    let pki = Pki::new();
    let mut settings = pki.settings();
    settings.extend([
        "authorizer.class.name=millrace".to_string(),
        // PLAINTEXT (User:ANONYMOUS) administers; MTLS clients are who their certificate says.
        "super.users=User:ANONYMOUS".to_string(),
        "listener.name.mtls.ssl.principal.mapping.rules=RULE:^CN=([A-Za-z]+)$/$1/L".to_string(),
        "auto.create.topics.enable=false".to_string(),
    ]);
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let broker = Broker::start_with(&refs);
    let mtls = broker.listener_addr("MTLS");
    let roots = [pki.ca.der()];
    let topic = unique_topic("mtls-acl");
    let mut admin = RawConn::connect(broker.addr()).await;
    let created = admin
        .request(
            7,
            &kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
                kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.clone())))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ]),
        )
        .await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");

    // CN=Alice is User:alice (the rule lower-cases it): refused until an ACL names User:alice.
    let alice = pki.ca.issue("Alice", false);
    let mut conn = tls_conn(mtls, &roots, Some(&alice)).await;
    assert_eq!(topic_error(&mut conn, &topic).await, 29);
    let grant = kafka_protocol::messages::CreateAclsRequest::default().with_creations(vec![
        kafka_protocol::messages::create_acls_request::AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.clone()))
            .with_resource_pattern_type(3)
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(8)
            .with_permission_type(3),
    ]);
    assert_eq!(admin.request(3, &grant).await.results[0].error_code, 0);
    assert_eq!(topic_error(&mut conn, &topic).await, 0);

    // A subject no rule maps (no DEFAULT rule here) is refused: the connection closes.
    let unmapped = pki.ca.issue("bob-1", false);
    assert_handshake_refused(mtls, &roots, Some(&unmapped), "a subject no rule maps").await;
    // Alice's connection is unaffected.
    assert_eq!(topic_error(&mut conn, &topic).await, 0);
}

#[tokio::test]
async fn a_replaced_keystore_serves_new_connections_without_a_restart() {
    let pki = Pki::new();
    let broker = pki.start_broker();
    let ssl = broker.listener_addr("SSL");
    let roots = [pki.ca.der()];
    let first = tls_connect(ssl, &roots, None).await.expect("TLS");
    let served = |s: &tokio_rustls::client::TlsStream<TcpStream>| {
        s.get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first().cloned())
    };
    assert_eq!(served(&first), Some(pki.server.cert.clone()));

    let renewed = pki.ca.issue("broker renewed", true);
    pki.write_keystore(&renewed);
    let deadline = Instant::now() + RELOAD_WITHIN;
    loop {
        let stream = tls_connect(ssl, &roots, None).await.expect("TLS");
        if served(&stream) == Some(renewed.cert.clone()) {
            let mut conn = RawConn::over(Box::new(stream));
            assert_eq!(api_versions(&mut conn, 3).await.error_code, 0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broker still serves the old certificate {RELOAD_WITHIN:?} after the keystore was replaced"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The connection made before the change keeps its session.
    let mut old = RawConn::over(Box::new(first));
    assert_eq!(api_versions(&mut old, 3).await.error_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_broker_of_a_cluster_is_announced_in_the_clients_listener() {
    let pki = Pki::new();
    let settings = pki.settings();
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let cluster = cluster::TestCluster::start(3, &refs);
    let roots = [pki.ca.der()];
    let expected = |name: &str| -> Vec<(i32, i32)> {
        (1..=3)
            .map(|id| {
                let addr = if name == "PLAINTEXT" {
                    cluster.addr(id)
                } else {
                    cluster.listener_addr(id, name)
                };
                (id, i32::from(addr.port()))
            })
            .collect()
    };
    let brokers = |md: kafka_protocol::messages::MetadataResponse| -> Vec<(i32, i32)> {
        let mut b: Vec<(i32, i32)> = md.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
        b.sort_unstable();
        b
    };
    // Every node registered every listener: a client of node 2's SSL listener is told the SSL
    // addresses of all three (polled: registrations reach node 2's image in their own time).
    let deadline = Instant::now() + IO_TIMEOUT * 3;
    let mut secure = tls_conn(cluster.listener_addr(2, "SSL"), &roots, None).await;
    loop {
        let seen = brokers(metadata(&mut secure, Some(&[]), false).await);
        if seen == expected("SSL") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SSL metadata: {seen:?}, expected {:?}",
            expected("SSL")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let alice = pki.ca.issue("alice", false);
    let mut mutual = tls_conn(cluster.listener_addr(3, "MTLS"), &roots, Some(&alice)).await;
    assert_eq!(
        brokers(metadata(&mut mutual, Some(&[]), false).await),
        expected("MTLS")
    );
    let mut plain = RawConn::connect(cluster.addr(1)).await;
    assert_eq!(
        brokers(metadata(&mut plain, Some(&[]), false).await),
        expected("PLAINTEXT")
    );
}

#[test]
fn an_unusable_keystore_stops_the_broker_at_start_up_naming_the_key() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = format!(
        "ssl.keystore.location={}",
        dir.path().join("missing.pem").display()
    );
    let only_cert = dir.path().join("cert.pem");
    std::fs::write(&only_cert, Ca::new("ca").issue("broker", true).cert_pem).expect("write");
    let only_cert = format!("ssl.keystore.location={}", only_cert.display());
    for (settings, want) in [
        (vec![], &["SSL", "ssl.keystore.type", "JKS"][..]),
        (
            vec!["ssl.keystore.type=PEM", missing.as_str()],
            &["SSL", "ssl.keystore.location", "missing.pem"][..],
        ),
        (
            vec!["ssl.keystore.type=PEM", only_cert.as_str()],
            &["SSL", "ssl.keystore.location", "private key"][..],
        ),
    ] {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--set",
            "listeners=SSL://127.0.0.1:0",
        ];
        for s in settings {
            args.extend(["--set", s]);
        }
        assert_refused(&args, want);
    }
}
