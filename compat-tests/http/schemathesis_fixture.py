"""What schemathesis needs to find on the broker before it runs (compat-tests/http/run.sh):
topics `st-topic` (3 partitions, records in each) and `st-doomed` (for the delete operation),
and consumer group `st-group` with committed offsets and one live member, so that the v3 paths
with a topic, group, consumer, partition or config in them reach real resources, not only 404s.

    python schemathesis_fixture.py BOOTSTRAP ENV_FILE

Writes `ST_CLUSTER_ID=...` and `ST_CONSUMER_ID=...` lines to ENV_FILE once the member has joined,
then keeps the member alive (polling) until the file ENV_FILE.stop appears or LIFETIME_S passes.
"""

import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

LIFETIME_S = 600
JOIN_TIMEOUT_S = 30
TOPIC = "st-topic"
DOOMED = "st-doomed"
GROUP = "st-group"
RECORDS = 30


def main() -> int:
    bootstrap, env_file = sys.argv[1], sys.argv[2]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [NewTopic(TOPIC, num_partitions=3, replication_factor=1), NewTopic(DOOMED, 1, 1)],
        operation_timeout=30,
    )
    for future in created.values():
        try:
            future.result(timeout=30)
        except KafkaException as e:
            # A retried CreateTopics finds the topic its first try created.
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    cluster_id = admin.list_topics(timeout=10).cluster_id

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"record-%d" % i, partition=i % 3)
    if producer.flush(30) != 0:
        print("fixture: records not delivered", file=sys.stderr)
        return 1

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": "st-client",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    consumed = 0
    while consumed < RECORDS // 2 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            consumed += 1
    if consumed == 0:
        print("fixture: the member consumed nothing", file=sys.stderr)
        return 1
    consumer.commit(asynchronous=False)
    member_id = consumer.memberid()
    with open(env_file + ".tmp", "w", encoding="utf-8") as out:
        out.write(f"ST_CLUSTER_ID={cluster_id}\nST_CONSUMER_ID={member_id}\n")
    # Renamed into place: the reader never sees half a file.
    os.replace(env_file + ".tmp", env_file)

    # Stay a member (polling keeps the session) until run.sh says stop or time runs out.
    end = time.monotonic() + LIFETIME_S
    while time.monotonic() < end and not os.path.exists(env_file + ".stop"):
        consumer.poll(0.2)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
