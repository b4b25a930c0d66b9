"""Goal: a 3-node cluster with no PLAINTEXT Kafka listener at all — each node's one Kafka listener
is SASL_SSL (TLS + SASL/PLAIN), and it is the inter-broker listener — serves confluent-kafka and
replicates over it (issue 36, "broker-to-broker TLS and SASL"):

- a follower killed with SIGKILL misses records written meanwhile, fetches them over the SASL_SSL
  listener after its restart (it is back in the ISR), and serves them as the leader once the old
  leader is killed in turn: every acknowledged record reads back, in order;
- transactions whose partitions have leaders on several brokers commit and abort: the
  coordinator's WriteTxnMarkers reach the other leaders over the SASL_SSL listener, so a
  read_committed consumer sees every committed record and no aborted one;
- with the authorizer on, the brokers' own requests (replica fetches, WriteTxnMarkers: ClusterAction)
  pass as User:broker, a super user, while bob, with no ACL, cannot produce.

Brokers authenticate to each other as User:broker (the `username`/`password` of the listener's
JAAS line, `sasl.mechanism.inter.broker.protocol=PLAIN`) and check each other's certificates
against the CA; the controller listener is SSL with client certificates required (mutual TLS), so
no link of the cluster is plaintext. Runs on Apache Kafka 4.4 as well (reference run: 3 Kafka
nodes with the same settings).
"""

from __future__ import annotations

import time
from typing import Dict, List

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import Cluster, unique_topic, wait_until
from tls_material import make_material

OP_TIMEOUT = 30.0
CATCH_UP_TIMEOUT = 90.0  # a restarted follower back in the ISR (Kafka's JVM restarts slowly)
N = 50
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_alice="alice-secret" user_bob="bob-secret";')
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The brokers (SASL), the nodes on the controller listener (their certificate's subject: Kafka
# authorizes controller traffic too) and alice are super users; bob has no ACL.
SUPER_USERS = "User:broker;User:CN=millrace-test-node;User:alice"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    mat = make_material(tmp_path_factory.mktemp("pki"))
    settings = {
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(mat.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(mat.ca),
        # The controller listener: mutual TLS (node.pem serves both ends).
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "listener.name.controller.ssl.keystore.location": str(mat.node),
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": AUTHORIZER,
        "super.users": SUPER_USERS,
        "group.initial.rebalance.delay.ms": "0",
        "broker.session.timeout.ms": "3000",
        "broker.heartbeat.interval.ms": "500",
    }
    with Cluster(3, settings, listener="SASL_SSL") as cluster:
        conf = {
            "bootstrap.servers": cluster.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "ssl.ca.location": str(mat.ca),
            "ssl.endpoint.identification.algorithm": "https",
        }
        yield cluster, conf


def create(conf: Dict[str, object], topic: str, partitions: int, configs: Dict[str, str]) -> None:
    adm = AdminClient(conf)
    futures = adm.create_topics([NewTopic(topic, partitions, 3, config=configs)],
                                operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT)
    futures[topic].result(timeout=OP_TIMEOUT)

    def ready():
        t = adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics.get(topic)
        return (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values()))
    wait_until(ready, timeout=OP_TIMEOUT, what=f"{topic} has leaders")


def partition(conf: Dict[str, object], topic: str, index: int):
    md = AdminClient(conf).list_topics(topic=topic, timeout=OP_TIMEOUT)
    return md.topics[topic].partitions[index]


def produce(conf: Dict[str, object], topic: str, values: List[bytes], acks: str) -> None:
    p = Producer({**conf, "acks": acks, "linger.ms": 5, "message.timeout.ms": 30000})
    errors: List[str] = []
    for v in values:
        p.produce(topic, value=v, partition=0,
                  on_delivery=lambda err, msg: err is not None and errors.append(str(err)))
        p.poll(0)
    assert p.flush(60) == 0, "records still undelivered after 60 s"
    assert not errors, f"delivery failed: {errors[:5]}"


def read(conf: Dict[str, object], topic: str, partitions: int, count: int,
         isolation: str = "read_committed") -> List[bytes]:
    """Every record of the topic's partitions, from the start to their end (at least COUNT)."""
    c = Consumer({**conf, "group.id": unique_topic("g"), "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation})
    try:
        c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
        out: List[bytes] = []
        at_end = set()
        deadline = time.monotonic() + OP_TIMEOUT
        while not (len(out) >= count and len(at_end) == partitions):
            assert time.monotonic() < deadline, f"read {len(out)} of {count} records"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_end.discard(msg.partition())
            out.append(msg.value())
        return out
    finally:
        c.close()


def test_a_restarted_follower_catches_up_over_sasl_ssl(secure):
    cluster, conf = secure
    topic = unique_topic("secure-replication")
    create(conf, topic, 1, {"min.insync.replicas": "2"})
    first = [b"before-%d" % i for i in range(N)]
    produce(conf, topic, first, acks="all")
    p = partition(conf, topic, 0)
    follower = next(r for r in p.replicas if r != p.leader)

    cluster.nodes[follower].kill()
    missed = [b"missed-%d" % i for i in range(N)]
    produce(conf, topic, missed, acks="all")
    cluster.nodes[follower].start()
    wait_until(lambda: follower in partition(conf, topic, 0).isrs, timeout=CATCH_UP_TIMEOUT,
               what=f"node {follower} back in the ISR of {topic}")

    # The old leader goes: whoever leads now fetched every record over SASL_SSL.
    leader = partition(conf, topic, 0).leader
    cluster.nodes[leader].kill()
    wait_until(lambda: partition(conf, topic, 0).leader not in (-1, leader),
               timeout=CATCH_UP_TIMEOUT, what=f"a new leader for {topic}")
    assert read(conf, topic, 1, 2 * N, isolation="read_uncommitted") == first + missed
    cluster.nodes[leader].start()


def test_transaction_markers_reach_leaders_on_other_brokers(secure):
    cluster, conf = secure
    topic = unique_topic("secure-txn")
    partitions = 3
    create(conf, topic, partitions, {})
    leaders = {partition(conf, topic, i).leader for i in range(partitions)}
    assert len(leaders) >= 2, f"every partition led by one broker: {leaders}"

    p = Producer({**conf, "transactional.id": unique_topic("txn"), "linger.ms": 5})
    p.init_transactions(OP_TIMEOUT)
    committed = []
    p.begin_transaction()
    for i in range(N):
        value = b"committed-%d" % i
        p.produce(topic, value=value, partition=i % partitions)
        committed.append(value)
    p.commit_transaction(OP_TIMEOUT)
    p.begin_transaction()
    for i in range(N):
        p.produce(topic, value=b"aborted-%d" % i, partition=i % partitions)
    p.flush(OP_TIMEOUT)
    p.abort_transaction(OP_TIMEOUT)
    # A last committed record per partition: read_committed reaches it only past the abort markers.
    p.begin_transaction()
    for i in range(partitions):
        value = b"last-%d" % i
        p.produce(topic, value=value, partition=i)
        committed.append(value)
    p.commit_transaction(OP_TIMEOUT)

    got = read(conf, topic, partitions, len(committed))
    assert sorted(got) == sorted(committed), f"read_committed: {len(got)} records"


def test_the_authorizer_knows_the_brokers_and_refuses_bob(secure):
    cluster, conf = secure
    topic = unique_topic("secure-acl")
    create(conf, topic, 1, {})
    # The brokers replicate under the authorizer (acks=all needs the followers' fetches).
    produce(conf, topic, [b"from-alice"], acks="all")
    bob = {**conf, "sasl.username": "bob", "sasl.password": "bob-secret"}
    p = Producer({**bob, "acks": "all", "message.timeout.ms": 10000})
    errors = []
    p.produce(topic, value=b"from-bob", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert errors and errors[0] is not None, f"bob's record: {errors}"
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors[0]
    assert read(conf, topic, 1, 1, isolation="read_uncommitted") == [b"from-alice"]
