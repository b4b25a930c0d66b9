#!/usr/bin/env bash
# Goal: kcat (librdkafka 2.0.2) over the broker's SASL/PLAIN listeners. One broker with PLAINTEXT
# (--listen), SASL_PLAINTEXT and SASL_SSL listeners from Kafka's config names (listeners,
# listener.security.protocol.map, sasl.enabled.mechanisms=PLAIN,
# listener.name.<listener>.plain.sasl.jaas.config with user_alice/user_bob, ssl.keystore.* as a
# PEM file from python/tls_material.py for SASL_SSL). Checks: kcat -L over SASL_PLAINTEXT and
# over SASL_SSL (as alice) names that listener's port; 1,000 lines produced and read back
# byte-identical over each; a wrong password gets no metadata within its 5 s, with the broker's
# "SASL authentication error: Authentication failed: Invalid username or password" in librdkafka's
# log and "Broker transport failure" from kcat (what Apache Kafka 4.1.1 gives); PLAINTEXT,
# SASL_PLAINTEXT and SASL_SSL still serve afterwards. No re-authentication here
# (connections.max.reauth.ms stays 0): librdkafka 2.0.2 predates KIP-368 support (2.2.0).
#
#   compat-tests/kcat/sasl.sh      (run by kcat/run.sh)
#
# Env: MILLRACE_BIN (compat-tests/reference/kafka-shim.sh for Apache Kafka), MILLRACE_START_TIMEOUT,
#      KCAT (default kcat), KCAT_TIMEOUT (seconds per kcat call, default 60),
#      KEEP_WORK=1 (keep the work dir; kept anyway on failure).
# Prints "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

KCAT="${KCAT:-kcat}"
LINES=1000
REFUSE_S=5 # metadata timeout (-m) of a client that must be refused
JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";'
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS  sasl: $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL  sasl: $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then tail -n 15 "$3" | sed 's/^/      /'; fi
}
summary() { echo "$passed passed, $failed failed"; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-kcat-sasl.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then
    echo "sasl: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

M="$WORK/tls"
if ! timeout 120 python3 "$ROOT/compat-tests/python/tls_material.py" "$M" 2>"$WORK/material.err"; then
  fail "material" "making the certificates with openssl failed" "$WORK/material.err"
  summary
  exit 1
fi
mapfile -t ports < <(millrace_free_ports 2)
SASL_PORT="${ports[0]}" SASL_SSL_PORT="${ports[1]}"
if ! millrace_start "$WORK/broker" \
  --set "listeners=SASL_PLAINTEXT://127.0.0.1:$SASL_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL" \
  --set sasl.enabled.mechanisms=PLAIN \
  --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=$JAAS" \
  --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS" \
  --set ssl.keystore.type=PEM --set "ssl.keystore.location=$M/server.pem"; then
  fail "broker-start" "the broker with SASL_PLAINTEXT and SASL_SSL listeners did not start" "$WORK/broker/broker.stderr"
  summary
  exit 1
fi
echo "sasl: broker pid $MILLRACE_PID, PLAINTEXT $MILLRACE_ADDR, SASL_PLAINTEXT 127.0.0.1:$SASL_PORT, SASL_SSL 127.0.0.1:$SASL_SSL_PORT"

ALICE=(-X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password=alice-secret)
SASL_OPTS=(-X security.protocol=sasl_plaintext "${ALICE[@]}")
SASL_SSL_OPTS=(-X security.protocol=sasl_ssl "${ALICE[@]}" -X "ssl.ca.location=$M/ca.pem" -X ssl.endpoint.identification.algorithm=https)
WRONG_OPTS=(-X security.protocol=sasl_plaintext -X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password=not-alice-secret)
# kc ADDR ARGS... : kcat against ADDR, bounded
kc() {
  local addr="$1"
  shift
  timeout --kill-after=5 "${KCAT_TIMEOUT:-60}" "$KCAT" -b "$addr" "$@"
}

# metadata_names NAME ADDR PORT OPTS... : kcat -L -J through ADDR lists exactly one broker, 127.0.0.1:PORT
metadata_names() {
  local name="$1" addr="$2" port="$3"
  shift 3
  if kc "$addr" "$@" -L -J >"$WORK/$name.json" 2>"$WORK/$name.err" &&
    python3 - "$WORK/$name.json" "$port" <<'PY'; then
import json, sys
md = json.load(open(sys.argv[1]))
assert [b["name"] for b in md["brokers"]] == [f"127.0.0.1:{sys.argv[2]}"], md["brokers"]
PY
    return 0
  fi
  return 1
}

# roundtrip NAME ADDR OPTS... : LINES distinct lines through kcat -P and back with kcat -C -e
roundtrip() {
  local name="$1" addr="$2"
  shift 2
  local topic="kcat-sasl-$name-$RANDOM$RANDOM"
  awk -v n="$LINES" -v c="$name" 'BEGIN { for (i = 0; i < n; i++) printf "%s line %05d over SASL\n", c, i }' >"$WORK/$name.in"
  if ! kc "$addr" "$@" -P -t "$topic" <"$WORK/$name.in" 2>"$WORK/$name.produce.err"; then
    fail "$name-roundtrip" "kcat -P exited non-zero" "$WORK/$name.produce.err"
  elif ! kc "$addr" "$@" -C -t "$topic" -o beginning -e >"$WORK/$name.out" 2>"$WORK/$name.consume.err"; then
    fail "$name-roundtrip" "kcat -C -e exited non-zero (or timed out)" "$WORK/$name.consume.err"
  elif ! cmp -s "$WORK/$name.in" "$WORK/$name.out"; then
    fail "$name-roundtrip" "read back $(wc -l <"$WORK/$name.out") lines, not the $LINES produced ($(cmp "$WORK/$name.in" "$WORK/$name.out" 2>&1 | head -n1))"
  else
    pass "$name-roundtrip ($LINES lines byte-identical)"
  fi
}

if metadata_names sasl-plaintext-metadata "127.0.0.1:$SASL_PORT" "$SASL_PORT" "${SASL_OPTS[@]}"; then
  pass "sasl-plaintext-metadata (kcat -L as alice over SASL_PLAINTEXT names 127.0.0.1:$SASL_PORT)"
else
  fail "sasl-plaintext-metadata" "kcat -L -J over SASL_PLAINTEXT must list only 127.0.0.1:$SASL_PORT" "$WORK/sasl-plaintext-metadata.err"
fi
roundtrip sasl-plaintext "127.0.0.1:$SASL_PORT" "${SASL_OPTS[@]}"

if metadata_names sasl-ssl-metadata "127.0.0.1:$SASL_SSL_PORT" "$SASL_SSL_PORT" "${SASL_SSL_OPTS[@]}"; then
  pass "sasl-ssl-metadata (kcat -L as alice over SASL_SSL names 127.0.0.1:$SASL_SSL_PORT)"
else
  fail "sasl-ssl-metadata" "kcat -L -J over SASL_SSL must list only 127.0.0.1:$SASL_SSL_PORT" "$WORK/sasl-ssl-metadata.err"
fi
roundtrip sasl-ssl "127.0.0.1:$SASL_SSL_PORT" "${SASL_SSL_OPTS[@]}"

# A wrong password: kcat -L gets no metadata within REFUSE_S seconds and exits non-zero by itself,
# with librdkafka's transport failure and the broker's authentication error in its log.
name=wrong-password-refused
rc=0
t0=$(date +%s)
kc "127.0.0.1:$SASL_PORT" "${WRONG_OPTS[@]}" -m "$REFUSE_S" -L >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
took=$(($(date +%s) - t0))
if [[ $rc -eq 0 ]]; then
  fail "$name" "kcat -L got metadata with a wrong password" "$WORK/$name.out"
elif [[ $rc -ge 124 ]]; then
  fail "$name" "kcat -L did not end by itself (exit $rc after ${took}s)" "$WORK/$name.err"
elif ! grep -q "Failed to acquire metadata: Local: Broker transport failure" "$WORK/$name.err"; then
  fail "$name" "kcat -L exited $rc without librdkafka's 'Broker transport failure'" "$WORK/$name.err"
elif ! grep -q "SASL authentication error: Authentication failed: Invalid username or password" "$WORK/$name.err"; then
  fail "$name" "no 'SASL authentication error: Authentication failed: Invalid username or password' in librdkafka's log" "$WORK/$name.err"
else
  pass "$name (exit $rc after ${took}s: SASL authentication error: Authentication failed: Invalid username or password)"
fi

after_ok=1
for l in "PLAINTEXT $MILLRACE_ADDR $MILLRACE_PORT" "SASL_PLAINTEXT 127.0.0.1:$SASL_PORT $SASL_PORT" "SASL_SSL 127.0.0.1:$SASL_SSL_PORT $SASL_SSL_PORT"; do
  read -r lname laddr lport <<<"$l"
  opts=()
  [[ $lname == SASL_PLAINTEXT ]] && opts=("${SASL_OPTS[@]}")
  [[ $lname == SASL_SSL ]] && opts=("${SASL_SSL_OPTS[@]}")
  if ! metadata_names "after-$lname" "$laddr" "$lport" "${opts[@]+"${opts[@]}"}"; then
    fail "still-served-after-refusal" "kcat -L over $lname failed after the refusal" "$WORK/after-$lname.err"
    after_ok=0
  fi
done
if ((after_ok)); then pass "still-served-after-refusal (PLAINTEXT, SASL_PLAINTEXT, SASL_SSL)"; fi

if ! millrace_alive; then
  fail "broker-alive" "the broker died during the run" "$WORK/broker/broker.stderr"
fi
summary
[[ $failed -eq 0 ]]
