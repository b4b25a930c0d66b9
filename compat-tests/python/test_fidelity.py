"""What a client of Kafka 4.1 reads off the broker, field for field (issue 19, part 3).

- kafka-python infers the broker's version from ApiVersions (Produce v13 is
  its mark of 4.1) and picks its protocol versions by it;
- DescribeConfigs names where a broker config comes from: set at start-up
  (flags here, server.properties on Kafka) is STATIC_BROKER_CONFIG, never
  set is DEFAULT_CONFIG;
- ListConfigResources (key 74, KIP-1142) lists the topics and brokers whose
  configs can be described, by type;
- ListOffsets v8/v9: EARLIEST_LOCAL (-4) is the log start offset and
  LATEST_TIERED (-5) finds nothing on a broker without tiered storage;
- Produce v13 names topics by id (KIP-516), byte for byte here, since
  kafka-python stops at v9: a known id appends, an unknown id gets
  UNKNOWN_TOPIC_ID and appends nothing anywhere.

What Kafka 4.4's newer versions mean (issue 36), byte for byte where no client sends them yet:

- ApiVersions v5 (KIP-1242): a client names the cluster and node it means to reach, both or
  neither (one alone: INVALID_REQUEST); a wrong one is REBOOTSTRAP_REQUIRED with no API table; the
  connection stays open;
- ListOffsets v11 (KIP-1023): EARLIEST_PENDING_UPLOAD (-6) finds nothing on a topic without
  remote storage, as LATEST_TIERED does; v10 does not know it (UNSUPPORTED_VERSION);
- DescribeGroups v6 (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND "Group G not found."
  ("Dead" with no error below v6);
- DeleteGroups v3: a per-group error message, null for Kafka's own errors
  (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP);
- Metadata v13: a top-level error code, NONE;
- DescribeCluster v2 (KIP-1073): IncludeFencedBrokers, and IsFenced per broker;
- OffsetCommit v10 and OffsetFetch v10 (KIP-848) name topics by id alone: an unknown (or zero)
  id is UNKNOWN_TOPIC_ID on each partition, and "every topic" leaves out a deleted topic's
  offsets (the Java client 4.4 sends v10 whenever it knows every topic's id).

Runs against Apache Kafka too (the reference broker, 4.4.0) (compat-tests/reference/kafka-shim.sh),
with the same assertions.
"""

from __future__ import annotations

import os
import socket
import struct
import uuid
from typing import List, Optional, Tuple

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka import TopicCollection
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.protocol.consumer.offsets import OffsetSpec
from kafka.record.util import calc_crc32c, encode_varint

from millrace import unique_topic, wait_until

OP_TIMEOUT_MS = 15000
NONE = 0
UNKNOWN_TOPIC_ID = 100


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=OP_TIMEOUT_MS,
                              bootstrap_timeout_ms=OP_TIMEOUT_MS)
    try:
        yield client
    finally:
        client.close()


def create_topic(admin: KafkaAdminClient, partitions: int = 1) -> str:
    from kafka.admin import NewTopic

    topic = unique_topic("fidelity")
    admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=OP_TIMEOUT_MS)
    return topic


def broker_id(admin: KafkaAdminClient) -> int:
    return int(admin.describe_cluster()["brokers"][0]["broker_id"])


# The reference run: Apache Kafka behind compat-tests/reference/kafka-shim.sh.
ON_REFERENCE = os.environ.get("MILLRACE_BIN", "").endswith("kafka-shim.sh")

# ------------------------------------------------------------ version inference
def test_kafka_python_infers_kafka_4_3(broker):
    # kafka-python 3.0.12 marks 4.3 by DescribeLogDirs v5 and 4.2 by ListOffsets v11, the newest it
    # knows: both brokers serve them (Millrace gave (4, 1) while it served 4.1's versions).
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=None,
                             request_timeout_ms=OP_TIMEOUT_MS)
    try:
        assert consumer.config["api_version"] == (4, 3)
    finally:
        consumer.close()


# ------------------------------------------------------------ config sources
def test_describe_configs_names_static_and_default_broker_configs(broker, admin):
    node = broker_id(admin)
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)],
                                     config_filter="all")
    entries = configs["broker"][str(node)]
    # Set at start-up on both brokers: --listen / --data-dir here, server.properties on Kafka.
    for name in ("listeners", "log.dirs"):
        assert entries[name]["config_source"] == "STATIC_BROKER_CONFIG", (name, entries[name])
        assert entries[name]["value"], (name, entries[name])
    # Not updatable without a restart on either (Kafka lets `listeners` change per broker).
    assert entries["log.dirs"]["read_only"] is True
    # Set by neither.
    assert entries["message.max.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert entries["message.max.bytes"]["value"] == "1048588"


# ------------------------------------------------------------ ListConfigResources
def test_list_config_resources_by_type(broker, admin):
    topic = create_topic(admin)
    node = str(broker_id(admin))

    def listed() -> dict:
        return admin.list_config_resources()

    wait_until(lambda: topic in listed().get("topic", []), timeout=15, what=f"{topic} listed")
    every = listed()
    assert node in every["broker"], every
    assert node in every["broker_logger"], every
    assert set(every) <= {"topic", "broker", "broker_logger", "client_metrics", "group"}, every

    only_topics = admin.list_config_resources(resource_types=["TOPIC"])
    assert set(only_topics) == {"topic"}, only_topics
    assert topic in only_topics["topic"]

    only_brokers = admin.list_config_resources(resource_types=["BROKER"])
    assert only_brokers == {"broker": [node]}, only_brokers


# ------------------------------------------------------------ ListOffsets v8/v9
def test_list_offsets_earliest_local_and_latest_tiered(broker, admin):
    topic = create_topic(admin)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all",
                             request_timeout_ms=OP_TIMEOUT_MS, max_block_ms=OP_TIMEOUT_MS)
    try:
        for i in range(10):
            producer.send(topic, value=b"v%d" % i, partition=0)
        producer.flush(timeout=OP_TIMEOUT_MS / 1000)
    finally:
        producer.close(timeout=5)
    tp = TopicPartition(topic, 0)
    admin.delete_records({tp: 4}, timeout_ms=OP_TIMEOUT_MS)

    found = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST_LOCAL})
    assert found[tp].offset == 4, found
    found = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})
    assert found[tp].offset == 4, found
    found = admin.list_partition_offsets({tp: OffsetSpec.LATEST})
    assert found[tp].offset == 10, found
    found = admin.list_partition_offsets({tp: OffsetSpec.LATEST_TIERED})
    assert found[tp].offset == -1, found


# ------------------------------------------------------------ Produce v13 by topic id
def varint(v: int) -> bytes:
    out = bytearray()
    encode_varint(v, out.append)
    return bytes(out)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def one_record_batch(value: bytes) -> bytes:
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    records = varint(len(body)) + body
    ts = 1_700_000_000_000
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts, ts, -1, -1, -1, 1) + records
    crc = calc_crc32c(memoryview(after_crc))
    inner = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(inner)) + inner


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        assert len(out) == n, "response truncated"
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def skip_tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def produce_v13(bootstrap: str, topic_id: uuid.UUID, value: bytes) -> List[Tuple[uuid.UUID, int, int]]:
    """One Produce v13 (acks=-1) of one record to partition 0 → [(topic_id, error, base_offset)]."""
    partition = struct.pack(">i", 0) + uvarint(len(one_record_batch(value)) + 1) \
        + one_record_batch(value) + uvarint(0)
    topic_data = topic_id.bytes + uvarint(2) + partition + uvarint(0)
    body = uvarint(0) + struct.pack(">hi", -1, OP_TIMEOUT_MS) + uvarint(2) + topic_data + uvarint(0)
    client = b"fidelity"
    header = struct.pack(">hhih", 0, 13, 7, len(client)) + client + uvarint(0)
    frame = header + body
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=OP_TIMEOUT_MS / 1000) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        r = Reader(recv_exact(sock, size))
    (correlation,) = r.unpack(">i")
    assert correlation == 7
    r.skip_tagged()
    out = []
    for _ in range(r.uvarint() - 1):
        tid = uuid.UUID(bytes=r.take(16))
        for _ in range(r.uvarint() - 1):
            _index, error, base_offset, _append_time, _start = r.unpack(">ihqqq")
            for _ in range(r.uvarint() - 1):  # record_errors
                r.unpack(">i")
                n = r.uvarint()
                r.take(max(n - 1, 0))
            n = r.uvarint()  # error_message
            r.take(max(n - 1, 0))
            r.skip_tagged()
            out.append((tid, error, base_offset))
        r.skip_tagged()
    return out


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        out += chunk
    return bytes(out)


def topic_id_of(bootstrap: str, topic: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=15)
    msb = description.topic_id.get_most_significant_bits() & (2**64 - 1)
    lsb = description.topic_id.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


def test_produce_v13_by_topic_id(broker, admin):
    topic = create_topic(admin)
    tid = topic_id_of(broker.bootstrap, topic)
    assert tid.int != 0

    assert produce_v13(broker.bootstrap, tid, b"first") == [(tid, NONE, 0)]
    assert produce_v13(broker.bootstrap, tid, b"second") == [(tid, NONE, 1)]

    unknown = uuid.uuid4()
    answer = produce_v13(broker.bootstrap, unknown, b"nowhere")
    assert [(t, e) for t, e, _ in answer] == [(unknown, UNKNOWN_TOPIC_ID)], answer

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             request_timeout_ms=OP_TIMEOUT_MS, consumer_timeout_ms=1000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        got: List[Optional[bytes]] = []
        wait_until(lambda: got.extend(r.value for r in consumer) or len(got) >= 2,
                   timeout=15, what="both records read back")
        assert got == [b"first", b"second"]
        assert consumer.end_offsets([tp])[tp] == 2
    finally:
        consumer.close()


# ------------------------------------------------------------ Kafka 4.4's newer versions, raw
REBOOTSTRAP_REQUIRED = 129
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68


def cstr(value: Optional[str]) -> bytes:
    """A compact (nullable) string."""
    if value is None:
        return uvarint(0)
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


class Conn:
    """One connection speaking flexible request headers (v2) by hand."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=OP_TIMEOUT_MS / 1000)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, key: int, version: int, body: bytes) -> Reader:
        """The response body; ApiVersions answers with header v0, everything else v1."""
        self.correlation += 1
        client = b"fidelity"
        header = struct.pack(">hhih", key, version, self.correlation, len(client)) + client + uvarint(0)
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", recv_exact(self.sock, 4))[0]
        r = Reader(recv_exact(self.sock, size))
        (correlation,) = r.unpack(">i")
        assert correlation == self.correlation
        if key != 18:
            r.skip_tagged()
        return r

    def cstring(self, r: Reader) -> Optional[str]:
        n = r.uvarint()
        return None if n == 0 else r.take(n - 1).decode()


def api_versions_v5(conn: Conn, cluster_id: Optional[str], node_id: int) -> Tuple[int, int]:
    """(error code, number of API keys) of ApiVersions v5 naming CLUSTER_ID and NODE_ID."""
    r = conn.call(18, 5, cstr("fidelity") + cstr("1.0") + cstr(cluster_id) + struct.pack(">i", node_id)
                  + uvarint(0))
    (error,) = r.unpack(">h")
    return error, r.uvarint() - 1


def identity(bootstrap: str) -> Tuple[str, int]:
    """(cluster id, node id) of the one broker at BOOTSTRAP."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cluster_id = admin.describe_cluster(request_timeout=15).result(timeout=15).cluster_id
    node_id = admin.list_topics(timeout=15).orig_broker_id
    return cluster_id, node_id


def test_api_versions_v5_checks_the_cluster_and_node_meant(broker):
    cluster_id, node_id = identity(broker.bootstrap)
    conn = Conn(broker.bootstrap)
    try:
        error, keys = api_versions_v5(conn, None, -1)
        assert error == NONE and keys > 50, (error, keys)
        assert api_versions_v5(conn, cluster_id, node_id)[0] == NONE
        # Another cluster, another node: look for the cluster again, and no table.
        assert api_versions_v5(conn, "not-" + cluster_id, node_id) == (REBOOTSTRAP_REQUIRED, 0)
        assert api_versions_v5(conn, cluster_id, node_id + 1) == (REBOOTSTRAP_REQUIRED, 0)
        # One without the other.
        assert api_versions_v5(conn, cluster_id, -1) == (INVALID_REQUEST, 0)
        assert api_versions_v5(conn, None, node_id) == (INVALID_REQUEST, 0)
        # The connection stays usable.
        error, keys = api_versions_v5(conn, None, -1)
        assert error == NONE and keys > 50
    finally:
        conn.close()


def list_offsets(conn: Conn, version: int, topic: str, timestamp: int) -> Tuple[int, int, int, int]:
    """(error, timestamp, offset, leader epoch) of partition 0 for TIMESTAMP (ListOffsets v10+)."""
    partition = struct.pack(">iiq", 0, -1, timestamp) + uvarint(0)
    body = struct.pack(">ib", -1, 0) + uvarint(2) + cstr(topic) + uvarint(2) + partition + uvarint(0) \
        + struct.pack(">i", OP_TIMEOUT_MS) + uvarint(0)
    r = conn.call(2, version, body)
    r.unpack(">i")  # throttle
    assert r.uvarint() == 2
    assert conn.cstring(r) == topic
    assert r.uvarint() == 2
    _index, error, ts, offset, epoch = r.unpack(">ihqqi")
    return error, ts, offset, epoch


def test_list_offsets_v11_earliest_pending_upload(broker, admin):
    topic = create_topic(admin)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", request_timeout_ms=OP_TIMEOUT_MS)
    try:
        for i in range(3):
            producer.send(topic, value=b"v%d" % i, partition=0)
        producer.flush(timeout=OP_TIMEOUT_MS / 1000)
    finally:
        producer.close(timeout=5)
    conn = Conn(broker.bootstrap)
    try:
        # No remote storage: nothing is pending upload, as nothing is tiered (-5).
        assert list_offsets(conn, 11, topic, -6) == (NONE, -1, -1, -1)
        assert list_offsets(conn, 11, topic, -5) == (NONE, -1, -1, -1)
        assert list_offsets(conn, 11, topic, -1)[:3] == (NONE, -1, 3)
        assert list_offsets(conn, 10, topic, -6)[0] == UNSUPPORTED_VERSION
    finally:
        conn.close()


def describe_group_v6(conn: Conn, group: str) -> Tuple[int, Optional[str], Optional[str]]:
    """(error, error message, state) of GROUP by DescribeGroups v6."""
    r = conn.call(15, 6, uvarint(2) + cstr(group) + b"\x00" + uvarint(0))
    r.unpack(">i")  # throttle
    assert r.uvarint() == 2
    (error,) = r.unpack(">h")
    message = conn.cstring(r)
    assert conn.cstring(r) == group
    state = conn.cstring(r)
    return error, message, state


def delete_groups_v3(conn: Conn, groups: List[str]) -> List[Tuple[str, int, Optional[str]]]:
    r = conn.call(42, 3, uvarint(len(groups) + 1) + b"".join(cstr(g) for g in groups) + uvarint(0))
    r.unpack(">i")
    out = []
    for _ in range(r.uvarint() - 1):
        group = conn.cstring(r)
        (error,) = r.unpack(">h")
        out.append((group, error, conn.cstring(r)))
        r.skip_tagged()
    return sorted(out)


def test_describe_groups_v6_and_delete_groups_v3(broker, admin):
    topic = create_topic(admin)
    group = unique_topic("fidelity-group")
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", request_timeout_ms=OP_TIMEOUT_MS)
    conn = Conn(broker.bootstrap)
    try:
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(),
                   timeout=30, what="the consumer to join its group")
        error, message, state = describe_group_v6(conn, group)
        assert (error, message, state) == (NONE, None, "Stable")
        missing = unique_topic("no-such-group")
        assert describe_group_v6(conn, missing) == (GROUP_ID_NOT_FOUND, f"Group {missing} not found.", "Dead")
        assert delete_groups_v3(conn, [group, missing]) == sorted(
            [(group, NON_EMPTY_GROUP, None), (missing, GROUP_ID_NOT_FOUND, None)])
        consumer.close()
        wait_until(lambda: describe_group_v6(conn, group)[2] == "Empty", timeout=30,
                   what="the group to be empty once its member left")
        assert delete_groups_v3(conn, [group]) == [(group, NONE, None)]
        assert describe_group_v6(conn, group)[0] == GROUP_ID_NOT_FOUND
    finally:
        consumer.close()
        conn.close()


def test_metadata_v13_and_describe_cluster_v2(broker):
    conn = Conn(broker.bootstrap)
    try:
        # Metadata v13, no topics: brokers, cluster id, controller, topics, then the top-level code.
        r = conn.call(3, 13, uvarint(1) + b"\x00" + b"\x00" + uvarint(0))
        r.unpack(">i")
        brokers = []
        for _ in range(r.uvarint() - 1):
            (node,) = r.unpack(">i")
            conn.cstring(r)
            (port,) = r.unpack(">i")
            conn.cstring(r)
            r.skip_tagged()
            brokers.append((node, port))
        assert len(brokers) == 1 and brokers[0][1] == int(broker.bootstrap.rsplit(":", 1)[1]), brokers
        conn.cstring(r)  # cluster id
        r.unpack(">i")  # controller
        assert r.uvarint() == 1, "no topics asked, none listed"
        (error,) = r.unpack(">h")
        assert error == NONE

        # DescribeCluster v2 with IncludeFencedBrokers: the one broker, not fenced.
        r = conn.call(60, 2, b"\x00" + b"\x01" + b"\x01" + uvarint(0))
        r.unpack(">i")
        (error,) = r.unpack(">h")
        assert error == NONE
        conn.cstring(r)  # error message
        r.unpack(">b")  # endpoint type
        conn.cstring(r)  # cluster id
        r.unpack(">i")  # controller
        listed = []
        for _ in range(r.uvarint() - 1):
            (node,) = r.unpack(">i")
            conn.cstring(r)
            (port,) = r.unpack(">i")
            conn.cstring(r)
            (fenced,) = r.unpack(">?")
            r.skip_tagged()
            listed.append((node, fenced))
        assert listed == [(brokers[0][0], False)], listed
    finally:
        conn.close()


# ------------------------------------------------------------ OffsetCommit / OffsetFetch v10
COORDINATOR_WAIT = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
UNKNOWN_TOPIC_OR_PARTITION = 3


def find_coordinator(conn: Conn, group: str) -> None:
    """FindCoordinator v4 for GROUP: Kafka makes `__consumer_offsets` on the first one."""
    conn.call(10, 4, b"\x00" + uvarint(2) + cstr(group) + uvarint(0))


def commit_v10(conn: Conn, group: str, topics: List[Tuple[uuid.UUID, List[Tuple[int, int]]]],
               generation: int = -1, member: str = "") -> List[Tuple[uuid.UUID, List[Tuple[int, int]]]]:
    """OffsetCommit v10: [(topic id, [(partition, error)])], partitions sorted."""
    body = cstr(group) + struct.pack(">i", generation) + cstr(member) + cstr(None) + uvarint(len(topics) + 1)
    for tid, partitions in topics:
        body += tid.bytes + uvarint(len(partitions) + 1)
        body += b"".join(struct.pack(">iqi", p, offset, -1) + cstr("md") + uvarint(0) for p, offset in partitions)
        body += uvarint(0)
    r = conn.call(8, 10, body + uvarint(0))
    r.unpack(">i")
    out = []
    for _ in range(r.uvarint() - 1):
        tid = uuid.UUID(bytes=r.take(16))
        answered = []
        for _ in range(r.uvarint() - 1):
            answered.append(r.unpack(">ih"))
            r.skip_tagged()
        r.skip_tagged()
        out.append((tid, sorted(answered)))
    return out


def fetch_v10(conn: Conn, group: str, topics: Optional[List[Tuple[uuid.UUID, List[int]]]]):
    """OffsetFetch v10 for one group: (group error, {topic id: [(partition, offset, metadata, error)]})."""
    body = uvarint(2) + cstr(group) + cstr(None) + struct.pack(">i", -1)
    if topics is None:
        body += uvarint(0)
    else:
        body += uvarint(len(topics) + 1)
        for tid, partitions in topics:
            body += tid.bytes + uvarint(len(partitions) + 1) + b"".join(struct.pack(">i", p) for p in partitions)
            body += uvarint(0)
    r = conn.call(9, 10, body + uvarint(0) + b"\x00" + uvarint(0))
    r.unpack(">i")
    assert r.uvarint() == 2
    assert conn.cstring(r) == group
    found = {}
    for _ in range(r.uvarint() - 1):
        tid = uuid.UUID(bytes=r.take(16))
        partitions = []
        for _ in range(r.uvarint() - 1):
            index, offset, _epoch = r.unpack(">iqi")
            metadata = conn.cstring(r)
            (error,) = r.unpack(">h")
            r.skip_tagged()
            partitions.append((index, offset, metadata, error))
        r.skip_tagged()
        found[tid] = sorted(partitions)
    (error,) = r.unpack(">h")
    return error, found


def test_offset_commit_and_fetch_v10_by_topic_id(broker, admin):
    topic = create_topic(admin, partitions=2)
    tid = topic_id_of(broker.bootstrap, topic)
    group = unique_topic("fidelity-v10")
    unknown, zero = uuid.uuid4(), uuid.UUID(int=0)
    conn = Conn(broker.bootstrap)
    try:
        find_coordinator(conn, group)
        answers: list = []
        wait_until(lambda: answers.append(commit_v10(conn, group, [(tid, [(0, 5), (1, 7), (9, 1)])]))
                   or all(e not in COORDINATOR_WAIT for _, ps in answers[-1] for _, e in ps),
                   timeout=60, what="the group coordinator to take a commit")
        assert answers[-1] == [(tid, [(0, NONE), (1, NONE), (9, UNKNOWN_TOPIC_OR_PARTITION)])]
        assert commit_v10(conn, group, [(unknown, [(0, 1)]), (zero, [(0, 1)])]) == [
            (unknown, [(0, UNKNOWN_TOPIC_ID)]), (zero, [(0, UNKNOWN_TOPIC_ID)])]

        asked = fetch_v10(conn, group, [(tid, [0, 1, 9]), (unknown, [0])])
        assert asked == (NONE, {
            tid: [(0, 5, "md", NONE), (1, 7, "md", NONE), (9, -1, "", NONE)],
            unknown: [(0, -1, "", UNKNOWN_TOPIC_ID)],
        })
        assert fetch_v10(conn, group, None) == (NONE, {tid: [(0, 5, "md", NONE), (1, 7, "md", NONE)]})

        # A deleted topic has no id: "every topic" leaves it out, its old id is unknown.
        admin.delete_topics([topic], timeout_ms=OP_TIMEOUT_MS)
        wait_until(lambda: fetch_v10(conn, group, None) == (NONE, {}), timeout=30,
                   what="the deleted topic's offsets to leave the answer")
        assert fetch_v10(conn, group, [(tid, [0])]) == (NONE, {tid: [(0, -1, "", UNKNOWN_TOPIC_ID)]})
    finally:
        conn.close()
