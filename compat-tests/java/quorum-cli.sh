#!/usr/bin/env bash
# Apache Kafka 4.4's kafka-metadata-quorum.sh (org.apache.kafka.tools.MetadataQuorumCommand from
# kafka-tools 4.4.0, the jars of share-cli/pom.xml) against a 3-node cluster (lib/millrace.sh):
# `describe --status` names a leader among the three voters and a high watermark; `describe
# --replication` lists the three voters, one Leader and two Followers, each with a log end offset;
# after a kill -9 of the leader another voter leads in a higher epoch; once the killed node is back,
# every voter catches up (MaxFollowerLag 0). The same checks hold on a 3-node Kafka 4.4 cluster:
#
#   compat-tests/java/quorum-cli.sh
#   MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 compat-tests/java/quorum-cli.sh
#
# Env: MILLRACE_BIN, TOOL_TIMEOUT (seconds per tool run, default 90), KEEP_WORK=1.
# Last line: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }
CP="$(pom_classpath share-cli)" || { fail classpath "could not resolve kafka-tools 4.4"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-quorum-cli.XXXXXX")"
cleanup() {
  millrace_cluster_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "quorum-cli: work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! millrace_cluster_start 3 "$WORK/nodes"; then
  fail cluster-start "the 3-node cluster did not start"
  summary
  exit 1
fi
echo "quorum-cli: 3 nodes at $MILLRACE_CLUSTER_BOOTSTRAP"

JAVA_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto)
# quorum OUT ARGS... : kafka-metadata-quorum.sh ARGS, output (spaces squeezed) in OUT
quorum() {
  local out="$1"
  shift
  timeout --kill-after=10 "${TOOL_TIMEOUT:-90}" java "${JAVA_OPTS[@]}" -cp "$CP" \
    org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$MILLRACE_CLUSTER_BOOTSTRAP" "$@" \
    >"$out.raw" 2>&1 || { sed -E 's/[[:space:]]+/ /g' "$out.raw" >"$out"; return 1; }
  sed -E 's/[[:space:]]+/ /g' "$out.raw" >"$out"
}
field() { sed -nE "s/^$1: ([0-9-]+) ?\$/\\1/p" "$2" | head -1; }

# read_status OUT : describe --status into OUT; sets LEADER, EPOCH, HW, LAG and VOTERS (how many
# of ids 1-3 CurrentVoters names)
read_status() {
  local out="$1" v
  LEADER="" EPOCH="" HW="" LAG="" VOTERS=0
  quorum "$out" describe --status || return 1
  LEADER="$(field LeaderId "$out")" EPOCH="$(field LeaderEpoch "$out")"
  HW="$(field HighWatermark "$out")" LAG="$(field MaxFollowerLag "$out")"
  for v in 1 2 3; do
    grep -E '^CurrentVoters: ' "$out" | grep -qE "\"id\": ?$v[,}]" && VOTERS=$((VOTERS + 1))
  done
  return 0
}

# status NAME : passes when describe --status names a leader among three voters and a high
# watermark
status() {
  local name="$1" out="$WORK/$1.out"
  if ! read_status "$out"; then
    fail "$name" "describe --status failed" "$out"
    return 1
  fi
  if [[ "$LEADER" =~ ^[123]$ && "$EPOCH" =~ ^[0-9]+$ && "${HW:--1}" -gt 0 && $VOTERS -eq 3 ]]; then
    pass "$name"
  else
    fail "$name" "leader '$LEADER', epoch '$EPOCH', high watermark '$HW', $VOTERS of 3 voters" "$out"
    return 1
  fi
}

# replication NAME : describe --replication lists voters 1-3, one Leader and two Followers
replication() {
  local name="$1" out="$WORK/$1.out"
  if ! quorum "$out" describe --replication; then
    fail "$name" "describe --replication failed" "$out"
    return 1
  fi
  local leaders followers v rows=0
  leaders="$(grep -cE ' Leader ?$' "$out" || true)"
  followers="$(grep -cE ' Follower ?$' "$out" || true)"
  for v in 1 2 3; do
    grep -qE "^$v ([^ ]+ )?[0-9]+ [0-9]+ " "$out" && rows=$((rows + 1))
  done
  if [[ $leaders -eq 1 && $followers -eq 2 && $rows -eq 3 ]]; then
    pass "$name"
  else
    fail "$name" "$leaders Leader, $followers Follower, $rows of 3 voter rows" "$out"
  fi
}

status describe-status || true
replication describe-replication

# kill -9 of the leader: another voter leads in a higher epoch.
old_leader="${LEADER:-1}" old_epoch="${EPOCH:-0}"
millrace_cluster_kill "$old_leader"
deadline=$(($(now_ms) + 60000))
while (($(now_ms) < deadline)); do
  read_status "$WORK/after-kill.out" && [[ "$LEADER" =~ ^[123]$ && "$LEADER" != "$old_leader" &&
    "${EPOCH:-0}" -gt "$old_epoch" ]] && break
  sleep 1
done
status leader-after-kill || true
if [[ "${LEADER:-}" != "$old_leader" && "${EPOCH:-0}" -gt "$old_epoch" ]]; then
  pass new-leader-higher-epoch
else
  fail new-leader-higher-epoch "leader $LEADER in epoch $EPOCH (was $old_leader in $old_epoch)" "$WORK/leader-after-kill.out"
fi

# The killed node comes back and catches up: no voter lags.
if millrace_cluster_restart "$old_leader"; then
  deadline=$(($(now_ms) + 60000))
  while (($(now_ms) < deadline)); do
    read_status "$WORK/caught-up.out" && [[ "$LAG" == 0 && $VOTERS -eq 3 ]] && break
    sleep 1
  done
  if [[ "${LAG:-}" == 0 ]]; then pass all-caught-up; else fail all-caught-up "MaxFollowerLag '${LAG:-}'" "$WORK/caught-up.out"; fi
  replication replication-after-restart
else
  fail restart "node $old_leader did not come back"
fi

summary
