"""Systems under test: N nodes on loopback, every link through a ``millrace-chaos`` route.

Routes (names used by the nemesis and in the history):

- ``client{j}``: clients → node j's client listener. Node j advertises this route, so every
  client connection to j (after bootstrap too) goes through it.
- ``data{i}>{j}``: node i's inter-broker connections (replica fetch, forwarding) → node j.
- ``ctrl{i}>{j}``: node i's controller connections (Raft, broker → controller) → node j.
- ``s3`` (Millrace with tiered storage): every broker → the run's SeaweedFS S3 port
  (``seaweed.py``); the ``object-store-outage`` fault cuts it.

A one-way partition "i cannot reach j" cuts ``X{i}>{j}`` upstream and ``X{j}>{i}`` downstream:
nothing i sends reaches j, on i's connections or on j's.

Adapters:

- ``KafkaCluster``: Apache Kafka (the reference, ``reference/pom.xml``: 4.4.0) in KRaft combined
  mode (broker + controller per node).
  Per-pair data routes use one listener per *connecting* node: node j listens on B1..BN and
  advertises ``Bi`` as the route ``data{i}>{j}``; node i sets ``inter.broker.listener.name=Bi``,
  so it reaches every peer through its own routes. Controller routes come from a per-node
  ``controller.quorum.voters`` list.
- ``MillraceCluster``: ``millrace`` with the cluster contract (``--controller-listen``,
  ``--controller-voters`` per node, ``MILLRACE_TEST_PEER_ADDRESSES`` for the data routes). A
  binary without ``--controller-voters`` runs one node (no inter-node links). Given an object
  store (3 nodes), tiered storage is on: every broker uploads to it through the ``s3`` route,
  and serves ``/remote-log`` and ``/metrics`` on its HTTP listener (``Node.http_addr``).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import secure
import share
from chaos import Chaos
from seaweed import BUCKET, SeaweedFs
from procs import spawn, free_port, terminate, wait_until

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KAFKA_LIBS = REPO / "compat-tests" / ".work" / "kafka-ref" / "libs"
KAFKA_POM = REPO / "compat-tests" / "reference" / "pom.xml"

# Fault kinds, per lane. A process lane and a network lane run side by side.
PROCESS_KINDS = ("kill", "pause", "kill-controller", "kill-txn-coordinator", "kill-share-leader")
# Tiered storage (Millrace, 3 nodes): kill -9 the leader of a tiered partition (while it has
# segments waiting for upload, when it can), and cut the brokers' route to the object store.
TIERED_PROCESS_KINDS = ("kill-tiered-leader",)
OBJECT_STORE_KINDS = ("object-store-outage",)
# The object store's folder for the run's tiered segments (``s3://<bucket>/<prefix>``).
TIERED_PREFIX = "tiered"
# remote.log.manager.task.interval.ms under the harness: uploads follow a segment roll closely.
TIERED_TASK_INTERVAL_MS = "500"
TIERED_RETENTION_CHECK_MS = "2000"
# An upload whose commit failed (leader killed, route cut) leaves orphan objects; deleted after this.
TIERED_ORPHAN_GRACE_MS = "30000"
CLIENT_NETWORK_KINDS = ("client-cut-oneway", "client-cut-both")
PEER_NETWORK_KINDS = ("partition-oneway", "partition-both", "isolate-controller")
# Replication throttles (KIP-73) on one broker, leader or follower side, for every replica of the
# main topic, then lifted (several nodes: there is replication to throttle).
THROTTLE_KINDS = ("throttle-replication",)
# Storage faults: only Millrace repairs damaged batches (issue 30), and only with replicas.
STORAGE_KINDS = ("flip-bytes",)
# Millrace's scrub interval under the harness: two passes fit in one flip-bytes fault.
MILLRACE_SCRUB_INTERVAL_MS = "3000"


class Node:
    """One server process with a fixed data dir and fixed ports (routes point at them)."""

    def __init__(self, node_id: int, work: Path, ready_marker: str, ready_in: str) -> None:
        self.id = node_id
        self.dir = work / f"node{node_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ready_marker = ready_marker
        self.ready_in = ready_in  # "stdout" or a log file name inside self.dir
        self.proc: Optional[subprocess.Popen] = None
        self.paused = False
        self.starts = 0
        self.http_addr: Optional[str] = None  # HTTP listener (/metrics, /remote-log), if any
        self._ready = threading.Event()
        self._log_offset = 0

    def command(self) -> List[str]:
        raise NotImplementedError

    def env(self) -> Dict[str, str]:
        return dict(os.environ)

    def start(self) -> None:
        self._ready.clear()
        self.starts += 1
        out = open(self.dir / "stdout.log", "ab")
        err = open(self.dir / "stderr.log", "ab")
        for fh in (out, err):
            fh.write(f"\n=== start {self.starts} at {time.strftime('%H:%M:%S')} ===\n".encode())
            fh.flush()
        log = self.dir / self.ready_in
        self._log_offset = log.stat().st_size if self.ready_in != "stdout" and log.exists() else 0
        if self.ready_in == "stdout":
            self.proc = spawn(
                self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                env=self.env(),
            )
            threading.Thread(target=self._read_stdout, args=(self.proc, out), daemon=True).start()
        else:
            self.proc = spawn(
                self.command(), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env=self.env(),
            )
            out.close()
        err.close()
        self.paused = False

    def _read_stdout(self, proc: subprocess.Popen, out) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            out.write(raw)
            out.flush()
            if self.ready_marker.encode() in raw:
                self._ready.set()
        out.close()

    def ready(self) -> bool:
        if self.ready_in == "stdout":
            return self._ready.is_set()
        try:
            with open(self.dir / self.ready_in, "rb") as fh:
                fh.seek(self._log_offset)
                return self.ready_marker.encode() in fh.read()
        except OSError:
            return False

    def wait_ready(self, timeout: float) -> None:
        def up() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"node {self.id} exited (rc={self.proc.returncode if self.proc else None}); see {self.dir}")
            return self.ready()

        wait_until(up, timeout, 0.1, f"node {self.id} ready")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self.paused = False

    def pause(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, grace=15)


class Cluster:
    """N nodes plus their routes. Subclasses build the nodes and their configuration."""

    name = "?"
    ready_timeout = 60.0

    def __init__(self, work: Path, chaos: Chaos, nodes: int, broken: bool) -> None:
        self.work = work
        self.chaos = chaos
        self.n = nodes
        self.broken = broken
        self.ids = list(range(1, nodes + 1))
        self.nodes: Dict[int, Node] = {}
        self.client_ports: Dict[int, int] = {i: free_port() for i in self.ids}
        self.client_addr: Dict[int, str] = {}

    # Tiered storage (an object store behind the ``s3`` route): only a Millrace cluster has it.
    tiered = False

    # --- topology ---------------------------------------------------------------------------
    @property
    def multi(self) -> bool:
        return self.n > 1

    def fault_kinds(self) -> Dict[str, tuple]:
        network = CLIENT_NETWORK_KINDS + (PEER_NETWORK_KINDS if self.multi else ())
        kinds = {"process": PROCESS_KINDS, "network": network}
        if self.multi:
            kinds["throttle"] = THROTTLE_KINDS
        return kinds

    @property
    def bootstrap(self) -> str:
        return ",".join(self.client_addr[i] for i in self.ids)

    def add_client_routes(self) -> None:
        for i in self.ids:
            self.client_addr[i] = self.chaos.add(f"client{i}", f"127.0.0.1:{self.client_ports[i]}")

    @staticmethod
    def link_routes(kind: str, a: int, b: int) -> List[tuple]:
        """(route, direction) pairs that stop a's bytes reaching b on `kind` links."""
        return [(f"{kind}{a}>{b}", "up"), (f"{kind}{b}>{a}", "down")]

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            node.wait_ready(self.ready_timeout)

    def restart(self, i: int) -> None:
        node = self.nodes[i]
        node.start()
        node.wait_ready(self.ready_timeout)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def data_dirs(self) -> Dict[int, Path]:
        """Each node's directory of partition logs (``<topic>-<partition>/``)."""
        raise NotImplementedError

    # --- settings the workload needs ----------------------------------------------------------
    @property
    def replication_factor(self) -> int:
        return self.n

    @property
    def min_insync(self) -> int:
        return 1 if (self.broken or self.n == 1) else 2

    def topic_config(self) -> Dict[str, str]:
        cfg = {"min.insync.replicas": str(self.min_insync)}
        if self.broken:
            cfg["unclean.leader.election.enable"] = "true"
        return cfg


class KafkaNode(Node):
    def __init__(self, node_id: int, work: Path) -> None:
        super().__init__(node_id, work, "Kafka Server started", "kafka.log")
        self.props = self.dir / "server.properties"

    def command(self) -> List[str]:
        return [
            "java", "-Xms256m", "-Xmx640m", "-XX:+UseSerialGC",
            f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
            "-cp", f"{KAFKA_LIBS}/*", "kafka.Kafka", str(self.props),
        ]


class KafkaCluster(Cluster):
    def data_dirs(self) -> Dict[int, Path]:
        return {i: n.dir / "logs" for i, n in self.nodes.items()}

    name = "kafka"
    ready_timeout = 120.0

    def __init__(self, work: Path, chaos: Chaos, nodes: int, broken: bool) -> None:
        super().__init__(work, chaos, nodes, broken)
        ensure_kafka_jars()
        self.ctrl_ports = {i: free_port() for i in self.ids}
        # inter_ports[j][i]: node j's listener B{i}, used by node i (i == j: unused but required).
        self.inter_ports = {j: {i: free_port() for i in self.ids} for j in self.ids}
        self.add_client_routes()
        data_addr: Dict[tuple, str] = {}
        ctrl_addr: Dict[tuple, str] = {}
        for i in self.ids:
            for j in self.ids:
                if i != j:
                    data_addr[(i, j)] = self.chaos.add(f"data{i}>{j}", f"127.0.0.1:{self.inter_ports[j][i]}")
                    ctrl_addr[(i, j)] = self.chaos.add(f"ctrl{i}>{j}", f"127.0.0.1:{self.ctrl_ports[j]}")
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        formats = []
        for j in self.ids:
            node = KafkaNode(j, work)
            self.nodes[j] = node
            names = ["CLIENT"] + [f"B{i}" for i in self.ids] + ["CONTROLLER"]
            listeners = [f"CLIENT://127.0.0.1:{self.client_ports[j]}"]
            listeners += [f"B{i}://127.0.0.1:{self.inter_ports[j][i]}" for i in self.ids]
            listeners.append(f"CONTROLLER://127.0.0.1:{self.ctrl_ports[j]}")
            advertised = [f"CLIENT://{self.client_addr[j]}"]
            advertised += [
                f"B{i}://{data_addr[(i, j)] if i != j else f'127.0.0.1:{self.inter_ports[j][i]}'}" for i in self.ids
            ]
            voters = [
                f"{m}@{ctrl_addr[(j, m)] if m != j else f'127.0.0.1:{self.ctrl_ports[j]}'}" for m in self.ids
            ]
            settings = {
                "process.roles": "broker,controller",
                "node.id": str(j),
                "controller.quorum.voters": ",".join(voters),
                "controller.listener.names": "CONTROLLER",
                "listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
                "inter.broker.listener.name": f"B{j}",
                "listener.security.protocol.map": ",".join(
                    f"{n}:{'PLAINTEXT' if secure.tls_dir() is None else 'SSL' if n == 'CONTROLLER' else 'SASL_SSL'}"
                    for n in names),
                "log.dirs": str(node.dir / "logs"),
                "num.partitions": "6",
                "default.replication.factor": str(self.n),
                "min.insync.replicas": str(self.min_insync),
                "offsets.topic.replication.factor": str(self.n),
                "offsets.topic.num.partitions": "4",
                "transaction.state.log.replication.factor": str(self.n),
                "transaction.state.log.min.isr": str(min(2, self.n)),
                "transaction.state.log.num.partitions": "4",
                "group.initial.rebalance.delay.ms": "0",
                "auto.create.topics.enable": "false",
                "unclean.leader.election.enable": "true" if broken else "false",
                "replica.lag.time.max.ms": "10000",
                **share.broker_settings(self.n),
            }
            if secure.tls_dir() is not None:
                settings.update(secure.broker_settings(names[:-1]))
            node.props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            (node.dir / "log4j.properties").write_text(
                "log4j.rootLogger=INFO, F\n"
                "log4j.appender.F=org.apache.log4j.FileAppender\n"
                f"log4j.appender.F.File={node.dir / 'kafka.log'}\n"
                "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.F.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            )
            formats.append(
                spawn(
                    ["java", "-cp", f"{KAFKA_LIBS}/*", "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(node.props)],
                    stdout=open(node.dir / "format.log", "wb"), stderr=subprocess.STDOUT,
                )
            )
        for j, p in zip(self.ids, formats):
            if p.wait(180) != 0:
                raise RuntimeError(f"kafka storage format failed for node {j}: see {self.nodes[j].dir / 'format.log'}")


def kafka_ref_version() -> str:
    """The reference broker's version: reference/pom.xml's kafka.version."""
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    if not found:
        raise RuntimeError(f"no <kafka.version> in {KAFKA_POM}")
    return found.group(1)


def ensure_kafka_jars() -> None:
    """The reference jars in KAFKA_LIBS, resolved once per version (as reference/kafka-shim.sh:
    .complete holds the version they are)."""
    version = kafka_ref_version()
    marker = KAFKA_LIBS / ".complete"
    if marker.exists() and marker.read_text().strip() == version:
        return
    shutil.rmtree(KAFKA_LIBS, ignore_errors=True)
    KAFKA_LIBS.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(KAFKA_POM), "dependency:copy-dependencies",
         f"-DoutputDirectory={KAFKA_LIBS}", "-DincludeScope=runtime"],
        check=True, timeout=1200,
    )
    marker.write_text(version + "\n")


class MillraceNode(Node):
    def __init__(self, node_id: int, work: Path, args: List[str], env: Dict[str, str]) -> None:
        super().__init__(node_id, work, "millrace ready", "stdout")
        self.args = args
        self.extra_env = env

    def command(self) -> List[str]:
        return self.args

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        return env


def millrace_has_cluster_support(binary: Path) -> bool:
    """Does this binary take the cluster flags? (``--controller-voters`` in its --help)."""
    try:
        out = subprocess.run([str(binary), "--help"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--controller-voters" in out.stdout + out.stderr


class MillraceCluster(Cluster):
    def data_dirs(self) -> Dict[int, Path]:
        return {i: self.work / f"node{i}" / "data" for i in self.nodes}

    def fault_kinds(self) -> Dict[str, tuple]:
        kinds = super().fault_kinds()
        if self.multi:
            kinds["storage"] = STORAGE_KINDS
        if self.tiered:
            kinds["process"] = kinds["process"] + TIERED_PROCESS_KINDS
            kinds["object-store"] = OBJECT_STORE_KINDS
        return kinds

    @property
    def tiered(self) -> bool:
        return self.object_store is not None

    def tiered_topic_config(self, local_retention_bytes: int) -> Dict[str, str]:
        """A topic whose closed segments go to the object store and leave the local log."""
        return dict(super().topic_config(), **{
            "remote.storage.enable": "true",
            "segment.bytes": "16384",
            "local.retention.bytes": str(local_retention_bytes),
        })

    def topic_config(self) -> Dict[str, str]:
        cfg = super().topic_config()
        if self.multi:
            # Small segments, so flip-bytes finds closed ones early in the run.
            cfg["segment.bytes"] = "16384"
        return cfg

    name = "millrace"
    ready_timeout = 60.0

    def __init__(self, work: Path, chaos: Chaos, nodes: int, broken: bool, binary: Path,
                 object_store: Optional[SeaweedFs] = None) -> None:
        super().__init__(work, chaos, nodes, broken)
        self.add_client_routes()
        ctrl_ports = {i: free_port() for i in self.ids}
        self.object_store = object_store if self.multi else None
        s3_env: Dict[str, str] = {}
        if self.object_store is not None:
            s3_env = self.object_store.broker_env(self.chaos.add("s3", self.object_store.s3_upstream))
        for j in self.ids:
            settings = {
                "num.partitions": "6",
                "offsets.topic.num.partitions": "4",
                "offsets.topic.replication.factor": str(self.n),
                "default.replication.factor": str(self.n),
                "min.insync.replicas": str(self.min_insync),
                "group.initial.rebalance.delay.ms": "0",
                "auto.create.topics.enable": "false",
                "unclean.leader.election.enable": "true" if broken else "false",
                "millrace.log.scrub.interval.ms": MILLRACE_SCRUB_INTERVAL_MS,
                "millrace.share.groups.enable": "true",
                **share.broker_settings(self.n),
            }
            if self.object_store is not None:
                settings.update({
                    "remote.log.storage.system.enable": "true",
                    "millrace.remote.storage.url": f"s3://{BUCKET}/{TIERED_PREFIX}",
                    "remote.log.manager.task.interval.ms": TIERED_TASK_INTERVAL_MS,
                    "millrace.remote.storage.orphan.grace.ms": TIERED_ORPHAN_GRACE_MS,
                    # Local retention (of uploaded segments too) runs on this period; Kafka's 5 min
                    # would keep every segment local for a whole run.
                    "log.retention.check.interval.ms": TIERED_RETENTION_CHECK_MS,
                })
            http_addr = f"127.0.0.1:{free_port()}"
            args = [str(binary), "--node-id", str(j), "--data-dir", str(work / f"node{j}" / "data")]
            if secure.tls_dir() is None:
                args += ["--listen", f"127.0.0.1:{self.client_ports[j]}", "--advertised-listener", self.client_addr[j]]
            else:
                # The one Kafka listener is SASL_SSL, for clients and brokers alike.
                settings.update({
                    "listeners": f"SASL_SSL://127.0.0.1:{self.client_ports[j]}",
                    "advertised.listeners": f"SASL_SSL://{self.client_addr[j]}",
                    "inter.broker.listener.name": "SASL_SSL",
                    "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
                    **secure.broker_settings(["SASL_SSL"]),
                })
            args += ["--http-listen", http_addr]
            env: Dict[str, str] = dict(s3_env)
            if self.multi:
                voters = []
                peers = []
                for m in self.ids:
                    if m == j:
                        voters.append(f"{m}@127.0.0.1:{ctrl_ports[m]}")
                        continue
                    voters.append(f"{m}@{self.chaos.add(f'ctrl{j}>{m}', f'127.0.0.1:{ctrl_ports[m]}')}")
                    peers.append(f"{m}={self.chaos.add(f'data{j}>{m}', f'127.0.0.1:{self.client_ports[m]}')}")
                args += ["--controller-listen", f"127.0.0.1:{ctrl_ports[j]}", "--controller-voters", ",".join(voters)]
                env["MILLRACE_TEST_PEER_ADDRESSES"] = ",".join(peers)
            for k, v in settings.items():
                args += ["--set", f"{k}={v}"]
            self.nodes[j] = MillraceNode(j, work, args, env)
            self.nodes[j].http_addr = http_addr
