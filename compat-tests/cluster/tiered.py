"""Tiered storage's checks (Millrace only; Kafka KIP-405 semantics, decision 0073): what every
live broker's metadata image says the object store holds (``GET /remote-log`` on its HTTP
listener), checked against itself, against the other brokers and against the bucket.

Anomalies (``check_remote_logs``, each with the partition and the segments that show it):

- ``remote-log-unsorted``: a partition's segments not in ascending base offset order.
- ``remote-segment-overlap``: two segments owning one offset (``base_offset`` <= the previous
  segment's ``end_offset``): an offset owned twice.
- ``remote-log-gap``: a segment starting after the previous one's ``end_offset`` + 1: offsets in
  no segment, although the remote log claims them.
- ``remote-segment-malformed``: ``end_offset`` < ``base_offset``, or a partition whose
  ``log_start_offset`` lies beyond its first segment's end.
- ``brokers-disagree``: two live brokers' images hold different remote logs for one partition.
- ``missing-object``: a committed segment whose ``.log`` object is not in the bucket.
- ``object-size-mismatch``: a committed segment's ``.log`` object whose size is not the
  segment's ``size_bytes``.

Objects live at ``<prefix>/<topic>-<topic id>/<partition>/<base offset:020>-<segment id>.<kind>``
(``crates/tiered/src/layout.rs``); a ``.log`` object no committed segment names is an orphan
(an upload whose commit failed, deleted after ``millrace.remote.storage.orphan.grace.ms``):
counted, not an anomaly.

Also here: the raw ListOffsets v9 the harness uses for the offsets only tiered storage has
(-4 earliest local, -5 latest tiered; confluent-kafka exposes neither), and the metrics read.
Only the standard library is used.
"""

from __future__ import annotations

import json
import struct
import urllib.request
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Tuple

from secure import broker_socket, recv_exact

ANOMALIES = (
    "remote-log-unsorted",
    "remote-segment-overlap",
    "remote-log-gap",
    "remote-segment-malformed",
    "brokers-disagree",
    "missing-object",
    "object-size-mismatch",
)
HTTP_TIMEOUT_S = 5.0
EXAMPLES_PER_ANOMALY_MAX = 4  # segments shown per anomaly
PRINTED_PER_KIND_MAX = 10

Partition = Tuple[str, int]


class TieredResult:
    def __init__(self) -> None:
        self.anomalies: Dict[str, List[Dict[str, Any]]] = {k: [] for k in ANOMALIES}
        self.stats: Dict[str, Any] = {}

    def add(self, kind: str, **detail: Any) -> None:
        self.anomalies[kind].append(detail)

    def counts(self) -> Dict[str, int]:
        return {k: len(v) for k, v in self.anomalies.items()}

    def valid(self) -> bool:
        return not any(self.anomalies.values())


def _by_partition(answer: Iterable[dict]) -> Dict[Partition, dict]:
    return {(e["topic"], int(e["partition"])): e for e in answer}


def _brief(seg: dict) -> dict:
    return {k: seg.get(k) for k in ("segment_id", "base_offset", "end_offset", "leader_epoch", "size_bytes")}


def check_partition(res: TieredResult, node: int, tp: Partition, log: dict) -> None:
    """One broker's remote log of one partition: sorted, contiguous, no offset owned twice."""
    segs = log.get("segments") or []
    where = dict(node=node, topic=tp[0], partition=tp[1])
    for s in segs:
        if int(s["end_offset"]) < int(s["base_offset"]):
            res.add("remote-segment-malformed", why="end_offset < base_offset", segments=[_brief(s)], **where)
    if segs and int(log.get("log_start_offset", 0)) > int(segs[0]["end_offset"]) + 1:
        res.add("remote-segment-malformed", why="log_start_offset beyond the first segment",
                log_start_offset=log.get("log_start_offset"), segments=[_brief(segs[0])], **where)
    bases = [int(s["base_offset"]) for s in segs]
    if bases != sorted(bases):
        res.add("remote-log-unsorted", bases=bases[:50], **where)
    ordered = sorted(segs, key=lambda s: (int(s["base_offset"]), int(s["end_offset"])))
    for prev, cur in zip(ordered, ordered[1:]):
        expected = int(prev["end_offset"]) + 1
        if int(cur["base_offset"]) < expected:
            res.add("remote-segment-overlap", offsets=[int(cur["base_offset"]), int(prev["end_offset"])],
                    segments=[_brief(prev), _brief(cur)], **where)
        elif int(cur["base_offset"]) > expected:
            res.add("remote-log-gap", missing=[expected, int(cur["base_offset"]) - 1],
                    segments=[_brief(prev), _brief(cur)], **where)


def object_segments(objects: Dict[str, int], prefix: str) -> Dict[str, Tuple[str, int, int]]:
    """``.log`` objects by segment id: (key, partition folder "topic-id/partition", size)."""
    out: Dict[str, Tuple[str, int, int]] = {}
    root = prefix.strip("/")
    for key, size in objects.items():
        rel = key[len(root) + 1:] if root and key.startswith(root + "/") else key
        parts = rel.split("/")
        if len(parts) != 3 or not parts[2].endswith(".log"):
            continue
        stem = parts[2][: -len(".log")]
        base, sep, segment_id = stem.partition("-")
        if not sep or len(base) != 20:
            continue
        out[segment_id] = (key, f"{parts[0]}/{parts[1]}", size)
    return out


def check_remote_logs(answers: Dict[int, List[dict]], objects: Optional[Dict[str, int]], prefix: str,
                      topics: Optional[Iterable[str]] = None) -> TieredResult:
    """``answers``: node id -> its ``/remote-log`` JSON. ``objects``: the bucket under ``prefix``
    (key -> size), or None when it could not be listed (then the object checks are skipped).
    ``topics``: the topics to judge (default: every topic in any answer)."""
    res = TieredResult()
    wanted = set(topics) if topics is not None else None
    per_node = {n: {tp: e for tp, e in _by_partition(a).items() if wanted is None or tp[0] in wanted}
                for n, a in answers.items()}
    for node, logs in sorted(per_node.items()):
        for tp, log in sorted(logs.items()):
            check_partition(res, node, tp, log)
    # Agreement: every live broker's image holds the same remote log for every partition.
    partitions = sorted({tp for logs in per_node.values() for tp in logs})
    for tp in partitions:
        views = {n: logs.get(tp) for n, logs in per_node.items()}
        distinct = {json.dumps(v, sort_keys=True) for v in views.values()}
        if len(distinct) > 1:
            summary = {n: (None if v is None else [v.get("log_start_offset"),
                                                   [[s["base_offset"], s["end_offset"]] for s in v.get("segments") or []][-3:]])
                       for n, v in sorted(views.items())}
            res.add("brokers-disagree", topic=tp[0], partition=tp[1], views=summary)
    # The reference image: the lowest node id's (after agreement was checked, any will do).
    reference: Dict[Partition, dict] = {}
    for node in sorted(per_node, reverse=True):
        reference.update(per_node[node])
    segments = [(tp, s) for tp, log in sorted(reference.items()) for s in log.get("segments") or []]
    by_tp: Dict[Partition, int] = defaultdict(int)
    for tp, _ in segments:
        by_tp[tp] += 1
    res.stats = {
        "brokers": len(answers),
        "partitions": len(reference),
        "segments": len(segments),
        "segments_per_partition": {f"{t}-{p}": n for (t, p), n in sorted(by_tp.items())},
        "remote_bytes": sum(int(s["size_bytes"]) for _, s in segments),
        "remote_end_offsets": {f"{t}-{p}": log["segments"][-1]["end_offset"]
                               for (t, p), log in sorted(reference.items()) if log.get("segments")},
    }
    if objects is None:
        res.stats["objects_listed"] = False
        return res
    logs = object_segments(objects, prefix)
    committed = set()
    for (topic, p), s in segments:
        sid = str(s["segment_id"])
        committed.add(sid)
        found = logs.get(sid)
        where = dict(topic=topic, partition=p, segments=[_brief(s)])
        if found is None or not found[1].startswith(f"{topic}-") or not found[1].endswith(f"/{p}"):
            res.add("missing-object", expected=f"{topic}-<id>/{p}/{int(s['base_offset']):020}-{sid}.log", **where)
        elif found[2] != int(s["size_bytes"]):
            res.add("object-size-mismatch", key=found[0], object_bytes=found[2], **where)
    res.stats.update(objects_listed=True, objects=len(objects), log_objects=len(logs),
                     orphan_log_objects=len(set(logs) - committed))
    return res


def report(res: TieredResult) -> None:
    s = res.stats
    print(f"tiered storage: {s.get('segments', 0)} remote segments ({s.get('remote_bytes', 0)} bytes) in "
          f"{s.get('partitions', 0)} partitions, as {s.get('brokers', 0)} brokers' images hold them; "
          + (f"bucket: {s['objects']} objects, {s['log_objects']} .log, {s['orphan_log_objects']} orphan .log"
             if s.get("objects_listed") else "bucket not listed"))
    if s.get("segments_per_partition"):
        print("  segments per partition: " + ", ".join(f"{k} {v}" for k, v in s["segments_per_partition"].items()))
    print("tiered anomalies: " + ", ".join(f"{k} {v}" for k, v in res.counts().items()))
    for kind, found in res.anomalies.items():
        for a in found[:PRINTED_PER_KIND_MAX]:
            print(f"  {kind}: {json.dumps(a)[:600]}")


# --- broker HTTP -------------------------------------------------------------------------------

def http_get(addr: str, path: str) -> str:
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=HTTP_TIMEOUT_S) as resp:
        return resp.read().decode()


def remote_log(addr: str) -> List[dict]:
    return json.loads(http_get(addr, "/remote-log"))


def metric(text: str, name: str) -> Optional[float]:
    """The value of an unlabelled sample ``name`` (or ``name_total``) in Prometheus text."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) >= 2 and parts[0] in (name, f"{name}_total"):
            try:
                return float(parts[1])
            except ValueError:
                return None
    return None


# --- ListOffsets v9 over a raw socket (flexible encoding) -------------------------------------

LIST_OFFSETS = 2
LIST_OFFSETS_VERSION = 9
LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -4, -5


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> Tuple[int, int]:
    shift = n = 0
    for _ in range(5):
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7
    raise ValueError("varint too long")


def _compact_string(s: str) -> bytes:
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


def list_offsets(addr: str, topic: str, partitions: List[int], timestamp: int,
                 timeout: float = 5.0) -> Dict[int, Tuple[int, int]]:
    """ListOffsets v9 to the broker at ``addr``: partition -> (error code, offset)."""
    correlation = 7
    header = struct.pack(">hhi", LIST_OFFSETS, LIST_OFFSETS_VERSION, correlation)
    client = b"harness-list-offsets"
    header += struct.pack(">h", len(client)) + client + _uvarint(0)
    body = struct.pack(">ib", -1, 0) + _uvarint(2) + _compact_string(topic) + _uvarint(len(partitions) + 1)
    for p in partitions:
        body += struct.pack(">iiq", p, -1, timestamp) + _uvarint(0)
    body += _uvarint(0) + _uvarint(0)
    request = header + body
    with broker_socket(addr, timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        resp = recv_exact(sock, size)
    (got,) = struct.unpack_from(">i", resp, 0)
    if got != correlation:
        raise ValueError(f"correlation id {got}, expected {correlation}")
    pos = _skip_tags(resp, 4)
    pos += 4  # throttle_time_ms
    n_topics, pos = _read_uvarint(resp, pos)
    out: Dict[int, Tuple[int, int]] = {}
    for _ in range(max(0, n_topics - 1)):
        name_len, pos = _read_uvarint(resp, pos)
        pos += max(0, name_len - 1)
        n_parts, pos = _read_uvarint(resp, pos)
        for _ in range(max(0, n_parts - 1)):
            p, error, _ts, offset, _epoch = struct.unpack_from(">ihqqi", resp, pos)
            pos = _skip_tags(resp, pos + 26)
            out[p] = (error, offset)
        pos = _skip_tags(resp, pos)
    return out

