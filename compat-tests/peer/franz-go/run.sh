#!/usr/bin/env bash
# franz-go's own pkg/kgo integration tests against one Millrace broker.
#
#   compat-tests/peer/franz-go/run.sh [extra test-binary args...]
#
# The module source comes from the Go module proxy (go mod download -json
# github.com/twmb/franz-go@VERSION), is copied to a writable place under
# compat-tests/peer/.cache/ (gitignored) and its pkg/kgo test binary is
# compiled once (go test -c) and kept there. Runs the tests named in
# ALLOWLIST with KGO_SEEDS=<broker> KGO_TEST_RF=1 KGO_TEST_RECORDS=<small>.
#
# Env: MILLRACE_BIN, GO (default go), FRANZ_GO_VERSION (default v1.22.3),
#      KGO_TEST_RECORDS (default 1000), PEER_FRANZ_TIMEOUT (seconds for the
#      test binary, default 420), KGO_LOG_LEVEL (default none), KEEP_WORK=1.
# Last line printed: "N passed, M failed" (leaf tests; skipped ones count
# neither way).
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
mkdir -p "$CACHE"

# --- source + test binary (cached) -----------------------------------------
if [[ ! -x "$BIN" || ! -f "$SRC/.complete" ]]; then
  echo "franz-go: fetching github.com/twmb/franz-go@$V through the module proxy"
  dir="$(cd "$CACHE" && timeout 600 "$GO" mod download -json "github.com/twmb/franz-go@$V" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir","")); sys.exit(1 if d.get("Error") else 0)')" || {
    echo "franz-go: go mod download failed" >&2; summary 0 1; exit 1; }
  rm -rf "$SRC" "$SRC.tmp"
  cp -r "$dir" "$SRC.tmp"
  chmod -R u+w "$SRC.tmp"
  mv "$SRC.tmp" "$SRC"
  echo "franz-go: compiling pkg/kgo tests"
  if ! (cd "$SRC" && timeout 600 "$GO" mod download && timeout 900 "$GO" test -c -o "$BIN" ./pkg/kgo/); then
    echo "franz-go: building the pkg/kgo test binary failed" >&2
    summary 0 1
    exit 1
  fi
  touch "$SRC/.complete"
fi

mapfile -t tests < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/ALLOWLIST" | grep -v '^$')
run_re="^($(IFS='|'; echo "${tests[*]}"))\$"

# --- broker ------------------------------------------------------------------
failed=0
if ! millrace_session franz-go failed; then
  summary 0 1
  exit 1
fi
echo "franz-go: broker pid $MILLRACE_PID at $MILLRACE_ADDR; ${#tests[@]} allow-listed tests, franz-go $V"

T="${PEER_FRANZ_TIMEOUT:-420}"
rc=0
set +o pipefail
(cd "$SRC/pkg/kgo" &&
  KGO_SEEDS="$MILLRACE_ADDR" KGO_TEST_RF=1 KGO_TEST_RECORDS="${KGO_TEST_RECORDS:-1000}" \
    KGO_LOG_LEVEL="${KGO_LOG_LEVEL:-none}" \
    timeout --kill-after=20 "$((T + 30))" "$GO" tool test2json -t "$BIN" -test.v=test2json \
    -test.timeout "${T}s" -test.run "$run_re" "$@") 2>&1 |
  python3 "$ROOT/compat-tests/go/gotest2text.py" "$WORK/counts" | tee "$WORK/test.log"
rc=${PIPESTATUS[0]}
set -o pipefail
read -r passed failed <"$WORK/counts" 2>/dev/null || { passed=0; failed=1; }
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1
fi
# Allow-listed tests that never reported (panic, timeout) count as failed.
for t in "${tests[@]}"; do
  if ! grep -Eq "^(PASS|FAIL|SKIP|DID NOT FINISH) +$t(/|$)" "$WORK/test.log"; then
    echo "NOT RUN         $t"
    failed=$((failed + 1))
  fi
done
if ! millrace_alive; then
  echo "franz-go: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
