"""Client quotas: byte-rate and request-rate quotas per user / client id, set with Kafka's own kafka-configs
and AlterClientQuotas, read back with DescribeClientQuotas, and enforced on real clients with
throttle_time_ms and muting (KIP-13, KIP-55, KIP-124, KIP-219).

A broker for the module, started with
    --listen 127.0.0.1:0                     (PLAINTEXT: principal User:ANONYMOUS; kafka-configs and
                                              every client-id check use it)
    listeners=SASL_PLAINTEXT://127.0.0.1:P
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
    sasl.enabled.mechanisms=PLAIN
    listener.name.sasl_plaintext.plain.sasl.jaas.config=
        org.apache.kafka.common.security.plain.PlainLoginModule required
        user_alice="alice-secret" user_bob="bob-secret";      (for the user quotas)
    quota.window.num=1, quota.window.size.seconds=1
on a data dir of this module's own (the restart test starts it again on that dir). No authorizer.

Why quota.window.num=1: Kafka measures a client's rate (Rate over quota.window.num samples of
quota.window.size.seconds) as if at least num-1 full windows had passed, so with the default 11 x 1 s
a new client gets about ten seconds of its quota at full speed. Measured on Kafka 4.1.1 with a 1 MB/s
producer quota: 11 MB in the first second, then one 64 KB batch per ~1.06 s (throttle_time 1057 ms)
until the first sample expires at 11 s, then another 10 MB burst (30 MB took 24 s: 1.25 MB/s). With
num=3 a 10 s run gave 0.78 MB/s after its first second (produce) and 0.67 (fetch), with num=2 0.89
and 0.69, with num=1 1.00 and 0.94: only num=1 lets an 8 s measurement land within 20% of the quota.
num=1 also makes the first over-quota request throttled at once (throttle ~ size/quota), which the
raw checks rely on.

Checks:
- kafka-configs (kafka.admin.ConfigCommand of the Kafka 4.1.1 tools; it is not in org.apache.kafka.tools)
  --alter --add-config / --delete-config and --describe for --entity-type clients, users and user +
  client pairs, named and --entity-default, with Kafka's exact output; its refusals (a non-quota key,
  a negative or fractional byte rate, deleting a key that is not set).
- raw AlterClientQuotas (v0 and v1; confluent-kafka 2.16.1 has no client quota admin API): every
  refusal with Kafka's code and message, a request mixing valid and invalid entries, validate_only;
  raw DescribeClientQuotas: the filters (exact, default (match_type 1), any (2), strict, several
  components, none) against a model of Kafka's rules on the broker's whole state, and the invalid
  filters.
- a confluent-kafka producer under producer_byte_rate=1048576 (client.id) runs at 1 MB/s +-20% and
  reports throttle time in its statistics, while a producer with another client.id at the same time
  runs unthrottled; the same for consumers under consumer_byte_rate (+-25%).
- raw Produce v9 over quota: the response comes at once with throttle_time_ms ~ size/quota, then
  the connection is muted (a second request is answered only after ~throttle_time_ms), while a second
  connection with the same client id is answered at once (also with throttle time: the rate is per
  client id) and another client id gets 0. Raw Fetch v4 over quota: the throttled responses are empty
  and the next fetch waits out the throttle time.
- request_percentage=1 (kafka-configs accepts and describes it): Metadata v4 requests hammered on a
  raw connection get throttle_time_ms > 0 and are muted; another client id gets 0.
- precedence: user+client-id over user over client-id, by describe and by the throttle time of a raw
  produce over SASL_PLAINTEXT (alice and bob).
- the quotas survive a restart on the same data dir (describe unchanged, throttling still applied).

What Apache Kafka 4.1.1 does (asserted where marked *):
- kafka-configs output*: "Completed updating config for client X." / "... for user alice." (also
  for a user+client pair) / "Completed updating default config for clients in the cluster." (users
  likewise); describe prints one line per entity: "Quota configs for client-id 'X' are
  consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0", "Quota configs for the default
  client-id are ...", "Quota configs for user-principal 'alice', client-id 'X' are ...", "... for
  user-principal 'alice', the default client-id are ...", "... for the default user-principal are
  ..."; values as Java doubles (500000000 -> 5.0E8); the key order is the tool's HashMap order; nothing for an entity
  without quotas. --entity-type users lists user-only entities, users + clients only pairs (strict).
- kafka-configs refusals* (exit 1, on stderr): 'foo=1' -> "Only quota configs can be added for
  'clients' using --bootstrap-server. Unexpected config names: Set(foo)" (client side); a negative or
  zero byte rate -> the broker's INVALID_REQUEST "Quota producer_byte_rate must be greater than 0",
  1.5 -> "producer_byte_rate cannot be a fractional value." (printed as "...ExecutionException:
  org.apache.kafka.common.errors.InvalidRequestException: <message>"); deleting a key that is not set
  -> "Invalid config(s): producer_byte_rate" (the tool describes the entity first).
- AlterClientQuotas*: every refusal is INVALID_REQUEST (42) on its entry, the other entries of the
  request are applied. Messages: "Invalid configuration key foo", "Quota request_percentage must be
  greater than 0", "Proposed value for producer_byte_rate is too large for a LONG.", "Invalid empty
  client quota entity", "Unhandled client quota entity type: foo", "Empty client-id not supported",
  "Empty user not supported", "Invalid quota entity combination, IP entity shouldnot be combined with
  User or ClientId" (sic), connection_creation_rate on a client id -> "Invalid configuration key
  connection_creation_rate"; one key twice in one entity: "Ignoring duplicate entity
  ClientQuotaEntity(entries={client-id=X})" (sic) and nothing of it applied; an entity named twice in
  one request: ONE answer for it, that same refusal, yet its first entry IS applied.
  request_percentage may be fractional (0.5) and huge (1e9). validate_only applies nothing and still
  refuses. Removing a key that is not set, or an invalid key, succeeds. Not asserted: NaN is
  accepted and stored (DescribeClientQuotas then returns NaN); a type repeated in one entity
  (client-id a, client-id b) sets client-id b; an IP quota of connection_creation_rate on 127.0.0.1
  makes the broker reset this suite's own connections (never set here).
- DescribeClientQuotas*: error_message "" (not null) on success; exact match with a null name ->
  42 "Request specified MATCH_TYPE_EXACT, but set match string to null." (entries null); default or
  any with a name -> 42 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string." /
  "...MATCH_TYPE_SPECIFIED, but also specified a match string."; a type twice -> 42 "Entity type user
  cannot appear more than once in the filter."; match type 3 -> 42 "Unknown match type 3"; an
  unknown entity type -> UNSUPPORTED_VERSION (35) "Unsupported entity type foo". No components =
  every entity (strict: none).
- A quota change is applied asynchronously (metadata log): DescribeClientQuotas on the broker shows it
  1-30 ms after AlterClientQuotas answers (a describe right after a 9-entity alter was once stale);
  every check after a change polls, bounded. A change also applies to a client already connected.
- Produce*: the over-quota request is appended and answered at once with throttle_time_ms (with
  num=1: 100 KB at 50 KB/s -> ~2000 ms), then the broker stops reading that connection for that
  long; the rate is per (user, client id), so another connection with the same client id gets
  throttle time too but is answered at once; produce throttle time is not capped (seen: 14.8 s).
- Fetch*: a throttled fetch is answered at once with throttle_time_ms and NO data (an empty responses
  array: Kafka computes the response, sees the quota violated, unrecords it and sends an empty one),
  then the connection is muted; fetch throttle time is capped at one quota window (seen: 1001 ms). Not
  asserted: Kafka caps a quota'd fetch at quota x (num-1) x window bytes (0 with num=1: one batch per
  fetch), so a batch larger than ~one window of quota is never delivered (every fetch throttled
  1000 ms, forever).
- librdkafka reports the throttle time in its statistics (brokers.<b>.throttle: min/max/avg/cnt per
  interval): max ~60 ms (producer, 64 KB batches) and ~115 ms (consumer) at 1 MB/s; 0 unthrottled.
- request_percentage*: with num=1 the first Metadata request of a client id at 1% already gets
  throttle_time_ms (40-330 ms each, more as Metadata grows); ApiVersions is throttled as well (not
  asserted), and Metadata v1 (no throttle field) is still muted (1500 requests took 90 s).
- The precedence* is Kafka's: user+client-id, user+default client-id, user, default user+client-id,
  default user+default client-id, default user, client-id, default client-id; a user-level quota is
  one rate shared by all of that user's client ids. Quotas are kept in the metadata log* (restart).

Runs against Apache Kafka too (the reference broker, 4.4.0) (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import Broker, free_ports, unique_topic, wait_until
from secure_clients import OP_TIMEOUT, java_tool, stop_checked

SETTLE_TIMEOUT = 30.0   # seconds for a quota change to show on the broker
RAW_TIMEOUT = 30.0      # seconds for one raw response (a muted connection answers late)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
CONFIG_COMMAND = "kafka.admin.ConfigCommand"  # kafka-configs.sh in Kafka 4.1.1

MB = 1048576
RATE = 1048576          # the byte-rate quota of the throughput checks (1 MB/s)
VALUE = 10240           # bytes per record in the throughput checks
PRODUCE_RECORDS = 820   # 8 MB: ~8 s at RATE
CONSUME_RECORDS = 700   # 7 MB: ~7 s at RATE
RUN_LIMIT = 30.0        # seconds one throughput run may take
PRODUCE_BAND = 0.20     # the bound on the average produce rate
FETCH_BAND = 0.25

USER, CLIENT, IP = "user", "client-id", "ip"
EXACT, DEFAULT, ANY = 0, 1, 2
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35

# An entity: its (type, name) pairs sorted by type (a None name is the default entity).
Entity = Tuple[Tuple[str, Optional[str]], ...]
State = Dict[Entity, Dict[str, float]]


def entity(*pairs: Tuple[str, Optional[str]]) -> Entity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


# ------------------------------------------------------------------ the broker
@dataclass
class QuotaBroker:
    broker: Broker              # replaced by the restart test
    work: Path
    data: Path
    settings: Dict[str, str]
    sasl_port: int
    cp: str = field(default="", repr=False)

    @property
    def port(self) -> int:
        assert self.broker.port is not None
        return self.broker.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def qb(java_cp) -> Iterator[QuotaBroker]:
    work = Path(tempfile.mkdtemp(prefix="millrace-quotas-"))
    try:
        (sasl_port,) = free_ports(1)
        settings = {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "quota.window.num": "1",
            "quota.window.size.seconds": "1",
        }
        data = work / "data"
        s = QuotaBroker(broker=Broker(settings=settings, data_dir=data).start(), work=work, data=data,
                        settings=settings, sasl_port=sasl_port, cp=java_cp)
        try:
            await_sasl(s)
            yield s
        finally:
            stop_checked(s.broker)
    finally:
        if not os.environ.get("MILLRACE_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)


def await_sasl(s: QuotaBroker) -> None:
    """The SASL listener may open a moment after the PLAINTEXT one."""
    def up() -> bool:
        with raw(s.sasl_port, "compat-quota-probe", timeout=3.0) as c:
            c.login("alice")
        return True
    wait_until(up, timeout=OP_TIMEOUT, interval=0.2, what="a SASL/PLAIN login on the SASL_PLAINTEXT listener")


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ raw Kafka wire
def s16(s: Optional[str]) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def cstr(s: Optional[str]) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def string(s: Optional[str], flex: bool) -> bytes:
    return cstr(s) if flex else s16(s)


def array(items: Sequence[bytes], flex: bool) -> bytes:
    return (uvarint(len(items) + 1) if flex else struct.pack(">i", len(items))) + b"".join(items)


def tags(flex: bool) -> bytes:
    return b"\0" if flex else b""


_CRC32C = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C.append(_c)


def crc32c(data: bytes) -> int:
    c, table = 0xFFFFFFFF, _CRC32C
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def record_batch(values: Sequence[bytes]) -> bytes:
    """One uncompressed v2 batch of VALUES (no keys, no headers, no producer id)."""
    now = int(time.time() * 1000)
    records = b""
    for i, v in enumerate(values):
        body = b"\0" + varint(0) + varint(i) + varint(-1) + varint(len(v)) + v + varint(0)
        records += varint(len(body)) + body
    tail = struct.pack(">hiqqqhii", 0, len(values) - 1, now, now, -1, -1, -1, len(values)) + records
    head = struct.pack(">ibI", -1, 2, crc32c(tail))
    return struct.pack(">qi", 0, len(head) + len(tail)) + head + tail


class Reader:
    def __init__(self, b: bytes) -> None:
        self.b, self.o = b, 0

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.b, self.o)
        self.o += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def uvarint(self) -> int:
        shift = n = 0
        while True:
            x = self.b[self.o]
            self.o += 1
            n |= (x & 0x7F) << shift
            if not x & 0x80:
                return n
            shift += 7

    def string(self, flex: bool) -> Optional[str]:
        n = self.uvarint() - 1 if flex else self.take(">h")
        if n < 0:
            return None
        s = self.b[self.o:self.o + n].decode()
        self.o += n
        return s

    def count(self, flex: bool) -> int:
        return self.uvarint() - 1 if flex else self.take(">i")

    def tags(self, flex: bool) -> None:
        if flex:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.o += self.uvarint()

    def bytes_(self, n: int) -> bytes:
        out = self.b[self.o:self.o + max(n, 0)]
        self.o += max(n, 0)
        return out


class Raw:
    """One TCP connection speaking the Kafka protocol by hand with CLIENT_ID (request header v1, or v2
    for a flexible version)."""

    def __init__(self, port: int, client_id: str, timeout: float = RAW_TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, body: bytes, flex: bool = False) -> int:
        self.corr += 1
        msg = struct.pack(">hhi", key, version, self.corr) + s16(self.client_id) + tags(flex) + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        return self.corr

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def response(self, corr: int, flex: bool = False) -> Reader:
        (size,) = struct.unpack(">i", self._exact(4))
        r = Reader(self._exact(size))
        got = r.take(">i")
        assert got == corr, f"response correlation id {got}, want {corr}"
        r.tags(flex)
        return r

    def call(self, key: int, version: int, body: bytes, flex: bool = False) -> Reader:
        return self.response(self.send(key, version, body, flex), flex)

    def timed(self, key: int, version: int, body: bytes, flex: bool = False) -> Tuple[Reader, float]:
        t0 = time.monotonic()
        r = self.call(key, version, body, flex)
        return r, time.monotonic() - t0

    def login(self, user: str) -> None:
        """SaslHandshake v1 (PLAIN) + SaslAuthenticate v1 as USER."""
        r = self.call(17, 1, s16("PLAIN"))
        assert r.take(">h") == 0, f"SaslHandshake for PLAIN refused"
        token = b"\0" + user.encode() + b"\0" + USERS[user].encode()
        r = self.call(36, 1, struct.pack(">i", len(token)) + token)
        err = r.take(">h")
        assert err == 0, f"SaslAuthenticate as {user}: error {err} {r.string(False)!r}"


class raw:
    """with raw(port, client_id[, user]) as conn: a Raw connection (logged in as USER if given)."""

    def __init__(self, port: int, client_id: str, user: Optional[str] = None, timeout: float = RAW_TIMEOUT):
        self.args = (port, client_id, timeout)
        self.user = user

    def __enter__(self) -> Raw:
        self.conn = Raw(*self.args)
        try:
            if self.user is not None:
                self.conn.login(self.user)
        except BaseException:
            self.conn.close()
            raise
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


# --- DescribeClientQuotas (48) / AlterClientQuotas (49), v0 (flex=False) and v1 (flex=True)
Component = Tuple[str, int, Optional[str]]   # (entity type, match type, match)


def describe_raw(port: int, components: Sequence[Component], strict: bool = False,
                 flex: bool = False) -> Tuple[int, Optional[str], Optional[State]]:
    """DescribeClientQuotas: (error code, error message, {entity: {key: value}} or None)."""
    body = array([string(t, flex) + struct.pack(">b", m) + string(n, flex) + tags(flex) for t, m, n in components],
                 flex) + struct.pack(">?", strict) + tags(flex)
    with raw(port, "compat-quota-admin") as c:
        r = c.call(48, 1 if flex else 0, body, flex)
    r.take(">i")  # throttle_time_ms
    err = r.take(">h")
    msg = r.string(flex)
    n = r.count(flex)
    if n < 0:
        return err, msg, None
    out: State = {}
    for _ in range(n):
        pairs = []
        for _ in range(r.count(flex)):
            t, name = r.string(flex), r.string(flex)
            r.tags(flex)
            pairs.append((t, name))
        values = {}
        for _ in range(r.count(flex)):
            k = r.string(flex)
            values[k] = r.take(">d")
            r.tags(flex)
        r.tags(flex)
        e = entity(*pairs)
        assert e not in out, f"entity {e} returned twice"
        out[e] = values
    return err, msg, out


Op = Tuple[str, float, bool]  # (key, value, remove)


def alter_raw(port: int, entries: Sequence[Tuple[Sequence[Tuple[str, Optional[str]]], Sequence[Op]]],
              validate_only: bool = False, flex: bool = False) -> List[Tuple[int, Optional[str], Entity]]:
    """AlterClientQuotas: per answered entry (error code, error message, entity)."""
    items = []
    for pairs, ops in entries:
        e = array([string(t, flex) + string(n, flex) + tags(flex) for t, n in pairs], flex)
        o = array([string(k, flex) + struct.pack(">d?", v, rm) + tags(flex) for k, v, rm in ops], flex)
        items.append(e + o + tags(flex))
    body = array(items, flex) + struct.pack(">?", validate_only) + tags(flex)
    with raw(port, "compat-quota-admin") as c:
        r = c.call(49, 1 if flex else 0, body, flex)
    r.take(">i")
    out = []
    for _ in range(r.count(flex)):
        err = r.take(">h")
        msg = r.string(flex)
        pairs = []
        for _ in range(r.count(flex)):
            t, name = r.string(flex), r.string(flex)
            r.tags(flex)
            pairs.append((t, name))
        r.tags(flex)
        out.append((err, msg, entity(*pairs)))
    return out


def everything(s: QuotaBroker) -> State:
    err, msg, got = describe_raw(s.port, [])
    assert err == 0 and got is not None, f"DescribeClientQuotas with no components: {err} {msg!r}"
    return got


def quotas_of(s: QuotaBroker, e: Entity) -> Dict[str, float]:
    """The quotas of entity E alone (DescribeClientQuotas, exact/default per component, strict)."""
    comps = [(t, EXACT, n) if n is not None else (t, DEFAULT, None) for t, n in e]
    err, msg, got = describe_raw(s.port, comps, strict=True)
    assert err == 0 and got is not None, f"DescribeClientQuotas {comps}: {err} {msg!r}"
    assert set(got) <= {e}, f"DescribeClientQuotas {comps} (strict) returned other entities: {got}"
    return got.get(e, {})


def await_quotas(s: QuotaBroker, e: Entity, want: Dict[str, float]) -> None:
    wait_until(lambda: quotas_of(s, e) == want, timeout=SETTLE_TIMEOUT, interval=0.1,
               what=f"DescribeClientQuotas to show {e} = {want}")


def set_quotas(s: QuotaBroker, pairs: Sequence[Tuple[str, Optional[str]]], values: Dict[str, float],
               flex: bool = False) -> None:
    """AlterClientQuotas setting VALUES on one entity; waits until the broker shows them."""
    got = alter_raw(s.port, [(pairs, [(k, v, False) for k, v in values.items()])], flex=flex)
    assert [(e, m) for e, m, _ in got] == [(0, None)], f"AlterClientQuotas {pairs} {values}: {got}"
    t0 = time.monotonic()
    e = entity(*pairs)
    wait_until(lambda: all(quotas_of(s, e).get(k) == v for k, v in values.items()), timeout=SETTLE_TIMEOUT,
               interval=0.02, what=f"DescribeClientQuotas to show {values} on {e}")
    print(f"{e} {values}: described {1000 * (time.monotonic() - t0):.0f} ms after AlterClientQuotas answered")


def clear_quotas(s: QuotaBroker, entities: Sequence[Entity]) -> None:
    """Removes every quota of ENTITIES (those that have any); waits until they are gone."""
    current = everything(s)
    todo = [(list(e), [(k, 0.0, True) for k in current[e]]) for e in entities if current.get(e)]
    if todo:
        got = alter_raw(s.port, todo)
        assert all(err == 0 for err, _, _ in got), f"removing quotas of {entities}: {got}"
    wait_until(lambda: not any(everything(s).get(e) for e in entities), timeout=SETTLE_TIMEOUT, interval=0.1,
               what=f"the quotas of {entities} to be gone")


# --- Produce v9, Fetch v4, Metadata v4
def produce_body(topic: str, batch: bytes, acks: int = 1) -> bytes:
    """Produce v9 (flexible): BATCH to partition 0 of TOPIC."""
    return (cstr(None) + struct.pack(">hi", acks, 30000) + uvarint(2) + cstr(topic) + uvarint(2)
            + struct.pack(">i", 0) + uvarint(len(batch) + 1) + batch + b"\0" + b"\0" + b"\0")


def produce_result(r: Reader) -> Tuple[int, List[Tuple[int, int]]]:
    """A Produce v9 response: (throttle_time_ms, [(error code, base offset)] per partition)."""
    parts = []
    for _ in range(r.count(True)):
        r.string(True)
        for _ in range(r.count(True)):
            _, err, base, _, _ = r.take(">ihqqq")
            for _ in range(r.count(True)):
                r.take(">i")
                r.string(True)
                r.tags(True)
            r.string(True)
            r.tags(True)
            parts.append((err, base))
        r.tags(True)
    return r.take(">i"), parts


def raw_produce(c: Raw, topic: str, batch: bytes) -> Tuple[int, float]:
    """One Produce v9 (acks=1) on C: (throttle_time_ms, seconds to the answer); the batch must be taken."""
    r, took = c.timed(0, 9, produce_body(topic, batch), flex=True)
    throttle, parts = produce_result(r)
    assert len(parts) == 1 and parts[0][0] == 0, f"Produce to {topic} as {c.client_id}: {parts}"
    return throttle, took


def fetch_body(topic: str, offset: int, max_bytes: int = MB) -> bytes:
    """Fetch v4: partition 0 of TOPIC from OFFSET, max_wait 0, min_bytes 0."""
    return (struct.pack(">iiiib", -1, 0, 0, max_bytes, 0) + struct.pack(">i", 1) + s16(topic)
            + struct.pack(">i", 1) + struct.pack(">iqi", 0, offset, max_bytes))


def fetch_result(r: Reader) -> Tuple[int, List[Tuple[int, bytes]]]:
    """A Fetch v4 response: (throttle_time_ms, [(error code, records)] per partition)."""
    throttle = r.take(">i")
    parts = []
    for _ in range(r.take(">i")):
        r.string(False)
        for _ in range(r.take(">i")):
            _, err, _, _ = r.take(">ihqq")
            for _ in range(max(r.take(">i"), 0)):
                r.take(">qq")
            parts.append((err, r.bytes_(r.take(">i"))))
    return throttle, parts


def batches_end(records: bytes) -> Optional[int]:
    """The offset after the last whole batch in RECORDS (None when there is none)."""
    end, o = None, 0
    while o + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, o)
        if o + 12 + length > len(records):
            break
        (last_delta,) = struct.unpack_from(">i", records, o + 23)
        end = base + last_delta + 1
        o += 12 + length
    return end


def metadata_v4_throttle(r: Reader) -> int:
    return r.take(">i")


METADATA_V4_ALL = struct.pack(">ib", -1, 0)  # all topics, no auto-creation


# ------------------------------------------------------------------ kafka-configs
def kafka_configs(s: QuotaBroker, *args: str) -> subprocess.CompletedProcess:
    return java_tool(s.cp, CONFIG_COMMAND, ["--bootstrap-server", s.bootstrap, *args])


def configs_ok(s: QuotaBroker, *args: str) -> str:
    proc = kafka_configs(s, *args)
    assert proc.returncode == 0, f"kafka-configs {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def configs_refused(s: QuotaBroker, *args: str) -> str:
    """kafka-configs ARGS exits 1 with nothing on stdout: its stderr without the stack trace lines."""
    proc = kafka_configs(s, *args)
    assert proc.returncode == 1, (f"kafka-configs {' '.join(args)}: exit {proc.returncode}, want 1\n"
                                  f"stdout: {proc.stdout!r}\nstderr: {proc.stderr[-2000:]}")
    assert proc.stdout == "", f"kafka-configs {' '.join(args)} printed {proc.stdout!r} on stdout"
    return "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("\tat ")
                     and not re.match(r"^\t\.\.\. \d+ more$", line))


def lines(out: str) -> List[str]:
    assert out == "" or out.endswith("\n"), f"output without a final newline: {out!r}"
    return out.splitlines()


# ------------------------------------------------------------------ topics and librdkafka clients
def make_topic(s: QuotaBroker, name: str) -> None:
    adm = AdminClient({"bootstrap.servers": s.bootstrap, "socket.timeout.ms": 10000})
    adm.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                      operation_timeout=10, request_timeout=OP_TIMEOUT)[name].result(timeout=OP_TIMEOUT)

    def ready() -> bool:
        t = adm.list_topics(topic=name, timeout=OP_TIMEOUT).topics.get(name)
        return t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values())
    wait_until(ready, timeout=OP_TIMEOUT, what=f"topic {name} in metadata with a leader")


@dataclass
class Run:
    """One throughput run: arrival times (s since the start) and sizes of the records acknowledged /
    read, and librdkafka's throttle statistics."""
    label: str
    times: List[float] = field(default_factory=list)
    sizes: List[int] = field(default_factory=list)
    throttle_max: int = 0     # max of brokers.<b>.throttle.max over the statistics
    throttle_cnt: int = 0     # sum of brokers.<b>.throttle.cnt
    stats: int = 0            # statistics callbacks seen
    errors: List[str] = field(default_factory=list)

    def on_stats(self, raw_json: str) -> None:
        st = json.loads(raw_json)
        self.stats += 1
        for b in st.get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0:
                th = b.get("throttle", {})
                self.throttle_max = max(self.throttle_max, int(th.get("max", 0)))
                self.throttle_cnt += int(th.get("cnt", 0))

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def elapsed(self) -> float:
        return self.times[-1] if self.times else 0.0

    def rate_after(self, skip: float = 1.0) -> float:
        """Bytes/s from SKIP s to the last record (over the whole run when it ended before 2 s)."""
        if not self.times:
            return 0.0
        if self.elapsed < skip + 1.0:
            return self.total / max(self.elapsed, 1e-3)
        return sum(n for t, n in zip(self.times, self.sizes) if t >= skip) / (self.elapsed - skip)

    def rate(self) -> float:
        return self.total / max(self.elapsed, 1e-3)

    def describe(self) -> str:
        return (f"{self.label}: {len(self.times)} records, {self.total / MB:.2f} MB in {self.elapsed:.2f} s: "
                f"{self.rate_after() / MB:.3f} MB/s after the first second ({self.rate() / MB:.3f} overall), "
                f"throttle max {self.throttle_max} ms over {self.throttle_cnt} responses ({self.stats} stats)")


def produce_run(s: QuotaBroker, topic: str, client_id: str, count: int, label: str) -> Run:
    """COUNT records of VALUE bytes to partition 0 of TOPIC with CLIENT_ID (acks=1, linger.ms=5,
    batch.size 64 KB), all queued at once; acknowledgement times recorded; bounded by RUN_LIMIT."""
    run = Run(label)
    p = Producer({"bootstrap.servers": s.bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
                  "batch.size": 65536, "enable.idempotence": False, "message.timeout.ms": 60000,
                  "statistics.interval.ms": 1000, "stats_cb": run.on_stats})
    value = os.urandom(VALUE)
    t0 = time.monotonic()

    def on_delivery(err, msg) -> None:
        if err is not None:
            run.errors.append(str(err))
        else:
            run.times.append(time.monotonic() - t0)
            run.sizes.append(len(msg.value()))

    for _ in range(count):
        p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    p.poll(0)
    deadline = t0 + RUN_LIMIT
    while len(run.times) + len(run.errors) < count and time.monotonic() < deadline:
        p.poll(0.05)
    p.poll(0)
    left = p.flush(5)
    assert not run.errors, f"{label}: delivery failed: {run.errors[:3]}"
    assert left == 0 and len(run.times) == count, (
        f"{label}: {len(run.times)} of {count} records acknowledged within {RUN_LIMIT} s")
    return run


def consume_run(s: QuotaBroker, topic: str, client_id: str, count: int, label: str) -> Run:
    """Read the first COUNT records of partition 0 of TOPIC with CLIENT_ID (assign, from 0); arrival
    times recorded; bounded by RUN_LIMIT."""
    run = Run(label)
    c = Consumer({"bootstrap.servers": s.bootstrap, "client.id": client_id, "group.id": uid("quota-g"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "statistics.interval.ms": 1000, "stats_cb": run.on_stats})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        t0 = time.monotonic()
        while len(run.times) < count and time.monotonic() < t0 + RUN_LIMIT:
            msg = c.poll(0.1)
            if msg is None:
                continue
            if msg.error() is not None:
                run.errors.append(str(msg.error()))
                continue
            run.times.append(time.monotonic() - t0)
            run.sizes.append(len(msg.value()))
        c.poll(0)
    finally:
        c.close()
    assert len(run.times) >= count, f"{label}: read {len(run.times)} of {count} records within {RUN_LIMIT} s " \
                                    f"(errors {run.errors[:3]})"
    return run


def in_parallel(a: Callable[[], Run], b: Callable[[], Run]) -> Tuple[Run, Run]:
    """A() here and B() in a thread, started together."""
    out: Dict[str, object] = {}

    def side() -> None:
        try:
            out["b"] = b()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            out["exc"] = exc
    t = threading.Thread(target=side, name="quota-unthrottled", daemon=True)
    t.start()
    try:
        ra = a()
    finally:
        t.join(RUN_LIMIT + 30)
    assert not t.is_alive(), "the unthrottled client did not finish"
    if "exc" in out:
        raise out["exc"]  # type: ignore[misc]
    return ra, out["b"]  # type: ignore[return-value]


def within(rate: float, quota: float, band: float) -> bool:
    return abs(rate - quota) <= band * quota


def measured(attempt: Callable[[int], Tuple[Run, Run]], ok: Callable[[Run, Run], bool]) -> Tuple[Run, Run]:
    """ATTEMPT(1), and once more (ATTEMPT(2)) if OK says the first missed: the timing checks run on a
    noisy machine. Prints what every attempt measured."""
    runs = attempt(1)
    for r in runs:
        print(r.describe())
    if ok(*runs):
        return runs
    print("first attempt missed; measuring again")
    runs = attempt(2)
    for r in runs:
        print(r.describe())
    return runs


# ------------------------------------------------------------------ model of DescribeClientQuotas
def model(state: State, components: Sequence[Component], strict: bool) -> State:
    """Kafka's filter rules: every component names a type the entity has, with an exact name, the
    default (None) or any; strict: the entity has no other types."""
    out: State = {}
    for e, values in state.items():
        d = dict(e)
        ok = all(t in d and (m == ANY or (m == EXACT and d[t] == n) or (m == DEFAULT and d[t] is None))
                 for t, m, n in components)
        if ok and strict:
            ok = set(d) == {t for t, _, _ in components}
        if ok:
            out[e] = values
    return out


# ================================================================== kafka-configs
def test_kafka_configs_client_quota_add_describe_delete(qb):
    x = uid("cli-x")
    ex = entity((CLIENT, x))
    out = configs_ok(qb, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                     "--entity-type", "clients", "--entity-name", x)
    assert out == f"Completed updating config for client {x}.\n"
    await_quotas(qb, ex, {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0})
    out = configs_ok(qb, "--describe", "--entity-type", "clients", "--entity-name", x)
    assert out == f"Quota configs for client-id '{x}' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"

    out = configs_ok(qb, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients",
                     "--entity-name", x)
    assert out == f"Completed updating config for client {x}.\n"
    await_quotas(qb, ex, {"producer_byte_rate": 1048576.0})
    out = configs_ok(qb, "--describe", "--entity-type", "clients", "--entity-name", x)
    assert out == f"Quota configs for client-id '{x}' are producer_byte_rate=1048576.0\n"

    configs_ok(qb, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients", "--entity-name", x)
    await_quotas(qb, ex, {})
    assert ex not in everything(qb), "an entity without quotas is still described"
    assert configs_ok(qb, "--describe", "--entity-type", "clients", "--entity-name", x) == ""
    # the tool describes the entity before deleting: a key that is not set is refused client-side
    err = configs_refused(qb, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients",
                          "--entity-name", x)
    assert err == "Invalid config(s): producer_byte_rate", err


def test_kafka_configs_defaults_users_and_pairs(qb):
    """--entity-default for clients and users, a user, a user + client pair, a user + default client;
    big values: nothing is throttled meanwhile. All removed at the end."""
    x = uid("cli-pair")
    made = [entity((CLIENT, None)), entity((USER, "alice")), entity((USER, "alice"), (CLIENT, x)),
            entity((USER, None)), entity((USER, "alice"), (CLIENT, None))]
    try:
        assert configs_ok(qb, "--alter", "--add-config", "producer_byte_rate=500000000", "--entity-type", "clients",
                          "--entity-default") == "Completed updating default config for clients in the cluster.\n"
        assert configs_ok(qb, "--alter", "--add-config", "producer_byte_rate=300000000,request_percentage=500",
                          "--entity-type", "users", "--entity-name", "alice") == \
            "Completed updating config for user alice.\n"
        assert configs_ok(qb, "--alter", "--add-config", "producer_byte_rate=700000000", "--entity-type", "users",
                          "--entity-name", "alice", "--entity-type", "clients", "--entity-name", x) == \
            "Completed updating config for user alice.\n"
        assert configs_ok(qb, "--alter", "--add-config", "consumer_byte_rate=800000000", "--entity-type", "users",
                          "--entity-default") == "Completed updating default config for users in the cluster.\n"
        assert configs_ok(qb, "--alter", "--add-config", "consumer_byte_rate=900000000", "--entity-type", "users",
                          "--entity-name", "alice", "--entity-type", "clients", "--entity-default") == \
            "Completed updating config for user alice.\n"
        want = {made[0]: {"producer_byte_rate": 5e8},
                made[1]: {"producer_byte_rate": 3e8, "request_percentage": 500.0},
                made[2]: {"producer_byte_rate": 7e8},
                made[3]: {"consumer_byte_rate": 8e8},
                made[4]: {"consumer_byte_rate": 9e8}}
        for e, v in want.items():
            await_quotas(qb, e, v)

        assert configs_ok(qb, "--describe", "--entity-type", "clients", "--entity-default") == \
            "Quota configs for the default client-id are producer_byte_rate=5.0E8\n"
        assert configs_ok(qb, "--describe", "--entity-type", "users", "--entity-name", "alice") == \
            "Quota configs for user-principal 'alice' are request_percentage=500.0, producer_byte_rate=3.0E8\n"
        assert configs_ok(qb, "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                          "clients", "--entity-name", x) == \
            f"Quota configs for user-principal 'alice', client-id '{x}' are producer_byte_rate=7.0E8\n"
        # every user-only entity (other modules' tests add none; this module's others clean up)
        users = lines(configs_ok(qb, "--describe", "--entity-type", "users"))
        assert sorted(users) == sorted([
            "Quota configs for the default user-principal are consumer_byte_rate=8.0E8",
            "Quota configs for user-principal 'alice' are request_percentage=500.0, producer_byte_rate=3.0E8"]), users
        pairs = lines(configs_ok(qb, "--describe", "--entity-type", "users", "--entity-name", "alice",
                                 "--entity-type", "clients"))
        assert sorted(pairs) == sorted([
            f"Quota configs for user-principal 'alice', client-id '{x}' are producer_byte_rate=7.0E8",
            "Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=9.0E8"]), pairs
    finally:
        clear_quotas(qb, made)


def test_kafka_configs_refusals(qb):
    y = uid("cli-bad")
    assert configs_refused(qb, "--alter", "--add-config", "foo=1", "--entity-type", "clients", "--entity-name", y) \
        == "Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: Set(foo)"
    for value, message in (("-5", "Quota producer_byte_rate must be greater than 0"),
                           ("0", "Quota producer_byte_rate must be greater than 0"),
                           ("1.5", "producer_byte_rate cannot be a fractional value.")):
        err = configs_refused(qb, "--alter", "--add-config", f"producer_byte_rate={value}", "--entity-type",
                              "clients", "--entity-name", y)
        assert ("java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.InvalidRequestException: "
                + message) in err.splitlines(), f"producer_byte_rate={value}: {err}"
    assert entity((CLIENT, y)) not in everything(qb)


# ================================================================== raw AlterClientQuotas / DescribeClientQuotas
@pytest.mark.parametrize("flex", [False, True], ids=["v0", "v1"])
def test_alter_client_quotas_refusals(qb, flex):
    n = uid("raw-bad")
    cases = [
        ("an unknown key", [(CLIENT, n + "a")], [("foo", 1.0, False)], "Invalid configuration key foo"),
        ("a negative byte rate", [(CLIENT, n + "b")], [("producer_byte_rate", -5.0, False)],
         "Quota producer_byte_rate must be greater than 0"),
        ("a zero byte rate", [(CLIENT, n + "c")], [("consumer_byte_rate", 0.0, False)],
         "Quota consumer_byte_rate must be greater than 0"),
        ("a fractional byte rate", [(CLIENT, n + "d")], [("producer_byte_rate", 1.5, False)],
         "producer_byte_rate cannot be a fractional value."),
        ("a zero request_percentage", [(CLIENT, n + "e")], [("request_percentage", 0.0, False)],
         "Quota request_percentage must be greater than 0"),
        ("a byte rate beyond a long", [(CLIENT, n + "f")], [("producer_byte_rate", 1e300, False)],
         "Proposed value for producer_byte_rate is too large for a LONG."),
        ("an IP key on a client id", [(CLIENT, n + "g")], [("connection_creation_rate", 5.0, False)],
         "Invalid configuration key connection_creation_rate"),
        ("an empty entity", [], [("producer_byte_rate", 5.0, False)], "Invalid empty client quota entity"),
        ("an unknown entity type", [("foo", n + "h")], [("producer_byte_rate", 5.0, False)],
         "Unhandled client quota entity type: foo"),
        ("an empty client id", [(CLIENT, "")], [("producer_byte_rate", 5.0, False)], "Empty client-id not supported"),
        ("an empty user", [(USER, "")], [("producer_byte_rate", 5.0, False)], "Empty user not supported"),
        ("a user with an IP", [(USER, n + "i"), (IP, "127.0.0.1")], [("producer_byte_rate", 5.0, False)],
         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        ("one key twice", [(CLIENT, n + "j")], [("producer_byte_rate", 5.0, False), ("producer_byte_rate", 6.0, False)],
         f"Ignoring duplicate entity ClientQuotaEntity(entries={{client-id={n}j}})"),
    ]
    for what, pairs, ops, message in cases:
        got = alter_raw(qb.port, [(pairs, ops)], flex=flex)
        assert got == [(INVALID_REQUEST, message, entity(*pairs))], f"{what}: {got}"
    # one request, entries judged one by one: the valid one is applied
    ok, bad = n + "-ok", n + "-bad"
    got = alter_raw(qb.port, [([(CLIENT, ok)], [("producer_byte_rate", 5000.0, False)]),
                              ([(CLIENT, bad)], [("foo", 1.0, False)])], flex=flex)
    assert sorted(got, key=str) == sorted([(0, None, entity((CLIENT, ok))),
                                           (INVALID_REQUEST, "Invalid configuration key foo", entity((CLIENT, bad)))],
                                          key=str), got
    await_quotas(qb, entity((CLIENT, ok)), {"producer_byte_rate": 5000.0})
    # the same entity twice in one request: one answer, the refusal of the second entry, yet the
    # first entry is applied
    dup = n + "-dup"
    got = alter_raw(qb.port, [([(CLIENT, dup)], [("producer_byte_rate", 5000.0, False)]),
                              ([(CLIENT, dup)], [("consumer_byte_rate", 6000.0, False)])], flex=flex)
    assert got == [(INVALID_REQUEST, f"Ignoring duplicate entity ClientQuotaEntity(entries={{client-id={dup}}})",
                     entity((CLIENT, dup)))], got
    await_quotas(qb, entity((CLIENT, dup)), {"producer_byte_rate": 5000.0})
    # validate_only: checked, not applied
    vo = n + "-vo"
    assert alter_raw(qb.port, [([(CLIENT, vo)], [("producer_byte_rate", 5000.0, False)])], validate_only=True,
                     flex=flex) == [(0, None, entity((CLIENT, vo)))]
    assert alter_raw(qb.port, [([(CLIENT, vo)], [("producer_byte_rate", -1.0, False)])], validate_only=True,
                     flex=flex) == [(INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0",
                                     entity((CLIENT, vo)))]
    # fractional and huge request percentages are fine; removing what is not set is fine
    pct = n + "-pct"
    assert alter_raw(qb.port, [([(CLIENT, pct)], [("request_percentage", 0.5, False),
                                                   ("controller_mutation_rate", 1e9, False)])], flex=flex) == \
        [(0, None, entity((CLIENT, pct)))]
    assert alter_raw(qb.port, [([(CLIENT, n + "-none")], [("producer_byte_rate", 0.0, True)])], flex=flex) == \
        [(0, None, entity((CLIENT, n + "-none")))]
    await_quotas(qb, entity((CLIENT, pct)), {"request_percentage": 0.5, "controller_mutation_rate": 1e9})
    # nothing else was made (checked after the valid changes show: they were applied after the refusals)
    mine = {e for e in everything(qb) if any(name is not None and name.startswith(n) for _, name in e)}
    made = [entity((CLIENT, ok)), entity((CLIENT, dup)), entity((CLIENT, pct))]
    assert mine == set(made), mine
    clear_quotas(qb, made)


def test_describe_client_quotas_filters(qb):
    """A set of entities of every shape (the defaults for a moment, with values nothing reaches),
    described with every kind of filter; the answers must be what Kafka's rules give on the broker's
    whole state (other tests' entities included), and the entities of this test exactly as listed."""
    a, b, c = uid("fa"), uid("fb"), uid("fc")
    shapes = [entity((USER, a)), entity((USER, None)), entity((USER, a), (CLIENT, c)),
              entity((USER, a), (CLIENT, None)), entity((USER, None), (CLIENT, c)),
              entity((USER, None), (CLIENT, None)), entity((CLIENT, c)), entity((CLIENT, None)),
              entity((USER, b), (CLIENT, c))]
    values = {e: {"producer_byte_rate": float(900000000 + i)} for i, e in enumerate(shapes)}
    try:
        got = alter_raw(qb.port, [(list(e), [(k, v, False) for k, v in vals.items()]) for e, vals in values.items()])
        assert sorted(got, key=str) == sorted([(0, None, e) for e in shapes], key=str), got
        wait_until(lambda: all(everything(qb).get(e) == v for e, v in values.items()), timeout=SETTLE_TIMEOUT,
                   interval=0.1, what="all the filter test's entities to show")
        state = everything(qb)
        filters: List[Tuple[List[Component], bool, List[Entity]]] = [
            # (components, strict, this test's entities it must return)
            ([(USER, EXACT, a)], False, [shapes[0], shapes[2], shapes[3]]),
            ([(USER, EXACT, a)], True, [shapes[0]]),
            ([(USER, DEFAULT, None)], False, [shapes[1], shapes[4], shapes[5]]),
            ([(USER, DEFAULT, None)], True, [shapes[1]]),
            ([(USER, ANY, None)], True, [shapes[0], shapes[1]]),
            ([(USER, ANY, None)], False, [shapes[0], shapes[1], shapes[2], shapes[3], shapes[4], shapes[5], shapes[8]]),
            ([(CLIENT, EXACT, c)], False, [shapes[2], shapes[4], shapes[6], shapes[8]]),
            ([(CLIENT, EXACT, c)], True, [shapes[6]]),
            ([(CLIENT, DEFAULT, None)], True, [shapes[7]]),
            ([(CLIENT, ANY, None)], True, [shapes[6], shapes[7]]),
            ([(USER, EXACT, a), (CLIENT, ANY, None)], True, [shapes[2], shapes[3]]),
            ([(USER, ANY, None), (CLIENT, EXACT, c)], False, [shapes[2], shapes[4], shapes[8]]),
            ([(USER, DEFAULT, None), (CLIENT, DEFAULT, None)], False, [shapes[5]]),
            ([(CLIENT, EXACT, c), (USER, EXACT, b)], True, [shapes[8]]),
            ([(USER, EXACT, uid("nobody"))], False, []),
            ([(IP, ANY, None)], False, []),
            ([], False, shapes),
            ([], True, []),
        ]
        for comps, strict, mine in filters:
            for flex in (False, True):
                err, msg, got = describe_raw(qb.port, comps, strict, flex)
                what = f"DescribeClientQuotas v{int(flex)} {comps} strict={strict}"
                assert (err, msg) == (0, ""), f"{what}: error {err} {msg!r}"
                assert got == model(state, comps, strict), f"{what}: {got}"
                assert {e for e in got if e in values} == set(mine), f"{what}: {sorted(got, key=str)}"
                assert all(got[e] == values[e] for e in mine)
    finally:
        clear_quotas(qb, shapes)


@pytest.mark.parametrize("flex", [False, True], ids=["v0", "v1"])
def test_describe_client_quotas_invalid_filters(qb, flex):
    cases = [
        ([(CLIENT, EXACT, None)], INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([(USER, DEFAULT, "x")], INVALID_REQUEST,
         "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
        ([(USER, ANY, "x")], INVALID_REQUEST,
         "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
        ([(USER, EXACT, "a"), (USER, EXACT, "b")], INVALID_REQUEST,
         "Entity type user cannot appear more than once in the filter."),
        ([(USER, 3, None)], INVALID_REQUEST, "Unknown match type 3"),
        ([("foo", ANY, None)], UNSUPPORTED_VERSION, "Unsupported entity type foo"),
    ]
    for comps, code, message in cases:
        assert describe_raw(qb.port, comps, False, flex) == (code, message, None), comps


# ================================================================== throughput with librdkafka
@pytest.mark.timeout(240)
def test_producer_throttled_to_client_quota(qb):
    """producer_byte_rate=1048576 on client.id Q: a producer with Q runs at 1 MB/s +-20% after its
    first second and librdkafka reports throttle time; a producer with another client.id, at the same
    time, is not held back (more than twice the quota) and reports none."""
    topic, other_topic = unique_topic("quota-prod"), unique_topic("quota-prod-free")
    make_topic(qb, topic)
    make_topic(qb, other_topic)
    q = uid("q-producer")
    set_quotas(qb, [(CLIENT, q)], {"producer_byte_rate": float(RATE)})

    def attempt(i: int) -> Tuple[Run, Run]:
        qi = q if i == 1 else q + "-2"
        if i > 1:
            set_quotas(qb, [(CLIENT, qi)], {"producer_byte_rate": float(RATE)})
        return in_parallel(lambda: produce_run(qb, topic, qi, PRODUCE_RECORDS, f"producer {qi} (1 MB/s quota)"),
                           lambda: produce_run(qb, other_topic, uid("free-producer"), PRODUCE_RECORDS,
                                               "producer without a quota"))

    slow, fast = measured(attempt, lambda s_, f_: within(s_.rate_after(), RATE, PRODUCE_BAND) and f_.rate() > 2 * RATE)
    assert within(slow.rate_after(), RATE, PRODUCE_BAND), f"not within {PRODUCE_BAND:.0%} of 1 MB/s: {slow.describe()}"
    assert slow.throttle_max > 0, f"librdkafka reported no throttle time: {slow.describe()}"
    assert fast.rate() > 2 * RATE, f"the producer without a quota was held back: {fast.describe()}"
    assert fast.throttle_max == 0, f"the producer without a quota reported throttle time: {fast.describe()}"
    clear_quotas(qb, [entity((CLIENT, q)), entity((CLIENT, q + "-2"))])


@pytest.mark.timeout(240)
def test_consumer_throttled_to_client_quota(qb):
    """consumer_byte_rate=1048576 on client.id Q: reading 7 MB already in the topic runs at 1 MB/s
    +-25% after the first second, with throttle time reported; another client.id reads the same
    records at the same time, fast and unthrottled."""
    topic = unique_topic("quota-fetch")
    make_topic(qb, topic)
    produce_run(qb, topic, uid("loader"), CONSUME_RECORDS, "loader")
    q = uid("q-consumer")
    set_quotas(qb, [(CLIENT, q)], {"consumer_byte_rate": float(RATE)})

    def attempt(i: int) -> Tuple[Run, Run]:
        qi = q if i == 1 else q + "-2"
        if i > 1:
            set_quotas(qb, [(CLIENT, qi)], {"consumer_byte_rate": float(RATE)})
        return in_parallel(lambda: consume_run(qb, topic, qi, CONSUME_RECORDS, f"consumer {qi} (1 MB/s quota)"),
                           lambda: consume_run(qb, topic, uid("free-consumer"), CONSUME_RECORDS,
                                               "consumer without a quota"))

    slow, fast = measured(attempt, lambda s_, f_: within(s_.rate_after(), RATE, FETCH_BAND) and f_.rate() > 2 * RATE)
    assert within(slow.rate_after(), RATE, FETCH_BAND), f"not within {FETCH_BAND:.0%} of 1 MB/s: {slow.describe()}"
    assert slow.throttle_max > 0, f"librdkafka reported no throttle time: {slow.describe()}"
    assert fast.rate() > 2 * RATE, f"the consumer without a quota was held back: {fast.describe()}"
    assert fast.throttle_max == 0, f"the consumer without a quota reported throttle time: {fast.describe()}"
    clear_quotas(qb, [entity((CLIENT, q)), entity((CLIENT, q + "-2"))])


# ================================================================== raw throttling and muting
SMALL_RATE = 51200                                   # bytes/s for the raw produce checks
BIG_BATCH = record_batch([os.urandom(VALUE) for _ in range(10)])  # ~100 KB: ~2 s of SMALL_RATE
TINY_BATCH = record_batch([b"tiny"])


def expected_throttle_ms(rate: float, batch: bytes = BIG_BATCH) -> float:
    """What one over-quota produce of BATCH costs at RATE on a fresh client: its size / the rate."""
    return len(batch) / rate * 1000


def test_raw_produce_throttle_time_then_muted(qb):
    topic = unique_topic("quota-raw-produce")
    make_topic(qb, topic)
    q = uid("q-raw")
    set_quotas(qb, [(CLIENT, q)], {"producer_byte_rate": float(SMALL_RATE)}, flex=True)
    want = expected_throttle_ms(SMALL_RATE)
    with raw(qb.port, q) as c1, raw(qb.port, q) as c2, raw(qb.port, uid("free-raw")) as c3:
        throttle, took = raw_produce(c1, topic, BIG_BATCH)
        print(f"100 KB at {SMALL_RATE} B/s: throttle_time_ms={throttle} (size/rate {want:.0f}), "
              f"answered in {took:.3f} s")
        assert 0.5 * want <= throttle <= 1.5 * want, f"throttle_time_ms {throttle}, want about {want:.0f}"
        assert took < 0.25 * throttle / 1000, f"the over-quota produce was answered after {took:.3f} s, not at once"
        # the next request on that connection waits out the throttle time (the broker mutes it) ...
        t0 = time.monotonic()
        corr = c1.send(0, 9, produce_body(topic, TINY_BATCH), flex=True)
        # ... while another connection with the same client id is answered at once, with throttle time
        # (the rate is the client id's), and another client id is not throttled at all
        th2, took2 = raw_produce(c2, topic, TINY_BATCH)
        th3, took3 = raw_produce(c3, topic, TINY_BATCH)
        second, _ = produce_result(c1.response(corr, flex=True))
        waited = time.monotonic() - t0
        print(f"same client id, other connection: throttle {th2} in {took2:.3f} s; other client id: throttle {th3} "
              f"in {took3:.3f} s; the muted connection's next request: answered after {waited:.3f} s "
              f"(throttle {second})")
        assert th2 > 0, "another connection with the same client id got no throttle time"
        assert took2 < 0.25 * throttle / 1000, f"another connection of the client id waited {took2:.3f} s"
        assert th3 == 0 and took3 < 0.25 * throttle / 1000, f"another client id: throttle {th3} after {took3:.3f} s"
        assert waited >= 0.8 * throttle / 1000, (
            f"the request after a throttle_time_ms={throttle} response was answered after {waited:.3f} s: not muted")
        assert waited <= throttle / 1000 + 5, f"the muted connection answered only after {waited:.3f} s"
    clear_quotas(qb, [entity((CLIENT, q))])


def test_raw_fetch_throttled_responses_are_empty(qb):
    """consumer_byte_rate=102400 and 10 KB batches: fetching them one request after another on one
    connection, the throttled answers carry throttle_time_ms and no records, and the fetch after one
    waits out its throttle time; the client still reads; another client id reads them all at once."""
    topic = unique_topic("quota-raw-fetch")
    make_topic(qb, topic)
    with raw(qb.port, uid("loader")) as p:
        for _ in range(20):
            raw_produce(p, topic, record_batch([os.urandom(VALUE)]))
    q = uid("q-raw-fetch")
    set_quotas(qb, [(CLIENT, q)], {"consumer_byte_rate": 102400.0})
    seen: List[Tuple[float, int, int]] = []  # (seconds to the answer, throttle_time_ms, record bytes)
    offset = 0
    with raw(qb.port, q) as c:
        for _ in range(16):
            r, took = c.timed(1, 4, fetch_body(topic, offset))
            throttle, parts = fetch_result(r)
            got = sum(len(recs) for err, recs in parts)
            assert all(err == 0 for err, _ in parts), parts
            seen.append((round(took, 3), throttle, got))
            if got:
                end = batches_end(parts[0][1])
                assert end is not None and end > offset, f"no whole batch in {got} bytes"
                offset = end
    print(f"fetches at 100 KB/s (seconds, throttle_time_ms, bytes): {seen}; read up to offset {offset}")
    throttled = [i for i, (_, th, _) in enumerate(seen) if th > 0]
    assert throttled, f"no fetch was throttled: {seen}"
    assert all(seen[i][2] == 0 for i in throttled), f"a throttled fetch carried records: {seen}"
    for i in throttled:
        if i + 1 < len(seen):
            assert seen[i + 1][0] >= 0.8 * seen[i][1] / 1000, \
                f"fetch {i + 1} was not held back by fetch {i}'s throttle: {seen}"
    assert offset >= 3, f"the throttled client read only {offset} records in 16 fetches: {seen}"
    with raw(qb.port, uid("free-fetch")) as c:
        throttle, parts = fetch_result(c.call(1, 4, fetch_body(topic, 0)))
    assert throttle == 0 and len(parts) == 1 and batches_end(parts[0][1]) == 20, \
        f"without a quota: throttle {throttle}, {[len(recs) for _, recs in parts]} bytes"
    clear_quotas(qb, [entity((CLIENT, q))])


# ================================================================== request_percentage
def test_request_percentage_quota(qb):
    r = uid("q-requests")
    out = configs_ok(qb, "--alter", "--add-config", "request_percentage=1", "--entity-type", "clients",
                     "--entity-name", r)
    assert out == f"Completed updating config for client {r}.\n"
    await_quotas(qb, entity((CLIENT, r)), {"request_percentage": 1.0})
    assert configs_ok(qb, "--describe", "--entity-type", "clients", "--entity-name", r) == \
        f"Quota configs for client-id '{r}' are request_percentage=1.0\n"

    def hammer(client_id: str, limit: int) -> List[Tuple[float, int]]:
        """Up to LIMIT Metadata v4 requests one after another (20 s at most), stopping after the fifth
        throttled answer: (seconds to the answer, throttle_time_ms) each."""
        out_: List[Tuple[float, int]] = []
        deadline = time.monotonic() + 20
        with raw(qb.port, client_id) as c:
            while len(out_) < limit and time.monotonic() < deadline and sum(th > 0 for _, th in out_) < 5:
                resp, took = c.timed(3, 4, METADATA_V4_ALL)
                out_.append((took, metadata_v4_throttle(resp)))
        return out_

    got = hammer(r, 400)
    throttled = [i for i, (_, th) in enumerate(got) if th > 0]
    print(f"request_percentage=1: {len(got)} Metadata requests, throttled: "
          f"{[(i, got[i][1]) for i in throttled]}, took {sum(t for t, _ in got):.2f} s")
    assert throttled, f"{len(got)} Metadata requests at request_percentage=1 got no throttle time"
    for i in throttled:
        if i + 1 < len(got):
            assert got[i + 1][0] >= 0.8 * got[i][1] / 1000 - 0.002, \
                f"request {i + 1} not held back by request {i}'s throttle_time_ms={got[i][1]}: " \
                f"took {got[i + 1][0]:.3f} s"
    free = hammer(uid("free-requests"), 100)
    assert all(th == 0 for _, th in free), f"a client id without a quota got throttle time: {free}"
    clear_quotas(qb, [entity((CLIENT, r))])


# ================================================================== precedence
def test_precedence_user_client_over_user_over_client(qb):
    """clients/cA 50 KB/s, users/alice 200 KB/s, clients/cB 50 KB/s with users/alice/clients/cB
    1 MB/s: the throttle time of one 100 KB produce tells which quota governs (size / quota): alice
    with cA -> the user's, bob with cA -> the client id's, alice with cB -> the pair's, an anonymous
    PLAINTEXT client with cB -> the client id's."""
    topic = unique_topic("quota-precedence")
    make_topic(qb, topic)
    ca, cb = uid("cA"), uid("cB")
    made = [entity((CLIENT, ca)), entity((USER, "alice")), entity((CLIENT, cb)), entity((USER, "alice"), (CLIENT, cb))]
    try:
        set_quotas(qb, [(CLIENT, ca)], {"producer_byte_rate": 51200.0})
        set_quotas(qb, [(USER, "alice")], {"producer_byte_rate": 204800.0})
        set_quotas(qb, [(CLIENT, cb)], {"producer_byte_rate": 51200.0})
        set_quotas(qb, [(USER, "alice"), (CLIENT, cb)], {"producer_byte_rate": 1048576.0}, flex=True)
        assert configs_ok(qb, "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                          "clients", "--entity-name", cb) == \
            f"Quota configs for user-principal 'alice', client-id '{cb}' are producer_byte_rate=1048576.0\n"
        err, msg, got = describe_raw(qb.port, [(USER, EXACT, "alice")])
        assert err == 0 and got is not None
        assert {e: v for e, v in got.items()} == {made[1]: {"producer_byte_rate": 204800.0},
                                                  made[3]: {"producer_byte_rate": 1048576.0}}, got
        cases = [("alice", ca, qb.sasl_port, 204800.0, "the user quota over the client-id quota"),
                 ("bob", ca, qb.sasl_port, 51200.0, "the client-id quota (bob has no user quota)"),
                 ("alice", cb, qb.sasl_port, 1048576.0, "the user+client-id quota over the user quota"),
                 (None, cb, qb.port, 51200.0, "the client-id quota (ANONYMOUS over PLAINTEXT)")]
        for user, client_id, port, rate, what in cases:
            with raw(port, client_id, user) as c:
                throttle, _ = raw_produce(c, topic, BIG_BATCH)
            want = expected_throttle_ms(rate)
            print(f"{user or 'ANONYMOUS'} with {client_id}: throttle_time_ms={throttle}, want ~{want:.0f} ({what})")
            assert 0.5 * want <= throttle <= 1.5 * want, \
                f"{user or 'ANONYMOUS'} with client id {client_id}: throttle_time_ms {throttle}, " \
                f"want ~{want:.0f}: {what}"
    finally:
        clear_quotas(qb, made)


# ================================================================== restart (last: it replaces the broker)
@pytest.mark.timeout(400)
def test_quotas_survive_a_restart(qb):
    topic = unique_topic("quota-restart")
    make_topic(qb, topic)
    z = uid("q-restart")
    kept = [entity((CLIENT, z)), entity((USER, "bob"), (CLIENT, z))]
    set_quotas(qb, [(CLIENT, z)], {"producer_byte_rate": float(SMALL_RATE), "consumer_byte_rate": 2097152.0})
    set_quotas(qb, [(USER, "bob"), (CLIENT, z)], {"request_percentage": 250.0})
    before = everything(qb)
    assert all(e in before for e in kept)
    old = qb.broker
    rc = old.stop(timeout=30)
    assert rc == 0, f"the broker exited {rc} on SIGTERM; stderr tail:\n{old.stderr_tail()}"
    qb.broker = Broker(settings=qb.settings, data_dir=qb.data).start()
    await_sasl(qb)
    wait_until(lambda: everything(qb) == before, timeout=SETTLE_TIMEOUT, interval=0.5,
               what="the same quotas after the restart")
    assert configs_ok(qb, "--describe", "--entity-type", "clients", "--entity-name", z) == \
        f"Quota configs for client-id '{z}' are consumer_byte_rate=2097152.0, producer_byte_rate=51200.0\n"
    want = expected_throttle_ms(SMALL_RATE)
    with raw(qb.port, z) as c:
        throttle, _ = raw_produce(c, topic, BIG_BATCH)
    with raw(qb.port, uid("free-restart")) as c:
        free, _ = raw_produce(c, topic, BIG_BATCH)
    print(f"after the restart: throttle_time_ms {throttle} (want ~{want:.0f}), without a quota {free}")
    assert 0.5 * want <= throttle <= 1.5 * want, f"after the restart: throttle_time_ms {throttle}, want ~{want:.0f}"
    assert free == 0
    clear_quotas(qb, kept)
