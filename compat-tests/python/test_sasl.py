"""SASL/PLAIN listeners: SASL_PLAINTEXT and SASL_SSL beside PLAINTEXT, with Kafka's own config names.

A broker for the module, started with
    --listen 127.0.0.1:0                     (the PLAINTEXT listener, also the inter-broker one)
    listeners=SASL_PLAINTEXT://127.0.0.1:P1,SASL_SSL://127.0.0.1:P2
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
    sasl.enabled.mechanisms=PLAIN
    listener.name.{sasl_plaintext,sasl_ssl}.plain.sasl.jaas.config=
        org.apache.kafka.common.security.plain.PlainLoginModule required
        user_alice="alice-secret" user_bob="bob-secret";
    ssl.keystore.type=PEM, ssl.keystore.location=server.pem   (tls_material.py, for SASL_SSL)
and a second one, the same plus connections.max.reauth.ms=5000 (KIP-368), for the
re-authentication tests only.

Checks: confluent-kafka (librdkafka) produces and consumes as alice over SASL_PLAINTEXT and
SASL_SSL, and Metadata names the port the client came in on; bob (the JAAS line's second user)
authenticates too; one log behind every listener. Refusals, each bounded in time and each followed
by a check that PLAINTEXT, SASL_PLAINTEXT and SASL_SSL (as alice) still work: a wrong password, an
unknown user (the same error, word for word), sasl.mechanisms=SCRAM-SHA-256 (not enabled), and a
PLAINTEXT client on the SASL_PLAINTEXT port. On raw sockets: before authentication ApiVersions is
answered (SaslHandshake from v0, SaslAuthenticate from v0) and Metadata gets the connection closed
with no response; SaslHandshake v0 followed by a bare PLAIN token; SaslHandshake v1/SaslAuthenticate
outcomes (0 with session_lifetime_ms 0 by default; 58 with one message for a wrong password and an
unknown user, then the connection closes; 33 with the enabled mechanisms for SCRAM-SHA-256, then
the connection closes); with connections.max.reauth.ms=5000: session_lifetime_ms=5000, a request
after the session's end closes the connection, re-authenticating on the connection extends it, and
a librdkafka producer and consumer keep working for 12 s (re-authenticating each connection at
least twice, with no disconnect and no error). Kafka's Java client (the 4.1.1 console producer and
consumer) over SASL_PLAINTEXT and SASL_SSL with a JAAS line in its properties file.

What librdkafka 2.16 reports against Apache Kafka 4.1.1 (the classes asserted here): for a wrong
password or an unknown user, list_topics() raises KafkaException _TRANSPORT ("Failed to get
metadata: Local: Broker transport failure") once its timeout passes, and error_cb gets
_AUTHENTICATION "<broker>: SASL authentication error: Authentication failed: Invalid username or
password (after Nms in state AUTH_REQ)" on every reconnect (and _ALL_BROKERS_DOWN); for
SCRAM-SHA-256, _AUTHENTICATION "<broker>: SASL SCRAM-SHA-256 mechanism handshake failed: Broker:
Unsupported SASL mechanism: broker's supported mechanisms: PLAIN (after Nms in state
AUTH_HANDSHAKE)"; for a PLAINTEXT client on the SASL_PLAINTEXT port, ApiVersions is answered, the
Metadata request gets the connection closed ("Disconnected: connection closed by peer ... in state
UP", a log line), list_topics() raises _TRANSPORT at once and error_cb only sees
_ALL_BROKERS_DOWN. Kafka answers a failed SaslAuthenticate (and an unsupported mechanism) about
300 ms after the request (it delays failed authentications: connection.failed.authentication.
delay.ms); a successful SaslAuthenticate carries an empty (not null) error message. Not asserted
here: Kafka also closes the connection on a second ApiVersions before authentication and on a
SaslAuthenticate without a SaslHandshake. The broker's JAAS line needs no username/password here
(the inter-broker listener is PLAINTEXT): Kafka 4.1.1 starts without them.

Runs against Apache Kafka 4.1.1 too (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import struct
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from millrace import Broker, free_ports, unique_topic, wait_until
# The TLS module's client helpers (plain dict configs in, nothing TLS-specific) and its Java
# tools fixture; importing them runs none of its tests and starts no broker.
from test_tls import OP_TIMEOUT, admin, consume_all, create_topic, java_tool, only_broker, produce
from test_tls import java_cp  # noqa: F401  (pytest fixture, used by the Java tests below)
from tls_material import TlsMaterial, make_material

REFUSE_TIMEOUT = 5.0   # seconds a refused client gets to (not) fetch metadata
RAW_TIMEOUT = 5.0      # seconds for one raw-socket read
REAUTH_MS = 5000       # connections.max.reauth.ms of the re-authentication broker
REAUTH_RUN_S = 12.0    # seconds the librdkafka pair runs on it (about three session lifetimes)
N = 100                # records per round trip

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
BAD_CREDENTIALS = "Authentication failed: Invalid username or password"

# error_cb codes allowed besides the expected one: librdkafka's own "all brokers down" summary
DOWN = {KafkaError._ALL_BROKERS_DOWN}
TRANSPORT_CLASS = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


# ------------------------------------------------------------------ the brokers
@dataclass
class Sasl:
    broker: Broker
    mat: TlsMaterial
    work: Path
    sasl_port: int      # SASL_PLAINTEXT
    sasl_ssl_port: int  # SASL_SSL

    @property
    def plain_port(self) -> int:
        assert self.broker.port is not None
        return self.broker.port


@contextmanager
def sasl_broker(prefix: str, extra: Optional[Dict[str, str]] = None) -> Iterator[Sasl]:
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        mat = make_material(work / "tls")
        sasl_port, sasl_ssl_port = free_ports(2)
        b = Broker(settings={
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(mat.server),
            **(extra or {}),
        }).start()
        try:
            yield Sasl(b, mat, work, sasl_port, sasl_ssl_port)
        finally:
            died = not b.alive()
            rc = b.stop()
            if died:
                pytest.fail(f"broker process died during the tests (exit code {rc}); stderr tail:\n"
                            f"{b.stderr_tail()}", pytrace=False)
    finally:
        if not os.environ.get("MILLRACE_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def sasl():
    """SASL_PLAINTEXT and SASL_SSL, no re-authentication (connections.max.reauth.ms default 0)."""
    with sasl_broker("millrace-sasl-") as s:
        yield s


@pytest.fixture(scope="module")
def reauth():
    """The same listeners with connections.max.reauth.ms=5000."""
    with sasl_broker("millrace-sasl-reauth-", {"connections.max.reauth.ms": str(REAUTH_MS)}) as s:
        yield s


# ------------------------------------------------------------------ client configs
def plain_conf(s: Sasl) -> Dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{s.plain_port}"}


def sasl_conf(s: Sasl, user: str = "alice", password: Optional[str] = None,
              mechanism: str = "PLAIN") -> Dict[str, object]:
    """SASL_PLAINTEXT as USER (password from the JAAS line unless given)."""
    return {
        "bootstrap.servers": f"127.0.0.1:{s.sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": USERS.get(user, "no-such-user") if password is None else password,
    }


def sasl_ssl_conf(s: Sasl, user: str = "alice", password: Optional[str] = None) -> Dict[str, object]:
    return {
        **sasl_conf(s, user, password),
        "bootstrap.servers": f"127.0.0.1:{s.sasl_ssl_port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(s.mat.ca),
        # librdkafka's default since 2.0, stated: the server's certificate must name 127.0.0.1
        "ssl.endpoint.identification.algorithm": "https",
    }


# ------------------------------------------------------------------ helpers
def roundtrip(conf: Dict[str, object], label: str) -> None:
    """Create a topic, produce N records and read them back, all through CONF."""
    topic = unique_topic(f"sasl-{label}")
    create_topic(conf, topic)
    values = [f"{label} record {i}".encode() for i in range(N)]
    assert produce(conf, topic, values) == list(range(N))
    got = consume_all(conf, topic, N)
    assert got == [(b"k%d" % i, v) for i, v in enumerate(values)]


def still_served(s: Sasl) -> None:
    """Nothing else was affected: PLAINTEXT, SASL_PLAINTEXT and SASL_SSL (as alice) answer
    Metadata with their own port and take a record."""
    topic = unique_topic("sasl-still")
    for name, conf, port in (("PLAINTEXT", plain_conf(s), s.plain_port),
                             ("SASL_PLAINTEXT", sasl_conf(s), s.sasl_port),
                             ("SASL_SSL", sasl_ssl_conf(s), s.sasl_ssl_port)):
        md = admin(conf).list_topics(timeout=OP_TIMEOUT)
        assert only_broker(md) == ("127.0.0.1", port), f"{name} listener after the refusal"
        assert len(produce(conf, topic, [name.encode()])) == 1, f"{name} listener after the refusal"


def without_timing(text: str) -> str:
    """librdkafka's error text without its "(after Nms in state X[, N identical error(s)
    suppressed])" tail, which differs from one attempt to the next."""
    return re.sub(r"\s*\(after \d+ms in state [A-Z_]+.*\)$", "", text)


def refused(conf: Dict[str, object], want_code: int, want_text: Optional[str] = None) -> List[str]:
    """CONF's client gets no metadata within REFUSE_TIMEOUT (list_topics raises _TRANSPORT, in
    bounded time); error_cb reports WANT_CODE (an error whose text matches the regex WANT_TEXT,
    if given) and nothing but WANT_CODE and librdkafka's "all brokers down". Returns the distinct
    texts of the WANT_CODE errors, without their timing tails."""
    errors: List[KafkaError] = []
    adm = AdminClient({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 200,
                       "log_level": 0})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as info:
        adm.list_topics(timeout=REFUSE_TIMEOUT)
    took = time.monotonic() - t0
    err = info.value.args[0]
    del info  # the traceback's frame cycle would keep the client reconnecting until a GC
    assert err.code() == KafkaError._TRANSPORT, f"list_topics failed with {err}, want _TRANSPORT"
    assert took < REFUSE_TIMEOUT + 5, f"the refusal took {took:.1f} s"

    def reported():
        adm.poll(0.2)  # delivers the error callbacks
        return any(e.code() == want_code for e in errors)
    try:
        wait_until(reported, timeout=5.0, interval=0.05, what=f"an error_cb error {KafkaError(want_code).name()}")
    finally:
        del adm
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
def _str(s: str) -> bytes:
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
        msg = struct.pack(">hhi", api_key, version, self.corr) + _str("compat-sasl-raw") + body
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
        body = self.call(17, 1, _str(mechanism))
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

    def login(self, user: str = "alice") -> int:
        """Handshake + authenticate as USER; returns session_lifetime_ms."""
        assert self.handshake("PLAIN") == (0, ["PLAIN"])
        err, msg, _, lifetime = self.authenticate(user, USERS[user])
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


# ------------------------------------------------------------------ SASL_PLAINTEXT and SASL_SSL round trips
def test_sasl_plaintext_metadata_names_the_sasl_plaintext_listener(sasl):
    md = admin(sasl_conf(sasl)).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", sasl.sasl_port), \
        "a client bootstrapped on SASL_PLAINTEXT must stay on SASL_PLAINTEXT"


def test_sasl_ssl_metadata_names_the_sasl_ssl_listener(sasl):
    md = admin(sasl_ssl_conf(sasl)).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", sasl.sasl_ssl_port), \
        "a client bootstrapped on SASL_SSL must stay on SASL_SSL"


def test_sasl_plaintext_produce_consume_as_alice(sasl):
    roundtrip(sasl_conf(sasl), "plaintext")


def test_sasl_ssl_produce_consume_as_alice(sasl):
    roundtrip(sasl_ssl_conf(sasl), "ssl")


def test_second_user_of_the_jaas_line_authenticates(sasl):
    """bob, the JAAS line's second user_ entry, on both SASL listeners."""
    topic = unique_topic("sasl-bob")
    for conf, port in ((sasl_conf(sasl, "bob"), sasl.sasl_port),
                       (sasl_ssl_conf(sasl, "bob"), sasl.sasl_ssl_port)):
        assert only_broker(admin(conf).list_topics(timeout=OP_TIMEOUT)) == ("127.0.0.1", port)
        assert len(produce(conf, topic, [b"bob"])) == 1
    assert consume_all(plain_conf(sasl), topic, 2) == [(b"k0", b"bob"), (b"k0", b"bob")]


def test_records_cross_listeners(sasl):
    """One log behind all three listeners: written over SASL_SSL, read over PLAINTEXT and
    SASL_PLAINTEXT."""
    topic = unique_topic("sasl-cross")
    create_topic(plain_conf(sasl), topic)
    values = [b"cross %d" % i for i in range(10)]
    assert produce(sasl_ssl_conf(sasl), topic, values) == list(range(10))
    want = [(b"k%d" % i, v) for i, v in enumerate(values)]
    assert consume_all(plain_conf(sasl), topic, 10) == want
    assert consume_all(sasl_conf(sasl), topic, 10) == want


# ------------------------------------------------------------------ refusals (librdkafka)
AUTH_FAILED_RE = r": SASL authentication error: " + re.escape(BAD_CREDENTIALS) + r"$"


def test_wrong_password_is_refused(sasl):
    refused(sasl_conf(sasl, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION, AUTH_FAILED_RE)
    still_served(sasl)


def test_unknown_user_is_refused(sasl):
    refused(sasl_conf(sasl, "mallory", "alice-secret"), KafkaError._AUTHENTICATION, AUTH_FAILED_RE)
    still_served(sasl)


def test_wrong_password_and_unknown_user_get_the_same_error(sasl):
    """Nothing in the error tells a wrong password from an unknown user."""
    wrong_password = refused(sasl_conf(sasl, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION)
    unknown_user = refused(sasl_conf(sasl, "mallory", "alice-secret"), KafkaError._AUTHENTICATION)
    assert len(wrong_password) == 1, f"more than one error text for a wrong password: {wrong_password}"
    assert wrong_password == unknown_user
    still_served(sasl)


def test_scram_sha_256_is_refused_as_unsupported(sasl):
    """The handshake names the enabled mechanisms (UNSUPPORTED_SASL_MECHANISM, 33)."""
    refused(sasl_conf(sasl, mechanism="SCRAM-SHA-256"), KafkaError._AUTHENTICATION,
            r"SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL mechanism: "
            r"broker's supported mechanisms: PLAIN$")
    still_served(sasl)


def test_plaintext_client_on_sasl_plaintext_port_is_refused(sasl):
    """No SASL at all: ApiVersions is answered, the first Metadata closes the connection."""
    errors: List[KafkaError] = []
    adm = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl.sasl_port}", "error_cb": errors.append,
                       "reconnect.backoff.ms": 200, "log_level": 0})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as info:
        adm.list_topics(timeout=REFUSE_TIMEOUT)
    took = time.monotonic() - t0
    err = info.value.args[0]
    del info
    adm.poll(0.5)  # deliver the error callbacks
    del adm
    assert err.code() == KafkaError._TRANSPORT, f"list_topics failed with {err}, want _TRANSPORT"
    assert took < REFUSE_TIMEOUT + 5, f"the refusal took {took:.1f} s"
    assert all(e.code() in TRANSPORT_CLASS for e in errors), (
        f"error_cb reported {[e.str() for e in errors][:3]}, want only connection-level errors")
    still_served(sasl)


# ------------------------------------------------------------------ raw sockets
def test_raw_apiversions_answered_and_metadata_closes_before_authentication(sasl):
    with wire(sasl.sasl_port) as w:
        apis = w.api_versions()
        assert 17 in apis and apis[17][1] >= 1, f"SaslHandshake v1 not advertised: {apis.get(17)}"
        assert 36 in apis and apis[36][1] >= 1, f"SaslAuthenticate v1 not advertised: {apis.get(36)}"
        assert w.metadata() is None, "Metadata before authentication was answered"
        assert w.closed_by_broker(), "the connection is still open after Metadata before authentication"


def test_raw_apiversions_advertises_sasl_handshake_v0_and_v1(sasl):
    """Kafka 4.1.1 advertises SaslHandshake 0..1 and SaslAuthenticate 0..2. librdkafka before
    2.11.1 (Debian's kcat 1.7.1 has 2.0.2) enables SASL/PLAIN only when SaslHandshake v0 is in the
    range ("SASL Handshake not supported by broker (required by mechanism PLAIN)" otherwise) and
    SaslAuthenticate only with SaslHandshake v1 and SaslAuthenticate v0 in range."""
    with wire(sasl.sasl_port) as w:
        apis = w.api_versions()
    assert 17 in apis and apis[17][0] == 0 and apis[17][1] >= 1, f"SaslHandshake {apis.get(17)}, want 0..>=1"
    assert 36 in apis and apis[36][0] == 0 and apis[36][1] >= 1, f"SaslAuthenticate {apis.get(36)}, want 0..>=1"


def test_raw_sasl_handshake_v0_then_a_raw_plain_token(sasl):
    """SaslHandshake v0 (what ApiVersions advertises): the PLAIN token follows as a bare
    size-prefixed frame, not a SaslAuthenticate request; success is an empty size-prefixed frame,
    a wrong password closes the connection without one."""
    for password, ok in (("alice-secret", True), ("not-alice-secret", False)):
        with wire(sasl.sasl_port) as w:
            body = w.call(17, 0, _str("PLAIN"))
            assert body is not None and struct.unpack_from(">h", body)[0] == 0, f"SaslHandshake v0: {body!r}"
            token = b"\0alice\0" + password.encode()
            w.sock.sendall(struct.pack(">i", len(token)) + token)
            head = w.read_exact(4)
            if ok:
                assert head == b"\0\0\0\0", f"reply to a good PLAIN token: {head!r}, want an empty frame"
                assert w.metadata() is not None, "Metadata after a v0 authentication got the connection closed"
            else:
                assert head is None, f"a wrong password got a reply {head!r}, want the connection closed"


def test_raw_metadata_as_first_request_closes_the_connection(sasl):
    with wire(sasl.sasl_port) as w:
        assert w.metadata() is None, "Metadata as the first request on SASL_PLAINTEXT was answered"


def test_raw_plain_authentication_then_metadata(sasl):
    with wire(sasl.sasl_port) as w:
        w.api_versions()
        assert w.handshake("PLAIN") == (0, ["PLAIN"])
        err, msg, auth, lifetime = w.authenticate("alice", "alice-secret")
        assert (err, auth, lifetime) == (0, b"", 0), (
            f"SaslAuthenticate: error {err} {msg!r}, auth bytes {auth!r}, session_lifetime_ms {lifetime} "
            f"(want 0, empty, 0: connections.max.reauth.ms is 0)")
        body = w.metadata()
        assert body is not None, "Metadata after authentication got the connection closed"
        (n_brokers,) = struct.unpack_from(">i", body)
        assert n_brokers == 1


def test_raw_wrong_password_and_unknown_user_get_58_and_a_close(sasl):
    answers = {}
    for user, password in (("alice", "not-alice-secret"), ("mallory", "alice-secret")):
        with wire(sasl.sasl_port) as w:
            assert w.handshake("PLAIN") == (0, ["PLAIN"])
            t0 = time.monotonic()
            answers[user] = w.authenticate(user, password)
            assert answers[user][0] == 58, f"{user}: error {answers[user][0]}, want SASL_AUTHENTICATION_FAILED"
            assert answers[user][1] == BAD_CREDENTIALS, f"{user}: message {answers[user][1]!r}"
            assert w.closed_by_broker(), f"{user}: the connection stayed open after the failed authentication"
            assert time.monotonic() - t0 < RAW_TIMEOUT
    assert answers["alice"] == answers["mallory"], "a wrong password and an unknown user are told apart"


def test_raw_unsupported_mechanism_gets_33_with_the_enabled_mechanisms(sasl):
    with wire(sasl.sasl_port) as w:
        assert w.handshake("SCRAM-SHA-256") == (33, ["PLAIN"])
        assert w.closed_by_broker(), "the connection stayed open after UNSUPPORTED_SASL_MECHANISM"


def test_raw_session_lifetime_and_a_request_after_it_closes_the_connection(reauth):
    with wire(reauth.sasl_port) as w:
        assert w.login() == REAUTH_MS, "session_lifetime_ms is not connections.max.reauth.ms"
        t0 = time.monotonic()
        answered_until = 0.0
        while True:
            elapsed = time.monotonic() - t0
            assert elapsed < REAUTH_MS / 1000 + 3, "requests still answered 3 s after the session's end"
            if w.metadata() is None:
                break
            answered_until = elapsed
            time.sleep(0.2)  # pace of the probe
        assert answered_until >= REAUTH_MS / 1000 - 1, (
            f"the connection closed {answered_until:.1f} s into a {REAUTH_MS} ms session")


def test_raw_reauthentication_extends_the_session(reauth):
    with wire(reauth.sasl_port) as w:
        assert w.login() == REAUTH_MS
        t0 = time.monotonic()
        reauthenticated = False
        while (elapsed := time.monotonic() - t0) < REAUTH_MS / 1000 + 2:
            if not reauthenticated and elapsed >= REAUTH_MS / 2000:
                assert w.login() == REAUTH_MS, "re-authentication"
                reauthenticated = True
            assert w.metadata() is not None, (
                f"the connection closed {elapsed:.1f} s into the first session, after a re-authentication "
                f"at {REAUTH_MS / 2000:.1f} s")
            time.sleep(0.2)  # pace of the probe
        assert reauthenticated


# ------------------------------------------------------------------ re-authentication (librdkafka)
class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _client_logger(name: str) -> Tuple[logging.Logger, _Collect]:
    log = logging.getLogger(f"compat-sasl.{name}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    handler = _Collect()
    log.handlers = [handler]
    return log, handler


def test_producer_and_consumer_keep_working_across_reauthentication(reauth):
    """For about three session lifetimes a producer (SASL_PLAINTEXT) and a consumer (SASL_SSL)
    keep going; librdkafka re-authenticates each connection in place (its debug log: "Received
    REAUTH op"), never disconnects, reports no error, and every record arrives in order."""
    topic = unique_topic("sasl-reauth")
    create_topic(plain_conf(reauth), topic)
    errors: List[str] = []
    plog, plines = _client_logger("producer")
    clog, clines = _client_logger("consumer")
    debug = {"debug": "security,broker", "error_cb": lambda e: errors.append(e.str())}
    p = Producer({**sasl_conf(reauth), **debug, "logger": plog, "enable.idempotence": False,
                  "acks": "all", "linger.ms": 5, "message.timeout.ms": 20000})
    c = Consumer({**sasl_ssl_conf(reauth), **debug, "logger": clog, "group.id": "compat-sasl-unused",
                  "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 100})
    delivered: List[int] = []
    failed: List[str] = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            delivered.append(msg.offset())

    got: List[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < REAUTH_RUN_S:
            p.produce(topic, value=b"reauth %d" % sent, partition=0, on_delivery=on_delivery)
            sent += 1
            p.poll(0)
            msg = c.poll(0.05)
            if msg is not None:
                assert msg.error() is None, f"consumer error: {msg.error()}"
                got.append(msg.value())
        assert p.flush(30) == 0, "records still undelivered 30 s after the run"
        deadline = time.monotonic() + 30
        while len(got) < sent:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {sent} records within 30 s"
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, f"consumer error: {msg.error()}"
                got.append(msg.value())
    finally:
        c.close()
    assert not failed, f"delivery failed: {failed[:5]}"
    assert not errors, f"error_cb reported: {errors[:5]}"
    assert sorted(delivered) == list(range(sent)), "delivered offsets are not 0..N-1"
    assert got == [b"reauth %d" % i for i in range(sent)], "records lost, duplicated or out of order"

    for name, lines in (("producer", plines.lines), ("consumer", clines.lines)):
        lifetimes = {m for line in lines for m in re.findall(r"Received session lifetime (\d+) ms", line)}
        assert lifetimes == {str(REAUTH_MS)}, f"{name}: session lifetimes from the broker {lifetimes}"
        # the connection to broker NODE (not the bootstrap one): ".../<node id>: Received REAUTH op"
        reauths = [line for line in lines if re.search(r"/\d+: Received REAUTH op", line)]
        assert len(reauths) >= 2, (
            f"{name}: {len(reauths)} re-authentications of its broker connection in {REAUTH_RUN_S:.0f} s "
            f"with {REAUTH_MS} ms sessions")
        drops = [line for line in lines if "Disconnected" in line]
        assert not drops, f"{name} lost a connection: {drops[:3]}"


# ------------------------------------------------------------------ Kafka's Java client
def java_console_roundtrip(s: Sasl, cp: str, port: int, props: Dict[str, str], label: str) -> None:
    topic = unique_topic(f"sasl-java-{label}")
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


JAVA_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";'


@pytest.mark.timeout(1000)  # the first run may resolve the jars with mvn
def test_java_console_tools_over_sasl_plaintext(sasl, java_cp):  # noqa: F811
    java_console_roundtrip(sasl, java_cp, sasl.sasl_port, {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": JAVA_JAAS,
    }, "plaintext")


@pytest.mark.timeout(1000)
def test_java_console_tools_over_sasl_ssl(sasl, java_cp):  # noqa: F811
    java_console_roundtrip(sasl, java_cp, sasl.sasl_ssl_port, {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": JAVA_JAAS,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(sasl.mat.ca),
    }, "ssl")
