#!/usr/bin/env bash
# Run every client suite (compat-tests/*/run.sh), print each one's output and result and a final
# "N passed, M failed" line (the sum). A suite that ends without such a line, or that exits
# non-zero while reporting 0 failed, counts as 1 failed.
#
#   compat-tests/run-all.sh [suite ...]      e.g. run-all.sh kcat
#
# Lanes: the full run splits the suites into COMPAT_LANES lanes (default 2) that run side by side,
# each lane one suite after the other. Most suites spend their time waiting on brokers, timeouts
# and client start-up, not on the CPU, so two lanes on a 2-core machine take about 60% of the
# serial time. The split (LANE_PLAN below): lane 1 runs the short suites and java (Maven builds
# and JVMs) while lane 2's peer builds franz-go's and librdkafka's tests on a fresh machine, so the
# fault suites (cluster-scenarios, cluster) start once the heavy builds are over. A suite's output
# is printed whole when it ends, so lanes never interleave. Lanes take apt-get one at a time
# (lib/apt-serial). COMPAT_LANES=1, or naming suites on the command line, runs them one after the
# other as before.
#
# Env: COMPAT_SUITE_TIMEOUT (seconds per suite, default 2400); COMPAT_LANES (1 or 2); everything
# the suites read (MILLRACE_BIN, ...). The broker is built once up front if missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/millrace.sh
source "$HERE/lib/millrace.sh"

# The default split: lane 1, then lane 2 (measured serial minutes on 2 cores in brackets). A suite
# that is not named here joins lane 1.
LANE_PLAN=(
  "kcat go compose java cluster-scenarios cluster cluster-secure node http" # ~2 ~2 1.1 4.7 2.1 5.6 5.5 2.7 ~2
  "peer python"                                         # ~11 ~9
)

all_suites=()
for f in "$HERE"/*/run.sh; do
  [[ -f "$f" ]] && all_suites+=("$(basename "$(dirname "$f")")")
done

lanes=()
if (($#)); then
  lanes=("${*%/}")
elif [[ "${COMPAT_LANES:-2}" == 1 ]]; then # any other value: two lanes
  lanes=("${all_suites[*]}")
else
  planned=" ${LANE_PLAN[*]} "
  lane1="${LANE_PLAN[0]}"
  for s in "${all_suites[@]}"; do
    [[ "$planned" == *" $s "* ]] || lane1+=" $s"
  done
  # Planned suites that no longer exist are dropped (run_suite would count them as failed).
  keep() {
    local out=() s
    for s in $1; do [[ -f "$HERE/$s/run.sh" ]] && out+=("$s"); done
    echo "${out[*]}"
  }
  lanes=("$(keep "$lane1")" "$(keep "${LANE_PLAN[1]}")")
fi

# Build once here, so that no suite's time limit includes the build.
if MILLRACE_BIN="$(millrace_bin)"; then
  export MILLRACE_BIN
else
  echo "run-all: no broker binary; every suite will fail" >&2
fi

# The lines that name a failure in the suites' own formats (harness checks, pytest, go test, the
# shell suites, librdkafka's runner, node), for the failures section printed before the summary.
FAILURE_PATTERN='check FAIL:|^FAIL|FAILED|--- FAIL|^not ok|^✗|: FAIL\b'
FAILURE_NOISE='^FAILED in stage|not allow-listed|0 failed'
FAILURE_LINES_MAX=15

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/millrace-compat.XXXXXX")"
((${#lanes[@]} == 1)) || export PATH="$HERE/lib/apt-serial:$PATH"
lane_pids=()
stop_lanes() {
  local pid
  # A suite runs under `timeout` in a process group of its own: TERM to `timeout` ends that group.
  for pid in "${lane_pids[@]}"; do
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
}
trap 'stop_lanes; exit 130' INT
trap 'stop_lanes; exit 143' TERM

# Runs one suite; writes "passed failed rc seconds" to $LOGDIR/<suite>.result and prints its log
# whole. Its stdin is /dev/null: no suite waits on the terminal.
run_suite() {
  local suite="$1" script="$HERE/$1/run.sh" log="$LOGDIR/$1.log" rc=0 p=0 f=0 line started
  started=$SECONDS
  if [[ ! -f "$script" ]]; then
    echo "run-all: no $script" >"$log"
    p=0 f=1 rc=127
  else
    timeout --kill-after=60 "${COMPAT_SUITE_TIMEOUT:-2400}" bash "$script" >"$log" 2>&1 </dev/null || rc=$?
    line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1 || true)"
    if [[ -n "$line" ]]; then
      p="${line%% passed*}"
      f="${line#*passed, }"
      f="${f%% failed}"
    fi
    if [[ -z "$line" || ($rc -ne 0 && $f -eq 0) ]]; then
      f=1 # crashed, timed out, no result line, or non-zero exit without counting a failure
    fi
  fi
  echo "$p $f $rc $((SECONDS - started))" >"$LOGDIR/$suite.result"
  {
    flock 9
    echo "=== $suite ($((SECONDS - started)) s) ==="
    cat "$log"
  } 9>"$LOGDIR/.print.lock"
}

for lane in "${lanes[@]}"; do
  [[ -n "$lane" ]] || continue
  if ((${#lanes[@]} == 1)); then
    for suite in $lane; do run_suite "$suite"; done
  else
    # setsid: each lane is its own process group, so an interrupt stops its suites too.
    setsid bash -c "$(declare -f run_suite); HERE='$HERE' LOGDIR='$LOGDIR'; for s in $lane; do run_suite \"\$s\"; done" &
    lane_pids+=($!)
  fi
done
for pid in "${lane_pids[@]}"; do wait "$pid" || true; done

total_passed=0
total_failed=0
results=()
for lane in "${lanes[@]}"; do
  for suite in $lane; do
    read -r p f rc secs 2>/dev/null <"$LOGDIR/$suite.result" || { p=0 f=1 rc=-1 secs=0; }
    results+=("$(printf '%-18s %5s passed, %5s failed  (exit %s, %s s)' "$suite" "$p" "$f" "$rc" "$secs")")
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
  done
done

echo
if ((total_failed > 0)); then
  # What failed, by name, next to the summary: CI shows only the end of a run's output.
  echo "=== failures (at most $FAILURE_LINES_MAX lines a suite; the whole logs are above) ==="
  for lane in "${lanes[@]}"; do
    for suite in $lane; do
      read -r p f rc secs 2>/dev/null <"$LOGDIR/$suite.result" || f=1
      ((f > 0)) || continue
      echo "--- $suite"
      grep -E "$FAILURE_PATTERN" "$LOGDIR/$suite.log" 2>/dev/null | grep -vE "$FAILURE_NOISE" | cut -c1-300 |
        head -n "$FAILURE_LINES_MAX" || true
    done
  done
  echo "=== summary (logs kept in $LOGDIR) ==="
else
  rm -rf "$LOGDIR"
  echo "=== summary ==="
fi
for r in "${results[@]}"; do echo "$r"; done
echo "$total_passed passed, $total_failed failed"
[[ $total_failed -eq 0 ]]
