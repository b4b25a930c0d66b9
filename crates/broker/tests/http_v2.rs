//! REST Proxy v2 (and v3 produce) against a real broker over real HTTP: records produced over
//! HTTP are read by a Kafka client (rdkafka) with the same keys, values, headers, partitions and
//! offsets, and the reverse; a consumer instance reads and commits, and after a broker restart the
//! old instance is gone (40403) while a new instance of the group resumes at the committed offset;
//! consumer instances are bounded in number and expire when idle.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// One HTTP exchange at most.
const HTTP_TIMEOUT: Duration = Duration::from_secs(40);
/// How long a test waits for something it polls for.
const WAIT: Duration = Duration::from_secs(30);

/// A broker with an HTTP listener; its HTTP address.
fn start(settings: &[&str]) -> (Broker, SocketAddr) {
    let port = free_port();
    let mut args = vec!["--http-listen".to_string(), format!("127.0.0.1:{port}")];
    for s in settings {
        args.push("--set".to_string());
        args.push((*s).to_string());
    }
    let broker = Broker::start_with_args(&args);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    (broker, addr)
}

/// One HTTP/1.1 request: (status, body as JSON, or as a string when it is not JSON).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Value) {
    let (status, text) =
        tokio::time::timeout(HTTP_TIMEOUT, exchange(addr, method, path, headers, body))
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: no answer within {HTTP_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<(u16, String), std::io::Error> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        request.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or(""));
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((status, body))
}

/// A chunked body's data.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    for _ in 0..100_000 {
        let Some((size, after)) = rest.split_once("\r\n") else {
            break;
        };
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

const V2: &str = "application/vnd.kafka.v2+json";
const BINARY: &str = "application/vnd.kafka.binary.v2+json";

async fn create_topic(broker: &Broker, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &options,
        )
        .await
        .expect("CreateTopics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Creates a binary consumer instance of `group` reading from the earliest offset; its path.
async fn new_instance(http: SocketAddr, group: &str, name: &str, extra: Value) -> String {
    let mut body = json!({"name": name, "format": "binary", "auto.offset.reset": "earliest"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, answer) = call(
        http,
        "POST",
        &format!("/consumers/{group}"),
        &[("Content-Type", V2)],
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["instance_id"], name);
    assert!(
        answer["base_uri"]
            .as_str()
            .is_some_and(|u| u.ends_with(&format!("/consumers/{group}/instances/{name}"))),
        "{answer}"
    );
    format!("/consumers/{group}/instances/{name}")
}

/// Reads records of an instance until `n` arrived (bounded by [`WAIT`]).
async fn read_n(http: SocketAddr, instance: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records within {WAIT:?}: {out:?}",
            out.len()
        );
        let (status, answer) = call(
            http,
            "GET",
            &format!("{instance}/records?timeout=1000"),
            &[("Accept", BINARY)],
            None,
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        out.extend(answer.as_array().cloned().unwrap_or_default());
    }
    out
}

fn decode(v: &Value) -> Option<Vec<u8>> {
    v.as_str()
        .map(|s| B64.decode(s).expect("base64 from the proxy"))
}

#[tokio::test]
async fn records_cross_between_http_and_a_kafka_client_unchanged() {
    let (broker, http) = start(&[]);
    let topic = unique_topic("http-cross");
    create_topic(&broker, &topic, 3).await;

    // HTTP → Kafka: keys, explicit partitions, and a keyless record.
    let records = json!({"records": [
        {"key": B64.encode("alpha"), "value": B64.encode("v-alpha")},
        {"key": B64.encode("beta"), "value": B64.encode("v-beta")},
        {"value": B64.encode("v-p2"), "partition": 2},
        {"value": B64.encode("v-none")},
        {"key": B64.encode("alpha"), "value": null},
    ]});
    let (status, answer) = call(
        http,
        "POST",
        &format!("/topics/{topic}"),
        &[("Content-Type", BINARY)],
        Some(&records.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let offsets = answer["offsets"].as_array().expect("offsets").clone();
    assert_eq!(offsets.len(), 5, "{answer}");
    assert!(
        offsets.iter().all(|o| o["error_code"].is_null()),
        "{answer}"
    );
    assert_eq!(offsets[2]["partition"], 2);
    assert_eq!(
        offsets[0]["partition"], offsets[4]["partition"],
        "one key, one partition"
    );

    // A Kafka producer with Kafka's partitioner puts the same keys on the same partitions.
    let kafka_producer = producer(&broker, &[("partitioner", "murmur2_random")]);
    for (i, key) in ["alpha", "beta"].iter().enumerate() {
        let delivery = kafka_producer
            .send(
                FutureRecord::<str, str>::to(&topic)
                    .key(key)
                    .payload("from-kafka"),
                Duration::from_secs(10),
            )
            .await
            .expect("produce with rdkafka");
        assert_eq!(
            i64::from(delivery.partition),
            offsets[i]["partition"].as_i64().expect("partition"),
            "key {key}: the proxy and Kafka's murmur2 partitioner agree"
        );
    }

    let consumer = consumer(&broker, &[]);
    assign(
        &consumer,
        &topic,
        &[
            (0, Offset::Beginning),
            (1, Offset::Beginning),
            (2, Offset::Beginning),
        ],
    );
    let seen = recv_n(&consumer, 7, WAIT).await;
    let sent: Vec<(Option<&str>, Option<&str>)> = vec![
        (Some("alpha"), Some("v-alpha")),
        (Some("beta"), Some("v-beta")),
        (None, Some("v-p2")),
        (None, Some("v-none")),
        (Some("alpha"), None),
    ];
    for (i, (key, value)) in sent.iter().enumerate() {
        let (p, o) = (
            offsets[i]["partition"].as_i64().expect("partition"),
            offsets[i]["offset"].as_i64().expect("offset"),
        );
        let m = seen
            .iter()
            .find(|m| i64::from(m.partition()) == p && m.offset() == o)
            .unwrap_or_else(|| panic!("record {i} not at {p}/{o}"));
        assert_eq!(m.key(), key.map(str::as_bytes), "record {i}");
        assert_eq!(m.payload(), value.map(str::as_bytes), "record {i}");
    }

    // Kafka → HTTP: a consumer instance of a group sees the Kafka client's records, headers aside
    // (v2 records have none), at the partitions and offsets Kafka reported.
    let topic2 = unique_topic("http-cross-back");
    create_topic(&broker, &topic2, 2).await;
    let mut produced = Vec::new();
    for i in 0..6 {
        let key = format!("k{i}");
        let value = format!("value-{i}");
        let delivery = kafka_producer
            .send(
                FutureRecord::to(&topic2).key(&key).payload(&value),
                Duration::from_secs(10),
            )
            .await
            .expect("produce with rdkafka");
        produced.push((key, value, delivery.partition, delivery.offset));
    }
    let group = unique_topic("http-group");
    let instance = new_instance(http, &group, "reader", json!({})).await;
    let (status, answer) = call(
        http,
        "POST",
        &format!("{instance}/subscription"),
        &[("Content-Type", V2)],
        Some(&json!({"topics": [topic2]}).to_string()),
    )
    .await;
    assert_eq!(status, 204, "{answer}");
    let read = read_n(http, &instance, produced.len()).await;
    assert_eq!(read.len(), produced.len(), "{read:?}");
    for (key, value, partition, offset) in &produced {
        let r = read
            .iter()
            .find(|r| r["partition"] == *partition && r["offset"] == *offset)
            .unwrap_or_else(|| panic!("{key} not read at {partition}/{offset}: {read:?}"));
        assert_eq!(r["topic"], topic2.as_str());
        assert_eq!(decode(&r["key"]).as_deref(), Some(key.as_bytes()));
        assert_eq!(decode(&r["value"]).as_deref(), Some(value.as_bytes()));
    }
    let (status, _) = call(http, "DELETE", &instance, &[], None).await;
    assert_eq!(status, 204);
}

#[tokio::test]
async fn v3_records_keep_their_headers_and_a_stream_answers_each_record() {
    let (broker, http) = start(&[]);
    let cluster = broker
        .ready_line()
        .split("cluster ")
        .nth(1)
        .and_then(|s| s.split(|c: char| c == ')' || c.is_whitespace()).next())
        .expect("the ready line names the cluster")
        .to_string();
    let topic = unique_topic("http-v3");
    create_topic(&broker, &topic, 2).await;
    let path = format!("/v3/clusters/{cluster}/topics/{topic}/records");
    let one = json!({
        "partition_id": 1,
        "headers": [{"name": "h", "value": B64.encode("one")}, {"name": "h", "value": null}],
        "key": {"type": "STRING", "data": "k"},
        "value": {"type": "JSON", "data": {"n": 1}},
        "timestamp": "2021-02-05T19:14:42Z"
    });
    let (status, answer) = call(
        http,
        "POST",
        &path,
        &[("Content-Type", "application/json")],
        Some(&one.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["error_code"], 200);
    assert_eq!(answer["partition_id"], 1);
    assert_eq!(answer["offset"], 0);
    assert_eq!(answer["timestamp"], "2021-02-05T19:14:42.000Z");
    assert_eq!(answer["value"]["type"], "JSON");
    assert_eq!(answer["value"]["size"], 7);

    // Several records back to back: one report per record, in order, the bad one in its place.
    let stream = format!(
        "{}\n{}\n{}",
        json!({"partition_id": 0, "value": {"type": "BINARY", "data": B64.encode("a")}}),
        json!({"partition_id": 0, "value": {"type": "BINARY", "data": 12}}),
        json!({"partition_id": 0, "value": {"type": "STRING", "data": "c"}}),
    );
    let (status, text) = exchange(
        http,
        "POST",
        &path,
        &[("Content-Type", "application/json")],
        Some(&stream),
    )
    .await
    .expect("the streamed produce");
    assert_eq!(status, 200, "{text}");
    let reports: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON report per line"))
        .collect();
    assert_eq!(reports.len(), 3, "{text}");
    assert_eq!(reports[0]["offset"], 0);
    assert_eq!(reports[1]["error_code"], 400, "{text}");
    assert_eq!(reports[2]["offset"], 1);

    let (status, answer) = call(
        http,
        "POST",
        &format!("/v3/clusters/not-{cluster}/topics/{topic}/records"),
        &[("Content-Type", "application/json")],
        Some(&one.to_string()),
    )
    .await;
    assert_eq!(status, 404, "{answer}");

    let consumer = consumer(&broker, &[]);
    assign(&consumer, &topic, &[(1, Offset::Beginning)]);
    let m = recv_n(&consumer, 1, WAIT).await.remove(0);
    assert_eq!(m.key(), Some(&b"k"[..]));
    assert_eq!(m.payload(), Some(&br#"{"n":1}"#[..]));
    assert_eq!(m.timestamp().to_millis(), Some(1_612_552_482_000));
    let headers = m.headers().expect("headers");
    let got: Vec<(String, Option<Vec<u8>>)> = headers
        .iter()
        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("h".to_string(), Some(b"one".to_vec())),
            ("h".to_string(), None)
        ]
    );
}

#[tokio::test]
async fn an_instance_commits_and_after_a_restart_a_new_instance_resumes_there() {
    let (mut broker, http) = start(&[
        "group.consumer.session.timeout.ms=6000",
        "group.consumer.min.session.timeout.ms=6000",
        "group.consumer.heartbeat.interval.ms=1000",
        "group.consumer.min.heartbeat.interval.ms=1000",
    ]);
    let topic = unique_topic("http-resume");
    create_topic(&broker, &topic, 1).await;
    let records: Vec<Value> = (0..10)
        .map(|i| json!({"value": B64.encode(format!("r{i}"))}))
        .collect();
    let (status, answer) = call(
        http,
        "POST",
        &format!("/topics/{topic}/partitions/0"),
        &[("Content-Type", BINARY)],
        Some(&json!({ "records": records }).to_string()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    let group = unique_topic("http-resume-group");
    let instance = new_instance(
        http,
        &group,
        "first",
        json!({"auto.commit.enable": "false"}),
    )
    .await;
    let (status, _) = call(
        http,
        "POST",
        &format!("{instance}/subscription"),
        &[("Content-Type", V2)],
        Some(&json!({"topics": [topic]}).to_string()),
    )
    .await;
    assert_eq!(status, 204);
    let read = read_n(http, &instance, 10).await;
    assert_eq!(read[4]["offset"], 4);

    // Commit record 4 as consumed: Confluent commits offset + 1.
    let commit = json!({"offsets": [{"topic": topic, "partition": 0, "offset": 4}]});
    let (status, answer) = call(
        http,
        "POST",
        &format!("{instance}/offsets"),
        &[("Content-Type", V2)],
        Some(&commit.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let ask = json!({"partitions": [{"topic": topic, "partition": 0}]}).to_string();
    let (status, answer) = call(
        http,
        "GET",
        &format!("{instance}/offsets"),
        &[("Content-Type", V2)],
        Some(&ask),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["offsets"][0]["offset"], 5, "{answer}");

    let status = broker.terminate();
    assert!(status.success(), "{status:?}");
    broker.restart();
    wait_ready(http).await;

    let (status, answer) = call(
        http,
        "GET",
        &format!("{instance}/records?timeout=100"),
        &[("Accept", BINARY)],
        None,
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error_code"], 40403, "{answer}");

    let again = new_instance(http, &group, "second", json!({})).await;
    let (status, _) = call(
        http,
        "POST",
        &format!("{again}/subscription"),
        &[("Content-Type", V2)],
        Some(&json!({"topics": [topic]}).to_string()),
    )
    .await;
    assert_eq!(status, 204);
    let read = read_n(http, &again, 5).await;
    assert_eq!(
        read[0]["offset"], 5,
        "resumes at the committed offset: {read:?}"
    );
    assert_eq!(decode(&read[0]["value"]).as_deref(), Some(&b"r5"[..]));
}

/// Polls `/ready` until it answers 200 (bounded).
async fn wait_ready(http: SocketAddr) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(Ok((200, _))) = tokio::time::timeout(
            Duration::from_secs(2),
            exchange(http, "GET", "/ready", &[], None),
        )
        .await
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/ready did not answer 200 within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn consumer_instances_are_bounded_and_expire_when_idle() {
    let (_broker, http) = start(&[
        "millrace.rest.consumer.instances.max=2",
        "millrace.rest.consumer.instance.timeout.ms=1500",
    ]);
    let group = unique_topic("http-bound");
    let a = new_instance(http, &group, "a", json!({})).await;
    new_instance(http, &group, "b", json!({})).await;
    let body = json!({"name": "c"}).to_string();
    let (status, answer) = call(
        http,
        "POST",
        &format!("/consumers/{group}"),
        &[("Content-Type", V2)],
        Some(&body),
    )
    .await;
    assert_eq!(status, 429, "a third instance is over the bound: {answer}");
    let (status, answer) = call(
        http,
        "POST",
        &format!("/consumers/{group}"),
        &[("Content-Type", V2)],
        Some(&json!({"name": "a"}).to_string()),
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error_code"], 40902);

    // Used instances stay; idle ones expire and make room.
    let b = format!("/consumers/{group}/instances/b");
    let deadline = Instant::now() + WAIT;
    let mut used_until_expiry = 0;
    loop {
        let (status, answer) = call(http, "GET", &format!("{b}/subscription"), &[], None).await;
        assert_eq!(status, 200, "an instance in use stays: {answer}");
        let (status, answer) = call(
            http,
            "POST",
            &format!("/consumers/{group}"),
            &[("Content-Type", V2)],
            Some(&body),
        )
        .await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 429, "{answer}");
        assert!(
            Instant::now() < deadline,
            "no instance expired within {WAIT:?}"
        );
        used_until_expiry += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        used_until_expiry > 0,
        "the bound held until the instances expired"
    );
    let (status, answer) = call(http, "GET", &format!("{a}/subscription"), &[], None).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error_code"], 40403);
    let (status, answer) = call(http, "GET", &format!("{b}/subscription"), &[], None).await;
    assert_eq!(status, 200, "{answer}");
}
