"""The replica comparison finds what it names: a differing batch, a short replica, a missing one."""

import struct
from pathlib import Path

from replicas import compare, read_batches


def batch(base: int, records: int, payload: bytes = b"") -> bytes:
    body = struct.pack(">ibIhi", 0, 2, 0, 0, records - 1) + b"\0" * 38 + payload
    return struct.pack(">qi", base, len(body)) + body


def write(root: Path, node: int, topic: str, p: int, *batches: bytes, tail: bytes = b"") -> None:
    d = root / f"n{node}" / f"{topic}-{p}"
    d.mkdir(parents=True)
    (d / f"{0:020}.log").write_bytes(b"".join(batches) + tail)


def dirs(root: Path, n: int = 3):
    return {i: root / f"n{i}" for i in range(1, n + 1)}


def test_reads_batches_and_stops_at_a_torn_tail(tmp_path):
    write(tmp_path, 1, "t", 0, batch(0, 2), batch(2, 3), tail=batch(5, 1)[:20])
    got = read_batches(tmp_path / "n1" / "t-0")
    assert [(b, l) for b, l, _ in got] == [(0, 1), (2, 4)]


def test_identical_replicas_pass(tmp_path):
    for n in (1, 2, 3):
        write(tmp_path, n, "t", 0, batch(0, 2, b"a"), batch(2, 1, b"b"))
    res = compare(dirs(tmp_path), "t", {0: 3}, 3)
    assert res.problems == []
    assert res.batches == 2 and res.replicas == 3


def test_a_suffix_above_the_hw_may_differ(tmp_path):
    write(tmp_path, 1, "t", 0, batch(0, 2, b"a"), batch(2, 1, b"x"))
    write(tmp_path, 2, "t", 0, batch(0, 2, b"a"), batch(2, 1, b"y"))
    assert compare(dirs(tmp_path, 2), "t", {0: 2}, 2).problems == []


def test_a_differing_batch_below_the_hw_is_reported(tmp_path):
    write(tmp_path, 1, "t", 0, batch(0, 2, b"a"), batch(2, 1, b"x"))
    write(tmp_path, 2, "t", 0, batch(0, 2, b"a"), batch(2, 1, b"y"))
    problems = compare(dirs(tmp_path, 2), "t", {0: 3}, 2).problems
    assert len(problems) == 1 and "differ at offset 2" in problems[0]


def test_a_short_or_missing_replica_is_reported(tmp_path):
    write(tmp_path, 1, "t", 0, batch(0, 2), batch(2, 1))
    write(tmp_path, 2, "t", 0, batch(0, 2))
    problems = compare(dirs(tmp_path), "t", {0: 3}, 3).problems
    assert any("node 2 ends at 2, below the HW 3" in p for p in problems)
    assert any("2 replicas on disk, expected 3" in p for p in problems)
