#!/usr/bin/env python3
"""Client quota benchmark: a producer under `producer_byte_rate` = 1 MiB/s on its client id, on
Millrace and on Apache Kafka 4.1.1 in the same run, with librdkafka (confluent-kafka) and the
Java producer (Kafka's ProducerPerformance). Reports the throughput each achieves once the quota
holds (after the first BURST_S seconds: both brokers measure a rate over at least 10 s, so a new
client bursts first) as a ratio of the quota, and the throttle time the client reports
(librdkafka's `throttle` statistic; the Java client's `produce-throttle-time-avg`).

Issue 16's figure: the steady throughput within 20 % of the quota, and throttle time reported.

Usage (quiet machine; the Python venv of compat-tests/python and, for Java, mvn + java 17):
  cargo build --release -p millrace-broker
  compat-tests/python/.venv/bin/python crates/bench/quota.py [--seconds 40] [--window-num 11]
      [--no-kafka] [--no-java]
"""
import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "compat-tests" / "lib"))
from millrace import Broker  # noqa: E402

QUOTA = 1 << 20            # bytes/s on the client id
RECORD = 10 * 1024         # bytes per record value
BURST_S = 15.0             # seconds left out of the steady-state figure
SHIM = ROOT / "compat-tests" / "reference" / "kafka-shim.sh"
RELEASE = ROOT / "target" / "release" / "millrace"


def alter_quota(port: int, client_id: str, key: str, value: float) -> None:
    """AlterClientQuotas v0 on a raw socket (confluent-kafka has no quota admin API)."""
    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">h", len(b)) + b
    body = struct.pack(">i", 1)                                   # one entry
    body += struct.pack(">i", 1) + string("client-id") + string(client_id)
    body += struct.pack(">i", 1) + string(key) + struct.pack(">d", value) + b"\x00"
    body += b"\x00"                                               # validate_only
    header = struct.pack(">hhi", 49, 0, 1) + string("bench-admin")
    frame = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", recv(s, 4))[0]
        reply = recv(s, size)
    # correlation id, throttle, entry count, error code
    code = struct.unpack(">h", reply[12:14])[0]
    if code != 0:
        raise SystemExit(f"AlterClientQuotas failed with error code {code}")


def recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise SystemExit("connection closed")
        out += chunk
    return out


def librdkafka(port: int, topic: str, seconds: float) -> dict:
    import json
    from confluent_kafka import Producer
    throttle = {"max": 0, "avg_max": 0}
    delivered = []

    def stats(raw: str) -> None:
        for b in json.loads(raw).get("brokers", {}).values():
            t = b.get("throttle", {})
            throttle["max"] = max(throttle["max"], t.get("max", 0))
            throttle["avg_max"] = max(throttle["avg_max"], t.get("avg", 0))

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))

    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "bench-quota",
                  "acks": "1", "linger.ms": 5, "batch.size": 65536,
                  "queue.buffering.max.kbytes": 4096, "statistics.interval.ms": 1000,
                  "stats_cb": stats})
    value = b"q" * RECORD
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(30)
    steady = [(t, n) for t, n in delivered if t - start >= BURST_S]
    span = (steady[-1][0] - steady[0][0]) if len(steady) > 1 else 0
    rate = sum(n for _, n in steady[1:]) / span if span > 0 else 0.0
    return {"steady_bytes_per_s": rate, "throttle_max_ms": throttle["max"],
            "throttle_avg_ms": throttle["avg_max"]}


def java(port: int, topic: str, seconds: float) -> dict:
    script = 'source "$1/compat-tests/java/common.sh" >&2 && java_dist_classpath >&2 && printf %s "$DIST_CP"'
    cp = subprocess.run(["bash", "-c", script, "cp", str(ROOT)], capture_output=True, text=True,
                        timeout=960).stdout.strip()
    records = int(seconds * QUOTA / RECORD)
    proc = subprocess.run(
        ["java", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
         "--num-records", str(records), "--record-size", str(RECORD), "--throughput", "-1",
         "--print-metrics", "--producer-props", f"bootstrap.servers=127.0.0.1:{port}",
         "client.id=bench-quota-java", "acks=1"],
        capture_output=True, text=True, timeout=seconds * 4 + 120)
    # Periodic lines: "N records sent, R records/sec (M MB/sec), ..." every 5 s.
    windows = [float(m.group(1)) for m in re.finditer(r"records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)",
                                                       proc.stdout)]
    skip = int(BURST_S // 5)
    steady = windows[skip:-1] if len(windows) > skip + 1 else windows[skip:]
    rate = sum(steady) / len(steady) * (1 << 20) if steady else 0.0
    m = re.search(r"producer-metrics:produce-throttle-time-avg:\{client-id=bench-quota-java\}\s*:\s*([\d.]+)",
                  proc.stdout)
    return {"steady_bytes_per_s": rate, "throttle_avg_ms": float(m.group(1)) if m else None}


def run(system: str, binary: Path, seconds: float, with_java: bool, window_num: int) -> dict:
    settings = {"quota.window.num": str(window_num)}
    broker = Broker(settings=settings, binary=binary, start_timeout=120).start()
    try:
        alter_quota(broker.port, "bench-quota", "producer_byte_rate", QUOTA)
        alter_quota(broker.port, "bench-quota-java", "producer_byte_rate", QUOTA)
        time.sleep(1)  # the quota reaching the broker's image (answered after commit)
        out = {"librdkafka": librdkafka(broker.port, f"quota-{system}", seconds)}
        if with_java:
            out["java"] = java(broker.port, f"quota-java-{system}", seconds)
        return out
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--no-java", action="store_true")
    ap.add_argument("--binary", default=str(RELEASE))
    ap.add_argument("--window-num", type=int, default=11,
                    help="quota.window.num on both brokers (11 = Kafka's default; 1 = no burst)")
    args = ap.parse_args()
    systems = [("millrace", Path(args.binary))]
    if not args.no_kafka:
        systems.append(("kafka", SHIM))
    print(f"producer_byte_rate = {QUOTA} B/s, quota.window.num = {args.window_num}; "
          f"steady state after {BURST_S:.0f} s of {args.seconds:.0f} s")
    for name, binary in systems:
        result = run(name, binary, args.seconds, not args.no_java, args.window_num)
        for client, r in result.items():
            ratio = r["steady_bytes_per_s"] / QUOTA
            print(f"{name:8} {client:10} steady {r['steady_bytes_per_s'] / (1 << 20):6.3f} MiB/s "
                  f"= {ratio:5.2f} × quota  throttle reported: "
                  + ", ".join(f"{k}={v}" for k, v in r.items() if k.startswith("throttle")))


if __name__ == "__main__":
    main()
