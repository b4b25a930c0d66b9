#!/usr/bin/env bash
# A seconds-long smoke run of millrace-bench against a real Millrace, so the benchmark tool keeps
# working (issue 6). No timing is asserted: only that each mode runs and reports what it did.
set -uo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p millrace-broker -p millrace-bench || exit 1
BROKER=target/debug/millrace
BENCH=target/debug/millrace-bench
work="$(mktemp -d)"
pid=""
cleanup() { [[ -n "$pid" ]] && { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$work"; }
trap cleanup EXIT

"$BROKER" --data-dir "$work/data" --listen 127.0.0.1:0 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 100); do grep -q "listening on" "$work/out" && break; sleep 0.1; done
addr="$(grep -o 'listening on [0-9.]*:[0-9]*' "$work/out" | awk '{print $3}')"
[[ -n "$addr" ]] || { echo "bench smoke: broker did not start"; echo "0 passed, 1 failed"; exit 1; }

passed=0 failed=0
check() { # name, command...
  local name="$1"; shift
  local out
  if out="$(timeout 60 "$@" 2>"$work/$name.err")" &&
     python3 -c 'import json,sys; r=json.loads(sys.argv[1].splitlines()[-1]); sys.exit(0 if r["messages"] > 0 and r["errors"] == 0 else 1)' "$out"; then
    passed=$((passed + 1)); echo "PASS  bench $name: $(echo "$out" | tail -n 1 | cut -c1-160)"
  else
    failed=$((failed + 1)); echo "FAIL  bench $name: $out $(tail -n 5 "$work/$name.err")"
  fi
}
common=(--bootstrap "$addr" --broker-pid "$pid" --json)
check produce "$BENCH" produce "${common[@]}" --topic smoke --partitions 3 --count 2000 --message-size 200
check consume "$BENCH" consume "${common[@]}" --topic smoke --count 2000 --timeout 30
check primed "$BENCH" produce "${common[@]}" --topic smoke-primed --partitions 20 --count 1000 --prime
check trickle "$BENCH" trickle "${common[@]}" --topic smoke-trickle --partitions 20 --rate 20 --duration 3
check e2e "$BENCH" e2e "${common[@]}" --topic smoke-e2e --partitions 2 --count 500 --rate-mb 1
port2="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
check first-produce "$BENCH" first-produce --bootstrap "127.0.0.1:$port2" --json --timeout 30 -- \
  "$BROKER" --data-dir "$work/data2" --listen "127.0.0.1:$port2"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
