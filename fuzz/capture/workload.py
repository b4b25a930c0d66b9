#!/usr/bin/env python3
"""Client traffic for fuzz seeds: kafka-python and confluent-kafka (librdkafka) exercising every
API Millrace serves that these clients send: metadata, produce with every codec, fetch, list
offsets, consumer groups with commits, and the admin APIs. Topic names match the fuzz harness
(`fuzz`) where the request should reach an existing topic.

Usage: workload.py BOOTSTRAP
"""
import sys
import time

BOOT = sys.argv[1]


def kafka_python():
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=BOOT, client_id="seed-admin")
    admin.create_topics([NewTopic("seed-kp", 2, 1, topic_configs={"cleanup.policy": "compact"})])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "seed-kp")])
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "seed-kp", configs={"retention.ms": "60000"})])
    admin.create_partitions({"seed-kp": NewPartitions(3)})
    for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
        producer = KafkaProducer(bootstrap_servers=BOOT, compression_type=codec, acks="all",
                                 linger_ms=5)
        for i in range(20):
            producer.send("fuzz", key=b"k%d" % (i % 4), value=b"value-%d-%s" % (i, str(codec).encode()),
                          headers=[("h", b"v")], partition=i % 2)
        producer.flush()
        producer.close()
    consumer = KafkaConsumer("fuzz", bootstrap_servers=BOOT, group_id="seed-kp-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=4000)
    n = sum(1 for _ in consumer)
    consumer.commit()
    consumer.close()
    c2 = KafkaConsumer(bootstrap_servers=BOOT, auto_offset_reset="earliest")
    tp = TopicPartition("fuzz", 0)
    c2.assign([tp])
    c2.offsets_for_times({tp: int(time.time() * 1000) - 60000})
    c2.end_offsets([tp])
    c2.close()
    steps = [
        lambda: admin.list_groups(),
        lambda: admin.describe_groups(["seed-kp-group"]),
        lambda: admin.list_group_offsets("seed-kp-group"),
        lambda: admin.delete_group_offsets("seed-kp-group", [TopicPartition("fuzz", 1)]),
        lambda: admin.describe_cluster(),
        lambda: admin.describe_log_dirs(),
        lambda: admin.describe_producers([TopicPartition("fuzz", 0)]),
        lambda: admin.describe_topic_partitions(["fuzz"]),
        lambda: admin.list_partition_offsets({TopicPartition("fuzz", 0): -1}),
        lambda: admin.delete_records({TopicPartition("seed-kp", 0): 0}),
        lambda: admin.delete_groups(["seed-kp-group"]),
        lambda: admin.delete_topics(["seed-kp"]),
    ]
    for step in steps:
        try:
            step()
        except Exception as e:  # keep going: each step is a seed on its own
            print("kafka-python step failed:", repr(e))
    admin.close()
    print("kafka-python: consumed", n)


def confluent():
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       NewPartitions, NewTopic)

    admin = AdminClient({"bootstrap.servers": BOOT})
    for f in admin.create_topics([NewTopic("seed-ck", 1, 1)]).values():
        f.result()
    res = ConfigResource("topic", "seed-ck")
    for f in admin.describe_configs([res]).values():
        f.result()
    inc = ConfigResource("topic", "seed-ck", incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([inc]).values():
        f.result()
    for f in admin.create_partitions([NewPartitions("seed-ck", 2)]).values():
        f.result()
    admin.describe_cluster().result()
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        p = Producer({"bootstrap.servers": BOOT, "compression.type": codec, "linger.ms": 5,
                      "enable.idempotence": codec == "zstd"})
        for i in range(20):
            p.produce("fuzz", key=b"ck%d" % i, value=b"v" * (i * 10), partition=i % 2,
                      headers={"x": b"y"})
        p.flush(10)
    c = Consumer({"bootstrap.servers": BOOT, "group.id": "seed-ck-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["fuzz"])
    got, deadline = 0, time.time() + 8
    while time.time() < deadline and got < 100:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.committed([TopicPartition("fuzz", 0)])
    c.offsets_for_times([TopicPartition("fuzz", 0, int(time.time() * 1000) - 60000)])
    c.close()
    old_style = ConfigResource("topic", "seed-ck", set_config={"retention.ms": "180000"})
    steps = [
        lambda: admin.list_consumer_groups().result(),
        lambda: [f.result() for f in admin.describe_consumer_groups(["seed-ck-group"]).values()],
        lambda: [f.result() for f in admin.alter_configs([old_style]).values()],
        lambda: [f.result() for f in admin.delete_records([TopicPartition("seed-ck", 0, 0)]).values()],
        lambda: [f.result() for f in admin.delete_consumer_groups(["seed-ck-group"]).values()],
        lambda: [f.result() for f in admin.delete_topics(["seed-ck"]).values()],
    ]
    for step in steps:
        try:
            step()
        except Exception as e:
            print("confluent-kafka step failed:", repr(e))
    print("confluent-kafka: consumed", got)


if __name__ == "__main__":
    for name, run in [("kafka-python", kafka_python), ("confluent-kafka", confluent)]:
        try:
            run()
        except Exception as e:  # a seed run keeps what it captured so far
            print(name, "workload stopped:", repr(e))
