"""kafka-python 3.x (pure Python) against one Millrace broker.

kafka-python 3.x turns idempotence on by default, so every producer here sets
enable_idempotence=False (no InitProducerId yet). Consumers have no group
(group_id=None) and use assign() + seek() with explicit offsets.
"""

from __future__ import annotations

import time
from typing import Dict, List

import kafka.errors as Errors
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from compat_data import Rec, now_ms, roundtrip_records
from millrace import unique_topic, wait_until

OP_TIMEOUT_MS = 15000
CREATE_TIME = 0  # ConsumerRecord.timestamp_type for CreateTime


# ---------------------------------------------------------------- helpers
@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=OP_TIMEOUT_MS,
                              bootstrap_timeout_ms=OP_TIMEOUT_MS)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def producer(broker):
    made: List[KafkaProducer] = []

    def make(**extra) -> KafkaProducer:
        conf = dict(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all",
                    linger_ms=5, request_timeout_ms=OP_TIMEOUT_MS, max_block_ms=OP_TIMEOUT_MS,
                    delivery_timeout_ms=30000)
        conf.update(extra)
        p = KafkaProducer(**conf)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close(timeout=5)


@pytest.fixture
def consumer(broker):
    made: List[KafkaConsumer] = []

    def make(**extra) -> KafkaConsumer:
        conf = dict(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                    auto_offset_reset="none", request_timeout_ms=OP_TIMEOUT_MS,
                    consumer_timeout_ms=1000)
        conf.update(extra)
        c = KafkaConsumer(**conf)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close(autocommit=False)


def topic_ready(admin: KafkaAdminClient, name: str, partitions: int) -> bool:
    [t] = admin.describe_topics([name])
    return (t["error_code"] == 0 and len(t["partitions"]) == partitions
            and all(p["error_code"] == 0 and p["leader_id"] >= 0 for p in t["partitions"]))


def create_topic(admin: KafkaAdminClient, name: str, partitions: int = 1, rf: int = 1) -> None:
    admin.create_topics({name: {"num_partitions": partitions, "replication_factor": rf}},
                        timeout_ms=10000)
    # CreateTopics may answer before the topic is visible (Kafka does): wait.
    wait_until(lambda: topic_ready(admin, name, partitions), timeout=OP_TIMEOUT_MS / 1000,
               what=f"topic {name} in metadata with leaders")


def produce_all(p: KafkaProducer, topic: str, recs: List[Rec], partition=None):
    futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers) or None,
                      timestamp_ms=r.timestamp, partition=partition) for r in recs]
    p.flush(timeout=30)
    return [f.get(timeout=OP_TIMEOUT_MS / 1000) for f in futures]


def consume(c: KafkaConsumer, starts: Dict[TopicPartition, int], count: int, timeout: float = 30.0):
    """assign() + seek() to explicit offsets, poll until ``count`` records."""
    c.assign(list(starts))
    for tp, off in starts.items():
        c.seek(tp, off)
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(out)} of {count} records within {timeout}s")
        for recs in c.poll(timeout_ms=500).values():
            out.extend(recs)
    return out


def assert_same(msg, rec: Rec, offset: int, where: str = "") -> None:
    label = f"{where}offset {offset}"
    assert msg.offset == offset, label
    assert msg.key == rec.key, f"{label}: key"
    assert msg.value == rec.value, f"{label}: value"
    assert list(msg.headers or []) == rec.headers, f"{label}: headers"
    assert (msg.timestamp_type, msg.timestamp) == (CREATE_TIME, rec.timestamp), f"{label}: timestamp"


def broker_error(call, *args, **kwargs) -> BaseException:
    with pytest.raises(Errors.KafkaError) as info:
        call(*args, **kwargs)
    return info.value


# ---------------------------------------------------------------- metadata
def test_api_versions_look_like_a_modern_broker(broker, consumer):
    """kafka-python guesses the broker version from ApiVersions and gates
    features (record headers, v2 batches, ...) on it."""
    c = consumer()
    assert c.config["api_version"] >= (2, 1), c.config["api_version"]


def test_metadata_lists_the_broker(broker, admin):
    cluster = admin.describe_cluster()
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [("127.0.0.1", broker.port)]
    assert cluster["controller_id"] == cluster["brokers"][0]["broker_id"]
    assert cluster["cluster_id"]


def test_consumer_metadata_topics_and_partitions(broker, admin, consumer):
    topic = unique_topic("kp-meta")
    create_topic(admin, topic, partitions=3)
    c = consumer()
    wait_until(lambda: c.partitions_for_topic(topic) == {0, 1, 2}, timeout=OP_TIMEOUT_MS / 1000,
               what="partitions_for_topic")
    assert topic in c.topics()


# ---------------------------------------------------------------- admin
def test_create_topic_with_partitions_shows_in_metadata(broker, admin):
    topic = unique_topic("kp-create")
    create_topic(admin, topic, partitions=3)
    assert topic in admin.list_topics()
    [t] = admin.describe_topics([topic])
    bid = admin.describe_cluster()["brokers"][0]["broker_id"]
    assert t["name"] == topic and t["error_code"] == 0 and not t["is_internal"]
    assert sorted(p["partition_index"] for p in t["partitions"]) == [0, 1, 2]
    for p in t["partitions"]:
        assert p["error_code"] == 0
        assert p["leader_id"] == bid
        assert p["replica_nodes"] == [bid]
        assert p["isr_nodes"] == [bid]


def test_create_existing_topic_fails_topic_already_exists(broker, admin):
    topic = unique_topic("kp-exists")
    create_topic(admin, topic)
    err = broker_error(admin.create_topics, {topic: {"num_partitions": 1, "replication_factor": 1}})
    assert isinstance(err, Errors.TopicAlreadyExistsError), repr(err)


@pytest.mark.parametrize("name", ["has space", "slash/in/name", "star*", "..", "x" * 250])
def test_create_topic_invalid_name_fails(broker, admin, name):
    err = broker_error(admin.create_topics, {name: {"num_partitions": 1, "replication_factor": 1}})
    assert isinstance(err, Errors.InvalidTopicError), repr(err)  # INVALID_TOPIC_EXCEPTION (17)


def test_create_topic_replication_factor_3_fails(broker, admin):
    topic = unique_topic("kp-rf3")
    err = broker_error(admin.create_topics, {topic: {"num_partitions": 1, "replication_factor": 3}})
    assert isinstance(err, Errors.InvalidReplicationFactorError), repr(err)  # 38
    assert topic not in admin.list_topics()


def test_create_topic_zero_partitions_fails(broker, admin):
    topic = unique_topic("kp-zero")
    err = broker_error(admin.create_topics, {topic: {"num_partitions": 0, "replication_factor": 1}})
    assert isinstance(err, Errors.InvalidPartitionsError), repr(err)  # 37


def test_create_topic_with_broker_defaults(broker, admin):
    """CreateTopics v4+: -1 partitions / replication factor = broker default."""
    topic = unique_topic("kp-defaults")
    admin.create_topics([topic])  # kafka-python sends -1/-1 for plain names
    wait_until(lambda: topic_ready(admin, topic, 1), timeout=OP_TIMEOUT_MS / 1000,
               what=f"{topic} with num.partitions=1")


def test_delete_topic_disappears_from_metadata(broker, admin):
    topic = unique_topic("kp-delete")
    create_topic(admin, topic, partitions=2)
    admin.delete_topics([topic], timeout_ms=10000)
    wait_until(lambda: topic not in admin.list_topics(), timeout=OP_TIMEOUT_MS / 1000,
               what=f"{topic} gone from list_topics")
    [t] = admin.describe_topics([topic])
    assert t["error_code"] == Errors.UnknownTopicOrPartitionError.errno


def test_delete_unknown_topic_fails(broker, admin):
    err = broker_error(admin.delete_topics, [unique_topic("kp-nosuch")])
    assert isinstance(err, Errors.UnknownTopicOrPartitionError), repr(err)


def test_create_partitions(broker, admin, producer, consumer):
    topic = unique_topic("kp-morepart")
    create_topic(admin, topic)
    admin.create_partitions({topic: 4})
    wait_until(lambda: topic_ready(admin, topic, 4), timeout=OP_TIMEOUT_MS / 1000, what="4 partitions")
    rec = Rec(b"k", b"to-partition-3", [], now_ms())
    p = producer()
    wait_until(lambda: p.partitions_for(topic) == {0, 1, 2, 3}, timeout=OP_TIMEOUT_MS / 1000,
               what="producer sees 4 partitions")
    [md] = produce_all(p, topic, [rec], partition=3)
    assert (md.partition, md.offset) == (3, 0)
    [msg] = consume(consumer(), {TopicPartition(topic, 3): 0}, 1)
    assert_same(msg, rec, 0)


# ---------------------------------------------------------------- produce / consume
def test_roundtrip_keys_null_values_headers_timestamps(broker, admin, producer, consumer):
    topic = unique_topic("kp-roundtrip")
    create_topic(admin, topic)
    recs = roundtrip_records(both_null=False, null_header_values=False)
    mds = produce_all(producer(), topic, recs)
    assert [(m.partition, m.offset) for m in mds] == [(0, i) for i in range(len(recs))]
    assert [m.timestamp for m in mds] == [r.timestamp for r in recs]  # CreateTime echoed
    c = consumer()
    msgs = consume(c, {TopicPartition(topic, 0): 0}, len(recs))
    assert len(msgs) == len(recs)
    for i, (msg, rec) in enumerate(zip(msgs, recs)):
        assert msg.topic == topic and msg.partition == 0
        assert_same(msg, rec, i)
    assert c.poll(timeout_ms=1000) == {}, "more records than produced"


def test_roundtrip_one_record_per_batch(broker, admin, producer, consumer):
    topic = unique_topic("kp-rt-single")
    create_topic(admin, topic)
    recs = roundtrip_records(both_null=False, null_header_values=False)
    p = producer(linger_ms=0)
    for i, rec in enumerate(recs):
        [md] = produce_all(p, topic, [rec])
        assert md.offset == i
    msgs = consume(consumer(), {TopicPartition(topic, 0): 0}, len(recs))
    for i, (msg, rec) in enumerate(zip(msgs, recs)):
        assert_same(msg, rec, i)


def test_produce_auto_creates_topic(broker, admin, producer):
    topic = unique_topic("kp-autocreate")
    [md] = produce_all(producer(), topic, [Rec(b"k", b"v", [("h", b"v")], now_ms())])
    assert (md.partition, md.offset) == (0, 0)
    assert topic in admin.list_topics()
    assert topic_ready(admin, topic, 1)  # num.partitions=1


def test_many_messages_small_fetches_from_mid_batch(broker, admin, producer, consumer):
    topic = unique_topic("kp-many")
    create_topic(admin, topic)
    base = now_ms() - 60_000
    recs = [Rec(f"k{i}".encode(), f"value-{i:05d}-".encode() * 5, [("i", str(i).encode())], base + i)
            for i in range(2000)]
    mds = produce_all(producer(linger_ms=50), topic, recs)
    assert [m.offset for m in mds] == list(range(2000))
    start = 1234
    c = consumer(max_partition_fetch_bytes=1024, fetch_max_bytes=1024)
    msgs = consume(c, {TopicPartition(topic, 0): start}, 2000 - start, timeout=60)
    for i, msg in enumerate(msgs, start):
        assert_same(msg, recs[i], i)


def test_multi_partition_produce_consume(broker, admin, producer, consumer):
    topic = unique_topic("kp-multi")
    create_topic(admin, topic, partitions=3)
    base = now_ms() - 60_000
    p = producer()
    wait_until(lambda: p.partitions_for(topic) == {0, 1, 2}, timeout=OP_TIMEOUT_MS / 1000,
               what="producer sees 3 partitions")
    per_part = {pid: [Rec(f"p{pid}-k{i}".encode(), f"p{pid}-v{i}".encode(), [], base + 10 * i + pid)
                      for i in range(20)] for pid in range(3)}
    for pid, recs in per_part.items():
        mds = produce_all(p, topic, recs, partition=pid)
        assert [(m.partition, m.offset) for m in mds] == [(pid, i) for i in range(20)]
    msgs = consume(consumer(), {TopicPartition(topic, pid): 0 for pid in range(3)}, 60)
    for pid, recs in per_part.items():
        got = [m for m in msgs if m.partition == pid]
        assert len(got) == 20
        for i, (m, rec) in enumerate(zip(got, recs)):
            assert_same(m, rec, i, where=f"partition {pid} ")


# ---------------------------------------------------------------- offsets
def _ts_topic(admin, producer, name):
    topic = unique_topic(name)
    create_topic(admin, topic)
    base = now_ms() - 5 * 60_000
    recs = [Rec(f"k{i}".encode(), f"v{i}".encode(), [], base + i * 1000) for i in range(10)]
    p = producer()
    produce_all(p, topic, recs[:5])
    produce_all(p, topic, recs[5:])
    return topic, base


@pytest.mark.parametrize(
    "delta,expected",
    [(-1, 0), (0, 0), (2000, 2), (2500, 3), (4001, 5), (5500, 6), (9000, 9), (9001, None)],
    ids=["before-all", "exact-first", "exact-mid", "between", "batch-boundary", "mid-2nd-batch",
         "exact-last", "after-all"],
)
def test_offsets_for_times(broker, admin, producer, consumer, delta, expected):
    topic, base = _ts_topic(admin, producer, "kp-times")
    tp = TopicPartition(topic, 0)
    result = consumer().offsets_for_times({tp: base + delta}, timeout_ms=OP_TIMEOUT_MS)
    if expected is None:
        assert result[tp] is None  # no record with timestamp >= target
    else:
        # first offset whose timestamp >= target, with that record's timestamp
        assert (result[tp].offset, result[tp].timestamp) == (expected, base + expected * 1000)


def test_beginning_and_end_offsets(broker, admin, producer, consumer):
    topic, _ = _ts_topic(admin, producer, "kp-watermarks")
    tp = TopicPartition(topic, 0)
    c = consumer()
    assert c.beginning_offsets([tp], timeout_ms=OP_TIMEOUT_MS) == {tp: 0}
    assert c.end_offsets([tp], timeout_ms=OP_TIMEOUT_MS) == {tp: 10}


# ---------------------------------------------------------------- more produce / fetch
@pytest.mark.parametrize("acks", [0, 1])
def test_produce_acks(broker, admin, producer, consumer, acks):
    """acks=0: the broker must send no response (kafka-python drops the
    connection on a response it did not ask for, losing the next batches)."""
    topic = unique_topic(f"kp-acks{acks}")
    create_topic(admin, topic)
    base = now_ms() - 60_000
    recs = [Rec(f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())], base + i) for i in range(100)]
    p = producer(acks=acks, linger_ms=0)
    for chunk in range(0, 100, 10):  # 10 separate ProduceRequests on one connection
        produce_all(p, topic, recs[chunk:chunk + 10])
    c = consumer()
    msgs = consume(c, {TopicPartition(topic, 0): 0}, 100)
    for i, (msg, rec) in enumerate(zip(msgs, recs)):
        assert_same(msg, rec, i)
    assert c.poll(timeout_ms=1000) == {}, "more records than produced"


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_roundtrip(broker, admin, producer, consumer, codec):
    topic = unique_topic(f"kp-{codec}")
    create_topic(admin, topic)
    recs = roundtrip_records(both_null=False, null_header_values=False)
    produce_all(producer(compression_type=codec), topic, recs)
    msgs = consume(consumer(), {TopicPartition(topic, 0): 0}, len(recs))
    for i, (msg, rec) in enumerate(zip(msgs, recs)):
        assert_same(msg, rec, i)


def test_large_message(broker, admin, producer, consumer):
    topic = unique_topic("kp-large")
    create_topic(admin, topic)
    rec = Rec(b"big", bytes((i * 31) % 256 for i in range(900_000)), [("h", b"x" * 1000)], now_ms())
    produce_all(producer(), topic, [rec])
    [msg] = consume(consumer(), {TopicPartition(topic, 0): 0}, 1)
    assert_same(msg, rec, 0)


def test_describe_unknown_topic_does_not_create_it(broker, admin):
    """Metadata with allow_auto_topic_creation=false must not create."""
    topic = unique_topic("kp-unknown")
    [t] = admin.describe_topics([topic])
    assert t["error_code"] == Errors.UnknownTopicOrPartitionError.errno
    assert topic not in admin.list_topics()


def test_fetch_out_of_range_raises(broker, admin, producer, consumer):
    topic, _ = _ts_topic(admin, producer, "kp-oor")
    c = consumer()  # auto_offset_reset="none"
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 50)
    with pytest.raises(Errors.OffsetOutOfRangeError):
        deadline = time.monotonic() + OP_TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            assert c.poll(timeout_ms=500) == {}


def test_fetch_out_of_range_resets_to_earliest(broker, admin, producer, consumer):
    topic, _ = _ts_topic(admin, producer, "kp-oor-reset")
    msgs = consume(consumer(auto_offset_reset="earliest"), {TopicPartition(topic, 0): 50}, 10)
    assert [m.offset for m in msgs] == list(range(10))
