"""Ask ONE broker directly, over Kafka's wire protocol: Metadata v7 and DescribeConfigs v1.

A client library sends Metadata and DescribeConfigs to whichever broker it likes once it knows
the cluster, so "is this change visible on broker 3?" needs a request to broker 3 itself. These
two non-flexible versions are small enough to encode by hand; both Millrace and Apache Kafka 4.x
serve them. Standard library only; every call has a socket timeout.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Optional

METADATA = 3
DESCRIBE_CONFIGS = 32
RESOURCE_TOPIC = 2
# A response larger than this is not one of ours (a test cluster has a few topics).
RESPONSE_BYTES_MAX = 16 * 1024 * 1024


class WireError(RuntimeError):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise WireError(f"response truncated at byte {self.pos} (want {n} more of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def string(self) -> Optional[str]:
        n = self.i16()
        return None if n < 0 else self.take(n).decode("utf-8")

    def array(self, item) -> List:
        n = self.i32()
        return [] if n < 0 else [item() for _ in range(n)]


def _string(s: Optional[str]) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode("utf-8")
    return struct.pack(">h", len(b)) + b


def _request(addr: str, api_key: int, version: int, body: bytes, timeout: float) -> _Reader:
    host, port = addr.rsplit(":", 1)
    header = struct.pack(">hhi", api_key, version, 1) + _string("millrace-scenarios")
    frame = header + body
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv(s, 4))[0]
        if not 4 <= size <= RESPONSE_BYTES_MAX:
            raise WireError(f"response size {size} out of range")
        r = _Reader(_recv(s, size))
    if r.i32() != 1:
        raise WireError("correlation id mismatch")
    return r


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise WireError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


@dataclass
class Partition:
    error: int
    id: int
    leader: int
    leader_epoch: int
    replicas: List[int]
    isr: List[int]
    offline: List[int]


@dataclass
class Topic:
    error: int
    name: str
    partitions: Dict[int, Partition] = field(default_factory=dict)


@dataclass
class Metadata:
    brokers: Dict[int, str]  # node id -> host:port
    cluster_id: Optional[str]
    controller: int
    topics: Dict[str, Topic]


def metadata(addr: str, topics: Optional[List[str]] = None, timeout: float = 1.0) -> Metadata:
    """Metadata v7 from the broker at ``addr`` (all topics when ``topics`` is None)."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
    body += struct.pack(">b", 0)  # allow_auto_topic_creation = false
    r = _request(addr, METADATA, 7, body, timeout)
    r.i32()  # throttle_time_ms

    def broker():
        node, host, port, _rack = r.i32(), r.string(), r.i32(), r.string()
        return node, f"{host}:{port}"

    brokers = dict(r.array(broker))
    cluster_id = r.string()
    controller = r.i32()

    def partition():
        return Partition(error=r.i16(), id=r.i32(), leader=r.i32(), leader_epoch=r.i32(),
                         replicas=r.array(r.i32), isr=r.array(r.i32), offline=r.array(r.i32))

    def topic():
        error, name, _internal = r.i16(), r.string(), r.i8()
        parts = r.array(partition)
        return Topic(error, name or "", {p.id: p for p in parts})

    found = {t.name: t for t in r.array(topic)}
    return Metadata(brokers, cluster_id, controller, found)


def topic_configs(addr: str, topic: str, timeout: float = 1.0) -> Dict[str, Optional[str]]:
    """DescribeConfigs v1 of one topic at the broker ``addr``: name -> value (every config)."""
    body = struct.pack(">i", 1) + struct.pack(">b", RESOURCE_TOPIC) + _string(topic) + struct.pack(">i", -1)
    body += struct.pack(">b", 0)  # include_synonyms
    r = _request(addr, DESCRIBE_CONFIGS, 1, body, timeout)
    r.i32()  # throttle_time_ms

    def synonym():
        return r.string(), r.string(), r.i8()

    def config():
        name, value, _ro, _source, _sensitive = r.string(), r.string(), r.i8(), r.i8(), r.i8()
        r.array(synonym)
        return name, value

    def result():
        error, message, _type, _name = r.i16(), r.string(), r.i8(), r.string()
        configs = dict(r.array(config))
        if error:
            raise WireError(f"DescribeConfigs({topic}) at {addr}: error {error} {message}")
        return configs

    [configs] = r.array(result)
    return configs


FIND_COORDINATOR = 10


def find_coordinator(addr: str, group: str, timeout: float = 1.0):
    """FindCoordinator v1 for a group at the broker ``addr``: (error code, node id)."""
    body = _string(group) + struct.pack(">b", 0)  # key_type 0 = group
    r = _request(addr, FIND_COORDINATOR, 1, body, timeout)
    r.i32()  # throttle_time_ms
    error, _message, node = r.i16(), r.string(), r.i32()
    return error, node
