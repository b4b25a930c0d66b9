#!/usr/bin/env bash
# Run every client suite (compat-tests/*/run.sh) one after the other, print
# each one's result and a final "N passed, M failed" line (the sum).
# A suite that ends without such a line, or that exits non-zero while
# reporting 0 failed, counts as 1 failed.
#
#   compat-tests/run-all.sh [suite ...]      e.g. run-all.sh kcat
#
# Env: COMPAT_SUITE_TIMEOUT (seconds per suite, default 2400); everything the
# suites read (MILLRACE_BIN, ...). The broker is built once up front if missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/millrace.sh
source "$HERE/lib/millrace.sh"

if (($#)); then
  suites=("$@")
else
  suites=()
  for f in "$HERE"/*/run.sh; do
    [[ -f "$f" ]] && suites+=("$(basename "$(dirname "$f")")")
  done
fi

total_passed=0
total_failed=0
results=()

# Build once here, so that no suite's time limit includes the build.
if MILLRACE_BIN="$(millrace_bin)"; then
  export MILLRACE_BIN
else
  echo "run-all: no broker binary; every suite will fail" >&2
fi

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/millrace-compat.XXXXXX")"
trap 'exit 130' INT
trap 'exit 143' TERM

for suite in "${suites[@]}"; do
  script="$HERE/$suite/run.sh"
  log="$LOGDIR/$suite.log"
  echo "=== $suite ==="
  if [[ ! -f "$script" ]]; then
    echo "run-all: no $script" >&2
    p=0 f=1 rc=127
  else
    rc=0
    timeout --kill-after=60 "${COMPAT_SUITE_TIMEOUT:-2400}" bash "$script" 2>&1 | tee "$log" || rc=$?
    line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1 || true)"
    if [[ -n "$line" ]]; then
      p="${line%% passed*}"
      f="${line#*passed, }"
      f="${f%% failed}"
    else
      p=0 f=0
    fi
    if [[ $rc -ne 0 && $f -eq 0 ]]; then
      f=1 # crashed, timed out, or exited non-zero without counting a failure
    fi
  fi
  results+=("$(printf '%-10s %5s passed, %5s failed  (exit %s)' "$suite" "$p" "$f" "$rc")")
  total_passed=$((total_passed + p))
  total_failed=$((total_failed + f))
done

echo
if ((total_failed > 0)); then
  echo "=== summary (logs kept in $LOGDIR) ==="
else
  rm -rf "$LOGDIR"
  echo "=== summary ==="
fi
for r in "${results[@]}"; do echo "$r"; done
echo "$total_passed passed, $total_failed failed"
[[ $total_failed -eq 0 ]]
