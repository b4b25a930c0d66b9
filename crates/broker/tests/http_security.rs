//! The HTTP listener's transport and security on a real broker: TLS with the broker's
//! certificates (HTTP/1.1 and HTTP/2 chosen by ALPN), HTTP Basic against the listener's SASL/PLAIN
//! users and the SCRAM users created over the Kafka protocol, the mTLS principal, the operator's
//! routes open without credentials, 413 for an oversized body, HTTP/2's stream bound, h2c on a
//! plaintext listener, and an unusable TLS setting refused at start-up. What a handler sees of
//! the principal (and the listener's body bounds) is tested with a test router in
//! crates/rest/tests/server.rs; the ACL check against an HTTP caller's principal needs an API
//! route and lives with those routes' tests.

mod common;
#[path = "common/scram.rs"]
mod scram_credentials;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use common::*;
use kafka_protocol::messages::AlterUserScramCredentialsRequest;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Longest wait for one HTTP answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);
/// Longest wait for a SCRAM credential to reach the broker's metadata image.
const CREDENTIAL_WITHIN: Duration = Duration::from_secs(15);

/// A CA, the broker's certificate and a client's (CN=Carol), written where the broker reads them.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertificateDer<'static>,
    client: (CertificateDer<'static>, PrivateKeyDer<'static>),
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("pki dir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let server_key = rcgen::KeyPair::generate().expect("key");
        let mut server =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("params");
        server.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let server = server
            .signed_by(&server_key, &ca_cert, &ca_key)
            .expect("server");
        let client_key = rcgen::KeyPair::generate().expect("key");
        let mut client = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        client.distinguished_name = rcgen::DistinguishedName::new();
        client
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Carol");
        client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client = client
            .signed_by(&client_key, &ca_cert, &ca_key)
            .expect("client");
        let pki = Pki {
            ca: ca_cert.der().clone(),
            client: (
                client.der().clone(),
                PrivateKeyDer::Pkcs8(client_key.serialize_der().into()),
            ),
            dir,
        };
        std::fs::write(pki.path("ca.pem"), ca_cert.pem()).expect("write CA");
        std::fs::write(
            pki.path("server.pem"),
            format!("{}{}", server.pem(), server_key.serialize_pem()),
        )
        .expect("write keystore");
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn file(&self, name: &str) -> String {
        self.path(name).to_str().expect("utf-8 path").to_string()
    }
}

/// A broker with the HTTP listener on TLS and Basic authentication; its HTTP address.
fn secure_broker(pki: &Pki) -> (Broker, SocketAddr) {
    let port = free_port();
    let settings = [
        format!("millrace.http.listen=127.0.0.1:{port}"),
        "millrace.http.listener.security.protocol=SSL".to_string(),
        "millrace.http.authentication=basic".to_string(),
        "ssl.keystore.type=PEM".to_string(),
        format!("ssl.keystore.location={}", pki.file("server.pem")),
        "ssl.truststore.type=PEM".to_string(),
        format!("ssl.truststore.location={}", pki.file("ca.pem")),
        "listener.name.http.ssl.client.auth=requested".to_string(),
        "listener.name.http.ssl.principal.mapping.rules=RULE:^CN=(.*)$/$1/L".to_string(),
        r#"listener.name.http.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";"#.to_string(),
        "millrace.rest.request.bytes.max=1024".to_string(),
    ];
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let broker = Broker::start_with(&refs);
    (
        broker,
        format!("127.0.0.1:{port}").parse().expect("address"),
    )
}

async fn tls(
    addr: SocketAddr,
    pki: &Pki,
    client_cert: bool,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca.clone()).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let mut config = if client_cert {
        builder
            .with_client_auth_cert(vec![pki.client.0.clone()], pki.client.1.clone_key())
            .expect("client cert")
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tokio::time::timeout(
        ANSWER_WITHIN,
        TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").expect("name"), tcp),
    )
    .await
    .expect("handshake in time")
    .expect("handshake")
}

/// One HTTP/1.1 exchange (`Connection: close`): (status, head, body).
async fn http1<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    head: &str,
    body: &[u8],
) -> (u16, String, String) {
    let request = format!("{head}\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    io.write_all(request.as_bytes()).await.expect("write");
    io.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    tokio::time::timeout(ANSWER_WITHIN, io.read_to_end(&mut raw))
        .await
        .expect("answer in time")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {encoded}")
}

/// `GET path` over TLS (HTTP/1.1) with `extra` header lines.
async fn tls_get(
    addr: SocketAddr,
    pki: &Pki,
    cert: bool,
    path: &str,
    extra: &str,
) -> (u16, String, String) {
    let stream = tls(addr, pki, cert, b"http/1.1").await;
    let head = if extra.is_empty() {
        format!("GET {path} HTTP/1.1")
    } else {
        format!("GET {path} HTTP/1.1\r\n{extra}")
    };
    http1(stream, &head, b"").await
}

/// An answer from the HTTP API proper (not the operator's routes) for a path it does not serve:
/// 404 with Confluent's body, which only an authenticated caller gets.
const PROBE: &str = "/millrace-test-no-such-route";

#[tokio::test]
async fn tls_http1_http2_basic_and_mtls_on_a_real_broker() {
    let pki = Pki::new();
    let (broker, http) = secure_broker(&pki);

    // HTTP/1.1 over TLS: the operator's routes need no credentials; the API does.
    let (status, _, body) = tls_get(http, &pki, false, "/health", "").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, head, body) = tls_get(http, &pki, false, PROBE, "").await;
    assert_eq!(status, 401, "{body}");
    assert!(
        head.contains(r#"www-authenticate: basic realm="millrace""#),
        "{head}"
    );
    assert!(body.contains("40101"), "{body}");

    // PLAIN: the listener's JAAS users.
    let (status, _, body) = tls_get(http, &pki, false, PROBE, &basic("alice", "alice-pw")).await;
    assert_eq!(status, 404, "authenticated, then not found: {body}");
    assert!(body.contains("\"error_code\":404"), "{body}");
    let (status, _, _) = tls_get(http, &pki, false, PROBE, &basic("alice", "wrong")).await;
    assert_eq!(status, 401);

    // SCRAM: a user created over the Kafka protocol authenticates over HTTP once its credential
    // is in the metadata image.
    let mut admin = RawConn::connect(broker.addr()).await;
    let created = admin
        .request(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                scram_credentials::upsertion("bob", scram_credentials::SHA512, "bob-pw", 4096),
            ]),
        )
        .await;
    assert_eq!(created.results[0].error_code, 0);
    let deadline = Instant::now() + CREDENTIAL_WITHIN;
    loop {
        let (status, _, body) = tls_get(http, &pki, false, PROBE, &basic("bob", "bob-pw")).await;
        if status == 404 {
            break;
        }
        assert_eq!(status, 401, "{body}");
        assert!(
            Instant::now() < deadline,
            "bob's SCRAM credential never worked over HTTP"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, _) = tls_get(http, &pki, false, PROBE, &basic("bob", "alice-pw")).await;
    assert_eq!(status, 401, "a wrong SCRAM password");

    // mTLS: a verified client certificate counts without a header.
    let (status, _, body) = tls_get(http, &pki, true, PROBE, "").await;
    assert_eq!(
        status, 404,
        "the certificate's principal is authenticated: {body}"
    );

    // 413 with Confluent's body for a body over millrace.rest.request.bytes.max (1024).
    let stream = tls(http, &pki, false, b"http/1.1").await;
    let (status, _, body) = http1(
        stream,
        &format!(
            "POST {PROBE} HTTP/1.1\r\n{}\r\nContent-Length: 4096",
            basic("alice", "alice-pw")
        ),
        &[b'x'; 4096],
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("\"error_code\":413"), "{body}");

    // HTTP/2 by ALPN on the same port, with the stream bound in its SETTINGS; more streams than
    // that on one connection are queued by the client and all answered.
    let stream = tls(http, &pki, true, b"h2").await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (client, connection) = h2::client::handshake(stream).await.expect("h2");
    tokio::spawn(connection);
    assert_eq!(h2_get(&client, "/health").await, 200);
    assert_eq!(client.current_max_send_streams(), 100);
    let mut answers = Vec::new();
    for _ in 0..250 {
        let client = client.clone();
        answers.push(tokio::spawn(async move { h2_get(&client, PROBE).await }));
    }
    for answer in answers {
        assert_eq!(answer.await.expect("task"), 404);
    }
    // An oversized body on HTTP/2: 413 before the body is read.
    let request = hyper::Request::post(format!("https://localhost{PROBE}"))
        .header("content-length", "4096")
        .body(())
        .expect("request");
    let mut ready = client.clone().ready().await.expect("ready");
    let (answer, mut send) = ready.send_request(request, false).expect("send");
    let _ = send.send_data(Bytes::from(vec![b'x'; 4096]), true);
    let answer = tokio::time::timeout(ANSWER_WITHIN, answer)
        .await
        .expect("answer in time")
        .expect("answer");
    assert_eq!(answer.status().as_u16(), 413);

    // Plain HTTP on the TLS port is not served.
    let tcp = TcpStream::connect(http).await.expect("connect");
    let (status, _, _) = http1(tcp, "GET /health HTTP/1.1", b"").await;
    assert_ne!(status, 200);
}

/// `GET path` on an HTTP/2 connection: the status.
async fn h2_get(client: &h2::client::SendRequest<Bytes>, path: &str) -> u16 {
    let request = http_request(path);
    let mut ready = client.clone().ready().await.expect("ready");
    let (answer, _) = ready.send_request(request, true).expect("send");
    let answer = tokio::time::timeout(ANSWER_WITHIN, answer)
        .await
        .expect("answer in time")
        .expect("answer");
    let status = answer.status().as_u16();
    let mut body = answer.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("body");
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    status
}

fn http_request(path: &str) -> hyper::Request<()> {
    hyper::Request::get(format!("https://localhost{path}"))
        .body(())
        .expect("request")
}

#[tokio::test]
async fn plaintext_serves_h2c_and_a_bad_tls_setting_stops_the_broker() {
    let port = free_port();
    let listen = format!("millrace.http.listen=127.0.0.1:{port}");
    let _broker = Broker::start_with(&[&listen]);
    let http: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    // h2c by prior knowledge, anonymous (no authentication configured).
    let tcp = TcpStream::connect(http).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2c");
    tokio::spawn(connection);
    assert_eq!(h2_get(&client, "/health").await, 200);
    assert_eq!(h2_get(&client, PROBE).await, 404);

    // SSL without a keystore: refused before anything starts, naming the key.
    assert_refused(
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--set",
            "millrace.http.listener.security.protocol=SSL",
            "--set",
            "ssl.keystore.type=PEM",
        ],
        &[
            "millrace.http.listener.security.protocol",
            "ssl.keystore.location",
        ],
    );
}
