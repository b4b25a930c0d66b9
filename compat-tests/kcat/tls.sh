#!/usr/bin/env bash
# Goal: kcat (librdkafka 2.0.2 + OpenSSL) over the broker's TLS listeners. One broker with
# PLAINTEXT (--listen), SSL and MTLS (ssl.client.auth=required) listeners from Kafka's config
# names (listeners, listener.security.protocol.map, ssl.keystore.* / ssl.truststore.* as PEM
# files, listener.name.mtls.ssl.client.auth) and throwaway certificates from
# python/tls_material.py (openssl CLI). Checks: kcat -L over SSL and over MTLS names that
# listener's port; 1,000 lines produced and read back byte-identical over SSL, and over MTLS with
# the trusted client certificate (CN=alice); an MTLS client with a certificate from an unrelated CA,
# and one with no certificate, get no metadata (librdkafka: "Broker transport failure") within
# their 5 s; PLAINTEXT, SSL and MTLS still serve afterwards.
#
#   compat-tests/kcat/tls.sh      (run by kcat/run.sh)
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
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS  tls: $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL  tls: $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then tail -n 15 "$3" | sed 's/^/      /'; fi
}
summary() { echo "$passed passed, $failed failed"; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-kcat-tls.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then
    echo "tls: work dir kept: $WORK"
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
SSL_PORT="${ports[0]}" MTLS_PORT="${ports[1]}"
if ! millrace_start "$WORK/broker" \
  --set "listeners=SSL://127.0.0.1:$SSL_PORT,MTLS://127.0.0.1:$MTLS_PORT" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL" \
  --set ssl.keystore.type=PEM --set "ssl.keystore.location=$M/server.pem" \
  --set ssl.truststore.type=PEM --set "ssl.truststore.location=$M/ca.pem" \
  --set listener.name.mtls.ssl.client.auth=required; then
  fail "broker-start" "the broker with SSL and MTLS listeners did not start" "$WORK/broker/broker.stderr"
  summary
  exit 1
fi
echo "tls: broker pid $MILLRACE_PID, PLAINTEXT $MILLRACE_ADDR, SSL 127.0.0.1:$SSL_PORT, MTLS 127.0.0.1:$MTLS_PORT"

SSL_OPTS=(-X security.protocol=ssl -X "ssl.ca.location=$M/ca.pem" -X ssl.endpoint.identification.algorithm=https)
MTLS_OPTS=("${SSL_OPTS[@]}" -X "ssl.certificate.location=$M/client-cert.pem" -X "ssl.key.location=$M/client-key.pem")
UNTRUSTED_OPTS=("${SSL_OPTS[@]}" -X "ssl.certificate.location=$M/untrusted-cert.pem" -X "ssl.key.location=$M/untrusted-key.pem")
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
  local topic="kcat-tls-$name-$RANDOM$RANDOM"
  awk -v n="$LINES" -v c="$name" 'BEGIN { for (i = 0; i < n; i++) printf "%s line %05d over TLS\n", c, i }' >"$WORK/$name.in"
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

# refused NAME ADDR OPTS... : kcat -L gets no metadata within REFUSE_S seconds: exit non-zero with
# librdkafka's transport failure (what Apache Kafka 4.1.1 gives), in bounded time
refused() {
  local name="$1" addr="$2"
  shift 2
  local rc=0 t0
  t0=$(date +%s)
  kc "$addr" "$@" -m "$REFUSE_S" -L >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  local took=$(($(date +%s) - t0))
  if [[ $rc -eq 0 ]]; then
    fail "$name" "kcat -L got metadata: the connection was accepted" "$WORK/$name.out"
  elif [[ $rc -ge 124 ]]; then
    fail "$name" "kcat -L did not end by itself (exit $rc after ${took}s)" "$WORK/$name.err"
  elif ! grep -q "Failed to acquire metadata: Local: Broker transport failure" "$WORK/$name.err"; then
    fail "$name" "kcat -L exited $rc without librdkafka's 'Broker transport failure'" "$WORK/$name.err"
  else
    local why
    why="$(grep -oE 'alert [a-z ]+: SSL alert number [0-9]+|Disconnected[^(]*' "$WORK/$name.err" | head -n1 || true)"
    pass "$name (exit $rc after ${took}s: ${why:-transport failure})"
  fi
}

if metadata_names ssl-metadata "127.0.0.1:$SSL_PORT" "$SSL_PORT" "${SSL_OPTS[@]}"; then
  pass "ssl-metadata (kcat -L over SSL names 127.0.0.1:$SSL_PORT)"
else
  fail "ssl-metadata" "kcat -L -J over SSL must list only 127.0.0.1:$SSL_PORT" "$WORK/ssl-metadata.err"
fi
roundtrip ssl "127.0.0.1:$SSL_PORT" "${SSL_OPTS[@]}"

if metadata_names mtls-metadata "127.0.0.1:$MTLS_PORT" "$MTLS_PORT" "${MTLS_OPTS[@]}"; then
  pass "mtls-metadata (kcat -L over MTLS names 127.0.0.1:$MTLS_PORT)"
else
  fail "mtls-metadata" "kcat -L -J over MTLS must list only 127.0.0.1:$MTLS_PORT" "$WORK/mtls-metadata.err"
fi
roundtrip mtls "127.0.0.1:$MTLS_PORT" "${MTLS_OPTS[@]}"

refused mtls-untrusted-cert-refused "127.0.0.1:$MTLS_PORT" "${UNTRUSTED_OPTS[@]}"
refused mtls-no-cert-refused "127.0.0.1:$MTLS_PORT" "${SSL_OPTS[@]}"

after_ok=1
for l in "PLAINTEXT $MILLRACE_ADDR $MILLRACE_PORT" "SSL 127.0.0.1:$SSL_PORT $SSL_PORT" "MTLS 127.0.0.1:$MTLS_PORT $MTLS_PORT"; do
  read -r lname laddr lport <<<"$l"
  opts=()
  [[ $lname == SSL ]] && opts=("${SSL_OPTS[@]}")
  [[ $lname == MTLS ]] && opts=("${MTLS_OPTS[@]}")
  if ! metadata_names "after-$lname" "$laddr" "$lport" "${opts[@]+"${opts[@]}"}"; then
    fail "still-served-after-refusals" "kcat -L over $lname failed after the refusals" "$WORK/after-$lname.err"
    after_ok=0
  fi
done
if ((after_ok)); then pass "still-served-after-refusals (PLAINTEXT, SSL, MTLS)"; fi

if ! millrace_alive; then
  fail "broker-alive" "the broker died during the run" "$WORK/broker/broker.stderr"
fi
summary
[[ $failed -eq 0 ]]
