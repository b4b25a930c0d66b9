# shellcheck shell=bash disable=SC2034  # MILLRACE_* globals are read by the callers
# Helpers for compat-tests/*/run.sh. Source this file, then:
#
#   bin="$(millrace_bin)"            # broker path; builds it when missing
#   millrace_start WORKDIR [--set name=value ...]
#       starts a broker with data dir WORKDIR/data (stdout/stderr in
#       WORKDIR/broker.{stdout,stderr}) and waits for its "listening on" line;
#       sets MILLRACE_PID, MILLRACE_PORT, MILLRACE_ADDR (127.0.0.1:PORT)
#   millrace_stop                    # SIGTERM, then SIGKILL after 10 s; only $MILLRACE_PID
#   trap 'millrace_stop' EXIT        # always
#
# Env: MILLRACE_BIN, MILLRACE_START_TIMEOUT (seconds, default 10),
#      MILLRACE_BUILD_TIMEOUT (seconds, default 3600).

MILLRACE_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MILLRACE_REPO_ROOT="$(cd "$MILLRACE_LIB_DIR/../.." && pwd)"
MILLRACE_PID=""
MILLRACE_PORT=""
MILLRACE_ADDR=""
MILLRACE_WORKDIR=""

millrace_bin() {
  local bin
  if [[ -n "${MILLRACE_BIN:-}" ]]; then
    bin="$MILLRACE_BIN"
    [[ -x "$bin" ]] || { echo "millrace: MILLRACE_BIN=$bin is not executable" >&2; return 1; }
    echo "$bin"
    return 0
  fi
  # Always (re)build: cargo is a no-op when the binary is fresh, and a stale binary would test
  # yesterday's broker.
  bin="$MILLRACE_REPO_ROOT/target/debug/millrace"
  (cd "$MILLRACE_REPO_ROOT" &&
    timeout "${MILLRACE_BUILD_TIMEOUT:-3600}" cargo build -q -p millrace-broker >&2) || {
    echo "millrace: cargo build -p millrace-broker failed" >&2
    return 1
  }
  [[ -x "$bin" ]] || { echo "millrace: build did not produce $bin" >&2; return 1; }
  echo "$bin"
}

millrace_start() {
  local workdir="$1"
  shift
  local bin
  bin="$(millrace_bin)" || return 1
  mkdir -p "$workdir/data"
  MILLRACE_WORKDIR="$workdir"
  local out="$workdir/broker.stdout" err="$workdir/broker.stderr"
  local args=(--data-dir "$workdir/data" --listen 127.0.0.1:0)
  while (($#)); do
    case "$1" in
      --set) args+=(--set "$2"); shift 2 ;;
      *) args+=(--set "$1"); shift ;;
    esac
  done
  "$bin" "${args[@]}" >"$out" 2>"$err" </dev/null &
  MILLRACE_PID=$!
  local timeout_s="${MILLRACE_START_TIMEOUT:-10}"
  local deadline=$(($(date +%s%N) / 1000000 + ${timeout_s%.*} * 1000))
  local port=""
  while :; do
    port="$(sed -nE 's/.*listening on 127\.0\.0\.1:([0-9]+).*/\1/p' "$out" | head -n1)"
    if [[ -n "$port" ]]; then
      MILLRACE_PORT="$port"
      MILLRACE_ADDR="127.0.0.1:$port"
      return 0
    fi
    if ! kill -0 "$MILLRACE_PID" 2>/dev/null; then
      local rc=0
      wait "$MILLRACE_PID" || rc=$?
      echo "millrace: broker exited (rc=$rc) before 'listening on'; stderr tail:" >&2
      tail -n 30 "$err" >&2 || true
      MILLRACE_PID=""
      return 1
    fi
    if (($(date +%s%N) / 1000000 > deadline)); then
      echo "millrace: no 'listening on 127.0.0.1:PORT' line within ${timeout_s}s; stderr tail:" >&2
      tail -n 30 "$err" >&2 || true
      millrace_stop
      return 1
    fi
    sleep 0.05
  done
}

# millrace_alive: is the broker we started still running?
millrace_alive() {
  [[ -n "$MILLRACE_PID" ]] && kill -0 "$MILLRACE_PID" 2>/dev/null
}

# millrace_stop: stop only the broker this shell started. Sets MILLRACE_EXIT.
millrace_stop() {
  MILLRACE_EXIT=""
  [[ -n "$MILLRACE_PID" ]] || return 0
  local pid="$MILLRACE_PID" i
  MILLRACE_PID=""
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "millrace: broker $pid ignored SIGTERM for 10 s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  MILLRACE_EXIT="$rc"
  return 0
}

# millrace_session NAME FAILVAR [--set name=value ...]
#   The set-up every suite shares: a temporary work dir in WORK, a broker in WORK/broker, and
#   EXIT/INT/TERM traps that stop the broker and remove WORK, unless KEEP_WORK is set or the
#   caller's variable FAILVAR (its failure count or flag) is non-zero at exit, in which case WORK
#   is kept for the logs. Returns non-zero (with FAILVAR set to 1) when the broker did not start.
millrace_session() {
  MILLRACE_SESSION_NAME="$1"
  MILLRACE_SESSION_FAILVAR="$2"
  shift 2
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-$MILLRACE_SESSION_NAME.XXXXXX")"
  trap millrace_session_end EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if ! millrace_start "$WORK/broker" "$@"; then
    printf -v "$MILLRACE_SESSION_FAILVAR" '%s' 1
    return 1
  fi
}

# The EXIT trap of millrace_session.
millrace_session_end() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || "${!MILLRACE_SESSION_FAILVAR:-0}" != 0 ]]; then
    echo "$MILLRACE_SESSION_NAME: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
