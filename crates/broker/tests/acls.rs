//! The ACL authorizer (`authorizer.class.name`, `super.users`): librdkafka as a user with no
//! ACLs is refused (TOPIC_AUTHORIZATION_FAILED) until a super user's CreateAcls grants it Write on
//! the topic; then it produces there and nothing else (reading stays refused); DeleteAcls takes
//! the grant away again; the ACL survives a restart; without an authorizer the ACL APIs answer
//! SECURITY_DISABLED; on three brokers an ACL made through one is described by all, and
//! followers replicate under the authorizer (their principal a super user, as Kafka requires).
//! `compat-tests/python/test_acls.py` runs the full matrix (kafka-acls.sh,
//! prefixed and deny ACLs, groups, admin APIs) against Millrace and Apache Kafka.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::FutureRecord;

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_admin=\"admin-secret\" user_alice=\"alice-secret\";";
/// Kafka's codes.
const TOPIC: i8 = 2;
const LITERAL: i8 = 3;
const WRITE: i8 = 4;
const ALLOW: i8 = 3;
const ANY: i8 = 1;
const SECURITY_DISABLED: i16 = 54;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn secured_broker() -> Broker {
    let jaas = format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}");
    Broker::start_with(&[
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        jaas.as_str(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ])
}

/// A raw connection authenticated as `user`.
async fn as_user(addr: SocketAddr, user: &str) -> RawConn {
    let mut conn = RawConn::connect(addr).await;
    let handshake = SaslHandshakeRequest::default().with_mechanism(str("PLAIN"));
    assert_eq!(conn.request(1, &handshake).await.error_code, 0);
    let token = SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from(format!("\0{user}\0{user}-secret").into_bytes()));
    let answer = conn.request(2, &token).await;
    assert_eq!(answer.error_code, 0, "authenticate {user}: {answer:?}");
    conn
}

fn write_acl(topic: &str, principal: &str) -> AclCreation {
    AclCreation::default()
        .with_resource_type(TOPIC)
        .with_resource_name(str(topic))
        .with_resource_pattern_type(LITERAL)
        .with_principal(str(principal))
        .with_host(str("*"))
        .with_operation(WRITE)
        .with_permission_type(ALLOW)
}

fn topic_filter(topic: &str) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(str(topic)))
        .with_pattern_type_filter(LITERAL)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

const ALICE: [(&str, &str); 4] = [
    ("security.protocol", "SASL_PLAINTEXT"),
    ("sasl.mechanisms", "PLAIN"),
    ("sasl.username", "alice"),
    ("sasl.password", "alice-secret"),
];

/// One produce attempt as alice: `Ok` or librdkafka's error code.
async fn alice_produces(sasl: &str, topic: &str) -> Result<(), RDKafkaErrorCode> {
    let producer = producer_at(sasl, &ALICE);
    let sent = producer
        .send(
            FutureRecord::to(topic).key("k").payload("v"),
            Duration::from_secs(10),
        )
        .await;
    match sent {
        Ok(_) => Ok(()),
        Err((KafkaError::MessageProduction(code), _)) => Err(code),
        Err((e, _)) => panic!("produce as alice: {e}"),
    }
}

/// An ABORT marker for producer 1000 on partition 0 of `topic`.
fn write_txn_markers(topic: &str) -> kafka_protocol::messages::WriteTxnMarkersRequest {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    kafka_protocol::messages::WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(1000.into())
            .with_producer_epoch(0)
            .with_transaction_result(false)
            .with_coordinator_epoch(0)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(kafka_protocol::messages::TopicName(str(topic)))
                .with_partition_indexes(vec![0])]),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acl_grants_alice_that_topic_and_nothing_else_until_deleted() {
    let mut broker = secured_broker();
    let addr = broker.listener_addr("SASL_PLAINTEXT");
    let sasl = addr.to_string();
    let topic = unique_topic("acl");
    let mut admin = as_user(addr, "admin").await;
    let created = admin
        .request(
            7,
            &kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
                kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                    .with_name(kafka_protocol::messages::TopicName(str(&topic)))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ]),
        )
        .await;
    assert_eq!(
        created.topics[0].error_code, 0,
        "admin creates: {created:?}"
    );

    // No ACL: alice may not write (nor may she alter ACLs).
    assert_eq!(
        alice_produces(&sasl, &topic).await,
        Err(RDKafkaErrorCode::TopicAuthorizationFailed)
    );
    let mut alice_conn = as_user(addr, "alice").await;
    let refused = alice_conn
        .request(
            3,
            &CreateAclsRequest::default().with_creations(vec![write_acl(&topic, "User:alice")]),
        )
        .await;
    assert_eq!(refused.results[0].error_code, CLUSTER_AUTHORIZATION_FAILED);
    // Nor may she write transaction markers (an inter-broker request: ClusterAction).
    let markers = alice_conn.request(1, &write_txn_markers(&topic)).await;
    assert_eq!(
        markers.markers[0].topics[0].partitions[0].error_code, CLUSTER_AUTHORIZATION_FAILED,
        "{markers:?}"
    );
    // The super user may; a topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION.
    let markers = admin
        .request(1, &write_txn_markers(&unique_topic("missing")))
        .await;
    assert_eq!(
        markers.markers[0].topics[0].partitions[0].error_code, UNKNOWN_TOPIC_OR_PARTITION,
        "{markers:?}"
    );

    // The super user grants Write on the topic: alice produces there, and only there.
    let granted = admin
        .request(
            3,
            &CreateAclsRequest::default().with_creations(vec![write_acl(&topic, "User:alice")]),
        )
        .await;
    assert_eq!(granted.results[0].error_code, 0, "{granted:?}");
    assert_eq!(alice_produces(&sasl, &topic).await, Ok(()));
    assert_eq!(
        alice_produces(&sasl, &unique_topic("other")).await,
        Err(RDKafkaErrorCode::TopicAuthorizationFailed)
    );
    let fetch = alice_conn
        .request(
            4,
            &kafka_protocol::messages::ListOffsetsRequest::default().with_topics(vec![
                kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default()
                    .with_name(kafka_protocol::messages::TopicName(str(&topic)))
                    .with_partitions(vec![
                        kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default()
                            .with_timestamp(-1),
                    ]),
            ]),
        )
        .await;
    // Write implies Describe: alice may look up the topic's offsets.
    assert_eq!(fetch.topics[0].partitions[0].error_code, 0, "{fetch:?}");

    let before = admin.request(2, &topic_filter(&topic)).await;
    assert_eq!(before.resources.len(), 1, "before restart: {before:?}");

    // It survives a restart.
    drop(admin);
    drop(alice_conn);
    assert!(broker.terminate().success());
    broker.restart();
    let addr = broker.listener_addr("SASL_PLAINTEXT");
    let sasl = addr.to_string();
    let mut admin = as_user(addr, "admin").await;
    let described = admin.request(2, &topic_filter(&topic)).await;
    assert_eq!(described.error_code, 0);
    assert_eq!(described.resources.len(), 1, "{described:?}");
    assert_eq!(
        described.resources[0].acls[0].principal.as_str(),
        "User:alice"
    );
    assert_eq!(alice_produces(&sasl, &topic).await, Ok(()));

    // Deleted: refused again (the answer lists what it removed).
    let deleted = admin
        .request(
            2,
            &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
                .with_resource_type_filter(TOPIC)
                .with_resource_name_filter(Some(str(&topic)))
                .with_pattern_type_filter(LITERAL)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(ANY)
                .with_permission_type(ANY)]),
        )
        .await;
    assert_eq!(
        deleted.filter_results[0].matching_acls.len(),
        1,
        "{deleted:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match alice_produces(&sasl, &topic).await {
            Err(RDKafkaErrorCode::TopicAuthorizationFailed) => break,
            other => assert!(
                Instant::now() < deadline,
                "alice still writes after DeleteAcls: {other:?}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authorizer_acl_requests_are_security_disabled() {
    let broker = Broker::start();
    let mut conn = RawConn::connect(broker.addr()).await;
    let described = conn.request(2, &topic_filter("t")).await;
    assert_eq!(described.error_code, SECURITY_DISABLED);
    let created = conn
        .request(
            3,
            &CreateAclsRequest::default().with_creations(vec![write_acl("t", "User:alice")]),
        )
        .await;
    assert_eq!(created.results[0].error_code, SECURITY_DISABLED);
    // And everything else stays open.
    let topic = unique_topic("open");
    let producer = producer(&broker, &[]);
    producer
        .send(
            FutureRecord::to(&topic).key("k").payload("v"),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|(e, _)| panic!("produce without an authorizer: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_the_same_on_every_broker_and_followers_replicate_under_the_authorizer() {
    // The inter-broker listener is PLAINTEXT, so brokers fetch as User:ANONYMOUS: a super user, as
    // Kafka requires of its brokers' principal (followers need ClusterAction).
    let c = cluster::TestCluster::start(
        3,
        &[
            "authorizer.class.name=millrace",
            "super.users=User:ANONYMOUS",
        ],
    );
    let topic = unique_topic("acl-cluster");
    let mut one = RawConn::connect(c.addr(1)).await;
    let granted = one
        .request(
            3,
            &CreateAclsRequest::default().with_creations(vec![write_acl(&topic, "User:alice")]),
        )
        .await;
    assert_eq!(granted.results[0].error_code, 0, "{granted:?}");
    for id in 1..=3 {
        let mut conn = RawConn::connect(c.addr(id)).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let described = conn.request(2, &topic_filter(&topic)).await;
            if described.resources.len() == 1 {
                assert_eq!(
                    described.resources[0].acls[0].principal.as_str(),
                    "User:alice"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} does not describe the ACL made through node 1: {described:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // acks=all on a topic that needs all three replicas in sync: the followers' fetches pass.
    let create = kafka_protocol::messages::CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                .with_name(kafka_protocol::messages::TopicName(str(&topic)))
                .with_num_partitions(1)
                .with_replication_factor(3)
                .with_configs(vec![
                    kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default(
                    )
                    .with_name(str("min.insync.replicas"))
                    .with_value(Some(str("3"))),
                ]),
        ]);
    let created = one.request(7, &create).await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let producer = producer_at(&c.bootstrap(), &[]);
    for i in 0..10 {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::to(&topic).key("k").payload(&value),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("acks=all with three replicas in sync: {e}"));
    }
}
