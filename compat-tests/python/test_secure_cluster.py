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

The security suite (test_tls.py, test_sasl.py, test_scram.py, test_acls.py check one broker) on
this cluster: what a cluster adds to it is that every node must hold the same credentials and the
same ACLs, made through any node, and keep them across a crash of all of them. So, for every node:

- TLS: Metadata from any node names all three at their SASL_SSL listeners; a client that does not
  trust the CA and a client with no TLS at all are refused at the connection;
- SASL/PLAIN: a wrong password and an unknown user are refused with the same error (Kafka's
  "Invalid username or password");
- SASL/SCRAM: credentials made with Kafka's kafka-configs through node 1 (carol SCRAM-SHA-256,
  dave SCRAM-SHA-512) are described by node 2 and log in on every node; carol with the other
  mechanism is refused; dave's credential deleted through node 3 refuses him on every node;
  Kafka's console producer and consumer round trip as carol over SCRAM-SHA-256;
- ACLs: bob, with no ACL, can write to no partition and cannot read; ACLs made through node 2 let
  him write to every partition (whichever node leads it) and read as a group member; a DENY made
  through node 3 beats them on every leader; deleting them through node 1 refuses him again;
- all of it survives SIGKILL of all three nodes at once: the credentials and ACLs come back from
  each node's own metadata log.
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType, ScramCredentialInfo,
                                   ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion)

from millrace import Cluster, ClusterNode, unique_topic, wait_until
from secure_clients import await_login, java_tool, logs_in, pem_truststore, refused_connection, refused_login
from tls_material import TlsMaterial, make_material, write_server_cert

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
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
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


# ------------------------------------------------------------------ the security suite, per node
SETTLE_TIMEOUT = 30.0  # a credential or ACL change reaching every node (Kafka: the metadata log)
TLS_REFUSE_TIMEOUT = 2.0  # a client refused at the TLS handshake (it never gets metadata)
TLS_REFUSED = {KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN}
PLAIN_REFUSED = r": SASL authentication error: Authentication failed: Invalid username or password$"
CAROL = ("carol", "carol-secret", "SCRAM-SHA-256", 8192)
DAVE = ("dave", "dave-secret", "SCRAM-SHA-512", 4096)
RT, PT, OP, PM = ResourceType, ResourcePatternType, AclOperation, AclPermissionType


def scram_refused(mechanism: str) -> str:
    return (r": SASL authentication error: " + re.escape(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")
        + r"$")


def on_node(conf: Dict[str, object], node: ClusterNode) -> Dict[str, object]:
    """CONF bootstrapped on NODE alone: a login refused there is refused by that node."""
    return {**conf, "bootstrap.servers": node.bootstrap}


def as_user(conf: Dict[str, object], user: str, password: str, mechanism: str = "PLAIN") -> Dict[str, object]:
    return {**conf, "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}


def java_client_config(tmp: Path, conf: Dict[str, object], name: str) -> Path:
    """A Java client properties file for CONF's user (PLAIN or SCRAM) over SASL_SSL."""
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if conf["sasl.mechanisms"] == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": str(conf["sasl.mechanisms"]),
        "sasl.jaas.config": f'{module} required username="{conf["sasl.username"]}" '
                            f'password="{conf["sasl.password"]}";',
        **pem_truststore(Path(str(conf["ssl.ca.location"]))),
    }
    path = tmp / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def kafka_configs(cp: str, node: ClusterNode, command_config: Path, *args: str):
    """Kafka's kafka-configs (ConfigCommand) against NODE."""
    proc = java_tool(cp, "kafka.admin.ConfigCommand",
                     ["--bootstrap-server", node.bootstrap, "--command-config", str(command_config), *args])
    assert proc.returncode == 0, f"kafka-configs {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def attempt_produce(conf: Dict[str, object], topic: str, partition_index: int) -> Optional[KafkaError]:
    """One record to one partition (acks=all, no retries past 10 s): None, or the delivery error."""
    p = Producer({**conf, "acks": "all", "linger.ms": 0, "message.timeout.ms": 10000, "log_level": 0})
    result: List[Optional[KafkaError]] = []
    p.produce(topic, value=b"probe", partition=partition_index, on_delivery=lambda err, msg: result.append(err))
    p.flush(20)
    assert result, f"no delivery report for {topic}[{partition_index}] within 20 s"
    return result[0]


def writes_everywhere(conf: Dict[str, object], topic: str, partitions: int) -> bool:
    return all(attempt_produce(conf, topic, i) is None for i in range(partitions))


def refused_everywhere(conf: Dict[str, object], topic: str, partitions: int) -> bool:
    errors = [attempt_produce(conf, topic, i) for i in range(partitions)]
    return all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors)


def high_watermark(conf: Dict[str, object], topic: str) -> int:
    c = Consumer({**conf, "group.id": unique_topic("hw")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=OP_TIMEOUT)[1]
    finally:
        c.close()


def leaders(conf: Dict[str, object], topic: str, partitions: int) -> Set[int]:
    return {partition(conf, topic, i).leader for i in range(partitions)}


def acl_keys(conf: Dict[str, object], principal: str) -> Set[Tuple[str, str, str, str]]:
    """PRINCIPAL's ACLs as (resource name, operation, permission, pattern type), as CONF's node
    describes them."""
    adm = AdminClient(conf)
    flt = AclBindingFilter(RT.ANY, None, PT.ANY, principal, None, OP.ANY, PM.ANY)
    got = adm.describe_acls(flt, request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT)
    return {(b.name, b.operation.name, b.permission_type.name, b.resource_pattern_type.name) for b in got}


def test_every_node_names_the_cluster_and_refuses_bad_logins_and_bad_tls(secure):
    cluster, conf = secure
    other_ca = str(Path(str(conf["ssl.ca.location"])).parent / "other-ca.pem")
    every = {("127.0.0.1", n.port) for n in cluster.nodes.values()}
    for node in cluster.nodes.values():
        here = on_node(conf, node)
        md = AdminClient(here).list_topics(timeout=OP_TIMEOUT)
        assert {(b.host, b.port) for b in md.brokers.values()} == every, \
            f"node {node.id}'s Metadata names {md.brokers}, want every node's SASL_SSL listener"
        wrong = refused_login(as_user(here, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION, PLAIN_REFUSED)
        if node.id == cluster.ids[0]:
            unknown = refused_login(as_user(here, "mallory", "alice-secret"), KafkaError._AUTHENTICATION)
            assert wrong == unknown and len(wrong) == 1, f"node {node.id}: {wrong} vs {unknown}"
        errors = refused_connection({**here, "ssl.ca.location": other_ca}, TLS_REFUSE_TIMEOUT, TLS_REFUSED, log_level=3)
        assert any("certificate verify failed" in e.str() for e in errors), \
            f"node {node.id}, a client not trusting the CA: {[e.str() for e in errors][:3]}"
        refused_connection({"bootstrap.servers": node.bootstrap}, TLS_REFUSE_TIMEOUT, TLS_REFUSED)
        assert logs_in(here), f"node {node.id} refuses alice after the refusals"


@pytest.mark.timeout(1000)  # the first run may resolve the Kafka tools jars with mvn
def test_scram_credentials_made_through_one_node_hold_on_every_node(secure, java_cp, tmp_path):
    cluster, conf = secure
    nodes = [cluster.nodes[i] for i in cluster.ids]
    alice_cfg = java_client_config(tmp_path, conf, "alice")
    for user, password, mechanism, iterations in (CAROL, DAVE):
        out = kafka_configs(java_cp, nodes[0], alice_cfg, "--alter", "--entity-type", "users", "--entity-name", user,
                            "--add-config", f"{mechanism}=[iterations={iterations},password={password}]")
        assert f"Completed updating config for user {user}." in out, out
    described = kafka_configs(java_cp, nodes[1], alice_cfg, "--describe", "--entity-type", "users")
    for user, _, mechanism, iterations in (CAROL, DAVE):
        assert (f"SCRAM credential configs for user-principal '{user}' are {mechanism}=iterations={iterations}"
                in described.splitlines()), f"node {nodes[1].id} describes {described!r}"
    carol = as_user(conf, *CAROL[:3])
    dave = as_user(conf, *DAVE[:3])
    for node in nodes:
        await_login(on_node(carol, node), True)
        await_login(on_node(dave, node), True)
    refused_login(on_node(as_user(conf, "carol", "carol-secret", "SCRAM-SHA-512"), nodes[2]),
                  KafkaError._AUTHENTICATION, scram_refused("SCRAM-SHA-512"))
    refused_login(on_node(as_user(conf, "carol", "not-carol-secret", "SCRAM-SHA-256"), nodes[1]),
                  KafkaError._AUTHENTICATION, scram_refused("SCRAM-SHA-256"))

    # Kafka's Java client as carol (SCRAM-SHA-256), through ACLs of her own.
    topic = unique_topic("secure-scram-java")
    create(conf, topic, 1, {})
    adm = AdminClient(on_node(conf, nodes[1]))
    grants = [AclBinding(RT.TOPIC, topic, PT.LITERAL, "User:carol", "*", op, PM.ALLOW) for op in (OP.WRITE, OP.READ)]
    grants.append(AclBinding(RT.GROUP, "*", PT.LITERAL, "User:carol", "*", OP.READ, PM.ALLOW))
    for f in adm.create_acls(grants, request_timeout=OP_TIMEOUT).values():
        f.result(timeout=OP_TIMEOUT)
    wait_until(lambda: attempt_produce(carol, topic, 0) is None, timeout=SETTLE_TIMEOUT, interval=0.5,
               what="carol's ACLs to take effect")
    probes = high_watermark(conf, topic)
    carol_cfg = java_client_config(tmp_path, carol, "carol")
    lines = [f"java carol line {i}" for i in range(20)]
    prod = java_tool(java_cp, "org.apache.kafka.tools.ConsoleProducer",
                     ["--bootstrap-server", nodes[2].bootstrap, "--topic", topic, "--producer.config", str(carol_cfg)],
                     stdin="".join(line + "\n" for line in lines))
    assert prod.returncode == 0, f"ConsoleProducer exited {prod.returncode}: {prod.stderr[-3000:]}"
    cons = java_tool(java_cp, "org.apache.kafka.tools.consumer.ConsoleConsumer",
                     ["--bootstrap-server", nodes[0].bootstrap, "--topic", topic, "--consumer.config", str(carol_cfg),
                      "--partition", "0", "--offset", str(probes), "--max-messages", str(len(lines)),
                      "--timeout-ms", "30000"])
    assert cons.returncode == 0, f"ConsoleConsumer exited {cons.returncode}: {cons.stderr[-3000:]}"
    assert cons.stdout.splitlines() == lines, f"ConsoleConsumer read {cons.stdout[:500]!r}"

    # dave's credential deleted through node 3: refused by every node.
    adm3 = AdminClient(on_node(conf, nodes[2]))
    futures = adm3.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)],
                                                request_timeout=OP_TIMEOUT)
    futures["dave"].result(timeout=OP_TIMEOUT)
    for node in nodes:
        await_login(on_node(dave, node), False)
    refused_login(on_node(dave, nodes[0]), KafkaError._AUTHENTICATION, scram_refused("SCRAM-SHA-512"))
    assert logs_in(on_node(carol, nodes[0])), "carol is refused after dave's deletion"


def test_acls_made_through_one_node_hold_on_every_leader(secure):
    cluster, conf = secure
    nodes = [cluster.nodes[i] for i in cluster.ids]
    topic = unique_topic("secure-acls")
    group = unique_topic("secure-acls-group")
    partitions = 6
    create(conf, topic, partitions, {})
    assert len(leaders(conf, topic, partitions)) >= 2, f"every partition led by one node: {leaders(conf, topic, partitions)}"
    bob = as_user(conf, "bob", "bob-secret")
    assert refused_everywhere(bob, topic, partitions), "bob, with no ACL, wrote to a partition"
    assert acl_keys(conf, "User:bob") == set()

    allow = [AclBinding(RT.TOPIC, topic, PT.LITERAL, "User:bob", "*", OP.WRITE, PM.ALLOW),
             AclBinding(RT.TOPIC, topic, PT.LITERAL, "User:bob", "*", OP.READ, PM.ALLOW),
             AclBinding(RT.GROUP, group, PT.LITERAL, "User:bob", "*", OP.READ, PM.ALLOW)]
    adm2 = AdminClient(on_node(conf, nodes[1]))  # held until the answers are in (a dropped client fails them)
    for f in adm2.create_acls(allow, request_timeout=OP_TIMEOUT).values():
        f.result(timeout=OP_TIMEOUT)
    wait_until(lambda: writes_everywhere(bob, topic, partitions), timeout=SETTLE_TIMEOUT, interval=0.5,
               what="bob's Write ACL to take effect on every partition's leader")
    want = {(topic, "WRITE", "ALLOW", "LITERAL"), (topic, "READ", "ALLOW", "LITERAL"), (group, "READ", "ALLOW", "LITERAL")}
    for node in nodes:
        wait_until(lambda: acl_keys(on_node(conf, node), "User:bob") == want, timeout=SETTLE_TIMEOUT, interval=0.5,
                   what=f"node {node.id} to describe bob's ACLs")

    # bob reads as a member of his group (JoinGroup, SyncGroup, OffsetCommit on its coordinator).
    c = Consumer({**bob, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + OP_TIMEOUT
        while got < partitions:
            assert time.monotonic() < deadline, f"bob read {got} of his {partitions} records as a group member"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, f"bob's consumer: {msg.error()}"
            got += 1
        c.commit(asynchronous=False)
    finally:
        c.close()

    # A DENY made through node 3 beats the ALLOW on every leader.
    deny = AclBinding(RT.TOPIC, topic, PT.LITERAL, "User:bob", "*", OP.WRITE, PM.DENY)
    adm3 = AdminClient(on_node(conf, nodes[2]))
    adm3.create_acls([deny], request_timeout=OP_TIMEOUT)[deny].result(timeout=OP_TIMEOUT)
    wait_until(lambda: refused_everywhere(bob, topic, partitions), timeout=SETTLE_TIMEOUT, interval=0.5,
               what="bob's DENY to take effect on every partition's leader")

    # Everything of bob's deleted through node 1: he writes nowhere.
    flt = AclBindingFilter(RT.ANY, None, PT.ANY, "User:bob", None, OP.ANY, PM.ANY)
    adm1 = AdminClient(on_node(conf, nodes[0]))
    deleted = adm1.delete_acls([flt], request_timeout=OP_TIMEOUT)[flt].result(timeout=OP_TIMEOUT)
    assert len(deleted) == 4, f"delete_acls returned {deleted}"
    for node in nodes:
        wait_until(lambda: acl_keys(on_node(conf, node), "User:bob") == set(), timeout=SETTLE_TIMEOUT, interval=0.5,
                   what=f"node {node.id} to describe no ACL of bob's")
    assert refused_everywhere(bob, topic, partitions), "bob wrote to a partition with every ACL of his deleted"


@pytest.mark.timeout(600)
@pytest.mark.xfail(
    "kafka-shim" in os.environ.get("MILLRACE_BIN", ""), strict=False,
    reason="Apache Kafka 4.4 (3 combined nodes, reference run, 2026-12-07): after the SCRAM test "
           "before it, node 1 refused erin's SCRAM-SHA-512 login for 150 s after the restart (every "
           "controller replayed her credential); with this test alone it passes")
def test_credentials_and_acls_survive_every_node_killed_at_once(secure):
    cluster, conf = secure
    nodes = [cluster.nodes[i] for i in cluster.ids]
    topic = unique_topic("secure-crash")
    partitions = 3
    create(conf, topic, partitions, {})
    adm = AdminClient(conf)
    futures = adm.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"erin-secret")],
        request_timeout=OP_TIMEOUT)
    futures["erin"].result(timeout=OP_TIMEOUT)
    erin = as_user(conf, "erin", "erin-secret", "SCRAM-SHA-512")
    grant = AclBinding(RT.TOPIC, topic, PT.LITERAL, "User:erin", "*", OP.WRITE, PM.ALLOW)
    adm.create_acls([grant], request_timeout=OP_TIMEOUT)[grant].result(timeout=OP_TIMEOUT)
    wait_until(lambda: writes_everywhere(erin, topic, partitions), timeout=SETTLE_TIMEOUT, interval=0.5,
               what="erin's credential and ACL to take effect")
    del adm

    for node in nodes:
        node.kill()
    cluster.start()
    wait_until(lambda: partitions == len([i for i in range(partitions) if partition(conf, topic, i).leader >= 0]),
               timeout=CATCH_UP_TIMEOUT, what=f"{topic} has leaders after the restart")
    for node in nodes:
        await_login(on_node(erin, node), True)
    wait_until(lambda: writes_everywhere(erin, topic, partitions), timeout=SETTLE_TIMEOUT, interval=0.5,
               what="erin to write to every partition after the restart")
    assert acl_keys(conf, "User:erin") == {(topic, "WRITE", "ALLOW", "LITERAL")}
    refused_login(on_node(as_user(conf, "erin", "not-erin-secret", "SCRAM-SHA-512"), nodes[1]),
                  KafkaError._AUTHENTICATION, scram_refused("SCRAM-SHA-512"))
    assert refused_everywhere(as_user(conf, "bob", "bob-secret"), topic, partitions), "bob wrote after the restart"


# ------------------------------------------------------------------ certificate reload
RELOAD_TIMEOUT = 20.0  # seconds until every node serves a replaced certificate (promised: ~10 s)
ON_KAFKA = "kafka-shim" in os.environ.get("MILLRACE_BIN", "")


def served_cert(ca: Path, port: int) -> bytes:
    """The DER certificate a new TLS connection to PORT is served."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


@pytest.mark.skipif(ON_KAFKA, reason="Kafka reloads key stores only on AlterConfigs (KIP-226); watching "
                                     "the files is Millrace's own")
def test_a_certificate_replaced_on_disk_is_served_by_every_node_and_no_connection_drops(secure):
    """server.pem (every node's SASL_SSL keystore) replaced: each node serves the new certificate
    to new connections within RELOAD_TIMEOUT, while a producer's connections, made before, carry
    on (librdkafka counts no new connection) and acks=all writes keep reaching the followers."""
    cluster, conf = secure
    ca = Path(str(conf["ssl.ca.location"]))
    mat = TlsMaterial(ca.parent)
    topic = unique_topic("secure-reload")
    create(conf, topic, 3, {"min.insync.replicas": "2"})
    stats: List[dict] = []
    p = Producer({**conf, "acks": "all", "linger.ms": 0, "message.timeout.ms": 30000,
                  "statistics.interval.ms": 200, "stats_cb": lambda s: stats.append(json.loads(s))})
    errors: List[str] = []
    delivered = [0]

    def send(value: bytes) -> None:
        for i in range(3):
            p.produce(topic, value=value, partition=i,
                      on_delivery=lambda err, msg: errors.append(str(err)) if err else delivered.__setitem__(0, delivered[0] + 1))
        assert p.flush(30) == 0, "records undelivered after 30 s"
        assert not errors, f"delivery failed: {errors[:3]}"

    def connects() -> Dict[str, int]:
        p.poll(0.3)
        wait_until(lambda: stats, timeout=OP_TIMEOUT, what="librdkafka statistics")
        return {b["name"]: b["connects"] for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0}

    send(b"before")
    before = connects()
    old_der = served_cert(ca, cluster.nodes[cluster.ids[0]].port)
    assert old_der == mat.der("server-cert")
    write_server_cert(mat, "millrace-test-server-reloaded")  # temp file + rename
    new_der = mat.der("server-cert")
    assert new_der != old_der
    t0 = time.monotonic()
    pending = set(cluster.ids)
    while pending:
        send(b"during")
        for i in sorted(pending):
            try:
                if served_cert(ca, cluster.nodes[i].port) == new_der:
                    pending.discard(i)
            except (OSError, ssl.SSLError):
                pass
        assert time.monotonic() - t0 < RELOAD_TIMEOUT, \
            f"nodes {sorted(pending)} still serve the old certificate {RELOAD_TIMEOUT:.0f} s after the replacement"
        time.sleep(0.3)
    send(b"after")
    after = connects()
    assert after == before, f"the producer reconnected: connects {before} before, {after} after"
    assert read(conf, topic, 3, delivered[0], isolation="read_uncommitted").count(b"after") == 3
