"""Start and stop a Millrace broker for the client compatibility tests.

Contract (see compat-tests/README.md):
  millrace --data-dir DIR --listen 127.0.0.1:0 [--set name=value ...]
prints one line containing ``listening on 127.0.0.1:PORT`` on stdout when
ready; everything else goes to stderr.  SIGTERM stops it (exit 0).

Only the standard library is used, so any Python >= 3.8 can import this.
The pytest fixture lives in ``millrace_pytest.py`` next to this file.

Environment:
  MILLRACE_BIN            broker binary (default <repo>/target/debug/millrace,
                          rebuilt by cargo before each run)
  MILLRACE_START_TIMEOUT  seconds to wait for the "listening on" line (10)
  MILLRACE_KEEP_WORK      if set, keep each broker's temp dir (data + logs)
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Optional, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "millrace"
LISTEN_RE = re.compile(r"listening on 127\.0\.0\.1:(\d+)")

T = TypeVar("T")


class BrokerError(RuntimeError):
    pass


def cluster_binary() -> Path:
    """The binary of a cluster's nodes: the broker's, or on a reference run (MILLRACE_BIN is the
    single-node reference/kafka-shim.sh) Apache Kafka behind the cluster command line."""
    binary = broker_binary()
    if binary.name == "kafka-shim.sh" and binary.parent.name == "reference":
        return REPO_ROOT / "compat-tests" / "cluster-scenarios" / "kafka-cluster-shim.sh"
    return binary


def broker_binary(build: bool = True) -> Path:
    """Path of the broker binary; builds it with cargo if it is missing."""
    env = os.environ.get("MILLRACE_BIN")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerError(f"MILLRACE_BIN={env} is not an executable file")
        return path
    # Always (re)build: cargo is a no-op when the binary is fresh, and a stale binary would test
    # yesterday's broker.
    if build:
        timeout = float(os.environ.get("MILLRACE_BUILD_TIMEOUT", "3600"))
        proc = subprocess.run(
            ["cargo", "build", "-q", "-p", "millrace-broker"],
            cwd=REPO_ROOT,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise BrokerError(f"cargo build -p millrace-broker failed (rc={proc.returncode})")
    if not DEFAULT_BIN.is_file():
        raise BrokerError(f"broker binary {DEFAULT_BIN} does not exist")
    return DEFAULT_BIN


def wait_until(
    condition: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll ``condition`` until it returns a truthy value; return that value.

    Exceptions raised by ``condition`` count as "not yet"; the last one is
    reported if the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    last_value: object = None
    while True:
        try:
            last_value = condition()
            if last_value:
                return last_value  # type: ignore[return-value]
            last_exc = None
        except Exception as exc:  # noqa: BLE001 - we re-raise details below
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f"last error: {last_exc!r}" if last_exc else f"last value: {last_value!r}"
            raise TimeoutError(f"timed out after {timeout}s waiting for {what} ({detail})")
        time.sleep(interval)


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


_LIVE: "set[Broker]" = set()


def _kill_leftovers() -> None:
    for broker in list(_LIVE):
        broker.kill()


atexit.register(_kill_leftovers)


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL the broker if the test process dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort, not on every platform
        pass


def install_sigterm_cleanup() -> None:
    """On SIGTERM (e.g. from `timeout`), kill the brokers we started, then exit."""

    def on_term(signum, frame):  # noqa: ARG001
        _kill_leftovers()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


class Broker:
    """One broker process with its own temporary data dir."""

    def __init__(
        self,
        settings: Optional[Dict[str, str]] = None,
        binary: Optional[Path] = None,
        start_timeout: Optional[float] = None,
        data_dir: Optional[Path] = None,
    ) -> None:
        self.settings = dict(settings or {})
        self.binary = Path(binary) if binary else None
        self.start_timeout = start_timeout or float(os.environ.get("MILLRACE_START_TIMEOUT", "10"))
        self.work_dir: Optional[Path] = None
        self.data_dir: Optional[Path] = Path(data_dir) if data_dir else None
        self.proc: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        self.stdout_lines: List[str] = []
        self.stderr_path: Optional[Path] = None
        self.returncode: Optional[int] = None
        self._ready = threading.Event()
        self._reader: Optional[threading.Thread] = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> "Broker":
        binary = self.binary or broker_binary()
        self.work_dir = Path(tempfile.mkdtemp(prefix="millrace-compat-"))
        if self.data_dir is None:
            self.data_dir = self.work_dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = self.work_dir / "broker.stderr.log"
        args = [str(binary), "--data-dir", str(self.data_dir), "--listen", "127.0.0.1:0"]
        for name, value in self.settings.items():
            args += ["--set", f"{name}={value}"]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                preexec_fn=_die_with_parent if os.name == "posix" else None,
            )
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read_stdout, name="millrace-stdout", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._reader.join(1)
                if self._ready.is_set():
                    break
                rc = self.proc.returncode
                self._cleanup()
                raise BrokerError(
                    f"broker exited (rc={rc}) before printing 'listening on'; "
                    f"args={args}\nstderr tail:\n{self.stderr_tail()}"
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise BrokerError(
                    f"broker did not print 'listening on 127.0.0.1:PORT' within "
                    f"{self.start_timeout}s; stdout={self.stdout_lines!r}\n"
                    f"stderr tail:\n{self.stderr_tail()}"
                )
        return self

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stdout_lines.append(line)
            if self.port is None:
                match = LISTEN_RE.search(line)
                if match:
                    self.port = int(match.group(1))
                    self._ready.set()

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerError("broker not started")
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.returncode = self.proc.returncode
        self._cleanup()
        return self.returncode

    def kill(self) -> Optional[int]:
        if self.proc is None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.returncode = self.proc.returncode
        self._cleanup()
        return self.returncode

    def _cleanup(self) -> None:
        _LIVE.discard(self)
        if self._reader is not None:
            self._reader.join(2)
        if self.proc is not None and self.proc.stdout is not None:
            try:
                self.proc.stdout.close()
            except OSError:
                pass
        self.proc_stderr_tail = self.stderr_tail()
        if self.work_dir is not None and not os.environ.get("MILLRACE_KEEP_WORK"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def stderr_tail(self, lines: int = 40) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return getattr(self, "proc_stderr_tail", "")
        with open(self.stderr_path, "rb") as fh:
            data = fh.read()[-65536:].decode("utf-8", "replace")
        return "\n".join(data.splitlines()[-lines:])

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- a cluster of N nodes ---------------------------------------------------------------------
#
# Contract (issue 12): node i is started as
#   millrace --node-id i --data-dir D --listen 127.0.0.1:K --controller-listen 127.0.0.1:C
#            --controller-voters 1@127.0.0.1:C1,2@127.0.0.1:C2,... [--set name=value ...]
# and prints a line containing "millrace ready" (and "listening on 127.0.0.1:K") on stdout once
# it serves. When it becomes the active controller it logs "this node is the active controller
# term=T" on stderr. Ports stay fixed for the life of the Cluster so that a node can be killed and
# restarted on the same data dir and ports (the voters list names them).

READY_MARKER = "millrace ready"
ACTIVE_CONTROLLER_RE = re.compile(r"this node is the active controller term=(\d+)")
TIMESTAMP_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")


def free_ports(n: int) -> List[int]:
    """n distinct free loopback ports (all sockets held open until every port is chosen)."""
    import socket

    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def broker_env() -> Dict[str, str]:
    """The environment for a broker process: without the MILLRACE_* variables of the test scripts.

    Millrace reads every MILLRACE_* variable as a config key and stops on unknown ones, and the
    suites export their own (MILLRACE_ADDR, MILLRACE_CLUSTER_BOOTSTRAP, ...). MILLRACE_LOG (the
    log filter) is kept.
    """
    return {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_") or k == "MILLRACE_LOG"}


class ClusterNode:
    """One node of a :class:`Cluster`: fixed id, data dir and ports; restartable."""

    def __init__(self, cluster: "Cluster", node_id: int, port: int, controller_port: int,
                 http_port: Optional[int] = None) -> None:
        self.cluster = cluster
        self.id = node_id
        self.port = port
        self.controller_port = controller_port
        self.http_port = http_port  # --http-listen (metrics, health, readiness), when asked for
        self.dir = cluster.work_dir / f"node{node_id}"
        self.data_dir = self.dir / "data"
        self.stdout_path = self.dir / "stdout.log"
        self.stderr_path = self.dir / "stderr.log"
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self._ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> List[str]:
        c = self.cluster
        # The Kafka listener: PLAINTEXT (--listen), or the cluster's one listener of another name.
        listener = (["--listen", self.bootstrap] if c.listener is None
                    else ["--set", f"listeners={c.listener}://{self.bootstrap}",
                          "--set", f"inter.broker.listener.name={c.listener}"])
        args = [
            str(c.binary), "--node-id", str(self.id), "--data-dir", str(self.data_dir),
            *listener, "--controller-listen", f"127.0.0.1:{self.controller_port}",
            "--controller-voters", c.voters,
        ]
        if self.http_port is not None:
            args += ["--http-listen", f"127.0.0.1:{self.http_port}"]
        for name, value in c.settings.items():
            args += ["--set", f"{name}={value}"]
        return args

    def launch(self) -> None:
        """Starts the process; does not wait (see :meth:`wait_ready`)."""
        if self.alive():
            raise BrokerError(f"node {self.id} is already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self._ready.clear()
        for path in (self.stdout_path, self.stderr_path):
            with open(path, "ab") as fh:
                fh.write(f"=== start {self.starts} at {time.strftime('%H:%M:%S')} ===\n".encode())
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                env=broker_env(), preexec_fn=_die_with_parent if os.name == "posix" else None,
            )
        _LIVE_NODES.add(self)
        threading.Thread(target=self._read_stdout, args=(self.proc,), name=f"node{self.id}-stdout",
                         daemon=True).start()

    def _read_stdout(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        with open(self.stdout_path, "ab") as out:
            for raw in proc.stdout:
                out.write(raw)
                out.flush()
                if READY_MARKER.encode() in raw:
                    self._ready.set()

    def wait_ready(self, timeout: Optional[float] = None) -> None:
        timeout = timeout if timeout is not None else self.cluster.start_timeout
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc is None or self.proc.poll() is not None:
                rc = self.proc.returncode if self.proc is not None else None
                raise BrokerError(f"node {self.id} exited (rc={rc}) before '{READY_MARKER}'; "
                                  f"stderr tail:\n{self.stderr_tail()}")
            if time.monotonic() >= deadline:
                raise BrokerError(f"node {self.id} printed no '{READY_MARKER}' within {timeout}s; "
                                  f"stderr tail:\n{self.stderr_tail()}")

    def start(self, timeout: Optional[float] = None) -> "ClusterNode":
        self.launch()
        self.wait_ready(timeout)
        return self

    restart = start

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> Optional[int]:
        """SIGKILL (a crash: the page cache survives, the process does not); waits for it."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        rc = self.proc.wait(30)
        _LIVE_NODES.discard(self)
        return rc

    def stop(self, timeout: float = 20.0) -> Optional[int]:
        """SIGTERM (controlled shutdown), SIGKILL after ``timeout`` s. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        _LIVE_NODES.discard(self)
        return self.proc.returncode

    def pause(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_tail(self, lines: int = 40) -> str:
        return "\n".join(self.stderr_text().splitlines()[-lines:])

    def controller_terms(self) -> List[int]:
        """Terms in which this node logged that it became the active controller (all starts)."""
        return [int(m.group(1)) for m in ACTIVE_CONTROLLER_RE.finditer(self.stderr_text())]


_LIVE_NODES: "set[ClusterNode]" = set()


def _kill_leftover_nodes() -> None:
    for node in list(_LIVE_NODES):
        try:
            node.kill()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(_kill_leftover_nodes)


class Cluster:
    """N ``millrace`` processes on loopback forming one cluster (a controller quorum of N voters).

    ``Cluster(3, {"min.insync.replicas": "2"}).start()`` (``http=True``: each node also serves
    ``--http-listen`` on ``node.http_port``; ``listener="SASL_SSL"``: each node's only Kafka
    listener is the one of that name, at ``node.bootstrap``, instead of PLAINTEXT — the settings
    then name its protocol's TLS and SASL keys); ``cluster.nodes[i]`` (1-based ids) can
    be killed, stopped, paused and restarted; ``cluster.close()`` stops every node (SIGTERM, then
    SIGKILL) and removes the work dir unless MILLRACE_KEEP_WORK is set or ``keep=True``.
    """

    def __init__(
        self,
        nodes: int = 3,
        settings: Optional[Dict[str, str]] = None,
        binary: Optional[Path] = None,
        start_timeout: Optional[float] = None,
        work_dir: Optional[Path] = None,
        http: bool = False,
        listener: Optional[str] = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.settings = dict(settings or {})
        self.listener = listener
        self.binary = Path(binary) if binary else cluster_binary()
        # A cluster is ready once its quorum has elected a controller and every broker registered:
        # allow longer than a single broker's start.
        self.start_timeout = start_timeout or max(30.0, float(os.environ.get("MILLRACE_START_TIMEOUT", "10")))
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="millrace-cluster-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(3 * nodes)
        self.nodes: Dict[int, ClusterNode] = {
            i: ClusterNode(self, i, ports[3 * (i - 1)], ports[3 * (i - 1) + 1],
                           ports[3 * (i - 1) + 2] if http else None)
            for i in range(1, nodes + 1)
        }
        self.voters = ",".join(f"{i}@127.0.0.1:{n.controller_port}" for i, n in self.nodes.items())
        self.keep = False

    @property
    def ids(self) -> List[int]:
        return sorted(self.nodes)

    @property
    def bootstrap(self) -> str:
        """Every node's address (comma-separated), for a client's bootstrap.servers."""
        return ",".join(n.bootstrap for n in self.nodes.values())

    def bootstrap_of(self, ids) -> str:
        return ",".join(self.nodes[i].bootstrap for i in ids)

    def node_by_port(self, port: int) -> ClusterNode:
        for node in self.nodes.values():
            if node.port == port:
                return node
        raise KeyError(port)

    def start(self) -> "Cluster":
        try:
            for node in self.nodes.values():
                node.launch()
            for node in self.nodes.values():
                node.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def alive_ids(self) -> List[int]:
        return [i for i, n in self.nodes.items() if n.alive()]

    def active_controller(self) -> Optional[int]:
        """The live node that most recently logged becoming the active controller (highest term)."""
        best: Optional[tuple] = None
        for i, node in self.nodes.items():
            if not node.alive():
                continue
            for term in node.controller_terms():
                if best is None or term > best[0]:
                    best = (term, i)
        return best[1] if best else None

    def max_controller_term(self) -> int:
        terms = [t for n in self.nodes.values() for t in n.controller_terms()]
        return max(terms) if terms else -1

    def logs_tail(self, lines: int = 30) -> str:
        return "\n".join(f"--- node {i} ({n.stderr_path}) ---\n{n.stderr_tail(lines)}" for i, n in self.nodes.items())

    def close(self, kill: bool = False) -> Dict[int, Optional[int]]:
        """Stops every node: SIGTERM to all at once (SIGKILL after 20 s), or SIGKILL with
        ``kill=True`` (quick: when every node stops, the last ones have nowhere to move their
        leaderships, and their controlled shutdown waits its full 10 s). Returns the exit codes."""
        codes: Dict[int, Optional[int]] = {}
        for i, node in self.nodes.items():
            if node.alive() and node.proc is not None:
                node.proc.send_signal(signal.SIGCONT)
                node.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        for i, node in self.nodes.items():
            codes[i] = node.kill() if kill else node.stop()
        if not (self.keep or os.environ.get("MILLRACE_KEEP_WORK")):
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return codes

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
