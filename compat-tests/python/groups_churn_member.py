"""One churn-test group member, run as its own process so the test can SIGKILL it (a crash: no
LeaveGroup, no final commit). Writes one line per event to the file named on the command line:
`S time` started, `A time partitions…` assigned, `C partition offset` consumed,
`K partition offset` committed, `E name` error, `X` clean exit."""

import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException

bootstrap, topic, group, out_path = sys.argv[1:5]
# "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848 ConsumerGroupHeartbeat; the session
# timeout and heartbeat interval are then the broker's group.consumer.* settings).
protocol = sys.argv[5] if len(sys.argv) > 5 else "classic"
out = open(out_path, "a", buffering=1)
out.write(f"S {time.time()}\n")
running = True


def stop(_sig, _frame):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)


def on_error(err):
    out.write(f"E {err.name()}\n")


conf = {
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "error_cb": on_error,
}
if protocol == "consumer":
    conf["group.protocol"] = "consumer"
else:
    conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
c = Consumer(conf)


def commit(partitions=None):
    try:
        if partitions is None:
            result = c.commit(asynchronous=False)
        else:
            result = c.commit(offsets=partitions, asynchronous=False)
    except KafkaException as e:
        out.write(f"E {e.args[0].name()}\n")
        return
    for tp in result or []:
        if tp.error is None and tp.offset >= 0:
            out.write(f"K {tp.partition} {tp.offset}\n")


def on_revoke(consumer, partitions):
    positions = [tp for tp in consumer.position(partitions) if tp.offset >= 0]
    if positions:
        commit(positions)


def on_assign(_consumer, partitions):
    out.write(f"A {time.time()} " + " ".join(str(p.partition) for p in partitions) + "\n")


c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
dirty = False
last_commit = time.time()
while running:
    m = c.poll(0.1)
    if m is not None:
        if m.error():
            out.write(f"E {m.error().name()}\n")
        else:
            out.write(f"C {m.partition()} {m.offset()}\n")
            dirty = True
    if dirty and time.time() - last_commit > 0.3:
        commit()
        dirty = False
        last_commit = time.time()
if dirty:
    commit()
c.close()
out.write("X\n")
