"""Process helpers shared by the harness: free ports, children that die with us, stopping only
the processes we started (by their Popen handle, never by name)."""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the harness dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:  # noqa: BLE001 - best effort
        pass


# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. Nodes are
# restarted from nemesis threads that end before the run does, so every child is forked by one
# spawner thread that lives as long as the harness.
_spawn_requests: "queue.Queue[tuple]" = queue.Queue()


def _spawner() -> None:
    while True:
        args, kwargs, reply = _spawn_requests.get()
        try:
            reply.put((True, subprocess.Popen(*args, preexec_fn=die_with_parent, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            reply.put((False, exc))


threading.Thread(target=_spawner, name="spawner", daemon=True).start()


def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen whose child is SIGKILLed when the harness process dies."""
    reply: "queue.Queue[tuple]" = queue.Queue(maxsize=1)
    _spawn_requests.put((args, kwargs, reply))
    ok, value = reply.get()
    if not ok:
        raise value
    return value


def terminate(proc: subprocess.Popen, grace: float = 10.0) -> Optional[int]:
    """SIGCONT (it may be stopped), SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
    return proc.poll()


def wait_until(cond, timeout: float, interval: float = 0.2, what: str = "condition"):
    """Polls ``cond`` until truthy (exceptions count as not yet); raises TimeoutError."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = cond()
            if value:
                return value
            last = value
        except Exception as exc:  # noqa: BLE001
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
