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

Runs against Apache Kafka too (the reference broker, 4.4.0) (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh, which
merges `listeners` with its own PLAINTEXT and CONTROLLER listeners); the reload test skips there.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from confluent_kafka import KafkaError

from millrace import unique_topic
from secure_clients import (OP_TIMEOUT, SecureBroker, admin, consume_all, java_console_roundtrip, listener_port,
                            only_broker, pem_truststore, plain_conf, produce, records_cross_listeners,
                            refused_connection, roundtrip, secure_broker, still_served as listeners_still_served,
                            trusting)
from tls_material import write_server_cert

ON_KAFKA = "kafka-shim" in os.environ.get("MILLRACE_BIN", "")

REFUSE_TIMEOUT = 6.0   # seconds a refused client gets to (not) fetch metadata
RELOAD_TIMEOUT = 15.0  # seconds until a replaced certificate must be served (promised: ~10 s)

# Every error a refused librdkafka client may report: connection-level, never a Kafka error code.
TRANSPORT_CLASS = {KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN}


# ------------------------------------------------------------------ the broker
@dataclass
class Tls(SecureBroker):
    """SSL and MTLS (ssl.client.auth=required) beside PLAINTEXT."""
    ssl_port = listener_port(0)
    mtls_port = listener_port(1)


@pytest.fixture(scope="module")
def tls():
    with secure_broker(Tls, "millrace-tls-", ("SSL", "MTLS"), "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                       lambda mat: {**pem_truststore(mat.ca), "listener.name.mtls.ssl.client.auth": "required"}) as t:
        yield t


# ------------------------------------------------------------------ client configs
def ssl_conf(tls: Tls, ca: Optional[Path] = None, port: Optional[int] = None) -> Dict[str, object]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port or tls.ssl_port}",
        "security.protocol": "SSL",
        **trusting(ca or tls.mat.ca),
    }


def mtls_conf(tls: Tls, cert: Optional[str] = "client") -> Dict[str, object]:
    """mTLS listener; CERT names the client certificate (tls_material files), None for none."""
    conf = ssl_conf(tls, port=tls.mtls_port)
    if cert is not None:
        conf["ssl.certificate.location"] = str(tls.mat.dir / f"{cert}-cert.pem")
        conf["ssl.key.location"] = str(tls.mat.dir / f"{cert}-key.pem")
    return conf


# ------------------------------------------------------------------ helpers
def still_served(tls: Tls, mtls: bool = False) -> None:
    """Nothing else was affected: PLAINTEXT and SSL (and mTLS with the trusted certificate)
    answer Metadata with their own port and take a record."""
    listeners = [("PLAINTEXT", plain_conf(tls), tls.plain_port), ("SSL", ssl_conf(tls), tls.ssl_port)]
    if mtls:
        listeners.append(("MTLS", mtls_conf(tls), tls.mtls_port))
    listeners_still_served("tls", listeners)


def refused(conf: Dict[str, object], want: Optional[str] = None) -> List[KafkaError]:
    """CONF's client gets no metadata within REFUSE_TIMEOUT, failing with a connection-level
    error (and, if WANT is given, an error_cb error whose text matches WANT)."""
    errors = refused_connection(conf, REFUSE_TIMEOUT, TRANSPORT_CLASS, log_level=3)
    assert errors, "no error reported through error_cb"
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
    roundtrip(ssl_conf(tls), "tls", "ssl")


def test_mtls_metadata_names_the_mtls_listener(tls):
    md = admin(mtls_conf(tls)).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", tls.mtls_port), "a client bootstrapped on MTLS must stay on MTLS"


def test_mtls_produce_consume_with_trusted_client_cert(tls):
    roundtrip(mtls_conf(tls), "tls", "mtls")


def test_records_cross_listeners(tls):
    """One log behind all three listeners: written over mTLS, read over PLAINTEXT and SSL."""
    records_cross_listeners(tls, "tls", mtls_conf(tls), (plain_conf(tls), ssl_conf(tls)))


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
@pytest.mark.timeout(1000)  # the first run may resolve the jars with mvn
def test_java_console_tools_over_ssl(tls, java_cp):
    java_console_roundtrip(tls, java_cp, tls.ssl_port, {"security.protocol": "SSL", **pem_truststore(tls.mat.ca)},
                           "tls", "ssl")


@pytest.mark.timeout(1000)
def test_java_console_tools_over_mtls(tls, java_cp):
    # a PEM key store with an unencrypted PKCS#8 key: no ssl.key.password, no ssl.keystore.password
    java_console_roundtrip(tls, java_cp, tls.mtls_port, {
        "security.protocol": "SSL",
        **pem_truststore(tls.mat.ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.mat.client),
    }, "tls", "mtls")


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
