"""Client of the ``millrace-chaos`` proxy (crates/chaos): starts the process, adds routes,
cuts and heals them over its line protocol (see crates/chaos/src/control.rs)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from procs import spawn, terminate


class ChaosError(RuntimeError):
    pass


class Chaos:
    def __init__(self, binary: Path, log_path: Path) -> None:
        self.binary = binary
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.sock: Optional[socket.socket] = None
        self._file = None
        self._lock = threading.Lock()
        self.routes: Dict[str, str] = {}  # name -> "127.0.0.1:PORT" it listens on

    def start(self) -> "Chaos":
        err = open(self.log_path, "wb")
        self.proc = spawn(
            [str(self.binary), "--control", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        err.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode("utf-8", "replace").strip()
        prefix = "millrace-chaos control on "
        if not line.startswith(prefix):
            raise ChaosError(f"millrace-chaos did not start: {line!r}")
        host, port = line[len(prefix):].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self._file = self.sock.makefile("rwb")
        return self

    def cmd(self, line: str) -> str:
        with self._lock:
            if self._file is None:
                raise ChaosError("proxy not started")
            self._file.write((line + "\n").encode())
            self._file.flush()
            answer = self._file.readline().decode("utf-8", "replace").strip()
        if not answer.startswith("ok"):
            raise ChaosError(f"{line!r} -> {answer!r}")
        return answer

    def add(self, name: str, upstream: str) -> str:
        """Adds a route listening on a free port; returns its address."""
        answer = self.cmd(f"add {name} 127.0.0.1:0 {upstream}")
        addr = answer.split()[2]
        self.routes[name] = addr
        return addr

    def cut(self, names: Iterable[str], direction: str) -> None:
        names = list(names)
        if names:
            self.cmd(f"cut {','.join(names)} {direction}")

    def heal(self, names: Iterable[str]) -> None:
        names = list(names)
        if names:
            self.cmd(f"heal {','.join(names)} both")

    def heal_all(self) -> None:
        self.cmd("heal-all")

    def status(self) -> List[dict]:
        return json.loads(self.cmd("status")[3:])["routes"]

    def stop(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        if self.proc is not None:
            terminate(self.proc, grace=2)
