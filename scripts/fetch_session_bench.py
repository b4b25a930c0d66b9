#!/usr/bin/env python3
"""What incremental fetch sessions (KIP-227) save a broker: one consumer of many partitions with a
trickle of records (issue 15's W8 shape), with sessions on (the default) and off
(`max.incremental.fetch.session.cache.slots=0`, every fetch a full fetch), same broker binary,
alternating. Reports broker CPU seconds, Fetch requests and Fetch response bytes per run.

The consumer is kafka-python (it opens a fetch session like the Java client; librdkafka does not).

    scripts/fetch_session_bench.py --bin target/release/millrace [--partitions 1000]
        [--seconds 30] [--rate 10] [--rounds 2]

Needs compat-tests/python/.venv (compat-tests/python/run.sh makes it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def metric(http: str, pattern: str) -> float:
    text = urllib.request.urlopen(f"http://{http}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if re.match(pattern, line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run(binary: str, sessions: bool, partitions: int, seconds: float, rate: float) -> dict:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    work = Path(tempfile.mkdtemp(prefix="fetch-session-bench-"))
    port, http_port = free_port(), free_port()
    args = [binary, "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
            "--http-listen", f"127.0.0.1:{http_port}", "--set", "log.flush.policy=never"]
    if not sessions:
        args += ["--set", "max.incremental.fetch.session.cache.slots=0"]
    broker = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert broker.stdout is not None
        for line in broker.stdout:
            if b"ready" in line:
                break
        bootstrap, http = f"127.0.0.1:{port}", f"127.0.0.1:{http_port}"
        topic = "w8"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, partitions, 1)])
        admin.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                 auto_offset_reset="earliest", fetch_max_wait_ms=500)
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.poll(timeout_ms=2000)  # metadata, positions, the first (full) fetch
        producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, linger_ms=0)
        got = 0
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                producer.send(topic, value=b"x" * 100, partition=i % partitions)
                i += 1
                stop.wait(1.0 / rate)

        cpu0 = cpu_seconds(broker.pid)
        fetches0 = metric(http, r'millrace_requests_total\{api="Fetch"')
        t = threading.Thread(target=produce)
        t.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for records in consumer.poll(timeout_ms=500).values():
                got += len(records)
        stop.set()
        t.join()
        cpu = cpu_seconds(broker.pid) - cpu0
        fetches = metric(http, r'millrace_requests_total\{api="Fetch"') - fetches0
        held = metric(http, r"millrace_fetch_sessions ")
        producer.close()
        consumer.close()
        return {"sessions": sessions, "cpu_s": cpu, "fetches": fetches, "records": got,
                "sessions_held": held}
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    rows = []
    for _ in range(a.rounds):
        for sessions in (True, False):
            r = run(a.bin, sessions, a.partitions, a.seconds, a.rate)
            rows.append(r)
            print(f"sessions={'on ' if sessions else 'off'} broker CPU {r['cpu_s']:.2f} s, "
                  f"{r['fetches'] / a.seconds:.1f} fetches/s, {r['records']} records, "
                  f"{r['sessions_held']:.0f} session(s) held", flush=True)
    on = [r["cpu_s"] for r in rows if r["sessions"]]
    off = [r["cpu_s"] for r in rows if not r["sessions"]]
    print(f"broker CPU, sessions on / off: {sum(on) / len(on):.2f} / {sum(off) / len(off):.2f} s "
          f"= {sum(on) / sum(off):.2f}×")


if __name__ == "__main__":
    sys.exit(main())
