"""The harness's ``--secure`` mode: every Kafka listener of the cluster is SASL_SSL (TLS, then
SASL/PLAIN), the ones brokers replicate over included, so the faults hit TLS sessions and SASL
logins (issue 36: "a 3-node cluster whose brokers use only SASL_SSL listeners passes the fault
harness"), and the controller listeners are SSL with client certificates required (mutual TLS: the
Raft traffic and the brokers' controller requests). Nothing on the cluster's links is plaintext.

- ``enable(work)`` makes throwaway TLS material (``compat-tests/python/tls_material.py``: a CA, a
  certificate for 127.0.0.1 — the proxies' address — and its key) and names its directory in
  ``CHAOS_TLS_DIR``, which the worker processes inherit;
- ``client_settings()``: what every librdkafka client of the harness adds (``workload`` merges it
  into ``CLIENT_TIMEOUTS``); empty when the mode is off;
- ``broker_settings(listeners)``: the broker keys, Kafka's names on both systems (the controller
  listener is ``CONTROLLER``; its keystore is ``node.pem``, a certificate for both ends);
- ``broker_socket(addr)``: a raw Kafka connection for the harness's hand-written requests, with
  the TLS handshake and a SaslHandshake v1 / SaslAuthenticate v1 PLAIN login when the mode is on.

Brokers log in to each other as ``broker``; clients as ``harness``.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

ENV = "CHAOS_TLS_DIR"
USER, PASSWORD = "harness", "harness-secret"
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{BROKER_USER}" password="{BROKER_PASSWORD}" '
        f'user_{BROKER_USER}="{BROKER_PASSWORD}" user_{USER}="{PASSWORD}";')
TLS_MATERIAL = Path(__file__).resolve().parents[1] / "python" / "tls_material.py"

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def tls_dir() -> Optional[Path]:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def enable(work: Path) -> Path:
    d = work / "tls"
    subprocess.run([sys.executable, str(TLS_MATERIAL), str(d)], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    os.environ[ENV] = str(d)
    return d


def client_settings() -> Dict[str, str]:
    d = tls_dir()
    if d is None:
        return {}
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(d / "ca.pem"),
        "ssl.endpoint.identification.algorithm": "https",
    }


def broker_settings(listeners: List[str]) -> Dict[str, str]:
    """TLS and SASL/PLAIN for the SASL_SSL listeners named ``listeners`` (brokers authenticate to
    each other with the JAAS line's username and password)."""
    d = tls_dir()
    assert d is not None, "secure mode is off"
    settings = {
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(d / "server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(d / "ca.pem"),
    }
    for name in listeners:
        settings[f"listener.name.{name.lower()}.plain.sasl.jaas.config"] = JAAS
    settings.update({
        "controller.listener.names": "CONTROLLER",
        "listener.name.controller.ssl.keystore.location": str(d / "node.pem"),
        "listener.name.controller.ssl.client.auth": "required",
    })
    return settings


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _call(sock: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    """One request with a v1 header (correlation id 0x5A5A); the answer after its correlation id."""
    request = struct.pack(">hhi", api_key, version, 0x5A5A) + _string("harness-login") + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    answer = recv_exact(sock, size)
    if struct.unpack_from(">i", answer, 0)[0] != 0x5A5A:
        raise ValueError("login: unexpected correlation id")
    return answer[4:]


def _login(sock: socket.socket) -> None:
    answer = _call(sock, SASL_HANDSHAKE, 1, _string("PLAIN"))
    if struct.unpack_from(">h", answer, 0)[0] != 0:
        raise ValueError(f"SaslHandshake error {struct.unpack_from('>h', answer, 0)[0]}")
    token = f"\0{USER}\0{PASSWORD}".encode()
    answer = _call(sock, SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token)
    if struct.unpack_from(">h", answer, 0)[0] != 0:
        raise ValueError(f"SaslAuthenticate error {struct.unpack_from('>h', answer, 0)[0]}")


@contextmanager
def broker_socket(addr: str, timeout: float) -> Iterator[socket.socket]:
    """A connection to a broker's Kafka listener at ``addr``, logged in when the mode is on."""
    host, port = addr.rsplit(":", 1)
    sock: socket.socket = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        sock.settimeout(timeout)
        d = tls_dir()
        if d is not None:
            context = ssl.create_default_context(cafile=str(d / "ca.pem"))
            sock = context.wrap_socket(sock, server_hostname=host)
            _login(sock)
        yield sock
    finally:
        sock.close()
