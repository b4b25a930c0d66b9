"""Shared test data for the Python client suites.

Every record has an explicit timestamp (CreateTime) a little in the past, so
that broker-side timestamp policies (Kafka's log.message.timestamp.*.max.ms,
time-based retention) cannot interfere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

Header = Tuple[str, Optional[bytes]]


@dataclass
class Rec:
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Header] = field(default_factory=list)
    timestamp: int = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def roundtrip_records(base_ts: Optional[int] = None, both_null: bool = True,
                      null_header_values: bool = True) -> List[Rec]:
    """Records that exercise every field: keys, null/empty keys and values,
    binary and UTF-8 data, headers (duplicate keys, order, null and empty
    values) and explicit, non-monotonic timestamps.

    ``both_null=False`` drops the record whose key and value are both null
    (kafka-python refuses to send it: "Need at least one: key or value");
    ``null_header_values=False`` drops null header values (kafka-python:
    "All headers items must be (str, bytes) tuples")."""
    base = (now_ms() - 10 * 60 * 1000) if base_ts is None else base_ts
    recs = [
        Rec(b"key-0", b"value-0", [("h1", b"a")]),
        Rec(None, b"value-without-key", []),
        Rec(b"key-with-null-value", None, [("tombstone", b"yes")]),
        Rec(None, None, []),
        Rec(b"", b"", [("empty", b"")]),
        Rec(b"\x00\xff\x10binary\x00", bytes(range(256)), [("bin", b"\x00\x01\xfe\xff")]),
        Rec(b"dup-headers", b"x", [("h", b"1"), ("h", b"2"), ("other", b"o"), ("h", b"3")]),
        Rec(b"null-header-value", b"y", [("nh", None), ("after", b"z")]),
        Rec("clé-ünïcode".encode(), "värde ✓ 値".encode(), [("ключ", "значение".encode())]),
        Rec(b"large", bytes((i * 7) % 251 for i in range(200_000)), [("size", b"200000")]),
    ]
    # Distinct, deliberately non-monotonic timestamps (one goes back in time).
    offsets_ms = [0, 1, 2, 3, 1000, 1001, 5000, -60_000, 7000, 8000]
    for rec, delta in zip(recs, offsets_ms):
        rec.timestamp = base + delta
    if not both_null:
        recs = [r for r in recs if r.key is not None or r.value is not None]
    if not null_header_values:
        for r in recs:
            r.headers = [(k, v) for k, v in r.headers if v is not None]
    return recs
