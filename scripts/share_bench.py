#!/usr/bin/env python3
"""Share-consumer throughput (issue 33): 1, 4 and 16 members of one share group (Apache Kafka's
Java KafkaShareConsumer 4.4, implicit acknowledgement) draining one partition, against Apache Kafka
4.4 and Millrace, same machine, same run.

For each broker (a single node on a fresh data dir; Kafka as crates/bench/compare.py starts it,
Millrace's release binary with share groups on) and each member count: a new topic of one
partition, the group's `share.auto.offset.reset=earliest`, RECORDS records of 1 KiB produced
first (not timed), then the members are timed from the first record delivered to the last
(`scripts/share_bench/ShareBench.java`). Each figure is the median of --rounds; the broker's CPU
seconds (utime + stime) per GB delivered come with it. Prints a Markdown table with the ratios.

    scripts/share_bench.py [--records 100000] [--rounds 3] [--members 1,4,16]

Needs: target/release/millrace (cargo build --release -p millrace-broker), java, mvn (Kafka 4.4's
jars, resolved once, as the compat tests resolve them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "crates" / "bench"))
import compare  # noqa: E402

SOURCE = ROOT / "scripts" / "share_bench" / "ShareBench.java"
CLIENT_POM = ROOT / "compat-tests" / "java" / "share" / "pom.xml"
CLIENT_VERSION = "4.4.0"
CLIENT_CP = ROOT / "target" / f"share-bench-{CLIENT_VERSION}.classpath"
RECORD_BYTES = 1024
RUN_TIMEOUT_S = 420
# Kafka on one node: its share coordinator's topic with one replica (as its other internal topics
# in compare.py); otherwise its defaults.
KAFKA_SETS = ["share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1"]
MILLRACE_SETS = ["millrace.share.groups.enable=true"]


def client_classpath() -> str:
    if not (CLIENT_CP.exists() and CLIENT_CP.stat().st_mtime >= CLIENT_POM.stat().st_mtime):
        CLIENT_CP.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mvn", "-q", "-B", "-f", str(CLIENT_POM),
                        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
                        f"-Dkafka.version={CLIENT_VERSION}", f"-Dmdep.outputFile={CLIENT_CP}"],
                       check=True, timeout=1200)
    return CLIENT_CP.read_text().strip()


def compile_bench(cp: str) -> Path:
    out = Path(tempfile.mkdtemp(prefix="share-bench-classes-"))
    subprocess.run(["javac", "-d", str(out), "-cp", cp, str(SOURCE)], check=True, timeout=300)
    return out


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_one(broker: compare.Broker, classes: Path, cp: str, members: int, records: int, tag: str) -> dict:
    topic = f"share-bench-{tag}-{members}-{int(time.time() * 1000)}"
    cpu0 = cpu_seconds(broker.proc.pid)
    out = subprocess.run(["java", "-cp", f"{classes}:{cp}", "ShareBench", f"127.0.0.1:{broker.port}", topic,
                          str(members), str(records), str(RECORD_BYTES)],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    cpu = cpu_seconds(broker.proc.pid) - cpu0
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"ShareBench exited {out.returncode}: {(out.stderr or out.stdout)[-800:]}")
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    if fields["complete"] != "true":
        raise RuntimeError(f"ShareBench did not receive every record: {line}")
    return {"records_per_s": float(fields["records_per_s"]), "seconds": float(fields["seconds"]),
            "redeliveries": int(fields["redeliveries"]), "per_member": fields["per_member"],
            "cpu_s_per_gb": cpu / (records * RECORD_BYTES / 1e9)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--members", default="1,4,16")
    args = ap.parse_args()
    counts = [int(x) for x in args.members.split(",")]
    if not compare.MILLRACE.exists():
        raise SystemExit(f"{compare.MILLRACE} missing: cargo build --release -p millrace-broker")
    compare.ensure_kafka()
    cp = client_classpath()
    classes = compile_bench(cp)
    results: dict = {}
    for name, kind, sets in (("kafka", "kafka", KAFKA_SETS), ("millrace", "millrace", MILLRACE_SETS)):
        broker = compare.Broker(name, kind, sets).start()
        try:
            for members in counts:
                rounds = []
                for r in range(args.rounds):
                    got = run_one(broker, classes, cp, members, args.records, f"{name}{r}")
                    compare.log(f"{name} members={members} round {r + 1}: {got['records_per_s']:,.0f} records/s, "
                                f"{got['redeliveries']} redeliveries, per member {got['per_member']}, "
                                f"broker CPU {got['cpu_s_per_gb']:.2f} s/GB")
                    rounds.append(got)
                results[(name, members)] = rounds
        finally:
            broker.stop()
    print(f"\n{args.records:,} records of {RECORD_BYTES} B on one partition, {args.rounds} rounds (median)\n")
    print("| members | Kafka 4.4 records/s | Millrace records/s | Millrace ÷ Kafka | each round (Kafka; Millrace) "
          "| broker CPU s/GB (Kafka; Millrace) |")
    print("|---|---|---|---|---|---|")
    for members in counts:
        k, m = results[("kafka", members)], results[("millrace", members)]
        km = statistics.median(x["records_per_s"] for x in k)
        mm = statistics.median(x["records_per_s"] for x in m)
        each = "; ".join(", ".join(f"{x['records_per_s']:,.0f}" for x in rs) for rs in (k, m))
        cpu = "; ".join(f"{statistics.median(x['cpu_s_per_gb'] for x in rs):.2f}" for rs in (k, m))
        print(f"| {members} | {km:,.0f} | {mm:,.0f} | {mm / km:.2f}× | {each} | {cpu} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
