"""The compose test's client steps, each one bounded: create a topic, produce, consume (confluent-kafka).

    check.py create  BOOTSTRAP TOPIC PARTITIONS RF
    check.py produce BOOTSTRAP TOPIC FIRST COUNT
    check.py consume BOOTSTRAP TOPIC COUNT

Each prints one line saying what it saw and exits 0 when that is what the step asserts, 1 when not.
Values are "<topic>-<i>" for i in FIRST..FIRST+COUNT-1, keyed "k<i>" so they spread over the
partitions; `consume` reads every partition from the beginning and wants exactly values 0..COUNT-1,
each once. Env: CHECK_TIMEOUT (seconds per step, default 60).
"""

import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = float(os.environ.get("CHECK_TIMEOUT", "60"))


def deadline() -> float:
    return time.monotonic() + TIMEOUT_S


def create(bootstrap: str, topic: str, partitions: int, rf: int) -> bool:
    """Creates the topic and waits until every partition has a leader and `rf` replicas."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=rf)],
        request_timeout=TIMEOUT_S,
    )[topic]
    try:
        future.result(timeout=TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - the message is the finding
        print(f"create: CreateTopics failed: {e}")
        return False
    end = deadline()
    seen = "nothing"
    while time.monotonic() < end:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            leaders = {p.id: p.leader for p in t.partitions.values()}
            replicas = {p.id: sorted(p.replicas) for p in t.partitions.values()}
            seen = f"leaders {leaders}, replicas {replicas}"
            if all(l >= 0 for l in leaders.values()) and all(
                len(r) == rf for r in replicas.values()
            ):
                spread = sorted(set(leaders.values()))
                print(f"create: {topic}: {partitions} partitions, RF {rf}, led by brokers {spread}; {seen}")
                if rf > 1 and len(spread) < 2:
                    print("create: every partition has the same leader")
                    return False
                return True
        time.sleep(0.2)
    print(f"create: {topic} not ready within {TIMEOUT_S:.0f}s; last seen {seen}")
    return False


def produce(bootstrap: str, topic: str, first: int, count: int) -> bool:
    """Sends COUNT records with acks=all; every one must be acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": int(TIMEOUT_S * 1000),
        }
    )
    errors: list[str] = []
    acked = 0

    def on_delivery(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(str(err))

    for i in range(first, first + count):
        while True:
            try:
                producer.produce(topic, key=f"k{i}", value=f"{topic}-{i}", on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(TIMEOUT_S)
    if left or errors or acked != count:
        print(f"produce: {acked}/{count} acknowledged, {left} still queued, errors {errors[:3]}")
        return False
    print(f"produce: {count} records (from {first}) acknowledged with acks=all")
    return True


def consume(bootstrap: str, topic: str, count: int) -> bool:
    """Reads every partition from the beginning; wants values 0..COUNT-1, each exactly once."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = consumer.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            print(f"consume: no metadata for {topic}: {t.error if t else 'missing'}")
            return False
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in t.partitions])
        want = {f"{topic}-{i}" for i in range(count)}
        got: dict[str, int] = {}
        end = deadline()
        while time.monotonic() < end and not want <= got.keys():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    print(f"consume: error {msg.error()} (retrying)")
                continue
            value = (msg.value() or b"").decode()
            got[value] = got.get(value, 0) + 1
        # A short linger: anything beyond the expected records would show up as extra or doubled.
        linger_end = time.monotonic() + 1.0
        while time.monotonic() < linger_end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                value = (msg.value() or b"").decode()
                got[value] = got.get(value, 0) + 1
    finally:
        consumer.close()
    missing = sorted(want - got.keys())
    extra = sorted(got.keys() - want)
    doubled = sorted(v for v, n in got.items() if n > 1)
    if missing or extra or doubled:
        print(
            f"consume: {len(got)} distinct of {count}; missing {len(missing)} {missing[:3]}, "
            f"extra {extra[:3]}, doubled {doubled[:3]}"
        )
        return False
    print(f"consume: all {count} records read back, each once")
    return True


def main(argv: list[str]) -> int:
    try:
        match argv:
            case ["create", b, topic, partitions, rf]:
                ok = create(b, topic, int(partitions), int(rf))
            case ["produce", b, topic, first, count]:
                ok = produce(b, topic, int(first), int(count))
            case ["consume", b, topic, count]:
                ok = consume(b, topic, int(count))
            case _:
                print(__doc__)
                return 2
    except Exception as e:  # noqa: BLE001 - a client exception is a failed step, said in one line
        print(f"{argv[0]}: {type(e).__name__}: {e}")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
