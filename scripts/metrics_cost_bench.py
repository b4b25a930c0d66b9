#!/usr/bin/env python3
"""What the metrics cost (issue 17): W1 of the benchmark (1 KiB values, 6 partitions, acks=all,
librdkafka via millrace-bench) against a release broker with the HTTP listener on, once with
/metrics scraped every second by a Prometheus-like client and once without, alternating the two
for --rounds rounds so that both see the same machine. Prints one JSON line per run and a summary
line with the medians and their ratio (throughput and broker CPU per GB).

Usage: scripts/metrics_cost_bench.py [--rounds 5] [--count 1000000]
       (needs target/release/millrace and target/release/millrace-bench)
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROKER = ROOT / "target" / "release" / "millrace"
BENCH = ROOT / "target" / "release" / "millrace-bench"
SCRAPE_INTERVAL_S = 1.0
READY_TIMEOUT_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(work):
    port, http = free_port(), free_port()
    proc = subprocess.Popen(
        [str(BROKER), "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
         "--http-listen", f"127.0.0.1:{http}"],
        stdout=subprocess.PIPE, stderr=open(work / "broker.log", "w"), text=True)
    deadline = time.time() + READY_TIMEOUT_S
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, port, http
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"broker did not start; see {work / 'broker.log'}")


def scraper(http, stop, stats):
    """GET /metrics every second, as Prometheus would; counts scrapes and bytes."""
    while not stop.wait(SCRAPE_INTERVAL_S):
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5) as r:
            body = r.read()
        stats["scrapes"] += 1
        stats["bytes"] = len(body)
        stats["max_ms"] = max(stats["max_ms"], (time.monotonic() - started) * 1000)


def run(scrape, count):
    with tempfile.TemporaryDirectory(prefix="millrace-metrics-cost-") as d:
        work = Path(d)
        proc, port, http = start_broker(work)
        stop, stats = threading.Event(), {"scrapes": 0, "bytes": 0, "max_ms": 0.0}
        t = threading.Thread(target=scraper, args=(http, stop, stats), daemon=True)
        try:
            if scrape:
                t.start()
            out = subprocess.run(
                [str(BENCH), "produce", "--bootstrap", f"127.0.0.1:{port}", "--broker-pid", str(proc.pid),
                 "--json", "--label", "W1 scrape" if scrape else "W1", "--topic", "w1", "--partitions", "6",
                 "--message-size", "1024", "--count", str(count), "--acks", "all"],
                capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                raise RuntimeError(out.stderr[-500:])
            result = json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            stop.set()
            if scrape:
                t.join(timeout=10)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        result.update(scrape=scrape, **{f"scrape_{k}": v for k, v in stats.items()})
        gb = result["bytes"] / 1e9
        cpu = result.get("broker_cpu_seconds")
        result["broker_cpu_s_per_gb"] = cpu / gb if cpu is not None and gb > 0 else None
        return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=1_000_000)
    args = ap.parse_args()
    for binary in (BROKER, BENCH):
        if not binary.exists():
            sys.exit(f"{binary} is missing: cargo build --release -p millrace-broker -p millrace-bench")
    runs = {False: [], True: []}
    for r in range(args.rounds):
        # Alternate which goes first, so neither always runs on a warmer machine.
        for scrape in ((False, True) if r % 2 == 0 else (True, False)):
            result = run(scrape, args.count)
            runs[scrape].append(result)
            print(json.dumps(result), flush=True)
    summary = {}
    for key in ("mb_per_s", "broker_cpu_s_per_gb"):
        off = statistics.median(x[key] for x in runs[False])
        on = statistics.median(x[key] for x in runs[True])
        summary[key] = {"without": round(off, 3), "with_scrape": round(on, 3), "ratio": round(on / off, 4)}
    summary["scrapes_per_run"] = statistics.median(x["scrape_scrapes"] for x in runs[True])
    summary["metrics_bytes"] = max(x["scrape_bytes"] for x in runs[True])
    summary["slowest_scrape_ms"] = round(max(x["scrape_max_ms"] for x in runs[True]), 1)
    print(json.dumps({"summary": summary, "rounds": args.rounds, "count": args.count}))


if __name__ == "__main__":
    main()
