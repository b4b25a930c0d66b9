"""Goal: confluent-kafka (librdkafka) produces and consumes across a forced leader change on a
3-node cluster: the partition's leader is killed with kill -9 while an idempotent acks=all
producer keeps sending; every record is acknowledged, read back exactly once and in order, and the
client reported only retriable errors.

Issue 13's Done-when: "librdkafka (confluent-kafka and kcat) ... a produce/consume round trip
across a forced leader change with only retriable errors". The cluster comes from lib/millrace.py.
"""

from __future__ import annotations

import threading
import time
from typing import List

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import Cluster, unique_topic, wait_until

RECORDS = 4000
KILL_AFTER = 1000  # acknowledged records before the leader is killed
KILL_AT_PRODUCED = RECORDS // 2  # ... which happens while the second half is being produced
OP_TIMEOUT = 30.0


def leader_of(adm: AdminClient, topic: str) -> int:
    return adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic].partitions[0].leader


def test_confluent_kafka_round_trip_across_leader_kill9():
    t_start = time.monotonic()
    cluster = Cluster(3, {"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        topic = unique_topic("ck-leader-change")
        adm = AdminClient({"bootstrap.servers": cluster.bootstrap})
        adm.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})],
                          request_timeout=OP_TIMEOUT)[topic].result(OP_TIMEOUT)

        def fully_replicated():
            p = adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic].partitions[0]
            return p.leader >= 0 and len(p.replicas) == 3 and sorted(p.isrs) == sorted(p.replicas)
        wait_until(fully_replicated, OP_TIMEOUT, what="a leader and a full ISR")
        old_leader = leader_of(adm, topic)

        client_errors: List[KafkaError] = []
        acked: List[tuple] = []  # (value, offset)
        failed: List[str] = []
        p = Producer({
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,  # acks=all, retries, in-order
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "error_cb": client_errors.append,
        })

        def on_delivery(err, msg):
            if err is None:
                acked.append((int(msg.value()), msg.offset()))
            else:
                failed.append(f"{msg.value()!r}: {err}")

        killed = threading.Event()
        kill_info = {}

        def kill_leader():
            kill_info["t"] = time.monotonic()
            cluster.nodes[old_leader].kill()
            killed.set()

        for i in range(RECORDS):
            while True:
                try:
                    p.produce(topic, str(i).encode(), partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
            if i % 50 == 0:
                time.sleep(0.01)  # a steady stream, so that requests are in flight at the kill
            if i == KILL_AT_PRODUCED:
                # Half the records are still to come: once KILL_AFTER are acknowledged, kill -9 the
                # leader (a thread: production goes on meanwhile, with requests in flight).
                wait_until(lambda: p.poll(0.05) >= 0 and len(acked) >= KILL_AFTER, OP_TIMEOUT, interval=0,
                           what=f"{KILL_AFTER} acknowledged records")
                kill_info["at_acked"] = len(acked)
                threading.Thread(target=kill_leader, daemon=True).start()
        assert p.flush(90) == 0, "records still unacknowledged after 90 s"
        flushed = time.monotonic()
        assert killed.is_set(), f"the leader was never killed ({len(acked)} acknowledged)"
        assert not failed, f"delivery failures: {failed[:5]}"
        new_leader = wait_until(lambda: (lambda l: l if l not in (-1, old_leader) else None)(leader_of(adm, topic)),
                                OP_TIMEOUT, what="a new leader")
        print(f"leader {old_leader} killed after {kill_info['at_acked']} acknowledged records; all {RECORDS} "
              f"acknowledged {flushed - kill_info['t']:.1f}s after the kill; new leader {new_leader}; "
              f"client errors (error_cb): {[str(e) for e in client_errors]}")

        # Only retriable errors: error_cb reports connection-level trouble; none may be fatal.
        for e in client_errors:
            assert not e.fatal(), f"fatal client error {e}"
            assert e.retriable() or e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), \
                f"non-retriable client error {e}"

        # Acknowledged at consecutive offsets, in order.
        assert sorted(v for v, _ in acked) == list(range(RECORDS))
        assert all(v == o for v, o in acked), f"value/offset mismatch: {[a for a in acked if a[0] != a[1]][:5]}"

        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ck-leader-change-unused",
                      "enable.auto.commit": False, "enable.partition.eof": True})
        c.assign([TopicPartition(topic, 0, 0)])
        got: List[tuple] = []
        deadline = time.monotonic() + OP_TIMEOUT
        try:
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is None:
                    got.append((int(msg.value()), msg.offset()))
                elif msg.error().code() == KafkaError._PARTITION_EOF and len(got) >= RECORDS:
                    break
        finally:
            c.close()
        assert [v for v, _ in got] == list(range(RECORDS)), \
            f"read {len(got)} records; first difference at {next((i for i, (v, _) in enumerate(got) if v != i), None)}"
        assert [o for _, o in got] == list(range(RECORDS))
        print(f"{RECORDS} records acknowledged and read back exactly once, in order "
              f"({time.monotonic() - t_start:.1f}s)")
    finally:
        cluster.close(kill=True)
