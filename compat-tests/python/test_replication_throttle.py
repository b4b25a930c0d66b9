"""Goal: replication throttles (KIP-73, as `kafka-reassign-partitions --throttle` sets them) bound
how fast an out-of-sync replica catches up, on the follower's side and on the leader's, and
lifting them lets it catch up at once — with confluent-kafka's AdminClient setting the dynamic
broker rate (cluster default, BROKER resource "") and the topic's throttled-replica list.

3 nodes; the topic's one partition has replicas [1, 2] (node 3 is the third quorum voter). The
throttle is set (50 KB/s on the throttled side's broker: node 2 as follower, node 1 as leader; a
per-broker value, since librdkafka sends a BROKER resource to that broker and has no cluster
default), node 2 stops, 8 MiB go to node 1 (acks=1), node 2 starts again: for 6 s it must stay
out of the ISR (unthrottled it catches up in about a second); once the throttle is deleted it
joins the ISR. Issue 36 ("Dynamic broker configs"): a throttle is a dynamic broker
config applied live. Runs on Apache Kafka 4.4 as well (reference run, 3 Kafka nodes).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

from millrace import Cluster, unique_topic, wait_until

OP_TIMEOUT = 30.0
RECORD = b"x" * 1024
RECORDS = 8 * 1024  # 8 MiB
RATE = "50000"  # bytes/s: 8 MiB would take almost 3 minutes
HOLD_S = 6.0  # how long the throttled replica must stay out of the ISR
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    # Short sessions, so a stopped node leaves the ISR soon (Kafka's controlled shutdown takes it
    # out at once anyway).
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}


def isr(adm: AdminClient, topic: str) -> list:
    p = adm.list_topics(topic=topic, timeout=OP_TIMEOUT).topics[topic].partitions[0]
    return sorted(p.isrs)


def alter(adm: AdminClient, resource: ConfigResource) -> None:
    for f in adm.incremental_alter_configs([resource], request_timeout=OP_TIMEOUT).values():
        f.result(timeout=OP_TIMEOUT)


def set_throttle(adm: AdminClient, topic: str, side: str, replica: str, op) -> None:
    value = RATE if op == AlterConfigOpType.SET else ""
    broker = replica.split(":")[1]
    alter(adm, ConfigResource(ResourceType.BROKER, broker, incremental_configs=[
        ConfigEntry(f"{side}.replication.throttled.rate", value, incremental_operation=op)]))
    replicas = replica if op == AlterConfigOpType.SET else ""
    alter(adm, ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(f"{side}.replication.throttled.replicas", replicas, incremental_operation=op)]))


@pytest.mark.parametrize("side,replica", [("follower", "0:2"), ("leader", "0:1")])
def test_throttle_holds_back_an_out_of_sync_replica_until_lifted(side, replica):
    cluster = Cluster(3, SETTINGS).start()
    try:
        adm = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = unique_topic(f"throttle-{side}")
        adm.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]],
                                    config={"min.insync.replicas": "1"})],
                          request_timeout=OP_TIMEOUT)[topic].result(OP_TIMEOUT)
        wait_until(lambda: isr(adm, topic) == [1, 2], OP_TIMEOUT, 0.2, "a full ISR")
        # In sync, the replica is not throttled (KIP-73): set before it falls behind.
        set_throttle(adm, topic, side, replica, AlterConfigOpType.SET)
        described = adm.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        entries = list(described.values())[0].result(OP_TIMEOUT)
        assert entries[f"{side}.replication.throttled.replicas"].value == replica
        cluster.nodes[2].stop()
        wait_until(lambda: isr(adm, topic) == [1], 60, 0.2, "node 2 out of the ISR")

        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20,
                      "enable.idempotence": False})
        for _ in range(RECORDS):
            while True:
                try:
                    p.produce(topic, RECORD, partition=0)
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(60) == 0, "records not acknowledged"

        cluster.nodes[2].start()
        # Throttled: node 2 stays out of the ISR for the whole hold (polled, not slept through).
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            assert isr(adm, topic) == [1], f"node 2 caught up under a {RATE} B/s {side} throttle"
            time.sleep(0.25)

        # Lifted: it catches up and joins the ISR.
        set_throttle(adm, topic, side, replica, AlterConfigOpType.DELETE)
        wait_until(lambda: isr(adm, topic) == [1, 2], 60, 0.2, "node 2 back in the ISR once lifted")
        described = adm.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        entries = list(described.values())[0].result(OP_TIMEOUT)
        assert not entries[f"{side}.replication.throttled.replicas"].value
    except KafkaException as exc:
        raise AssertionError(f"client error: {exc}") from exc
    finally:
        cluster.close()
