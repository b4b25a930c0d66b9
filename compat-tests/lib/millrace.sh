# shellcheck shell=bash disable=SC2034  # MILLRACE_* globals are read by the callers
# Helpers for compat-tests/*/run.sh. Source this file, then:
#
#   bin="$(millrace_bin)"            # broker path; builds it when missing
#   millrace_start WORKDIR [--set name=value ...] [--log-dirs DIR1,DIR2,...]
#       starts a broker with data dir WORKDIR/data, or with those log dirs (stdout/stderr in
#       WORKDIR/broker.{stdout,stderr}) and waits for its "listening on" line;
#       sets MILLRACE_PID, MILLRACE_PORT, MILLRACE_ADDR (127.0.0.1:PORT)
#   millrace_stop                    # SIGTERM, then SIGKILL after 10 s; only $MILLRACE_PID
#   trap 'millrace_stop' EXIT        # always
#
# Env: MILLRACE_BIN, MILLRACE_START_TIMEOUT (seconds, default 10),
#      MILLRACE_BUILD_TIMEOUT (seconds, default 3600), MILLRACE_LISTEN (the broker's
#      --listen, default 127.0.0.1:0).

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
  local args=(--listen "${MILLRACE_LISTEN:-127.0.0.1:0}") log_dirs=""
  while (($#)); do
    case "$1" in
      --set) args+=(--set "$2"); shift 2 ;;
      --log-dirs) log_dirs="$2"; shift 2 ;;
      *) args+=(--set "$1"); shift ;;
    esac
  done
  if [[ -n "$log_dirs" ]]; then
    args+=(--set "log.dirs=$log_dirs")
  else
    args+=(--data-dir "$workdir/data")
  fi
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
  millrace_cluster_stop
  if [[ -n "${KEEP_WORK:-}" || "${!MILLRACE_SESSION_FAILVAR:-0}" != 0 ]]; then
    echo "$MILLRACE_SESSION_NAME: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}

# --- a cluster of N nodes ----------------------------------------------------------------------
#
#   millrace_cluster_start N WORKDIR [--set name=value ...]
#       starts N nodes with the cluster command line of issue 12 (node i: --node-id i, data dir
#       WORKDIR/node<i>/data, --listen 127.0.0.1:K<i>, --controller-listen 127.0.0.1:C<i>,
#       --controller-voters 1@127.0.0.1:C1,...; stdout/stderr in WORKDIR/node<i>/{stdout,stderr}.log)
#       and waits until each printed "millrace ready" (MILLRACE_CLUSTER_START_TIMEOUT, default 60 s).
#       Sets MILLRACE_CLUSTER_N, MILLRACE_CLUSTER_PIDS[i], MILLRACE_CLUSTER_PORTS[i],
#       MILLRACE_CLUSTER_BOOTSTRAP (127.0.0.1:K1,...) and MILLRACE_CLUSTER_NODES
#       ("1=127.0.0.1:K1=PID1,2=..."; export it for a test program that kills a node by its pid).
#   millrace_cluster_kill I            SIGKILL node I (only the pid this shell started)
#   millrace_cluster_restart I         start node I again on its data dir and ports, wait until ready
#   millrace_cluster_stop              SIGTERM every node, SIGKILL after 20 s; no-op without a cluster
#
# The brokers get the environment without MILLRACE_* variables (except MILLRACE_LOG): Millrace
# reads those as config keys and the suites export their own (MILLRACE_ADDR, ...).
MILLRACE_CLUSTER_N=0
MILLRACE_CLUSTER_DIR=""
MILLRACE_CLUSTER_VOTERS=""
MILLRACE_CLUSTER_BOOTSTRAP=""
MILLRACE_CLUSTER_NODES=""
MILLRACE_CLUSTER_PIDS=()
MILLRACE_CLUSTER_PORTS=()
MILLRACE_CLUSTER_CPORTS=()
MILLRACE_CLUSTER_SETS=()
MILLRACE_CLUSTER_READY_FROM=()

# millrace_pid_running PID: the process exists and is not a zombie (a node a test killed by its
# pid stays a zombie until this shell waits for it)
millrace_pid_running() {
  [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
  local state
  state="$(sed -E 's/^[0-9]+ \(.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null || echo '?')"
  [[ "$state" != Z ]]
}

# millrace_free_ports N: N distinct free loopback ports, one per line
millrace_free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# the environment without MILLRACE_* (but MILLRACE_LOG), as `env -u` arguments
millrace_broker_env_args() {
  local v
  for v in $(compgen -e); do
    [[ $v == MILLRACE_* && $v != MILLRACE_LOG ]] && printf -- '-u\n%s\n' "$v"
  done
  return 0
}

millrace_cluster_start() {
  local n="$1" workdir="$2"
  shift 2
  local bin i
  bin="$(millrace_bin)" || return 1
  # The reference run (MILLRACE_BIN=reference/kafka-shim.sh, one node): cluster nodes are Apache
  # Kafka behind the cluster command line instead.
  [[ "$bin" != */reference/kafka-shim.sh ]] ||
    bin="$MILLRACE_REPO_ROOT/compat-tests/cluster-scenarios/kafka-cluster-shim.sh"
  MILLRACE_CLUSTER_BIN="$bin"
  MILLRACE_CLUSTER_N="$n"
  MILLRACE_CLUSTER_DIR="$workdir"
  MILLRACE_CLUSTER_SETS=()
  while (($#)); do
    case "$1" in
      --set) MILLRACE_CLUSTER_SETS+=(--set "$2"); shift 2 ;;
      *) MILLRACE_CLUSTER_SETS+=(--set "$1"); shift ;;
    esac
  done
  local ports
  mapfile -t ports < <(millrace_free_ports $((2 * n)))
  ((${#ports[@]} == 2 * n)) || { echo "millrace: no free ports" >&2; return 1; }
  MILLRACE_CLUSTER_PIDS=() MILLRACE_CLUSTER_PORTS=() MILLRACE_CLUSTER_CPORTS=()
  local voters=() addrs=()
  for ((i = 1; i <= n; i++)); do
    MILLRACE_CLUSTER_PORTS[i]="${ports[2 * (i - 1)]}"
    MILLRACE_CLUSTER_CPORTS[i]="${ports[2 * (i - 1) + 1]}"
    voters+=("$i@127.0.0.1:${MILLRACE_CLUSTER_CPORTS[i]}")
    addrs+=("127.0.0.1:${MILLRACE_CLUSTER_PORTS[i]}")
  done
  MILLRACE_CLUSTER_VOTERS="$(IFS=,; echo "${voters[*]}")"
  MILLRACE_CLUSTER_BOOTSTRAP="$(IFS=,; echo "${addrs[*]}")"
  for ((i = 1; i <= n; i++)); do
    millrace_cluster_launch "$i" || { millrace_cluster_stop; return 1; }
  done
  for ((i = 1; i <= n; i++)); do
    millrace_cluster_wait_ready "$i" || { millrace_cluster_stop; return 1; }
  done
}

# millrace_cluster_launch I: starts node I in the background (no wait)
millrace_cluster_launch() {
  local i="$1" dir="$MILLRACE_CLUSTER_DIR/node$1"
  mkdir -p "$dir/data"
  local envargs
  mapfile -t envargs < <(millrace_broker_env_args)
  echo "=== start at $(date +%T) ===" >>"$dir/stdout.log"
  echo "=== start at $(date +%T) ===" >>"$dir/stderr.log"
  MILLRACE_CLUSTER_READY_FROM[i]="$(wc -l <"$dir/stdout.log")"
  env "${envargs[@]}" "$MILLRACE_CLUSTER_BIN" --node-id "$i" --data-dir "$dir/data" \
    --listen "127.0.0.1:${MILLRACE_CLUSTER_PORTS[i]}" \
    --controller-listen "127.0.0.1:${MILLRACE_CLUSTER_CPORTS[i]}" \
    --controller-voters "$MILLRACE_CLUSTER_VOTERS" "${MILLRACE_CLUSTER_SETS[@]}" \
    >>"$dir/stdout.log" 2>>"$dir/stderr.log" </dev/null &
  MILLRACE_CLUSTER_PIDS[i]=$!
  millrace_cluster_nodes_var
}

millrace_cluster_nodes_var() {
  local i nodes=()
  for ((i = 1; i <= MILLRACE_CLUSTER_N; i++)); do
    nodes+=("$i=127.0.0.1:${MILLRACE_CLUSTER_PORTS[i]}=${MILLRACE_CLUSTER_PIDS[i]:-0}")
  done
  MILLRACE_CLUSTER_NODES="$(IFS=,; echo "${nodes[*]}")"
}

# millrace_cluster_wait_ready I: waits for node I's "millrace ready" line of its latest start
millrace_cluster_wait_ready() {
  local i="$1" dir="$MILLRACE_CLUSTER_DIR/node$1"
  local pid="${MILLRACE_CLUSTER_PIDS[i]}"
  local timeout_s="${MILLRACE_CLUSTER_START_TIMEOUT:-60}"
  local deadline=$(($(date +%s) + timeout_s))
  while :; do
    if tail -n "+$((MILLRACE_CLUSTER_READY_FROM[i] + 1))" "$dir/stdout.log" | grep -q "millrace ready"; then
      return 0
    fi
    if ! millrace_pid_running "$pid"; then
      local rc=0
      wait "$pid" || rc=$?
      echo "millrace: cluster node $i exited (rc=$rc) before 'millrace ready'; stderr tail:" >&2
      tail -n 30 "$dir/stderr.log" >&2 || true
      return 1
    fi
    if (($(date +%s) > deadline)); then
      echo "millrace: cluster node $i not ready within ${timeout_s}s; stderr tail:" >&2
      tail -n 30 "$dir/stderr.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
}

millrace_cluster_kill() {
  local i="$1" pid="${MILLRACE_CLUSTER_PIDS[$1]:-}"
  [[ -n "$pid" ]] || return 0
  kill -CONT "$pid" 2>/dev/null || true
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  MILLRACE_CLUSTER_PIDS[i]=""
  millrace_cluster_nodes_var
}

millrace_cluster_restart() {
  local i="$1" pid="${MILLRACE_CLUSTER_PIDS[$1]:-}"
  if millrace_pid_running "$pid"; then
    echo "millrace: cluster node $i is still running (pid $pid)" >&2
    return 1
  fi
  [[ -n "$pid" ]] && { wait "$pid" 2>/dev/null || true; }
  millrace_cluster_launch "$i" && millrace_cluster_wait_ready "$i"
}

millrace_cluster_stop() {
  local i pid left
  for ((i = 1; i <= MILLRACE_CLUSTER_N; i++)); do
    pid="${MILLRACE_CLUSTER_PIDS[i]:-}"
    [[ -n "$pid" ]] && kill -CONT "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  done
  for ((left = 200; left > 0; left--)); do
    local running=0
    for ((i = 1; i <= MILLRACE_CLUSTER_N; i++)); do
      pid="${MILLRACE_CLUSTER_PIDS[i]:-}"
      millrace_pid_running "$pid" && running=1
    done
    ((running)) || break
    sleep 0.1
  done
  for ((i = 1; i <= MILLRACE_CLUSTER_N; i++)); do
    pid="${MILLRACE_CLUSTER_PIDS[i]:-}"
    [[ -n "$pid" ]] || continue
    if millrace_pid_running "$pid"; then
      echo "millrace: cluster node $i (pid $pid) ignored SIGTERM for 20 s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    MILLRACE_CLUSTER_PIDS[i]=""
  done
  MILLRACE_CLUSTER_N=0
  return 0
}
