#!/usr/bin/env bash
# Go client compatibility suite: franz-go (kgo + kadm) and Sarama against one
# Millrace broker. Same scenarios per client (franz_test.go, sarama_test.go):
# metadata, round trip (keys, null/empty, headers, timestamps), gzip/snappy/
# lz4/zstd, consumer group commit + resume, admin create/describe/delete
# topics, idempotent produce; then franz-go across a kill -9 of a partition's
# leader on a 3-node cluster (lib/millrace.sh millrace_cluster_start).
#
#   compat-tests/go/run.sh [go test args...]     e.g. -run 'TestFranz'
#
# Env: MILLRACE_BIN (broker binary; built with cargo when missing),
#      GO (default go), COMPAT_GO_TIMEOUT (go test -timeout in seconds, default 480),
#      KEEP_WORK=1 keeps the work dir (also kept when a test fails),
#      COMPAT_GO_CLUSTER=0 skips the 3-node cluster stage.
# Last line printed: "N passed, M failed" (leaf tests: subtests count, their
# parents do not).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

GO="${GO:-go}"
summary() { echo "$1 passed, $2 failed"; }

if ! command -v "$GO" >/dev/null 2>&1; then
  echo "go: no Go toolchain ($GO)" >&2
  summary 0 1
  exit 1
fi
cd "$HERE"
echo "go: $("$GO" version)"
# Modules come from the Go module proxy (go.sum pins them).
if ! timeout 600 "$GO" mod download; then
  echo "go: go mod download failed" >&2
  summary 0 1
  exit 1
fi
# Compile first, so that the go test timeout below only covers the tests.
if ! timeout 900 "$GO" test -count=1 -run '^$' . >/dev/null; then
  echo "go: compiling the tests failed" >&2
  "$GO" vet . >&2 || true
  summary 0 1
  exit 1
fi

failed_any=0
if ! millrace_session go failed_any; then
  summary 0 1
  exit 1
fi
export MILLRACE_ADDR
echo "go: broker pid $MILLRACE_PID at $MILLRACE_ADDR"

T="${COMPAT_GO_TIMEOUT:-480}"
# go test -json is turned into the usual -v text as it arrives (gotest2text.py)
# and leaf tests are counted there.
rc=0
set +o pipefail
timeout --kill-after=30 "$((T + 60))" "$GO" test -count=1 -json -timeout "${T}s" "$@" . 2>"$WORK/test.stderr" |
  python3 "$HERE/gotest2text.py" "$WORK/counts"
rc=${PIPESTATUS[0]}
set -o pipefail
if [[ $rc -ne 0 ]] && ! grep -q . "$WORK/counts" 2>/dev/null; then
  echo "go: go test exited $rc without results" >&2
fi
cat "$WORK/test.stderr" >&2 || true
read -r passed failed <"$WORK/counts" 2>/dev/null || { passed=0; failed=1; }
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1 # go test failed without a failing test (build error, timeout)
fi
[[ $failed -eq 0 ]] || failed_any=1
if ! millrace_alive; then
  echo "go: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
fi
millrace_stop

# --- forced leader change on a 3-node cluster (franz_cluster_test.go) --------
# The test skips itself above (no MILLRACE_CLUSTER_NODES); here it gets its own cluster. Runs
# unless COMPAT_GO_CLUSTER=0.
if [[ "${COMPAT_GO_CLUSTER:-1}" != 0 ]]; then
  echo "=== TestFranzLeaderChangeRoundTrip, TestSaramaClusterProducesToEveryLeader (3-node cluster) ==="
  lp=0 lf=1
  if millrace_cluster_start 3 "$WORK/cluster"; then
    export MILLRACE_CLUSTER_NODES
    lrc=0
    set +o pipefail
    timeout --kill-after=15 180 "$GO" test -count=1 -json -timeout 150s -run '^(TestFranzLeaderChangeRoundTrip|TestSaramaClusterProducesToEveryLeader)$' . \
      2>"$WORK/cluster-test.stderr" | python3 "$HERE/gotest2text.py" "$WORK/cluster-counts"
    lrc=${PIPESTATUS[0]}
    set -o pipefail
    cat "$WORK/cluster-test.stderr" >&2 || true
    read -r lp lf <"$WORK/cluster-counts" 2>/dev/null || { lp=0; lf=1; }
    if [[ $lrc -ne 0 && $lf -eq 0 ]] || ((lp + lf == 0)); then
      lf=1 # failed without a failing test, or the test did not run
    fi
    millrace_cluster_stop
  else
    echo "go: the 3-node cluster did not start" >&2
  fi
  passed=$((passed + lp))
  failed=$((failed + lf))
  # shellcheck disable=SC2034 # read by millrace_session_end (keeps WORK on failure)
  [[ $failed -eq 0 ]] || failed_any=1
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
