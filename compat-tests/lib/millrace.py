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
