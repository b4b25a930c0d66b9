#!/usr/bin/env python3
"""Broker CPU per GB consumed: W4's shape (a topic of 1 KiB messages in 6 partitions, read from
the beginning by millrace-bench on librdkafka) against Apache Kafka and, optionally, a second
Millrace binary (for example the build before a change), same machine, alternating, every run
reported. Each broker is started on a fresh data dir, filled, then read `--reads` times; the
figures are the consume's MB/s and the broker's CPU seconds (utime + stime from /proc) per GB of
values read.

    scripts/consume_cpu_bench.py [--messages 600000] [--rounds 3] [--reads 2]
        [--baseline /path/to/old/millrace] [--no-kafka]

Uses crates/bench/compare.py's broker launcher (Kafka jars resolved with mvn on first use) and
the release binaries in target/release (cargo build --release -p millrace-broker -p millrace-bench).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crates" / "bench"))
import compare  # noqa: E402


def one_broker(name: str, kind: str, binary: str | None, messages: int, reads: int) -> list[dict]:
    saved = compare.MILLRACE
    if binary:
        compare.MILLRACE = Path(binary)
    broker = compare.Broker(name, kind, ["group.initial.rebalance.delay.ms=0"] if kind == "millrace" else [])
    try:
        broker.start()
        compare.bench(broker, "produce", "fill", "--topic", "w4", "--partitions", "6", "--message-size", "1024",
                      "--count", str(messages), "--acks", "1", "--linger-ms", "20")
        out = []
        for i in range(reads):
            r = compare.bench(broker, "consume", f"{name} read {i + 1}", "--topic", "w4", "--partitions", "6")
            gb = r["bytes"] / 1e9
            out.append({"mb_per_s": r["mb_per_s"], "cpu_s_per_gb": r["broker_cpu_seconds"] / gb,
                        "peak_rss_mb": r.get("broker_peak_rss_mb")})
        return out
    finally:
        broker.stop()
        compare.MILLRACE = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=600_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reads", type=int, default=2)
    ap.add_argument("--baseline", help="another millrace binary to measure beside this build")
    ap.add_argument("--no-kafka", action="store_true")
    a = ap.parse_args()
    brokers = [("millrace", "millrace", None)]
    if a.baseline:
        brokers.append(("baseline", "millrace", a.baseline))
    if not a.no_kafka:
        compare.ensure_kafka()
        brokers.append(("kafka", "kafka", None))
    results: dict[str, list[dict]] = {name: [] for name, _, _ in brokers}
    for round_no in range(a.rounds):
        for name, kind, binary in brokers:
            compare.log(f"round {round_no + 1}: {name}")
            results[name] += one_broker(name, kind, binary, a.messages, a.reads)
    print(f"\n{a.messages} x 1 KiB, 6 partitions, {a.rounds} rounds x {a.reads} reads")
    print(f"{'broker':<10} {'MB/s (each read)':<52} {'CPU s/GB (each read)':<52}")
    for name, rows in results.items():
        mbs = " ".join(f"{r['mb_per_s']:.0f}" for r in rows)
        cpu = " ".join(f"{r['cpu_s_per_gb']:.2f}" for r in rows)
        print(f"{name:<10} {mbs:<52} {cpu:<52}")
    for name, rows in results.items():
        print(f"{name}: median {statistics.median(r['mb_per_s'] for r in rows):.0f} MB/s, "
              f"median {statistics.median(r['cpu_s_per_gb'] for r in rows):.2f} CPU s/GB, "
              f"peak RSS {max((r['peak_rss_mb'] or 0) for r in rows):.0f} MB")


if __name__ == "__main__":
    main()
