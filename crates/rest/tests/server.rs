//! The HTTP listener's transport and security over real TCP, with a small test router in place
//! of the HTTP API (so that what the listener hands a handler — the caller's principal, the body —
//! can be seen): TLS with ALPN for HTTP/1.1 and HTTP/2, the mTLS principal, HTTP Basic against
//! PLAIN and SCRAM users, 413/408/429 with Confluent's bodies, HTTP/2 stream and body bounds, idle
//! connections closed. The broker-level checks are in crates/broker/tests/http_security.rs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Router};
use base64::Engine;
use futures::StreamExt;
use millrace_cluster::config_rest::HttpAuthentication;
use millrace_cluster::scram::{ScramCredential, ScramMechanism};
use millrace_cluster::BrokerConfig;
use millrace_frontend::sasl::PlainUsers;
use millrace_frontend::tls::{TlsListener, TlsSettings};
use millrace_rest::auth::{Authentication, CredentialLookup};
use millrace_rest::server::{
    serve_router, ConnectionLimits, HttpSecurity, OpsRoutes, ALPN_PROTOCOLS,
};
use millrace_rest::Caller;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

/// Longest wait for any one answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

// --- the server under test -------------------------------------------------------------------

/// Bytes the `/hold` handlers hold now, and the most they held at once.
#[derive(Default)]
struct Held {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// `/hold`: reads its body frame by frame, counting what it holds, then answers its length.
async fn hold(State(held): State<Arc<Held>>, body: Body) -> Result<String, StatusCode> {
    let mut stream = body.into_data_stream();
    let mut mine = 0usize;
    let mut failed = false;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => {
                mine += chunk.len();
                let now = held.now.fetch_add(chunk.len(), Ordering::SeqCst) + chunk.len();
                held.peak.fetch_max(now, Ordering::SeqCst);
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    held.now.fetch_sub(mine, Ordering::SeqCst);
    if failed {
        return Err(StatusCode::BAD_REQUEST);
    }
    Ok(mine.to_string())
}

fn router(held: Arc<Held>) -> Router {
    Router::new()
        .route(
            "/whoami",
            get(|Extension(caller): Extension<Caller>| async move { caller.principal }),
        )
        .route(
            "/collect",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
        .route("/hold", post(hold).with_state(held))
}

/// The operator's routes: `/health` only.
fn ops() -> OpsRoutes {
    Arc::new(|request| {
        (request.uri().path() == "/health").then(|| {
            axum::http::Response::new(http_body_util::Full::new(Bytes::from_static(b"ok\n")))
        })
    })
}

struct Server {
    addr: SocketAddr,
    held: Arc<Held>,
    stop: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start(security: HttpSecurity, limits: ConnectionLimits) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = Arc::new(Held::default());
    let stop = CancellationToken::new();
    tokio::spawn(serve_router(
        listener,
        router(held.clone()),
        security,
        limits,
        ops(),
        stop.clone(),
    ));
    Server { addr, held, stop }
}

fn config(pairs: &[(&str, String)]) -> BrokerConfig {
    let layer: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    BrokerConfig::from_layers([&layer]).expect("config")
}

// --- certificates ----------------------------------------------------------------------------

struct Pki {
    ca: CertificateDer<'static>,
    ca_pem: String,
    server_pem: String,
    /// (certificate, key) of a client with CN=Alice, O=Acme.
    client: (CertificateDer<'static>, PrivateKeyDer<'static>),
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let server_key = rcgen::KeyPair::generate().expect("key");
    let server = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .signed_by(&server_key, &ca_cert, &ca_key)
        .expect("server");
    let client_key = rcgen::KeyPair::generate().expect("key");
    let mut client = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    client.distinguished_name = rcgen::DistinguishedName::new();
    client
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "Acme");
    client
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Alice");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client = client
        .signed_by(&client_key, &ca_cert, &ca_key)
        .expect("client");
    Pki {
        ca: ca_cert.der().clone(),
        ca_pem: ca_cert.pem(),
        server_pem: format!("{}{}", server.pem(), server_key.serialize_pem()),
        client: (
            client.der().clone(),
            PrivateKeyDer::Pkcs8(client_key.serialize_der().into()),
        ),
    }
}

/// TLS on the `HTTP` listener name with client certificates requested and mapped by `rules`.
fn tls_security(pki: &Pki, rules: &str) -> HttpSecurity {
    let pem = |s: &str| s.to_string();
    let config = config(&[
        ("listener.name.http.ssl.keystore.type", pem("PEM")),
        (
            "listener.name.http.ssl.keystore.certificate.chain",
            pem(&pki.server_pem),
        ),
        ("listener.name.http.ssl.keystore.key", pem(&pki.server_pem)),
        ("ssl.truststore.type", pem("PEM")),
        ("ssl.truststore.certificates", pem(&pki.ca_pem)),
        ("ssl.client.auth", pem("requested")),
        ("ssl.principal.mapping.rules", pem(rules)),
    ]);
    let settings = TlsSettings::from_config(&config, "HTTP")
        .expect("settings")
        .with_alpn(&ALPN_PROTOCOLS);
    HttpSecurity {
        tls: Some(TlsListener::new(settings).expect("tls")),
        ..HttpSecurity::plaintext()
    }
}

async fn tls_connect(
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
    let name = ServerName::try_from("localhost").expect("name");
    tokio::time::timeout(
        ANSWER_WITHIN,
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .expect("handshake in time")
    .expect("handshake")
}

// --- clients ---------------------------------------------------------------------------------

/// One HTTP/1.1 answer: status, headers (lower-case names), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends `head` (request line and headers, without the blank line; `Connection: close` is added)
/// and `body` over `io`; reads the answer to the end of the connection.
async fn http1<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, head: &str, body: &[u8]) -> Answer {
    let request = format!("{head}\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    io.write_all(request.as_bytes()).await.expect("write");
    io.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    tokio::time::timeout(ANSWER_WITHIN, io.read_to_end(&mut raw))
        .await
        .expect("answer in time")
        .expect("read");
    parse(&raw)
}

fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

async fn get_plain(addr: SocketAddr, path: &str, extra: &str) -> Answer {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let head = if extra.is_empty() {
        format!("GET {path} HTTP/1.1")
    } else {
        format!("GET {path} HTTP/1.1\r\n{extra}")
    };
    http1(tcp, &head, b"").await
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {encoded}")
}

/// An HTTP/2 connection over `io`; its driver runs in a task.
async fn h2_client<S>(io: S) -> h2::client::SendRequest<Bytes>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (client, connection) = h2::client::handshake(io).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Sends a request on `client` and reads the whole answer: (status, body).
async fn h2_get(client: &h2::client::SendRequest<Bytes>, path: &str) -> (u16, String) {
    let request = axum::http::Request::get(format!("https://localhost{path}"))
        .body(())
        .expect("request");
    let mut client = client.clone().ready().await.expect("ready");
    let (answer, _) = client.send_request(request, true).expect("send");
    h2_read(answer).await
}

async fn h2_read(answer: h2::client::ResponseFuture) -> (u16, String) {
    let answer = tokio::time::timeout(ANSWER_WITHIN, answer)
        .await
        .expect("answer in time")
        .expect("answer");
    let status = answer.status().as_u16();
    let mut body = answer.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("body");
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&text).to_string())
}

// --- tests -----------------------------------------------------------------------------------

#[tokio::test]
async fn tls_serves_http1_and_http2_by_alpn_with_the_certificate_principal() {
    let pki = pki();
    let server = start(
        tls_security(&pki, "RULE:^CN=([^,]*),O=Acme$/$1/L, DEFAULT"),
        ConnectionLimits::new(1024 * 1024),
    )
    .await;
    // HTTP/1.1, no client certificate: anonymous.
    let tls = tls_connect(server.addr, &pki, false, b"http/1.1").await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let answer = http1(tls, "GET /whoami HTTP/1.1", b"").await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, "User:ANONYMOUS")
    );
    // HTTP/1.1 with a certificate: its subject through the mapping rules.
    let tls = tls_connect(server.addr, &pki, true, b"http/1.1").await;
    let answer = http1(tls, "GET /whoami HTTP/1.1", b"").await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "User:alice"));
    // HTTP/2 by ALPN, with the certificate; the operator's route too.
    let tls = tls_connect(server.addr, &pki, true, b"h2").await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let client = h2_client(tls).await;
    assert_eq!(
        h2_get(&client, "/whoami").await,
        (200, "User:alice".to_string())
    );
    assert_eq!(h2_get(&client, "/health").await, (200, "ok\n".to_string()));

    // A certificate that no rule maps closes the connection, as on a Kafka SSL listener.
    let strict = start(
        tls_security(&pki, "RULE:^CN=admin$/admin/"),
        ConnectionLimits::new(1024),
    )
    .await;
    let tls = tls_connect(strict.addr, &pki, true, b"http/1.1").await;
    let mut tls = tls;
    let _ = tls
        .write_all(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut raw = Vec::new();
    let read = tokio::time::timeout(ANSWER_WITHIN, tls.read_to_end(&mut raw))
        .await
        .expect("closed in time");
    assert!(
        read.is_err() || raw.is_empty(),
        "no answer: {:?}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test]
async fn basic_authentication_checks_plain_and_scram_users() {
    let config = config(&[(
        "listener.name.http.plain.sasl.jaas.config",
        r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";"#
            .to_string(),
    )]);
    let plain = PlainUsers::from_config(&config, "HTTP")
        .expect("users")
        .expect("line");
    let carol = scram_credential("carol-pw");
    let credentials: CredentialLookup = Arc::new(move |user, mechanism| {
        (user == "carol" && mechanism == carol.mechanism).then(|| carol.clone())
    });
    let security = |operator_routes| HttpSecurity {
        tls: None,
        authentication: {
            let authentication = Authentication::new(
                HttpAuthentication::Basic,
                operator_routes,
                Duration::from_millis(10),
                plain.clone(),
            );
            authentication.use_scram_credentials(credentials.clone());
            Arc::new(authentication)
        },
    };
    let server = start(security(false), ConnectionLimits::new(1024)).await;
    let addr = server.addr;
    for (user, password, want) in [
        ("alice", "alice-pw", "User:alice"),
        ("carol", "carol-pw", "User:carol"),
    ] {
        let answer = get_plain(addr, "/whoami", &basic(user, password)).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, want));
    }
    for extra in [
        String::new(),
        basic("alice", "wrong"),
        basic("carol", "alice-pw"),
        basic("nobody", "alice-pw"),
        "Authorization: Bearer abc".to_string(),
    ] {
        let answer = get_plain(addr, "/whoami", &extra).await;
        assert_eq!(answer.status, 401, "{extra}: {answer:?}");
        assert_eq!(
            answer.header("www-authenticate"),
            Some(r#"Basic realm="millrace""#)
        );
        assert_eq!(answer.json()["error_code"], 40101, "{answer:?}");
    }
    // The operator's routes are open, unless configured otherwise.
    assert_eq!(get_plain(addr, "/health", "").await.status, 200);
    let closed = start(security(true), ConnectionLimits::new(1024)).await;
    assert_eq!(get_plain(closed.addr, "/health", "").await.status, 401);
    let answer = get_plain(closed.addr, "/health", &basic("alice", "alice-pw")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
}

/// A SCRAM-SHA-256 credential for `password`, as AlterUserScramCredentials stores it.
fn scram_credential(password: &str) -> ScramCredential {
    let m = ScramMechanism::Sha256;
    let salt = b"0123456789abcdef".to_vec();
    let mut salted = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
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
async fn oversized_bodies_answer_413_with_confluents_body() {
    let server = start(HttpSecurity::plaintext(), ConnectionLimits::new(1024)).await;
    let body = vec![b'x'; 2048];
    // Declared too large: refused before the body is read, whatever the route.
    for path in ["/collect", "/hold", "/no-such-route"] {
        let tcp = TcpStream::connect(server.addr).await.expect("connect");
        let answer = http1(
            tcp,
            &format!("POST {path} HTTP/1.1\r\nContent-Length: 2048"),
            &body,
        )
        .await;
        assert_eq!(answer.status, 413, "{path}: {answer:?}");
        assert_eq!(answer.json()["error_code"], 413);
        assert_eq!(answer.header("content-type"), Some("application/json"));
    }
    // Chunked, so only the bytes tell: 413 as well, for axum's own limit (Bytes) and a handler
    // that reads frames itself.
    let mut chunked = Vec::new();
    for chunk in body.chunks(512) {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    for path in ["/collect", "/hold"] {
        let tcp = TcpStream::connect(server.addr).await.expect("connect");
        let answer = http1(
            tcp,
            &format!("POST {path} HTTP/1.1\r\nTransfer-Encoding: chunked"),
            &chunked,
        )
        .await;
        assert_eq!(answer.status, 413, "{path}: {answer:?}");
        assert_eq!(answer.json()["error_code"], 413, "{path}");
    }
    // Within the limit: served.
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let answer = http1(
        tcp,
        "POST /collect HTTP/1.1\r\nContent-Length: 1000",
        &body[..1000],
    )
    .await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "1000"));
}

#[tokio::test]
async fn http2_bodies_interleaved_on_one_connection_stay_within_its_budget() {
    const BUDGET: usize = 256 * 1024;
    const STREAMS: usize = 24;
    const BODY: usize = 64 * 1024;
    let server = start(HttpSecurity::plaintext(), ConnectionLimits::new(BUDGET)).await;
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let client = h2_client(tcp).await;
    // One round trip, so that the server's SETTINGS have arrived.
    assert_eq!(h2_get(&client, "/health").await.0, 200);
    assert_eq!(
        client.current_max_send_streams(),
        millrace_rest::limits::H2_STREAMS_PER_CONNECTION_MAX as usize,
        "the server's SETTINGS_MAX_CONCURRENT_STREAMS"
    );
    // Every stream sends half its body, then (all started) the rest: 1.5 MiB of bodies in
    // flight at once on one connection, six times the budget.
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let request = axum::http::Request::post("http://localhost/hold")
            .body(())
            .expect("request");
        let mut ready = client.clone().ready().await.expect("ready");
        let (answer, mut send) = ready.send_request(request, false).expect("send");
        send.send_data(Bytes::from(vec![1u8; BODY / 2]), false)
            .expect("data");
        streams.push((answer, send));
    }
    let mut answers = Vec::new();
    for (answer, mut send) in streams {
        send.send_data(Bytes::from(vec![2u8; BODY / 2]), true)
            .expect("data");
        answers.push(tokio::spawn(h2_read(answer)));
    }
    let mut served = 0;
    for answer in answers {
        let (status, body) = answer.await.expect("task");
        match status {
            200 => {
                assert_eq!(body, BODY.to_string());
                served += 1;
            }
            429 => assert!(body.contains("\"error_code\":429"), "{body}"),
            other => panic!("status {other}: {body}"),
        }
    }
    let peak = server.held.peak.load(Ordering::SeqCst);
    assert!(
        peak <= BUDGET,
        "handlers held {peak} bytes at once, budget {BUDGET}"
    );
    assert!(served >= 1, "at least the bodies that fit are served");
    // The connection is still good, and its budget all back.
    assert_eq!(h2_get(&client, "/health").await.0, 200);
    let (status, body) = {
        let request = axum::http::Request::post("http://localhost/hold")
            .body(())
            .expect("request");
        let mut ready = client.clone().ready().await.expect("ready");
        let (answer, mut send) = ready.send_request(request, false).expect("send");
        send.send_data(Bytes::from(vec![3u8; BUDGET]), true)
            .expect("data");
        h2_read(answer).await
    };
    assert_eq!((status, body), (200, BUDGET.to_string()));
}

#[tokio::test]
async fn stalled_bodies_answer_408_and_idle_connections_are_closed() {
    let limits = ConnectionLimits {
        body_idle_timeout: Duration::from_millis(1500),
        idle_timeout: Duration::from_secs(2),
        ..ConnectionLimits::new(1024)
    };
    let server = start(HttpSecurity::plaintext(), limits).await;
    // Ten of a hundred declared bytes, then nothing.
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(b"POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .expect("write");
    let mut raw = vec![0u8; 4096];
    let n = tokio::time::timeout(ANSWER_WITHIN, tcp.read(&mut raw))
        .await
        .expect("answer in time")
        .expect("read");
    let answer = parse(&raw[..n]);
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.json()["error_code"], 408);

    // A kept-alive connection that asks nothing more is closed after the idle timeout (not the
    // 30 s header timeout).
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let started = tokio::time::Instant::now();
    let mut raw = Vec::new();
    tokio::time::timeout(ANSWER_WITHIN, tcp.read_to_end(&mut raw))
        .await
        .expect("closed in time")
        .expect("read");
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(1500) && idle < Duration::from_secs(10),
        "closed after {idle:?}"
    );
    // The same for an HTTP/2 connection: GOAWAY, then the connection ends.
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2");
    let driver = tokio::spawn(connection);
    assert_eq!(h2_get(&client, "/health").await.0, 200);
    let ended = tokio::time::timeout(ANSWER_WITHIN, driver).await;
    assert!(ended.is_ok(), "the idle HTTP/2 connection is closed");
}
