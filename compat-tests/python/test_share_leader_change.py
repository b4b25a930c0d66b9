"""Goal: a share group (KIP-932) keeps its accepted records accepted across leader changes on a
3-node cluster, with librdkafka's share consumer (confluent-kafka's ``ShareConsumer``):

1. the leader of a share partition is killed (kill -9) while a member holds records it acquired
   and has accepted and released others; the share partition's new leader loads its state from
   the share coordinator, which is on another broker (the share-state RPCs between brokers);
2. then the share coordinator itself (the leader of ``__share_group_state``, one partition here)
   is killed while members go on acknowledging.

Throughout: no record is accepted twice, no record comes back once its acceptance was answered,
released records come back with a higher delivery count, and in the end every record produced was
accepted (a fresh member then finds nothing left but what is produced after it joined).

The topic has three partitions led by three different brokers (replica assignment), so whichever
broker leads ``__share_group_state``, two share partitions' leaders reach it over the network;
the killed share-partition leader is one of those. Runs against Apache Kafka 4.4 too (the
reference run starts a 3-node Kafka cluster)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Dict, List, Set, Tuple

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import Cluster, wait_until

ON_REFERENCE = os.environ.get("MILLRACE_BIN", "").endswith("kafka-shim.sh")
STATE_TOPIC = "__share_group_state"
PARTITIONS = 3
PER_PARTITION = 150
DELIVERY_LIMIT = 5
LOCK_MS = 3000
OP_TIMEOUT = 30.0
WARM = b"warm-up"
SETTINGS = {
    "millrace.share.groups.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "share.coordinator.state.topic.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

Key = Tuple[int, int]  # (partition, offset)


class Ledger:
    """What the members saw: deliveries, and which acknowledgements the brokers applied (and when)."""

    def __init__(self) -> None:
        self.accepted: Dict[Key, float] = {}  # when the accept's answer arrived
        self.values: Dict[Key, bytes] = {}
        self.counts: Dict[Key, List[int]] = {}
        self.violations: List[str] = []

    def delivered(self, m, polled_at: float) -> None:
        key = (m.partition(), m.offset())
        self.values[key] = m.value()
        self.counts.setdefault(key, []).append(m.delivery_count())
        done = self.accepted.get(key)
        if done is not None and polled_at > done:
            self.violations.append(f"{key} {m.value()!r} delivered again (count {m.delivery_count()}) after "
                                   f"its acceptance was answered")

    def applied(self, keys: List[Key], at: float) -> None:
        for key in keys:
            if key in self.accepted:
                self.violations.append(f"{key} accepted twice")
            self.accepted.setdefault(key, at)


def member(bootstrap: str, group: str, name: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                          "share.acknowledgement.mode": "explicit"})


def poll_and_ack(c: ShareConsumer, ledger: Ledger, choose=lambda m: AcknowledgeType.ACCEPT,
                 timeout: float = 0.3) -> list:
    """One poll; every record acknowledged as ``choose`` says (None: left unacknowledged); the
    acknowledgements committed; the applied ACCEPTs entered in the ledger. Returns the records."""
    polled_at = time.monotonic()
    got = [m for m in c.poll(timeout) if m.error() is None]
    acks: Dict[int, List[Key]] = {}
    acknowledged = False
    for m in got:
        ledger.delivered(m, polled_at)
        kind = choose(m)
        if kind is None:
            continue
        c.acknowledge(m, kind)
        acknowledged = True
        if kind == AcknowledgeType.ACCEPT and m.value() != WARM:
            acks.setdefault(m.partition(), []).append((m.partition(), m.offset()))
    if acknowledged:
        result = c.commit_sync(OP_TIMEOUT) or {}
        at = time.monotonic()
        for tp, err in result.items():
            if err is None:
                ledger.applied(acks.get(tp.partition, []), at)
    return got


def produce(bootstrap: str, topic: str, tag: str, n: int, partitions=range(PARTITIONS)) -> Dict[Key, bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    sent: Dict[Key, bytes] = {}
    failed: List[str] = []

    def report(err, msg):
        if err is None:
            sent[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append(str(err))
    for i in range(n):
        for part in partitions:
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), partition=part, on_delivery=report)
        p.poll(0)
    assert p.flush(OP_TIMEOUT) == 0 and not failed, failed[:5]
    return sent


def leaders(adm: AdminClient, topic: str) -> Dict[int, int]:
    md = adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic]
    if md.error is not None:
        return {}
    return {p: meta.leader for p, meta in md.partitions.items()}


def in_sync(adm: AdminClient, topic: str) -> bool:
    md = adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic]
    return md.error is None and bool(md.partitions) and all(
        p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in md.partitions.values())


def consume_until(members: List[ShareConsumer], ledger: Ledger, want: Set[Key], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not want <= set(ledger.accepted):
        for c in members:
            poll_and_ack(c, ledger)


def close_in_background(c: ShareConsumer) -> threading.Thread:
    t = threading.Thread(target=c.close, daemon=True)
    t.start()
    return t


def test_accepted_records_stay_accepted_across_share_leader_and_coordinator_kills():
    cluster = Cluster(3, SETTINGS).start()
    consumers: List[ShareConsumer] = []
    try:
        bootstrap = cluster.bootstrap
        adm = AdminClient({"bootstrap.servers": bootstrap})
        topic, group = f"share-lc-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
        adm.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replica_assignment=assignment,
                                   config={"min.insync.replicas": "2"})],
                          request_timeout=OP_TIMEOUT)[topic].result(OP_TIMEOUT)
        wait_until(lambda: in_sync(adm, topic), OP_TIMEOUT, what=f"{topic} led and in sync")

        # The group starts at the log end: warm up until a record of every partition arrived.
        ledger = Ledger()
        a = member(bootstrap, group, "a")
        consumers.append(a)
        a.subscribe([topic])
        warm = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        seen_parts: Set[int] = set()
        deadline = time.monotonic() + 90
        while seen_parts != set(range(PARTITIONS)) and time.monotonic() < deadline:
            for part in range(PARTITIONS):
                warm.produce(topic, value=WARM, partition=part)
            warm.flush(10)
            seen_parts |= {m.partition() for m in poll_and_ack(a, ledger) if m.value() == WARM}
        assert seen_parts == set(range(PARTITIONS)), f"warm-up reached partitions {seen_parts} only"
        wait_until(lambda: in_sync(adm, STATE_TOPIC), OP_TIMEOUT, what=f"{STATE_TOPIC} led and in sync")
        coordinator = leaders(adm, STATE_TOPIC)[0]
        remote = [p for p, leader in leaders(adm, topic).items() if leader != coordinator]
        assert len(remote) == 2, f"partition leaders {leaders(adm, topic)}, share coordinator {coordinator}"

        # Phase 1: a accepts records, then releases the "rel" ones, then leaves the "hold" ones of
        # the partition whose leader dies unacknowledged (in flight).
        sent = produce(bootstrap, topic, "one", PER_PARTITION)
        deadline = time.monotonic() + 60
        while len(ledger.accepted) < len(sent) // 3 and time.monotonic() < deadline:
            poll_and_ack(a, ledger)
        sent.update(produce(bootstrap, topic, "rel", 20))
        released: Set[Key] = set()
        deadline = time.monotonic() + 30
        while not released and time.monotonic() < deadline:
            got = poll_and_ack(a, ledger, choose=lambda m: AcknowledgeType.RELEASE if m.value().startswith(b"rel-")
                               else AcknowledgeType.ACCEPT)
            released |= {(m.partition(), m.offset()) for m in got if m.value().startswith(b"rel-")}
        sent.update(produce(bootstrap, topic, "hold", 20, partitions=[remote[0]]))
        held: List = []
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            got = poll_and_ack(a, ledger, choose=lambda m: None if m.value().startswith(b"hold-") else AcknowledgeType.ACCEPT)
            held = [m for m in got if m.value().startswith(b"hold-")]
        assert released and held, "phase 1: nothing released or held"

        victim = leaders(adm, topic)[remote[0]]
        cluster.nodes[victim].kill()
        wait_until(lambda: leaders(adm, topic).get(remote[0], -1) not in (-1, victim), OP_TIMEOUT,
                   what=f"a new leader of partition {remote[0]}")
        close_in_background(a)  # its held records are in flight on the dead leader
        b = member(bootstrap, group, "b")
        consumers.append(b)
        b.subscribe([topic])
        consume_until([b], ledger, set(sent), 120)
        missing = set(sent) - set(ledger.accepted)
        assert not missing, f"phase 1: {len(missing)} records never accepted, e.g. {sorted(missing)[:5]}"
        again = [k for k in released if len(ledger.counts.get(k, [])) < 2 or max(ledger.counts[k]) < 2]
        assert not again, f"released records not delivered again with a higher count: {again[:5]}"

        # Phase 2: the share coordinator dies while b goes on acknowledging new records.
        cluster.nodes[victim].start()
        wait_until(lambda: in_sync(adm, topic) and in_sync(adm, STATE_TOPIC), 60, what="the cluster whole again")
        coordinator = leaders(adm, STATE_TOPIC)[0]
        more = produce(bootstrap, topic, "two", PER_PARTITION)
        cluster.nodes[coordinator].kill()
        wait_until(lambda: leaders(adm, STATE_TOPIC).get(0, -1) not in (-1, coordinator), OP_TIMEOUT,
                   what=f"a new leader of {STATE_TOPIC}")
        consume_until([b], ledger, set(sent) | set(more), 120)
        missing = (set(sent) | set(more)) - set(ledger.accepted)
        assert not missing, f"phase 2: {len(missing)} records never accepted, e.g. {sorted(missing)[:5]}"
        cluster.nodes[coordinator].start()
        wait_until(lambda: in_sync(adm, STATE_TOPIC), 60, what=f"{STATE_TOPIC} whole again")

        # A new member gets only what is produced now: everything before stays accepted.
        c = member(bootstrap, group, "c")
        consumers.append(c)
        c.subscribe([topic])
        close_in_background(b)
        tail = produce(bootstrap, topic, "tail", 1)
        consume_until([c], ledger, set(tail), 60)
        quiet = time.monotonic() + LOCK_MS / 1000 + 2
        while time.monotonic() < quiet:
            poll_and_ack(c, ledger)
        assert set(tail) <= set(ledger.accepted), "the tail records were not accepted"
        assert not ledger.violations, ledger.violations[:10]
    finally:
        for c in consumers:
            close_in_background(c).join(15)
        cluster.close()
