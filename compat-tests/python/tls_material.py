"""Throwaway TLS material for the TLS listener tests, made with the ``openssl`` CLI.

    python3 compat-tests/python/tls_material.py DIR     # writes the files below into DIR

(kcat/secure-lib.sh and go/secure_broker_test.go call it that way; secure_clients.py imports it.)

Files (EC P-256 keys, unencrypted PKCS#8 "BEGIN PRIVATE KEY", as Kafka's PEM keystore reads them):
  ca.pem                          the CA every broker listener and trusting client uses
  server.pem                      server certificate (signed by ca.pem, CN=millrace-test-server,
                                  SAN IP:127.0.0.1 + DNS:localhost, EKU serverAuth) followed by
                                  its private key: the broker's ssl.keystore.location
  server-cert.pem, server-key.pem the same two parts on their own
  client-cert.pem, client-key.pem client certificate CN=alice signed by ca.pem (EKU clientAuth)
  node.pem                        a node certificate (CN=millrace-test-node, the server's SAN, EKU
                                  serverAuth and clientAuth) and its key: a keystore that is both
                                  ends of mutual TLS (a controller listener)
  client.pem                      both in one file (a Java client's PEM keystore)
  other-ca.pem                    a second, unrelated CA
  untrusted-cert.pem, untrusted-key.pem, untrusted.pem
                                  client certificate CN=mallory signed by other-ca.pem

Every certificate gets a random serial number; :func:`write_server_cert` replaces server.pem
(new key, new serial, another CN; written to a temp file, then renamed over it) for the reload
test. Only the standard library and the openssl binary are used.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List

OPENSSL_TIMEOUT = 30.0  # seconds per openssl call

SERVER_CN = "millrace-test-server"
CLIENT_CN = "alice"
UNTRUSTED_CN = "mallory"

_CONF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[node]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=OPENSSL_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed (rc={proc.returncode}): {proc.stderr.strip()}")


def _serial() -> int:
    return secrets.randbits(62) | (1 << 62)  # positive, 63 bits, never 0


def _key(d: Path, name: str) -> Path:
    path = d / name
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path.name, cwd=d)
    return path


def _ca(d: Path, name: str, cn: str) -> None:
    """NAME.pem (certificate) and NAME-key.pem, a self-signed CA."""
    key = _key(d, f"{name}-key.pem")
    openssl("req", "-config", "openssl.cnf", "-x509", "-new", "-key", key.name, "-subj", f"/CN={cn}",
            "-extensions", "ca", "-days", "3", "-sha256", "-set_serial", str(_serial()),
            "-out", f"{name}.pem", cwd=d)


def _leaf(d: Path, prefix: str, cn: str, ca: str, profile: str, serial: int) -> None:
    """PREFIX-cert.pem and PREFIX-key.pem: a certificate for CN signed by CA (CA.pem, CA-key.pem)."""
    key = _key(d, f"{prefix}-key.pem")
    openssl("req", "-config", "openssl.cnf", "-new", "-key", key.name, "-subj", f"/CN={cn}",
            "-out", f"{prefix}.csr", cwd=d)
    openssl("x509", "-req", "-in", f"{prefix}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}-key.pem",
            "-set_serial", str(serial), "-days", "2", "-sha256", "-extfile", "openssl.cnf",
            "-extensions", profile, "-out", f"{prefix}-cert.pem", cwd=d)
    (d / f"{prefix}.csr").unlink()


def _concat(out: Path, parts: List[Path]) -> None:
    """Writes the parts into OUT through a temp file and a rename (readers never see half)."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in parts))
    os.replace(tmp, out)


@dataclass
class TlsMaterial:
    dir: Path

    def __getattr__(self, name: str) -> Path:  # mat.ca, mat.server, mat.client_key, ...
        if name.startswith("_"):
            raise AttributeError(name)
        return self.dir / (name.replace("_", "-") + ".pem")

    def der(self, name: str) -> bytes:
        """The DER form of certificate NAME (e.g. "server-cert")."""
        return subprocess.run(["openssl", "x509", "-in", str(self.dir / f"{name}.pem"), "-outform", "DER"],
                              capture_output=True, check=True, timeout=OPENSSL_TIMEOUT).stdout


def make_material(d: Path) -> TlsMaterial:
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "openssl.cnf").write_text(_CONF)
    _ca(d, "ca", "Millrace Test CA")
    _ca(d, "other-ca", "Unrelated Test CA")
    mat = TlsMaterial(d)
    write_server_cert(mat, SERVER_CN)
    _leaf(d, "node", "millrace-test-node", "ca", "node", _serial())
    _concat(d / "node.pem", [d / "node-cert.pem", d / "node-key.pem"])
    _leaf(d, "client", CLIENT_CN, "ca", "client", _serial())
    _concat(d / "client.pem", [d / "client-cert.pem", d / "client-key.pem"])
    _leaf(d, "untrusted", UNTRUSTED_CN, "other-ca", "client", _serial())
    _concat(d / "untrusted.pem", [d / "untrusted-cert.pem", d / "untrusted-key.pem"])
    return mat


def write_server_cert(mat: TlsMaterial, cn: str) -> int:
    """A new server key and certificate (CN, random serial, same SAN, signed by ca.pem) in
    server-cert.pem / server-key.pem, then server.pem replaced by a rename. Returns the serial."""
    serial = _serial()
    _leaf(mat.dir, "server", cn, "ca", "server", serial)
    _concat(mat.dir / "server.pem", [mat.dir / "server-cert.pem", mat.dir / "server-key.pem"])
    return serial


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    make_material(Path(sys.argv[1]))
