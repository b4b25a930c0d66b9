"""Goal: librdkafka (confluent-kafka) with `group.protocol=consumer` — the KIP-848 consumer group
protocol, server-side assignment by ConsumerGroupHeartbeat — shares a topic between members,
reads every record exactly once per committed position, and keeps its committed offsets through
a broker restart, with a member that stays open across the restart going on without reading a
record again (the group's membership is kept in __consumer_offsets, as Kafka keeps it).

Run: .venv/bin/pytest -q compat-tests/python/test_consumer_protocol.py. Each test starts its own
broker from target/debug/millrace (or $MILLRACE_BIN, e.g. compat-tests/reference/kafka-shim.sh)."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from groups_helpers import Broker, create_topic, high_watermarks, produce

PARTITIONS = 4


@pytest.fixture
def broker():
    b = Broker().start(timeout=120)
    yield b
    b.kill()


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consumer(bootstrap, group, client_id):
    # No session.timeout.ms, heartbeat.interval.ms or assignor: with the consumer protocol
    # those are the broker's (librdkafka refuses them).
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "client.id": client_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })


def assigned(c):
    return {tp.partition for tp in c.assignment()}


def drain(consumers, seen, until, timeout=60, failed_from=None):
    """Polls the consumers in turn, committing each message, until until(seen) holds. With
    `failed_from` (a dict), a refused commit is recorded there (lowest refused offset per
    partition) instead of raised, as an application that keeps consuming would."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for c in consumers:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            key = (m.partition(), m.offset())
            seen[key] = seen.get(key, 0) + 1
            try:
                c.commit(message=m, asynchronous=False)
            except KafkaException:
                if failed_from is None:
                    raise
                failed_from[m.partition()] = min(failed_from.get(m.partition(), m.offset()), m.offset())
        if until(seen):
            return
    raise AssertionError(f"timed out: {len(seen)} records seen, assignments "
                         f"{[sorted(assigned(c)) for c in consumers]}")


def committed(c, topic):
    tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
    return {tp.partition: tp.offset for tp in tps}


def test_members_share_the_topic_and_read_each_record_once(broker):
    topic, group = name("kip848"), name("g")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, 50)
    total = 50 * PARTITIONS
    c1 = consumer(broker.bootstrap, group, "c1")
    c2 = consumer(broker.bootstrap, group, "c2")
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        seen = {}
        drain([c1, c2], seen, lambda s: len(s) == total and assigned(c1) and assigned(c2))
        a1, a2 = assigned(c1), assigned(c2)
        assert a1 and a2 and not (a1 & a2), (a1, a2)
        assert a1 | a2 == set(range(PARTITIONS))
        assert sorted(seen.values()) == [1] * total, "each record read once"
        # The group as ConsumerGroupDescribe reports it.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert len(desc.members) == 2, desc
        described = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
                     for m in desc.members}
        assert described == {"c1": a1, "c2": a2}, described
        # A third member joins: partitions move without any record read twice.
        produce(broker.bootstrap, topic, 25, tag="second")
        total += 25 * PARTITIONS
        c3 = consumer(broker.bootstrap, group, "c3")
        c3.subscribe([topic])
        try:
            drain([c1, c2, c3], seen,
                  lambda s: len(s) == total and all(assigned(c) for c in (c1, c2, c3)))
            parts = [assigned(c) for c in (c1, c2, c3)]
            assert sum(len(p) for p in parts) == PARTITIONS and set().union(*parts) == set(range(PARTITIONS))
            assert sorted(seen.values()) == [1] * total, "each record read once"
        finally:
            c3.close()
        assert committed(c1, topic) == high_watermarks(broker.bootstrap, topic, PARTITIONS)
    finally:
        c1.close()
        c2.close()


def test_offsets_survive_restart_and_a_member_rejoins(broker):
    topic, group = name("kip848r"), name("g")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, 20)
    c = consumer(broker.bootstrap, group, "stays")
    lost = []
    try:
        # on_lost: librdkafka says the member was fenced (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH)
        # and gave its partitions up without committing.
        c.subscribe([topic], on_lost=lambda _c, parts: lost.append(sorted(p.partition for p in parts)))
        seen = {}
        drain([c], seen, lambda s: len(s) == 20 * PARTITIONS)
        before = committed(c, topic)
        assert sum(before.values()) == 20 * PARTITIONS, before
        broker.restart(same_port=True, timeout=120)
        # Same port: the member that stayed open reconnects and goes on. The group's membership
        # survives the restart (it is in __consumer_offsets), so the member keeps its epoch and
        # partitions: no commit is refused for an unknown member and nothing is read twice. (A
        # commit that meets the coordinator still loading may be refused and is tolerated, but
        # must not lead to a re-read.)
        produce(broker.bootstrap, topic, 10, tag="after")
        failed_from = {}
        drain([c], seen, lambda s: len(s) == 30 * PARTITIONS, timeout=90, failed_from=failed_from)
        assert not lost, f"the member was fenced after the restart and lost {lost}"
        twice = sorted(k for k, n in seen.items() if n > 1)
        assert not twice, f"records read twice across the restart: {twice[:10]} (refused commits from {failed_from})"
        # The group's position ends at the end of every partition.
        deadline = time.time() + 30
        while committed(c, topic) != high_watermarks(broker.bootstrap, topic, PARTITIONS) and time.time() < deadline:
            drain([c], seen, lambda s: True, timeout=5, failed_from=failed_from)
    finally:
        c.close()
    # A new member of the same group starts at the committed offsets: nothing left to read.
    late = consumer(broker.bootstrap, group, "late")
    try:
        late.subscribe([topic])
        deadline = time.time() + 30
        while not late.assignment() and time.time() < deadline:
            m = late.poll(0.2)
            assert m is None or m.error(), f"read {m.partition()}/{m.offset()} again"
        assert committed(late, topic) == high_watermarks(broker.bootstrap, topic, PARTITIONS)
    finally:
        late.close()
