//! Brokers talk to each other over a secured inter-broker listener (issue 36): replica fetches,
//! transaction markers and forwarded requests go over TLS with SASL/PLAIN (SASL_SSL), or over TLS
//! with client certificates (SSL with `ssl.client.auth=required`), with the broker's own
//! credentials (SCRAM too, once the brokers' user exists); the quorum's nodes talk mutual TLS on the controller listener
//! (`controller.listener.names` mapped to SSL), and a connection that is not TLS gets nothing. A 3-node cluster whose inter-broker listener is secured replicates: acks=all
//! with `min.insync.replicas=3` is acknowledged only once both followers fetched over it, and a
//! follower killed with SIGKILL catches up over it after its restart. A broker that could not
//! authenticate is refused at start-up, naming the key. The clients use a PLAINTEXT listener
//! (librdkafka is built here without TLS); `compat-tests/python/test_secure_cluster.py` runs a
//! cluster with no PLAINTEXT Kafka listener at all with confluent-kafka, and on Apache Kafka 4.4.

#[path = "common/cluster.rs"]
mod cluster;
mod common;
#[path = "common/scram.rs"]
mod scram_credentials;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::*;
use kafka_protocol::messages::AlterUserScramCredentialsRequest;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;

/// The broker's own SASL/PLAIN user, and the listener's users (itself among them).
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    username=\"broker\" password=\"broker-secret\" \
                    user_broker=\"broker-secret\";";
const RECORDS: usize = 50;
/// The controller listener's opening frame as a plain TCP client sends it: `Hello { version: 1,
/// from: 99, voters: [1, 2, 3] }` (postcard), after its length. A PLAINTEXT listener answers it.
const PLAIN_HELLO: [u8; 10] = [0, 0, 0, 6, 1, 99, 3, 1, 2, 3];
/// Longest wait for a restarted follower to be back in the ISR.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(60);

/// A CA, and one certificate for `127.0.0.1` every broker serves and presents as a client.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("pki dir");
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).expect("CA certificate");
        let key = rcgen::KeyPair::generate().expect("broker key");
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "broker");
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &ca, &ca_key)
            .expect("broker certificate");
        let pki = Pki { dir };
        std::fs::write(pki.path("ca.pem"), ca.pem()).expect("write CA");
        std::fs::write(
            pki.path("broker.pem"),
            format!("{}{}", cert.pem(), key.serialize_pem()),
        )
        .expect("write keystore");
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Settings of an `INTERNAL` inter-broker listener of protocol `protocol`, beside the
    /// PLAINTEXT one the clients use.
    fn settings(&self, protocol: &str, extra: &[&str]) -> Vec<String> {
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        let mut settings = vec![
            "listeners=INTERNAL://127.0.0.1:0".to_string(),
            format!("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:{protocol}"),
            "inter.broker.listener.name=INTERNAL".to_string(),
            "ssl.keystore.type=PEM".to_string(),
            format!("ssl.keystore.location={}", path(&self.path("broker.pem"))),
            "ssl.truststore.type=PEM".to_string(),
            format!("ssl.truststore.location={}", path(&self.path("ca.pem"))),
            "min.insync.replicas=3".to_string(),
            "broker.session.timeout.ms=3000".to_string(),
            "broker.heartbeat.interval.ms=500".to_string(),
        ];
        settings.extend(extra.iter().map(|s| (*s).to_string()));
        settings
    }
}

fn sasl_settings() -> Vec<String> {
    vec![
        "sasl.enabled.mechanisms=PLAIN".to_string(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".to_string(),
        format!("listener.name.internal.plain.sasl.jaas.config={JAAS}"),
    ]
}

fn start(settings: &[String]) -> TestCluster {
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    TestCluster::start(3, &settings)
}

async fn create_topic(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin");
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, 1, TopicReplication::Fixed(3))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create topics");
    for r in results {
        r.expect("topic created");
    }
}

/// Produces `n` records with acks=all, one at a time, up to the first error; how many were
/// acknowledged, and that error.
async fn produce(
    bootstrap: &str,
    topic: &str,
    from: usize,
    n: usize,
) -> (usize, Option<KafkaError>) {
    let producer = producer_at(
        bootstrap,
        &[("acks", "all"), ("message.timeout.ms", "10000")],
    );
    let mut acked = 0;
    let mut first_error = None;
    for i in from..from + n {
        let value = format!("record-{i}");
        match producer
            .send(
                FutureRecord::<(), _>::to(topic).payload(&value),
                Duration::from_secs(15),
            )
            .await
        {
            Ok(_) => acked += 1,
            Err((e, _)) => {
                first_error = Some(e);
                break;
            }
        }
    }
    (acked, first_error)
}

/// Produces one acks=all record at a time (values from `record-{from}` on) until one is
/// acknowledged, within `CATCH_UP_WITHIN`; else fails naming `what` with node `log_of`'s log.
async fn until_acknowledged(
    cluster: &TestCluster,
    topic: &str,
    from: usize,
    log_of: i32,
    what: &str,
) {
    let deadline = Instant::now() + CATCH_UP_WITHIN;
    for next in from.. {
        let (acked, error) = produce(&cluster.bootstrap(), topic, next, 1).await;
        if acked == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not within {CATCH_UP_WITHIN:?}: {what}; acks=all answered {error:?}; node {log_of}'s \
             log:\n{}",
            cluster.log_tail(log_of, 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every record of the topic's partition, from the start, as strings.
async fn read_all(bootstrap: &str, topic: &str, n: usize) -> Vec<String> {
    let consumer = consumer_at(bootstrap, &[]);
    assign(&consumer, topic, &[(0, Offset::Beginning)]);
    recv_n(&consumer, n, Duration::from_secs(30))
        .await
        .iter()
        .map(|m| {
            String::from_utf8(rdkafka::Message::payload(m).unwrap_or_default().to_vec())
                .expect("utf-8")
        })
        .collect()
}

/// The cluster replicates over the secured listener: acks=all with `min.insync.replicas=3`
/// succeeds (both followers fetch over it); with a follower killed it cannot; restarted, the
/// follower catches up over it and acks=all succeeds again; every record reads back in order.
async fn replicates_over_the_inter_broker_listener(cluster: &mut TestCluster) {
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("secured-replication");
    create_topic(&bootstrap, &topic).await;

    let (acked, error) = produce(&bootstrap, &topic, 0, RECORDS).await;
    assert_eq!(acked, RECORDS, "acks=all before any fault: {error:?}");

    cluster.kill9(3);
    let (acked, error) = produce(&bootstrap, &topic, RECORDS, 1).await;
    assert_eq!(
        acked, 0,
        "acks=all with min.insync.replicas=3 and a follower down"
    );
    let code = error.and_then(|e| e.rdkafka_error_code());
    assert!(
        matches!(
            code,
            Some(
                RDKafkaErrorCode::NotEnoughReplicas
                    | RDKafkaErrorCode::NotEnoughReplicasAfterAppend
                    | RDKafkaErrorCode::MessageTimedOut
            )
        ),
        "{code:?}"
    );

    cluster.restart(3);
    until_acknowledged(
        cluster,
        &topic,
        RECORDS + 1,
        3,
        "the restarted follower is back in the ISR",
    )
    .await;
    let records = read_all(&bootstrap, &topic, RECORDS).await;
    let expected: Vec<String> = (0..RECORDS).map(|i| format!("record-{i}")).collect();
    assert_eq!(records, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replicates_over_sasl_ssl() {
    let pki = Pki::new();
    // Sessions of 2 s (KIP-368): the brokers' connections must authenticate again on the way.
    let mut settings = pki.settings(
        "SASL_SSL",
        &["listener.name.internal.connections.max.reauth.ms=2000"],
    );
    settings.extend(sasl_settings());
    let mut cluster = start(&settings);
    let started = Instant::now();
    replicates_over_the_inter_broker_listener(&mut cluster).await;
    assert!(
        started.elapsed() > Duration::from_secs(4),
        "several session lifetimes"
    );
    for id in 1..=3 {
        let log = cluster.log_tail(id, 5000);
        assert!(
            !log.contains("the SASL session ended"),
            "node {id} saw a broker's session end without re-authentication:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_authenticate_to_each_other_with_scram_once_their_user_exists() {
    let pki = Pki::new();
    let mut settings = pki.settings("SASL_SSL", &[]);
    settings.extend([
        "sasl.enabled.mechanisms=SCRAM-SHA-256".to_string(),
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256".to_string(),
        "listener.name.internal.scram-sha-256.sasl.jaas.config=\
         org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"broker\" password=\"broker-secret\";"
            .to_string(),
    ]);
    let cluster = start(&settings);
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("scram-replication");
    create_topic(&bootstrap, &topic).await;
    // No SCRAM user `broker` yet: the followers cannot log in, so nothing is fully replicated.
    let (acked, _) = produce(&bootstrap, &topic, 0, 1).await;
    assert_eq!(acked, 0, "acks=all before the brokers could fetch");

    // The user, as `kafka-configs --alter --add-config SCRAM-SHA-256=[password=…]` creates it.
    let mut admin = RawConn::connect(cluster.addr(1)).await;
    let response = admin
        .request(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                scram_credentials::upsertion(
                    "broker",
                    scram_credentials::SHA256,
                    "broker-secret",
                    4096,
                ),
            ]),
        )
        .await;
    assert!(
        response.results.iter().all(|r| r.error_code == 0),
        "{response:?}"
    );
    until_acknowledged(
        &cluster,
        &topic,
        1,
        2,
        "the followers log in with the new user",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replicates_over_mutual_tls_with_a_tls_quorum() {
    let pki = Pki::new();
    let mut settings = pki.settings("SSL", &["listener.name.internal.ssl.client.auth=required"]);
    // The controller listener too: mutual TLS between the quorum's nodes.
    settings.retain(|s| !s.starts_with("listener.security.protocol.map="));
    settings.extend([
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL"
            .to_string(),
        "controller.listener.names=CONTROLLER".to_string(),
    ]);
    let mut cluster = start(&settings);
    // A node speaking the quorum's protocol without TLS gets no answer (at most a TLS alert): the
    // connection closes.
    let mut plain = tokio::net::TcpStream::connect(cluster.controller_addr(1))
        .await
        .expect("connect to the controller listener");
    tokio::io::AsyncWriteExt::write_all(&mut plain, &PLAIN_HELLO)
        .await
        .expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut answer),
    )
    .await
    .expect("the controller listener closes a connection that is not TLS");
    assert!(
        read.is_err() || answer.is_empty() || answer[0] == 0x15,
        "a plain Hello got {answer:?}"
    );
    // The quorum works over TLS: a controller kill and restart included (node 3 votes).
    replicates_over_the_inter_broker_listener(&mut cluster).await;
}

#[test]
fn a_broker_without_credentials_for_the_other_brokers_is_refused() {
    let pki = Pki::new();
    let base = pki.settings("SASL_SSL", &[]);
    let args = |settings: &[String]| -> Vec<String> {
        let mut args: Vec<String> = [
            "--listen",
            "127.0.0.1:0",
            "--node-id",
            "1",
            "--controller-listen",
            "127.0.0.1:0",
            "--controller-voters",
            "1@127.0.0.1:1",
        ]
        .map(String::from)
        .to_vec();
        for s in settings {
            args.push("--set".to_string());
            args.push(s.clone());
        }
        args
    };
    let check = |settings: Vec<String>, expect: &[&str]| {
        let args = args(&settings);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused(&args, expect);
    };
    // Kafka's default mechanism, GSSAPI, is not served.
    let mut s = base.clone();
    s.extend([
        "sasl.enabled.mechanisms=PLAIN".to_string(),
        format!("listener.name.internal.plain.sasl.jaas.config={JAAS}"),
    ]);
    check(s, &["sasl.mechanism.inter.broker.protocol", "GSSAPI"]);
    // The mechanism must be one the listener enables.
    let mut s = base.clone();
    s.extend([
        "sasl.enabled.mechanisms=SCRAM-SHA-256".to_string(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".to_string(),
    ]);
    check(
        s,
        &[
            "sasl.mechanism.inter.broker.protocol",
            "sasl.enabled.mechanisms",
        ],
    );
    // The JAAS line must carry the broker's own username and password.
    let mut s = base.clone();
    s.extend([
        "sasl.enabled.mechanisms=PLAIN".to_string(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".to_string(),
        "listener.name.internal.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_broker=\"x\";".to_string(),
    ]);
    check(
        s,
        &["listener.name.internal.plain.sasl.jaas.config", "username"],
    );
    // The controller listener serves PLAINTEXT or SSL (mutual TLS, so with a truststore).
    let mut s = pki.settings("SSL", &["controller.listener.names=CONTROLLER"]);
    s.retain(|s| !s.starts_with("listener.security.protocol.map="));
    s.push(
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SASL_SSL"
            .to_string(),
    );
    check(s.clone(), &["controller.listener.names", "SASL_SSL"]);
    let s: Vec<String> = s
        .into_iter()
        .map(|s| s.replace("CONTROLLER:SASL_SSL", "CONTROLLER:SSL"))
        .filter(|s| !s.starts_with("ssl.truststore"))
        .collect();
    check(s, &["ssl.truststore.location"]);
    // TLS towards the other brokers needs a truststore to check them with (in a cluster).
    let s: Vec<String> = pki
        .settings("SSL", &[])
        .into_iter()
        .filter(|s| !s.starts_with("ssl.truststore"))
        .collect();
    check(s, &["ssl.truststore.location"]);
}
