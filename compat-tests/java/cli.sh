#!/usr/bin/env bash
# Apache Kafka 4.1 CLI tools (classes of kafka-tools / kafka_2.13, run with java -cp, as
# bin/kafka-*.sh do) against one Millrace broker; checks their output.
#
#   compat-tests/java/cli.sh
#
# kafka-topics (TopicCommand) create/list/describe/alter/delete; kafka-console-producer
# (ConsoleProducer); kafka-console-consumer (ConsoleConsumer) with a group; kafka-consumer-groups
# (ConsumerGroupCommand) list/describe/reset-offsets/delete; kafka-configs (kafka.admin.ConfigCommand)
# describe/alter for topics and brokers; kafka-producer-perf-test (ProducerPerformance);
# kafka-get-offsets (GetOffsetShell). Then, on a broker with two log dirs: kafka-log-dirs
# (LogDirsCommand) --describe and kafka-reassign-partitions with log_dirs (AlterReplicaLogDirs).
# Then, on a 3-node Millrace cluster: kafka-leader-election
# (LeaderElectionCommand) preferred and unclean, by --all-topic-partitions and --topic/--partition;
# kafka-reassign-partitions (ReassignPartitionsCommand) --generate/--execute/--verify, with the
# records read back from the new replicas; kafka-cluster unregister (ClusterTool, UnregisterBroker)
# of the broker stopped last, then again (BROKER_ID_NOT_REGISTERED).
#
# Env: MILLRACE_BIN, TOOL_TIMEOUT (seconds per tool run, default 90), KEEP_WORK=1.
# Last line printed: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }
java_dist_classpath || { fail classpath "could not resolve the Kafka tools jars"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-cli.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "cli: work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! millrace_start "$WORK/broker"; then
  fail broker-start "broker did not start" "$WORK/broker/broker.stderr"
  summary
  exit 1
fi
B="$MILLRACE_ADDR"
echo "cli: broker pid $MILLRACE_PID at $B ($MILLRACE_BIN)"

topics() { tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" "$@"; }
groups() { tool org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$B" "$@"; }
configs() { tool kafka.admin.ConfigCommand --bootstrap-server "$B" "$@"; }

# run NAME CMD... : runs CMD with output in $WORK/NAME.out; returns its exit code
run() {
  local name="$1"
  shift
  local rc=0
  "$@" >"$WORK/$name.out" 2>&1 || rc=$?
  OUT="$WORK/$name.out"
  return $rc
}

# wait_for SECONDS NAME CMD... : re-runs CMD until it succeeds or the deadline passes
wait_for() {
  local secs="$1" name="$2"
  shift 2
  local deadline=$(($(now_ms) + secs * 1000))
  while :; do
    if "$@"; then return 0; fi
    (($(now_ms) < deadline)) || return 1
    sleep 0.5
  done
}

S="$RANDOM$RANDOM"
T="cli-topic-$S"
C="cli-console-$S"
G="cli-group-$S"
P="cli-perf-$S"
CFG="cli-configs-$S"

# --- kafka-topics ------------------------------------------------------------
if run topics-create topics --create --topic "$T" --partitions 3 --replication-factor 1 --config cleanup.policy=compact &&
  grep -q "Created topic $T\." "$OUT"; then
  pass "kafka-topics --create"
else
  fail "kafka-topics --create" "no 'Created topic $T.'" "$OUT"
fi

if run topics-create-again topics --create --topic "$T" --partitions 3 --replication-factor 1; then
  fail "kafka-topics --create (exists)" "second create of $T succeeded" "$OUT"
elif grep -q "already exists" "$OUT"; then
  pass "kafka-topics --create (exists)"
else
  fail "kafka-topics --create (exists)" "no 'already exists'" "$OUT"
fi

if run topics-list topics --list && grep -qx "$T" "$OUT"; then
  pass "kafka-topics --list"
else
  fail "kafka-topics --list" "$T not listed" "$OUT"
fi

LEADER=""
if run topics-describe topics --describe --topic "$T" &&
  grep -qE "Topic: $T[[:space:]].*PartitionCount: 3[[:space:]].*ReplicationFactor: 1[[:space:]].*Configs: .*cleanup\.policy=compact" "$OUT" &&
  [[ "$(grep -cE "^[[:space:]]+Topic: $T[[:space:]]+Partition: [0-2][[:space:]]+Leader: [0-9]+[[:space:]]+Replicas: [0-9]+[[:space:]]+Isr: [0-9]+" "$OUT")" == 3 ]]; then
  LEADER="$(sed -nE 's/.*Leader: ([0-9]+).*/\1/p' "$OUT" | head -n1)"
  pass "kafka-topics --describe"
else
  fail "kafka-topics --describe" "want PartitionCount: 3, ReplicationFactor: 1, cleanup.policy=compact, 3 partition lines with Leader/Replicas/Isr" "$OUT"
fi
LEADER="${LEADER:-1}"

if run topics-alter topics --alter --topic "$T" --partitions 5 &&
  wait_for 20 topics-describe-5 run topics-describe-5 topics --describe --topic "$T" &&
  grep -q "PartitionCount: 5" "$OUT" &&
  [[ "$(grep -cE "Partition: [0-4][[:space:]]+Leader:" "$OUT")" == 5 ]]; then
  pass "kafka-topics --alter --partitions"
else
  fail "kafka-topics --alter --partitions" "want PartitionCount: 5 after --alter" "$OUT"
fi

gone() { run topics-list-after-delete topics --list && ! grep -qx "$T" "$OUT"; }
if run topics-delete topics --delete --topic "$T" && wait_for 30 gone gone; then
  pass "kafka-topics --delete"
else
  fail "kafka-topics --delete" "$T still listed (or --delete failed)" "$OUT"
fi

# --- console producer / consumer with a group ----------------------------------
seq 1 1000 | sed 's/^/line-/' >"$WORK/input.txt"
if ! run topics-create-console topics --create --topic "$C" --partitions 1 --replication-factor 1; then
  fail "kafka-topics --create $C" "create failed" "$OUT"
fi
if run console-producer tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" --topic "$C" <"$WORK/input.txt" &&
  ! grep -qE "ERROR|Exception" "$OUT"; then
  pass "kafka-console-producer (1000 lines)"
else
  fail "kafka-console-producer (1000 lines)" "producer failed" "$OUT"
fi

consume() { # consume NAME MAX : console consumer in group $G, stdout only in $WORK/NAME.txt
  local rc=0
  tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic "$C" --group "$G" \
    --from-beginning --max-messages "$2" --timeout-ms 30000 >"$WORK/$1.txt" 2>"$WORK/$1.err" || rc=$?
  OUT="$WORK/$1.err"
  return $rc
}
if consume console-consumer 1000 && cmp -s "$WORK/input.txt" "$WORK/console-consumer.txt"; then
  pass "kafka-console-consumer --group (1000 lines, identical)"
else
  fail "kafka-console-consumer --group (1000 lines, identical)" \
    "got $(wc -l <"$WORK/console-consumer.txt" 2>/dev/null || echo 0) lines; stderr:" "$OUT"
fi

# --- kafka-consumer-groups ---------------------------------------------------------
if run groups-list groups --list && grep -qx "$G" "$OUT"; then
  pass "kafka-consumer-groups --list"
else
  fail "kafka-consumer-groups --list" "$G not listed" "$OUT"
fi

# GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
described_offsets() { # described_offsets CURRENT END LAG
  run groups-describe groups --describe --group "$G" &&
    grep -qE "^$G[[:space:]]+$C[[:space:]]+0[[:space:]]+$1[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)" "$OUT"
}
if wait_for 20 describe described_offsets 1000 1000 0; then
  pass "kafka-consumer-groups --describe (offset 1000, lag 0)"
else
  fail "kafka-consumer-groups --describe (offset 1000, lag 0)" "want '$G $C 0 1000 1000 0'" "$OUT"
fi

if run groups-reset-dry groups --reset-offsets --group "$G" --topic "$C" --to-earliest --dry-run &&
  grep -qE "^$G[[:space:]]+$C[[:space:]]+0[[:space:]]+0([[:space:]]|$)" "$OUT" &&
  described_offsets 1000 1000 0; then
  pass "kafka-consumer-groups --reset-offsets --to-earliest --dry-run (nothing changed)"
else
  fail "kafka-consumer-groups --reset-offsets --to-earliest --dry-run (nothing changed)" "want NEW-OFFSET 0 and the committed offset still 1000" "$OUT"
fi

if run groups-reset groups --reset-offsets --group "$G" --topic "$C" --to-offset 250 --execute &&
  grep -qE "^$G[[:space:]]+$C[[:space:]]+0[[:space:]]+250([[:space:]]|$)" "$OUT" &&
  described_offsets 250 1000 750; then
  pass "kafka-consumer-groups --reset-offsets --to-offset 250 --execute"
else
  fail "kafka-consumer-groups --reset-offsets --to-offset 250 --execute" "want NEW-OFFSET 250, then '$G $C 0 250 1000 750'" "$OUT"
fi

# the group resumes from the reset offset: lines 251..1000
if consume console-consumer-resumed 750 && cmp -s <(tail -n 750 "$WORK/input.txt") "$WORK/console-consumer-resumed.txt"; then
  pass "kafka-console-consumer --group resumes at the reset offset"
else
  fail "kafka-console-consumer --group resumes at the reset offset" \
    "want line-251..line-1000, got $(head -n1 "$WORK/console-consumer-resumed.txt" 2>/dev/null) ... ($(wc -l <"$WORK/console-consumer-resumed.txt" 2>/dev/null || echo 0) lines)" "$OUT"
fi

if run groups-delete groups --delete --group "$G" && grep -q "Deletion of requested consumer groups ('$G') was successful" "$OUT" &&
  run groups-list-after-delete groups --list && ! grep -qx "$G" "$OUT"; then
  pass "kafka-consumer-groups --delete"
else
  fail "kafka-consumer-groups --delete" "want 'Deletion of requested consumer groups ('$G') was successful' and $G gone from --list" "$OUT"
fi

# KIP-848 (issue 19): a console consumer with group.protocol=consumer; kafka-consumer-groups
# --describe --members --verbose shows it with its assignment (ConsumerGroupDescribe), --state
# shows the server-side assignor and Stable.
G2="cli-group-848-$S"
tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic "$C" --group "$G2" \
  --consumer-property group.protocol=consumer --from-beginning --timeout-ms 60000 \
  >"$WORK/console-consumer-848.txt" 2>"$WORK/console-consumer-848.err" &
CONSUMER_848_PID=$!
described_member() { # the member line names the topic's partition 0 in its assignment
  run groups-describe-848 groups --describe --group "$G2" --members --verbose &&
    grep -E "^$G2[[:space:]]" "$OUT" | grep -qE "$C:0|$C\(0\)"
}
if wait_for 45 describe-848 described_member &&
  run groups-state-848 groups --describe --group "$G2" --state &&
  grep -E "[[:space:]]uniform[[:space:]]+Stable[[:space:]]+1" "$OUT" >/dev/null; then
  pass "kafka-consumer-groups --describe (KIP-848 group: member, assignment, uniform, Stable)"
else
  fail "kafka-consumer-groups --describe (KIP-848 group: member, assignment, uniform, Stable)" \
    "want a $G2 member line assigned $C partition 0, and 'uniform Stable 1' in --state" "$OUT"
fi
kill "$CONSUMER_848_PID" 2>/dev/null || true
wait "$CONSUMER_848_PID" 2>/dev/null || true

# --- kafka-configs -------------------------------------------------------------------
run topics-create-cfg topics --create --topic "$CFG" --partitions 1 --replication-factor 1 --config cleanup.policy=compact || true
if run configs-describe configs --describe --entity-type topics --entity-name "$CFG" &&
  grep -q "Dynamic configs for topic $CFG are:" "$OUT" &&
  grep -qE "^[[:space:]]*cleanup\.policy=compact sensitive=false synonyms=\{DYNAMIC_TOPIC_CONFIG:cleanup\.policy=compact" "$OUT"; then
  pass "kafka-configs --describe (topic, cleanup.policy=compact)"
else
  fail "kafka-configs --describe (topic, cleanup.policy=compact)" "want 'cleanup.policy=compact' from DYNAMIC_TOPIC_CONFIG" "$OUT"
fi

if run configs-describe-all configs --describe --all --entity-type topics --entity-name "$CFG" &&
  grep -q "All configs for topic $CFG are:" "$OUT" &&
  grep -qE "^[[:space:]]*retention\.ms=604800000 sensitive=false synonyms=\{" "$OUT" &&
  grep -qE "^[[:space:]]*segment\.bytes=1073741824 sensitive=false synonyms=\{DEFAULT_CONFIG:log\.segment\.bytes=1073741824\}" "$OUT" &&
  grep -qE "^[[:space:]]*cleanup\.policy=compact " "$OUT"; then
  pass "kafka-configs --describe --all (topic defaults with synonyms)"
else
  fail "kafka-configs --describe --all (topic defaults with synonyms)" "want retention.ms=604800000, segment.bytes=1073741824 with synonym DEFAULT_CONFIG:log.segment.bytes, cleanup.policy=compact" "$OUT"
fi

if run configs-alter configs --alter --entity-type topics --entity-name "$CFG" --add-config retention.ms=86400000,max.message.bytes=2000000 &&
  grep -q "Completed updating config for topic $CFG." "$OUT" &&
  run configs-describe-2 configs --describe --entity-type topics --entity-name "$CFG" &&
  grep -qE "^[[:space:]]*retention\.ms=86400000 " "$OUT" && grep -qE "^[[:space:]]*max\.message\.bytes=2000000 " "$OUT" &&
  grep -qE "^[[:space:]]*cleanup\.policy=compact " "$OUT"; then
  pass "kafka-configs --alter --add-config"
else
  fail "kafka-configs --alter --add-config" "want 'Completed updating config', then retention.ms=86400000, max.message.bytes=2000000 and cleanup.policy=compact" "$OUT"
fi

if run configs-delete configs --alter --entity-type topics --entity-name "$CFG" --delete-config retention.ms &&
  grep -q "Completed updating config for topic $CFG." "$OUT" &&
  run configs-describe-3 configs --describe --entity-type topics --entity-name "$CFG" &&
  ! grep -qE "^[[:space:]]*retention\.ms=" "$OUT" && grep -qE "^[[:space:]]*max\.message\.bytes=2000000 " "$OUT"; then
  pass "kafka-configs --alter --delete-config"
else
  fail "kafka-configs --alter --delete-config" "want retention.ms gone, max.message.bytes kept" "$OUT"
fi

if run configs-broker configs --describe --all --entity-type brokers --entity-name "$LEADER" &&
  grep -q "All configs for broker $LEADER are:" "$OUT" &&
  grep -qE "^[[:space:]]*num\.partitions=[0-9]+ " "$OUT" && grep -qE "^[[:space:]]*log\.retention\.hours=168 " "$OUT"; then
  pass "kafka-configs --describe --all (broker $LEADER)"
else
  fail "kafka-configs --describe --all (broker $LEADER)" "want num.partitions and log.retention.hours=168" "$OUT"
fi

# --- kafka-producer-perf-test + kafka-get-offsets -----------------------------------
run topics-create-perf topics --create --topic "$P" --partitions 2 --replication-factor 1 || true
if run perf tool org.apache.kafka.tools.ProducerPerformance --topic "$P" --num-records 50000 --record-size 100 \
  --throughput -1 --producer-props "bootstrap.servers=$B" &&
  grep -qE "^50000 records sent, [0-9.]+ records/sec \([0-9.]+ MB/sec\), [0-9.]+ ms avg latency" "$OUT"; then
  pass "kafka-producer-perf-test (50,000 records)"
else
  fail "kafka-producer-perf-test (50,000 records)" "want '50000 records sent, ...'" "$OUT"
fi

if run get-offsets tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$B" --topic "$P" &&
  sum="$(awk -F: '{s += $3} END {print s + 0}' "$OUT")" && [[ "$sum" == 50000 ]] &&
  [[ "$(grep -cE "^$P:[01]:[0-9]+$" "$OUT")" == 2 ]]; then
  pass "kafka-get-offsets (latest offsets sum to 50,000)"
else
  fail "kafka-get-offsets (latest offsets sum to 50,000)" "want '$P:0:N' and '$P:1:M' with N+M=50000" "$OUT"
fi

reassign_at() {
  local at="$1"
  shift
  tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --bootstrap-server "$at" "$@"
}

# --- kafka-log-dirs, kafka-reassign-partitions with log_dirs: one broker with two log dirs ------
millrace_stop
LD="cli-logdirs-$S"
D1="$WORK/jbod/d1"
D2="$WORK/jbod/d2"
if millrace_start "$WORK/jbod" --log-dirs "$D1,$D2"; then
  J="$MILLRACE_ADDR"
  run logdirs-topic tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$J" --create --topic "$LD" \
    --partitions 2 --replication-factor 1 || true
  run logdirs-perf tool org.apache.kafka.tools.ProducerPerformance --topic "$LD" --num-records 20000 \
    --record-size 100 --throughput -1 --producer-props "bootstrap.servers=$J" || true
  # New partitions go to the dir with the fewest: one in each.
  if run log-dirs tool org.apache.kafka.tools.LogDirsCommand --bootstrap-server "$J" --describe \
    --topic-list "$LD" && grep -q "\"logDir\":\"$D1\"" "$OUT" && grep -q "\"logDir\":\"$D2\"" "$OUT" &&
    grep -q "\"partition\":\"$LD-0\",\"size\":[1-9]" "$OUT" && [[ -d "$D1/$LD-0" && -d "$D2/$LD-1" ]]; then
    pass "kafka-log-dirs --describe (two dirs, $LD-0 in the first, $LD-1 in the second, sizes)"
  else
    fail "kafka-log-dirs --describe (two dirs, $LD-0 in the first, $LD-1 in the second, sizes)" "want both dirs and $LD-0 with its size" "$OUT"
  fi
  printf '{"version":1,"partitions":[{"topic":"%s","partition":0,"replicas":[1],"log_dirs":["%s"]}]}\n' \
    "$LD" "$D2" >"$WORK/logdirs-move.json"
  if run logdirs-execute reassign_at "$J" --reassignment-json-file "$WORK/logdirs-move.json" --execute &&
    grep -q "Successfully started moving log directory to $D2 for replica $LD-0 with broker 1" "$OUT"; then
    pass "kafka-reassign-partitions --execute with log_dirs ($LD-0 to the second dir)"
  else
    fail "kafka-reassign-partitions --execute with log_dirs ($LD-0 to the second dir)" "want 'Successfully started moving log directory'" "$OUT"
  fi
  moved() { run logdirs-verify reassign_at "$J" --reassignment-json-file "$WORK/logdirs-move.json" --verify &&
    grep -q "Reassignment of replica $LD-0-1 completed successfully\." "$OUT"; }
  if wait_for 60 logdirs-verify moved && [[ -d "$D2/$LD-0" && ! -d "$D1/$LD-0" ]] &&
    run logdirs-offsets tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$J" --topic "$LD" &&
    [[ "$(awk -F: '{s += $3} END {print s + 0}' "$OUT")" == 20000 ]]; then
    pass "kafka-reassign-partitions --verify with log_dirs (moved on disk, 20,000 records kept)"
  else
    fail "kafka-reassign-partitions --verify with log_dirs (moved on disk, 20,000 records kept)" "want 'Reassignment of replica $LD-0-1 completed successfully.' and $LD-0 in $D2" "$OUT"
  fi
else
  fail broker-start-logdirs "the broker with two log dirs did not start" "$WORK/jbod/broker.stderr"
fi

# --- a 3-node cluster: kafka-leader-election, kafka-reassign-partitions ------------------
# Three nodes, every one a controller voter, on ports picked here (the controller voters must be
# known before start); the single broker above is stopped first (2 cores).
millrace_stop
CLUSTER_READY_S=60 # a node prints `millrace ready` once the quorum elected a leader
CLUSTER_STOP_S=30  # SIGTERM: controlled shutdown moves its leaderships away first
CLUSTER_PIDS=()
CLUSTER_PORTS=()
CLUSTER_STARTS=()

# cluster_port VAR : sets VAR to a port of 20000-31999 (below the ephemeral range) that no one
# listens on and that was not picked before
cluster_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ " ${CLUSTER_PORTS[*]} " == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    CLUSTER_PORTS+=("$p")
    printf -v "$1" '%s' "$p"
    return 0
  done
  return 1
}
for n in 1 2 3; do
  if ! cluster_port "KPORT_$n" || ! cluster_port "CPORT_$n"; then
    fail cluster-ports "no free ports"
    summary
    exit 1
  fi
done
KPORT=(0 "$KPORT_1" "$KPORT_2" "$KPORT_3")
CPORT=(0 "$CPORT_1" "$CPORT_2" "$CPORT_3")
VOTERS="1@127.0.0.1:${CPORT[1]},2@127.0.0.1:${CPORT[2]},3@127.0.0.1:${CPORT[3]}"
CB="127.0.0.1:${KPORT[1]},127.0.0.1:${KPORT[2]},127.0.0.1:${KPORT[3]}"

# node_start N : starts node N (same data dir and ports on a restart) and waits for its ready line
node_start() {
  local n="$1" out
  CLUSTER_STARTS[n]=$((${CLUSTER_STARTS[n]:-0} + 1))
  out="$WORK/node$n-${CLUSTER_STARTS[n]}"
  "$MILLRACE_BIN" --node-id "$n" --data-dir "$WORK/node$n" --listen "127.0.0.1:${KPORT[n]}" \
    --controller-listen "127.0.0.1:${CPORT[n]}" --controller-voters "$VOTERS" \
    --set broker.session.timeout.ms=3000 --set broker.heartbeat.interval.ms=500 \
    --set auto.leader.rebalance.enable=false >"$out.stdout" 2>"$out.stderr" </dev/null &
  CLUSTER_PIDS[n]=$!
  OUT="$out.stderr"
}
node_ready() { # node_ready N : waits (bounded) for node N's `millrace ready` line
  local n="$1" deadline=$(($(now_ms) + CLUSTER_READY_S * 1000))
  local out="$WORK/node$n-${CLUSTER_STARTS[n]}"
  OUT="$out.stderr"
  until grep -q "^millrace ready" "$out.stdout" 2>/dev/null; do
    kill -0 "${CLUSTER_PIDS[n]}" 2>/dev/null || return 1
    (($(now_ms) < deadline)) || return 1
    sleep 0.2
  done
}
node_stop() { # node_stop N : SIGTERM node N (only the process we started), SIGKILL after the bound
  local n="$1" pid i
  pid="${CLUSTER_PIDS[n]:-}"
  [[ -n "$pid" ]] || return 0
  CLUSTER_PIDS[n]=""
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < CLUSTER_STOP_S * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}
cluster_stop() {
  local n
  for n in 1 2 3; do [[ -n "${CLUSTER_PIDS[n]:-}" ]] && kill -TERM "${CLUSTER_PIDS[n]}" 2>/dev/null; done
  for n in 1 2 3; do node_stop "$n"; done
}
trap 'cluster_stop; cleanup' EXIT

ctopics() { tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$CB" "$@"; }
elect() { tool org.apache.kafka.tools.LeaderElectionCommand --bootstrap-server "$CB" "$@"; }
reassign() { reassign_at "$CB" "$@"; }

for n in 1 2 3; do node_start "$n"; done
cluster_up=1
for n in 1 2 3; do node_ready "$n" || { cluster_up=0; fail "cluster: node $n ready" "no 'millrace ready' within ${CLUSTER_READY_S}s" "$OUT"; }; done
((cluster_up)) && pass "cluster: 3 nodes ready ($CB)"

E="cli-elect-$S"
R="cli-reassign-$S"
# partition P of E as describe shows it: "LEADER REPLICAS ISR"
described() { # described TOPIC P
  run "describe-$1" ctopics --describe --topic "$1" &&
    sed -nE "s/^[[:space:]]+Topic: $1[[:space:]]+Partition: $2[[:space:]]+Leader: ([-0-9]+)[[:space:]]+Replicas: ([0-9,]+)[[:space:]]+Isr: ([0-9,]*).*/\1 \2 \3/p" "$OUT"
}
leader_is() { [[ "$(described "$1" "$2" | cut -d' ' -f1)" == "$3" ]]; }
isr_has() { [[ ",$(described "$1" "$2" | cut -d' ' -f3)," == *",$3,"* ]]; }
full_isr() { local p; for p in 0 1 2; do [[ "$(described "$E" "$p" | cut -d' ' -f3 | tr ',' '\n' | sort | tr -d '\n')" == 123 ]] || return 1; done; }

if ((cluster_up)); then
  # --- kafka-leader-election
  if run cluster-create-e ctopics --create --topic "$E" --replica-assignment 1:2:3,2:3:1,3:1:2 &&
    grep -q "Created topic $E\." "$OUT" && wait_for 30 full-isr full_isr; then
    pass "cluster: kafka-topics --create --replica-assignment 1:2:3,2:3:1,3:1:2"
  else
    fail "cluster: kafka-topics --create --replica-assignment 1:2:3,2:3:1,3:1:2" "want 3 partitions with ISR 1,2,3" "$OUT"
  fi

  if run elect-none elect --election-type preferred --all-topic-partitions && ! grep -q "$E" "$OUT"; then
    pass "kafka-leader-election --all-topic-partitions (every preferred replica leads: nothing elected)"
  else
    fail "kafka-leader-election --all-topic-partitions (every preferred replica leads: nothing elected)" "want exit 0 and no $E partition" "$OUT"
  fi

  # node 2 stops (3 takes partition 1 over) and comes back in sync: 3 keeps leading partition 1
  node_stop 2
  if wait_for 30 leader-3 leader_is "$E" 1 3 && node_start 2 && node_ready 2 && wait_for 60 isr-2 full_isr && leader_is "$E" 1 3; then
    pass "cluster: node 2 stopped and back in the ISR, partition 1 still led by 3"
  else
    fail "cluster: node 2 stopped and back in the ISR, partition 1 still led by 3" "got '$(described "$E" 1)'" "$OUT"
  fi

  if run elect-preferred elect --election-type preferred --all-topic-partitions &&
    grep -q "Successfully completed leader election (PREFERRED) for partitions $E-1$" "$OUT" &&
    ! grep -qE "$E-[02]" "$OUT" && wait_for 20 leader-2 leader_is "$E" 1 2; then
    pass "kafka-leader-election --election-type preferred --all-topic-partitions (partition 1 back to 2)"
  else
    fail "kafka-leader-election --election-type preferred --all-topic-partitions (partition 1 back to 2)" \
      "want 'Successfully completed leader election (PREFERRED) for partitions $E-1' only, then leader 2; got '$(described "$E" 1)'" "$OUT"
  fi

  if run elect-again elect --election-type preferred --topic "$E" --partition 1 &&
    grep -q "Valid replica already elected for partitions $E-1$" "$OUT"; then
    pass "kafka-leader-election --topic --partition (preferred leader already leads)"
  else
    fail "kafka-leader-election --topic --partition (preferred leader already leads)" "want 'Valid replica already elected for partitions $E-1'" "$OUT"
  fi

  if run elect-unclean elect --election-type unclean --topic "$E" --partition 0 &&
    grep -q "Valid replica already elected for partitions $E-0$" "$OUT" && leader_is "$E" 0 1; then
    pass "kafka-leader-election --election-type unclean (a leader exists: nothing to do)"
  else
    fail "kafka-leader-election --election-type unclean (a leader exists: nothing to do)" "want 'Valid replica already elected for partitions $E-0' and leader 1" "$OUT"
  fi

  # --- kafka-reassign-partitions: R lives on node 1 only, moves to 2 and 3
  seq 1 1000 | sed 's/^/cluster-line-/' >"$WORK/cluster-input.txt"
  if run cluster-create-r ctopics --create --topic "$R" --replica-assignment 1 && wait_for 30 r-led leader_is "$R" 0 1 &&
    run cluster-produce tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$CB" --topic "$R" <"$WORK/cluster-input.txt" &&
    ! grep -qE "ERROR|Exception" "$OUT"; then
    pass "cluster: $R on node 1, 1000 lines produced"
  else
    fail "cluster: $R on node 1, 1000 lines produced" "create or produce failed" "$OUT"
  fi

  printf '{"version":1,"topics":[{"topic":"%s"}]}\n' "$R" >"$WORK/move.json"
  if run reassign-generate reassign --topics-to-move-json-file "$WORK/move.json" --broker-list 2,3 --generate &&
    grep -q "^Current partition replica assignment" "$OUT" &&
    grep -qF "{\"version\":1,\"partitions\":[{\"topic\":\"$R\",\"partition\":0,\"replicas\":[1]," "$OUT" &&
    grep -A1 "^Proposed partition reassignment configuration" "$OUT" | grep -qE "\"topic\":\"$R\",\"partition\":0,\"replicas\":\[[23]\]"; then
    pass "kafka-reassign-partitions --generate (current [1], proposal on 2 or 3)"
  else
    fail "kafka-reassign-partitions --generate (current [1], proposal on 2 or 3)" "want the current assignment [1] and a proposal on broker 2 or 3" "$OUT"
  fi

  printf '{"version":1,"partitions":[{"topic":"%s","partition":0,"replicas":[2,3]}]}\n' "$R" >"$WORK/plan.json"
  # KIP-860 (AlterPartitionReassignments v1): --disallow-replication-factor-change refuses a plan
  # that changes the size of R-0's assignment (1 replica to 2) with INVALID_REPLICATION_FACTOR.
  if ! run reassign-disallow reassign --reassignment-json-file "$WORK/plan.json" --execute \
    --disallow-replication-factor-change &&
    grep -q "Error reassigning partition(s):" "$OUT" && grep -q "$R-0" "$OUT" &&
    [[ "$(described "$R" 0)" =~ ^1\ 1\  ]]; then
    pass "kafka-reassign-partitions --execute --disallow-replication-factor-change (1 to 2 replicas refused)"
  else
    fail "kafka-reassign-partitions --execute --disallow-replication-factor-change (1 to 2 replicas refused)" "want 'Error reassigning partition(s):' naming $R-0, R-0 still on 1; got '$(described "$R" 0)'" "$OUT"
  fi
  # --throttle sets the KIP-73 throttles (the brokers' leader/follower rates, the topic's
  # throttled-replica lists) with IncrementalAlterConfigs; 50 MB/s does not slow this small move.
  if run reassign-execute reassign --reassignment-json-file "$WORK/plan.json" --execute --throttle 50000000 &&
    grep -q "Successfully started partition reassignment for $R-0" "$OUT"; then
    pass "kafka-reassign-partitions --execute ($R-0 to [2,3])"
  else
    fail "kafka-reassign-partitions --execute ($R-0 to [2,3])" "want 'Successfully started partition reassignment for $R-0'" "$OUT"
  fi

  # --verify, once the reassignment is complete, clears the replication throttles of every broker
  # and of the topic (IncrementalAlterConfigs DELETE, each broker's resource sent to that broker).
  verified() { run reassign-verify reassign --reassignment-json-file "$WORK/plan.json" --verify &&
    grep -q "Reassignment of partition $R-0 is completed\." "$OUT"; }
  r_on_23() { [[ "$(described "$R" 0)" =~ ^[23]\ 2,3\ (2,3|3,2)$ ]]; }
  if wait_for 60 verify verified && r_on_23; then
    pass "kafka-reassign-partitions --verify (completed; replicas 2,3 both in the ISR)"
  else
    fail "kafka-reassign-partitions --verify (completed; replicas 2,3 both in the ISR)" "want 'Reassignment of partition $R-0 is completed.' and replicas 2,3; got '$(described "$R" 0)'" "$OUT"
  fi

  # every line from the new replicas: from the leader, then from the other one once it leads
  read_r() { # read_r NAME : the 1000 lines of R-0 from offset 0, identical to the input
    tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$CB" --topic "$R" --partition 0 \
      --offset earliest --max-messages 1000 --timeout-ms 30000 >"$WORK/$1.txt" 2>"$WORK/$1.err" &&
      cmp -s "$WORK/cluster-input.txt" "$WORK/$1.txt"
  }
  first="$(described "$R" 0 | cut -d' ' -f1)"
  [[ "$first" == [23] ]] || first=2
  other=$((first == 2 ? 3 : 2))
  if read_r read-new-leader && node_stop "$first" && wait_for 30 r-other leader_is "$R" 0 "$other" && read_r read-other-replica; then
    pass "cluster: the 1000 lines read back from node $first, then from node $other alone"
  else
    fail "cluster: the 1000 lines read back from node $first, then from node $other alone" \
      "got $(wc -l <"$WORK/read-new-leader.txt" 2>/dev/null || echo 0) and $(wc -l <"$WORK/read-other-replica.txt" 2>/dev/null || echo 0) lines; partition '$(described "$R" 0)'" "$WORK/read-other-replica.err"
  fi

  # --- kafka-cluster unregister (UnregisterBroker): node $first stays stopped, taken out
  if run unregister tool org.apache.kafka.tools.ClusterTool unregister --bootstrap-server "$CB" --id "$first" &&
    grep -q "Broker $first is no longer registered" "$OUT" &&
    run unregister-brokers tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$CB" &&
    ! grep -q "(id: $first rack" "$OUT"; then
    pass "kafka-cluster unregister --id $first (a stopped broker, no longer listed)"
  else
    fail "kafka-cluster unregister --id $first (a stopped broker, no longer listed)" "want 'Broker $first is no longer registered' and no id $first in kafka-broker-api-versions" "$OUT"
  fi
  if ! run unregister-again tool org.apache.kafka.tools.ClusterTool unregister --bootstrap-server "$CB" --id "$first" &&
    grep -q "BrokerIdNotRegisteredException" "$OUT"; then
    pass "kafka-cluster unregister --id $first again (BROKER_ID_NOT_REGISTERED)"
  else
    fail "kafka-cluster unregister --id $first again (BROKER_ID_NOT_REGISTERED)" "want a non-zero exit with BrokerIdNotRegisteredException" "$OUT"
  fi
fi
cluster_stop

summary
[[ $failed -eq 0 ]]
