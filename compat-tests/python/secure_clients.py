"""Helpers shared by the TLS, SASL/PLAIN and SASL/SCRAM modules (test_tls.py, test_sasl.py,
test_scram.py); importing this starts no broker and runs no test.

- a broker with two listeners beside PLAINTEXT (--listen) and throwaway certificates from
  tls_material.py, for a module (secure_broker, sasl_broker);
- confluent-kafka (librdkafka) client configs and checks: create a topic, produce, consume, a
  round trip, "Metadata names this listener", a client that is refused;
- one raw Kafka connection speaking SaslHandshake/SaslAuthenticate by hand (Wire);
- Kafka's Java client: the 4.1.1 console producer and consumer (the java_cp fixture of
  conftest.py resolves their classpath with java_tools_classpath).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Type, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import REPO_ROOT, Broker, free_ports, unique_topic, wait_until
from tls_material import TlsMaterial, make_material

OP_TIMEOUT = 15.0     # seconds, for every single client operation that should succeed
LOGIN_SETTLE_TIMEOUT = 30.0  # seconds for a credential change to take effect (a metadata log)
LOGIN_PROBE_TIMEOUT = 3.0    # seconds one login probe waits for metadata
REFUSE_TIMEOUT = 5.0  # seconds a client refused its login gets to (not) fetch metadata
RAW_TIMEOUT = 5.0     # seconds for one raw-socket read
N = 100               # records per round trip

SASL_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
# error_cb codes allowed besides the expected one: librdkafka's own "all brokers down" summary
DOWN = {KafkaError._ALL_BROKERS_DOWN}

JAVA_DIR = REPO_ROOT / "compat-tests" / "java"
JAVA_TIMEOUT = 90.0  # seconds per console tool run
JAVA_OPTS = ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2-tools.properties'}"]


# ------------------------------------------------------------------ the broker
@dataclass
class SecureBroker:
    """A broker with two listeners beside PLAINTEXT, and its files."""
    broker: Broker              # a test may replace it (a restart on the same data dir)
    mat: TlsMaterial            # its certificates (work/tls)
    work: Path                  # removed at the end unless MILLRACE_KEEP_WORK is set
    ports: Tuple[int, int]      # the two listeners' ports, in the order of `listeners`
    settings: Dict[str, str]    # what it was started with (--set)
    data: Path                  # its data dir (work/data)

    @property
    def plain_port(self) -> int:
        assert self.broker.port is not None
        return self.broker.port


B = TypeVar("B", bound=SecureBroker)


def listener_port(i: int) -> property:
    """A SecureBroker subclass's name for the port of its listener I (0 or 1, as in `listeners`)."""
    return property(lambda self: self.ports[i])


def stop_checked(b: Broker) -> None:
    """Stop B; fail the tests if it had died during them."""
    died = not b.alive()
    rc = b.stop()
    if died:
        pytest.fail(f"broker process died during the tests (exit code {rc}); stderr tail:\n"
                    f"{b.stderr_tail()}", pytrace=False)


@contextmanager
def secure_broker(cls: Type[B], prefix: str, listeners: Tuple[str, str], protocol_map: str,
                  settings: Callable[[TlsMaterial], Dict[str, str]], **fields: object) -> Iterator[B]:
    """A CLS (a SecureBroker; FIELDS: its own fields) for a broker started with
        listeners=L1://127.0.0.1:P1,L2://127.0.0.1:P2      (LISTENERS, on free ports)
        listener.security.protocol.map=PROTOCOL_MAP
        ssl.keystore.type=PEM, ssl.keystore.location=server.pem
    and SETTINGS(its certificates) besides, in a temporary work dir named PREFIX...; stopped at
    the end (a broker that died during the tests fails them)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        mat = make_material(work / "tls")
        ports = free_ports(2)
        all_settings = {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in zip(listeners, ports)),
            "listener.security.protocol.map": protocol_map,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(mat.server),
            **settings(mat),
        }
        data = work / "data"
        b = Broker(settings=all_settings, data_dir=data).start()
        s = cls(broker=b, mat=mat, work=work, ports=(ports[0], ports[1]), settings=all_settings, data=data,
                **fields)
        try:
            yield s
        finally:
            stop_checked(s.broker)  # the one running now
    finally:
        if not os.environ.get("MILLRACE_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)


@dataclass
class SaslBroker(SecureBroker):
    """SASL_PLAINTEXT and SASL_SSL beside PLAINTEXT."""
    sasl_port = listener_port(0)
    sasl_ssl_port = listener_port(1)


@contextmanager
def sasl_broker(cls: Type[B], prefix: str, settings: Dict[str, str], **fields: object) -> Iterator[B]:
    """secure_broker with SASL_PLAINTEXT and SASL_SSL listeners and SETTINGS
    (sasl.enabled.mechanisms, JAAS lines, ...)."""
    with secure_broker(cls, prefix, ("SASL_PLAINTEXT", "SASL_SSL"), SASL_PROTOCOL_MAP,
                       lambda mat: settings, **fields) as s:
        yield s


# ------------------------------------------------------------------ client configs
def plain_conf(s: SecureBroker) -> Dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{s.plain_port}"}


def pem_truststore(ca: Path) -> Dict[str, str]:
    """A Java client's trust (client properties): CA as a PEM trust store."""
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)}


def trusting(ca: Path) -> Dict[str, object]:
    """A TLS client's trust: CA, and the server's certificate must name 127.0.0.1 (librdkafka's
    default since 2.0, stated)."""
    return {"ssl.ca.location": str(ca), "ssl.endpoint.identification.algorithm": "https"}


def sasl_client(s: SaslBroker, mechanism: str, user: str, password: str, ssl: bool = False) -> Dict[str, object]:
    """SASL_PLAINTEXT (SASL_SSL when SSL) as USER with MECHANISM and PASSWORD."""
    conf: Dict[str, object] = {
        "bootstrap.servers": f"127.0.0.1:{s.sasl_ssl_port if ssl else s.sasl_port}",
        "security.protocol": "SASL_SSL" if ssl else "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if ssl:
        conf.update(trusting(s.mat.ca))
    return conf


# ------------------------------------------------------------------ clients
def admin(conf: Dict[str, object]) -> AdminClient:
    return AdminClient({**conf, "socket.timeout.ms": 10000})


def only_broker(md) -> Tuple[str, int]:
    assert len(md.brokers) == 1, f"expected exactly one broker, got {md.brokers}"
    b = next(iter(md.brokers.values()))
    return b.host, b.port


def create_topic(conf: Dict[str, object], name: str) -> None:
    adm = admin(conf)
    futures = adm.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                operation_timeout=10, request_timeout=OP_TIMEOUT)
    futures[name].result(timeout=OP_TIMEOUT)

    def ready():
        t = adm.list_topics(topic=name, timeout=OP_TIMEOUT).topics.get(name)
        return t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values())
    wait_until(ready, timeout=OP_TIMEOUT, what=f"topic {name} in metadata with a leader")


def produce(conf: Dict[str, object], topic: str, values: List[bytes]) -> List[int]:
    """Produce VALUES (keys k0, k1, ...) to partition 0 and flush; returns the offsets."""
    p = Producer({**conf, "enable.idempotence": False, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 20000})
    offsets: Dict[int, int] = {}
    errors: List[str] = []

    def on_delivery(i):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                offsets[i] = msg.offset()
        return cb

    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v, partition=0, on_delivery=on_delivery(i))
        p.poll(0)
    remaining = p.flush(30)
    assert remaining == 0, f"{remaining} records still undelivered after 30 s"
    assert not errors, f"delivery failed: {errors[:5]}"
    return [offsets[i] for i in range(len(values))]


def consume_all(conf: Dict[str, object], topic: str, count: int) -> List[Tuple[bytes, bytes]]:
    """(key, value) of the first COUNT records of partition 0; then no more before its end."""
    c = Consumer({**conf, "group.id": "compat-secure-unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: List[Tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 30
        eof = False
        while not (len(out) >= count and eof):
            assert time.monotonic() < deadline, f"got {len(out)} of {count} records (eof={eof}) within 30 s"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof = len(out) >= count
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append((msg.key(), msg.value()))
        return out
    finally:
        c.close()


def roundtrip(conf: Dict[str, object], suite: str, label: str) -> None:
    """Create a topic (SUITE-LABEL-...), produce N records and read them back, all through CONF."""
    topic = unique_topic(f"{suite}-{label}")
    create_topic(conf, topic)
    values = [f"{label} record {i}".encode() for i in range(N)]
    assert produce(conf, topic, values) == list(range(N))
    assert consume_all(conf, topic, N) == [(b"k%d" % i, v) for i, v in enumerate(values)]


def records_cross_listeners(s: SecureBroker, suite: str, writer: Dict[str, object],
                            readers: Iterable[Dict[str, object]]) -> None:
    """One log behind every listener: 10 records written through WRITER (into a topic made over
    PLAINTEXT) are read back, the same, through each of READERS."""
    topic = unique_topic(f"{suite}-cross")
    create_topic(plain_conf(s), topic)
    values = [b"cross %d" % i for i in range(10)]
    assert produce(writer, topic, values) == list(range(10))
    want = [(b"k%d" % i, v) for i, v in enumerate(values)]
    for reader in readers:
        assert consume_all(reader, topic, 10) == want


def serves(conf: Dict[str, object], port: int, label: str, topic: Optional[str] = None) -> None:
    """CONF's client gets Metadata naming PORT and has a record taken (into TOPIC, else a new one)."""
    md = admin(conf).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", port), f"{label}: Metadata does not name the listener's port"
    assert len(produce(conf, topic or unique_topic("serves"), [label.encode()])) == 1, label


def still_served(suite: str, listeners: Iterable[Tuple[str, Dict[str, object], int]]) -> None:
    """Nothing else was affected by a refusal: each (NAME, CONF, PORT) listener answers Metadata
    with its own port and takes a record."""
    topic = unique_topic(f"{suite}-still")
    for name, conf, port in listeners:
        serves(conf, port, f"{name} listener after the refusal", topic)


# ------------------------------------------------------------------ logins
def logs_in(conf: Dict[str, object]) -> bool:
    """One bounded attempt: does CONF's client get metadata within LOGIN_PROBE_TIMEOUT?"""
    adm = AdminClient({**conf, "log_level": 0, "reconnect.backoff.ms": 200})
    try:
        adm.list_topics(timeout=LOGIN_PROBE_TIMEOUT)
        return True
    except KafkaException:
        return False
    finally:
        del adm


def await_login(conf: Dict[str, object], ok: bool) -> None:
    """Wait (bounded) until CONF's client logs in (OK) or is refused (not OK): a credential change
    reaches Kafka's authenticator through the metadata log, after the admin call returns."""
    who = f"{conf['sasl.username']} with {conf['sasl.mechanisms']} on {conf['bootstrap.servers']}"
    wait_until(lambda: logs_in(conf) == ok, timeout=LOGIN_SETTLE_TIMEOUT, interval=0.2,
               what=f"{who} to {'log in' if ok else 'be refused'}")


# ------------------------------------------------------------------ refused clients
def refused_metadata(conf: Dict[str, object], timeout: float, log_level: int = 0,
                     until: Optional[int] = None) -> List[KafkaError]:
    """CONF's client gets no metadata within TIMEOUT: list_topics() raises _TRANSPORT, in bounded
    time. Returns the errors error_cb reported: those delivered within 0.5 s after, or, given
    UNTIL (an error code), those up to the first one with that code (which must come within 5 s)."""
    errors: List[KafkaError] = []
    adm = AdminClient({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 200,
                       "log_level": log_level})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as info:
        adm.list_topics(timeout=timeout)
    took = time.monotonic() - t0
    err = info.value.args[0]
    del info  # the traceback's frame cycle would keep the client reconnecting until a GC
    assert err.code() == KafkaError._TRANSPORT, f"list_topics failed with {err}, want _TRANSPORT"
    assert took < timeout + 5, f"the refusal took {took:.1f} s"
    try:
        adm.poll(0.5 if until is None else 0.2)  # delivers the error callbacks
        deadline = time.monotonic() + 5.0
        while until is not None and not any(e.code() == until for e in errors):
            assert time.monotonic() < deadline, (
                f"no error_cb error {KafkaError(until).name()} within 5 s: {[e.str() for e in errors][:3]}")
            adm.poll(0.2)
    finally:
        del adm
    return errors


def refused_connection(conf: Dict[str, object], timeout: float, allowed: Iterable[int],
                       log_level: int = 0) -> List[KafkaError]:
    """refused_metadata, and error_cb reported nothing but the connection-level codes ALLOWED."""
    allowed = set(allowed)
    errors = refused_metadata(conf, timeout, log_level)
    names = sorted({e.name() for e in errors})
    assert all(e.code() in allowed for e in errors), (
        f"error_cb reported {names}, want only connection-level errors: "
        f"{[e.str() for e in errors if e.code() not in allowed][:3]}")
    return errors


def without_timing(text: str) -> str:
    """librdkafka's error text without its "(after Nms in state X[, N identical error(s)
    suppressed])" tail, which differs from one attempt to the next."""
    return re.sub(r"\s*\(after \d+ms in state [A-Z_]+.*\)$", "", text)


def refused_login(conf: Dict[str, object], want_code: int, want_text: Optional[str] = None) -> List[str]:
    """CONF's client gets no metadata within REFUSE_TIMEOUT (refused_metadata); error_cb reports
    WANT_CODE (an error whose text matches the regex WANT_TEXT, if given) and nothing but
    WANT_CODE and librdkafka's "all brokers down". Returns the distinct texts of the WANT_CODE
    errors, without their timing tails."""
    errors = refused_metadata(conf, REFUSE_TIMEOUT, until=want_code)
    names = sorted({e.name() for e in errors})
    allowed = {want_code} | DOWN
    assert all(e.code() in allowed for e in errors), (
        f"error_cb reported {names}, want only {KafkaError(want_code).name()} (and _ALL_BROKERS_DOWN): "
        f"{[e.str() for e in errors if e.code() not in allowed][:3]}")
    texts = sorted({without_timing(e.str()) for e in errors if e.code() == want_code})
    if want_text is not None:
        assert all(re.search(want_text, t) for t in texts), f"error_cb texts {texts}, want {want_text!r}"
    return texts


# ------------------------------------------------------------------ raw Kafka wire
def wire_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class Wire:
    """One TCP connection speaking the Kafka protocol by hand (request header v1, response
    header v0: the non-flexible versions used here)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=RAW_TIMEOUT)
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, body: bytes) -> int:
        self.corr += 1
        msg = struct.pack(">hhi", api_key, version, self.corr) + wire_str("compat-sasl-raw") + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        return self.corr

    def read_exact(self, n: int) -> Optional[bytes]:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return out

    def response(self, corr: int) -> Optional[bytes]:
        """The body of the response to CORR; None if the broker closed the connection instead.
        A silent, open connection fails (socket.timeout after RAW_TIMEOUT)."""
        head = self.read_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        frame = self.read_exact(size)
        assert frame is not None, "the connection closed in the middle of a response"
        (got,) = struct.unpack_from(">i", frame)
        assert got == corr, f"response correlation id {got}, want {corr}"
        return frame[4:]

    def call(self, api_key: int, version: int, body: bytes) -> Optional[bytes]:
        return self.response(self.send(api_key, version, body))

    def api_versions(self) -> Dict[int, Tuple[int, int]]:
        """ApiVersions v0: {api_key: (min, max)}; fails on an error code or a closed connection."""
        body = self.call(18, 0, b"")
        assert body is not None, "ApiVersions got the connection closed"
        err, n = struct.unpack_from(">hi", body)
        assert err == 0, f"ApiVersions error code {err}"
        return {k: (lo, hi) for k, lo, hi in (struct.unpack_from(">hhh", body, 6 + 6 * i) for i in range(n))}

    def metadata(self) -> Optional[bytes]:
        """Metadata v1 for all topics (null array): the response body, or None on a close."""
        return self.call(3, 1, struct.pack(">i", -1))

    def handshake(self, mechanism: str) -> Tuple[int, List[str]]:
        """SaslHandshake v1: (error code, enabled mechanisms)."""
        body = self.call(17, 1, wire_str(mechanism))
        assert body is not None, "SaslHandshake got the connection closed"
        err, n = struct.unpack_from(">hi", body)
        mechs, off = [], 6
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", body, off)
            mechs.append(body[off + 2:off + 2 + ln].decode())
            off += 2 + ln
        return err, mechs

    def authenticate(self, user: str, password: str) -> Tuple[int, Optional[str], bytes, int]:
        """SaslAuthenticate v1 with a PLAIN token (RFC 4616: authzid NUL authcid NUL passwd):
        (error code, error message, auth bytes, session_lifetime_ms)."""
        token = b"\0" + user.encode() + b"\0" + password.encode()
        body = self.call(36, 1, struct.pack(">i", len(token)) + token)
        assert body is not None, "SaslAuthenticate got the connection closed with no response"
        (err,) = struct.unpack_from(">h", body)
        (mlen,) = struct.unpack_from(">h", body, 2)
        msg = None if mlen < 0 else body[4:4 + mlen].decode()
        off = 4 + max(mlen, 0)
        (alen,) = struct.unpack_from(">i", body, off)
        auth = body[off + 4:off + 4 + max(alen, 0)]
        (lifetime,) = struct.unpack_from(">q", body, off + 4 + max(alen, 0))
        return err, msg, auth, lifetime

    def login(self, user: str, password: str) -> int:
        """SaslHandshake for PLAIN + SaslAuthenticate as USER; returns session_lifetime_ms."""
        assert self.handshake("PLAIN") == (0, ["PLAIN"])
        err, msg, _, lifetime = self.authenticate(user, password)
        assert err == 0, f"SaslAuthenticate as {user}: error {err} {msg!r}"
        return lifetime

    def closed_by_broker(self, within: float = RAW_TIMEOUT) -> bool:
        """True once the broker closes the connection (EOF or reset) within WITHIN seconds;
        False if it stays open and silent; fails if it sends anything."""
        self.sock.settimeout(within)
        try:
            data = self.sock.recv(64)
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
        finally:
            self.sock.settimeout(RAW_TIMEOUT)
        assert data == b"", f"the broker sent {data!r} where it should close the connection"
        return True


@contextmanager
def wire(port: int) -> Iterator[Wire]:
    w = Wire(port)
    try:
        yield w
    finally:
        w.close()


# ------------------------------------------------------------------ Kafka's Java client
def java_tools_classpath() -> str:
    """The Kafka 4.1.1 CLI tools classpath, resolved (mvn, once) by the Java suite's
    java_dist_classpath (compat-tests/java/common.sh, dist/pom.xml): the reference broker's jars
    (.work/kafka-ref/libs) lack kafka-tools, where ConsoleProducer/ConsoleConsumer live in 4.x.
    Fails the test (from a fixture: errors it) when java or the jars are missing."""
    if shutil.which("java") is None:
        pytest.fail("java is not installed (Java 17+ needed for the Kafka console tools)", pytrace=False)
    script = 'source "$1/compat-tests/java/common.sh" >&2 && java_dist_classpath >&2 && printf %s "$DIST_CP"'
    try:
        proc = subprocess.run(["bash", "-c", script, "java_cp", str(REPO_ROOT)], capture_output=True,
                              text=True, timeout=960, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("resolving the Kafka tools jars (mvn) took more than 960 s", pytrace=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        pytest.fail("could not resolve the Kafka 4.1.1 CLI tools jars (compat-tests/java/dist/pom.xml "
                    "via java/common.sh java_dist_classpath; needs mvn with Maven Central or a filled "
                    f"~/.m2): rc={proc.returncode}\n{proc.stderr[-3000:]}", pytrace=False)
    return proc.stdout.strip()


def java_tool(cp: str, cls: str, args: List[str], stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["java", *JAVA_OPTS, "-cp", cp, cls, *args], input=stdin,
                              capture_output=True, text=True, timeout=JAVA_TIMEOUT,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{cls} ran longer than {JAVA_TIMEOUT} s; stderr: {exc.stderr!r}") from None


def java_console_roundtrip(s: SecureBroker, cp: str, port: int, props: Dict[str, str], suite: str,
                           label: str) -> None:
    """50 lines through Kafka's ConsoleProducer and back with its ConsoleConsumer, both on PORT
    with the client properties PROPS, into a topic SUITE-java-LABEL-... made over PLAINTEXT."""
    topic = unique_topic(f"{suite}-java-{label}")
    create_topic(plain_conf(s), topic)
    cfg = s.work / f"java-{label}.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    lines = [f"java {label} line {i}" for i in range(50)]
    bootstrap = f"127.0.0.1:{port}"
    prod = java_tool(cp, "org.apache.kafka.tools.ConsoleProducer",
                     ["--bootstrap-server", bootstrap, "--topic", topic, "--producer.config", str(cfg)],
                     stdin="".join(line + "\n" for line in lines))
    assert prod.returncode == 0, f"ConsoleProducer exited {prod.returncode}: {prod.stderr[-3000:]}"
    cons = java_tool(cp, "org.apache.kafka.tools.consumer.ConsoleConsumer",
                     ["--bootstrap-server", bootstrap, "--topic", topic, "--consumer.config", str(cfg),
                      "--partition", "0", "--offset", "earliest", "--max-messages", str(len(lines)),
                      "--timeout-ms", "30000"])
    assert cons.returncode == 0, f"ConsoleConsumer exited {cons.returncode}: {cons.stderr[-3000:]}"
    assert cons.stdout.splitlines() == lines, f"ConsoleConsumer read {cons.stdout[:500]!r}; stderr: {cons.stderr[-2000:]}"
    # and the records are really there, whoever reads them
    assert consume_all(plain_conf(s), topic, len(lines)) == [(None, line.encode()) for line in lines]
