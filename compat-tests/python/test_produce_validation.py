"""Produce-time validation of record batches and timestamps, byte for byte.

Hand-made Produce v8 requests (raw TCP, so every byte of the batch is chosen
here) carry batches no consumer could read: a codec id whose payload is not
that codec, unknown codec ids, a record count the records do not match, a
single record declaring 2^31-1 records, a control batch from a client, a
malformed varint. Each must be refused with Kafka's error code, append
nothing, and leave the next valid record at the offset it would have had; the
partition stays readable from its first offset by a real consumer. Timestamp
bounds (message.timestamp.before.max.ms / after.max.ms) are refused with
INVALID_TIMESTAMP naming the record's index (KIP-467).

Runs against Apache Kafka too (compat-tests/reference/kafka-shim.sh). Kafka
4.1 refuses every case and appends nothing, but answers UNKNOWN_SERVER_ERROR
(-1) where its decompressor or record reader throws (garbage or truncated
gzip, codec ids 5 and 7, a malformed varint); Millrace answers the codes
issue 11 asks for there (CORRUPT_MESSAGE for a payload that does not
decompress, INVALID_RECORD for malformed records) and Kafka's codes
everywhere else.
"""

from __future__ import annotations

import gzip
import os
import socket
import struct
import time
from typing import List, Optional, Tuple

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.util import calc_crc32c, encode_varint

from compat_data import now_ms
from millrace import Broker, unique_topic, wait_until

UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
NONE = 0

OP_TIMEOUT = 15.0  # seconds, for every single client operation

# Against the reference broker, the cases Kafka answers with UNKNOWN_SERVER_ERROR.
ON_KAFKA = "kafka-shim" in os.environ.get("MILLRACE_BIN", "")

# Record batch attribute bits.
ATTR_CONTROL = 0x20
ATTR_LOG_APPEND_TIME = 0x08


# ----------------------------------------------------------------- encoding
def varint(v: int) -> bytes:
    out = bytearray()
    encode_varint(v, out.append)
    return bytes(out)


def record(index: int, key: Optional[bytes], value: Optional[bytes], ts_delta: int = 0) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += varint(ts_delta) + varint(index)
    for field in (key, value):
        if field is None:
            body += varint(-1)
        else:
            body += varint(len(field)) + field
    body += varint(0)  # headers
    return varint(len(body)) + bytes(body)


def batch(records: bytes, count: int, base_ts: int, attributes: int = 0,
          last_offset_delta: Optional[int] = None, max_ts: Optional[int] = None) -> bytes:
    """A v2 batch around `records` (already encoded, maybe compressed) with a correct CRC."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(
        ">hiqqqhii", attributes, lod, base_ts, base_ts if max_ts is None else max_ts,
        -1, -1, -1, count,
    ) + records
    crc = calc_crc32c(memoryview(after_crc))
    body = struct.pack(">ibI", -1, 2, crc) + after_crc  # partitionLeaderEpoch, magic, crc
    return struct.pack(">qi", 0, len(body)) + body


def plain_batch(n: int, ts: int, key_prefix: bytes = b"k") -> bytes:
    recs = b"".join(record(i, key_prefix + str(i).encode(), b"value-%d" % i) for i in range(n))
    return batch(recs, n, ts)


def string(s: Optional[str]) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class Conn:
    """One raw Kafka connection speaking Produce v8."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=OP_TIMEOUT)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def produce(self, topic: str, records: bytes) -> Tuple[int, int, List[Tuple[int, Optional[str]]], Optional[str]]:
        """→ (error_code, base_offset, record_errors, error_message) of partition 0."""
        self.correlation += 1
        body = (
            struct.pack(">hhi", 0, 8, self.correlation) + string("produce-validation")
            + string(None) + struct.pack(">hi", -1, 10000)  # transactional id, acks, timeout
            + struct.pack(">i", 1) + string(topic)
            + struct.pack(">i", 1) + struct.pack(">i", 0)
            + struct.pack(">i", len(records)) + records
        )
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", self._read_exact(4))
        resp = memoryview(self._read_exact(size))
        pos = 0

        def take(fmt: str):
            nonlocal pos
            vals = struct.unpack_from(fmt, resp, pos)
            pos += struct.calcsize(fmt)
            return vals

        def take_string() -> Optional[str]:
            nonlocal pos
            (n,) = take(">h")
            if n < 0:
                return None
            s = bytes(resp[pos:pos + n]).decode()
            pos += n
            return s

        (corr,) = take(">i")
        assert corr == self.correlation
        (topics,) = take(">i")
        assert topics == 1
        take_string()
        (parts,) = take(">i")
        assert parts == 1
        _index, code, base_offset, _append_time, _log_start = take(">ihqqq")
        (n_errors,) = take(">i")
        errors = []
        for _ in range(max(n_errors, 0)):
            (batch_index,) = take(">i")
            errors.append((batch_index, take_string()))
        message = take_string()
        return code, base_offset, errors, message


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def broker():
    b = Broker().start()
    yield b
    b.stop()


@pytest.fixture
def conn(broker):
    c = Conn(broker.bootstrap)
    yield c
    c.close()


def create_topic(broker, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, 1, config=configs)], operation_timeout=OP_TIMEOUT)
    futures[name].result(OP_TIMEOUT)
    wait_until(lambda: high_watermark(broker, name) == 0, OP_TIMEOUT, what=f"{name} ready")


def high_watermark(broker, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "produce-validation-unused"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=OP_TIMEOUT)[1]
    finally:
        c.close()


def read_all(broker, topic: str, count: int) -> List[bytes]:
    c = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "produce-validation-unused",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
    })
    out: List[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + OP_TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
    finally:
        c.close()
    return out


# ------------------------------------------------------- unreadable batches
def with_codec(records: bytes, count: int, codec: int, **kw) -> bytes:
    return batch(records, count, now_ms() - 1000, attributes=codec, **kw)


def unreadable_batches():
    """(name, batch bytes, Millrace's error code, Kafka's) — the cases of issue 11."""
    ts = now_ms() - 1000
    three = b"".join(record(i, b"k%d" % i, b"v%d" % i) for i in range(3))
    not_gzip = b"this is not a gzip stream, only bytes"
    control_record = record(0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0))
    bad_varint = b"\xff\xff\xff\xff\xff\xff" + three
    return [
        ("gzip-garbage", with_codec(not_gzip, 1, 1), CORRUPT_MESSAGE, UNKNOWN_SERVER_ERROR),
        ("gzip-truncated", with_codec(gzip.compress(three)[:-12], 3, 1), CORRUPT_MESSAGE,
         UNKNOWN_SERVER_ERROR),
        ("codec-5", with_codec(three, 3, 5), CORRUPT_MESSAGE, UNKNOWN_SERVER_ERROR),
        ("codec-7", with_codec(three, 3, 7), CORRUPT_MESSAGE, UNKNOWN_SERVER_ERROR),
        ("count-5-holds-3", batch(three, 5, ts), INVALID_RECORD, INVALID_RECORD),
        ("count-5-holds-3-gzip", with_codec(gzip.compress(three), 5, 1), INVALID_RECORD,
         INVALID_RECORD),
        ("count-max-holds-1", batch(record(0, b"k", b"v"), 2**31 - 1, ts), INVALID_RECORD,
         INVALID_RECORD),
        ("control-from-client", batch(control_record, 1, ts, attributes=ATTR_CONTROL),
         INVALID_RECORD, INVALID_RECORD),
        ("bad-varint", batch(bad_varint, 3, ts), INVALID_RECORD, UNKNOWN_SERVER_ERROR),
    ]


@pytest.mark.parametrize("compacted", [False, True], ids=["plain", "compacted"])
def test_unreadable_batches_are_refused_and_append_nothing(broker, conn, compacted):
    topic = unique_topic("unreadable")
    create_topic(broker, topic, **({"cleanup.policy": "compact"} if compacted else {}))
    expected_offset = 0
    code, base, _, msg = conn.produce(topic, plain_batch(2, now_ms() - 1000))
    assert (code, base) == (NONE, 0), msg
    expected_offset = 2
    failures = []
    for name, bad, want_millrace, want_kafka in unreadable_batches():
        want = want_kafka if ON_KAFKA else want_millrace
        code, _, _, msg = conn.produce(topic, bad)
        if code != want:
            failures.append(f"{name}: error {code} ({msg}), expected {want}")
        hw = high_watermark(broker, topic)
        if hw != expected_offset:
            failures.append(f"{name}: high watermark {hw} after the refusal, expected {expected_offset}")
        code, base, _, msg = conn.produce(topic, plain_batch(1, now_ms() - 1000, b"after-" + name.encode()))
        if (code, base) != (NONE, expected_offset):
            failures.append(f"{name}: the next valid record got ({code}, {base}), expected (0, {expected_offset}): {msg}")
        expected_offset += 1
    assert not failures, "\n".join(failures)
    values = read_all(broker, topic, expected_offset)
    assert len(values) == expected_offset, f"read {len(values)} of {expected_offset} records"


def test_compressed_batches_of_every_kind_client_writes_are_accepted(broker, conn):
    """The walk must not refuse what clients send: gzip, and a batch whose maxTimestamp lies."""
    topic = unique_topic("accepted")
    create_topic(broker, topic)
    ts = now_ms() - 5000
    three = b"".join(record(i, b"k%d" % i, b"v%d" % i, ts_delta=i) for i in range(3))
    code, base, _, msg = conn.produce(topic, batch(gzip.compress(three), 3, ts, attributes=1))
    assert (code, base) == (NONE, 0), msg
    # maxTimestamp below the records' largest: Kafka stores the true maximum.
    code, base, _, msg = conn.produce(topic, batch(three, 3, ts, max_ts=ts - 100))
    assert (code, base) == (NONE, 3), msg
    assert len(read_all(broker, topic, 6)) == 6


# ---------------------------------------------------------------- timestamps
def test_timestamp_before_max_names_the_old_record(broker, conn):
    topic = unique_topic("ts-before")
    create_topic(broker, topic, **{"message.timestamp.before.max.ms": "60000"})
    now = now_ms()
    # Record 1 is two hours old (delta from the batch's base timestamp); 0 and 2 are recent.
    recs = record(0, b"a", b"0") + record(1, b"b", b"1", ts_delta=-7_200_000) + record(2, b"c", b"2")
    code, _, errors, msg = conn.produce(topic, batch(recs, 3, now, max_ts=now))
    assert code == INVALID_TIMESTAMP, msg
    assert [i for i, _ in errors] == [1], errors
    assert high_watermark(broker, topic) == 0
    code, base, _, msg = conn.produce(topic, plain_batch(3, now_ms() - 1000))
    assert (code, base) == (NONE, 0), msg


def test_timestamp_after_max_refuses_the_future(broker, conn):
    topic = unique_topic("ts-after")
    create_topic(broker, topic, **{"message.timestamp.after.max.ms": "60000"})
    future = now_ms() + 3_600_000
    code, _, errors, msg = conn.produce(topic, plain_batch(2, future))
    assert code == INVALID_TIMESTAMP, msg
    assert [i for i, _ in errors] == [0, 1], errors
    assert high_watermark(broker, topic) == 0


def test_default_after_max_is_one_hour(broker, conn):
    """Kafka 4's default `log.message.timestamp.after.max.ms` is 3,600,000."""
    topic = unique_topic("ts-default")
    create_topic(broker, topic)
    code, _, _, msg = conn.produce(topic, plain_batch(1, now_ms() + 2 * 3_600_000))
    assert code == INVALID_TIMESTAMP, msg
    code, base, _, msg = conn.produce(topic, plain_batch(1, now_ms() + 60_000))
    assert (code, base) == (NONE, 0), msg
    # Ancient timestamps are fine by default (before.max.ms is Long.MAX_VALUE).
    code, base, _, msg = conn.produce(topic, plain_batch(1, 1_000))
    assert (code, base) == (NONE, 1), msg


def test_log_append_time_topics_ignore_record_timestamps(broker, conn):
    topic = unique_topic("ts-append")
    create_topic(broker, topic, **{
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": "60000",
    })
    code, base, _, msg = conn.produce(topic, plain_batch(2, 1_000))
    assert (code, base) == (NONE, 0), msg


def test_producer_set_log_append_time_is_stored_as_create_time(broker, conn):
    """Kafka 4.1 accepts a producer's LogAppendTime bit and stores the topic's type."""
    topic = unique_topic("ts-producer-lat")
    create_topic(broker, topic)
    ts = now_ms() - 60_000
    code, base, _, msg = conn.produce(topic, batch(record(0, b"a", b"0"), 1, ts,
                                                   attributes=ATTR_LOG_APPEND_TIME))
    assert (code, base) == (NONE, 0), msg
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "produce-validation-unused",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        m = wait_until(lambda: c.poll(0.5), OP_TIMEOUT, what="the record")
        assert m.error() is None, m.error()
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, ts)
    finally:
        c.close()
