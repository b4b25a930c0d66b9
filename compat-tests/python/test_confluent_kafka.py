"""confluent-kafka-python (librdkafka) against one Millrace broker.

Producers run with enable.idempotence=false (no InitProducerId yet) and
consumers use assign() with explicit offsets and never commit or subscribe
(no consumer groups yet); librdkafka still needs a group.id for the object.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from compat_data import Rec, now_ms, roundtrip_records
from millrace import unique_topic, wait_until

OP_TIMEOUT = 15.0  # seconds, for every single client operation


# ---------------------------------------------------------------- helpers
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def producer(broker, **extra) -> Producer:
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": False,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 20000,
    }
    conf.update(extra)
    return Producer(conf)


def consumer(broker, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": "compat-unused-group",  # required by librdkafka; never used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",  # an out-of-range fetch must surface
    }
    conf.update(extra)
    return Consumer(conf)


def create_topic(adm: AdminClient, name: str, partitions: int = 1, rf: int = 1) -> None:
    futures = adm.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf)],
        operation_timeout=10,
        request_timeout=OP_TIMEOUT,
    )
    futures[name].result(timeout=OP_TIMEOUT)
    # CreateTopics may answer before the topic is visible (Kafka does): wait.
    def ready():
        t = adm.list_topics(topic=name, timeout=OP_TIMEOUT).topics.get(name)
        return (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values()))
    wait_until(ready, timeout=OP_TIMEOUT, what=f"topic {name} in metadata with leaders")


def create_error(adm: AdminClient, topic: NewTopic) -> KafkaError:
    futures = adm.create_topics([topic], operation_timeout=10, request_timeout=OP_TIMEOUT)
    with pytest.raises(KafkaException) as info:
        futures[topic.topic].result(timeout=OP_TIMEOUT)
    return info.value.args[0]


def produce_all(p: Producer, topic: str, recs: List[Rec], partition: Optional[int] = None) -> List[Message]:
    """Produce and flush; return the delivery reports in production order."""
    reports: Dict[int, Message] = {}
    errors: List[str] = []

    def on_delivery(i):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
            reports[i] = msg
        return cb

    for i, rec in enumerate(recs):
        kwargs = dict(key=rec.key, value=rec.value, timestamp=rec.timestamp, on_delivery=on_delivery(i))
        if rec.headers:
            kwargs["headers"] = list(rec.headers)
        if partition is not None:
            kwargs["partition"] = partition
        p.produce(topic, **kwargs)
        p.poll(0)
    remaining = p.flush(30)
    assert remaining == 0, f"{remaining} messages still undelivered after 30 s"
    assert not errors, f"delivery failed: {errors}"
    return [reports[i] for i in range(len(recs))]


def consume(c: Consumer, tps: Optional[List[TopicPartition]], count: int,
            timeout: float = 30.0) -> List[Message]:
    """assign() the partitions (with explicit offsets; None = keep the current
    assignment) and poll until ``count`` messages arrived; fail on any
    consumer error."""
    if tps is not None:
        c.assign(tps)
    out: List[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(out)} of {count} messages within {timeout}s")
        msg = c.poll(0.5)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {err} (topic={msg.topic()} partition={msg.partition()})")
        out.append(msg)
    return out


def wait_eof(c: Consumer, timeout: float = 10.0) -> List[Message]:
    """Poll until a partition-EOF event; return any messages seen before it."""
    extra: List[Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error() is None:
            extra.append(msg)
        elif msg.error().code() == KafkaError._PARTITION_EOF:
            return extra
        else:
            raise AssertionError(f"consumer error: {msg.error()}")
    raise AssertionError(f"no partition EOF within {timeout}s")


def assert_same(msg: Message, rec: Rec, offset: int, where: str = "") -> None:
    label = f"{where}offset {offset}"
    assert msg.offset() == offset, label
    assert msg.key() == rec.key, f"{label}: key"
    assert msg.value() == rec.value, f"{label}: value"
    assert (msg.headers() or []) == rec.headers, f"{label}: headers"
    assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, rec.timestamp), f"{label}: timestamp"


def only_broker(md):
    assert len(md.brokers) == 1, f"expected exactly one broker, got {md.brokers}"
    return next(iter(md.brokers.values()))


# ---------------------------------------------------------------- metadata
def test_metadata_lists_the_broker(broker):
    md = admin(broker).list_topics(timeout=OP_TIMEOUT)
    b = only_broker(md)
    assert (b.host, b.port) == ("127.0.0.1", broker.port)
    assert b.id >= 0


def test_metadata_controller_is_the_live_broker(broker):
    md = admin(broker).list_topics(timeout=OP_TIMEOUT)
    assert md.controller_id == only_broker(md).id


def test_metadata_cluster_id_present(broker):
    md = admin(broker).list_topics(timeout=OP_TIMEOUT)
    assert md.cluster_id, f"cluster_id={md.cluster_id!r}"


def test_describe_cluster(broker):
    adm = admin(broker)  # keep the handle alive until the future resolves
    desc = adm.describe_cluster(request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT)
    assert [(n.host, n.port) for n in desc.nodes] == [("127.0.0.1", broker.port)]
    assert desc.controller is not None and desc.controller.id == desc.nodes[0].id
    assert desc.cluster_id


# ---------------------------------------------------------------- admin
def test_create_topic_with_partitions_shows_in_metadata(broker):
    adm, topic = admin(broker), unique_topic("ck-create")
    create_topic(adm, topic, partitions=3)
    md = wait_until(
        lambda: (m := adm.list_topics(timeout=OP_TIMEOUT)) and topic in m.topics and m,
        timeout=OP_TIMEOUT, what=f"{topic} in metadata")
    bid = only_broker(md).id
    tmd = md.topics[topic]
    assert tmd.error is None
    assert sorted(tmd.partitions) == [0, 1, 2]
    for pid, pmd in tmd.partitions.items():
        assert pmd.error is None, f"partition {pid}: {pmd.error}"
        assert pmd.leader == bid, f"partition {pid} leader"
        assert list(pmd.replicas) == [bid], f"partition {pid} replicas"
        assert list(pmd.isrs) == [bid], f"partition {pid} isrs"


def test_describe_topics(broker):
    adm, topic = admin(broker), unique_topic("ck-describe")
    create_topic(adm, topic, partitions=2)
    futs = adm.describe_topics(TopicCollection([topic]), request_timeout=OP_TIMEOUT)
    desc = futs[topic].result(timeout=OP_TIMEOUT)
    assert desc.name == topic
    assert not desc.is_internal
    assert sorted(p.id for p in desc.partitions) == [0, 1]
    for p in desc.partitions:
        assert p.leader is not None and p.leader.port == broker.port


def test_create_existing_topic_fails_topic_already_exists(broker):
    adm, topic = admin(broker), unique_topic("ck-exists")
    create_topic(adm, topic)
    err = create_error(adm, NewTopic(topic, num_partitions=1, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err


@pytest.mark.parametrize("name", ["has space", "slash/in/name", "star*", "..", "x" * 250])
def test_create_topic_invalid_name_fails(broker, name):
    err = create_error(admin(broker), NewTopic(name, num_partitions=1, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_EXCEPTION, err  # INVALID_TOPIC_EXCEPTION (17)


def test_create_topic_replication_factor_3_fails(broker):
    adm, topic = admin(broker), unique_topic("ck-rf3")
    err = create_error(adm, NewTopic(topic, num_partitions=1, replication_factor=3))
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR, err  # 38
    assert topic not in adm.list_topics(timeout=OP_TIMEOUT).topics


def test_delete_topic_disappears_from_metadata(broker):
    adm, topic = admin(broker), unique_topic("ck-delete")
    create_topic(adm, topic, partitions=2)
    wait_until(lambda: topic in adm.list_topics(timeout=OP_TIMEOUT).topics,
               timeout=OP_TIMEOUT, what=f"{topic} created")
    adm.delete_topics([topic], operation_timeout=10, request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    wait_until(lambda: topic not in adm.list_topics(timeout=OP_TIMEOUT).topics,
               timeout=OP_TIMEOUT, what=f"{topic} gone from metadata")


def test_delete_unknown_topic_fails(broker):
    adm, topic = admin(broker), unique_topic("ck-nosuch")
    fut = adm.delete_topics([topic], operation_timeout=10, request_timeout=OP_TIMEOUT)[topic]
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=OP_TIMEOUT)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, info.value


def test_recreate_deleted_topic_starts_empty(broker):
    adm, topic = admin(broker), unique_topic("ck-recreate")
    create_topic(adm, topic)
    p = producer(broker)
    produce_all(p, topic, [Rec(b"k", b"old", [], now_ms())])
    adm.delete_topics([topic], operation_timeout=10, request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    wait_until(lambda: topic not in adm.list_topics(timeout=OP_TIMEOUT).topics,
               timeout=OP_TIMEOUT, what=f"{topic} gone")
    wait_until(lambda: create_topic(adm, topic) or True, timeout=OP_TIMEOUT, what=f"{topic} re-created")
    c = consumer(broker)
    try:
        lo, hi = wait_until(
            lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False),
            timeout=OP_TIMEOUT, what="watermarks")
        assert (lo, hi) == (0, 0)
    finally:
        c.close()


def test_create_partitions(broker):
    adm, topic = admin(broker), unique_topic("ck-morepart")
    create_topic(adm, topic, partitions=1)
    adm.create_partitions([NewPartitions(topic, 4)], operation_timeout=10,
                          request_timeout=OP_TIMEOUT)[topic].result(timeout=OP_TIMEOUT)
    wait_until(lambda: len(adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic].partitions) == 4,
               timeout=OP_TIMEOUT, what="4 partitions in metadata")
    rec = Rec(b"k", b"to-partition-3", [], now_ms())
    p = producer(broker)
    [report] = produce_all(p, topic, [rec], partition=3)
    assert (report.partition(), report.offset()) == (3, 0)
    c = consumer(broker)
    try:
        [msg] = consume(c, [TopicPartition(topic, 3, 0)], 1)
        assert_same(msg, rec, 0)
    finally:
        c.close()


# ---------------------------------------------------------------- produce / consume
def test_roundtrip_keys_null_values_headers_timestamps(broker):
    adm, topic = admin(broker), unique_topic("ck-roundtrip")
    create_topic(adm, topic)
    recs = roundtrip_records()
    reports = produce_all(producer(broker), topic, recs)
    assert [r.offset() for r in reports] == list(range(len(recs)))
    assert all(r.partition() == 0 for r in reports)
    c = consumer(broker)
    try:
        msgs = consume(c, [TopicPartition(topic, 0, 0)], len(recs))
        for i, (msg, rec) in enumerate(zip(msgs, recs)):
            assert msg.topic() == topic and msg.partition() == 0
            assert_same(msg, rec, i)
        assert wait_eof(c) == [], "more messages than produced"
    finally:
        c.close()


def test_roundtrip_one_record_per_batch(broker):
    """Same records, but each one in its own batch (flush after each)."""
    adm, topic = admin(broker), unique_topic("ck-rt-single")
    create_topic(adm, topic)
    recs = roundtrip_records()
    p = producer(broker, **{"linger.ms": 0})
    for i, rec in enumerate(recs):
        [report] = produce_all(p, topic, [rec])
        assert report.offset() == i
    c = consumer(broker)
    try:
        msgs = consume(c, [TopicPartition(topic, 0, 0)], len(recs))
        for i, (msg, rec) in enumerate(zip(msgs, recs)):
            assert_same(msg, rec, i)
    finally:
        c.close()


def test_produce_auto_creates_topic(broker):
    adm, topic = admin(broker), unique_topic("ck-autocreate")
    rec = Rec(b"k", b"v", [("h", b"v")], now_ms())
    [report] = produce_all(producer(broker), topic, [rec])
    assert (report.partition(), report.offset()) == (0, 0)
    md = adm.list_topics(timeout=OP_TIMEOUT)
    assert topic in md.topics
    assert sorted(md.topics[topic].partitions) == [0]  # num.partitions=1


def test_many_messages_small_fetches_from_mid_batch(broker):
    """2,000 records in large batches, read with tiny fetch sizes starting
    inside a batch: the broker must return the batch containing the fetch
    offset (and at least one whole batch even if it exceeds the limit)."""
    adm, topic = admin(broker), unique_topic("ck-many")
    create_topic(adm, topic)
    base = now_ms() - 60_000
    recs = [Rec(f"k{i}".encode(), f"value-{i:05d}-".encode() * 5, [("i", str(i).encode())], base + i)
            for i in range(2000)]
    reports = produce_all(producer(broker, **{"linger.ms": 50}), topic, recs)
    assert [r.offset() for r in reports] == list(range(2000))
    start = 1234
    c = consumer(broker, **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024, "message.max.bytes": 1000,
                            "fetch.min.bytes": 1})
    try:
        msgs = consume(c, [TopicPartition(topic, 0, start)], 2000 - start, timeout=60)
        for i, msg in enumerate(msgs, start):
            assert_same(msg, recs[i], i)
        assert wait_eof(c) == []
    finally:
        c.close()


def test_multi_partition_produce_consume(broker):
    adm, topic = admin(broker), unique_topic("ck-multi")
    create_topic(adm, topic, partitions=3)
    wait_until(lambda: topic in adm.list_topics(timeout=OP_TIMEOUT).topics, timeout=OP_TIMEOUT,
               what=f"{topic} in metadata")
    base = now_ms() - 60_000
    p = producer(broker)
    per_part = {pid: [Rec(f"p{pid}-k{i}".encode(), f"p{pid}-v{i}".encode(), [], base + 10 * i + pid)
                      for i in range(20)] for pid in range(3)}
    for pid, recs in per_part.items():
        reports = produce_all(p, topic, recs, partition=pid)
        assert [(r.partition(), r.offset()) for r in reports] == [(pid, i) for i in range(20)]
    c = consumer(broker)
    try:
        msgs = consume(c, [TopicPartition(topic, pid, 0) for pid in range(3)], 60)
        by_part: Dict[int, List[Message]] = {0: [], 1: [], 2: []}
        for m in msgs:
            by_part[m.partition()].append(m)
        for pid, recs in per_part.items():
            assert len(by_part[pid]) == 20
            for i, (m, rec) in enumerate(zip(by_part[pid], recs)):
                assert_same(m, rec, i, where=f"partition {pid} ")
    finally:
        c.close()


# ---------------------------------------------------------------- offsets
def _ts_topic(broker, name: str):
    """10 records with timestamps base + i*1000, produced as two batches of 5."""
    adm, topic = admin(broker), unique_topic(name)
    create_topic(adm, topic)
    base = now_ms() - 5 * 60_000
    recs = [Rec(f"k{i}".encode(), f"v{i}".encode(), [], base + i * 1000) for i in range(10)]
    p = producer(broker)
    produce_all(p, topic, recs[:5])
    produce_all(p, topic, recs[5:])
    return topic, base


@pytest.mark.parametrize(
    "delta,expected",
    [(-1, 0), (0, 0), (2000, 2), (2500, 3), (4001, 5), (5500, 6), (9000, 9), (9001, -1)],
    ids=["before-all", "exact-first", "exact-mid", "between", "batch-boundary", "mid-2nd-batch",
         "exact-last", "after-all"],
)
def test_offsets_for_times(broker, delta, expected):
    topic, base = _ts_topic(broker, "ck-times")
    c = consumer(broker)
    try:
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, base + delta)], timeout=OP_TIMEOUT)
        assert tp.error is None, tp.error
        # first offset whose timestamp >= target; -1 (OFFSET_END) when none
        assert tp.offset == expected
    finally:
        c.close()


def test_offsets_for_times_then_consume(broker):
    topic, base = _ts_topic(broker, "ck-times-consume")
    c = consumer(broker)
    try:
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, base + 6500)], timeout=OP_TIMEOUT)
        assert tp.offset == 7
        msgs = consume(c, [tp], 3)
        assert [(m.offset(), m.value(), m.timestamp()[1]) for m in msgs] == [
            (7, b"v7", base + 7000), (8, b"v8", base + 8000), (9, b"v9", base + 9000)]
    finally:
        c.close()


def test_watermark_offsets(broker):
    topic, _ = _ts_topic(broker, "ck-watermarks")
    c = consumer(broker)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=OP_TIMEOUT, cached=False) == (0, 10)
    finally:
        c.close()


def test_consume_from_end_sees_only_new_messages(broker):
    adm, topic = admin(broker), unique_topic("ck-from-end")
    create_topic(adm, topic)
    p = producer(broker)
    produce_all(p, topic, [Rec(b"old", b"old", [], now_ms())])
    c = consumer(broker)
    try:
        c.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END -> ListOffsets latest
        wait_eof(c)
        new = Rec(b"new", b"new", [], now_ms())
        produce_all(p, topic, [new])
        [msg] = consume(c, None, 1)  # same assignment, positioned at the old end
        assert_same(msg, new, 1)
    finally:
        c.close()


# ---------------------------------------------------------------- more produce / fetch
@pytest.mark.parametrize("acks", [0, 1])
def test_produce_acks(broker, acks):
    """acks=0: the broker must send no response (a stray one desynchronises
    clients); acks=1: answered after the local append."""
    adm, topic = admin(broker), unique_topic(f"ck-acks{acks}")
    create_topic(adm, topic)
    base = now_ms() - 60_000
    recs = [Rec(f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())], base + i) for i in range(100)]
    p = producer(broker, acks=acks, **{"linger.ms": 0})
    for chunk in range(0, 100, 10):  # 10 separate ProduceRequests on one connection
        produce_all(p, topic, recs[chunk:chunk + 10])
    c = consumer(broker)
    try:
        msgs = consume(c, [TopicPartition(topic, 0, 0)], 100)
        for i, (msg, rec) in enumerate(zip(msgs, recs)):
            assert_same(msg, rec, i)
        assert wait_eof(c) == []
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_roundtrip(broker, codec):
    adm, topic = admin(broker), unique_topic(f"ck-{codec}")
    create_topic(adm, topic)
    recs = roundtrip_records()
    produce_all(producer(broker, **{"compression.type": codec}), topic, recs)
    c = consumer(broker)
    try:
        msgs = consume(c, [TopicPartition(topic, 0, 0)], len(recs))
        for i, (msg, rec) in enumerate(zip(msgs, recs)):
            assert_same(msg, rec, i)
        assert wait_eof(c) == []
    finally:
        c.close()


def test_large_message(broker):
    adm, topic = admin(broker), unique_topic("ck-large")
    create_topic(adm, topic)
    rec = Rec(b"big", bytes((i * 31) % 256 for i in range(900_000)), [("h", b"x" * 1000)], now_ms())
    produce_all(producer(broker), topic, [rec])
    c = consumer(broker)
    try:
        [msg] = consume(c, [TopicPartition(topic, 0, 0)], 1)
        assert_same(msg, rec, 0)
    finally:
        c.close()


def test_fifty_partitions(broker):
    adm, topic = admin(broker), unique_topic("ck-fifty")
    create_topic(adm, topic, partitions=50)
    base = now_ms() - 60_000
    p = producer(broker)
    recs = {pid: Rec(f"k{pid}".encode(), f"v{pid}".encode(), [], base + pid) for pid in range(50)}
    for pid, rec in recs.items():
        p.produce(topic, key=rec.key, value=rec.value, timestamp=rec.timestamp, partition=pid)
    assert p.flush(30) == 0
    c = consumer(broker)
    try:
        msgs = consume(c, [TopicPartition(topic, pid, 0) for pid in range(50)], 50)
        assert sorted(m.partition() for m in msgs) == list(range(50))
        for m in msgs:
            assert_same(m, recs[m.partition()], 0, where=f"partition {m.partition()} ")
    finally:
        c.close()


def test_fetch_out_of_range_offset_is_reported(broker):
    """Fetch past the end -> OFFSET_OUT_OF_RANGE; with auto.offset.reset=error
    librdkafka surfaces it as _AUTO_OFFSET_RESET."""
    topic, _ = _ts_topic(broker, "ck-oor")
    c = consumer(broker)
    try:
        c.assign([TopicPartition(topic, 0, 50)])
        deadline = time.monotonic() + OP_TIMEOUT
        while True:
            assert time.monotonic() < deadline, "no out-of-range error within timeout"
            msg = c.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert msg.error() is not None, f"unexpected message at offset {msg.offset()}"
            assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET, msg.error()
            assert "out of range" in msg.error().str().lower(), msg.error()
            break
    finally:
        c.close()


def test_fetch_out_of_range_resets_to_earliest(broker):
    topic, base = _ts_topic(broker, "ck-oor-reset")
    c = consumer(broker, **{"auto.offset.reset": "earliest"})
    try:
        msgs = consume(c, [TopicPartition(topic, 0, 50)], 10)
        assert [m.offset() for m in msgs] == list(range(10))
    finally:
        c.close()


@pytest.mark.parametrize("batching", ["one-batch", "batch-per-record"])
@pytest.mark.parametrize("delta,expected", [(1500, 1), (5500, 3), (6001, -1), (0, 0)],
                         ids=["earlier-offset-wins", "later", "none", "first"])
def test_offsets_for_times_non_monotonic(broker, batching, delta, expected):
    """Timestamps out of order: the answer is the earliest *offset* whose
    timestamp >= target (not the record with the closest timestamp)."""
    adm, topic = admin(broker), unique_topic("ck-times-nm")
    create_topic(adm, topic)
    base = now_ms() - 5 * 60_000
    deltas = [0, 5000, 1000, 6000, 2000]
    recs = [Rec(f"k{i}".encode(), f"v{i}".encode(), [], base + d) for i, d in enumerate(deltas)]
    p = producer(broker)
    if batching == "one-batch":
        produce_all(p, topic, recs)
    else:
        for rec in recs:
            produce_all(p, topic, [rec])
    c = consumer(broker)
    try:
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, base + delta)], timeout=OP_TIMEOUT)
        assert tp.error is None, tp.error
        assert tp.offset == expected
    finally:
        c.close()


def test_fetch_long_poll(broker):
    """Fetch honours max_wait_ms/min_bytes: an idle consumer does not spin,
    and a record produced while a fetch is parked is answered at once."""
    import json

    adm, topic = admin(broker), unique_topic("ck-longpoll")
    create_topic(adm, topic)
    stats: List[dict] = []
    c = consumer(broker, **{"fetch.wait.max.ms": 5000, "statistics.interval.ms": 1000,
                            "stats_cb": lambda s: stats.append(json.loads(s))})

    def fetch_requests() -> int:
        return sum(b.get("req", {}).get("Fetch", 0) for s in stats[-1:] for b in s["brokers"].values())

    try:
        c.assign([TopicPartition(topic, 0, 0)])
        wait_eof(c)
        # idle window: with a 5 s max wait, a long-polling broker sees ~1-2 Fetches
        start_stats = len(stats)
        t_end = time.monotonic() + 4
        while time.monotonic() < t_end:
            assert c.poll(0.2) is None
        wait_until(lambda: len(stats) > start_stats + 1, timeout=5, what="statistics")
        before = fetch_requests()
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end:
            assert c.poll(0.2) is None
        wait_until(lambda: len(stats) > start_stats + 4, timeout=5, what="statistics")
        idle_fetches = fetch_requests() - before
        assert before > 0, "no Fetch counts in librdkafka statistics"
        print(f"Fetch requests: {before} before the idle window, {idle_fetches} during it")
        assert idle_fetches <= 5, f"{idle_fetches} Fetch requests in ~3 s idle (max wait 5 s): no long poll"
        # a parked fetch must be completed by the produce, not by max_wait
        rec = Rec(b"k", b"wake-up", [], now_ms())
        t0 = time.monotonic()
        produce_all(producer(broker), topic, [rec])
        [msg] = consume(c, None, 1, timeout=10)
        latency = time.monotonic() - t0
        assert_same(msg, rec, 0)
        assert latency < 2.5, f"record arrived after {latency:.2f}s (fetch.wait.max.ms=5000)"
    finally:
        c.close()
