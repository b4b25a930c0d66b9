#!/usr/bin/env python3
"""What heavy work on one connection costs the others (issue 15 item 6): the p99 of a small
producer (1 KiB records at 1 MB/s, acks=1, linger 0, one connection) alone, and while another
client does the heavy thing — creates topics of 1,000 partitions one after another, or (with the
broker on `log.flush.policy=always`) produces 1 MiB batches that each wait for an fdatasync.
Each build gets a fresh broker per case; every run is printed.

    scripts/blocking_bench.py [--baseline /path/to/other/millrace] [--rounds 2]

Uses crates/bench/compare.py's launcher and target/release/{millrace,millrace-bench}.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crates" / "bench"))
import compare  # noqa: E402

SMALL = ["--topic", "small", "--partitions", "1", "--message-size", "1024", "--count", "12000",
         "--rate-mb", "1", "--acks", "1", "--linger-ms", "0"]


def heavy_command(broker, case: str, stop_at: float) -> list[str]:
    bench = [str(compare.BENCH), "produce", "--bootstrap", f"127.0.0.1:{broker.port}", "--json"]
    if case == "create":
        # A loop of topic creations, bounded by count and time.
        script = "; ".join(
            f"{' '.join(bench)} --topic big{i} --partitions 1000 --count 1 --acks 1 >/dev/null 2>&1"
            for i in range(6))
        return ["timeout", str(max(1, int(stop_at - time.time()))), "bash", "-c", script]
    return ["timeout", str(max(1, int(stop_at - time.time()))), *bench, "--topic", "heavy",
            "--partitions", "1", "--message-size", "1048576", "--count", "400", "--acks", "1",
            "--linger-ms", "0"]


def one(name: str, binary: str, case: str) -> dict:
    saved = compare.MILLRACE
    compare.MILLRACE = Path(binary)
    sets = ["log.flush.policy=always"] if case == "always" else []
    broker = compare.Broker(name, "millrace", sets)
    try:
        broker.start()
        time.sleep(0.5)
        compare.bench(broker, "produce", "warm-up", "--topic", "small", "--partitions", "1", "--count", "100",
                      "--acks", "1")
        alone = compare.bench(broker, "produce", "alone", *SMALL)
        heavy = subprocess.Popen(heavy_command(broker, case, time.time() + 60),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            busy = compare.bench(broker, "produce", "beside heavy work", *SMALL)
        finally:
            heavy.kill()
            heavy.wait()
        p99 = lambda r: r["latency"]["p99_ms"]
        top = lambda r: r["latency"]["max_ms"]
        return {"alone": p99(alone), "busy": p99(busy), "alone_max": top(alone), "busy_max": top(busy)}
    finally:
        broker.stop()
        compare.MILLRACE = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cases", default="create,always", help="comma-separated: create, always")
    a = ap.parse_args()
    builds = [("this", str(compare.MILLRACE))] + ([("baseline", a.baseline)] if a.baseline else [])
    rows = []
    for r in range(a.rounds):
        for case in a.cases.split(","):
            for name, binary in builds:
                res = one(name, binary, case)
                rows.append((r + 1, case, name, res))
                compare.log(f"round {r + 1} {case} {name}: p99 alone {res['alone']:.1f} ms, "
                            f"beside heavy work {res['busy']:.1f} ms")
    print("\nround  heavy work                build     p99 / max alone (ms)  p99 / max beside it (ms)")
    for r, case, name, res in rows:
        what = "topics of 1,000 partitions" if case == "create" else "1 MiB produces, always"
        alone = f"{res['alone']:.1f} / {res['alone_max']:.1f}"
        busy = f"{res['busy']:.1f} / {res['busy_max']:.1f}"
        print(f"{r:<6} {what:<25} {name:<9} {alone:>20}  {busy:>24}")


if __name__ == "__main__":
    main()
