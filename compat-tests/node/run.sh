#!/usr/bin/env bash
# Node client compatibility suite: kafkajs 2.2.4 (+ its codec plugins
# kafkajs-snappy, kafkajs-lz4, @kafkajs/zstd) against one Millrace broker.
# Scenarios as in compat-tests/go (kafkajs-compat.js): metadata, round trip,
# gzip/snappy/lz4/zstd, consumer group commit + resume, admin topics,
# idempotent produce (asked for explicitly: kafkajs is not idempotent by
# default); then kafkajs-leader-change.js on a 3-node cluster (lib/millrace.sh
# millrace_cluster_start): kill -9 of a partition's leader while an idempotent
# producer sends, every record read back exactly once in order. A scenario the client cannot express is printed NOT EXPRESSIBLE
# and counted neither as passed nor as failed.
#
#   compat-tests/node/run.sh [scenario-substring ...]     e.g. compression
#
# Env: MILLRACE_BIN, NODE (default node), COMPAT_NODE_TIMEOUT (whole run,
#      seconds, default 600), KAFKAJS_SCENARIO_TIMEOUT_MS (default 90000),
#      KAFKAJS_LOG=debug|error (kafkajs log level, default none), KEEP_WORK=1.
# Last line printed: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

NODE="${NODE:-node}"
summary() { echo "$1 passed, $2 failed"; }
cd "$HERE"

# --- node_modules (skipped when package-lock.json has not changed) ----------
STAMP="node_modules/.lock.sha256"
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ ! -d node_modules || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "node: npm ci"
  # --ignore-scripts: the two native addons are built below, the way that
  # works offline with Node 20's headers.
  if ! timeout 600 npm ci --no-audit --no-fund --ignore-scripts; then
    echo "node: npm ci failed" >&2
    summary 0 1
    exit 1
  fi
  echo "$want" >"$STAMP"
fi
# Native addons of the lz4/zstd plugins: built with npm's own node-gyp against
# the installed Node headers (no download). cppzst 2.0.6 asks for -std=c++11,
# which Node 20's V8 headers reject; CXXFLAGS puts -std=gnu++17 after it.
NODE_GYP="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"
nodedir=()
[[ -f /usr/include/node/node.h ]] && nodedir=(--nodedir=/usr)
# (The lz4 tarball ships stale build/Release/*.node files: "invalid ELF
# header". Rebuild until our own stamp is there.)
for dir in node_modules/lz4 node_modules/cppzst; do
  [[ -d "$dir" && ! -f "$dir/.millrace-built" ]] || continue
  echo "node: building $dir"
  if ! (cd "$dir" && CXXFLAGS="-std=gnu++17" timeout 600 "$NODE" "$NODE_GYP" rebuild "${nodedir[@]}" >build.log 2>&1 && touch .millrace-built); then
    echo "node: building $dir failed (its codec scenario will be NOT EXPRESSIBLE); tail of $dir/build.log:" >&2
    tail -n 5 "$dir/build.log" >&2 || true
  fi
done
echo "node: $("$NODE" --version), kafkajs $("$NODE" -p 'require("kafkajs/package.json").version')"

# --- broker ------------------------------------------------------------------
failed=0
if ! millrace_session node failed; then
  summary 0 1
  exit 1
fi
export MILLRACE_ADDR
echo "node: broker pid $MILLRACE_PID at $MILLRACE_ADDR"

rc=0
timeout --kill-after=15 "${COMPAT_NODE_TIMEOUT:-600}" "$NODE" kafkajs-compat.js "$@" 2>&1 | tee "$WORK/kafkajs.log" || rc=$?
line="$(grep -E '^kafkajs: [0-9]+ passed, [0-9]+ failed' "$WORK/kafkajs.log" | tail -n1 || true)"
line="${line#kafkajs: }"
if [[ -n "$line" ]]; then
  passed="${line%% passed*}"
  failed="${line#*passed, }"
  failed="${failed%% failed*}"
else
  passed=0 failed=1
fi
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1
fi
if ! millrace_alive; then
  echo "node: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
fi
millrace_stop

# --- forced leader change on a 3-node cluster (kafkajs-leader-change.js) -----
# Runs with no filter, or with a filter that names it (e.g. run.sh leader).
run_cluster=1
if (($#)); then
  run_cluster=0
  for f in "$@"; do [[ "leader-change" == *"$f"* ]] && run_cluster=1; done
fi
if ((run_cluster)); then
  echo "=== kafkajs-leader-change (3-node cluster) ==="
  if millrace_cluster_start 3 "$WORK/cluster" --set group.initial.rebalance.delay.ms=0 \
    --set offsets.topic.num.partitions=6; then
    export MILLRACE_CLUSTER_NODES
    lrc=0
    timeout --kill-after=15 150 "$NODE" kafkajs-leader-change.js 2>&1 | tee "$WORK/leader-change.log" || lrc=$?
    line="$(grep -E '^kafkajs-leader-change: [0-9]+ passed, [0-9]+ failed$' "$WORK/leader-change.log" | tail -n1 || true)"
    if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
      lp="${BASH_REMATCH[1]}" lf="${BASH_REMATCH[2]}"
    else
      lp=0 lf=1
    fi
    [[ $lrc -ne 0 && $lf -eq 0 ]] && lf=1
    millrace_cluster_stop
  else
    echo "node: the 3-node cluster did not start" >&2
    lp=0 lf=1
  fi
  passed=$((passed + lp))
  failed=$((failed + lf))
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
