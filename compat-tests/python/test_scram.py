"""SASL/SCRAM (SCRAM-SHA-256, SCRAM-SHA-512) on SASL_PLAINTEXT and SASL_SSL, users from kafka-configs.

A broker for the module, started with
    --listen 127.0.0.1:0                     (the PLAINTEXT listener, also the admin one)
    listeners=SASL_PLAINTEXT://127.0.0.1:P1,SASL_SSL://127.0.0.1:P2
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
    sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
    ssl.keystore.type=PEM, ssl.keystore.location=server.pem   (tls_material.py, for SASL_SSL)
on a data dir of this module's own (the restart test starts it again on that dir). No JAAS line:
Millrace needs none for SCRAM; Apache Kafka 4.1.1 does not start without a server-side JAAS entry
per SASL listener and mechanism, which compat-tests/reference/kafka-shim.sh adds
(listener.name.<listener>.scram-sha-<n>.sasl.jaas.config=...ScramLoginModule required;).

Users are made with Kafka's own kafka-configs (kafka.admin.ConfigCommand, Kafka 4.1.1 tools jars) over
PLAINTEXT: alice with SCRAM-SHA-256 (8192 iterations), bob with SCRAM-SHA-512 (16384, the most Kafka
takes), one mechanism per call (Kafka 4 refuses two changes for one user in one request).

Checks: `kafka-configs --describe --entity-type users` lists both, in Kafka's format ("SCRAM
credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"), and librdkafka's
DescribeUserScramCredentials agrees (RESOURCE_NOT_FOUND for a user without credentials);
confluent-kafka produces and consumes as alice (SCRAM-SHA-256) over SASL_PLAINTEXT and as bob
(SCRAM-SHA-512) over SASL_SSL, Metadata naming the port the client came in on, and each user's
mechanism works on the other listener too; SaslHandshake for PLAIN gets UNSUPPORTED_SASL_MECHANISM
(33) naming both SCRAM mechanisms (in any order: Kafka lists SCRAM-SHA-512 first). Refusals, each
bounded and followed by a check that alice still works: a wrong password, an unknown user (the same
error, word for word), alice with SCRAM-SHA-512 (she has no SHA-512 credential). kafka-configs with
both mechanisms for one user in one call fails (DuplicateResourceException "A user credential cannot
be altered twice in the same request", from the broker), iterations=100 fails (kafka-configs itself
refuses it before sending anything: "Iterations 100 is less than the minimum 4096 required for
SCRAM-SHA-256"; so librdkafka's AlterUserScramCredentials sends iterations=100 to the broker:
UNACCEPTABLE_CREDENTIAL "Too few iterations..."), iterations=16385 fails at the broker
(UnacceptableCredentialException "Too many iterations..."), and none of them created anything. A
second mechanism added in a second call keeps the first (carol logs in with both). `--delete-config
SCRAM-SHA-256` for alice: describe no longer lists her, she is refused like an unknown user, bob
still logs in; added again, she logs in again. A restart on the same data dir keeps the credentials
(bob logs in, describe unchanged). Kafka's Java client: the 4.1.1 console producer and consumer as
bob over SASL_SSL with SCRAM-SHA-512 and a PEM trust store.

What Apache Kafka 4.1.1 answers (asserted here where both brokers must agree): a wrong password, an
unknown user and a mechanism the user has no credential for all get SASL_AUTHENTICATION_FAILED with
"Authentication failed during authentication due to invalid credentials with SASL mechanism
SCRAM-SHA-256" (or -512); librdkafka 2.16 reports it through error_cb as _AUTHENTICATION
"<broker>: SASL authentication error: <that message> (after Nms in state AUTH_REQ)", list_topics()
raises _TRANSPORT. Kafka applies a credential change on the broker asynchronously (the metadata
log), so every check after a change waits, bounded, for it to take effect. kafka-configs prints
nothing (exit 0) when describing a user that has no credentials. The broker's own wording of
UNACCEPTABLE_CREDENTIAL is "Too few iterations" / "Too many iterations"; only that prefix is asserted.

Runs against Apache Kafka too (the reference broker, 4.4.0) (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from millrace import Broker, wait_until
from secure_clients import (OP_TIMEOUT, SaslBroker, admin, await_login, java_console_roundtrip, java_tool,
                            logs_in, only_broker, pem_truststore, plain_conf, refused_login, roundtrip,
                            sasl_broker, sasl_client, serves, wire)


ALICE = ("alice", "alice-secret", "SCRAM-SHA-256", 8192)
BOB = ("bob", "bob-secret", "SCRAM-SHA-512", 16384)
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def bad_credentials(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}")


def auth_failed_re(mechanism: str) -> str:
    return r": SASL authentication error: " + re.escape(bad_credentials(mechanism)) + r"$"


# ------------------------------------------------------------------ the broker
@dataclass
class Scram(SaslBroker):
    cp: str = ""  # Kafka tools classpath (kafka-configs, console tools)
    created: Dict[str, subprocess.CompletedProcess] = field(default_factory=dict)


@pytest.fixture(scope="module")
def scram(java_cp) -> Iterator[Scram]:
    with sasl_broker(Scram, "millrace-scram-", {"sasl.enabled.mechanisms": ",".join(MECHANISMS)}, cp=java_cp) as s:
        yield s


@pytest.fixture(scope="module")
def users(scram) -> Scram:
    """alice and bob, made with kafka-configs (one call each), and in effect: each logs in."""
    for user, password, mechanism, iterations in (ALICE, BOB):
        proc = add_credential(scram, user, mechanism, iterations, password)
        assert proc.returncode == 0, f"kafka-configs creating {user}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        scram.created[user] = proc
    await_login(sasl_conf(scram, "alice"), True)
    await_login(sasl_ssl_conf(scram, "bob"), True)
    return scram


# ------------------------------------------------------------------ client configs
def sasl_conf(s: Scram, user: str, password: Optional[str] = None,
              mechanism: Optional[str] = None, ssl: bool = False) -> Dict[str, object]:
    """SASL_PLAINTEXT (SASL_SSL when SSL) as USER, with the user's own mechanism and password
    unless given."""
    own = {"alice": ALICE[2], "bob": BOB[2]}
    return sasl_client(s, mechanism or own.get(user, "SCRAM-SHA-256"), user,
                       PASSWORDS.get(user, "no-such-user") if password is None else password, ssl)


def sasl_ssl_conf(s: Scram, user: str, password: Optional[str] = None,
                  mechanism: Optional[str] = None) -> Dict[str, object]:
    return sasl_conf(s, user, password, mechanism, ssl=True)


# ------------------------------------------------------------------ kafka-configs
def kafka_configs(s: Scram, *args: str) -> subprocess.CompletedProcess:
    return java_tool(s.cp, "kafka.admin.ConfigCommand",
                     ["--bootstrap-server", f"127.0.0.1:{s.plain_port}", *args])


def add_credential(s: Scram, user: str, mechanism: str, iterations: int, password: str) -> subprocess.CompletedProcess:
    return kafka_configs(s, "--alter", "--entity-type", "users", "--entity-name", user,
                         "--add-config", f"{mechanism}=[iterations={iterations},password={password}]")


DESCRIBED_RE = re.compile(r"^SCRAM credential configs for user-principal '([^']+)' are (.+)$")
CRED_RE = re.compile(r"^(SCRAM-SHA-(?:256|512))=iterations=(\d+)$")


def described(s: Scram, user: Optional[str] = None) -> Dict[str, Dict[str, int]]:
    """kafka-configs --describe --entity-type users [--entity-name USER]: {user: {mechanism:
    iterations}}. Every line of its output must be one of Kafka's SCRAM lines, the credentials
    joined by ", "."""
    proc = kafka_configs(s, "--describe", "--entity-type", "users", *(["--entity-name", user] if user else []))
    assert proc.returncode == 0, f"kafka-configs --describe exited {proc.returncode}: {proc.stderr[-3000:]}"
    out: Dict[str, Dict[str, int]] = {}
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        m = DESCRIBED_RE.match(line)
        assert m, f"kafka-configs --describe printed {line!r}, not \"SCRAM credential configs for user-principal ...\""
        creds = {}
        for part in m.group(2).split(", "):
            c = CRED_RE.match(part)
            assert c, f"credential {part!r} in {line!r} is not MECHANISM=iterations=N"
            creds[c.group(1)] = int(c.group(2))
        assert m.group(1) not in out, f"user {m.group(1)} described twice: {proc.stdout!r}"
        out[m.group(1)] = creds
    return out


# ------------------------------------------------------------------ login helpers
def alice_still_works(s: Scram) -> None:
    serves(sasl_conf(s, "alice"), s.sasl_port, "alice over SASL_PLAINTEXT after the refusal")


def librdkafka_upsert(s: Scram, user: str, mechanism: ScramMechanism, iterations: int, password: bytes) -> None:
    """AlterUserScramCredentials through librdkafka (no client-side iteration check): raises the
    per-user KafkaException on a refusal."""
    adm = AdminClient(plain_conf(s))  # held until the answer is in (a dropped client fails it with _DESTROY)
    futures = adm.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)],
        request_timeout=OP_TIMEOUT)
    futures[user].result(timeout=OP_TIMEOUT)


# ------------------------------------------------------------------ users and describe
def test_kafka_configs_creates_alice_and_bob_and_describe_lists_them(users):
    for user in ("alice", "bob"):
        out = users.created[user].stdout
        assert f"Completed updating config for user {user}." in out, f"kafka-configs creating {user} printed {out!r}"
    every = described(users)
    assert every.get("alice") == {"SCRAM-SHA-256": 8192}, f"describe: {every}"
    assert every.get("bob") == {"SCRAM-SHA-512": 16384}, f"describe: {every}"
    assert described(users, "alice") == {"alice": {"SCRAM-SHA-256": 8192}}
    assert described(users, "bob") == {"bob": {"SCRAM-SHA-512": 16384}}


def test_describe_user_scram_credentials_through_librdkafka(users):
    """DescribeUserScramCredentials from another client: all users, then alice and one with no
    credential (RESOURCE_NOT_FOUND for that one only)."""
    adm = AdminClient(plain_conf(users))
    every = adm.describe_user_scram_credentials(request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT)
    got = {u: sorted((i.mechanism, i.iterations) for i in d.scram_credential_infos) for u, d in every.items()}
    assert got.get("alice") == [(ScramMechanism.SCRAM_SHA_256, 8192)], got
    assert got.get("bob") == [(ScramMechanism.SCRAM_SHA_512, 16384)], got
    some = adm.describe_user_scram_credentials(["alice", "nobody"], request_timeout=OP_TIMEOUT)
    alice = some["alice"].result(timeout=OP_TIMEOUT)
    assert [(i.mechanism, i.iterations) for i in alice.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    with pytest.raises(KafkaException) as info:
        some["nobody"].result(timeout=OP_TIMEOUT)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND, f"describe nobody: {info.value.args[0]}"


# ------------------------------------------------------------------ round trips
def test_alice_scram_sha_256_over_sasl_plaintext(users):
    md = admin(sasl_conf(users, "alice")).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", users.sasl_port), \
        "a client bootstrapped on SASL_PLAINTEXT must stay on SASL_PLAINTEXT"
    roundtrip(sasl_conf(users, "alice"), "scram", "alice-256-plaintext")


def test_bob_scram_sha_512_over_sasl_ssl(users):
    md = admin(sasl_ssl_conf(users, "bob")).list_topics(timeout=OP_TIMEOUT)
    assert only_broker(md) == ("127.0.0.1", users.sasl_ssl_port), \
        "a client bootstrapped on SASL_SSL must stay on SASL_SSL"
    roundtrip(sasl_ssl_conf(users, "bob"), "scram", "bob-512-ssl")


def test_each_mechanism_on_the_other_listener(users):
    """alice (SHA-256) over SASL_SSL, bob (SHA-512) over SASL_PLAINTEXT."""
    serves(sasl_ssl_conf(users, "alice"), users.sasl_ssl_port, "alice SCRAM-SHA-256 over SASL_SSL")
    serves(sasl_conf(users, "bob"), users.sasl_port, "bob SCRAM-SHA-512 over SASL_PLAINTEXT")


def test_handshake_for_plain_names_the_scram_mechanisms(users):
    """In any order: Kafka 4.1.1 lists them from a hash map (SCRAM-SHA-512 first here)."""
    with wire(users.sasl_port) as w:
        err, mechanisms = w.handshake("PLAIN")
        assert (err, sorted(mechanisms)) == (33, MECHANISMS), f"SaslHandshake v1 for PLAIN: {err} {mechanisms}"
        assert w.closed_by_broker(), "the connection stayed open after UNSUPPORTED_SASL_MECHANISM"


# ------------------------------------------------------------------ refusals
def test_wrong_password_is_refused(users):
    refused_login(sasl_conf(users, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION,
            auth_failed_re("SCRAM-SHA-256"))
    alice_still_works(users)


def test_unknown_user_is_refused(users):
    refused_login(sasl_conf(users, "mallory", "alice-secret", "SCRAM-SHA-256"), KafkaError._AUTHENTICATION,
            auth_failed_re("SCRAM-SHA-256"))
    alice_still_works(users)


def test_alice_with_scram_sha_512_is_refused(users):
    """alice has a SCRAM-SHA-256 credential only."""
    refused_login(sasl_conf(users, "alice", mechanism="SCRAM-SHA-512"), KafkaError._AUTHENTICATION,
            auth_failed_re("SCRAM-SHA-512"))
    alice_still_works(users)


def test_wrong_password_and_unknown_user_get_the_same_error(users):
    wrong_password = refused_login(sasl_conf(users, "alice", "not-alice-secret"), KafkaError._AUTHENTICATION)
    unknown_user = refused_login(sasl_conf(users, "mallory", "alice-secret", "SCRAM-SHA-256"), KafkaError._AUTHENTICATION)
    assert len(wrong_password) == 1, f"more than one error text for a wrong password: {wrong_password}"
    assert wrong_password == unknown_user
    alice_still_works(users)


# ------------------------------------------------------------------ refused changes
def test_both_mechanisms_for_one_user_in_one_call_fails_and_creates_nothing(users):
    proc = kafka_configs(users, "--alter", "--entity-type", "users", "--entity-name", "dora", "--add-config",
                         "SCRAM-SHA-256=[iterations=8192,password=dora-secret],"
                         "SCRAM-SHA-512=[iterations=8192,password=dora-secret]")
    assert proc.returncode != 0, f"kafka-configs with two mechanisms for dora succeeded: {proc.stdout!r}"
    assert "DuplicateResourceException" in proc.stderr, proc.stderr[-3000:]
    assert "A user credential cannot be altered twice in the same request" in proc.stderr, proc.stderr[-3000:]
    assert described(users, "dora") == {}, "the refused request created a credential for dora"
    assert "dora" not in described(users)


def test_too_few_iterations_fails_and_creates_nothing(users):
    """kafka-configs refuses iterations=100 itself (no request); librdkafka sends it and the broker
    answers UNACCEPTABLE_CREDENTIAL."""
    proc = add_credential(users, "erin", "SCRAM-SHA-256", 100, "erin-secret")
    assert proc.returncode != 0, f"kafka-configs with iterations=100 succeeded: {proc.stdout!r}"
    assert "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256" in proc.stderr, proc.stderr[-3000:]
    with pytest.raises(KafkaException) as info:
        librdkafka_upsert(users, "erin", ScramMechanism.SCRAM_SHA_256, 100, b"erin-secret")
    err = info.value.args[0]
    assert err.code() == KafkaError.UNACCEPTABLE_CREDENTIAL, f"iterations=100: {err}"
    assert err.str().startswith("Too few iterations"), f"iterations=100: {err}"
    assert described(users, "erin") == {}, "a refused request created a credential for erin"
    assert "erin" not in described(users)


def test_too_many_iterations_fails_and_creates_nothing(users):
    proc = add_credential(users, "frank", "SCRAM-SHA-512", 16385, "frank-secret")
    assert proc.returncode != 0, f"kafka-configs with iterations=16385 succeeded: {proc.stdout!r}"
    assert "UnacceptableCredentialException: Too many iterations" in proc.stderr, proc.stderr[-3000:]
    assert described(users, "frank") == {}, "the refused request created a credential for frank"


def test_second_mechanism_in_a_second_call_keeps_the_first(users):
    for mechanism, iterations in (("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)):
        proc = add_credential(users, "carol", mechanism, iterations, PASSWORDS["carol"])
        assert proc.returncode == 0, f"kafka-configs adding {mechanism} for carol: {proc.stderr[-3000:]}"
    assert described(users, "carol") == {"carol": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}}
    await_login(sasl_conf(users, "carol", mechanism="SCRAM-SHA-512"), True)
    serves(sasl_conf(users, "carol", mechanism="SCRAM-SHA-256"), users.sasl_port, "carol SCRAM-SHA-256")
    serves(sasl_ssl_conf(users, "carol", mechanism="SCRAM-SHA-512"), users.sasl_ssl_port, "carol SCRAM-SHA-512")


# ------------------------------------------------------------------ deletion, restart
def test_delete_config_removes_alices_credential(users):
    proc = kafka_configs(users, "--alter", "--entity-type", "users", "--entity-name", "alice",
                         "--delete-config", "SCRAM-SHA-256")
    assert proc.returncode == 0, f"kafka-configs --delete-config: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert "Completed updating config for user alice." in proc.stdout
    try:
        assert described(users, "alice") == {}, "alice is still described after her only credential went"
        every = described(users)
        assert "alice" not in every and every.get("bob") == {"SCRAM-SHA-512": 16384}, every
        await_login(sasl_conf(users, "alice"), False)
        # refused the way an unknown user is
        refused_login(sasl_conf(users, "alice"), KafkaError._AUTHENTICATION, auth_failed_re("SCRAM-SHA-256"))
        serves(sasl_ssl_conf(users, "bob"), users.sasl_ssl_port, "bob after alice's deletion")
    finally:
        # alice again, for the tests after this one; and a credential added after a deletion works
        again = add_credential(users, "alice", "SCRAM-SHA-256", 8192, "alice-secret")
    assert again.returncode == 0, f"kafka-configs adding alice again: {again.stderr[-3000:]}"
    await_login(sasl_conf(users, "alice"), True)
    assert described(users, "alice") == {"alice": {"SCRAM-SHA-256": 8192}}


def test_restart_on_the_same_data_dir_keeps_the_credentials(users):
    before = described(users)
    assert before.get("bob") == {"SCRAM-SHA-512": 16384}, before
    old = users.broker
    rc = old.stop(timeout=30)
    assert rc == 0, f"the broker exited {rc} on SIGTERM; stderr tail:\n{old.stderr_tail()}"
    users.broker = Broker(settings=users.settings, data_dir=users.data).start()
    after = described(users)
    for user in ("alice", "bob"):
        assert after.get(user) == before[user], f"{user} after the restart: {after.get(user)}, before: {before[user]}"
    # bob logs in with the credential of the first run (bounded: the listeners may open a moment
    # after the PLAINTEXT one)
    wait_until(lambda: logs_in(sasl_ssl_conf(users, "bob")), timeout=OP_TIMEOUT, interval=0.2,
               what="bob to log in over SASL_SSL after the restart")
    serves(sasl_ssl_conf(users, "bob"), users.sasl_ssl_port, "bob over SASL_SSL after the restart")
    serves(sasl_conf(users, "alice"), users.sasl_port, "alice over SASL_PLAINTEXT after the restart")
    refused_login(sasl_conf(users, "bob", "not-bob-secret"), KafkaError._AUTHENTICATION, auth_failed_re("SCRAM-SHA-512"))


# ------------------------------------------------------------------ Kafka's Java client
@pytest.mark.timeout(1000)
def test_java_console_tools_as_bob_over_sasl_ssl_scram_sha_512(users):
    java_console_roundtrip(users, users.cp, users.sasl_ssl_port, {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="bob-secret";',
        **pem_truststore(users.mat.ca),
    }, "scram", "scram-512-ssl")
