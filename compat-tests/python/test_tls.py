"""TLS listeners: SSL and mutual TLS (mTLS) beside PLAINTEXT, with Kafka's own config names.

One broker for the module, started with
    --listen 127.0.0.1:0                     (the PLAINTEXT listener)
    listeners=SSL://127.0.0.1:P1,MTLS://127.0.0.1:P2
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL
    ssl.keystore.type=PEM, ssl.keystore.location=server.pem (chain + unencrypted PKCS#8 key)
    ssl.truststore.type=PEM, ssl.truststore.location=ca.pem
    listener.name.mtls.ssl.client.auth=required
and throwaway certificates from tls_material.py (openssl CLI).

Checks: confluent-kafka (librdkafka + OpenSSL) produces and consumes over SSL and over mTLS with
the trusted client certificate, and Metadata on each TLS listener names that listener's port;
four refusals, each bounded in time and each followed by a check that PLAINTEXT and SSL (and, after
an mTLS refusal, mTLS with the trusted certificate) still work: a PLAINTEXT client on the SSL port,
an SSL client that does not trust the server's CA, an mTLS client with no certificate, an mTLS
client with a certificate from an unrelated CA; Kafka's Java client (the 4.1.1 console producer
and consumer) over SSL and mTLS with PEM trust/key stores; and (Millrace only: Kafka reloads key
stores only on AlterConfigs) a server certificate replaced on disk is served to new connections
within 15 s, without a restart.

What librdkafka 2.16 reports against Apache Kafka 4.1.1 for the refusals (the class asserted
here): list_topics() raises KafkaException _TRANSPORT ("Failed to get metadata: Local: Broker
transport failure") once its timeout passes, whatever the cause, as it does whenever no broker
connection came up. Through error_cb: wrong CA -> _SSL "SSL handshake failed: ... certificate verify
failed"; mTLS without a certificate or with an untrusted one -> _TRANSPORT "Receive failed: ...
ssl/tls alert bad certificate: SSL alert number 42" (TLS 1.3: the client's side of the handshake
completes, the server's alert arrives on the first read); PLAINTEXT on the SSL port -> the broker
closes the connection ("Disconnected ... in state APIVERSION_QUERY", an info log) and error_cb only
sees _ALL_BROKERS_DOWN. librdkafka does not even send the untrusted certificate ("No matching
issuer found in server trusted certificate authorities, not sending any client certificates"),
as the server's CertificateRequest names the CAs it accepts.

Runs against Apache Kafka 4.1.1 too (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh, which
merges `listeners` with its own PLAINTEXT and CONTROLLER listeners); the reload test skips there.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millrace import REPO_ROOT, Broker, free_ports, unique_topic, wait_until
from tls_material import TlsMaterial, make_material, write_server_cert

ON_KAFKA = "kafka-shim" in os.environ.get("MILLRACE_BIN", "")

OP_TIMEOUT = 15.0      # seconds, for every single client operation that should succeed
REFUSE_TIMEOUT = 6.0   # seconds a refused client gets to (not) fetch metadata
RELOAD_TIMEOUT = 15.0  # seconds until a replaced certificate must be served (promised: ~10 s)
N = 100                # records per round trip

# Every error a refused librdkafka client may report: connection-level, never a Kafka error code.
TRANSPORT_CLASS = {KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN}

JAVA_DIR = REPO_ROOT / "compat-tests" / "java"
JAVA_TIMEOUT = 90.0  # seconds per console tool run
JAVA_OPTS = ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2-tools.properties'}"]


# ------------------------------------------------------------------ the broker
@dataclass
class Tls:
    broker: Broker
    mat: TlsMaterial
    ssl_port: int
    mtls_port: int

    @property
    def plain_port(self) -> int:
        assert self.broker.port is not None
        return self.broker.port


@pytest.fixture(scope="module")
def tls():
    work = Path(tempfile.mkdtemp(prefix="millrace-tls-"))
    try:
        mat = make_material(work / "tls")
        ssl_port, mtls_port = free_ports(2)
        b = Broker(settings={
            "listeners": f"SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(mat.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(mat.ca),
            "listener.name.mtls.ssl.client.auth": "required",
        }).start()
        try:
            yield Tls(b, mat, ssl_port, mtls_port)
        finally:
            died = not b.alive()
            rc = b.stop()
            if died:
                pytest.fail(f"broker process died during the tests (exit code {rc}); stderr tail:\n"
                            f"{b.stderr_tail()}", pytrace=False)
    finally:
        if not os.environ.get("MILLRACE_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------ client configs
def plain_conf(tls: Tls) -> Dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{tls.plain_port}"}


def ssl_conf(tls: Tls, ca: Optional[Path] = None, port: Optional[int] = None) -> Dict[str, object]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port or tls.ssl_port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca or tls.mat.ca),
        # librdkafka's default since 2.0, stated: the server's certificate must name 127.0.0.1
        "ssl.endpoint.identification.algorithm": "https",
    }


def mtls_conf(tls: Tls, cert: Optional[str] = "client") -> Dict[str, object]:
    """mTLS listener; CERT names the client certificate (tls_material files), None for none."""
    conf = ssl_conf(tls, port=tls.mtls_port)
    if cert is not None:
        conf["ssl.certificate.location"] = str(tls.mat.dir / f"{cert}-cert.pem")
        conf["ssl.key.location"] = str(tls.mat.dir / f"{cert}-key.pem")
    return conf


# ------------------------------------------------------------------ helpers
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
    c = Consumer({**conf, "group.id": "compat-tls-unused", "enable.auto.commit": False,
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


def roundtrip(conf: Dict[str, object], label: str) -> None:
    """Create a topic, produce N records and read them back, all through CONF."""
    topic = unique_topic(f"tls-{label}")
    create_topic(conf, topic)
    values = [f"{label} record {i}".encode() for i in range(N)]
    assert produce(conf, topic, values) == list(range(N))
    got = consume_all(conf, topic, N)
    assert got == [(b"k%d" % i, v) for i, v in enumerate(values)]


def still_served(tls: Tls, mtls: bool = False) -> None:
    """Nothing else was affected: PLAINTEXT and SSL (and mTLS with the trusted certificate)
    answer Metadata with their own port and take a record."""
    listeners = [("PLAINTEXT", plain_conf(tls), tls.plain_port), ("SSL", ssl_conf(tls), tls.ssl_port)]
    if mtls:
        listeners.append(("MTLS", mtls_conf(tls), tls.mtls_port))
    topic = unique_topic("tls-still")
    for name, conf, port in listeners:
        md = admin(conf).list_topics(timeout=OP_TIMEOUT)
        assert only_broker(md) == ("127.0.0.1", port), f"{name} listener after the refusal"
        assert len(produce(conf, topic, [name.encode()])) == 1


def refused(conf: Dict[str, object], want: Optional[str] = None) -> List[KafkaError]:
    """CONF's client gets no metadata within REFUSE_TIMEOUT, failing with a connection-level
    error (and, if WANT is given, an error_cb error whose text matches WANT)."""
    errors: List[KafkaError] = []
    adm = AdminClient({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 200,
                       "log_level": 3})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as info:
        adm.list_topics(timeout=REFUSE_TIMEOUT)
    took = time.monotonic() - t0
    adm.poll(0.5)  # deliver the error callbacks
    err = info.value.args[0]
    del info, adm  # the traceback's frame cycle would keep the client reconnecting until a GC
    assert err.code() == KafkaError._TRANSPORT, f"list_topics failed with {err}, want _TRANSPORT"
    assert took < REFUSE_TIMEOUT + 5, f"the refusal took {took:.1f} s"
    assert errors, "no error reported through error_cb"
    names = sorted({e.name() for e in errors})
    assert all(e.code() in TRANSPORT_CLASS for e in errors), (
        f"error_cb reported {names}, want only connection-level errors: "
        f"{[e.str() for e in errors if e.code() not in TRANSPORT_CLASS][:3]}")
    if want is not None:
        assert any(re.search(want, e.str()) for e in errors), (
            f"no error_cb error matching {want!r}; got {[e.str() for e in errors][:3]}")
    return errors


# ------------------------------------------------------------------ SSL and mTLS round trips
def test_plaintext_metadata_names_the_plaintext_listener(tls):
    md = admin(plain_conf(tls)).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", tls.plain_port)


def test_ssl_metadata_names_the_ssl_listener(tls):
    md = admin(ssl_conf(tls)).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", tls.ssl_port), "a client bootstrapped on SSL must stay on SSL"


def test_ssl_produce_consume(tls):
    roundtrip(ssl_conf(tls), "ssl")


def test_mtls_metadata_names_the_mtls_listener(tls):
    md = admin(mtls_conf(tls)).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", tls.mtls_port), "a client bootstrapped on MTLS must stay on MTLS"


def test_mtls_produce_consume_with_trusted_client_cert(tls):
    roundtrip(mtls_conf(tls), "mtls")


def test_records_cross_listeners(tls):
    """One log behind all three listeners: written over mTLS, read over PLAINTEXT and SSL."""
    topic = unique_topic("tls-cross")
    create_topic(plain_conf(tls), topic)
    values = [b"cross %d" % i for i in range(10)]
    assert produce(mtls_conf(tls), topic, values) == list(range(10))
    want = [(b"k%d" % i, v) for i, v in enumerate(values)]
    assert consume_all(plain_conf(tls), topic, 10) == want
    assert consume_all(ssl_conf(tls), topic, 10) == want


# ------------------------------------------------------------------ refusals
def test_plaintext_client_on_ssl_port_is_refused(tls):
    refused({"bootstrap.servers": f"127.0.0.1:{tls.ssl_port}"})
    still_served(tls)


def test_ssl_client_not_trusting_the_ca_is_refused(tls):
    refused(ssl_conf(tls, ca=tls.mat.other_ca), want=r"certificate verify failed")
    still_served(tls)


def test_mtls_client_without_cert_is_refused(tls):
    refused(mtls_conf(tls, cert=None))
    still_served(tls, mtls=True)


def test_mtls_client_with_untrusted_cert_is_refused(tls):
    refused(mtls_conf(tls, cert="untrusted"))
    still_served(tls, mtls=True)


# ------------------------------------------------------------------ Kafka's Java client
@pytest.fixture(scope="module")
def java_cp() -> str:
    """The Kafka 4.1.1 CLI tools classpath, resolved (mvn, once) by the Java suite's
    java_dist_classpath (compat-tests/java/common.sh, dist/pom.xml): the reference broker's jars
    (.work/kafka-ref/libs) lack kafka-tools, where ConsoleProducer/ConsoleConsumer live in 4.x."""
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


def java_console_roundtrip(tls: Tls, cp: str, port: int, props: Dict[str, str], label: str) -> None:
    topic = unique_topic(f"tls-java-{label}")
    create_topic(plain_conf(tls), topic)
    cfg = tls.mat.dir / f"java-{label}.properties"
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
    assert consume_all(plain_conf(tls), topic, len(lines)) == [(None, line.encode()) for line in lines]


@pytest.mark.timeout(1000)  # the first run may resolve the jars with mvn
def test_java_console_tools_over_ssl(tls, java_cp):
    java_console_roundtrip(tls, java_cp, tls.ssl_port, {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.mat.ca),
    }, "ssl")


@pytest.mark.timeout(1000)
def test_java_console_tools_over_mtls(tls, java_cp):
    # a PEM key store with an unencrypted PKCS#8 key: no ssl.key.password, no ssl.keystore.password
    java_console_roundtrip(tls, java_cp, tls.mtls_port, {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.mat.ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.mat.client),
    }, "mtls")


# ------------------------------------------------------------------ certificate reload
def served_cert(tls: Tls, port: int, client_cert: bool) -> Tuple[bytes, str]:
    """(DER, 'CN=... serial=...') of the certificate a new TLS connection to PORT is served."""
    ctx = ssl.create_default_context(cafile=str(tls.mat.ca))
    if client_cert:
        ctx.load_cert_chain(str(tls.mat.client_cert), str(tls.mat.client_key))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            der = conn.getpeercert(binary_form=True)
            info = conn.getpeercert()
    cn = dict(x[0] for x in info.get("subject", ()))
    return der, f"CN={cn.get('commonName')} serial={info.get('serialNumber')}"


@pytest.mark.skipif(ON_KAFKA, reason="Kafka reloads key stores only on AlterConfigs; watching the "
                                     "files is Millrace's own")
def test_server_certificate_replaced_on_disk_is_served_without_restart(tls):
    old_der = tls.mat.der("server-cert")
    for port, mtls in ((tls.ssl_port, False), (tls.mtls_port, True)):
        der, what = served_cert(tls, port, mtls)
        assert der == old_der, f"port {port} serves {what}, not server.pem's certificate"

    serial = write_server_cert(tls.mat, "millrace-test-server-reloaded")  # temp file + os.replace
    new_der = tls.mat.der("server-cert")
    assert new_der != old_der
    t0 = time.monotonic()
    for port, mtls in ((tls.ssl_port, False), (tls.mtls_port, True)):
        last = ""
        while True:
            try:
                der, last = served_cert(tls, port, mtls)
                if der == new_der:
                    break
            except (OSError, ssl.SSLError) as exc:
                last = f"error {exc!r}"
            assert time.monotonic() - t0 < RELOAD_TIMEOUT, (
                f"port {port} still serves {last} {RELOAD_TIMEOUT:.0f} s after server.pem was replaced "
                f"(want CN=millrace-test-server-reloaded serial={serial:X})")
            time.sleep(0.5)
    assert tls.broker.alive()

    topic = unique_topic("tls-reloaded")
    assert produce(ssl_conf(tls), topic, [b"after reload"]) == [0]
    assert consume_all(ssl_conf(tls), topic, 1) == [(b"k0", b"after reload")]
