"""Goal: librdkafka's share consumer (confluent-kafka's ShareConsumer, KIP-932 share groups,
preview in librdkafka 2.15+) against the broker: two members split a partition with every record
delivered once, RELEASE redelivers with a higher delivery count, REJECT never redelivers, and a
record released up to the delivery-count limit is archived.

The broker runs with share groups on (`millrace.share.groups.enable`, decision 0077),
`group.share.delivery.count.limit=3` and Kafka's single-node share coordinator settings, which
Millrace accepts and Kafka needs. A share group starts at the log end
(`share.auto.offset.reset=latest`): each test first produces "warm-up" records while a member
polls, until one arrives; every record produced after that must be delivered.

Runs against Apache Kafka too (the reference broker, 4.4.0)."""

import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from groups_helpers import Broker, create_topic

DELIVERY_LIMIT = 3
WARM = b"warm-up"


@pytest.fixture
def broker():
    b = Broker(settings={
        "millrace.share.groups.enable": "true",
        "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    }).start(timeout=120)
    yield b
    b.kill()


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def share_consumer(bootstrap, group, mode="implicit"):
    c = ShareConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": mode,
    })
    return c


def messages(c, timeout=0.5):
    return [m for m in c.poll(timeout) if m.error() is None]


def warm_up(c, producer, topic, explicit=False):
    deadline = time.time() + 60
    while time.time() < deadline:
        producer.produce(topic, value=WARM)
        producer.flush(10)
        got = messages(c)
        for m in got:
            if explicit:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        if explicit and got:
            c.commit_sync()
        if any(m.value() == WARM for m in got):
            return
    pytest.fail("no warm-up record reached the share consumer in 60 s")


def test_two_members_split_a_partition_each_record_once(broker):
    topic, group = name("share-split"), name("g")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    a, b = share_consumer(broker.bootstrap, group), share_consumer(broker.bootstrap, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        warm_up(a, producer, topic)
        # b joins and fetches too (Kafka assigns a new member a heartbeat after it joins).
        quiet = time.time() + 7
        while time.time() < quiet:
            messages(a, 0.2)
            messages(b, 0.2)
        n = 1000
        for i in range(0, n, 50):
            for j in range(i, i + 50):
                producer.produce(topic, value=f"r{j}".encode())
            producer.flush(10)
        seen = {}
        per_member = {"a": 0, "b": 0}
        deadline = time.time() + 60
        while len(seen) < n and time.time() < deadline:
            for who, c in (("a", a), ("b", b)):
                for m in messages(c, 0.2):
                    if m.value() != WARM:
                        seen[m.value()] = seen.get(m.value(), 0) + 1
                        per_member[who] += 1
        # A moment more: a duplicate would arrive now.
        end = time.time() + 1
        while time.time() < end:
            for c in (a, b):
                for m in messages(c, 0.2):
                    if m.value() != WARM:
                        seen[m.value()] = seen.get(m.value(), 0) + 1
        assert len(seen) == n, f"{len(seen)} of {n} delivered ({per_member})"
        twice = [k for k, v in seen.items() if v > 1]
        assert not twice, f"delivered more than once: {twice[:10]}"
    finally:
        a.close()
        b.close()


def test_release_redelivers_reject_does_not_and_the_limit_archives(broker):
    topic, group = name("share-acks"), name("g")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    c = share_consumer(broker.bootstrap, group, mode="explicit")
    try:
        c.subscribe([topic])
        warm_up(c, producer, topic, explicit=True)
        # r0: released every time (archived at the limit); r1: rejected; r2: accepted.
        for v in (b"r0", b"r1", b"r2"):
            producer.produce(topic, value=v)
        producer.flush(10)
        counts = {b"r0": [], b"r1": [], b"r2": []}
        deadline = time.time() + 60
        quiet_until = None
        while time.time() < deadline and (quiet_until is None or time.time() < quiet_until):
            got = messages(c, 0.3)
            for m in got:
                counts.setdefault(m.value(), []).append(m.delivery_count())
                ack = {b"r0": AcknowledgeType.RELEASE, b"r1": AcknowledgeType.REJECT}.get(
                    m.value(), AcknowledgeType.ACCEPT)
                c.acknowledge(m, ack)
            if got:
                c.commit_sync()
            if quiet_until is None and len(counts[b"r0"]) == DELIVERY_LIMIT:
                quiet_until = time.time() + 2
        assert counts[b"r0"] == list(range(1, DELIVERY_LIMIT + 1)), counts
        assert counts[b"r1"] == [1], counts
        assert counts[b"r2"] == [1], counts
    finally:
        c.close()
