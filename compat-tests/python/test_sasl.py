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

Runs against Apache Kafka too (the reference broker, 4.4.0) (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh).
"""

from __future__ import annotations

import logging
import re
import struct
import time
from typing import Dict, List, Optional, Tuple

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from millrace import unique_topic
from secure_clients import (OP_TIMEOUT, RAW_TIMEOUT, REFUSE_TIMEOUT, SaslBroker, admin, consume_all,
                            create_topic, java_console_roundtrip, only_broker, pem_truststore, plain_conf,
                            produce, records_cross_listeners, refused_connection, refused_login, roundtrip,
                            sasl_broker, sasl_client, still_served as listeners_still_served, wire, wire_str)

REAUTH_MS = 5000       # connections.max.reauth.ms of the re-authentication broker
REAUTH_RUN_S = 12.0    # seconds the librdkafka pair runs on it (about three session lifetimes)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
BAD_CREDENTIALS = "Authentication failed: Invalid username or password"

# what a client without SASL on the SASL_PLAINTEXT port may see: connection-level errors only
TRANSPORT_CLASS = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


# ------------------------------------------------------------------ the brokers
def plain_sasl_broker(prefix: str, extra: Optional[Dict[str, str]] = None):
    return sasl_broker(SaslBroker, prefix, {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        **(extra or {}),
    })


@pytest.fixture(scope="module")
def sasl():
    """SASL_PLAINTEXT and SASL_SSL, no re-authentication (connections.max.reauth.ms default 0)."""
    with plain_sasl_broker("millrace-sasl-") as s:
        yield s


@pytest.fixture(scope="module")
def reauth():
    """The same listeners with connections.max.reauth.ms=5000."""
    with plain_sasl_broker("millrace-sasl-reauth-", {"connections.max.reauth.ms": str(REAUTH_MS)}) as s:
        yield s


# ------------------------------------------------------------------ client configs
def sasl_conf(s: SaslBroker, user: str = "alice", password: Optional[str] = None,
              mechanism: str = "PLAIN", ssl: bool = False) -> Dict[str, object]:
    """SASL_PLAINTEXT (SASL_SSL when SSL) as USER (password from the JAAS line unless given)."""
    return sasl_client(s, mechanism, user, USERS.get(user, "no-such-user") if password is None else password, ssl)


def sasl_ssl_conf(s: SaslBroker, user: str = "alice", password: Optional[str] = None) -> Dict[str, object]:
    return sasl_conf(s, user, password, ssl=True)


# ------------------------------------------------------------------ helpers
def still_served(s: SaslBroker) -> None:
    """Nothing else was affected: PLAINTEXT, SASL_PLAINTEXT and SASL_SSL (as alice) answer
    Metadata with their own port and take a record."""
    listeners_still_served("sasl", (("PLAINTEXT", plain_conf(s), s.plain_port),
                                    ("SASL_PLAINTEXT", sasl_conf(s), s.sasl_port),
                                    ("SASL_SSL", sasl_ssl_conf(s), s.sasl_ssl_port)))


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
    roundtrip(sasl_conf(sasl), "sasl", "plaintext")


def test_sasl_ssl_produce_consume_as_alice(sasl):
    roundtrip(sasl_ssl_conf(sasl), "sasl", "ssl")


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
    records_cross_listeners(sasl, "sasl", sasl_ssl_conf(sasl), (plain_conf(sasl), sasl_conf(sasl)))


# ------------------------------------------------------------------ refusals (librdkafka)
AUTH_FAILED_RE = r": SASL authentication error: " + re.escape(BAD_CREDENTIALS) + r"$"


def test_wrong_password_is_refused(sasl):
    refused_login(sasl_conf(sasl, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION, AUTH_FAILED_RE)
    still_served(sasl)


def test_unknown_user_is_refused(sasl):
    refused_login(sasl_conf(sasl, "mallory", "alice-secret"), KafkaError._AUTHENTICATION, AUTH_FAILED_RE)
    still_served(sasl)


def test_wrong_password_and_unknown_user_get_the_same_error(sasl):
    """Nothing in the error tells a wrong password from an unknown user."""
    wrong_password = refused_login(sasl_conf(sasl, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION)
    unknown_user = refused_login(sasl_conf(sasl, "mallory", "alice-secret"), KafkaError._AUTHENTICATION)
    assert len(wrong_password) == 1, f"more than one error text for a wrong password: {wrong_password}"
    assert wrong_password == unknown_user
    still_served(sasl)


def test_scram_sha_256_is_refused_as_unsupported(sasl):
    """The handshake names the enabled mechanisms (UNSUPPORTED_SASL_MECHANISM, 33)."""
    refused_login(sasl_conf(sasl, mechanism="SCRAM-SHA-256"), KafkaError._AUTHENTICATION,
            r"SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL mechanism: "
            r"broker's supported mechanisms: PLAIN$")
    still_served(sasl)


def test_plaintext_client_on_sasl_plaintext_port_is_refused(sasl):
    """No SASL at all: ApiVersions is answered, the first Metadata closes the connection."""
    refused_connection({"bootstrap.servers": f"127.0.0.1:{sasl.sasl_port}"}, REFUSE_TIMEOUT, TRANSPORT_CLASS)
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
            body = w.call(17, 0, wire_str("PLAIN"))
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
        assert w.login("alice", USERS["alice"]) == REAUTH_MS, "session_lifetime_ms is not connections.max.reauth.ms"
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
        assert w.login("alice", USERS["alice"]) == REAUTH_MS
        t0 = time.monotonic()
        reauthenticated = False
        while (elapsed := time.monotonic() - t0) < REAUTH_MS / 1000 + 2:
            if not reauthenticated and elapsed >= REAUTH_MS / 2000:
                assert w.login("alice", USERS["alice"]) == REAUTH_MS, "re-authentication"
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
JAVA_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";'


def java_alice(protocol: str) -> Dict[str, str]:
    """A Java client's properties: alice with PLAIN (a JAAS line) over PROTOCOL."""
    return {"security.protocol": protocol, "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAVA_JAAS}


@pytest.mark.timeout(1000)  # the first run may resolve the jars with mvn
def test_java_console_tools_over_sasl_plaintext(sasl, java_cp):
    java_console_roundtrip(sasl, java_cp, sasl.sasl_port, java_alice("SASL_PLAINTEXT"), "sasl", "plaintext")


@pytest.mark.timeout(1000)
def test_java_console_tools_over_sasl_ssl(sasl, java_cp):
    java_console_roundtrip(sasl, java_cp, sasl.sasl_ssl_port,
                           {**java_alice("SASL_SSL"), **pem_truststore(sasl.mat.ca)}, "sasl", "ssl")
