#!/usr/bin/env bash
# Peer test suites that accept an external broker (protocol-checklist §7),
# each against its own Millrace broker:
#   franz-go/    franz-go's pkg/kgo integration tests (ALLOWLIST)
#   librdkafka/  librdkafka's tests/ test-runner (ALLOWLIST)
#   librdkafka-848/ its group and commit tests again with group.protocol=consumer (KIP-848)
#   kafka-python/ kafka-python's test/integration pytest suite (ALLOWLIST)
#   librdkafka-sasl/ librdkafka's SASL/SSL tests and a smoke subset over SASL_SSL + SCRAM
#                 (its own librdkafka build with SSL; ALLOWLIST)
#   franz-go-sasl/ franz-go's SCRAM tests (SASL_PLAINTEXT) and a subset over mutual TLS (ALLOWLIST)
# Builds are cached under compat-tests/peer/.cache/ (gitignored); a cold
# cache costs about 3-5 minutes on 2 cores (librdkafka + its tests, the kgo
# test binary) plus about 2-3 for librdkafka-sasl's SSL build, a warm run about
# 5-7 minutes.
#
#   compat-tests/peer/run.sh [franz-go|librdkafka|librdkafka-848|kafka-python|librdkafka-sasl|franz-go-sasl ...]
#
# Env: everything the suites' run.sh read; PEER_SUITE_TIMEOUT (seconds per suite,
#      default 480).
# Last line printed: "N passed, M failed" (the sum; a suite that ends
# without such a line counts as 1 failed).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

suites=("$@")
((${#suites[@]})) || suites=(franz-go librdkafka librdkafka-848 kafka-python librdkafka-sasl franz-go-sasl)

if MILLRACE_BIN="$(millrace_bin)"; then
  export MILLRACE_BIN
else
  echo "peer: no broker binary" >&2
  echo "0 passed, ${#suites[@]} failed"
  exit 1
fi

LOG="$(mktemp -d "${TMPDIR:-/tmp}/millrace-peer.XXXXXX")"
trap 'rm -rf "$LOG"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tp=0 tf=0 lines=()
for s in "${suites[@]}"; do
  echo "=== peer/$s ==="
  t0=$(date +%s) rc=0
  timeout --kill-after=30 "${PEER_SUITE_TIMEOUT:-480}" bash "$HERE/$s/run.sh" 2>&1 | tee "$LOG/$s.log" || rc=$?
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$LOG/$s.log" | tail -n1 || true)"
  p=0 f=0
  if [[ -n "$line" ]]; then
    p="${line%% passed*}"
    f="${line#*passed, }"
    f="${f%% failed}"
  fi
  if [[ -z "$line" || ($rc -ne 0 && $f -eq 0) ]]; then f=1; fi
  lines+=("$(printf '%-16s %4s passed, %4s failed  (exit %s, %ss)' "$s" "$p" "$f" "$rc" "$(($(date +%s) - t0))")")
  tp=$((tp + p)) tf=$((tf + f))
done
echo
echo "=== peer summary ==="
for l in "${lines[@]}"; do echo "$l"; done
echo "$tp passed, $tf failed"
[[ $tf -eq 0 ]]
