//! Goal: stateless HTTP consumers (issue 32, `/v1/consumer/…`) against real brokers and real
//! Kafka clients (librdkafka). A consumer reads every record produced by a Kafka producer exactly
//! once over polls; each poll commits what the previous one delivered (the group's committed
//! offsets, as a Kafka client reads them, trail by one poll), goodbye commits the rest, and a new
//! consumer of the group resumes at the committed offsets. In a 3-node cluster the polls of one
//! consumer go to every broker in turn (as a load balancer would send them): partitions led
//! elsewhere and the group's coordinator are reached through the broker that got the request, and
//! nothing is lost or read twice. With HTTP Basic and the ACL authorizer, the HTTP caller's
//! principal is the one the ACLs are checked against: a user granted the group and topic reads,
//! one without is refused 403, and no credentials are 401.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster::TestCluster;
use common::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 3;
const RECORDS: usize = 300;
/// How long a test waits for all records to arrive over polls.
const POLL_DEADLINE: Duration = Duration::from_secs(60);

async fn create_topic(bootstrap: &str, topic: &str, replication: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new(
                topic,
                PARTITIONS,
                TopicReplication::Fixed(replication),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(20))),
        )
        .await
        .expect("create topics");
    for r in results {
        r.expect("topic created");
    }
}

/// Produces `count` keyed records (`key-<i>` → `value-<i>`) starting at `from`, spread over the
/// partitions, with acks=all.
async fn produce(bootstrap: &str, topic: &str, from: usize, count: usize) {
    let producer = producer_at(bootstrap, &[("linger.ms", "5")]);
    let keys: Vec<String> = (from..from + count).map(|i| format!("key-{i}")).collect();
    let values: Vec<String> = (from..from + count).map(|i| format!("value-{i}")).collect();
    let mut pending = Vec::new();
    for (n, i) in (from..from + count).enumerate() {
        let partition = i32::try_from(i).expect("small") % PARTITIONS;
        let record = FutureRecord::to(topic)
            .partition(partition)
            .key(&keys[n])
            .payload(&values[n]);
        pending.push(producer.send(record, Duration::from_secs(30)));
    }
    for p in pending {
        p.await.expect("acknowledged");
    }
}

fn register(http: SocketAddr, group: &str, topic: &str) -> String {
    let body = format!(r#"{{"group":"{group}","topics":["{topic}"],"start":"earliest"}}"#);
    let (status, answer) = http_with_body(
        http,
        "POST",
        "/v1/consumer/register",
        "application/json",
        &body,
    );
    assert_eq!(status, 200, "register: {answer}");
    let json: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
    json["consumer_id"]
        .as_str()
        .expect("a consumer id")
        .to_string()
}

/// One poll: the records it returned as (topic-partition, offset) → value.
fn poll(http: SocketAddr, id: &str) -> Vec<((i32, i64), String)> {
    let path = format!("/v1/consumer/poll?consumer_id={id}&format=string&timeout_ms=200");
    let (status, answer) = http_with_body(http, "POST", &path, "application/json", "");
    assert_eq!(status, 200, "poll: {answer}");
    answer
        .lines()
        .map(|line| {
            let r: serde_json::Value = serde_json::from_str(line).expect("an NDJSON line");
            let partition =
                i32::try_from(r["partition"].as_i64().expect("partition")).expect("i32");
            let offset = r["offset"].as_i64().expect("offset");
            let value = r["value"].as_str().expect("value").to_string();
            assert_eq!(
                r["key"].as_str().expect("key"),
                value.replace("value-", "key-"),
                "the key travels with its value"
            );
            ((partition, offset), value)
        })
        .collect()
}

/// Polls through `brokers` in turn until `want` records came, asserting none comes twice.
fn poll_all(brokers: &[SocketAddr], id: &str, want: usize) -> BTreeMap<(i32, i64), String> {
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + POLL_DEADLINE;
    let mut turn = 0;
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "only {} of {want} records within {POLL_DEADLINE:?}",
            got.len()
        );
        for (at, value) in poll(brokers[turn % brokers.len()], id) {
            assert!(
                got.insert(at, value).is_none(),
                "record {at:?} was delivered twice"
            );
        }
        turn += 1;
    }
    assert_eq!(got.len(), want);
    got
}

/// The group's committed offsets, as a Kafka client reads them: partition → offset.
fn committed(bootstrap: &str, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let answer = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    answer
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Where each partition ends after `records` spread by `produce`.
fn ends(records: usize) -> BTreeMap<i32, i64> {
    (0..PARTITIONS)
        .map(|p| {
            let n = (0..records)
                .filter(|i| i32::try_from(*i).expect("small") % PARTITIONS == p)
                .count();
            (p, i64::try_from(n).expect("small"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_consumer_reads_each_record_once_and_each_poll_commits_the_previous_one() {
    let http_port = free_port();
    let broker = Broker::start_with(&[&format!("millrace.http.listen=127.0.0.1:{http_port}")]);
    let http = SocketAddr::from(([127, 0, 0, 1], http_port));
    let topic = unique_topic("stateless");
    let group = format!("{topic}-group");
    create_topic(&broker.bootstrap(), &topic, 1).await;
    produce(&broker.bootstrap(), &topic, 0, RECORDS).await;

    let id = register(http, &group, &topic);
    let got = poll_all(&[http], &id, RECORDS);
    for ((_, _), value) in &got {
        assert!(value.starts_with("value-"));
    }
    // Everything was delivered, but the last delivery is not yet committed: a poll commits the
    // previous poll's delivery, so the committed offsets trail until the next poll.
    let before = committed(&broker.bootstrap(), &group, &topic);
    assert_ne!(
        before,
        ends(RECORDS),
        "the last delivery is not committed before the next poll"
    );
    assert!(poll(http, &id).is_empty(), "nothing new to read");
    assert_eq!(
        committed(&broker.bootstrap(), &group, &topic),
        ends(RECORDS)
    );

    // Goodbye commits what was delivered; a new consumer of the group resumes there.
    produce(&broker.bootstrap(), &topic, RECORDS, 30).await;
    let more = poll_all(&[http], &id, 30);
    assert!(more.values().all(|v| {
        v.trim_start_matches("value-")
            .parse::<usize>()
            .is_ok_and(|i| i >= RECORDS)
    }));
    let (status, answer) = http_with_body(
        http,
        "POST",
        &format!("/v1/consumer/goodbye?consumer_id={id}"),
        "application/json",
        "",
    );
    assert_eq!(status, 204, "goodbye: {answer}");
    assert_eq!(
        committed(&broker.bootstrap(), &group, &topic),
        ends(RECORDS + 30)
    );
    let (status, answer) = http_with_body(
        http,
        "POST",
        &format!("/v1/consumer/poll?consumer_id={id}"),
        "application/json",
        "",
    );
    assert_eq!(status, 404, "a consumer that said goodbye: {answer}");
    assert!(answer.contains("40403"), "{answer}");

    let again = register(http, &group, &topic);
    produce(&broker.bootstrap(), &topic, RECORDS + 30, 9).await;
    let rest = poll_all(&[http], &again, 9);
    assert!(rest.values().all(|v| {
        v.trim_start_matches("value-")
            .parse::<usize>()
            .is_ok_and(|i| i >= RECORDS + 30)
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_consumer_polls_through_every_broker_of_a_cluster() {
    let cluster = TestCluster::start(3, &[]);
    let topic = unique_topic("stateless-cluster");
    let group = format!("{topic}-group");
    create_topic(&cluster.bootstrap(), &topic, 3).await;
    produce(&cluster.bootstrap(), &topic, 0, RECORDS).await;

    let brokers: Vec<SocketAddr> = (1..=3).map(|id| cluster.http_addr(id)).collect();
    let id = register(brokers[1], &group, &topic);
    poll_all(&brokers, &id, RECORDS);
    assert!(poll(brokers[2], &id).is_empty(), "nothing new to read");
    assert_eq!(
        committed(&cluster.bootstrap(), &group, &topic),
        ends(RECORDS)
    );

    // More records, read through the brokers in the other order.
    produce(&cluster.bootstrap(), &topic, RECORDS, 60).await;
    let reversed: Vec<SocketAddr> = brokers.iter().rev().copied().collect();
    let more = poll_all(&reversed, &id, 60);
    assert_eq!(more.len(), 60);
}

#[test]
fn a_consumer_id_that_register_did_not_give_is_refused() {
    let http_port = free_port();
    let _broker = Broker::start_with(&[&format!("millrace.http.listen=127.0.0.1:{http_port}")]);
    let http = SocketAddr::from(([127, 0, 0, 1], http_port));
    let (status, answer) = http_with_body(
        http,
        "POST",
        "/v1/consumer/poll?consumer_id=bogus",
        "application/json",
        "",
    );
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("consumer_id"), "{answer}");
    let (status, answer) = http_with_body(
        http,
        "POST",
        "/v1/consumer/register",
        "application/json",
        r#"{"group":"g","topics":["no-such-topic"]}"#,
    );
    assert_eq!(status, 404, "{answer}");
    assert!(answer.contains("40401"), "{answer}");
    let (status, answer) = http_with_body(
        http,
        "POST",
        "/v1/consumer/register",
        "application/json",
        r#"{"group":"g","topics":["t"],"start":"middle"}"#,
    );
    assert_eq!(status, 422, "{answer}");
}

/// Kafka's ACL codes.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const LITERAL: i8 = 3;
const READ: i8 = 3;
const DESCRIBE: i8 = 8;
const ALLOW: i8 = 3;
const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_admin=\"admin-secret\" user_alice=\"alice-secret\" \
                    user_bob=\"bob-secret\";";

fn acl(
    resource_type: i8,
    name: &str,
    principal: &str,
    operation: i8,
) -> kafka_protocol::messages::create_acls_request::AclCreation {
    use kafka_protocol::protocol::StrBytes;
    kafka_protocol::messages::create_acls_request::AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(StrBytes::from_string(name.to_string()))
        .with_resource_pattern_type(LITERAL)
        .with_principal(StrBytes::from_string(principal.to_string()))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(operation)
        .with_permission_type(ALLOW)
}

/// One HTTP/1.1 POST with Basic credentials (`None`: without); (status, body).
fn post_as(http: SocketAddr, user: Option<&str>, path: &str, body: &str) -> (u16, String) {
    use base64::Engine;
    let auth = user.map(|u| {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{u}-secret"));
        format!("Basic {token}")
    });
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth.as_str()));
    }
    http_with_headers(http, "POST", path, &headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acls_see_the_http_callers_principal() {
    let http_port = free_port();
    let jaas = format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}");
    let broker = Broker::start_with(&[
        "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        jaas.as_str(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin;User:ANONYMOUS",
        &format!("millrace.http.listen=127.0.0.1:{http_port}"),
        "millrace.http.authentication=basic",
        "millrace.http.listener.name=SASL_PLAINTEXT",
    ]);
    let http = SocketAddr::from(([127, 0, 0, 1], http_port));
    let plaintext = broker.listener_addr("PLAINTEXT").to_string();
    let topic = unique_topic("stateless-acl");
    let group = format!("{topic}-group");
    create_topic(&plaintext, &topic, 1).await;
    produce(&plaintext, &topic, 0, 6).await;
    let mut admin = RawConn::connect(broker.listener_addr("PLAINTEXT")).await;
    let grant = kafka_protocol::messages::CreateAclsRequest::default().with_creations(vec![
        acl(TOPIC, &topic, "User:alice", READ),
        acl(TOPIC, &topic, "User:alice", DESCRIBE),
        acl(GROUP, &group, "User:alice", READ),
    ]);
    let answer = admin.request(3, &grant).await;
    assert!(
        answer.results.iter().all(|r| r.error_code == 0),
        "{answer:?}"
    );

    let register = format!(r#"{{"group":"{group}","topics":["{topic}"],"start":"earliest"}}"#);
    let (status, body) = post_as(http, None, "/v1/consumer/register", &register);
    assert_eq!(status, 401, "no credentials: {body}");
    let (status, body) = post_as(http, Some("bob"), "/v1/consumer/register", &register);
    assert_eq!(status, 403, "bob has no ACL: {body}");
    assert!(body.contains("40301"), "{body}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, body) = loop {
        // The ACLs reach the image a moment after CreateAcls answers.
        let answer = post_as(http, Some("alice"), "/v1/consumer/register", &register);
        if answer.0 == 200 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 200, "alice may read: {body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("JSON")["consumer_id"]
        .as_str()
        .expect("id")
        .to_string();
    let mut got = 0;
    while got < 6 {
        assert!(Instant::now() < deadline, "alice read only {got} of 6");
        let path = format!("/v1/consumer/poll?consumer_id={id}&timeout_ms=200");
        let (status, body) = post_as(http, Some("alice"), &path, "");
        assert_eq!(status, 200, "alice polls: {body}");
        got += body.lines().count();
    }
    // bob may not use alice's consumer id: the token grants nothing.
    let path = format!("/v1/consumer/poll?consumer_id={id}");
    let (status, body) = post_as(http, Some("bob"), &path, "");
    assert_eq!(status, 403, "bob with alice's consumer id: {body}");
}

/// A broker closes connections idle for `connections.max.idle.ms`, the forwarding ones between
/// brokers too: a request forwarded after that must not fail on the closed connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_survives_connections_the_other_broker_closed_while_idle() {
    const IDLE_MS: u64 = 1_000;
    let cluster = TestCluster::start(3, &[&format!("connections.max.idle.ms={IDLE_MS}")]);
    let topic = unique_topic("stateless-idle");
    let group = format!("{topic}-group");
    create_topic(&cluster.bootstrap(), &topic, 3).await;
    produce(&cluster.bootstrap(), &topic, 0, 30).await;
    let http = cluster.http_addr(1);
    let id = register(http, &group, &topic);
    poll_all(&[http], &id, 30);
    // Every pooled forwarding connection of broker 1 is now past the other brokers' idle limit.
    tokio::time::sleep(Duration::from_millis(IDLE_MS * 3)).await;
    produce(&cluster.bootstrap(), &topic, 30, 30).await;
    let path = format!("/v1/consumer/poll?consumer_id={id}&format=string&timeout_ms=200");
    let (status, answer) = http_with_body(http, "POST", &path, "application/json", "");
    assert_eq!(status, 200, "the first poll after the idle close: {answer}");
    let mut got = answer.lines().count();
    let deadline = Instant::now() + POLL_DEADLINE;
    while got < 30 {
        assert!(Instant::now() < deadline, "only {got} of 30");
        got += poll(http, &id).len();
    }
}
