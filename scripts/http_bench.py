#!/usr/bin/env python3
"""HTTP API throughput (issue 32) beside the Kafka protocol, same broker, same run.

One release Millrace broker with its HTTP listener. Produce: 1 KiB records, 100 per request,
to a topic of 6 partitions (acks=all, as the REST Proxy produces), measured with h2load
(Debian `nghttp2-client`) over HTTP/1.1 keep-alive and over HTTP/2 (h2c), with binary
(base64) and JSON record bodies; the same records produced over the Kafka protocol by
millrace-bench (librdkafka, acks=all) in the same run give the ratio. Consume: the stateless
consumer's polls (HTTP/1.1 keep-alive, NDJSON) against millrace-bench's consume of the same
topic. Each figure comes with the broker's CPU seconds (utime + stime from /proc) per GB of
record values. The client runs on its own core (`taskset`), the broker on the other.

    scripts/http_bench.py [--requests 20000] [--rounds 3] [--connections 8]

Needs: target/release/millrace and millrace-bench (cargo build --release -p millrace-broker
-p millrace-bench), h2load.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "crates" / "bench"))
import compare  # noqa: E402

RECORD_BYTES = 1024
RECORDS_PER_REQUEST = 100
PARTITIONS = 6
BROKER_CPU = "0"
CLIENT_CPU = "1"


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body(kind: str) -> tuple[str, bytes]:
    if kind == "binary":
        value = base64.b64encode(os.urandom(RECORD_BYTES * 3 // 4)).decode()  # 1 KiB of base64
        records = [{"value": value} for _ in range(RECORDS_PER_REQUEST)]
        return "application/vnd.kafka.binary.v2+json", json.dumps({"records": records}).encode()
    text = "x" * (RECORD_BYTES - 16)
    records = [{"value": {"n": i, "text": text}} for i in range(RECORDS_PER_REQUEST)]
    return "application/vnd.kafka.json.v2+json", json.dumps({"records": records}).encode()


def h2load(http_port: int, topic: str, kind: str, protocol: str, requests: int, connections: int,
           work: Path) -> dict:
    ctype, payload = body(kind)
    data = work / f"{kind}.json"
    data.write_bytes(payload)
    cmd = ["taskset", "-c", CLIENT_CPU, "h2load", "-n", str(requests), "-c", str(connections),
           "-d", str(data), "-H", f"content-type: {ctype}", "-H", "accept: application/vnd.kafka.v2+json"]
    if protocol == "h1":
        cmd += ["--h1"]
    else:
        cmd += ["-m", "8"]
    cmd.append(f"http://127.0.0.1:{http_port}/topics/{topic}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    text = out.stdout + out.stderr
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", text)
    took = re.search(r"finished in ([\d.]+)(m?s)", text)
    if out.returncode != 0 or not done or not took:
        raise RuntimeError(f"h2load failed: {text[-2000:]}")
    seconds = float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)
    ok = int(done.group(2))
    if int(done.group(3)):
        raise RuntimeError(f"h2load: {done.group(3)} requests failed: {text[-2000:]}")
    statuses = re.search(r"status codes: (\d+) 2xx", text)
    if not statuses or int(statuses.group(1)) != ok:
        raise RuntimeError(f"h2load: not every answer was 2xx: {text[-2000:]}")
    records = ok * RECORDS_PER_REQUEST
    return {"records": records, "seconds": seconds, "records_per_s": records / seconds,
            "value_bytes": records * RECORD_BYTES}


def kafka_produce(broker, topic: str, records: int) -> dict:
    r = compare.bench(broker, "produce", "kafka protocol", "--topic", topic, "--partitions", str(PARTITIONS),
                      "--message-size", str(RECORD_BYTES), "--count", str(records), "--acks", "all", "--prime")
    return {"records": records, "seconds": r["seconds"], "records_per_s": records / r["seconds"],
            "value_bytes": records * RECORD_BYTES}


def stateless_consume(http_port: int, topic: str, want: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
    reg = json.dumps({"group": f"{topic}-http", "topics": [topic], "start": "earliest"})
    conn.request("POST", "/v1/consumer/register", reg, {"content-type": "application/json"})
    answer = conn.getresponse()
    consumer = json.loads(answer.read())["consumer_id"]
    got = 0
    started = time.time()
    deadline = started + 600
    while got < want and time.time() < deadline:
        conn.request("POST", f"/v1/consumer/poll?consumer_id={consumer}&max_bytes=8388608&timeout_ms=500")
        text = conn.getresponse().read()
        got += text.count(b"\n")
    seconds = time.time() - started
    return {"records": got, "seconds": seconds, "records_per_s": got / seconds, "value_bytes": got * RECORD_BYTES}


def measured(broker, fn) -> dict:
    before = cpu_seconds(broker.proc.pid)
    r = fn()
    r["broker_cpu_s_per_gb"] = (cpu_seconds(broker.proc.pid) - before) / (r["value_bytes"] / 1e9)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=8)
    args = ap.parse_args()
    if not shutil.which("h2load"):
        sys.exit("h2load not found (apt-get install nghttp2-client)")
    results: dict[str, list[dict]] = {}
    work = Path(tempfile.mkdtemp(prefix="http-bench-"))
    for rnd in range(args.rounds):
        http_port = compare.free_port()
        broker = compare.Broker("millrace", "millrace", [f"millrace.http.listen=127.0.0.1:{http_port}"])
        broker.start()
        subprocess.run(["taskset", "-p", "-c", BROKER_CPU, str(broker.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        try:
            records = args.requests * RECORDS_PER_REQUEST
            kafka = measured(broker, lambda: kafka_produce(broker, "bench-kafka", records))
            runs = {"kafka protocol produce (librdkafka)": kafka}
            for kind in ("binary", "json"):
                for protocol in ("h1", "h2"):
                    topic = f"bench-{kind}-{protocol}"
                    compare.bench(broker, "produce", "create", "--topic", topic, "--partitions", str(PARTITIONS),
                                  "--count", "1", "--prime")
                    runs[f"HTTP produce {kind} {protocol}"] = measured(
                        broker, lambda t=topic, k=kind, p=protocol: h2load(
                            http_port, t, k, p, args.requests, args.connections, work))
            runs["kafka protocol consume (librdkafka)"] = measured(broker, lambda: {
                **(lambda r: {"records": r["messages"], "seconds": r["seconds"],
                              "records_per_s": r["messages"] / r["seconds"],
                              "value_bytes": r["messages"] * RECORD_BYTES})(
                    compare.bench(broker, "consume", "kafka consume", "--topic", "bench-kafka",
                                  "--partitions", str(PARTITIONS)))})
            runs["HTTP consume stateless h1"] = measured(
                broker, lambda: stateless_consume(http_port, "bench-kafka", records))
            for name, r in runs.items():
                results.setdefault(name, []).append(r)
                print(f"round {rnd + 1} {name}: {r['records_per_s']:,.0f} records/s, "
                      f"broker {r['broker_cpu_s_per_gb']:.2f} CPU s/GB", flush=True)
        finally:
            broker.stop()
    print()
    print("| run | records/s (median of rounds) | each round | vs Kafka protocol produce | broker CPU s per GB |")
    print("|---|---|---|---|---|")
    base = statistics.median(r["records_per_s"] for r in results["kafka protocol produce (librdkafka)"])
    for name, rs in results.items():
        med = statistics.median(r["records_per_s"] for r in rs)
        each = ", ".join(f"{r['records_per_s']:,.0f}" for r in rs)
        cpu = statistics.median(r["broker_cpu_s_per_gb"] for r in rs)
        print(f"| {name} | {med:,.0f} | {each} | {med / base:.2f}× | {cpu:.2f} |")
    shutil.rmtree(work, ignore_errors=True)
    for d in compare.TRASH:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
