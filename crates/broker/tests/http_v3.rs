//! REST v3 against a real broker process, checked with Kafka clients (librdkafka): topics created,
//! grown and deleted over v3 are what Metadata shows; configs changed over v3 are what
//! DescribeConfigs reads; a group's lags are what its consumer committed against the partitions'
//! ends; and with an authorizer, the HTTP caller (no ACLs: User:ANONYMOUS) sees only the topics
//! an ACL lets it Describe. The request-by-request shapes and codes are in
//! compat-tests/http/cases/v3-*.sh and schemathesis.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateTopicsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, OwnedResourceSpecifier, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

/// How long one HTTP exchange may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the broker may take to answer v3 after its ready line.
const SERVING_TIMEOUT: Duration = Duration::from_secs(30);
const ADMIN_TIMEOUT: Duration = Duration::from_secs(20);

/// One HTTP answer.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request over a new connection; the body is JSON when given.
fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(HTTP_TIMEOUT))
        .expect("read timeout");
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if body.is_some() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", payload.len()));
    stream.write_all(head.as_bytes()).expect("send head");
    stream.write_all(payload.as_bytes()).expect("send body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, rest) = text.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body_text = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let body = if body_text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body_text).unwrap_or_else(|e| panic!("not JSON ({e}): {body_text}"))
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// The body of a chunked answer.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    for _ in 0..10_000 {
        let Some((size, tail)) = rest.split_once("\r\n") else {
            break;
        };
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&tail[..size]);
        rest = &tail[size + 2..];
    }
    out
}

/// A broker with an HTTP listener (and `settings`), once v3 answers; its HTTP address and
/// cluster id.
fn start(settings: &[&str]) -> (Broker, SocketAddr, String) {
    let port = free_port();
    let listen = format!("millrace.http.listen=127.0.0.1:{port}");
    let mut all: Vec<&str> = settings.to_vec();
    all.push(&listen);
    let broker = Broker::start_with(&all);
    let http: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let deadline = Instant::now() + SERVING_TIMEOUT;
    loop {
        let answer = request(http, "GET", "/v3/clusters", None);
        if answer.status == 200 {
            let id = answer.body["data"][0]["cluster_id"]
                .as_str()
                .expect("a cluster id")
                .to_string();
            return (broker, http, id);
        }
        assert!(
            Instant::now() < deadline,
            "v3 never answered: {} {}",
            answer.status,
            answer.body
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "10000")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("create admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(Duration::from_secs(10)))
}

/// The partition count librdkafka's Metadata shows for `topic` (None when it does not exist).
fn partitions_seen(admin: &AdminClient<DefaultClientContext>, topic: &str) -> Option<usize> {
    let metadata = admin
        .inner()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len())
}

/// `key` of `topic` as librdkafka's DescribeConfigs reads it: its value and source (librdkafka's
/// name for it: `DynamicTopic`, `Default`).
async fn described(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    key: &str,
) -> (Option<String>, String) {
    let mut results = tokio::time::timeout(
        ADMIN_TIMEOUT,
        admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &options()),
    )
    .await
    .expect("DescribeConfigs timed out")
    .expect("DescribeConfigs");
    let resource = results.remove(0).expect("the topic's configs");
    assert!(matches!(resource.specifier, OwnedResourceSpecifier::Topic(ref t) if t == topic));
    let entry = resource
        .get(key)
        .unwrap_or_else(|| panic!("{key} is not described"));
    (entry.value.clone(), format!("{:?}", entry.source))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_created_grown_and_deleted_over_v3_are_what_kafka_clients_see() {
    let (broker, http, cluster) = start(&[]);
    let admin = admin(&broker.bootstrap());
    let topic = unique_topic("v3-created");
    let topics = format!("/v3/clusters/{cluster}/topics");

    let created = request(
        http,
        "POST",
        &topics,
        Some(&json!({
            "topic_name": topic,
            "partitions_count": 4,
            "replication_factor": 1,
            "configs": [{"name": "compression.type", "value": "gzip"}],
        })),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["partitions_count"], 4);
    assert!(created
        .header("location")
        .is_some_and(|l| l.ends_with(&format!("{topics}/{topic}"))));
    assert_eq!(partitions_seen(&admin, &topic), Some(4));
    assert_eq!(
        described(&admin, &topic, "compression.type").await,
        (Some("gzip".to_string()), "DynamicTopic".to_string())
    );

    let grown = request(
        http,
        "PATCH",
        &format!("{topics}/{topic}"),
        Some(&json!({"partitions_count": 6})),
    );
    assert_eq!(grown.status, 200, "{}", grown.body);
    assert_eq!(partitions_seen(&admin, &topic), Some(6));

    let deleted = request(http, "DELETE", &format!("{topics}/{topic}"), None);
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_eq!(partitions_seen(&admin, &topic), None);
    let again = request(http, "GET", &format!("{topics}/{topic}"), None);
    assert_eq!(
        (again.status, &again.body["error_code"]),
        (404, &json!(40403))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_changed_over_v3_are_what_describe_configs_reads() {
    let (broker, http, cluster) = start(&[]);
    let admin = admin(&broker.bootstrap());
    let topic = unique_topic("v3-configs");
    let created = tokio::time::timeout(
        ADMIN_TIMEOUT,
        admin.create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &options(),
        ),
    )
    .await
    .expect("CreateTopics timed out")
    .expect("CreateTopics");
    assert!(matches!(created.as_slice(), [Ok(_)]), "{created:?}");
    let configs = format!("/v3/clusters/{cluster}/topics/{topic}/configs");

    let put = request(
        http,
        "PUT",
        &format!("{configs}/retention.ms"),
        Some(&json!({"value": "3600000"})),
    );
    assert_eq!(put.status, 204, "{}", put.body);
    assert_eq!(
        described(&admin, &topic, "retention.ms").await,
        (Some("3600000".to_string()), "DynamicTopic".to_string())
    );

    let batch = request(
        http,
        "POST",
        &format!("{configs}:alter"),
        Some(&json!({"data": [
            {"name": "cleanup.policy", "value": "compact"},
            {"name": "retention.ms", "operation": "DELETE"},
        ]})),
    );
    assert_eq!(batch.status, 204, "{}", batch.body);
    assert_eq!(
        described(&admin, &topic, "cleanup.policy").await,
        (Some("compact".to_string()), "DynamicTopic".to_string())
    );
    assert_eq!(described(&admin, &topic, "retention.ms").await.1, "Default");

    // v3 reads back what Kafka reads.
    let one = request(http, "GET", &format!("{configs}/cleanup.policy"), None);
    assert_eq!(
        (&one.body["value"], &one.body["source"]),
        (&json!("compact"), &json!("DYNAMIC_TOPIC_CONFIG"))
    );
    let reset = request(http, "DELETE", &format!("{configs}/cleanup.policy"), None);
    assert_eq!(reset.status, 204, "{}", reset.body);
    assert_eq!(
        described(&admin, &topic, "cleanup.policy").await,
        (Some("delete".to_string()), "Default".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_lag_is_what_its_consumer_committed_against_the_partition_ends() {
    let (broker, http, cluster) = start(&[]);
    let admin = admin(&broker.bootstrap());
    let topic = unique_topic("v3-lag");
    let group = unique_topic("v3-lag-group");
    let created = tokio::time::timeout(
        ADMIN_TIMEOUT,
        admin.create_topics(
            &[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))],
            &options(),
        ),
    )
    .await
    .expect("CreateTopics timed out")
    .expect("CreateTopics");
    assert!(matches!(created.as_slice(), [Ok(_)]), "{created:?}");
    let producer = producer(&broker, &[]);
    for i in 0..16 {
        let partition = if i < 10 { 0 } else { 1 };
        producer
            .send(
                FutureRecord::to(&topic)
                    .partition(partition)
                    .payload("v")
                    .key("k"),
                Duration::from_secs(10),
            )
            .await
            .expect("produce");
    }

    // A live member that committed 4 of partition 0's 10 records and 1 of partition 1's 6.
    let consumer = consumer(
        &broker,
        &[("group.id", group.as_str()), ("client.id", "v3-lag-client")],
    );
    consumer.subscribe(&[&topic]).expect("subscribe");
    recv_n(&consumer, 1, Duration::from_secs(30)).await;
    let mut commit = TopicPartitionList::new();
    commit
        .add_partition_offset(&topic, 0, Offset::Offset(4))
        .expect("offset");
    commit
        .add_partition_offset(&topic, 1, Offset::Offset(1))
        .expect("offset");
    consumer
        .commit(&commit, CommitMode::Sync)
        .expect("commit offsets");

    let lags = request(
        http,
        "GET",
        &format!("/v3/clusters/{cluster}/consumer-groups/{group}/lags"),
        None,
    );
    assert_eq!(lags.status, 200, "{}", lags.body);
    let committed = consumer
        .committed(Duration::from_secs(10))
        .expect("committed offsets");
    let data = lags.body["data"].as_array().expect("lags");
    assert_eq!(data.len(), 2, "{}", lags.body);
    for partition in [0, 1] {
        let lag = data
            .iter()
            .find(|l| l["partition_id"] == partition)
            .unwrap_or_else(|| panic!("no lag for partition {partition}: {}", lags.body));
        let Offset::Offset(current) = committed
            .find_partition(&topic, partition)
            .expect("committed partition")
            .offset()
        else {
            panic!("partition {partition} has no committed offset");
        };
        let (_, high) = consumer
            .fetch_watermarks(&topic, partition, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(lag["current_offset"], current, "{lag}");
        assert_eq!(lag["log_end_offset"], high, "{lag}");
        assert_eq!(lag["lag"], high - current, "{lag}");
        assert_eq!(lag["client_id"], "v3-lag-client", "{lag}");
    }
    assert_eq!(data[0]["partition_id"], 0, "largest lag first");

    let summary = request(
        http,
        "GET",
        &format!("/v3/clusters/{cluster}/consumer-groups/{group}/lag-summary"),
        None,
    );
    assert_eq!(summary.status, 200, "{}", summary.body);
    assert_eq!(
        (&summary.body["max_lag"], &summary.body["total_lag"]),
        (&json!(6), &json!(11))
    );
    let consumers = request(
        http,
        "GET",
        &format!("/v3/clusters/{cluster}/consumer-groups/{group}/consumers"),
        None,
    );
    assert_eq!(consumers.body["data"][0]["client_id"], "v3-lag-client");
    assert_eq!(
        consumers.body["data"][0]["consumer_id"],
        summary.body["max_lag_consumer_id"]
    );
}

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_admin=\"admin-secret\";";
/// Kafka's ACL codes.
const RESOURCE_TOPIC: i8 = 2;
const PATTERN_LITERAL: i8 = 3;
const OPERATION_DESCRIBE: i8 = 8;
const PERMISSION_ALLOW: i8 = 3;

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A raw Kafka connection authenticated as the super user `admin`.
async fn as_admin(addr: SocketAddr) -> RawConn {
    let mut conn = RawConn::connect(addr).await;
    let handshake = SaslHandshakeRequest::default().with_mechanism(str("PLAIN"));
    assert_eq!(conn.request(1, &handshake).await.error_code, 0);
    let token = SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from_static(b"\0admin\0admin-secret"));
    assert_eq!(conn.request(2, &token).await.error_code, 0);
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_authorizer_the_http_caller_sees_only_what_its_acls_allow() {
    let jaas = format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}");
    let (broker, http, cluster) = start(&[
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        jaas.as_str(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ]);
    let hidden = unique_topic("v3-hidden");
    let shown = unique_topic("v3-shown");
    let mut admin = as_admin(broker.listener_addr("SASL_PLAINTEXT")).await;
    let created = admin
        .request(
            7,
            &CreateTopicsRequest::default()
                .with_topics(
                    [&hidden, &shown]
                        .iter()
                        .map(|t| {
                            CreatableTopic::default()
                                .with_name(TopicName(str(t)))
                                .with_num_partitions(1)
                                .with_replication_factor(1)
                        })
                        .collect(),
                )
                .with_timeout_ms(10_000),
        )
        .await;
    assert!(
        created.topics.iter().all(|t| t.error_code == 0),
        "{created:?}"
    );
    // The HTTP caller is not authenticated: User:ANONYMOUS, allowed to Describe one topic.
    let acl = admin
        .request(
            3,
            &CreateAclsRequest::default().with_creations(vec![AclCreation::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(str(&shown))
                .with_resource_pattern_type(PATTERN_LITERAL)
                .with_principal(str("User:ANONYMOUS"))
                .with_host(str("*"))
                .with_operation(OPERATION_DESCRIBE)
                .with_permission_type(PERMISSION_ALLOW)]),
        )
        .await;
    assert_eq!(acl.results[0].error_code, 0, "{acl:?}");

    let topics = format!("/v3/clusters/{cluster}/topics");
    let deadline = Instant::now() + SERVING_TIMEOUT;
    let listed: Vec<String> = loop {
        let answer = request(http, "GET", &topics, None);
        assert_eq!(answer.status, 200, "{}", answer.body);
        let names: Vec<String> = answer.body["data"]
            .as_array()
            .expect("topics")
            .iter()
            .filter_map(|t| t["topic_name"].as_str().map(str::to_string))
            .collect();
        // The ACL reaches this broker's image a moment after CreateAcls answers.
        if names.contains(&shown) || Instant::now() > deadline {
            break names;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(listed, vec![shown.clone()], "only the topic the ACL allows");

    let get_shown = request(http, "GET", &format!("{topics}/{shown}"), None);
    assert_eq!(get_shown.status, 200, "{}", get_shown.body);
    let get_hidden = request(http, "GET", &format!("{topics}/{hidden}"), None);
    assert_eq!(
        (get_hidden.status, &get_hidden.body["error_code"]),
        (403, &json!(40301)),
        "{}",
        get_hidden.body
    );
    // Describe is not DescribeConfigs, Delete or Create.
    let configs = request(http, "GET", &format!("{topics}/{shown}/configs"), None);
    assert_eq!(configs.status, 403, "{}", configs.body);
    let delete = request(http, "DELETE", &format!("{topics}/{shown}"), None);
    assert_eq!(delete.status, 403, "{}", delete.body);
    let create = request(
        http,
        "POST",
        &topics,
        Some(&json!({"topic_name": unique_topic("v3-denied")})),
    );
    assert_eq!(create.status, 403, "{}", create.body);
    let partitions = request(http, "GET", &format!("{topics}/{hidden}/partitions"), None);
    assert_eq!(partitions.status, 403, "{}", partitions.body);
}
