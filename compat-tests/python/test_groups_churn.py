"""Goal: under churn (five members joining, leaving and crashing at random while a producer
writes), the group converges: afterwards it is Stable, every message was consumed at least once,
no member keeps failing with UNKNOWN_MEMBER_ID/REBALANCE_IN_PROGRESS, and the last commits match
what was consumed. Run for a classic group and for a KIP-848 consumer group (issue 19; the broker
then gets the classic test's 6 s session timeout and 500 ms heartbeat interval through its
group.consumer.* settings, which the client cannot choose).

GROUPS_CHURN_SECONDS sets the classic churn phase (default 60, the full run),
GROUPS_CONSUMER_CHURN_SECONDS the KIP-848 one (default 30)."""

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from groups_helpers import Broker, create_topic, high_watermarks

PARTITIONS = 4
MEMBERS_MAX = 5
CHURN_SECONDS = float(os.environ.get("GROUPS_CHURN_SECONDS", "60"))
# The KIP-848 variant churns for half as long: the same five members and actions, fewer rounds,
# to keep the suite within CI's time budget.
CONSUMER_CHURN_SECONDS = float(os.environ.get("GROUPS_CONSUMER_CHURN_SECONDS", "30"))
HERE = os.path.dirname(os.path.abspath(__file__))
LOOP_ERRORS = {
    "UNKNOWN_MEMBER_ID",
    "REBALANCE_IN_PROGRESS",
    "ILLEGAL_GENERATION",
    "FENCED_MEMBER_EPOCH",
    "STALE_MEMBER_EPOCH",
}
# The broker settings that give a consumer group the classic test's timeouts (Kafka needs the
# minimums lowered too).
CONSUMER_PROTOCOL_SETTINGS = {
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 6000,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 500,
}


class Member:
    def __init__(self, bootstrap, topic, group, workdir, n, protocol):
        self.path = os.path.join(workdir, f"member-{n}.log")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "groups_churn_member.py"), bootstrap, topic, group, self.path,
             protocol]
        )

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)

    def crash(self):
        self.proc.kill()

    def lines(self):
        try:
            with open(self.path) as f:
                return [l.split() for l in f if l.strip()]
        except OSError:
            return []


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_churn(protocol):
    settings = CONSUMER_PROTOCOL_SETTINGS if protocol == "consumer" else None
    broker = Broker(settings=settings).start(timeout=120)
    members = []
    try:
        run_churn(broker, members, protocol)
    finally:
        # A failed or timed-out run must not leave member processes behind.
        for m in members:
            if m.alive():
                m.crash()
        broker.kill()


def run_churn(broker, members, protocol):
    topic, group = f"churn-{uuid.uuid4().hex[:8]}", f"churn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    workdir = broker.data_dir
    rng = random.Random(int(os.environ.get("GROUPS_CHURN_SEED", "4")))

    produced = [0]
    stop_producing = threading.Event()

    def producer():
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "linger.ms": 5})
        i = 0
        while not stop_producing.is_set():
            p.produce(topic, value=f"v{i}", partition=i % PARTITIONS)
            i += 1
            p.poll(0)
            time.sleep(0.005)
        assert p.flush(30) == 0
        produced[0] = i

    t = threading.Thread(target=producer)
    t.start()

    actions = {"start": 0, "stop": 0, "crash": 0}
    started = time.time()
    churn_seconds = CONSUMER_CHURN_SECONDS if protocol == "consumer" else CHURN_SECONDS
    while time.time() - started < churn_seconds:
        live = [m for m in members if m.alive()]
        choice = rng.choice(["start", "start", "stop", "crash"])
        if choice == "start" and len(live) < MEMBERS_MAX:
            members.append(Member(broker.bootstrap, topic, group, workdir, len(members), protocol))
            actions["start"] += 1
        elif choice in ("stop", "crash") and live:
            victim = rng.choice(live)
            victim.stop() if choice == "stop" else victim.crash()
            actions[choice] += 1
        time.sleep(rng.uniform(0.3, 2.5))
    stop_producing.set()
    t.join()

    # Settle with two members.
    live = [m for m in members if m.alive()]
    for m in live[2:]:
        m.stop()
    while len([m for m in members if m.alive()]) < 2:
        members.append(Member(broker.bootstrap, topic, group, workdir, len(members), protocol))
        time.sleep(0.2)
    # A stopped member leaves its group before it exits, which takes a rebalance.
    deadline = time.time() + 60
    while len([m for m in members if m.alive()]) > 2 and time.time() < deadline:
        time.sleep(0.2)
    final = [m for m in members if m.alive()]
    assert len(final) == 2

    hwm = high_watermarks(broker.bootstrap, topic)
    assert sum(hwm.values()) == produced[0]
    want = {(p, o) for p in range(PARTITIONS) for o in range(hwm[p])}
    settle_started = time.time()
    consumed = set()
    while time.time() - settle_started < 120:
        consumed = set()
        for m in members:
            consumed.update((int(l[1]), int(l[2])) for l in m.lines() if l[0] == "C")
        if want <= consumed:
            break
        time.sleep(1)
    caught_up_s = time.time() - settle_started
    missing = want - consumed
    assert not missing, f"{len(missing)} messages never consumed, e.g. {sorted(missing)[:5]}"

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def describe():
        d = admin.describe_consumer_groups([group])[group].result(timeout=30)
        return d.state.name, len(d.members)

    deadline = time.time() + 60
    while time.time() < deadline and describe() != ("STABLE", 2):
        time.sleep(0.5)
    stable_after_s = time.time() - settle_started
    assert describe() == ("STABLE", 2)
    def loop_signs():
        return [
            (sum(1 for l in m.lines() if l[0] == "E" and l[1] in LOOP_ERRORS), sum(1 for l in m.lines() if l[0] == "A"))
            for m in final
        ]

    before = loop_signs()
    time.sleep(5)
    assert describe() == ("STABLE", 2), "the group left Stable with no churn"
    assert loop_signs() == before, "a member keeps failing or rebalancing once the group is Stable"

    for m in final:
        m.stop()
    for m in final:
        m.proc.wait(timeout=30)
        assert m.lines()[-1] == ["X"], "a final member did not exit cleanly"

    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    tps = probe.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    probe.close()
    committed = {tp.partition: tp.offset for tp in tps}
    last_consumed = {p: max(o for (q, o) in consumed if q == p) + 1 for p in range(PARTITIONS)}
    all_lines = [l for m in members for l in m.lines()]
    total_errors = {}
    for l in all_lines:
        if l[0] == "E":
            total_errors[l[1]] = total_errors.get(l[1], 0) + 1
    duplicates = sum(1 for l in all_lines if l[0] == "C") - len(consumed)
    # Seconds from a member's start to its first assignment (members that got one).
    waits = []
    for m in members:
        lines = m.lines()
        start = next((float(l[1]) for l in lines if l[0] == "S"), None)
        first = next((float(l[1]) for l in lines if l[0] == "A" and len(l) > 2), None)
        if start is not None and first is not None:
            waits.append(first - start)
    waits.sort()
    median_wait = waits[len(waits) // 2] if waits else float("nan")
    print(
        f"churn {CHURN_SECONDS:.0f}s: actions {actions}, produced {produced[0]}, "
        f"consumed {len(consumed)} distinct (+{duplicates} redelivered), caught up {caught_up_s:.1f}s "
        f"after churn, Stable after {stable_after_s:.1f}s, client errors {total_errors}, "
        f"time to first assignment median {median_wait:.1f}s max {max(waits, default=float('nan')):.1f}s "
        f"({len(waits)} members), "
        f"committed {committed}, hwm {hwm}"
    )
    assert committed == hwm == last_consumed
