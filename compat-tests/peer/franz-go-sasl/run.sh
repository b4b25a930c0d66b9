#!/usr/bin/env bash
# franz-go's own pkg/kgo integration tests over TLS and SASL/SCRAM against one Millrace broker
# (issue 16), with the test binary that ../franz-go/run.sh builds (either suite builds it once).
#
#   compat-tests/peer/franz-go-sasl/run.sh [extra test-binary args...]
#
# What franz-go v1.22.3's tests can do (pkg/kgo/helpers_test.go, client_test.go):
#   - every test client (newTestClient/testClientOpts) dials TLS when KGO_TEST_TLS is set
#     ("ca:FILE,cert:FILE,key:FILE"), but never uses SASL;
#   - only TestSCRAMAuth and TestSCRAMAuthBadCredentials use SASL: SCRAM with KGO_TEST_SCRAM
#     ("user:password[:256|512]") against KGO_TEST_SCRAM_SEEDS, on a plain TCP connection (their
#     clients take no TLS option), so they need a SASL_PLAINTEXT listener;
#   - TestOAuthAuth needs OAUTHBEARER (KGO_TEST_OAUTH_SEEDS), which Millrace does not serve.
# So the broker gets, besides --listen 127.0.0.1:0 (PLAINTEXT, only for creating the users):
#   listeners=SSL://127.0.0.1:P1,SASL_PLAINTEXT://127.0.0.1:P2
#   listener.name.ssl.ssl.client.auth=required, ssl.truststore.location=<CA> (mutual TLS)
#   sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512, ssl.keystore.type=PEM, a PEM keystore
#   from ../../python/tls_material.py (a throwaway CA)
# and the users alice (SCRAM-SHA-256) and bob (SCRAM-SHA-512) are created over PLAINTEXT with
# AlterUserScramCredentials (../librdkafka-sasl/scram_users.py, which waits until each logs in).
#
# ALLOWLIST: one top-level test per line, optionally followed by SCRAM-SHA-512. The plain names
# run in one test binary with KGO_SEEDS=<SSL listener> KGO_TEST_TLS=ca:..,cert:..,key:..
# KGO_TEST_SCRAM_SEEDS=<SASL_PLAINTEXT listener> KGO_TEST_SCRAM=alice:alice-secret (SHA-256),
# KGO_TEST_RF=1 KGO_TEST_RECORDS=<small>; the SCRAM-SHA-512 ones in a second binary run with
# KGO_TEST_SCRAM=bob:bob-secret:512. An allow-listed test that skips itself counts as failed here
# (it would mean the TLS/SCRAM set-up did not reach it); skipped subtests count neither way.
#
# Env: MILLRACE_BIN, MILLRACE_START_TIMEOUT, GO, FRANZ_GO_VERSION (default v1.22.3),
#      KGO_TEST_RECORDS (default 1000), PEER_FRANZ_TIMEOUT (seconds per test binary run,
#      default 300), KGO_LOG_LEVEL (default none), KEEP_WORK=1 (kept anyway on failure).
# Last line printed: "N passed, M failed" (leaf tests of both runs).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

GO="${GO:-go}"
V="${FRANZ_GO_VERSION:-v1.22.3}"
CACHE="$HERE/../.cache"
SRC="$CACHE/franz-go-$V"
BIN="$CACHE/kgo-$V.test"
summary() { echo "$1 passed, $2 failed"; }

# --- source + test binary (cached; the same steps and paths as ../franz-go/run.sh) ---------------
mkdir -p "$CACHE"
if [[ ! -x "$BIN" || ! -f "$SRC/.complete" ]]; then
  echo "franz-go-sasl: fetching github.com/twmb/franz-go@$V through the module proxy"
  dir="$(cd "$CACHE" && timeout 600 "$GO" mod download -json "github.com/twmb/franz-go@$V" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir","")); sys.exit(1 if d.get("Error") else 0)')" || {
    echo "franz-go-sasl: go mod download failed" >&2; summary 0 1; exit 1; }
  rm -rf "$SRC" "$SRC.tmp"
  cp -r "$dir" "$SRC.tmp"
  chmod -R u+w "$SRC.tmp"
  mv "$SRC.tmp" "$SRC"
  echo "franz-go-sasl: compiling pkg/kgo tests"
  if ! (cd "$SRC" && timeout 600 "$GO" mod download && timeout 900 "$GO" test -c -o "$BIN" ./pkg/kgo/); then
    echo "franz-go-sasl: building the pkg/kgo test binary failed" >&2
    summary 0 1
    exit 1
  fi
  touch "$SRC/.complete"
fi

# --- allow-list --------------------------------------------------------------------------------
tests256=() tests512=()
while read -r name mech extra; do
  [[ -n "$name" ]] || continue
  if [[ -n "${extra:-}" || ! "$name" =~ ^Test[A-Za-z0-9_]+$ || ! "${mech:-SCRAM-SHA-256}" =~ ^SCRAM-SHA-(256|512)$ ]]; then
    echo "franz-go-sasl: bad ALLOWLIST line: $name ${mech:-} ${extra:-}" >&2
    summary 0 1
    exit 1
  fi
  if [[ "${mech:-}" == SCRAM-SHA-512 ]]; then tests512+=("$name"); else tests256+=("$name"); fi
done < <(sed -e 's/#.*//' "$HERE/ALLOWLIST")

# --- work dir, TLS material, broker, users ------------------------------------------------------
failed=0
WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-franz-go-sasl.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -ne 0 ]]; then
    echo "franz-go-sasl: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

M="$WORK/tls"
if ! timeout 120 python3 "$ROOT/compat-tests/python/tls_material.py" "$M" >"$WORK/material.log" 2>&1; then
  echo "franz-go-sasl: making the TLS material failed:" >&2
  tail -n 20 "$WORK/material.log" >&2 || true
  failed=1
  summary 0 1
  exit 1
fi
mapfile -t ports < <(millrace_free_ports 2)
SSL_PORT="${ports[0]}" SASL_PORT="${ports[1]}"
if ! millrace_start "$WORK/broker" \
  --set "listeners=SSL://127.0.0.1:$SSL_PORT,SASL_PLAINTEXT://127.0.0.1:$SASL_PORT" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT" \
  --set sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512 \
  --set ssl.keystore.type=PEM --set "ssl.keystore.location=$M/server.pem" \
  --set ssl.truststore.type=PEM --set "ssl.truststore.location=$M/ca.pem" \
  --set listener.name.ssl.ssl.client.auth=required; then
  failed=1
  summary 0 1
  exit 1
fi
if ! timeout 90 python3 "$HERE/../librdkafka-sasl/scram_users.py" --admin "$MILLRACE_ADDR" \
  --login "127.0.0.1:$SASL_PORT" --timeout 60 \
  alice:alice-secret:SCRAM-SHA-256 bob:bob-secret:SCRAM-SHA-512:16384; then
  echo "franz-go-sasl: the SCRAM users could not be created or cannot log in over SASL_PLAINTEXT" >&2
  failed=1
  summary 0 1
  exit 1
fi
echo "franz-go-sasl: broker pid $MILLRACE_PID, PLAINTEXT $MILLRACE_ADDR, SSL (mutual TLS) 127.0.0.1:$SSL_PORT, SASL_PLAINTEXT (SCRAM) 127.0.0.1:$SASL_PORT; ${#tests256[@]} + ${#tests512[@]} allow-listed tests, franz-go $V"

# run_kgo NAME SCRAM TESTS... : one test binary run; its table in $WORK/NAME.log, counts in $WORK/NAME.counts
TL="${PEER_FRANZ_TIMEOUT:-300}"
run_kgo() {
  local name="$1" scram="$2" rc=0
  shift 2
  local re
  re="^($(IFS='|'; echo "$*"))\$"
  echo "=== franz-go-sasl: $name: $* ==="
  set +o pipefail
  (cd "$SRC/pkg/kgo" &&
    KGO_SEEDS="127.0.0.1:$SSL_PORT" KGO_TEST_TLS="ca:$M/ca.pem,cert:$M/client-cert.pem,key:$M/client-key.pem" \
      KGO_TEST_SCRAM_SEEDS="127.0.0.1:$SASL_PORT" KGO_TEST_SCRAM="$scram" \
      KGO_TEST_RF=1 KGO_TEST_RECORDS="${KGO_TEST_RECORDS:-1000}" KGO_LOG_LEVEL="${KGO_LOG_LEVEL:-none}" \
      timeout --kill-after=20 "$((TL + 30))" "$GO" tool test2json -t "$BIN" -test.v=test2json \
      -test.timeout "${TL}s" -test.run "$re" "${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"}") 2>&1 |
    python3 "$ROOT/compat-tests/go/gotest2text.py" "$WORK/$name.counts" | tee "$WORK/$name.log"
  rc=${PIPESTATUS[0]}
  set -o pipefail
  local p f
  read -r p f <"$WORK/$name.counts" 2>/dev/null || { p=0; f=1; }
  if [[ $rc -ne 0 && $f -eq 0 ]]; then f=1; fi
  # Allow-listed tests that never reported (panic, timeout) or skipped themselves count as failed.
  local t
  for t in "$@"; do
    if grep -Eq "^SKIP +$t$" "$WORK/$name.log"; then
      echo "SKIPPED ITSELF  $t (counts as failed here)"
      f=$((f + 1))
    elif ! grep -Eq "^(PASS|FAIL|SKIP|DID NOT FINISH) +$t(/|$)" "$WORK/$name.log"; then
      echo "NOT RUN         $t"
      f=$((f + 1))
    fi
  done
  passed=$((passed + p)) failed=$((failed + f))
}
EXTRA_ARGS=("$@")
passed=0 failed=0
((${#tests256[@]} == 0)) || run_kgo tls-scram256 alice:alice-secret "${tests256[@]}"
((${#tests512[@]} == 0)) || run_kgo scram512 bob:bob-secret:512 "${tests512[@]}"
if ! millrace_alive; then
  echo "franz-go-sasl: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
  failed=$((failed + 1))
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
