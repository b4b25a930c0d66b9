#!/usr/bin/env python3
"""Derives the batch and decompress seeds from captured Produce requests: every v2 record batch
found in a Produce frame becomes a `batch` seed, and every compressed batch's records section,
prefixed with its codec id, a `decompress` seed (the input layout of fuzz_targets/decompress.rs).

Usage: extract_batches.py REQUEST_SEED_DIR BATCH_DIR DECOMPRESS_DIR
"""
import hashlib
import os
import struct
import sys

HEADER = 61  # v2 batch header bytes; records follow


def batches(frame):
    """Yields (start, end) of each plausible v2 batch: magic 2 and a length that fits the frame."""
    p = 0
    while p + HEADER <= len(frame):
        if frame[p + 16] == 2:
            (length,) = struct.unpack(">i", frame[p + 8 : p + 12])
            end = p + 12 + length
            if HEADER - 12 <= length and end <= len(frame):
                yield p, end
                p = end
                continue
        p += 1


def main():
    src, batch_dir, decompress_dir = sys.argv[1:4]
    os.makedirs(batch_dir, exist_ok=True)
    os.makedirs(decompress_dir, exist_ok=True)
    counts = [0, 0]
    for name in sorted(os.listdir(src)):
        if not name.startswith("0-"):
            continue
        frame = open(os.path.join(src, name), "rb").read()
        for start, end in batches(frame):
            batch = frame[start:end]
            digest = hashlib.sha1(batch).hexdigest()[:16]
            with open(os.path.join(batch_dir, digest), "wb") as f:
                f.write(batch)
            counts[0] += 1
            (attributes,) = struct.unpack(">h", batch[21:23])
            codec = attributes & 7
            if codec:
                with open(os.path.join(decompress_dir, "%d-%s" % (codec, digest)), "wb") as f:
                    f.write(bytes([codec]) + batch[HEADER:])
                counts[1] += 1
    print("batches: %d, compressed payloads: %d" % tuple(counts))


if __name__ == "__main__":
    main()
