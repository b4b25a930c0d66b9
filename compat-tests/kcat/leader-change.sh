#!/usr/bin/env bash
# Goal: kcat (librdkafka) produces and consumes across a forced leader change: on a 3-node cluster
# (lib/millrace.sh millrace_cluster_start) an idempotent acks=all `kcat -P` streams numbered lines
# into a 1-partition RF 3 topic while the partition's leader is killed with kill -9; kcat exits 0
# with no delivery failure and no fatal error, and `kcat -C` reads every line exactly once, in order.
#
#   compat-tests/kcat/leader-change.sh      (run by kcat/run.sh)
#
# Env: MILLRACE_BIN, KCAT (default kcat), KEEP_WORK=1 (keep the work dir; kept anyway on failure).
# Prints "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

KCAT="${KCAT:-kcat}"
BEFORE=2000 # lines acknowledged before the kill
STREAM=6000 # lines streamed by the producer that sees the kill
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS  leader-change: $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL  leader-change: $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then tail -n 15 "$3" | sed 's/^/      /'; fi
}
summary() { echo "$passed passed, $failed failed"; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-kcat-leader.XXXXXX")"
cleanup() {
  millrace_cluster_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then
    echo "leader-change: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t_start=$(date +%s)
# Auto-created topics get 1 partition x RF 3, min.insync.replicas=2 (kcat cannot create topics).
if ! millrace_cluster_start 3 "$WORK/cluster" --set default.replication.factor=3 --set num.partitions=1 \
  --set min.insync.replicas=2; then
  fail "cluster-start" "the 3-node cluster did not start"
  summary
  exit 1
fi
B="$MILLRACE_CLUSTER_BOOTSTRAP"
topic="kcat-leader-$RANDOM$RANDOM"
kc() { timeout --kill-after=5 "${KCAT_TIMEOUT:-90}" "$KCAT" -b "$B" "$@"; }
PRODUCE_OPTS=(-X enable.idempotence=true -X acks=all -X linger.ms=5 -X message.timeout.ms=60000)

# partition 0's leader and ISR size from kcat -L -J, as "LEADER ISR_SIZE REPLICAS_SIZE" (or nothing)
leader_isr() {
  kc -L -J -t "$topic" 2>/dev/null | python3 -c '
import json, sys
md = json.load(sys.stdin)
for t in md.get("topics", []):
    for p in t.get("partitions", []):
        if p["partition"] == 0 and p.get("leader", -1) >= 0:
            print(p["leader"], len(p.get("isrs", [])), len(p.get("replicas", [])))
' || true
}

# 1. the first lines auto-create the topic; wait for a leader with a full ISR
seq 1 "$BEFORE" | sed 's/^/line-/' >"$WORK/before.in"
if ! kc -P -t "$topic" "${PRODUCE_OPTS[@]}" <"$WORK/before.in" 2>"$WORK/before.err"; then
  fail "produce-before" "kcat -P exited non-zero" "$WORK/before.err"
  summary
  exit 1
fi
leader="" deadline=$(($(date +%s) + 20))
while (($(date +%s) <= deadline)); do
  read -r l isr reps < <(leader_isr; echo) || true
  if [[ -n "${l:-}" && "${isr:-0}" == 3 && "${reps:-0}" == 3 ]]; then leader="$l"; break; fi
  sleep 0.2
done
if [[ -z "$leader" ]]; then
  fail "full-isr" "partition 0 of $topic has no leader with a full ISR of 3 within 20 s ($(leader_isr))"
  summary
  exit 1
fi
pass "produce-before ($BEFORE lines, leader $leader, ISR 3)"

# 2. keep producing (a steady stream) and kill -9 the leader one second into it
seq "$((BEFORE + 1))" "$((BEFORE + STREAM))" | sed 's/^/line-/' >"$WORK/stream.in"
awk '{ print; fflush() } NR % 200 == 0 { system("sleep 0.1") }' "$WORK/stream.in" |
  kc -P -t "$topic" "${PRODUCE_OPTS[@]}" 2>"$WORK/stream.err" &
producer=$!
sleep 1
t_kill=$(($(date +%s%N) / 1000000))
millrace_cluster_kill "$leader"
echo "leader-change: kill -9 of leader $leader while the producer streams"
rc=0
wait "$producer" || rc=$?
t_done=$(($(date +%s%N) / 1000000))
new="" deadline=$(($(date +%s) + 30))
while (($(date +%s) <= deadline)); do
  read -r l _ _ < <(leader_isr; echo) || true
  if [[ -n "${l:-}" && "$l" != "$leader" ]]; then new="$l"; break; fi
  sleep 0.2
done
errors="$(grep -E '[Ee]rror|ERROR' "$WORK/stream.err" | sort | uniq -c | head -n 10 || true)"
echo "leader-change: producer finished $((t_done - t_kill)) ms after the kill (exit $rc); new leader ${new:-none}"
if [[ -n "$errors" ]]; then
  echo "leader-change: kcat stderr lines with errors (count, line):"
  while IFS= read -r line; do echo "      $line"; done <<<"$errors"
fi
if [[ $rc -ne 0 ]]; then
  fail "produce-across-kill" "kcat -P exited $rc" "$WORK/stream.err"
elif grep -qiE 'delivery failed|failed to produce|fatal|OUT_OF_ORDER|not delivered' "$WORK/stream.err"; then
  fail "produce-across-kill" "kcat reported a failed delivery or a fatal error" "$WORK/stream.err"
elif [[ -z "$new" ]]; then
  fail "produce-across-kill" "no new leader of partition 0 within 30 s"
else
  pass "produce-across-kill ($STREAM lines, leader $leader -> $new, only retriable errors)"
fi

# 3. everything exactly once, in order
cat "$WORK/before.in" "$WORK/stream.in" >"$WORK/all.in"
if kc -C -t "$topic" -o beginning -e -f '%s\n' >"$WORK/all.out" 2>"$WORK/consume.err" &&
  cmp -s "$WORK/all.in" "$WORK/all.out"; then
  pass "consume-exactly-once ($(wc -l <"$WORK/all.out") lines in order)"
else
  dup=$(sort "$WORK/all.out" | uniq -d | wc -l)
  missing=$(sort "$WORK/all.in" | comm -23 - <(sort -u "$WORK/all.out") | wc -l)
  fail "consume-exactly-once" "read $(wc -l <"$WORK/all.out") lines, want $((BEFORE + STREAM)): $missing missing, $dup duplicated; first difference: $(cmp "$WORK/all.in" "$WORK/all.out" 2>&1 | head -n1)" "$WORK/consume.err"
fi
echo "leader-change: $(($(date +%s) - t_start)) s"
summary
[[ $failed -eq 0 ]]
