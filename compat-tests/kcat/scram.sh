#!/usr/bin/env bash
# Goal: kcat over the broker's SASL/SCRAM listeners. One broker with PLAINTEXT (--listen),
# SASL_PLAINTEXT and SASL_SSL listeners from Kafka's config names (listeners,
# listener.security.protocol.map, sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,
# ssl.keystore.* as a PEM file from python/tls_material.py for SASL_SSL; no JAAS line: Millrace needs
# none, compat-tests/reference/kafka-shim.sh adds the ones Apache Kafka needs). Users are made with
# Kafka 4.1.1's kafka-configs (kafka.admin.ConfigCommand, java/common.sh's tools classpath) over
# PLAINTEXT, one mechanism per call: alice SCRAM-SHA-256 (8192 iterations), bob SCRAM-SHA-512 (8192).
#
# Two librdkafkas. Debian's kcat 1.7.1 runs on librdkafka 2.0.2, whose SCRAM client repeats its
# own nonce in the client-final-message (r=<client nonce><client nonce><server nonce> where RFC 5802
# wants <client nonce><server nonce>; fixed in librdkafka 2.6.1, see edenhill/kcat#462). Apache Kafka
# 4.x compares that nonce strictly and refuses the login ("invalid credentials"), so with 2.0.2 no
# SCRAM login can succeed on Kafka 4.1.1. The round trips therefore run the same kcat binary on a
# librdkafka >= 2.6.1 (LD_LIBRARY_PATH): $KCAT_LIBRDKAFKA (a librdkafka.so.1), else the one in
# confluent-kafka's wheel of python/.venv, else that wheel (the version python/requirements.txt pins)
# fetched with pip into compat-tests/.work/kcat-librdkafka/. Debian's own librdkafka (when older than
# 2.6.1) is checked to be refused the way Kafka 4.1.1 refuses it.
#
# Checks: kafka-configs --describe lists both users ("SCRAM credential configs for user-principal
# 'alice' are SCRAM-SHA-256=iterations=8192"); kcat -L as alice with SCRAM-SHA-256 over
# SASL_PLAINTEXT and as bob with SCRAM-SHA-512 over SASL_SSL names that listener's port (waited for,
# bounded: Kafka applies a new credential through its metadata log after kafka-configs returns);
# 1,000 lines produced and read back byte-identical over each; a wrong password gets no metadata
# within its 5 s, with the broker's "SASL authentication error: Authentication failed during
# authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256" in librdkafka's log
# and "Broker transport failure" from kcat (what Apache Kafka 4.1.1 gives); the same for alice's
# right password from librdkafka 2.0.2 (the nonce above); PLAINTEXT, SASL_PLAINTEXT and SASL_SSL
# still serve afterwards.
#
#   compat-tests/kcat/scram.sh      (run by kcat/run.sh)
#
# Env: MILLRACE_BIN (compat-tests/reference/kafka-shim.sh for Apache Kafka), MILLRACE_START_TIMEOUT,
#      KCAT (default kcat), KCAT_TIMEOUT (seconds per kcat call, default 60), KCAT_LIBRDKAFKA (a
#      librdkafka.so.1 >= 2.6.1 for the SCRAM logins), TOOL_TIMEOUT (seconds per kafka-configs run,
#      default 90), MVN / MAVEN_REPO_LOCAL (java/common.sh),
#      KEEP_WORK=1 (keep the work dir; kept anyway on failure).
# Prints "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# java_dist_classpath and tool (Kafka CLI classes); also sources lib/millrace.sh
# shellcheck source-path=SCRIPTDIR source=../java/common.sh
source "$ROOT/compat-tests/java/common.sh"
# (after java/common.sh: its pass/fail/summary give way to these)
# shellcheck source=secure-lib.sh
source "$HERE/secure-lib.sh"

SETTLE_S=30 # seconds for a new credential to take effect
secure_init scram

# --- kcat on a librdkafka >= 2.6.1 (see above) -------------------------------------------------
SCRAM_FIXED=2.6.1
# kcat_librdkafka [LIBDIR]: the librdkafka version kcat runs on (with LIBDIR first on the library path)
kcat_librdkafka() {
  env ${1:+LD_LIBRARY_PATH="$1"} "$KCAT" -V 2>&1 | sed -nE 's/.*librdkafka ([0-9][0-9.]*).*/\1/p' | head -n1
}
version_ge() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" == "$2" ]]; } # $1 >= $2
# fetch_wheel_librdkafka DIR: DIR/librdkafka.so.1 from the confluent-kafka wheel python/requirements.txt pins
fetch_wheel_librdkafka() {
  local dir="$1" pin
  pin="$(sed -nE 's/^confluent-kafka==([0-9.]+).*/\1/p' "$ROOT/compat-tests/python/requirements.txt")"
  [[ -n "$pin" ]] || return 1
  mkdir -p "$dir/wheel"
  timeout 300 python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dir/wheel" "confluent-kafka==$pin" >&2 || return 1
  python3 - "$dir" <<'PY'
import glob, os, sys, zipfile
d = sys.argv[1]
for whl in sorted(glob.glob(os.path.join(d, "wheel", "confluent_kafka-*.whl"))):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if "/librdkafka" in name and ".so" in name:
                tmp = os.path.join(d, "librdkafka.so.1.tmp")
                with z.open(name) as src, open(tmp, "wb") as dst:
                    dst.write(src.read())
                os.replace(tmp, os.path.join(d, "librdkafka.so.1"))
                sys.exit(0)
sys.exit(1)
PY
}
SYSTEM_RDK="$(kcat_librdkafka)"
NEW_LIBDIR="" NEW_RDK="$SYSTEM_RDK"
if [[ -z "$SYSTEM_RDK" ]] || ! version_ge "$SYSTEM_RDK" "$SCRAM_FIXED"; then
  NEW_RDK=""
  mkdir -p "$WORK/librdkafka"
  cache="$ROOT/compat-tests/.work/kcat-librdkafka"
  venv_lib="$(compgen -G "$ROOT/compat-tests/python/.venv/lib/python3*/site-packages/confluent_kafka.libs/librdkafka*.so*" | head -n1 || true)"
  [[ -f "$ROOT/compat-tests/python/.venv/.requirements.sha256" ]] || venv_lib=""
  for candidate in "${KCAT_LIBRDKAFKA:-}" "$venv_lib" "$cache/librdkafka.so.1" fetch; do
    if [[ $candidate == fetch ]]; then
      echo "scram: fetching confluent-kafka's wheel for its librdkafka (pip) into $cache" >&2
      fetch_wheel_librdkafka "$cache" 2>"$WORK/librdkafka-fetch.err" || continue
      candidate="$cache/librdkafka.so.1"
    fi
    [[ -n "$candidate" && -f "$candidate" ]] || continue
    ln -sf "$(cd "$(dirname "$candidate")" && pwd)/$(basename "$candidate")" "$WORK/librdkafka/librdkafka.so.1"
    v="$(kcat_librdkafka "$WORK/librdkafka")"
    if [[ -n "$v" ]] && version_ge "$v" "$SCRAM_FIXED"; then
      NEW_LIBDIR="$WORK/librdkafka" NEW_RDK="$v"
      break
    fi
  done
  if [[ -z "$NEW_RDK" ]]; then
    give_up "librdkafka" "no librdkafka >= $SCRAM_FIXED for kcat (system: ${SYSTEM_RDK:-?}; set KCAT_LIBRDKAFKA, run compat-tests/python/run.sh once, or let pip fetch confluent-kafka)" "$WORK/librdkafka-fetch.err"
  fi
fi
echo "scram: kcat on librdkafka $NEW_RDK${NEW_LIBDIR:+ ($(readlink "$NEW_LIBDIR/librdkafka.so.1"))}; system librdkafka ${SYSTEM_RDK:-?}"

KC_LIBDIR="$NEW_LIBDIR" # kc: kcat on librdkafka >= 2.6.1

if ! java_dist_classpath 2>"$WORK/classpath.err"; then
  give_up "tools-classpath" "resolving the Kafka 4.1.1 tools jars (java/dist/pom.xml) failed" "$WORK/classpath.err"
fi
secure_material
secure_start_sasl --set sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512

# --- users, with kafka-configs ----------------------------------------------------------------
kafka_configs() { tool kafka.admin.ConfigCommand --bootstrap-server "$MILLRACE_ADDR" "$@"; }
users_ok=1
for u in "alice SCRAM-SHA-256 alice-secret" "bob SCRAM-SHA-512 bob-secret"; do
  read -r user mech password <<<"$u"
  if ! kafka_configs --alter --entity-type users --entity-name "$user" \
    --add-config "$mech=[iterations=8192,password=$password]" >"$WORK/add-$user.out" 2>"$WORK/add-$user.err"; then
    fail "users-created" "kafka-configs --alter --add-config $mech for $user exited non-zero" "$WORK/add-$user.err"
    users_ok=0
  elif ! grep -qxF "Completed updating config for user $user." "$WORK/add-$user.out"; then
    fail "users-created" "kafka-configs did not print 'Completed updating config for user $user.'" "$WORK/add-$user.out"
    users_ok=0
  fi
done
if ((users_ok)); then
  if ! kafka_configs --describe --entity-type users >"$WORK/describe.out" 2>"$WORK/describe.err"; then
    fail "users-created" "kafka-configs --describe --entity-type users exited non-zero" "$WORK/describe.err"
  elif ! grep -qxF "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192" "$WORK/describe.out" ||
    ! grep -qxF "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=8192" "$WORK/describe.out"; then
    fail "users-created" "kafka-configs --describe does not list alice (SCRAM-SHA-256=iterations=8192) and bob (SCRAM-SHA-512=iterations=8192)" "$WORK/describe.out"
  else
    pass "users-created (kafka-configs; --describe lists alice SCRAM-SHA-256 and bob SCRAM-SHA-512, 8192 iterations)"
  fi
fi

ALICE=(-X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=alice -X sasl.password=alice-secret)
BOB=(-X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=bob -X sasl.password=bob-secret)
TLS=(-X "ssl.ca.location=$M/ca.pem" -X ssl.endpoint.identification.algorithm=https)
ALICE_OPTS=(-X security.protocol=sasl_plaintext "${ALICE[@]}")
BOB_SSL_OPTS=(-X security.protocol=sasl_ssl "${BOB[@]}" "${TLS[@]}")
WRONG_OPTS=(-X security.protocol=sasl_plaintext -X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=alice -X sasl.password=not-alice-secret)
# kc_system ADDR ARGS... : kcat on the system's librdkafka
kc_system() { KC_LIBDIR="" kc "$@"; }

# logs_in ADDR OPTS... : kcat -L through ADDR gets metadata within 3 s
logs_in() {
  local addr="$1"
  shift
  kc "$addr" "$@" -m 3 -L >/dev/null 2>&1
}

# await_login NAME ADDR OPTS... : logs_in succeeds within SETTLE_S seconds
await_login() {
  local name="$1" addr="$2" deadline=$(($(date +%s) + SETTLE_S))
  shift 2
  until logs_in "$addr" "$@"; do
    if (($(date +%s) >= deadline)); then
      fail "$name" "kcat could not log in within ${SETTLE_S}s of kafka-configs"
      return 1
    fi
    sleep 0.2 # pace of the probe
  done
}

# --- alice, SCRAM-SHA-256 over SASL_PLAINTEXT ---------------------------------------------------
if await_login scram-sha-256-plaintext-metadata "127.0.0.1:$SASL_PORT" "${ALICE_OPTS[@]}"; then
  metadata_check scram-sha-256-plaintext-metadata SASL_PLAINTEXT "as alice, SCRAM-SHA-256," "$SASL_PORT" "${ALICE_OPTS[@]}"
fi
roundtrip scram-sha-256-plaintext "127.0.0.1:$SASL_PORT" "${ALICE_OPTS[@]}"

# --- bob, SCRAM-SHA-512 over SASL_SSL ------------------------------------------------------------
if await_login scram-sha-512-ssl-metadata "127.0.0.1:$SASL_SSL_PORT" "${BOB_SSL_OPTS[@]}"; then
  metadata_check scram-sha-512-ssl-metadata SASL_SSL "as bob, SCRAM-SHA-512," "$SASL_SSL_PORT" "${BOB_SSL_OPTS[@]}"
fi
roundtrip scram-sha-512-ssl "127.0.0.1:$SASL_SSL_PORT" "${BOB_SSL_OPTS[@]}"

# The broker's answer to a SCRAM-SHA-256 login that fails (librdkafka's log)
SCRAM_REFUSED="SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"

# --- a wrong password ---------------------------------------------------------------------------
refused wrong-password-refused kc "127.0.0.1:$SASL_PORT" "kcat -L got metadata with a wrong password" "$SCRAM_REFUSED" "${WRONG_OPTS[@]}"

# --- librdkafka < 2.6.1 (Debian's): alice's right password, with the client nonce repeated in the
# client-final-message, is refused as Apache Kafka 4.1.1 refuses it (RFC 5802: the nonce must be
# exactly the one of the server-first-message).
if [[ -n "$SYSTEM_RDK" ]] && ! version_ge "$SYSTEM_RDK" "$SCRAM_FIXED"; then
  refused "librdkafka-$SYSTEM_RDK-repeated-nonce-refused" kc_system "127.0.0.1:$SASL_PORT" \
    "kcat -L got metadata as alice from librdkafka $SYSTEM_RDK (its client-final-message repeats the client nonce)" \
    "$SCRAM_REFUSED" "${ALICE_OPTS[@]}"
fi

still_served still-served-after-refusal "PLAINTEXT, SASL_PLAINTEXT as alice, SASL_SSL as bob" \
  "SASL_PLAINTEXT $SASL_PORT ALICE_OPTS" "SASL_SSL $SASL_SSL_PORT BOB_SSL_OPTS"

secure_finish
