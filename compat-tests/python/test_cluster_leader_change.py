"""Goal: confluent-kafka (librdkafka) produces and consumes across a forced leader change on a
3-node cluster: the partition's leader is killed with kill -9 while an idempotent acks=all
producer keeps sending; every record is acknowledged, read back exactly once and in order, and the
client reported only retriable errors.

Issue 13's Done-when: "librdkafka (confluent-kafka and kcat) ... a produce/consume round trip
across a forced leader change with only retriable errors". The cluster comes from lib/millrace.py.
"""

from __future__ import annotations

import os
import threading
import time
from typing import List

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import Cluster, unique_topic, wait_until

# The reference run: Apache Kafka behind compat-tests/reference/kafka-shim.sh.
ON_REFERENCE = os.environ.get("MILLRACE_BIN", "").endswith("kafka-shim.sh")

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


def test_kafka_python_produces_to_every_leader_across_a_controlled_shutdown():
    """kafka-python (pure Python, its own metadata and retry logic) on the same 3-node cluster: a
    6-partition RF 3 topic has leaders on several brokers; acks=all sends to every partition are
    acknowledged by the right leader, including across a SIGTERM (controlled shutdown) of one
    partition's leader, and every acknowledged record is read back at the offset it was given.
    Issue 12's Done-when: "producing to it with every client in compat-tests reaches the right
    leaders"."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import NewTopic as KNewTopic

    partitions, per_partition = 6, 200
    cluster = Cluster(3, {"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        topic = unique_topic("kp-leaders")
        adm = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        adm.create_topics([KNewTopic(topic, partitions, 3, topic_configs={"min.insync.replicas": "2"})])
        adm.close()
        ck = AdminClient({"bootstrap.servers": cluster.bootstrap})

        def leaders():
            parts = ck.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic].partitions
            if len(parts) != partitions or any(p.leader < 0 or len(p.isrs) != 3 for p in parts.values()):
                return None
            return {i: p.leader for i, p in parts.items()}
        before = wait_until(leaders, OP_TIMEOUT, what="leaders and full ISRs")
        assert len(set(before.values())) >= 2, f"every leader on one broker: {before}"

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=False,
                                 retries=50, retry_backoff_ms=200, max_in_flight_requests_per_connection=1,
                                 request_timeout_ms=30000, delivery_timeout_ms=120000)
        acked = {}  # (partition, value) -> offset
        stopped = None
        for i in range(per_partition):
            futures = [(p, producer.send(topic, f"{p}-{i}".encode(), partition=p)) for p in range(partitions)]
            for p, f in futures:
                acked[(p, i)] = f.get(timeout=120).offset
            if i == per_partition // 2:
                stopped = before[0]
                # Millrace exits 0; Kafka's JVM exits 143 (128 + SIGTERM) after its controlled
                # shutdown, as kafka-server-start does.
                clean = (0, 143) if ON_REFERENCE else (0,)
                assert cluster.nodes[stopped].stop() in clean, "controlled shutdown did not exit cleanly"
        producer.close(timeout=10)
        after = wait_until(lambda: (lambda l: l if l and l[0] != stopped else None)(
            {i: p.leader for i, p in ck.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic].partitions.items()}),
            OP_TIMEOUT, what="partition 0 led by another broker")
        assert stopped not in after.values(), f"the stopped broker {stopped} still leads: {after}"

        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=None, enable_auto_commit=False,
                                 consumer_timeout_ms=20000)
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        read = {}
        for msg in consumer:
            p, i = msg.value.decode().split("-")
            read.setdefault((int(p), int(i)), []).append(msg.offset)
            if len(read) == len(acked) and sum(len(v) for v in read.values()) >= len(acked):
                break
        consumer.close()
        missing = [k for k in acked if acked[k] not in read.get(k, [])]
        assert not missing, f"{len(missing)} acknowledged records not read at their offset, e.g. {missing[:5]}"
        print(f"kafka-python: {len(acked)} records acknowledged on leaders {sorted(set(before.values()))}, "
              f"across a controlled shutdown of broker {stopped}; all read back at their offsets")
    finally:
        cluster.close(kill=True)
