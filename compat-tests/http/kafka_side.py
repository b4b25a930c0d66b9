"""The Kafka-protocol side of the HTTP cross-client cases (cases/v2-cross-client.sh,
cases/v3-records.sh), with confluent-kafka (librdkafka) from the suite's venv.

    kafka_side.py create-topic BOOTSTRAP TOPIC PARTITIONS
    kafka_side.py produce BOOTSTRAP TOPIC        records as JSON on stdin:
        [{"key": b64|null, "value": b64|null, "partition": int|null, "headers": [[name, b64|null]]}]
        prints [{"partition", "offset"}] in order (Kafka's murmur2 partitioner for keys, as the
        Java client and the HTTP API choose)
    kafka_side.py consume BOOTSTRAP TOPIC COUNT  prints the first COUNT records of every
        partition, [{"partition", "offset", "key", "value", "headers"}] (bytes in base64)

Every wait is bounded (20 s); a shortfall exits 1 with what arrived.
"""

import base64
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

WAIT_S = 20


def b64(data):
    return None if data is None else base64.b64encode(data).decode()


def unb64(text):
    return None if text is None else base64.b64decode(text)


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, int(partitions), 1)], request_timeout=WAIT_S)
    futures[topic].result(timeout=WAIT_S)


def produce(bootstrap, topic):
    records = json.load(sys.stdin)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": False,
            "acks": "all",
        }
    )
    results = [None] * len(records)

    def report(i):
        def done(err, msg):
            if err is not None:
                results[i] = {"error": str(err)}
            else:
                results[i] = {"partition": msg.partition(), "offset": msg.offset()}

        return done

    for i, r in enumerate(records):
        kwargs = {
            "key": unb64(r.get("key")),
            "value": unb64(r.get("value")),
            "on_delivery": report(i),
        }
        if r.get("partition") is not None:
            kwargs["partition"] = r["partition"]
        if r.get("headers"):
            kwargs["headers"] = [(name, unb64(value)) for name, value in r["headers"]]
        producer.produce(topic, **kwargs)
    left = producer.flush(WAIT_S)
    if left or any(r is None or "error" in r for r in results):
        print(json.dumps(results))
        sys.exit(1)
    print(json.dumps(results))


def consume(bootstrap, topic, count):
    count = int(count)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kafka-side-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    metadata = consumer.list_topics(topic, timeout=WAIT_S)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            print(json.dumps({"error": str(msg.error())}))
            sys.exit(1)
        out.append(
            {
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": b64(msg.key()),
                "value": b64(msg.value()),
                "headers": [[k, b64(v)] for k, v in (msg.headers() or [])],
            }
        )
    consumer.close()
    print(json.dumps(out))
    if len(out) < count:
        sys.exit(1)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"create-topic": create_topic, "produce": produce, "consume": consume}[command](*args)
