#!/usr/bin/env python3
"""Millrace vs Apache Kafka, same machine, same client (millrace-bench on librdkafka), same run.

Fetches Kafka 4.x jars from the Maven registry (compat-tests/reference/pom.xml), starts Kafka in
KRaft single-node mode and Millrace on loopback ports with temporary data dirs, runs workloads
W1-W9 against each and W10 against 3-node clusters of each (W1 and W4 also with Kafka's own Java
tools), prints a table with ratios, and rewrites the marked section of
docs/benchmarks.md with the table, the settings and an SVG plot (docs/benchmarks.svg).

Usage: crates/bench/compare.py [--quick] [--no-docs]
"""
import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / "compat-tests" / ".work" / "kafka-ref" / "libs"
POM = ROOT / "compat-tests" / "reference" / "pom.xml"
BENCH = ROOT / "target" / "release" / "millrace-bench"
MILLRACE = ROOT / "target" / "release" / "millrace"
TOOLS_POM = ROOT / "compat-tests" / "java" / "dist" / "pom.xml"
TOOLS_CP = ROOT / "target" / "bench-tools.classpath"
DOC = ROOT / "docs" / "benchmarks.md"
SVG = ROOT / "docs" / "benchmarks.svg"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
READY_TIMEOUT_S = 120
MIB = 1 << 20
# Data dirs of stopped brokers, deleted only when the whole run ends: on ext4, creating files
# right after deleting many (a 2 GB W4 log, 1,000 partition dirs) makes every inode allocation
# skip the recently deleted ones (`recently_deleted` in the inode allocator), which slowed the
# next broker's topic creation several-fold on this machine.
TRASH = []


def log(msg):
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=READY_TIMEOUT_S):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("broker did not open its port in time")


def ensure_kafka():
    if (LIBS / ".complete").exists():
        return
    log("resolving Apache Kafka jars with mvn (first run only)")
    LIBS.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                    f"-DoutputDirectory={LIBS}", "-DincludeScope=runtime"], check=True, timeout=1200)
    (LIBS / ".complete").touch()


def ensure_tools():
    """Classpath of Kafka's own tools (ProducerPerformance, ConsumerPerformance, TopicCommand)."""
    if TOOLS_CP.exists() and TOOLS_CP.stat().st_mtime >= TOOLS_POM.stat().st_mtime:
        return TOOLS_CP.read_text().strip()
    log("resolving Kafka's tools jars with mvn (first run only)")
    TOOLS_CP.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mvn", "-q", "-B", "-f", str(TOOLS_POM),
                    "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
                    f"-Dmdep.outputFile={TOOLS_CP}"], check=True, timeout=1200)
    return TOOLS_CP.read_text().strip()


class Broker:
    """One broker process on a fresh data dir."""

    def __init__(self, name, kind, sets=()):
        self.name, self.kind, self.sets = name, kind, list(sets)
        self.dir = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
        self.port = free_port()
        self.proc = None

    def command(self):
        if self.kind == "millrace":
            cmd = [str(MILLRACE), "--data-dir", str(self.dir / "data"), "--listen", f"127.0.0.1:{self.port}",
                   "--set", "group.initial.rebalance.delay.ms=0"]
            for s in self.sets:
                cmd += ["--set", s]
            return cmd
        cport = free_port()
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{cport}", "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{cport}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={self.dir / 'logs'}", "num.partitions=1",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", *self.sets, ""]))
        (self.dir / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={self.dir / 'kafka.log'}\n"
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n")
        subprocess.run(["java", "-cp", f"{LIBS}/*", "kafka.tools.StorageTool", "format", "-t",
                        "bench-cluster-0000000001", "-c", str(props)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        # Kafka's own launcher defaults: 1 GiB heap, G1.
        return ["java", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC", f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
                "-cp", f"{LIBS}/*", "kafka.Kafka", str(props)]

    def start(self):
        cmd = self.command()
        self.started = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.dir / "stderr.log", "w"))
        wait_port(self.port, self.proc)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        TRASH.append(self.dir)

    def rss_mb(self):
        try:
            for line in open(f"/proc/{self.proc.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None


def failure(stderr):
    """The error line of a failed millrace-bench run (its backtrace follows it)."""
    lines = [line for line in stderr.splitlines() if line.startswith("Error")]
    return (lines[0] if lines else stderr.strip())[-500:]


def bench(broker, mode, label, *args, timeout=900):
    cmd = [str(BENCH), mode, "--bootstrap", f"127.0.0.1:{broker.port}", "--broker-pid", str(broker.proc.pid),
           "--label", label, "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{label} failed: {failure(out.stderr)}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def api_versions_v0(correlation_id):
    """A whole ApiVersions v0 request frame (the first request every client sends)."""
    client = b"w9-idle"
    body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + correlation_id.to_bytes(4, "big") \
        + len(client).to_bytes(2, "big") + client
    return len(body).to_bytes(4, "big") + body


def open_idle_connections(port, count, deadline_s=120):
    """`count` client connections that each asked ApiVersions once and then stay idle."""
    conns = []
    deadline = time.time() + deadline_s
    try:
        for i in range(count):
            if time.time() > deadline:
                raise RuntimeError(f"only {i} of {count} idle connections opened in {deadline_s} s")
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(api_versions_v0(i))
            size = int.from_bytes(recv_exactly(c, 4), "big")
            recv_exactly(c, size)
            conns.append(c)
    except BaseException:
        close_all(conns)
        raise
    return conns


def recv_exactly(conn, n):
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise RuntimeError("broker closed an idle connection")
        out += chunk
    return out


def close_all(conns):
    for c in conns:
        try:
            c.close()
        except OSError:
            pass


def w9(broker, q):
    """W9: broker RSS with 10,000 idle client connections, and a producer's p99 at a fixed rate
    with them against without them."""
    count = max(1000, int(10_000 * q))
    produce = ["--topic", "w9", "--partitions", "6", "--message-size", "1024", "--count",
               str(max(1000, int(100_000 * q))), "--rate-mb", "20", "--acks", "all", "--linger-ms", "1"]
    alone = bench(broker, "produce", "W9 alone", *produce)
    rss_before = broker.rss_mb()
    conns = open_idle_connections(broker.port, count)
    try:
        time.sleep(1)
        rss = broker.rss_mb()
        busy = bench(broker, "produce", "W9 with idle connections", *produce)
    finally:
        close_all(conns)
    p99 = lambda r: (r.get("latency") or {}).get("p99_ms")
    return {"connections": count, "rss_mb": rss, "rss_before_mb": rss_before,
            "p99_ms": p99(busy), "p99_alone_ms": p99(alone)}


def w8(broker, q):
    """W8: one consumer of 1,000 partitions while 10 records a second are spread over them."""
    return bench(broker, "trickle", "W8", "--topic", "w8", "--partitions", "1000", "--rate", "10",
                 "--duration", str(max(10, int(60 * q))))


def java_tool(cp, cls, *args, timeout=900):
    out = subprocess.run(["java", "-Xmx512m", "-cp", cp, cls, *args], capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{cls} failed: {(out.stderr or out.stdout).strip()[-500:]}")
    return out.stdout


def java_clients(broker, q, cp):
    """W1 and W4 with Kafka's own tools (the Java client): ProducerPerformance with acks=all into
    6 partitions, then ConsumerPerformance reading it back; the consume figure is the fetch phase
    (fetch.MB.sec), which leaves out the group join."""
    count = str(max(10_000, int(300_000 * q)))
    bootstrap = f"127.0.0.1:{broker.port}"
    java_tool(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
              "--topic", "wj", "--partitions", "6", "--replication-factor", "1")
    before = cpu_seconds(broker.proc.pid)
    text = java_tool(cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", "wj", "--num-records", count,
                     "--record-size", "1024", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={bootstrap}", "acks=all")
    produce_cpu = cpu_seconds(broker.proc.pid) - before
    last = [line for line in text.splitlines() if "records sent" in line][-1]
    # Kafka's tools count MB as 2^20 bytes; converted to 10^6 like every other row.
    mb = float(last.split("(")[1].split(" MB/sec")[0]) * MIB / 1e6
    p99 = float(last.split(" ms 99th")[0].rsplit(",", 1)[1])
    before = cpu_seconds(broker.proc.pid)
    text = java_tool(cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                     "--topic", "wj", "--messages", count, "--group", "w4-java", "--timeout", "60000")
    consume_cpu = cpu_seconds(broker.proc.pid) - before
    # The header line, then (after any warning lines) one row starting with the start time.
    lines = text.splitlines()
    at = max(i for i, line in enumerate(lines) if "fetch.MB.sec" in line)
    header = [h.strip() for h in lines[at].split(",")]
    values = [line for line in lines[at + 1:] if line[:1].isdigit()][-1]
    row = dict(zip(header, [v.strip() for v in values.split(",")]))
    fetch_mb = float(row["fetch.MB.sec"]) * MIB / 1e6
    consumed_mb = float(row["data.consumed.in.MB"]) * MIB / 1e6
    return {"produce_mb_per_s": mb, "produce_p99_ms": p99, "produce_cpu_s": produce_cpu,
            "consume_fetch_mb_per_s": fetch_mb, "consume_mb": consumed_mb, "consume_cpu_s": consume_cpu,
            "consume_cpu_s_per_gb": consume_cpu / (consumed_mb / 1000) if consumed_mb else None}


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workloads(q):
    """(id, description, mode, args). q scales the counts (1.0 = full run)."""
    n = lambda x: str(max(1000, int(x * q)))
    return [
        ("W1", "produce 1 KiB, acks=all, 6 partitions, max rate", "produce",
         ["--topic", "w1", "--partitions", "6", "--message-size", "1024", "--count", n(1_000_000), "--acks", "all"]),
        ("W2", "produce 100 B, acks=1, 1 partition, max rate", "produce",
         ["--topic", "w2", "--partitions", "1", "--message-size", "100", "--count", n(2_000_000), "--acks", "1"]),
        ("W3", "end-to-end latency at a fixed 50 MB/s (1 KiB, acks=all, 6 partitions)", "e2e",
         ["--topic", "w3", "--partitions", "6", "--message-size", "1024", "--rate-mb", "50",
          "--count", n(1_000_000), "--acks", "all", "--linger-ms", "1"]),
        ("W4", "consume from the beginning (1 KiB messages)", "consume",
         ["--topic", "w4", "--partitions", "6"]),
        ("W5", "produce 1 KiB, acks=all, across 1,000 partitions (topic created and primed first)", "produce",
         ["--topic", "w5", "--partitions", "1000", "--message-size", "1024", "--count", n(500_000), "--acks", "all",
          "--prime"]),
    ]


class Cluster:
    """Three nodes on loopback, each broker and controller (Kafka: KRaft combined mode; Millrace:
    `--controller-voters`), RF 3 and min.insync.replicas=2 by default."""

    NODES = (1, 2, 3)

    def __init__(self, name, kind, sets=()):
        self.name, self.kind, self.sets = name, kind, list(sets)
        self.dir = Path(tempfile.mkdtemp(prefix=f"bench-cluster-{kind}-"))
        self.ports = {i: free_port() for i in self.NODES}
        self.ctrl = {i: free_port() for i in self.NODES}
        self.procs = {}

    @property
    def bootstrap(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def start(self):
        voters = ",".join(f"{i}@127.0.0.1:{self.ctrl[i]}" for i in self.NODES)
        cluster_id = "bench-cluster-0000000003"
        for i in self.NODES:
            node = self.dir / f"node{i}"
            node.mkdir()
            if self.kind == "millrace":
                cmd = [str(MILLRACE), "--node-id", str(i), "--data-dir", str(node / "data"),
                       "--listen", f"127.0.0.1:{self.ports[i]}", "--controller-listen", f"127.0.0.1:{self.ctrl[i]}",
                       "--controller-voters", voters]
                for s in ["default.replication.factor=3", "min.insync.replicas=2",
                          "group.initial.rebalance.delay.ms=0", *self.sets]:
                    cmd += ["--set", s]
            else:
                props = node / "server.properties"
                props.write_text("\n".join([
                    "process.roles=broker,controller", f"node.id={i}", f"controller.quorum.voters={voters}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.ports[i]},CONTROLLER://127.0.0.1:{self.ctrl[i]}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.ports[i]}",
                    f"log.dirs={node / 'logs'}", "default.replication.factor=3", "min.insync.replicas=2",
                    "offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
                    "transaction.state.log.min.isr=2", "group.initial.rebalance.delay.ms=0", *self.sets, ""]))
                (node / "log4j.properties").write_text(
                    "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                    f"log4j.appender.F.File={node / 'kafka.log'}\n"
                    "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n")
                subprocess.run(["java", "-cp", f"{LIBS}/*", "kafka.tools.StorageTool", "format", "-t", cluster_id,
                                "-c", str(props)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=120)
                cmd = ["java", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC", f"-Dlog4j.configuration=file:{node / 'log4j.properties'}",
                       "-cp", f"{LIBS}/*", "kafka.Kafka", str(props)]
            self.procs[i] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(node / "stderr.log", "w"))
        for i in self.NODES:
            wait_port(self.ports[i], self.procs[i])
        return self

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        TRASH.append(self.dir)

    def cpu_seconds(self):
        return sum(cpu_seconds(p.pid) for p in self.procs.values())


def w10(name, kind, sets, q):
    """W10: a 3-node cluster, RF 3, min.insync.replicas=2, acks=all: produce MB/s at max rate, then
    the p99 of a producer at a fixed 10 MB/s."""
    cluster = Cluster(name, kind, sets)
    try:
        cluster.start()
        def run(label, *args):
            cmd = [str(BENCH), "produce", "--bootstrap", cluster.bootstrap, "--label", label, "--json",
                   "--partitions", "6", "--replication-factor", "3", "--message-size", "1024", "--acks", "all",
                   "--prime", *args]
            before = cluster.cpu_seconds()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                raise RuntimeError(f"{label} failed: {failure(out.stderr)}")
            report = json.loads(out.stdout.strip().splitlines()[-1])
            report["cluster_cpu_seconds"] = cluster.cpu_seconds() - before
            return report
        # Warm-up (the JVM's JIT, the cluster's connections) on its own topic, not measured.
        run(f"W10 warm-up {name}", "--topic", "w10-warm-up", "--count", "50000")
        top = run(f"W10 {name}", "--topic", "w10", "--count", str(max(10_000, int(500_000 * q))))
        fixed = run(f"W10 fixed {name}", "--topic", "w10f", "--count", str(max(10_000, int(100_000 * q))),
                    "--rate-mb", "10", "--linger-ms", "1")
        return {"mb_per_s": top.get("mb_per_s"), "cluster_cpu_seconds": top.get("cluster_cpu_seconds"),
                "p99_ms": (fixed.get("latency") or {}).get("p99_ms"), "fixed": fixed, "max": top}
    finally:
        cluster.stop()


def run_broker(name, kind, sets, q, tools_cp):
    results = {}
    broker = Broker(name, kind, sets).start()
    try:
        time.sleep(2)
        results["W7 idle"] = {"rss_mb": broker.rss_mb()}
        for wid, _, mode, args in workloads(q):
            if wid == "W4":
                fill = ["--topic", "w4", "--partitions", "6", "--message-size", "1024",
                        "--count", str(max(1000, int(2_000_000 * q))), "--acks", "1", "--linger-ms", "20"]
                log(f"{name}: W4 fill ({int(2_000_000 * q)} x 1 KiB)")
                bench(broker, "produce", "W4 fill", *fill)
            log(f"{name}: {wid}")
            results[wid] = bench(broker, mode, f"{wid} {name}", *args)
            if wid == "W1":
                results["W7 under W1"] = {"rss_mb": results[wid].get("broker_peak_rss_mb")}
        log(f"{name}: W8")
        results["W8"] = w8(broker, q)
        log(f"{name}: W9")
        results["W9"] = w9(broker, q)
        log(f"{name}: W1/W4 with the Java client")
        try:
            results["java"] = java_clients(broker, q, tools_cp)
        except (RuntimeError, IndexError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
            log(f"{name}: Java client run failed: {e}")
            results["java"] = {"error": str(e)[-300:]}
    finally:
        broker.stop()
    # W6: time from process start to the first acknowledged produce, on a fresh broker.
    b6 = Broker(name, kind, sets)
    try:
        cmd = b6.command()
        out = subprocess.run([str(BENCH), "first-produce", "--bootstrap", f"127.0.0.1:{b6.port}", "--json", "--",
                              *cmd], capture_output=True, text=True, timeout=300)
        results["W6"] = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-300:]}
    finally:
        TRASH.append(b6.dir)
    return results


def metric(results, wid):
    r = results.get(wid, {})
    if wid in ("W1", "W2", "W4", "W5"):
        return r.get("mb_per_s"), "MB/s", True
    if wid == "W3":
        return (r.get("latency") or {}).get("p99_ms"), "p99 ms", False
    if wid == "W6":
        s = r.get("seconds")
        return (s * 1000 if s is not None else None), "ms", False
    if wid == "W5 ready":
        return results.get("W5", {}).get("topic_ready_seconds"), "s to create 1,000 partitions and ack a write to each", False
    if wid == "W10":
        return results.get("W10", {}).get("mb_per_s"), "MB/s, 3 nodes, RF 3, acks=all", True
    if wid == "W10 p99":
        return results.get("W10", {}).get("p99_ms"), "p99 ms at 10 MB/s, 3 nodes", False
    if wid == "W8":
        return results.get("W8", {}).get("broker_cpu_seconds"), "broker CPU s", False
    if wid == "W8 fetches":
        return results.get("W8", {}).get("fetch_requests_per_s"), "Fetch requests/s", False
    java = results.get("java", {})
    if wid == "W1 Java":
        return java.get("produce_mb_per_s"), "MB/s (ProducerPerformance)", True
    if wid == "W4 Java":
        return java.get("consume_fetch_mb_per_s"), "fetch.MB.sec (ConsumerPerformance)", True
    if wid == "W4 Java CPU":
        return java.get("consume_cpu_s_per_gb"), "broker CPU s per GB consumed", False
    if wid == "W4 CPU":
        w4 = results.get("W4", {})
        cpu, b = w4.get("broker_cpu_seconds"), w4.get("bytes")
        return (cpu / (b / 1e9) if cpu is not None and b else None), "broker CPU s per GB consumed", False
    if wid == "W9 RSS":
        return results.get("W9", {}).get("rss_mb"), "MB RSS, 10k idle connections", False
    if wid == "W9 p99":
        w = results.get("W9", {})
        a, b = w.get("p99_ms"), w.get("p99_alone_ms")
        return (b and a / b), "p99 with ÷ without idle connections", False
    return r.get("rss_mb"), "MB RSS", False


def fmt(v, digits=1):
    return "—" if v is None else f"{v:,.{digits}f}"


def table(all_results, names):
    kafka = all_results["kafka"]
    rows = ["| workload | metric | " + " | ".join(names) + " | " + " | ".join(f"{n} ÷ kafka" for n in names if n != "kafka") + " |",
            "|---|---|" + "---|" * (len(names) * 2 - 1)]
    for wid in ["W1", "W1 Java", "W2", "W3", "W4", "W4 CPU", "W4 Java", "W4 Java CPU", "W5", "W5 ready", "W6",
                "W7 idle", "W7 under W1", "W8", "W8 fetches", "W9 RSS", "W9 p99", "W10", "W10 p99"]:
        values = [metric(all_results[n], wid)[0] for n in names]
        unit = metric(kafka, wid)[1]
        ratios = []
        for n, v in zip(names, values):
            if n == "kafka":
                continue
            k = metric(kafka, wid)[0]
            ratios.append(fmt(v / k, 2) + "×" if v is not None and k else "—")
        rows.append(f"| {wid} | {unit} | " + " | ".join(fmt(v) for v in values) + " | " + " | ".join(ratios) + " |")
    w3 = ["| W3 latency (ms) | p50 | p99 | p99.9 | max |", "|---|---|---|---|---|"]
    for n in names:
        lat = (all_results[n].get("W3") or {}).get("latency") or {}
        w3.append(f"| {n} | {fmt(lat.get('p50_ms'), 2)} | {fmt(lat.get('p99_ms'), 2)} | {fmt(lat.get('p999_ms'), 2)} | {fmt(lat.get('max_ms'), 2)} |")
    return "\n".join(rows) + "\n\n" + "\n".join(w3)


def svg(all_results, names):
    colors = ["#888888", "#1f77b4", "#2ca02c", "#d62728"]
    panels = [("Throughput (MB/s)", [("W1", "mb_per_s"), ("W2", "mb_per_s"), ("W4", "mb_per_s"), ("W5", "mb_per_s")]),
              ("W3 latency (ms)", [("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")])]
    width, height, pad = 900, 320, 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 60}" font-family="sans-serif" font-size="12">']
    pw = (width - pad * 3) / 2
    for pi, (title, groups) in enumerate(panels):
        x0 = pad + pi * (pw + pad)
        vals = []
        for g, key in groups:
            for n in names:
                r = all_results[n]
                v = (r.get(g) or {}).get(key) if title.startswith("Throughput") else ((r.get("W3") or {}).get("latency") or {}).get(key)
                vals.append(v or 0)
        vmax = max(vals + [1e-9]) * 1.1
        parts.append(f'<text x="{x0}" y="20" font-weight="bold">{title}</text>')
        parts.append(f'<line x1="{x0}" y1="{height}" x2="{x0 + pw}" y2="{height}" stroke="black"/>')
        gw = pw / len(groups)
        bw = gw / (len(names) + 1)
        for gi, (g, key) in enumerate(groups):
            for ni, n in enumerate(names):
                v = vals[gi * len(names) + ni]
                h = (height - 40) * v / vmax
                x = x0 + gi * gw + ni * bw + bw / 2
                parts.append(f'<rect x="{x:.1f}" y="{height - h:.1f}" width="{bw * 0.9:.1f}" height="{h:.1f}" fill="{colors[ni % 4]}"/>')
                parts.append(f'<text x="{x + bw * 0.45:.1f}" y="{height - h - 3:.1f}" text-anchor="middle" font-size="9">{v:.0f}</text>' if v >= 10 else
                             f'<text x="{x + bw * 0.45:.1f}" y="{height - h - 3:.1f}" text-anchor="middle" font-size="9">{v:.2f}</text>')
            parts.append(f'<text x="{x0 + gi * gw + gw / 2:.1f}" y="{height + 15}" text-anchor="middle">{g}</text>')
    for ni, n in enumerate(names):
        parts.append(f'<rect x="{pad + ni * 200}" y="{height + 30}" width="12" height="12" fill="{colors[ni % 4]}"/>')
        parts.append(f'<text x="{pad + ni * 200 + 18}" y="{height + 41}">{n}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}"


def run_all(brokers, results, q, tools_cp):
    for name, kind, sets in brokers:
        log(f"== {name}")
        results[name] = run_broker(name, kind, sets, q, tools_cp)
        log(f"{name}: W10 (3-node cluster)")
        try:
            results[name]["W10"] = w10(name, kind, sets, q)
        except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as e:
            log(f"{name}: W10 failed: {e}")
            results[name]["W10"] = {"error": str(e)[-300:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="10x smaller workloads (a smoke run)")
    ap.add_argument("--no-docs", action="store_true", help="print the table only")
    ap.add_argument("--skip-build", action="store_true")
    a = ap.parse_args()
    q = 0.1 if a.quick else 1.0
    # W9 holds 10,000 sockets here and the broker (which inherits the limit) as many.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    t0 = time.time()
    if not a.skip_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "-p", "millrace-broker", "-p", "millrace-bench"], cwd=ROOT, check=True)
    ensure_kafka()
    tools_cp = ensure_tools()
    brokers = [("kafka", "kafka", []), ("millrace", "millrace", []),
               ("millrace-never", "millrace", ["log.flush.policy=never"])]
    names = [b[0] for b in brokers]
    results = {}
    try:
        run_all(brokers, results, q, tools_cp)
    finally:
        (ROOT / "target" / "bench-results.json").write_text(json.dumps(results, indent=2))
        for d in TRASH:
            shutil.rmtree(d, ignore_errors=True)
    text = table(results, names)
    print(text)
    if a.no_docs:
        return
    SVG.write_text(svg(results, names))
    section = f"""{BEGIN}
## Millrace vs Apache Kafka (latest run)

Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}, {'quick' if a.quick else 'full'} run,
{time.time() - t0:.0f} s in all. Produced by `crates/bench/compare.py`; raw numbers in `target/bench-results.json`.

{text}

![throughput and latency](benchmarks.svg)

Settings: every workload uses `millrace-bench` (librdkafka) with the same client settings against
each broker: `linger.ms=5` (W3: 1), `batch.size=1000000`, no compression, idempotence off; W4 reads
what a fill phase wrote (acks=1, linger 20 ms) with `fetch.max.bytes=52428800`. Brokers: Apache Kafka
4.1.1 (KRaft single node, `-Xms1g -Xmx1g -XX:+UseG1GC`, page-cache durability), Millrace with its
default `log.flush.policy=batch` (fsync before acks), and Millrace with `log.flush.policy=never`
(Kafka's durability, the like-for-like row). W6 is process start → first acknowledged produce
(Kafka's storage format step excluded). W7 is resident memory 2 s after start and the peak during W1.
W5 creates its 1,000-partition topic and writes one record to every partition before the clock
starts (`--prime`); how long that took is the "W5 ready" row. W8 (`millrace-bench trickle`) is one
librdkafka consumer of all 1,000 partitions of a topic (`fetch.wait.max.ms=500`) while 10 records a
second go round-robin to them, for 60 s (`--quick`: 10 s): the broker's CPU seconds over that time
and the consumer's Fetch requests per second (librdkafka does not use KIP-227 fetch sessions, so
each fetch names every partition on both brokers). "Java" rows run Kafka's own
`ProducerPerformance` (300,000 × 1 KiB, acks=all, 6 partitions, client defaults) and then
`ConsumerPerformance` on the same topic; the consume figure is the fetch phase (`fetch.MB.sec`),
both brokers with `group.initial.rebalance.delay.ms=0`. CPU per GB is the broker's CPU seconds
while the consumer ran, over the bytes consumed.
W10 starts three nodes of each broker on this machine (each node broker and controller; Kafka
in KRaft combined mode with `-Xmx1g` each) and produces to a 6-partition topic with replication
factor 3, `min.insync.replicas=2`, acks=all: after an unmeasured warm-up of 50,000 records on
another topic, 500,000 × 1 KiB at full speed (MB/s), then
100,000 × 1 KiB at a fixed 10 MB/s with linger 1 ms (p99).
W9 opens 10,000 client connections (`--quick`: 1,000) that each ask ApiVersions once and then stay
idle, and reports the broker's resident memory with them and the p99 of a producer at 20 MB/s
(acks=all, linger 1 ms) with them divided by its p99 without them (the target is ≤ 1.2).
{END}"""
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n\n"
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + section + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(doc)
    log(f"wrote {DOC.relative_to(ROOT)} and {SVG.relative_to(ROOT)} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
