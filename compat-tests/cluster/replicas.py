"""Replica comparison: below the high watermark every replica of a partition holds the same
record batches, byte for byte (issue 13: "replicas' logs are byte-identical below the HW").

Read after the cluster is stopped cleanly, straight from each node's data directory: Millrace and
Apache Kafka both keep a partition as ``<topic>-<partition>/<base offset:020>.log`` files of v2
record batches back to back (docs/log-format.md §2), so one reader serves both systems. A batch
counts when its base offset is below the high watermark (the HW always sits on a batch boundary:
it is some replica's log end). Nothing here trusts a length read from the file without checking
that the bytes are there; a torn tail ends the scan of that file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# baseOffset (8) + batchLength (4): the bytes before a batch's length-counted part.
LOG_OVERHEAD = 12
# Offset of lastOffsetDelta inside a batch (docs/log-format.md §2).
LAST_OFFSET_DELTA_AT = 23
# The smallest batchLength a v2 batch can have (header without records).
MIN_BATCH_LENGTH = 49

Batch = Tuple[int, int, bytes]  # (base offset, last offset, every byte of the batch)


def read_batches(partition_dir: Path) -> List[Batch]:
    """Every complete batch of the partition's segments, in offset order."""
    batches: List[Batch] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + LOG_OVERHEAD <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            end = pos + LOG_OVERHEAD + length
            if length < MIN_BATCH_LENGTH or end > len(data):
                break  # preallocated zeros or a torn tail
            (delta,) = struct.unpack_from(">i", data, pos + LAST_OFFSET_DELTA_AT)
            batches.append((base, base + delta, data[pos:end]))
            pos = end
    return batches


@dataclass
class Comparison:
    partitions: int = 0
    replicas: int = 0
    batches: int = 0
    bytes: int = 0
    problems: List[str] = field(default_factory=list)


def compare(data_dirs: Dict[int, Path], topic: str, high_watermarks: Dict[int, int],
            replication_factor: Optional[int] = None) -> Comparison:
    """Compares, per partition, the batches below its HW on every node that hosts it.

    A problem is a replica missing (fewer hosts than ``replication_factor``), a replica holding
    less than the HW, or a batch that differs from another replica's at the same offset.
    """
    out = Comparison()
    for p, hw in sorted(high_watermarks.items()):
        out.partitions += 1
        held: Dict[int, List[Batch]] = {}
        for node, d in sorted(data_dirs.items()):
            pdir = d / f"{topic}-{p}"
            if pdir.is_dir():
                held[node] = [b for b in read_batches(pdir) if b[0] < hw]
        out.replicas += len(held)
        if replication_factor is not None and len(held) < replication_factor:
            out.problems.append(f"{topic}-{p}: {len(held)} replicas on disk, expected {replication_factor}")
        if not held:
            continue
        for node, batches in held.items():
            end = batches[-1][1] + 1 if batches else 0
            if end < hw:
                out.problems.append(f"{topic}-{p}: replica on node {node} ends at {end}, below the HW {hw}")
        ref_node = max(held, key=lambda n: len(held[n]))
        ref = held[ref_node]
        out.batches += len(ref)
        out.bytes += sum(len(b[2]) for b in ref)
        for node, batches in held.items():
            if node == ref_node:
                continue
            for mine, theirs in zip(batches, ref):
                if mine != theirs:
                    out.problems.append(
                        f"{topic}-{p}: node {node} and node {ref_node} differ at offset "
                        f"{min(mine[0], theirs[0])} (batches {mine[0]}..{mine[1]}, {len(mine[2])} bytes "
                        f"vs {theirs[0]}..{theirs[1]}, {len(theirs[2])} bytes)")
                    break
    return out
