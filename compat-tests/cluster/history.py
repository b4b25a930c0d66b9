"""The history of a cluster test: every operation as JSON lines, in the order they happened.

Record fields (all records): ``i`` (index, strictly increasing: the order of events), ``t``
(seconds since the test started, from CLOCK_MONOTONIC, which all processes on the machine share), ``process`` (who: ``p1``, ``c2``, ``r1``, ``admin``, ``drain``,
``nemesis``), ``type`` (``invoke`` | ``ok`` | ``fail`` | ``info``), ``f`` (the operation).

Operations (``checker.py`` reads them):

- ``send``: ``partition``, ``value``; the ``ok`` completion adds ``offset``. ``info`` = unknown
  outcome (timeout, delivery error after the batch may have reached a broker); ``fail`` = the
  record never left the client. A producer has many sends in flight; they pair by ``value``.
- ``poll``: the ``ok`` completion has ``reads``: ``{"partition": [[offset, value], ...]}``.
- ``assign`` / ``revoke`` (type ``ok``): a consumer's assignment changed (``partitions``).
- ``commit``: ``group``, ``offsets`` (``{"partition": next offset}``); ``fail`` = rejected
  (generation, rebalance), ``info`` = unknown.
- ``committed``: a read-back of a group's committed ``offsets`` (admin client).
- ``drain-end``: the final drain's ``end_offsets`` and whether it reached them (``complete``).
- nemesis records: ``f`` is the fault kind; ``invoke`` when it starts, ``ok`` when healed.
- the transactional workload's ``ctp-send``, ``txn``, ``txn-init``, ``ctp-read``,
  ``ctp-caught-up``, ``ctp-drain-end`` and ``ctp-restart`` records: see ``ctp.py``.

A process has at most one ``poll``/``commit``/``committed`` in flight, so those pair by process.

Each client runs in its own OS process (a librdkafka abort ends only that client) and writes its
own file; ``merge`` orders them into one history by time. Timestamps are taken under the
writer's lock after an event completes and before an operation is invoked, so "A completed
before B was invoked" in the merged history implies it in reality.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from typing import Any, Dict, Iterator, List, Optional


class History:
    def __init__(self, path: str, t0_ns: Optional[int] = None) -> None:
        self.path = path
        # Line-buffered: a client that aborts loses at most the line it was writing.
        self._fh = open(path, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()
        self._next = 0
        self.t0_ns = time.monotonic_ns() if t0_ns is None else t0_ns
        self.counts: Dict[str, int] = {}

    def now(self) -> float:
        return round((time.monotonic_ns() - self.t0_ns) / 1e9, 6)

    def record(self, process: str, type_: str, f: str, t: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
        with self._lock:
            op: Dict[str, Any] = {"i": self._next, "t": self.now() if t is None else t, "process": process,
                                  "type": type_, "f": f}
            op.update(fields)
            self._next += 1
            self._fh.write(json.dumps(op, separators=(",", ":")) + "\n")
            key = f"{f}:{type_}"
            self.counts[key] = self.counts.get(key, 0) + 1
            return op

    def count(self, f: str, type_: str) -> int:
        with self._lock:
            return self.counts.get(f"{f}:{type_}", 0)

    def flush(self) -> None:
        with self._lock:
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def _read(path: str, n: int) -> Iterator[tuple]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                return  # torn last line: the writer was killed mid-write
            op = json.loads(line)
            yield (op["t"], n, op["i"], op)


def merge(paths: List[str], out: str) -> int:
    """Merges per-process histories by time into ``out`` with one global index; returns the count."""
    count = 0
    with open(out, "w", encoding="utf-8") as fh:
        for _, _, _, op in heapq.merge(*(_read(p, n) for n, p in enumerate(paths))):
            op["i"] = count
            fh.write(json.dumps(op, separators=(",", ":")) + "\n")
            count += 1
    return count
