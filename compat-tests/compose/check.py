"""The compose test's client steps, each one bounded: create a topic, produce, consume
(confluent-kafka), and the tiered-storage checks (the brokers' /remote-log, ListOffsets, the bucket).

    check.py create      BOOTSTRAP TOPIC PARTITIONS RF [NAME=VALUE ...]   (topic configs)
    check.py produce     BOOTSTRAP TOPIC FIRST COUNT [VALUE_BYTES]
    check.py consume     BOOTSTRAP TOPIC COUNT
    check.py remote-log  HTTP_ADDR TOPIC PARTITIONS MIN_SEGMENTS
    check.py local-start BOOTSTRAP TOPIC PARTITIONS
    check.py bucket      FILER_ADDR FOLDER TOPIC MIN_LOG_OBJECTS

Each prints one line saying what it saw and exits 0 when that is what the step asserts, 1 when not.
Values are "<topic>-<i>" for i in FIRST..FIRST+COUNT-1 (padded with " ...." to VALUE_BYTES when
given), keyed "k<i>" so they spread over the partitions; `consume` reads every partition from the
beginning and wants exactly values 0..COUNT-1, each once.

`remote-log` polls a broker's /remote-log until every partition of TOPIC lists at least
MIN_SEGMENTS committed remote segments, contiguous from offset 0. `local-start` polls until every
partition's local log start (ListOffsets v8, timestamp -4: EARLIEST_LOCAL, KIP-405) is above 0
while its log start (-2: EARLIEST) is still 0: segments left the disk and the object store holds
them. `bucket` lists the filer's FOLDER (the bucket's prefix, e.g. /buckets/millrace/cluster) and
wants at least MIN_LOG_OBJECTS segment `.log` objects under TOPIC's folder.
Env: CHECK_TIMEOUT (seconds per step, default 60).
"""

import json
import os
import socket
import struct
import sys
import time
import urllib.request

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = float(os.environ.get("CHECK_TIMEOUT", "60"))
# One HTTP or Kafka exchange inside a poll loop.
IO_TIMEOUT_S = 5.0
# Pause between polls.
POLL_S = 0.5
# Entries asked of one filer listing (a partition folder holds 6 objects per segment).
FILER_LIST_LIMIT = 10000
# librdkafka's batch.size when produce is given VALUE_BYTES.
BATCH_BYTES_LARGE_VALUES = 16384
# Largest ListOffsets response read (a few partitions: tiny).
RESPONSE_BYTES_MAX = 1 << 20
# ListOffsets (Kafka API key 2): v8 is the first to know EARLIEST_LOCAL (-4), and is flexible.
LIST_OFFSETS_KEY = 2
LIST_OFFSETS_VERSION = 8
EARLIEST_LOCAL_TIMESTAMP = -4
EARLIEST_TIMESTAMP = -2


def deadline() -> float:
    return time.monotonic() + TIMEOUT_S


def create(bootstrap: str, topic: str, partitions: int, rf: int, configs: dict[str, str]) -> bool:
    """Creates the topic (with `configs`) and waits until every partition has a leader and `rf`
    replicas."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=configs)],
        request_timeout=TIMEOUT_S,
    )[topic]
    try:
        future.result(timeout=TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - the message is the finding
        print(f"create: CreateTopics failed: {e}")
        return False
    end = deadline()
    seen = "nothing"
    while time.monotonic() < end:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            leaders = {p.id: p.leader for p in t.partitions.values()}
            replicas = {p.id: sorted(p.replicas) for p in t.partitions.values()}
            seen = f"leaders {leaders}, replicas {replicas}"
            if all(l >= 0 for l in leaders.values()) and all(
                len(r) == rf for r in replicas.values()
            ):
                spread = sorted(set(leaders.values()))
                with_configs = f" with {configs}" if configs else ""
                print(
                    f"create: {topic}: {partitions} partitions, RF {rf}{with_configs}, "
                    f"led by brokers {spread}; {seen}"
                )
                if rf > 1 and len(spread) < 2:
                    print("create: every partition has the same leader")
                    return False
                return True
        time.sleep(0.2)
    print(f"create: {topic} not ready within {TIMEOUT_S:.0f}s; last seen {seen}")
    return False


def value_of(topic: str, i: int, value_bytes: int) -> str:
    """The i-th value: "<topic>-<i>", padded with " ...." to `value_bytes` when that is longer."""
    name = f"{topic}-{i}"
    if value_bytes <= len(name) + 1:
        return name
    return name + " " + "." * (value_bytes - len(name) - 1)


def produce(bootstrap: str, topic: str, first: int, count: int, value_bytes: int = 0) -> bool:
    """Sends COUNT records with acks=all; every one must be acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": int(TIMEOUT_S * 1000),
            # Large values (the tiered topic) in batches well below its segment.bytes, so that
            # segments roll often; librdkafka's default batch is 1 MB.
            **({"batch.size": BATCH_BYTES_LARGE_VALUES} if value_bytes else {}),
        }
    )
    errors: list[str] = []
    acked = 0

    def on_delivery(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(str(err))

    for i in range(first, first + count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"k{i}",
                    value=value_of(topic, i, value_bytes),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(TIMEOUT_S)
    if left or errors or acked != count:
        print(f"produce: {acked}/{count} acknowledged, {left} still queued, errors {errors[:3]}")
        return False
    size = f" of {value_bytes} bytes" if value_bytes else ""
    print(f"produce: {count} records{size} (from {first}) acknowledged with acks=all")
    return True


def consume(bootstrap: str, topic: str, count: int) -> bool:
    """Reads every partition from the beginning; wants values 0..COUNT-1, each exactly once."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = consumer.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            print(f"consume: no metadata for {topic}: {t.error if t else 'missing'}")
            return False
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in t.partitions])
        want = {f"{topic}-{i}" for i in range(count)}
        got: dict[str, int] = {}
        end = deadline()
        while time.monotonic() < end and not want <= got.keys():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    print(f"consume: error {msg.error()} (retrying)")
                continue
            value = (msg.value() or b"").decode().split(" ", 1)[0]
            got[value] = got.get(value, 0) + 1
        # A short linger: anything beyond the expected records would show up as extra or doubled.
        linger_end = time.monotonic() + 1.0
        while time.monotonic() < linger_end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                value = (msg.value() or b"").decode().split(" ", 1)[0]
                got[value] = got.get(value, 0) + 1
    finally:
        consumer.close()
    missing = sorted(want - got.keys())
    extra = sorted(got.keys() - want)
    doubled = sorted(v for v, n in got.items() if n > 1)
    if missing or extra or doubled:
        print(
            f"consume: {len(got)} distinct of {count}; missing {len(missing)} {missing[:3]}, "
            f"extra {extra[:3]}, doubled {doubled[:3]}"
        )
        return False
    print(f"consume: all {count} records read back, each once")
    return True


def http_json(url: str):
    # The filer answers a folder listing in HTML unless asked for JSON.
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=IO_TIMEOUT_S) as response:
        return json.load(response)


def remote_log(http_addr: str, topic: str, partitions: int, min_segments: int) -> bool:
    """Polls http://HTTP_ADDR/remote-log until every partition of TOPIC has at least
    MIN_SEGMENTS committed remote segments, contiguous from offset 0."""
    end = deadline()
    seen = "nothing"
    while time.monotonic() < end:
        try:
            listing = http_json(f"http://{http_addr}/remote-log")
        except (OSError, ValueError) as e:
            seen = f"GET /remote-log: {e}"
            time.sleep(POLL_S)
            continue
        logs = {e["partition"]: e for e in listing if e.get("topic") == topic}
        counts = {p: len(logs[p]["segments"]) if p in logs else 0 for p in range(partitions)}
        seen = f"segments per partition {counts}"
        if all(n >= min_segments for n in counts.values()):
            for p, log in sorted(logs.items()):
                segments = log["segments"]
                gaps = [
                    (a["end_offset"], b["base_offset"])
                    for a, b in zip(segments, segments[1:])
                    if a["end_offset"] + 1 != b["base_offset"]
                ]
                if log["log_start_offset"] != 0 or segments[0]["base_offset"] != 0 or gaps:
                    print(
                        f"remote-log: partition {p}: log start {log['log_start_offset']}, first "
                        f"base offset {segments[0]['base_offset']}, gaps {gaps[:3]}"
                    )
                    return False
            ends = {p: logs[p]["segments"][-1]["end_offset"] for p in sorted(logs)}
            print(
                f"remote-log: {http_addr} lists {topic}: {seen}, contiguous from offset 0 "
                f"to end offsets {ends}"
            )
            return True
        time.sleep(POLL_S)
    print(f"remote-log: fewer than {min_segments} segments within {TIMEOUT_S:.0f}s; last {seen}")
    return False


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Reader:
    """Reads a Kafka response body; a short body raises ValueError."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"response ends at {len(self.data)} bytes, wanted {self.pos + n}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def uvarint(self) -> int:
        n = shift = 0
        for _ in range(5):
            byte = self.take(1)[0]
            n |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return n
            shift += 7
        raise ValueError("uvarint longer than 5 bytes")

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def list_offsets_v8(
    addr: str, topic: str, partitions: list[int], timestamp: int
) -> dict[int, tuple[int, int]]:
    """One ListOffsets v8 request to ADDR: partition -> (error code, offset)."""
    name = topic.encode()
    body = struct.pack(">ib", -1, 0)  # replica id (a client), isolation level READ_UNCOMMITTED
    body += uvarint(2) + uvarint(len(name) + 1) + name + uvarint(len(partitions) + 1)
    for p in partitions:
        body += struct.pack(">iiq", p, -1, timestamp) + uvarint(0)
    body += uvarint(0) + uvarint(0)
    client = b"compose-check"
    header = struct.pack(">hhih", LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION, 1, len(client)) + client
    request = header + uvarint(0) + body
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        if not 0 <= size <= RESPONSE_BYTES_MAX:
            raise ValueError(f"response size {size}")
        r = Reader(recv_exact(sock, size))
    if r.unpack(">i") != 1:
        raise ValueError("correlation id is not 1")
    r.skip_tags()
    r.unpack(">i")  # throttle time
    out: dict[int, tuple[int, int]] = {}
    for _ in range(r.uvarint() - 1):
        r.take(r.uvarint() - 1)  # topic name
        for _ in range(r.uvarint() - 1):
            p = r.unpack(">i")
            error = r.unpack(">h")
            r.unpack(">q")  # timestamp
            offset = r.unpack(">q")
            r.unpack(">i")  # leader epoch
            r.skip_tags()
            out[p] = (error, offset)
        r.skip_tags()
    return out


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ValueError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def local_start(bootstrap: str, topic: str, partitions: int) -> bool:
    """Polls each partition's leader until its local log start (-4) is above 0 and its log
    start (-2) is 0."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = deadline()
    seen = "nothing"
    while time.monotonic() < end:
        try:
            md = admin.list_topics(topic=topic, timeout=IO_TIMEOUT_S)
            t = md.topics[topic]
            local: dict[int, int] = {}
            earliest: dict[int, int] = {}
            errors: dict[int, int] = {}
            for p in range(partitions):
                leader = md.brokers[t.partitions[p].leader]
                addr = f"{leader.host}:{leader.port}"
                for ts, into in ((EARLIEST_LOCAL_TIMESTAMP, local), (EARLIEST_TIMESTAMP, earliest)):
                    error, offset = list_offsets_v8(addr, topic, [p], ts)[p]
                    if error:
                        errors[p] = error
                    into[p] = offset
            seen = f"local log start {local}, log start {earliest}, errors {errors}"
            if not errors and all(local[p] > 0 and earliest[p] == 0 for p in range(partitions)):
                print(f"local-start: {topic}: {seen} (ListOffsets v8 -4 and -2 from each leader)")
                return True
        except (OSError, ValueError, KeyError) as e:
            seen = f"{type(e).__name__}: {e}"
        time.sleep(POLL_S)
    print(f"local-start: not every local log start above 0 within {TIMEOUT_S:.0f}s; last {seen}")
    return False


def filer_entries(filer_addr: str, folder: str) -> list[dict]:
    listing = http_json(f"http://{filer_addr}{folder.rstrip('/')}/?limit={FILER_LIST_LIMIT}")
    return listing.get("Entries") or []


def bucket(filer_addr: str, folder: str, topic: str, min_log_objects: int) -> bool:
    """Counts the `.log` objects in the bucket under TOPIC's folder
    (<topic>-<topic id>/<partition>/)."""
    end = deadline()
    seen = "nothing"
    while time.monotonic() < end:
        try:
            topic_folders = [
                e["FullPath"]
                for e in filer_entries(filer_addr, folder)
                if e["FullPath"].rsplit("/", 1)[-1].startswith(f"{topic}-")
            ]
            logs = 0
            objects = 0
            for tf in topic_folders:
                for part in filer_entries(filer_addr, tf):
                    for obj in filer_entries(filer_addr, part["FullPath"]):
                        objects += 1
                        logs += obj["FullPath"].endswith(".log")
            seen = f"{len(topic_folders)} topic folder(s), {objects} objects, {logs} .log"
            if logs >= min_log_objects:
                print(f"bucket: {folder}: {seen}")
                return True
        except (OSError, ValueError, KeyError) as e:
            seen = f"{type(e).__name__}: {e}"
        time.sleep(POLL_S)
    print(f"bucket: fewer than {min_log_objects} .log objects within {TIMEOUT_S:.0f}s; last {seen}")
    return False


def main(argv: list[str]) -> int:
    try:
        match argv:
            case ["create", b, topic, partitions, rf, *configs]:
                pairs = dict(c.split("=", 1) for c in configs)
                ok = create(b, topic, int(partitions), int(rf), pairs)
            case ["produce", b, topic, first, count, *value_bytes] if len(value_bytes) <= 1:
                ok = produce(b, topic, int(first), int(count), int((value_bytes or ["0"])[0]))
            case ["consume", b, topic, count]:
                ok = consume(b, topic, int(count))
            case ["remote-log", http_addr, topic, partitions, min_segments]:
                ok = remote_log(http_addr, topic, int(partitions), int(min_segments))
            case ["local-start", b, topic, partitions]:
                ok = local_start(b, topic, int(partitions))
            case ["bucket", filer_addr, folder, topic, min_log_objects]:
                ok = bucket(filer_addr, folder, topic, int(min_log_objects))
            case _:
                print(__doc__)
                return 2
    except Exception as e:  # noqa: BLE001 - a client exception is a failed step, said in one line
        print(f"{argv[0]}: {type(e).__name__}: {e}")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
