#!/usr/bin/env bash
# Apache Kafka 4.4's kafka-share-groups.sh (org.apache.kafka.tools.consumer.group.ShareGroupCommand
# from kafka-tools 4.4.0, run with java -cp as bin/kafka-share-groups.sh does) against one broker,
# on a share group that a real KafkaShareConsumer makes (share-cli/ShareCliGroup.java):
# --list; --describe --state, --members and --offsets while the member is in the group (Stable)
# and after it left (Empty); --reset-offsets --to-earliest --dry-run, --to-offset --execute (a new
# consumer then reads from that offset) and --to-earliest --execute; --delete-offsets; --delete.
# The checks hold on Kafka 4.4 too (its start offsets differ: Kafka persists the share-partition
# start lazily, so only lags and what the tool printed from the request are compared):
#
#   compat-tests/java/share-cli.sh
#   MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 compat-tests/java/share-cli.sh
#
# Env: MILLRACE_BIN, TOOL_TIMEOUT (seconds per tool run, default 90), KEEP_WORK=1.
# Last line: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }

# kafka-tools and kafka-clients 4.4 (share-cli/pom.xml), resolved once per pom change.
CP="$(pom_classpath share-cli)" || { fail classpath "could not resolve kafka-tools 4.4"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-share-cli.XXXXXX")"
MEMBER_PID=""
cleanup() {
  if [[ -n "$MEMBER_PID" ]]; then kill "$MEMBER_PID" 2>/dev/null || true; fi
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "share-cli: work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK/classes"
if ! javac -d "$WORK/classes" -cp "$CP" "$HERE/share-cli/ShareCliGroup.java" >"$WORK/javac.log" 2>&1; then
  fail compile "javac ShareCliGroup.java" "$WORK/javac.log"
  summary
  exit 1
fi

if ! millrace_start "$WORK/broker" --set millrace.share.groups.enable=true; then
  fail broker-start "broker did not start" "$WORK/broker/broker.stderr"
  summary
  exit 1
fi
B="$MILLRACE_ADDR"
echo "share-cli: broker pid $MILLRACE_PID at $B ($MILLRACE_BIN)"

S="$RANDOM$RANDOM"
T="share-cli-topic-$S"
G="share-cli-group-$S"

JAVA_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto)
group_client() { timeout --kill-after=10 120 java "${JAVA_OPTS[@]}" -cp "$WORK/classes:$CP" ShareCliGroup "$B" "$T" "$G" "$@"; }
share_groups() {
  timeout --kill-after=10 "${TOOL_TIMEOUT:-90}" java "${JAVA_OPTS[@]}" -cp "$CP" \
    org.apache.kafka.tools.consumer.group.ShareGroupCommand --bootstrap-server "$B" "$@"
}

# check NAME PATTERN ARGS... : runs kafka-share-groups.sh ARGS; passes when it exits 0 and a line
# of its output matches the extended regex PATTERN (fields separated by any run of spaces).
check() {
  local name="$1" pattern="$2"
  shift 2
  local out="$WORK/$name.out" rc=0
  share_groups "$@" >"$out" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$name" "kafka-share-groups.sh $* exited $rc" "$out"
  elif sed -E 's/ +/ /g' "$out" | grep -qE "$pattern"; then
    pass "$name"
  else
    fail "$name" "no line matches /$pattern/" "$out"
  fi
}

# absent NAME PATTERN ARGS... : like check, but no line may match.
absent() {
  local name="$1" pattern="$2"
  shift 2
  local out="$WORK/$name.out" rc=0
  share_groups "$@" >"$out" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$name" "kafka-share-groups.sh $* exited $rc" "$out"
  elif sed -E 's/ +/ /g' "$out" | grep -qE "$pattern"; then
    fail "$name" "a line matches /$pattern/" "$out"
  else
    pass "$name"
  fi
}

if ! group_client create >"$WORK/create.out" 2>&1; then
  fail create-topic "could not create $T" "$WORK/create.out"
  summary
  exit 1
fi

# A member joins, reads 10 records (and the warm-up ones) and stays in the group.
N=10
group_client member "$N" "$WORK/stop" >"$WORK/member.out" 2>&1 &
MEMBER_PID=$!
END=""
deadline=$(($(now_ms) + 90000))
while (($(now_ms) < deadline)) && kill -0 "$MEMBER_PID" 2>/dev/null; do
  END="$(sed -nE 's/^READY ([0-9]+)$/\1/p' "$WORK/member.out")"
  [[ -n "$END" ]] && break
  sleep 0.5
done
if [[ -z "$END" ]]; then
  fail share-member "the share consumer did not read its records" "$WORK/member.out"
  summary
  exit 1
fi
pass share-member
echo "share-cli: the member read up to offset $END"

check list "^$G\$" --list
check describe-state-stable "^$G [0-9.:]+ \([0-9]+\) Stable 1\$" --describe --group "$G" --state
check describe-members "^$G [A-Za-z0-9_-]+ /127\.0\.0\.1 share-cli-member 1 $T:0\$" --describe --group "$G" --members
check describe-offsets-stable "^$G $T 0 [0-9]+ 0\$" --describe --group "$G" --offsets

# The member leaves: the group is Empty; 5 more records make a lag of 5.
touch "$WORK/stop"
member_rc=0
wait "$MEMBER_PID" || member_rc=$?
MEMBER_PID=""
if [[ $member_rc -ne 0 ]]; then fail member-close "the member exited $member_rc" "$WORK/member.out"; fi
check describe-state-empty "^$G [0-9.:]+ \([0-9]+\) Empty 0\$" --describe --group "$G" --state
group_client produce 5 >"$WORK/produce.out" 2>&1 || fail produce "could not produce" "$WORK/produce.out"
END=$((END + 5))
check describe-offsets-lag "^$G $T 0 [0-9]+ 5\$" --describe --group "$G" --offsets

# Reset: a dry run changes nothing; --to-offset 2 does, and a new member reads from there.
check reset-dry-run "^$G $T 0 0\$" --reset-offsets --group "$G" --topic "$T" --to-earliest --dry-run
check describe-after-dry-run "^$G $T 0 [0-9]+ 5\$" --describe --group "$G" --offsets
check reset-to-offset "^$G $T 0 2\$" --reset-offsets --group "$G" --topic "$T" --to-offset 2 --execute
check describe-after-reset "^$G $T 0 2 $((END - 2))\$" --describe --group "$G"
if group_client drain $((END - 2)) >"$WORK/drain.out" 2>&1 &&
  grep -qx "GOT $((END - 2)) FIRST 2" "$WORK/drain.out"; then
  pass consume-after-reset
else
  fail consume-after-reset "expected GOT $((END - 2)) FIRST 2" "$WORK/drain.out"
fi
check describe-after-consume "^$G $T 0 [0-9]+ 0\$" --describe --group "$G" --offsets
check reset-to-earliest "^$G $T 0 0\$" --reset-offsets --group "$G" --topic "$T" --to-earliest --execute

# Delete the topic's offsets, then the group.
check delete-offsets "^$T Successful\$" --delete-offsets --group "$G" --topic "$T"
check describe-no-offsets "has no offset information" --describe --group "$G" --offsets
check delete-group "^Deletion of requested share groups \('$G'\) was successful\.\$" --delete --group "$G"
absent list-after-delete "^$G\$" --list

summary
