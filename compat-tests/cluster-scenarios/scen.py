"""Helpers of the cluster scenarios: Kafka's CLI tools, kcat, the Java AdminClient check, topic
creation and bounded waits over every broker's own Metadata (kwire)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from millrace import Cluster, wait_until

HERE = Path(__file__).resolve().parent
OP_TIMEOUT = 30.0
TOOL_TIMEOUT = float(os.environ.get("TOOL_TIMEOUT", "90"))
KCAT = os.environ.get("KCAT", "kcat")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- Kafka's CLI tools and the Java AdminClient (classpath from compat-tests/java/dist) --------

def java_classpath() -> str:
    cp = os.environ.get("DIST_CP", "")
    if not cp:
        raise RuntimeError("DIST_CP is not set: run through compat-tests/cluster-scenarios/run.sh "
                           "(it resolves Kafka's tools with compat-tests/java/common.sh)")
    return cp


def java_opts() -> List[str]:
    return ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            f"-Dlog4j2.configurationFile={HERE.parent / 'java' / 'log4j2-tools.properties'}"]


@dataclass
class Run:
    rc: int
    out: str
    err: str
    secs: float

    def text(self) -> str:
        return f"rc={self.rc} ({self.secs:.1f}s)\n--- stdout ---\n{self.out[-3000:]}\n--- stderr ---\n{self.err[-3000:]}"


def run(cmd: List[str], timeout: float = TOOL_TIMEOUT, stdin: Optional[str] = None) -> Run:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        return Run(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return Run(124, out, err + f"\n(timed out after {timeout}s: {shlex.join(cmd)})", time.monotonic() - t0)


def tool(cls: str, *args: str, timeout: float = TOOL_TIMEOUT) -> Run:
    """A Kafka CLI tool class, run as bin/kafka-*.sh runs it."""
    return run(["java", *java_opts(), "-cp", java_classpath(), cls, *args], timeout)


def kafka_topics(bootstrap: str, *args: str) -> Run:
    return tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, *args)


def kafka_configs(bootstrap: str, *args: str) -> Run:
    return tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args)


@dataclass
class Described:
    leader: int
    replicas: List[int]
    isr: List[int]


DESCRIBE_LINE = re.compile(
    r"^\s*Topic: (\S+)\s+Partition: (\d+)\s+Leader: (-?\d+|none)\s+Replicas: ([\d,]*)\s+Isr: ([\d,]*)")


def _ids(s: str) -> List[int]:
    return [int(x) for x in s.split(",") if x]


def parse_describe(out: str, topic: str) -> Dict[int, Described]:
    """kafka-topics --describe's partition lines of ``topic``: partition -> leader/replicas/ISR."""
    parts: Dict[int, Described] = {}
    for line in out.splitlines():
        m = DESCRIBE_LINE.match(line)
        if m and m.group(1) == topic:
            leader = -1 if m.group(3) == "none" else int(m.group(3))
            parts[int(m.group(2))] = Described(leader, _ids(m.group(4)), _ids(m.group(5)))
    return parts


def java_cluster_info(bootstrap: str, *topics: str) -> Run:
    """ClusterInfo.java (the Java AdminClient): describeCluster and describeTopics."""
    return run(["java", *java_opts(), "-cp", java_classpath(), str(HERE / "java" / "ClusterInfo.java"),
                bootstrap, *topics])


def parse_cluster_info(out: str):
    brokers = {}
    controller = None
    parts = {}
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["broker"]:
            brokers[int(f[1])] = f[2]
        elif f[:1] == ["controller"]:
            controller = int(f[1])
        elif f[:1] == ["partition"]:
            parts[(f[1], int(f[2]))] = Described(int(f[4]), _ids(f[6]), _ids(f[8]) if len(f) > 8 else [])
    return brokers, controller, parts


# --- kcat ------------------------------------------------------------------------------------

def kcat(*args: str, timeout: float = 60, stdin: Optional[str] = None) -> Run:
    return run(["timeout", "--kill-after=5", str(int(timeout)), KCAT, *args], timeout + 10, stdin)


# --- confluent-kafka -------------------------------------------------------------------------

def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int,
                 config: Optional[Dict[str, str]] = None) -> None:
    a = admin(bootstrap)
    futures = a.create_topics([NewTopic(topic, partitions, rf, config=config or {})], operation_timeout=20,
                              request_timeout=OP_TIMEOUT)
    futures[topic].result(OP_TIMEOUT)


# --- every broker's own view -------------------------------------------------------------------

def views(cluster: Cluster, ids: Iterable[int], topics: Optional[List[str]] = None,
          timeout: float = 1.0) -> Dict[int, kwire.Metadata]:
    """Metadata v7 asked of each broker in ``ids`` itself."""
    return {i: kwire.metadata(cluster.nodes[i].bootstrap, topics, timeout) for i in ids}


def wait_all(cluster: Cluster, ids: Iterable[int], cond: Callable[[kwire.Metadata], bool], timeout: float,
             what: str, topics: Optional[List[str]] = None, interval: float = 0.02) -> float:
    """Polls each broker's Metadata until ``cond`` holds on every one of ``ids``; returns the
    seconds it took. Raises TimeoutError naming the brokers that did not get there."""
    ids = list(ids)
    t0 = time.monotonic()
    pending = set(ids)
    last: Dict[int, object] = {}
    while True:
        for i in sorted(pending):
            try:
                md = kwire.metadata(cluster.nodes[i].bootstrap, topics, timeout=max(0.2, min(1.0, timeout)))
                last[i] = md
                if cond(md):
                    pending.discard(i)
            except (OSError, kwire.WireError) as exc:
                last[i] = exc
        if not pending:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            detail = {i: _brief(last.get(i), topics) for i in sorted(pending)}
            raise TimeoutError(f"{what}: not true within {timeout}s on brokers {sorted(pending)}: {detail}")
        time.sleep(interval)


def _brief(md: object, topics: Optional[List[str]]) -> str:
    if not isinstance(md, kwire.Metadata):
        return repr(md)
    parts = []
    for t in topics or []:
        topic = md.topics.get(t)
        if topic is None:
            parts.append(f"{t}: absent")
            continue
        parts.append(f"{t}: error {topic.error} " + " ".join(
            f"p{p.id}:L{p.leader}/R{p.replicas}/I{p.isr}/e{p.error}" for p in topic.partitions.values()))
    return f"brokers {sorted(md.brokers)} controller {md.controller}; " + "; ".join(parts)


def fully_replicated(topic: str, partitions: int, replicas: int) -> Callable[[kwire.Metadata], bool]:
    """Every partition has a leader and an ISR of ``replicas`` members."""
    def cond(md: kwire.Metadata) -> bool:
        t = md.topics.get(topic)
        return (t is not None and t.error == 0 and len(t.partitions) == partitions
                and all(p.error == 0 and p.leader >= 0 and len(p.replicas) == replicas
                        and sorted(p.isr) == sorted(p.replicas) for p in t.partitions.values()))
    return cond


def leaders(md: kwire.Metadata, topic: str) -> Dict[int, int]:
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def dump_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
