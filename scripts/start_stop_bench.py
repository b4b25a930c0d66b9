#!/usr/bin/env python3
"""Times how long a single Millrace broker takes to stop (SIGTERM -> exit 0) and to start (until
its "millrace ready" line) with many partitions: one topic of N partitions, or N topics of one
partition. Each run: start on an empty data dir, create the partitions, produce one record to
--produce-to of them (spread evenly; closing a partition costs the same fsyncs either way), then

  stop #1   SIGTERM, time to exit (must be 0)
  start #1  clean start (the clean-shutdown marker is there), time to ready
  stop #2   SIGTERM again
  start #2  after kill -9 of a started broker (no marker: log recovery), time to ready (its
            registration and unfencing carry a leader change per partition: metadata
            transactions of several entries above ~2,000 partitions, decision 0066)

and prints one JSON line per run (a start that printed no ready line within --ready-timeout is
null, and the broker is stopped anyway). Needs kafka-python (compat-tests/python/requirements.txt).

    scripts/start_stop_bench.py --broker target/release/millrace --layout one-topic --count 10000
    scripts/start_stop_bench.py --broker target/release/millrace --layout many-topics --count 10000

Every wait is bounded (--timeout seconds); the broker is killed if anything fails.
"""

import argparse
import datetime
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

# Topics per CreateTopics request (many-topics layout): keeps each request small.
TOPICS_PER_REQUEST = 500
# Topics one producer sends to (many-topics layout).
TOPICS_PER_PRODUCER = 200


# Log lines that mark the phases of a start and a stop (crates/broker/src/main.rs).
MARKS = {
    "begin": b"shutting down: moving leaderships away",
    "drain": b"shutting down: no new connections",
    "done": b"clean shutdown complete",
    "store_open": b"store opened",
    "store_flush": b"every log flushed",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, binary, data_dir, port, timeout, log):
        self.binary, self.data_dir, self.port = binary, data_dir, port
        self.timeout, self.log = timeout, log
        self.proc = None

    def start(self, ready_timeout):
        """Starts the broker; returns seconds until its ready line, or None if it was not ready
        within `ready_timeout` seconds (it is left running)."""
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [self.binary, "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        deadline = started + ready_timeout
        buf = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    raise RuntimeError(f"broker exited during start (rc {self.proc.wait()})")
                buf += chunk
                if b"millrace ready" in buf:
                    return time.monotonic() - started
        return None

    def stop(self):
        """SIGTERM; returns seconds until exit. Raises unless the exit code is 0."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=self.timeout)
        elapsed = time.monotonic() - started
        if rc != 0:
            raise RuntimeError(f"broker exited {rc} after SIGTERM")
        self.proc = None
        return elapsed

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=self.timeout)
        self.proc = None

    def ensure_dead(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=self.timeout)


def phases(log_path):
    """From the broker's log (the newest lines of each kind): seconds of the last stop's phases
    (the controlled shutdown; the rest: drain, group snapshot, store flush, quorum), and the
    store's own open and flush times as the broker logs them (milliseconds)."""
    stamps, fields = {}, {}
    with open(log_path, "rb") as f:
        for line in f:
            for key, text in MARKS.items():
                if text in line:
                    stamp = line.split(b" ", 1)[0].decode()
                    stamps[key] = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                    ms = re.search(rb"elapsed_ms=(\d+)", line)
                    if ms:
                        fields[key] = int(ms.group(1))
    out = {}
    if {"begin", "drain", "done"} <= stamps.keys():
        out["controlled_shutdown_s"] = (stamps["drain"] - stamps["begin"]).total_seconds()
        out["drain_flush_s"] = (stamps["done"] - stamps["drain"]).total_seconds()
    for key in ("store_open", "store_flush"):
        if key in fields:
            out[key + "_ms"] = fields[key]
    return out


def phases_now(log, log_path, kind):
    """`phases` of the start or the stop (`kind`) that just finished."""
    log.flush()
    time.sleep(0.2)  # the broker writes its log itself; let the last lines land
    if kind == "start":
        keep = ("store_open_ms",)
    else:
        keep = ("controlled_shutdown_s", "drain_flush_s", "store_flush_ms")
    return {k: v for k, v in phases(log_path).items() if k in keep}


def populate(bootstrap, layout, count, produce_to, timeout):
    """Creates the partitions and produces one record to `produce_to` of them, spread evenly."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout * 1000)
    if layout == "one-topic":
        # One CreateTopics: above ~2,000 partitions the controller commits it as a metadata
        # transaction of several entries (decision 0066).
        admin.create_topics([NewTopic("many", count, 1)], timeout_ms=timeout * 1000)
        tps = [("many", p) for p in range(count)]
    else:
        names = [f"t{i:05d}" for i in range(count)]
        for i in range(0, count, TOPICS_PER_REQUEST):
            batch = [NewTopic(n, 1, 1) for n in names[i : i + TOPICS_PER_REQUEST]]
            admin.create_topics(batch, timeout_ms=timeout * 1000)
        tps = [(n, 0) for n in names]
    admin.close()
    stride = max(1, count // max(1, produce_to))
    tps = tps[::stride][:produce_to]
    # kafka-python asks for the metadata of every topic it has sent to before each new one, so a
    # fresh producer per group of topics keeps that from growing with the square of the count.
    topics = sorted({t for t, _ in tps})
    for i in range(0, len(topics), TOPICS_PER_PRODUCER):
        group = set(topics[i : i + TOPICS_PER_PRODUCER])
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=50,
            request_timeout_ms=timeout * 1000,
            delivery_timeout_ms=2 * timeout * 1000,
        )
        futures = [
            producer.send(t, value=b"x" * 100, partition=p) for t, p in tps if t in group
        ]
        producer.flush(timeout=timeout)
        for f in futures:
            f.get(timeout=timeout)
        producer.close(timeout=timeout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--broker", required=True, help="path to the millrace binary")
    ap.add_argument("--layout", choices=["one-topic", "many-topics"], required=True)
    ap.add_argument("--count", type=int, default=10_000, help="partitions (one-topic) or topics")
    ap.add_argument(
        "--produce-to",
        type=int,
        default=1000,
        help="partitions that get one record (kafka-python is slow with thousands of topics)",
    )
    ap.add_argument("--timeout", type=int, default=300, help="seconds any one step may take")
    ap.add_argument(
        "--ready-timeout",
        type=int,
        default=60,
        help="seconds a restart may take to print its ready line (null in the result if not)",
    )
    ap.add_argument("--data-dir", help="data dir (default: a fresh temporary one, removed after)")
    args = ap.parse_args()

    tmp = None if args.data_dir else tempfile.TemporaryDirectory(prefix="millrace-startstop-")
    data_dir = args.data_dir or tmp.name
    port = free_port()
    log_path = os.path.join(tempfile.gettempdir(), f"millrace-startstop-{port}.log")
    result = {"layout": args.layout, "count": args.count}
    with open(log_path, "wb") as log:
        broker = Broker(args.broker, data_dir, port, args.timeout, log)
        try:
            result["start_empty_s"] = broker.start(args.timeout)
            t = time.monotonic()
            populate(f"127.0.0.1:{port}", args.layout, args.count, args.produce_to, args.timeout)
            result["populate_s"] = time.monotonic() - t
            result["stop_s"] = broker.stop()
            result["stop_phases"] = phases_now(log, log_path, "stop")
            result["start_clean_s"] = broker.start(args.ready_timeout)
            result["start_clean_phases"] = phases_now(log, log_path, "start")
            result["stop_again_s"] = broker.stop()
            result["stop_again_phases"] = phases_now(log, log_path, "stop")
            broker.start(args.ready_timeout)
            broker.kill9()
            result["start_recovery_s"] = broker.start(args.ready_timeout)
            result["start_recovery_phases"] = phases_now(log, log_path, "start")
            result["stop_after_recovery_s"] = broker.stop()
        finally:
            broker.ensure_dead()
            if tmp is not None:
                tmp.cleanup()
    result = json.loads(json.dumps(result), parse_float=lambda v: round(float(v), 2))
    result["broker_log"] = log_path
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
