"""A transactional producer run as its own process, so that test_transactions.py can SIGKILL it in the
middle of a transaction (a crashed "zombie": no EndTxn, no close, its connection just drops).

    txn_child.py BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT OUT_FILE

init_transactions, begin_transaction, COUNT records b"zombie <i>" to partition 0 of TOPIC, flush;
then writes one line to OUT_FILE, "READY <offset>,<offset>,..." (or "ERROR <what>" and exits 2), and
waits to be killed (at most 120 s, then it exits 3). It never commits or aborts.
"""

import os
import sys
import time

from confluent_kafka import Producer

bootstrap, topic, tid, count, out_path = sys.argv[1:6]


def report(line: str) -> None:
    """Writes LINE to OUT_FILE at once (rename: the test never reads half a line)."""
    tmp = out_path + ".tmp"
    with open(tmp, "w") as out:
        out.write(line + "\n")
    os.replace(tmp, out_path)


# transaction.timeout.ms is stated: far longer than the test takes, so that it is the second
# producer's InitProducerId that aborts this transaction, not the coordinator's timeout.
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 60000,
              "acks": "all", "linger.ms": 5})
try:
    p.init_transactions(30)
    p.begin_transaction()
except Exception as exc:  # noqa: BLE001 - reported to the test
    report(f"ERROR {exc!r}")
    os._exit(2)

offsets = {}
errors = []


def on_delivery(i):
    def cb(err, msg):
        if err is not None:
            errors.append(f"record {i}: {err}")
        else:
            offsets[i] = msg.offset()
    return cb


for i in range(int(count)):
    p.produce(topic, value=b"zombie %d" % i, partition=0, on_delivery=on_delivery(i))
    p.poll(0)
left = p.flush(30)
if left or errors or len(offsets) != int(count):
    report(f"ERROR {left} undelivered, errors {errors[:3]}")
    os._exit(2)
report("READY " + ",".join(str(offsets[i]) for i in range(int(count))))

deadline = time.monotonic() + 120  # the test kills it within seconds
while time.monotonic() < deadline:
    time.sleep(0.5)
os._exit(3)  # without committing, aborting or closing the producer
