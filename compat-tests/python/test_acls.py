"""ACLs: Kafka's authorizer (StandardAuthorizer) end to end, with real clients and Kafka's own kafka-acls.

A broker for the module, started the way test_sasl.py starts its brokers, plus the authorizer:
    --listen 127.0.0.1:0                     (PLAINTEXT: the inter-broker listener; no check uses it)
    listeners=SASL_PLAINTEXT://127.0.0.1:P1,SASL_SSL://127.0.0.1:P2
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
    sasl.enabled.mechanisms=PLAIN
    listener.name.{sasl_plaintext,sasl_ssl}.plain.sasl.jaas.config=
        org.apache.kafka.common.security.plain.PlainLoginModule required
        user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";
    ssl.keystore.type=PEM, ssl.keystore.location=server.pem   (tls_material.py, for SASL_SSL)
    authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    super.users=User:admin;User:ANONYMOUS
on a data dir of this module's own (the restart test starts it again on that dir). ANONYMOUS is
the principal of PLAINTEXT connections (Kafka's inter-broker and controller traffic must be super);
every client here logs in over SASL_PLAINTEXT as admin, alice, bob or carol (or names principals
that never log in: User:dave, User:erin, in ACLs only). allow.everyone.if.no.acl.found stays at its
default (false). ACLs are made with Kafka 4.1.1's kafka-acls (org.apache.kafka.tools.AclCommand in
the kafka-tools jar: in 4.x it is no longer kafka.admin.AclCommand) as admin, with --bootstrap-server
on the SASL_PLAINTEXT port and --command-config, or with confluent-kafka's create_acls; a test that
grants ACLs other than alice's module-wide Write on t removes them again at its end. An ACL change
takes effect on Kafka's broker asynchronously (the metadata log), so each check right after a
change polls, bounded, for the allowed outcome first, and checks refusals after it.

Checks (each refusal next to an allowed counterpart, so that a broker that allows everything or
refuses everything fails): bob, with no ACLs, cannot produce, consume, see topics, join a group,
create topics; admin (a super user) can. `kafka-acls --add --allow-principal User:alice --operation
Write --topic t` lets alice produce to t (idempotent or not) and nothing else; --list prints it in
Kafka's format and --remove --force takes it away again. Prefixed topic and group ACLs, Read on the
group for a consumer (Describe alone lets FindCoordinator through and JoinGroup fails), deny beats
allow (User:* allow + User:carol deny; deny on operation All; --deny-host 127.0.0.1), super users
ignore deny ACLs, which operations imply Describe and DescribeConfigs, Create on the cluster for
CreateTopics, Describe/Alter on the cluster for DescribeAcls/CreateAcls/DeleteAcls, describe_acls
filters (MATCH, ANY, LITERAL, PREFIXED), invalid CreateAcls bindings, delete_acls results, group
listing/describing per ACL, and the ACLs surviving a restart.

What Apache Kafka 4.1.1 answers, with confluent-kafka 2.16 (librdkafka 2.16) as the client (the
codes are asserted; librdkafka's texts where they name the failing request):
- Produce without Write: the delivery report fails with TOPIC_AUTHORIZATION_FAILED (29, "Broker:
  Topic authorization failed"), at once (Metadata already says 29 for the topic; no retries).
- A consumer (subscribe or assign) of a user without Describe on its group: the first error is
  GROUP_AUTHORIZATION_FAILED (30) "FindCoordinator response error: Group authorization failed."
  (librdkafka always looks up the coordinator when group.id is set, and group.id is mandatory in
  confluent-kafka). With Describe but not Read on the group: 30 "JoinGroup failed: Broker: Group
  authorization failed". With the group allowed but not the topic: 29 "Subscribed topic not
  available: <topic>: Broker: Topic authorization failed". alice (Write only on t) assigning t: 30
  from FindCoordinator and 29 "Fetch from broker 1 failed: Broker: Topic authorization failed". A
  consumer assigning a topic it may not even Describe gets no error at all (it just waits): not
  used here. Raw FindCoordinator v1 / JoinGroup v2 for bob: error 30.
- Metadata: topics the user may not Describe are left out of the all-topics answer (bob sees none);
  a named one comes back with 29, an existing topic and a topic that does not exist alike.
  Describe is implied by Read, Write, Delete, Alter (and All), not by AlterConfigs, DescribeConfigs
  or Create; a user who created a topic with Create on the cluster does not see it afterwards.
- CreateTopics without Create: 29 "Authorization failed." (not CLUSTER_AUTHORIZATION_FAILED).
- Idempotent producer: enable.idempotence=true works for alice with Write on t only (InitProducerId
  without a transactional id is allowed by Write on any topic, KIP-679; no IdempotentWrite on the
  cluster needed); for bob (no Write anywhere) librdkafka raises a fatal error
  CLUSTER_AUTHORIZATION_FAILED (31) "Failed to acquire idempotence PID from broker ...: Broker:
  Cluster authorization failed" from poll().
- DescribeConfigs is implied by AlterConfigs, not by Read (nor, seen not asserted, Describe/Write):
  29 "Topic authorization failed.".
- Deny beats allow (User:* allow + User:carol deny); a deny on All denies Write and Describe; a deny
  with host 127.0.0.1 applies to clients on 127.0.0.1, one with host 10.9.9.9 does not. Super users
  ignore deny ACLs naming them (admin produces and consumes through a deny on All).
- CreateAcls/DeleteAcls without Alter on the cluster: 31 (CLUSTER_AUTHORIZATION_FAILED) per binding or
  filter; Kafka's message is the toString of the request forwarded to the controller ("Request
  Request(processor=..., listenerName=ListenerName(CONTROLLER), ...) needs ALTER permission."), not
  asserted. DescribeAcls without Describe on the cluster: the broker answers 31 ("Request ... needs
  DESCRIBE permission.", raw DescribeAcls v1), kafka-acls --list exits 1 printing "Error while
  executing ACL command: org.apache.kafka.common.errors.ClusterAuthorizationException: ..." on stdout,
  but librdkafka 2.16's describe_acls DROPS that error and returns an empty list. Describe on the
  cluster allows DescribeAcls but not CreateAcls; Alter on the cluster allows CreateAcls.
- Invalid bindings: confluent-kafka refuses AclBinding with pattern MATCH/ANY or operation ANY itself
  (ValueError, nothing sent), so raw CreateAcls v1 is used: Kafka answers UNKNOWN_SERVER_ERROR (-1)
  with a null message for every creation of such a request (an IllegalArgumentException "patternType
  must not be MATCH" escapes the controller's handler), and creates none of them, not even the
  valid ones in the same request.
- describe_acls filters: LITERAL/PREFIXED match that pattern type and the exact name; ANY matches
  both pattern types with the exact name; MATCH with a name returns every ACL that applies to a
  resource of that name: the literal name, the wildcard "*" and every prefixed pattern that is a
  prefix of it (not longer literal names); MATCH "*" returns only the literal "*" ACLs; a null name
  matches all names.
- kafka-acls (its own formatting, client-side): --add prints "Adding ACLs for resource
  `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: " then " <TAB>(principal=User:alice,
  host=*, operation=WRITE, permissionType=ALLOW)" (a space before the first tab), --list prints
  "Current ACLs for resource `ResourcePattern(...)`:" then "<TAB>(principal=..., host=..., operation=...,
  permissionType=...)" per ACL and a blank line after each resource (entries in the tool's own order,
  compared as sets here); --remove --force prints nothing; --list of a resource without ACLs prints
  nothing.
- ListGroups without Describe on the cluster lists only the groups the user may Describe; with
  Describe on the cluster it lists all, but describe_consumer_groups still fails for a group without
  Describe on it (30 "Broker: Group authorization failed"), and list_consumer_group_offsets too (30
  "LISTCONSUMERGROUPOFFSETS worker coordinator request failed: Broker: Group authorization failed":
  its coordinator lookup).
- ACLs live in the metadata log: a restart on the same data dir keeps them all.

Runs against Apache Kafka too (the reference broker, 4.4.0) (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple, Union

import pytest
from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType,
                                   ResourceType)

from millrace import Broker, unique_topic, wait_until
from secure_clients import (OP_TIMEOUT, SaslBroker, admin, create_topic, java_tool, sasl_broker, sasl_client, wire,
                            wire_str)

# The reference run (Apache Kafka behind kafka-shim.sh), where Millrace deliberately differs.
KAFKA_REFERENCE = os.environ.get("MILLRACE_BIN", "").endswith("kafka-shim.sh")

SETTLE_TIMEOUT = 30.0   # seconds for an ACL change to take effect on the broker
CONSUME_TIMEOUT = 20.0  # seconds a consumer gets to read its records or report its error

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"  # kafka-acls.sh in Kafka 4.1.1
CLUSTER = "kafka-cluster"

TOPIC_AUTH = KafkaError.TOPIC_AUTHORIZATION_FAILED      # 29
GROUP_AUTH = KafkaError.GROUP_AUTHORIZATION_FAILED      # 30
CLUSTER_AUTH = KafkaError.CLUSTER_AUTHORIZATION_FAILED  # 31

RT, PT, OP, PM = ResourceType, ResourcePatternType, AclOperation, AclPermissionType


# ------------------------------------------------------------------ the broker
@dataclass
class AclBroker(SaslBroker):
    cp: str = field(default="", repr=False)  # Kafka tools classpath (kafka-acls)
    t: str = ""        # the topic of alice's module-wide Write ACL (alice_write)


@pytest.fixture(scope="module")
def acl(java_cp) -> Iterator[AclBroker]:
    with sasl_broker(AclBroker, "millrace-acls-", {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin;User:ANONYMOUS",
    }, cp=java_cp) as s:
        # the SASL listener may open a moment after the PLAINTEXT one
        wait_until(lambda: admin(conf(s, "admin")).list_topics(timeout=3) is not None, timeout=OP_TIMEOUT,
                   interval=0.2, what="admin to get metadata over SASL_PLAINTEXT")
        yield s


@pytest.fixture(scope="module")
def alice_write(acl) -> AclBroker:
    """Topic t with a record, and `kafka-acls --add --allow-principal User:alice --operation Write
    --topic t`, in effect (alice's produce goes through). Kept for the whole module."""
    acl.t = unique_topic("acl-t")
    make_topic(acl, acl.t, b"admin's record")
    out = acl_tool_ok(acl, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", acl.t)
    assert out == adding_block("TOPIC", acl.t, "LITERAL", [("User:alice", "*", "WRITE", "ALLOW")]), \
        f"kafka-acls --add printed {out!r}"
    wait_until(lambda: isinstance(produce_one(acl, "alice", acl.t), int), timeout=SETTLE_TIMEOUT, interval=0.2,
               what="alice's Write ACL on t to take effect")
    return acl


# ------------------------------------------------------------------ clients
def conf(s: AclBroker, user: str) -> Dict[str, object]:
    """SASL_PLAINTEXT as USER with PLAIN."""
    return sasl_client(s, "PLAIN", user, USERS[user])


def make_topic(s: AclBroker, name: str, record: Optional[bytes] = None) -> None:
    """Create NAME (one partition) as admin, with RECORD in it if given."""
    create_topic(conf(s, "admin"), name)
    if record is not None:
        got = produce_one(s, "admin", name, record)
        assert isinstance(got, int), f"admin producing to {name}: {got}"


Outcome = Union[int, KafkaError]


def produce_one(s: AclBroker, user: str, topic: str, value: bytes = b"v", idempotence: bool = False) -> Outcome:
    """One record to partition 0 of TOPIC as USER (acks=all): its offset, or the delivery error."""
    p = Producer({**conf(s, user), "enable.idempotence": idempotence, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 10000})
    result: List[Outcome] = []
    p.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: result.append(err if err else msg.offset()))
    remaining = p.flush(20)
    assert remaining == 0 and len(result) == 1, f"{user} producing to {topic}: no delivery report within 20 s"
    return result[0]


def refused(outcome: Outcome, code: int = TOPIC_AUTH) -> bool:
    return isinstance(outcome, KafkaError) and outcome.code() == code


def assert_refused(outcome: Outcome, what: str, code: int = TOPIC_AUTH) -> None:
    assert refused(outcome, code), f"{what}: got {outcome!r}, want {KafkaError(code).name()}"


def assert_produced(outcome: Outcome, what: str) -> None:
    assert isinstance(outcome, int), f"{what}: delivery failed with {outcome!r}"


def consume(s: AclBroker, user: str, topic: str, group: str, n: int = 1, assign: bool = False,
            until_code: Optional[int] = None, timeout: float = CONSUME_TIMEOUT) -> Tuple[List[bytes], List[KafkaError]]:
    """USER consumes TOPIC in GROUP (subscribe, or assign partition 0 from offset 0): the values read
    and the errors reported, up to N records or the first error (or, given UNTIL_CODE, up to the
    first error with that code), within TIMEOUT."""
    c = Consumer({**conf(s, user), "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000})
    values: List[bytes] = []
    errors: List[KafkaError] = []
    try:
        if assign:
            c.assign([TopicPartition(topic, 0, 0)])
        else:
            c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until_code is None and (len(values) >= n or errors):
                break
            if until_code is not None and any(e.code() == until_code for e in errors):
                break
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error())
            else:
                values.append(msg.value())
    finally:
        c.close()
    return values, errors


def consumes(s: AclBroker, user: str, topic: str, group: str, want: List[bytes]) -> bool:
    values, errors = consume(s, user, topic, group, n=len(want))
    return values == want and not errors


def await_consumes(s: AclBroker, user: str, topic: str, group: str, want: List[bytes]) -> None:
    wait_until(lambda: consumes(s, user, topic, group, want), timeout=SETTLE_TIMEOUT, interval=0.2,
               what=f"{user} to consume {want} from {topic} in group {group}")


def first_error(s: AclBroker, user: str, topic: str, group: str, **kw) -> KafkaError:
    """The first error USER's consumer reports (it must read nothing before it)."""
    values, errors = consume(s, user, topic, group, **kw)
    assert not values, f"{user} read {values} from {topic} in group {group}"
    assert errors, f"{user}'s consumer of {topic} in group {group} reported no error within {CONSUME_TIMEOUT} s"
    return errors[0]


def topics_seen(s: AclBroker, user: str) -> Set[str]:
    return set(admin(conf(s, user)).list_topics(timeout=OP_TIMEOUT).topics)


def topic_error(s: AclBroker, user: str, topic: str) -> Optional[KafkaError]:
    """Metadata for TOPIC alone, as USER: the topic's error (None when served)."""
    md = admin(conf(s, user)).list_topics(topic=topic, timeout=OP_TIMEOUT)
    assert topic in md.topics, f"Metadata for {topic} as {user} does not name it: {sorted(md.topics)}"
    return md.topics[topic].error


def create_topic_error(s: AclBroker, user: str, name: str) -> Optional[KafkaError]:
    """CreateTopics NAME as USER: None on success, else the topic's error."""
    adm = admin(conf(s, user))  # held until the answer is in
    futures = adm.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                operation_timeout=10, request_timeout=OP_TIMEOUT)
    try:
        futures[name].result(timeout=OP_TIMEOUT)
        return None
    except KafkaException as exc:
        return exc.args[0]


def commit_group(s: AclBroker, group: str, topic: str) -> None:
    """Make GROUP exist (empty, with a committed offset on TOPIC), as admin."""
    c = Consumer({**conf(s, "admin"), "group.id": group, "enable.auto.commit": False})
    try:
        done = c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert done and done[0].error is None, f"committing for {group}: {done}"
    finally:
        c.close()


# ------------------------------------------------------------------ ACLs through confluent-kafka
def binding(restype: ResourceType, name: str, principal: str, op: AclOperation, perm: AclPermissionType = PM.ALLOW,
            pattern: ResourcePatternType = PT.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, op, perm)


def exact(b: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                            b.permission_type)


Key = Tuple[str, str, str, str, str, str, str]


def key(b: AclBinding) -> Key:
    return (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name)


def grant(s: AclBroker, *bindings: AclBinding, user: str = "admin") -> None:
    adm = admin(conf(s, user))
    futures = adm.create_acls(list(bindings), request_timeout=OP_TIMEOUT)
    for b, f in futures.items():
        assert f.result(timeout=OP_TIMEOUT) is None, f"create_acls {key(b)}"


def revoke(s: AclBroker, *bindings: AclBinding) -> List[Key]:
    adm = admin(conf(s, "admin"))
    futures = adm.delete_acls([exact(b) for b in bindings], request_timeout=OP_TIMEOUT)
    return sorted(key(d) for f in futures.values() for d in f.result(timeout=OP_TIMEOUT))


@contextmanager
def granted(s: AclBroker, *bindings: AclBinding) -> Iterator[None]:
    """BINDINGS for the length of a test (removed at its end, whatever made them)."""
    grant(s, *bindings)
    try:
        yield
    finally:
        revoke(s, *bindings)


def described(s: AclBroker, flt: AclBindingFilter, user: str = "admin") -> List[Key]:
    adm = admin(conf(s, user))
    return sorted(key(b) for b in adm.describe_acls(flt, request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT))


EVERYTHING = AclBindingFilter(RT.ANY, None, PT.ANY, None, None, OP.ANY, PM.ANY)


# ------------------------------------------------------------------ kafka-acls
def acl_tool(s: AclBroker, *args: str, user: str = "admin") -> subprocess.CompletedProcess:
    """kafka-acls (AclCommand) as USER over SASL_PLAINTEXT."""
    props = s.work / f"acl-{user}.properties"
    if not props.exists():
        props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                         f'username="{user}" password="{USERS[user]}";\n')
    return java_tool(s.cp, ACL_COMMAND, ["--bootstrap-server", f"127.0.0.1:{s.sasl_port}",
                                         "--command-config", str(props), *args])


def acl_tool_ok(s: AclBroker, *args: str) -> str:
    proc = acl_tool(s, *args)
    assert proc.returncode == 0, f"kafka-acls {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def pattern_text(restype: str, name: str, pattern: str) -> str:
    return f"ResourcePattern(resourceType={restype}, name={name}, patternType={pattern})"


def entry_text(principal: str, host: str, op: str, perm: str) -> str:
    return f"(principal={principal}, host={host}, operation={op}, permissionType={perm})"


def adding_block(restype: str, name: str, pattern: str, entries: List[Tuple[str, str, str, str]]) -> str:
    """What kafka-acls --add prints for one resource (ENTRIES in the tool's order)."""
    return (f"Adding ACLs for resource `{pattern_text(restype, name, pattern)}`: \n \t"
            + "\n\t".join(entry_text(*e) for e in entries) + "\n\n")


LISTED_RE = re.compile(r"^Current ACLs for resource `(ResourcePattern\(.*\))`:$")


def listed(out: str) -> Dict[str, Set[str]]:
    """kafka-acls --list output: {resource pattern text: {entry text}}; every line must be Kafka's."""
    blocks: Dict[str, Set[str]] = {}
    current: Optional[str] = None
    for line in out.split("\n"):
        m = LISTED_RE.match(line)
        if m:
            current = m.group(1)
            assert current not in blocks, f"resource listed twice: {out!r}"
            blocks[current] = set()
        elif line.startswith("\t("):
            assert current is not None, f"an ACL line before any resource: {out!r}"
            blocks[current].add(line[1:])
        else:
            assert line == "", f"kafka-acls --list printed {line!r}"
            current = None
    return blocks


# ------------------------------------------------------------------ raw Kafka wire (SASL_PLAINTEXT)
@contextmanager
def raw_login(s: AclBroker, user: str):
    with wire(s.sasl_port) as w:
        w.api_versions()
        w.login(user, USERS[user])
        yield w


def raw_find_coordinator(s: AclBroker, user: str, group: str) -> int:
    """FindCoordinator v1 for GROUP: the error code."""
    with raw_login(s, user) as w:
        body = w.call(10, 1, wire_str(group) + struct.pack(">b", 0))
    assert body is not None, "FindCoordinator got the connection closed"
    return struct.unpack_from(">ih", body)[1]


def raw_join_group(s: AclBroker, user: str, group: str) -> int:
    """JoinGroup v2 (a new member of GROUP, protocol type consumer): the error code."""
    req = (wire_str(group) + struct.pack(">ii", 6000, 6000) + wire_str("") + wire_str("consumer")
           + struct.pack(">i", 1) + wire_str("range") + struct.pack(">i", 0))
    with raw_login(s, user) as w:
        body = w.call(11, 2, req)
    assert body is not None, "JoinGroup got the connection closed"
    return struct.unpack_from(">ih", body)[1]


def nullable(body: bytes, off: int) -> Tuple[Optional[str], int]:
    (n,) = struct.unpack_from(">h", body, off)
    if n < 0:
        return None, off + 2
    return body[off + 2:off + 2 + n].decode(), off + 2 + n


def raw_describe_acls(s: AclBroker, user: str) -> Tuple[int, int]:
    """DescribeAcls v1, everything (ANY filters): (error code, number of resources)."""
    req = (struct.pack(">b", 1) + struct.pack(">h", -1) + struct.pack(">b", 1) + struct.pack(">hh", -1, -1)
           + struct.pack(">bb", 1, 1))
    with raw_login(s, user) as w:
        body = w.call(29, 1, req)
    assert body is not None, "DescribeAcls got the connection closed"
    (_, err) = struct.unpack_from(">ih", body)
    _, off = nullable(body, 6)
    (n,) = struct.unpack_from(">i", body, off)
    return err, n


# wire enums (org.apache.kafka.common.resource / acl)
W_TOPIC, W_LITERAL, W_MATCH, W_ANY, W_READ, W_ALLOW = 2, 3, 2, 1, 3, 3


Creation = Tuple[int, str, int, str, str, int, int]


def raw_create_acls(s: AclBroker, creations: List[Creation]) -> List[Tuple[int, Optional[str]]]:
    """CreateAcls v1 as admin with CREATIONS (resource type, name, pattern type, principal, host,
    operation, permission, as wire codes): [(error code, error message)] per creation."""
    req = struct.pack(">i", len(creations))
    for restype, name, pattern, principal, host, op, perm in creations:
        req += (struct.pack(">b", restype) + wire_str(name) + struct.pack(">b", pattern) + wire_str(principal)
                + wire_str(host) + struct.pack(">bb", op, perm))
    with raw_login(s, "admin") as w:
        body = w.call(30, 1, req)
    assert body is not None, "CreateAcls got the connection closed"
    (_, n) = struct.unpack_from(">ii", body)
    off, out = 8, []
    for _ in range(n):
        (err,) = struct.unpack_from(">h", body, off)
        msg, off = nullable(body, off + 2)
        out.append((err, msg))
    return out


# ------------------------------------------------------------------ bob: no ACLs
@pytest.mark.timeout(1000)  # the module fixture may resolve the Kafka tools jars with mvn
def test_no_acls_cannot_produce(acl):
    t = unique_topic("acl-bob-produce")
    make_topic(acl, t)
    assert_refused(produce_one(acl, "bob", t), "bob producing without ACLs")
    assert_produced(produce_one(acl, "admin", t), "admin (super user) producing")


def test_no_acls_cannot_consume_group_refused_first(acl):
    """librdkafka's first request for a consumer is FindCoordinator for its group: refused with 30
    before any topic request (subscribe and assign alike)."""
    t = unique_topic("acl-bob-consume")
    make_topic(acl, t, b"r0")
    group = unique_topic("acl-bob-group")
    for assign in (False, True):
        err = first_error(acl, "bob", t, group, assign=assign)
        assert err.code() == GROUP_AUTH, \
            f"bob's consumer (assign={assign}): first error {err}, want GROUP_AUTHORIZATION_FAILED"
        assert err.str().startswith("FindCoordinator"), f"not from FindCoordinator: {err.str()!r}"
    assert consume(acl, "admin", t, group) == ([b"r0"], []), "admin (super user) consuming in the same group"
    # raw FindCoordinator v1 (after admin's consumer: the offsets topic exists now)
    assert raw_find_coordinator(acl, "bob", group) == 30
    assert raw_find_coordinator(acl, "admin", group) == 0


def test_no_acls_lists_no_topics(acl):
    t = unique_topic("acl-bob-list")
    make_topic(acl, t)
    assert t in topics_seen(acl, "admin")
    assert topics_seen(acl, "bob") == set(), "Metadata for all topics shows bob topics he may not Describe"
    err = topic_error(acl, "bob", t)
    assert err is not None and err.code() == TOPIC_AUTH, f"Metadata for {t} as bob: {err}"
    # a topic that does not exist: the same answer (nothing tells bob whether it exists)
    err = topic_error(acl, "bob", unique_topic("acl-no-such"))
    assert err is not None and err.code() == TOPIC_AUTH, f"Metadata for a missing topic as bob: {err}"
    assert topic_error(acl, "admin", t) is None


def test_no_acls_cannot_join_a_group(acl):
    group = unique_topic("acl-bob-join")
    assert raw_join_group(acl, "bob", group) == 30, "JoinGroup as bob: want GROUP_AUTHORIZATION_FAILED (30)"
    assert raw_join_group(acl, "admin", group) == 0, "JoinGroup as admin (super user)"


def test_no_acls_cannot_create_topics(acl):
    name = unique_topic("acl-bob-create")
    err = create_topic_error(acl, "bob", name)
    assert err is not None and err.code() == TOPIC_AUTH, f"CreateTopics as bob: {err}, want TOPIC_AUTHORIZATION_FAILED"
    assert name not in topics_seen(acl, "admin"), "bob's refused CreateTopics created the topic"
    assert create_topic_error(acl, "admin", name) is None, "CreateTopics as admin (super user)"


# ------------------------------------------------------------------ alice: Write on t (kafka-acls --add)
@pytest.mark.timeout(300)
def test_write_acl_lets_alice_produce(alice_write):
    s = alice_write
    offsets = [produce_one(s, "alice", s.t, b"alice %d" % i) for i in range(3)]
    assert all(isinstance(o, int) for o in offsets), f"alice producing to t: {offsets}"
    assert offsets == sorted(offsets) and len(set(offsets)) == 3
    assert topic_error(s, "alice", s.t) is None, "Metadata for t as alice (Write implies Describe)"
    # the ACL names alice only
    assert_refused(produce_one(s, "bob", s.t), "bob producing to t")
    err = topic_error(s, "bob", s.t)
    assert err is not None and err.code() == TOPIC_AUTH, f"Metadata for t as bob: {err}"


def test_write_acl_grants_nothing_else(alice_write):
    s = alice_write
    other = unique_topic("acl-alice-other")
    make_topic(s, other, b"other's record")
    assert_produced(produce_one(s, "alice", s.t), "alice producing to t")
    assert_refused(produce_one(s, "alice", other), "alice producing to another topic")
    # Metadata: t only (Write implies Describe), not the other topic
    seen = topics_seen(s, "alice")
    assert s.t in seen and other not in seen, f"alice sees {sorted(seen)}"
    assert seen == {s.t}, f"alice sees more than t: {sorted(seen)}"
    # no CreateTopics
    name = unique_topic("acl-alice-create")
    err = create_topic_error(s, "alice", name)
    assert err is not None and err.code() == TOPIC_AUTH, f"CreateTopics as alice: {err}"
    # no reading t: FindCoordinator (no group ACL) and Fetch (no Read) refused, nothing read
    values, errors = consume(s, "alice", s.t, unique_topic("acl-alice-group"), assign=True, until_code=TOPIC_AUTH)
    assert not values, f"alice read {values} from t"
    codes = {e.code() for e in errors}
    assert TOPIC_AUTH in codes and codes <= {TOPIC_AUTH, GROUP_AUTH}, \
        f"alice's consumer of t: {[e.str() for e in errors]}"
    fetch = next(e for e in errors if e.code() == TOPIC_AUTH)
    assert "Fetch" in fetch.str(), f"the topic refusal is not Fetch's: {fetch.str()!r}"
    assert consume(s, "admin", s.t, unique_topic("acl-admin-group"), n=1, assign=True)[0] == [b"admin's record"]


def test_idempotent_producer_with_write_on_a_topic(alice_write):
    """InitProducerId (no transactional id) needs Write on some topic or IdempotentWrite on the
    cluster: alice's idempotent producer works; bob's fails fatally with CLUSTER_AUTHORIZATION_FAILED."""
    s = alice_write
    assert_produced(produce_one(s, "alice", s.t, b"idempotent", idempotence=True), "alice, enable.idempotence=true")
    errors: List[KafkaError] = []
    p = Producer({**conf(s, "bob"), "enable.idempotence": True, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not any(e.fatal() for e in errors):
        assert time.monotonic() < deadline, f"bob's idempotent producer: no fatal error within 10 s: {errors}"
        try:
            p.poll(0.2)
        except KafkaException as exc:  # librdkafka raises the fatal error from poll()
            errors.append(exc.args[0])
    fatal = next(e for e in errors if e.fatal())
    assert fatal.code() == CLUSTER_AUTH, f"bob's idempotent producer: {fatal}"
    assert "idempotence PID" in fatal.str(), fatal.str()


@pytest.mark.timeout(300)
def test_list_shows_the_acl_and_remove_takes_it_away(acl):
    t2 = unique_topic("acl-listed")
    make_topic(acl, t2)
    out = acl_tool_ok(acl, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", t2)
    entry = ("User:alice", "*", "WRITE", "ALLOW")
    assert out == adding_block("TOPIC", t2, "LITERAL", [entry]), f"kafka-acls --add printed {out!r}"
    try:
        wait_until(lambda: isinstance(produce_one(acl, "alice", t2), int), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="alice's Write ACL on t2 to take effect")
        want = f"Current ACLs for resource `{pattern_text('TOPIC', t2, 'LITERAL')}`:\n\t{entry_text(*entry)}\n\n"
        assert acl_tool_ok(acl, "--list", "--topic", t2) == want
        every = listed(acl_tool_ok(acl, "--list"))
        assert every.get(pattern_text("TOPIC", t2, "LITERAL")) == {entry_text(*entry)}, f"--list: {every}"
        out = acl_tool_ok(acl, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write",
                          "--topic", t2)
        assert out == "", f"kafka-acls --remove --force printed {out!r}"
        wait_until(lambda: refused(produce_one(acl, "alice", t2)), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="alice to be refused Write on t2 after --remove")
        assert acl_tool_ok(acl, "--list", "--topic", t2) == "", "--list after --remove"
        assert pattern_text("TOPIC", t2, "LITERAL") not in listed(acl_tool_ok(acl, "--list"))
        assert_produced(produce_one(acl, "admin", t2), "admin producing to t2")
    finally:
        revoke(acl, binding(RT.TOPIC, t2, "User:alice", OP.WRITE))


# ------------------------------------------------------------------ prefixed ACLs, groups
@pytest.mark.timeout(300)
def test_prefixed_topic_acl_and_a_group_acl(acl):
    """`--resource-pattern-type prefixed --topic P` Read/Describe: carol reads P+x (once she has Read
    on her group, `--group G`), not other-x."""
    prefix = f"acl-pre-{uuid.uuid4().hex[:8]}-"
    mine, other = prefix + "x", unique_topic("acl-other-x")
    make_topic(acl, mine, b"pre record")
    make_topic(acl, other, b"other record")
    group = unique_topic("acl-carol-g")
    out = acl_tool_ok(acl, "--add", "--allow-principal", "User:carol", "--operation", "Read", "--operation", "Describe",
                      "--resource-pattern-type", "prefixed", "--topic", prefix)
    assert pattern_text("TOPIC", prefix, "PREFIXED") in out, out
    acls = [binding(RT.TOPIC, prefix, "User:carol", op, pattern=PT.PREFIXED) for op in (OP.READ, OP.DESCRIBE)]
    try:
        wait_until(lambda: mine in topics_seen(acl, "carol"), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="carol to see the prefixed topic")
        assert topics_seen(acl, "carol") == {mine}, "carol sees more than the prefixed topic"
        # the topic alone is not enough: the group needs Read
        err = first_error(acl, "carol", mine, group)
        assert err.code() == GROUP_AUTH and err.str().startswith("FindCoordinator"), f"without a group ACL: {err}"
        acl_tool_ok(acl, "--add", "--allow-principal", "User:carol", "--operation", "Read", "--group", group)
        acls.append(binding(RT.GROUP, group, "User:carol", OP.READ))
        await_consumes(acl, "carol", mine, group, [b"pre record"])
        err = first_error(acl, "carol", other, group)
        assert err.code() == TOPIC_AUTH, f"carol consuming {other}: {err}, want TOPIC_AUTHORIZATION_FAILED"
        assert f"Subscribed topic not available: {other}" in err.str(), err.str()
        assert_refused(produce_one(acl, "carol", mine), "carol producing with Read/Describe only")
    finally:
        revoke(acl, *acls)


def test_prefixed_group_acl(acl):
    t = unique_topic("acl-pg")
    make_topic(acl, t, b"pg record")
    gp = f"acl-gp-{uuid.uuid4().hex[:8]}-"
    with granted(acl, binding(RT.TOPIC, t, "User:carol", OP.READ),
                 binding(RT.GROUP, gp, "User:carol", OP.READ, pattern=PT.PREFIXED)):
        await_consumes(acl, "carol", t, gp + "1", [b"pg record"])
        err = first_error(acl, "carol", t, unique_topic("acl-zz"))
        assert err.code() == GROUP_AUTH, f"carol in a group outside the prefix: {err}"
        # the pattern is a prefix of the group id, not a substring
        err = first_error(acl, "carol", t, "x" + gp + "1")
        assert err.code() == GROUP_AUTH, f"carol in group x{gp}1: {err}"


def test_join_group_needs_read_on_the_group(acl):
    """Describe on the group lets FindCoordinator through; JoinGroup needs Read."""
    t = unique_topic("acl-jg")
    make_topic(acl, t, b"jg record")
    described_only, readable = unique_topic("acl-jg-describe"), unique_topic("acl-jg-read")
    with granted(acl, binding(RT.TOPIC, t, "User:carol", OP.READ),
                 binding(RT.GROUP, described_only, "User:carol", OP.DESCRIBE),
                 binding(RT.GROUP, readable, "User:carol", OP.READ)):
        await_consumes(acl, "carol", t, readable, [b"jg record"])
        assert raw_find_coordinator(acl, "carol", described_only) == 0
        err = first_error(acl, "carol", t, described_only)
        assert err.code() == GROUP_AUTH, f"carol with Describe only on the group: {err}"
        assert err.str().startswith("JoinGroup"), f"not from JoinGroup: {err.str()!r}"
        assert raw_join_group(acl, "carol", described_only) == 30


# ------------------------------------------------------------------ deny
def test_deny_for_a_user_beats_allow_for_everyone(acl):
    t = unique_topic("acl-deny")
    make_topic(acl, t)
    with granted(acl, binding(RT.TOPIC, t, "User:*", OP.WRITE),
                 binding(RT.TOPIC, t, "User:carol", OP.WRITE, PM.DENY)):
        wait_until(lambda: isinstance(produce_one(acl, "alice", t), int), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="User:* Write to let alice produce")
        assert_produced(produce_one(acl, "bob", t), "bob producing under User:* Write")
        assert_refused(produce_one(acl, "carol", t), "carol producing with a deny for her")


def test_deny_on_all_operations(acl):
    t = unique_topic("acl-deny-all")
    make_topic(acl, t)
    with granted(acl, binding(RT.TOPIC, t, "User:carol", OP.WRITE), binding(RT.TOPIC, t, "User:carol", OP.DESCRIBE),
                 binding(RT.TOPIC, t, "User:carol", OP.ALL, PM.DENY), binding(RT.TOPIC, t, "User:alice", OP.ALL)):
        wait_until(lambda: isinstance(produce_one(acl, "alice", t), int), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="All for alice to let her produce")
        assert t in topics_seen(acl, "alice")
        assert_refused(produce_one(acl, "carol", t), "carol producing with Write allowed and All denied")
        assert t not in topics_seen(acl, "carol"), "a deny on All still lets carol Describe the topic"


@pytest.mark.timeout(300)
def test_host_specific_deny(acl):
    """--deny-host 127.0.0.1 (where the clients are) denies; a deny for another host does not."""
    t = unique_topic("acl-host")
    make_topic(acl, t)
    out = acl_tool_ok(acl, "--add", "--allow-principal", "User:alice", "--allow-principal", "User:carol",
                      "--operation", "Write", "--topic", t,
                      "--deny-principal", "User:alice", "--deny-host", "127.0.0.1")
    assert f"{entry_text('User:alice', '127.0.0.1', 'WRITE', 'DENY')}" in out, out
    acls = [binding(RT.TOPIC, t, "User:alice", OP.WRITE), binding(RT.TOPIC, t, "User:carol", OP.WRITE),
            binding(RT.TOPIC, t, "User:alice", OP.WRITE, PM.DENY, host="127.0.0.1"),
            binding(RT.TOPIC, t, "User:carol", OP.WRITE, PM.DENY, host="10.9.9.9")]
    try:
        grant(acl, acls[3])
        wait_until(lambda: isinstance(produce_one(acl, "carol", t), int), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="carol (denied from 10.9.9.9 only) to produce from 127.0.0.1")
        assert_refused(produce_one(acl, "alice", t), "alice producing, denied from 127.0.0.1")
        assert listed(acl_tool_ok(acl, "--list", "--topic", t)) == {
            pattern_text("TOPIC", t, "LITERAL"): {entry_text("User:alice", "*", "WRITE", "ALLOW"),
                                                  entry_text("User:carol", "*", "WRITE", "ALLOW"),
                                                  entry_text("User:alice", "127.0.0.1", "WRITE", "DENY"),
                                                  entry_text("User:carol", "10.9.9.9", "WRITE", "DENY")}}
    finally:
        revoke(acl, *acls)


def test_super_user_ignores_deny_acls(acl):
    t = unique_topic("acl-super")
    make_topic(acl, t, b"super record")
    with granted(acl, binding(RT.TOPIC, t, "User:*", OP.ALL),
                 binding(RT.TOPIC, t, "User:admin", OP.ALL, PM.DENY),
                 binding(RT.TOPIC, t, "User:carol", OP.ALL, PM.DENY)):
        wait_until(lambda: isinstance(produce_one(acl, "alice", t), int), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="User:* All to let alice produce")
        assert_refused(produce_one(acl, "carol", t), "carol, with a deny on All")
        assert_produced(produce_one(acl, "admin", t), "admin (super user) with a deny on All")
        assert t in topics_seen(acl, "admin")
        values, errors = consume(acl, "admin", t, unique_topic("acl-super-g"), n=1)
        assert (values, errors) == ([b"super record"], []), f"admin consuming through a deny: {values} {errors}"


# ------------------------------------------------------------------ implied operations
def test_describe_is_implied_by_read_write_delete_alter(acl):
    ops = {"read": OP.READ, "write": OP.WRITE, "delete": OP.DELETE, "alter": OP.ALTER, "all": OP.ALL,
           "describe": OP.DESCRIBE, "alterconfigs": OP.ALTER_CONFIGS, "describeconfigs": OP.DESCRIBE_CONFIGS,
           "create": OP.CREATE}
    base = f"acl-imp-{uuid.uuid4().hex[:8]}-"
    for name in [*ops, "none"]:
        make_topic(acl, base + name)
    with granted(acl, *(binding(RT.TOPIC, base + name, "User:carol", op) for name, op in ops.items())):
        want = {base + n for n in ("read", "write", "delete", "alter", "all", "describe")}
        wait_until(lambda: topics_seen(acl, "carol") == want, timeout=SETTLE_TIMEOUT, interval=0.2,
                   what=f"carol to see exactly {sorted(want)}")
        err = topic_error(acl, "carol", base + "alterconfigs")
        assert err is not None and err.code() == TOPIC_AUTH, f"Metadata for the AlterConfigs topic: {err}"


def describe_configs_error(s: AclBroker, user: str, topic: str) -> Optional[KafkaError]:
    adm = admin(conf(s, user))
    for f in adm.describe_configs([ConfigResource(ResourceType.TOPIC, topic)],
                                  request_timeout=OP_TIMEOUT).values():
        try:
            entries = f.result(timeout=OP_TIMEOUT)
            assert "cleanup.policy" in entries, f"describe_configs {topic}: {sorted(entries)[:5]}"
            return None
        except KafkaException as exc:
            return exc.args[0]
    raise AssertionError("describe_configs returned no future")


def alter_configs_error(s: AclBroker, user: str, topic: str) -> Optional[KafkaError]:
    adm = admin(conf(s, user))
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for f in adm.incremental_alter_configs([res], request_timeout=OP_TIMEOUT).values():
        try:
            f.result(timeout=OP_TIMEOUT)
            return None
        except KafkaException as exc:
            return exc.args[0]
    raise AssertionError("incremental_alter_configs returned no future")


def test_describe_configs_is_implied_by_alter_configs(acl):
    base = f"acl-cfg-{uuid.uuid4().hex[:8]}-"
    alter, describe_only, read, none = base + "alter", base + "describeconfigs", base + "read", base + "none"
    for t in (alter, describe_only, read, none):
        make_topic(acl, t)
    with granted(acl, binding(RT.TOPIC, alter, "User:carol", OP.ALTER_CONFIGS),
                 binding(RT.TOPIC, describe_only, "User:carol", OP.DESCRIBE_CONFIGS),
                 binding(RT.TOPIC, read, "User:carol", OP.READ)):
        wait_until(lambda: describe_configs_error(acl, "carol", alter) is None, timeout=SETTLE_TIMEOUT,
                   interval=0.2, what="AlterConfigs to let carol describe the topic's configs")
        assert alter_configs_error(acl, "carol", alter) is None
        assert describe_configs_error(acl, "carol", describe_only) is None
        err = alter_configs_error(acl, "carol", describe_only)
        assert err is not None and err.code() == TOPIC_AUTH, f"AlterConfigs with DescribeConfigs only: {err}"
        for t, what in ((read, "DescribeConfigs with Read only"), (none, "DescribeConfigs without ACLs")):
            err = describe_configs_error(acl, "carol", t)
            assert err is not None and err.code() == TOPIC_AUTH, f"{what}: {err}"
        assert describe_configs_error(acl, "admin", none) is None


# ------------------------------------------------------------------ the cluster resource
def test_create_on_the_cluster_allows_create_topics(acl):
    first, second = unique_topic("acl-cc-1"), unique_topic("acl-cc-2")
    err = create_topic_error(acl, "carol", first)
    assert err is not None and err.code() == TOPIC_AUTH, f"CreateTopics as carol before the ACL: {err}"
    with granted(acl, binding(RT.BROKER, CLUSTER, "User:carol", OP.CREATE)):
        wait_until(lambda: create_topic_error(acl, "carol", second) is None, timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="Create on the cluster to let carol create a topic")
        seen = topics_seen(acl, "admin")
        assert second in seen and first not in seen, f"topics after carol's CreateTopics: {sorted(seen)}"
        assert second not in topics_seen(acl, "carol"), "creating a topic granted carol Describe on it"


@pytest.mark.timeout(300)
def test_acl_requests_need_describe_and_alter_on_the_cluster(acl):
    probe = binding(RT.TOPIC, unique_topic("acl-by-alice"), "User:alice", OP.READ)

    def alice_creates() -> Optional[KafkaError]:
        adm = admin(conf(acl, "alice"))
        try:
            adm.create_acls([probe], request_timeout=OP_TIMEOUT)[probe].result(timeout=OP_TIMEOUT)
            return None
        except KafkaException as exc:
            return exc.args[0]

    err = alice_creates()
    assert err is not None and err.code() == CLUSTER_AUTH, f"CreateAcls as alice: {err}"
    adm = admin(conf(acl, "alice"))
    (deleting,) = adm.delete_acls([EVERYTHING], request_timeout=OP_TIMEOUT).values()
    with pytest.raises(KafkaException) as info:
        deleting.result(timeout=OP_TIMEOUT)
    err = info.value.args[0]
    del info
    assert err.code() == CLUSTER_AUTH, f"DeleteAcls as alice: {err}"
    assert raw_describe_acls(acl, "alice") == (31, 0), "DescribeAcls v1 as alice"
    assert described(acl, EVERYTHING, "alice") == [], "librdkafka's describe_acls as alice"
    proc = acl_tool(acl, "--list", user="alice")  # it prints its error on stdout
    assert proc.returncode == 1 and proc.stdout.startswith(
        "Error while executing ACL command: org.apache.kafka.common.errors.ClusterAuthorizationException: "), \
        f"kafka-acls --list as alice: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    everything = described(acl, EVERYTHING)
    assert everything, "admin sees no ACLs at all"
    assert raw_describe_acls(acl, "admin")[0] == 0
    describe = binding(RT.BROKER, CLUSTER, "User:alice", OP.DESCRIBE)
    alter = binding(RT.BROKER, CLUSTER, "User:alice", OP.ALTER)
    try:
        grant(acl, describe)
        wait_until(lambda: key(describe) in described(acl, EVERYTHING, "alice"), timeout=SETTLE_TIMEOUT,
                   interval=0.2, what="Describe on the cluster to let alice describe ACLs")
        assert raw_describe_acls(acl, "alice")[0] == 0
        err = alice_creates()
        assert err is not None and err.code() == CLUSTER_AUTH, f"CreateAcls as alice with Describe only: {err}"
        grant(acl, alter)
        wait_until(lambda: alice_creates() is None, timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="Alter on the cluster to let alice create ACLs")
        assert key(probe) in described(acl, EVERYTHING)
    finally:
        revoke(acl, describe, alter, probe)


# ------------------------------------------------------------------ AdminClient ACL APIs
def test_describe_acls_filters(acl):
    """Filters by pattern type for User:dave's ACLs (the principal filter keeps other tests out)."""
    n = uuid.uuid4().hex[:6]
    lit = binding(RT.TOPIC, f"f{n}-x", "User:dave", OP.READ)
    pre = binding(RT.TOPIC, f"f{n}-", "User:dave", OP.READ, pattern=PT.PREFIXED)
    short = binding(RT.TOPIC, f"f{n}", "User:dave", OP.DESCRIBE, PM.DENY, pattern=PT.PREFIXED)
    star = binding(RT.TOPIC, "*", "User:dave", OP.DESCRIBE)
    longer = binding(RT.TOPIC, f"f{n}-x-y", "User:dave", OP.WRITE)
    lit_pre = binding(RT.TOPIC, f"f{n}-", "User:dave", OP.WRITE)
    group = binding(RT.GROUP, f"f{n}-x", "User:dave", OP.READ)
    every = [lit, pre, short, star, longer, lit_pre, group]

    def q(pattern: ResourcePatternType, name: Optional[str], restype: ResourceType = RT.TOPIC) -> List[Key]:
        return described(acl, AclBindingFilter(restype, name, pattern, "User:dave", None, OP.ANY, PM.ANY))

    def keys(*bs: AclBinding) -> List[Key]:
        return sorted(key(b) for b in bs)

    with granted(acl, *every):
        wait_until(lambda: q(PT.ANY, None, RT.ANY) == keys(*every), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="all of dave's ACLs to be described")
        assert q(PT.MATCH, f"f{n}-x") == keys(lit, pre, short, star)
        assert q(PT.MATCH, f"f{n}-") == keys(pre, short, star, lit_pre)
        assert q(PT.MATCH, "*") == keys(star)
        assert q(PT.MATCH, None) == keys(lit, pre, short, star, longer, lit_pre)
        assert q(PT.ANY, f"f{n}-x") == keys(lit)
        assert q(PT.ANY, f"f{n}-") == keys(pre, lit_pre)
        assert q(PT.ANY, None) == keys(lit, pre, short, star, longer, lit_pre)
        assert q(PT.LITERAL, f"f{n}-x") == keys(lit)
        assert q(PT.LITERAL, f"f{n}-") == keys(lit_pre)
        assert q(PT.LITERAL, None) == keys(lit, star, longer, lit_pre)
        assert q(PT.PREFIXED, f"f{n}-x") == []
        assert q(PT.PREFIXED, f"f{n}-") == keys(pre)
        assert q(PT.PREFIXED, None) == keys(pre, short)
        assert q(PT.ANY, None, RT.GROUP) == keys(group)
        assert q(PT.MATCH, f"f{n}-x", RT.GROUP) == keys(group)
        # operation and permission filters
        assert described(acl, AclBindingFilter(RT.ANY, None, PT.ANY, "User:dave", None, OP.READ, PM.ANY)) \
            == keys(lit, pre, group)
        assert described(acl, AclBindingFilter(RT.ANY, None, PT.ANY, "User:dave", None, OP.ANY, PM.DENY)) == keys(short)


def test_create_acls_refuses_invalid_bindings(acl):
    """confluent-kafka refuses them before sending; raw CreateAcls v1 gets Kafka's answer:
    UNKNOWN_SERVER_ERROR (-1), null message, for every creation of the request; none is created."""
    for kw in ({"resource_pattern_type": PT.MATCH}, {"resource_pattern_type": PT.ANY}, {"operation": OP.ANY}):
        args = dict(restype=RT.TOPIC, name="x", resource_pattern_type=PT.LITERAL, principal="User:erin", host="*",
                    operation=OP.READ, permission_type=PM.ALLOW)
        args.update(kw)
        with pytest.raises(ValueError):
            AclBinding(**args)
    n = uuid.uuid4().hex[:8]
    valid = (W_TOPIC, f"inv-{n}-ok", W_LITERAL, "User:erin", "*", W_READ, W_ALLOW)
    ok = binding(RT.TOPIC, f"inv-{n}-ok", "User:erin", OP.READ)
    erin = AclBindingFilter(RT.ANY, None, PT.ANY, "User:erin", None, OP.ANY, PM.ANY)
    if KAFKA_REFERENCE:
        # Kafka 4.1.1: an uncaught IllegalArgumentException on the controller fails the request.
        refused = {"MATCH": (-1, None), "ANY": (-1, None), "op": (-1, None)}
        mixed = [(-1, None), (-1, None)]
    else:
        # Millrace answers what Kafka's AclControlManager.validateNewAcl means to: INVALID_REQUEST
        # for the bad binding alone (docs/security.md, "Differences from Kafka").
        refused = {"MATCH": (42, "Invalid patternType MATCH"), "ANY": (42, "Invalid patternType ANY"),
                   "op": (42, "Invalid operation ANY")}
        mixed = [(0, None), refused["MATCH"]]
    assert raw_create_acls(acl, [(W_TOPIC, f"inv-{n}-m", W_MATCH, "User:erin", "*", W_READ, W_ALLOW)]) == [refused["MATCH"]]
    assert raw_create_acls(acl, [(W_TOPIC, f"inv-{n}-a", W_ANY, "User:erin", "*", W_READ, W_ALLOW)]) == [refused["ANY"]]
    assert raw_create_acls(acl, [(W_TOPIC, f"inv-{n}-o", W_LITERAL, "User:erin", "*", W_ANY, W_ALLOW)]) == [refused["op"]]
    assert raw_create_acls(acl, [valid, (W_TOPIC, f"inv-{n}-m2", W_MATCH, "User:erin", "*", W_READ, W_ALLOW)]) \
        == mixed, "a valid and an invalid creation in one request"
    created = [k for k in described(acl, erin) if f"inv-{n}" in k[1]]
    assert created == ([] if KAFKA_REFERENCE else [key(ok)]), "only valid bindings may be created"
    revoke(acl, ok)
    try:
        assert [err for err, _ in raw_create_acls(acl, [valid])] == [0], "the valid creation alone"
        wait_until(lambda: key(ok) in described(acl, erin), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="the valid ACL to be described")
    finally:
        revoke(acl, ok)


def test_delete_acls_returns_the_deleted_bindings(acl):
    n = uuid.uuid4().hex[:8]
    lit = binding(RT.TOPIC, f"del-{n}-x", "User:erin", OP.READ)
    pre = binding(RT.TOPIC, f"del-{n}-", "User:erin", OP.WRITE, pattern=PT.PREFIXED)
    group = binding(RT.GROUP, f"del-{n}-g", "User:erin", OP.READ)
    grant(acl, lit, pre, group)

    def erins() -> List[Key]:
        return [k for k in described(acl, AclBindingFilter(RT.ANY, None, PT.ANY, "User:erin", None, OP.ANY, PM.ANY))
                if f"del-{n}" in k[1]]

    def delete(flt: AclBindingFilter) -> List[Key]:
        adm = admin(conf(acl, "admin"))
        return sorted(key(b) for f in adm.delete_acls([flt], request_timeout=OP_TIMEOUT).values()
                      for b in f.result(timeout=OP_TIMEOUT))
    try:
        wait_until(lambda: erins() == sorted(key(b) for b in (lit, pre, group)), timeout=SETTLE_TIMEOUT,
                   interval=0.2, what="erin's three ACLs")
        # MATCH on a name under the prefix: the prefixed ACL, not the literal one of another name
        assert delete(AclBindingFilter(RT.TOPIC, f"del-{n}-zzz", PT.MATCH, "User:erin", None, OP.ANY, PM.ANY)) \
            == [key(pre)]
        assert delete(AclBindingFilter(RT.TOPIC, None, PT.ANY, "User:erin", None, OP.ANY, PM.ANY)) == [key(lit)]
        assert delete(AclBindingFilter(RT.TOPIC, None, PT.ANY, "User:erin", None, OP.ANY, PM.ANY)) == [], \
            "a second delete with the same filter"
        wait_until(lambda: erins() == [key(group)], timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="only erin's group ACL to be left")
    finally:
        revoke(acl, lit, pre, group)


# ------------------------------------------------------------------ groups listed and described per ACL
def test_list_and_describe_groups_per_acl(acl):
    t = unique_topic("acl-lg")
    make_topic(acl, t, b"lg record")
    a, b = unique_topic("acl-lg-a"), unique_topic("acl-lg-b")
    commit_group(acl, a, t)
    commit_group(acl, b, t)

    def listing(user: str) -> Set[str]:
        adm = admin(conf(acl, user))
        res = adm.list_consumer_groups(request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT)
        assert not res.errors, f"list_consumer_groups as {user}: {res.errors}"
        return {g.group_id for g in res.valid}

    def describe(user: str, group: str) -> Optional[KafkaError]:
        adm = admin(conf(acl, user))
        try:
            adm.describe_consumer_groups([group], request_timeout=OP_TIMEOUT)[group].result(timeout=OP_TIMEOUT)
            return None
        except KafkaException as exc:
            return exc.args[0]

    def offsets(user: str, group: str) -> Optional[KafkaError]:
        adm = admin(conf(acl, user))
        fut = adm.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=OP_TIMEOUT)
        try:
            fut[group].result(timeout=OP_TIMEOUT)
            return None
        except KafkaException as exc:
            return exc.args[0]

    assert {a, b} <= listing("admin")
    with granted(acl, binding(RT.GROUP, a, "User:carol", OP.DESCRIBE)):
        wait_until(lambda: listing("carol") == {a}, timeout=SETTLE_TIMEOUT, interval=0.2,
                   what=f"carol to list exactly {a}")
        assert describe("carol", a) is None and offsets("carol", a) is None
        for err, what in ((describe("carol", b), "DescribeGroups"), (offsets("carol", b), "OffsetFetch")):
            assert err is not None and err.code() == GROUP_AUTH, f"{what} of {b} as carol: {err}"
        assert listing("bob") == set(), "bob (no ACLs) lists groups"
        # Describe on the cluster: ListGroups lists them all, DescribeGroups still checks the group
        with granted(acl, binding(RT.BROKER, CLUSTER, "User:bob", OP.DESCRIBE)):
            wait_until(lambda: {a, b} <= listing("bob"), timeout=SETTLE_TIMEOUT, interval=0.2,
                       what="Describe on the cluster to let bob list every group")
            err = describe("bob", a)
            assert err is not None and err.code() == GROUP_AUTH, f"DescribeGroups of {a} as bob: {err}"


# ------------------------------------------------------------------ restart
@pytest.mark.timeout(400)
def test_acls_survive_a_restart(alice_write):
    s = alice_write
    pre = f"acl-rs-{uuid.uuid4().hex[:8]}-"
    mine = pre + "x"
    make_topic(s, mine, b"rs record")
    kept = [binding(RT.TOPIC, pre, "User:carol", OP.READ, pattern=PT.PREFIXED),
            binding(RT.GROUP, pre, "User:carol", OP.READ, pattern=PT.PREFIXED),
            binding(RT.TOPIC, s.t, "User:carol", OP.WRITE, PM.DENY, host="127.0.0.1"),
            binding(RT.BROKER, CLUSTER, "User:carol", OP.CREATE)]
    grant(s, *kept)
    try:
        await_consumes(s, "carol", mine, pre + "g", [b"rs record"])
        before = described(s, EVERYTHING)
        assert all(key(b) in before for b in kept)
        assert key(binding(RT.TOPIC, s.t, "User:alice", OP.WRITE)) in before
        old = s.broker
        rc = old.stop(timeout=30)
        assert rc == 0, f"the broker exited {rc} on SIGTERM; stderr tail:\n{old.stderr_tail()}"
        s.broker = Broker(settings=s.settings, data_dir=s.data).start()
        wait_until(lambda: admin(conf(s, "admin")).list_topics(timeout=3) is not None, timeout=OP_TIMEOUT,
                   interval=0.2, what="admin to get metadata over SASL_PLAINTEXT after the restart")
        wait_until(lambda: described(s, EVERYTHING) == before, timeout=SETTLE_TIMEOUT, interval=0.5,
                   what="the same ACLs after the restart")
        wait_until(lambda: isinstance(produce_one(s, "alice", s.t), int), timeout=SETTLE_TIMEOUT, interval=0.2,
                   what="alice to produce to t after the restart")
        assert_refused(produce_one(s, "carol", s.t), "carol (denied from 127.0.0.1) after the restart")
        assert_refused(produce_one(s, "bob", s.t), "bob after the restart")
        await_consumes(s, "carol", mine, pre + "g2", [b"rs record"])
        assert topics_seen(s, "bob") == set()
    finally:
        revoke(s, *kept)
