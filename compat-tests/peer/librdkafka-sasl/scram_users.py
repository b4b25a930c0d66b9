"""Create SCRAM users on a broker and wait until each can log in (standard library only).

    python3 scram_users.py --admin 127.0.0.1:P --login 127.0.0.1:Q [--tls CA.pem] \
        USER:PASSWORD:MECHANISM[:ITERATIONS] ...

For each credential it sends one AlterUserScramCredentials (key 51, v0) upsertion to --admin (a
PLAINTEXT listener): salt and salted password (PBKDF2-HMAC of the password, the same as Kafka's
kafka-configs / AdminClient send), MECHANISM SCRAM-SHA-256 or SCRAM-SHA-512, ITERATIONS default
8192. One user per request: Kafka 4 refuses two changes to one user in one request. Then, for
each credential, it logs in on --login (SASL_SSL with --tls CA.pem, else SASL_PLAINTEXT):
SaslHandshake v1 + SaslAuthenticate v2 with a full SCRAM exchange, the server signature checked.
Apache Kafka applies a credential through its metadata log a moment after answering, so the login
is retried (every 0.2 s) until it works or --timeout (default 30 s) passes.

Used by compat-tests/peer/librdkafka-sasl/run.sh and compat-tests/peer/franz-go-sasl/run.sh.
Exit 0 when every user logged in; otherwise 1 with one line per failure on stderr.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import sys
import time

MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
IO_TIMEOUT = 10.0  # seconds per socket operation


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_uvarint(buf: bytes, off: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = buf[off]
        off += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, off
        shift += 7


def compact_bytes(b: bytes) -> bytes:
    return uvarint(len(b) + 1) + b


def read_compact_bytes(buf: bytes, off: int) -> tuple[bytes | None, int]:
    n, off = read_uvarint(buf, off)
    if n == 0:
        return None, off
    return buf[off:off + n - 1], off + n - 1


class Conn:
    def __init__(self, addr: str, ca: str | None):
        host, port = addr.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT)
        if ca:
            ctx = ssl.create_default_context(cafile=ca)
            sock = ctx.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.corr = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def request(self, key: int, version: int, body: bytes, flexible: bool) -> bytes:
        """Sends one request; returns the response body after the response header."""
        self.corr += 1
        client_id = b"millrace-peer-scram"
        header = struct.pack(">hhih", key, version, self.corr, len(client_id)) + client_id
        if flexible:
            header += b"\x00"
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (size,) = struct.unpack(">i", self._recv(4))
        resp = self._recv(size)
        (corr,) = struct.unpack_from(">i", resp, 0)
        if corr != self.corr:
            raise ConnectionError(f"correlation id {corr}, expected {self.corr}")
        off = 4
        if flexible:
            _, off = read_uvarint(resp, off)  # response header tagged fields (none expected)
        return resp[off:]


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def alter(admin: str, user: str, password: str, mechanism: str, iterations: int) -> None:
    mech_id, hash_name = MECHANISMS[mechanism]
    salt = os.urandom(32)
    upsertion = (compact_bytes(user.encode()) + struct.pack(">bi", mech_id, iterations)
                 + compact_bytes(salt)
                 + compact_bytes(salted_password(hash_name, password, salt, iterations))
                 + b"\x00")
    body = uvarint(1) + uvarint(2) + upsertion + b"\x00"  # no deletions, one upsertion
    c = Conn(admin, None)
    try:
        resp = c.request(51, 0, body, flexible=True)
    finally:
        c.close()
    off = 4  # throttle_time_ms
    n, off = read_uvarint(resp, off)
    if n - 1 != 1:
        raise RuntimeError(f"AlterUserScramCredentials: {n - 1} results, expected 1")
    name, off = read_compact_bytes(resp, off)
    (err,) = struct.unpack_from(">h", resp, off)
    msg, off = read_compact_bytes(resp, off + 2)
    if err != 0:
        raise RuntimeError(f"AlterUserScramCredentials for {name!r}: error {err} {msg!r}")


def login(addr: str, ca: str | None, user: str, password: str, mechanism: str) -> None:
    """One SCRAM login; raises on any refusal."""
    _, hash_name = MECHANISMS[mechanism]
    c = Conn(addr, ca)
    try:
        m = mechanism.encode()
        resp = c.request(17, 1, struct.pack(">h", len(m)) + m, flexible=False)
        (err,) = struct.unpack_from(">h", resp, 0)
        if err != 0:
            raise RuntimeError(f"SaslHandshake {mechanism}: error {err}")

        def authenticate(payload: bytes) -> bytes:
            r = c.request(36, 2, compact_bytes(payload) + b"\x00", flexible=True)
            (e,) = struct.unpack_from(">h", r, 0)
            emsg, off = read_compact_bytes(r, 2)
            if e != 0:
                raise RuntimeError(f"SaslAuthenticate: error {e} {emsg!r}")
            auth, _ = read_compact_bytes(r, off)
            return auth or b""

        nonce = base64.b64encode(os.urandom(18)).decode()
        name = user.replace("=", "=3D").replace(",", "=2C")
        first_bare = f"n={name},r={nonce}"
        server_first = authenticate(("n,," + first_bare).encode()).decode()
        fields = dict(kv.split("=", 1) for kv in server_first.split(","))
        if not fields.get("r", "").startswith(nonce):
            raise RuntimeError(f"server nonce {fields.get('r')!r} does not extend ours")
        salted = salted_password(hash_name, password, base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", hash_name).digest()
        stored_key = hashlib.new(hash_name, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_final = authenticate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
        server_key = hmac.new(salted, b"Server Key", hash_name).digest()
        want = base64.b64encode(hmac.new(server_key, auth_message, hash_name).digest()).decode()
        if server_final != f"v={want}":
            raise RuntimeError(f"server signature {server_final!r} does not verify")
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--admin", required=True, help="PLAINTEXT host:port for AlterUserScramCredentials")
    ap.add_argument("--login", required=True, help="SASL host:port to log in on")
    ap.add_argument("--tls", metavar="CA", help="the login listener is SASL_SSL; trust this CA file")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("creds", nargs="+", metavar="USER:PASSWORD:MECHANISM[:ITERATIONS]")
    a = ap.parse_args()
    creds = []
    for spec in a.creds:
        parts = spec.split(":")
        if len(parts) not in (3, 4) or parts[2] not in MECHANISMS:
            ap.error(f"bad credential {spec!r}")
        creds.append((parts[0], parts[1], parts[2], int(parts[3]) if len(parts) == 4 else 8192))
    failures = 0
    for user, password, mech, iters in creds:
        try:
            alter(a.admin, user, password, mech, iters)
        except (OSError, RuntimeError, struct.error) as e:
            print(f"scram_users: creating {user} ({mech}): {e}", file=sys.stderr)
            failures += 1
    if failures:
        return 1
    for user, password, mech, _ in creds:
        deadline = time.monotonic() + a.timeout
        t0 = time.monotonic()
        while True:
            try:
                login(a.login, a.tls, user, password, mech)
                print(f"scram_users: {user} logs in with {mech} on {a.login} "
                      f"(after {time.monotonic() - t0:.1f}s)")
                break
            except (OSError, RuntimeError, struct.error, ValueError, KeyError) as e:
                if time.monotonic() > deadline:
                    print(f"scram_users: {user} cannot log in with {mech} on {a.login} "
                          f"within {a.timeout:.0f}s: {e}", file=sys.stderr)
                    failures += 1
                    break
                time.sleep(0.2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
