#!/usr/bin/env python3
"""What the scrubber costs (issue 30): produce and consume throughput of a release broker with the
scrubber re-reading sealed segments all the time (`millrace.log.scrub.interval.ms=1000`: a pass
starts as soon as the last one ends, at its default rate limit of 32 MiB/s) against the same
broker with it off (`0`), alternating the two for --rounds rounds so that both see the same
machine. Each run primes a topic of 6 partitions with --prime messages of 1 KiB in 16 MiB
segments (so most of it is in sealed segments the scrubber reads), then times a W1-like produce
(acks=all, librdkafka via millrace-bench) of --count more and a consume of everything from the
start, reading how many bytes the scrubber checked meanwhile (`millrace_log_scrubbed_bytes_total`).
Prints one JSON line per run and a summary with the medians and their ratios.

Usage: scripts/scrub_cost_bench.py [--rounds 3] [--prime 400000] [--count 300000]
       (needs target/release/millrace and target/release/millrace-bench)
"""
import argparse
import json
import re
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
READY_TIMEOUT_S = 60
SEGMENT_BYTES = 16 * 1024 * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrubbed_bytes(http):
    """The broker's millrace_log_scrubbed_bytes_total."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r"^millrace_log_scrubbed_bytes_total (\S+)$", text, flags=re.M)
    return float(found.group(1)) if found else 0.0


def start_broker(work, scrub_interval_ms):
    port, http = free_port(), free_port()
    log = work / "broker.log"
    proc = subprocess.Popen(
        [str(BROKER), "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
         "--http-listen", f"127.0.0.1:{http}",
         "--set", f"millrace.log.scrub.interval.ms={scrub_interval_ms}",
         "--set", f"log.segment.bytes={SEGMENT_BYTES}"],
        stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    deadline = time.time() + READY_TIMEOUT_S
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, port, http, log
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"broker did not start; see {log}")


def bench(args, label):
    out = subprocess.run([str(BENCH), *args, "--json", "--label", label], capture_output=True, text=True,
                         timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-500:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(scrub, prime, count):
    with tempfile.TemporaryDirectory(prefix="millrace-scrub-cost-") as d:
        work = Path(d)
        proc, port, http, log = start_broker(work, 1000 if scrub else 0)
        common = ["--bootstrap", f"127.0.0.1:{port}", "--broker-pid", str(proc.pid), "--topic", "w",
                  "--partitions", "6"]
        try:
            bench(["produce", *common, "--message-size", "1024", "--count", str(prime), "--acks", "all",
                   "--prime"], "prime")
            time.sleep(2.0)  # the first pass starts one interval after the broker
            scrubbed_before, started = scrubbed_bytes(http), time.monotonic()
            produce = bench(["produce", *common, "--message-size", "1024", "--count", str(count),
                             "--acks", "all"], "W1 scrub" if scrub else "W1")
            consume = bench(["consume", *common], "consume scrub" if scrub else "consume")
            scrubbed = scrubbed_bytes(http) - scrubbed_before
            elapsed = time.monotonic() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        text = log.read_text(errors="replace")
        passes = len(re.findall(r"scrub pass finished", text))
        damaged = len(re.findall(r"damaged batches in a sealed segment", text))
        return {"scrub": scrub, "produce_mb_per_s": produce["mb_per_s"],
                "produce_cpu_s": produce.get("broker_cpu_seconds"),
                "consume_mb_per_s": consume["mb_per_s"], "consume_cpu_s": consume.get("broker_cpu_seconds"),
                "consume_bytes": consume.get("bytes"), "scrub_passes": passes, "damage_found": damaged,
                "scrubbed_mb_while_measured": round(scrubbed / 1e6, 1),
                "scrub_mb_per_s_while_measured": round(scrubbed / 1e6 / elapsed, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prime", type=int, default=400_000)
    ap.add_argument("--count", type=int, default=300_000)
    args = ap.parse_args()
    for binary in (BROKER, BENCH):
        if not binary.exists():
            sys.exit(f"{binary} is missing: cargo build --release -p millrace-broker -p millrace-bench")
    runs = {False: [], True: []}
    for r in range(args.rounds):
        # Alternate which goes first, so neither always runs on a warmer machine.
        for scrub in ((False, True) if r % 2 == 0 else (True, False)):
            result = run(scrub, args.prime, args.count)
            runs[scrub].append(result)
            print(json.dumps(result), flush=True)
    summary = {}
    for key in ("produce_mb_per_s", "consume_mb_per_s"):
        off = statistics.median(x[key] for x in runs[False])
        on = statistics.median(x[key] for x in runs[True])
        summary[key] = {"off": round(off, 1), "scrubbing": round(on, 1), "ratio": round(on / off, 3)}
    summary["scrub_mb_per_s_while_measured"] = statistics.median(
        x["scrub_mb_per_s_while_measured"] for x in runs[True])
    print(json.dumps({"summary": summary, "rounds": args.rounds, "prime": args.prime, "count": args.count}))


if __name__ == "__main__":
    main()
