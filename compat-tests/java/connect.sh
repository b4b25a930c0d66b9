#!/usr/bin/env bash
# Kafka Connect 4.1 in distributed mode (connect-runtime + connect-file from Maven Central,
# org.apache.kafka.connect.cli.ConnectDistributed with a worker properties file) against one
# Millrace broker.
#
#   compat-tests/java/connect.sh
#
# Checks: the worker starts (REST up, joined its group); it created its three internal topics
# (offsets 25 partitions, configs 1, status 5) with cleanup.policy exactly compact; a
# FileStreamSource connector reads a 10,000-line file into a topic and a FileStreamSink connector
# writes that topic to another file, and the two files become identical; the worker stops cleanly
# (SIGTERM); 2,000 more lines are appended; a new worker (same properties) resumes: the files are
# identical again, no line lost, none duplicated (source offsets and sink group offsets were
# committed on the clean stop).
#
# Then exactly-once source support (KIP-618), in a second Connect cluster on the same broker (its
# own group and internal topics): a worker with exactly.once.source.support=enabled; a
# FileStreamSource connector with exactly.once.support=required and transaction.boundary=poll
# (every poll one transaction of the task's transactional producer, records and source offsets
# together) reads a 5,000-line file; a read_committed console consumer sees those lines in order;
# 5,000 more lines are appended in steps while the worker is stopped (SIGTERM) mid-way and a new
# worker started; read_committed, the topic then holds the 10,000 lines exactly once, in order;
# its end offset is above 10,000 (transaction markers: the records were written transactionally).
#
# Env: MILLRACE_BIN, CONNECT_TIMEOUT (seconds per wait, default 120), CONNECT_LINES (10000),
#      CONNECT_EOS_LINES (5000, twice), KEEP_WORK=1. Last line printed: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"

WAIT="${CONNECT_TIMEOUT:-120}"
LINES="${CONNECT_LINES:-10000}"
MORE=2000
EOS_LINES="${CONNECT_EOS_LINES:-5000}"
CHECKS=(worker-start internal-topics connectors-created connectors-running files-identical
  worker-clean-stop worker-restart resume-no-loss resume-no-duplicates
  eos-worker-start eos-connector-running eos-read-committed eos-worker-stop-midway
  eos-worker-restart eos-exactly-once eos-transactional)

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }
java_dist_classpath || { fail classpath "could not resolve connect-runtime/connect-file"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-connect.XXXXXX")"
WORKER_PID=""
APPENDER_PID=""
stop_worker() { # SIGTERM our worker, SIGKILL after 60 s; returns 0 when it exited by itself
  [[ -n "$WORKER_PID" ]] || return 0
  local pid="$WORKER_PID" i rc=0
  WORKER_PID=""
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "connect: worker $pid ignored SIGTERM for 60 s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  wait "$pid" 2>/dev/null || rc=$?
  # 143 = the JVM ended on SIGTERM after its shutdown hook ran (ConnectDistributed's normal stop)
  [[ $rc -eq 0 || $rc -eq 143 ]]
}
cleanup() {
  [[ -z "$APPENDER_PID" ]] || kill "$APPENDER_PID" 2>/dev/null || true
  stop_worker || true
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "connect: work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fail_rest FROM WHY : marks check FROM and every later one failed (they cannot run)
fail_rest() {
  local from="$1" why="$2" on=0 c
  for c in "${CHECKS[@]}"; do
    [[ "$c" == "$from" ]] && on=1
    ((on)) && fail "connect $c" "not run: $why"
  done
  summary
  exit 1
}

# a single node: the transaction state topic (exactly-once source part) with one replica
if ! millrace_start "$WORK/broker" transaction.state.log.replication.factor=1 transaction.state.log.min.isr=1; then
  fail broker-start "broker did not start" "$WORK/broker/broker.stderr"
  fail_rest worker-start "no broker"
fi
B="$MILLRACE_ADDR"
echo "connect: broker pid $MILLRACE_PID at $B ($MILLRACE_BIN)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REST_PORT="$(free_port)"
REST="http://127.0.0.1:$REST_PORT"
S="$RANDOM$RANDOM"
OFFSETS="connect-offsets-$S" CONFIGS="connect-configs-$S" STATUS="connect-status-$S"
DATA="connect-data-$S"
IN="$WORK/input.txt" OUTF="$WORK/output.txt"
PROPS_FILE="$WORK/worker.properties"
CONNECTORS=(file-source file-sink)

# worker_props GROUP : the worker properties (topics and REST port from the variables above)
worker_props() {
  cat <<PROPS
bootstrap.servers=$B
group.id=$1
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.topic=$OFFSETS
offset.storage.replication.factor=1
config.storage.topic=$CONFIGS
config.storage.replication.factor=1
status.storage.topic=$STATUS
status.storage.replication.factor=-1
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$REST_PORT
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$REST_PORT
scheduled.rebalance.max.delay.ms=0
plugin.discovery=service_load
PROPS
}
worker_props "connect-compat-$S" >"$PROPS_FILE"

# lines FROM TO : distinct lines numbered FROM..TO
lines() { seq "$1" "$2" | awk '{printf "line-%06d some payload to make it longer %d\n", $1, $1 * 7919}'; }
# FileStreamSource: 10,000 distinct lines
lines 1 "$LINES" >"$IN"
: >"$OUTF"

start_worker() { # start_worker N
  local log="$WORK/worker.$1.log"
  java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    "-Dlog4j2.configurationFile=$HERE/log4j2-connect.properties" \
    -cp "$DIST_CP" org.apache.kafka.connect.cli.ConnectDistributed "$PROPS_FILE" >"$log" 2>&1 </dev/null &
  WORKER_PID=$!
  WLOG="$log"
  echo "connect: worker $1 pid $WORKER_PID, REST $REST, log $log"
}

# worker_ready: REST answers GET /connectors with 200 and the herder has joined the group
worker_ready() {
  local deadline=$(($(now_ms) + WAIT * 1000)) code
  while :; do
    if ! kill -0 "$WORKER_PID" 2>/dev/null; then
      READY_WHY="the worker JVM exited during startup"
      WORKER_PID=""
      return 1
    fi
    # the herder thread died (e.g. the group join failed): the JVM lingers ~45 s, do not wait for it
    if grep -q "Uncaught exception in herder work thread" "$WLOG"; then
      READY_WHY="the worker's herder thread exited"
      return 1
    fi
    code="$(curl -s -o "$WORK/connectors.json" -w '%{http_code}' --max-time 5 "$REST/connectors" || true)"
    if [[ "$code" == 200 ]] && grep -q "Joined group at generation" "$WLOG"; then return 0; fi
    if (($(now_ms) >= deadline)); then
      READY_WHY="not ready within ${WAIT}s (GET /connectors 200 + 'Joined group'; last HTTP $code)"
      return 1
    fi
    sleep 0.5
  done
}

# ------------------------------------------------------------------- worker start
start_worker 1
if worker_ready; then
  pass "connect worker-start (REST up, joined group)"
else
  fail "connect worker-start" "$READY_WHY; log:" "$WLOG"
  grep -E "ERROR|Exception" "$WLOG" | head -n 5 | sed 's/^/      first errors: /'
  WORKER_FAILED=1  # the internal topics are created before the group join: still check them
fi

# ------------------------------------------------------------------- internal topics
topics_ok=1
for spec in "$OFFSETS:25" "$CONFIGS:1" "$STATUS:5"; do
  t="${spec%%:*}" n="${spec##*:}"
  desc="$WORK/describe-$t.out"
  if ! tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" --describe --topic "$t" >"$desc" 2>&1; then
    topics_ok=0; echo "      $t: describe failed"; continue
  fi
  grep -qE "PartitionCount: $n[[:space:]]" "$desc" || { topics_ok=0; echo "      $t: want PartitionCount: $n"; }
  # exactly compact: "cleanup.policy=compact" followed by the end, a blank, or the next "name="
  grep -qE "cleanup\.policy=compact($|[[:space:]]|,[a-z0-9.]+=)" "$desc" ||
    { topics_ok=0; echo "      $t: want cleanup.policy=compact: $(grep -o 'Configs:.*' "$desc" | head -n1)"; }
done
if ((topics_ok)); then
  pass "connect internal-topics (3 topics, 25/1/5 partitions, cleanup.policy=compact)"
else
  fail "connect internal-topics" "see above" "$desc"
fi
[[ -z "${WORKER_FAILED:-}" ]] || fail_rest connectors-created "the worker did not start"

# ------------------------------------------------------------------- connectors
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" --create --topic "$DATA" --partitions 1 --replication-factor 1 \
  >"$WORK/create-data.out" 2>&1 || echo "connect: creating $DATA failed (the source may auto-create it)"
post() { # post NAME JSON
  curl -s -o "$WORK/post-$1.json" -w '%{http_code}' --max-time 30 -X POST -H 'Content-Type: application/json' \
    --data "$2" "$REST/connectors" || true
}
c1="$(post file-source "{\"name\":\"file-source\",\"config\":{\"connector.class\":\"org.apache.kafka.connect.file.FileStreamSourceConnector\",\"tasks.max\":\"1\",\"file\":\"$IN\",\"topic\":\"$DATA\"}}")"
c2="$(post file-sink "{\"name\":\"file-sink\",\"config\":{\"connector.class\":\"org.apache.kafka.connect.file.FileStreamSinkConnector\",\"tasks.max\":\"1\",\"file\":\"$OUTF\",\"topics\":\"$DATA\"}}")"
if [[ "$c1" == 201 && "$c2" == 201 ]]; then
  pass "connect connectors-created (POST /connectors: 201, 201)"
else
  fail "connect connectors-created" "POST /connectors gave $c1 (source) and $c2 (sink): $(cat "$WORK/post-file-source.json" "$WORK/post-file-sink.json" 2>/dev/null | head -c 600)"
fi

# every connector of CONNECTORS and its task RUNNING
running() {
  local n s
  for n in "${CONNECTORS[@]}"; do
    s="$(curl -s --max-time 5 "$REST/connectors/$n/status" || true)"
    echo "$s" >"$WORK/status-$n.json"
    [[ "$(grep -o '"state":"RUNNING"' <<<"$s" | wc -l)" -ge 2 ]] || return 1
  done
}
wait_running() {
  local deadline=$(($(now_ms) + WAIT * 1000))
  until running; do
    (($(now_ms) < deadline)) || return 1
    kill -0 "$WORKER_PID" 2>/dev/null || return 1
    sleep 0.5
  done
}
if wait_running; then
  pass "connect connectors-running (connector + task RUNNING, both)"
else
  fail "connect connectors-running" "status: $(cat "$WORK/status-file-source.json" "$WORK/status-file-sink.json" 2>/dev/null | head -c 800)" "$WLOG"
fi

# the sink file catches up with the source file
wait_identical() {
  local deadline=$(($(now_ms) + WAIT * 1000)) last=-1 now
  while :; do
    cmp -s "$IN" "$OUTF" && return 0
    now="$(wc -l <"$OUTF")"
    # a sink that wrote MORE lines than the source has will never become identical
    (($(now_ms) < deadline)) && ((now <= $(wc -l <"$IN"))) || return 1
    [[ "$now" != "$last" ]] && echo "      sink file: $now of $(wc -l <"$IN") lines"
    last="$now"
    sleep 0.5
  done
}
if wait_identical; then
  pass "connect files-identical ($LINES lines source -> topic -> sink)"
else
  fail "connect files-identical" "sink file has $(wc -l <"$OUTF") lines, source $(wc -l <"$IN"); first difference: $(cmp "$IN" "$OUTF" 2>&1 | head -n1)" "$WLOG"
fi

# ------------------------------------------------------------------- stop, append, resume
if stop_worker; then
  pass "connect worker-clean-stop (SIGTERM)"
else
  fail "connect worker-clean-stop" "the worker did not exit cleanly on SIGTERM" "$WLOG"
fi
lines $((LINES + 1)) $((LINES + MORE)) >>"$IN"

start_worker 2
if worker_ready && wait_running; then
  pass "connect worker-restart (same properties; connectors RUNNING again)"
else
  fail "connect worker-restart" "the second worker did not come up with both connectors RUNNING" "$WLOG"
fi
wait_identical || true
missing="$(comm -23 <(sort -u "$IN") <(sort -u "$OUTF") | wc -l)"
dups="$(sort "$OUTF" | uniq -d | wc -l)"
if ((missing == 0)); then
  pass "connect resume-no-loss ($((LINES + MORE)) lines all in the sink file)"
else
  fail "connect resume-no-loss" "$missing of $((LINES + MORE)) source lines missing from the sink file (e.g. $(comm -23 <(sort -u "$IN") <(sort -u "$OUTF") | head -n1))" "$WLOG"
fi
if ((dups == 0)) && cmp -s "$IN" "$OUTF"; then
  pass "connect resume-no-duplicates (sink file identical to the source file)"
else
  fail "connect resume-no-duplicates" "$dups lines written twice; sink $(wc -l <"$OUTF") lines vs source $(wc -l <"$IN")" "$WLOG"
fi
stop_worker || echo "connect: the second worker did not stop cleanly" >&2

# ------------------------------------------------------------------- exactly-once source (KIP-618)
# A second Connect cluster (own group, internal topics and REST port) with
# exactly.once.source.support=enabled: the leader writes the config topic with a transactional
# producer (transactional.id connect-cluster-<group>), the workers read the config and offsets
# topics read_committed, and the source task's transactional producer writes each poll's records
# and its source offsets in one transaction. (A one-task connector needs no zombie fencing: the
# leader only writes a task count record, so Admin.fenceProducers is not called.)
REST_PORT="$(free_port)"
REST="http://127.0.0.1:$REST_PORT"
OFFSETS="connect-eos-offsets-$S" CONFIGS="connect-eos-configs-$S" STATUS="connect-eos-status-$S"
EDATA="connect-eos-data-$S"
EIN="$WORK/eos-input.txt"
PROPS_FILE="$WORK/worker-eos.properties"
CONNECTORS=(eos-source)
{ worker_props "connect-eos-$S"; echo "exactly.once.source.support=enabled"; } >"$PROPS_FILE"
lines 1 "$EOS_LINES" >"$EIN"
ETOTAL=$((EOS_LINES * 2))

start_worker 3
if worker_ready; then
  pass "connect eos-worker-start (exactly.once.source.support=enabled; REST up, joined group)"
else
  fail "connect eos-worker-start" "$READY_WHY; log:" "$WLOG"
  grep -E "ERROR|Exception" "$WLOG" | head -n 5 | sed 's/^/      first errors: /'
  fail_rest eos-connector-running "the exactly-once worker did not start"
fi
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" --create --topic "$EDATA" --partitions 1 --replication-factor 1 \
  >"$WORK/create-eos-data.out" 2>&1 || echo "connect: creating $EDATA failed (the source may auto-create it)"
c3="$(post eos-source "{\"name\":\"eos-source\",\"config\":{\"connector.class\":\"org.apache.kafka.connect.file.FileStreamSourceConnector\",\"tasks.max\":\"1\",\"file\":\"$EIN\",\"topic\":\"$EDATA\",\"exactly.once.support\":\"required\",\"transaction.boundary\":\"poll\"}}")"
if [[ "$c3" == 201 ]] && wait_running; then
  pass "connect eos-connector-running (exactly.once.support=required, transaction.boundary=poll; connector + task RUNNING)"
else
  fail "connect eos-connector-running" "POST /connectors gave $c3: $(head -c 400 "$WORK/post-eos-source.json" 2>/dev/null); status: $(head -c 600 "$WORK/status-eos-source.json" 2>/dev/null)" "$WLOG"
fi

# read_committed FILE ARGS... : the data topic's partition 0 from the start, read_committed
read_committed() {
  local out="$1"
  shift
  tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic "$EDATA" --partition 0 \
    --offset earliest --isolation-level read_committed "$@" >"$out" 2>"$out.err" || true
}
read_committed "$WORK/eos-read1.txt" --max-messages "$EOS_LINES" --timeout-ms $((WAIT * 1000))
if cmp -s "$EIN" "$WORK/eos-read1.txt"; then
  pass "connect eos-read-committed (the $EOS_LINES lines, read_committed, in order)"
else
  fail "connect eos-read-committed" "read $(wc -l <"$WORK/eos-read1.txt") lines read_committed, want the $EOS_LINES of the file; first difference: $(cmp "$EIN" "$WORK/eos-read1.txt" 2>&1 | head -n1)" "$WORK/eos-read1.txt.err"
fi

# the second half is appended in 20 steps over ~4 s; the worker is stopped ~1 s in (the task is
# polling and committing transactions), the rest is appended while no worker runs
(
  step=$(((EOS_LINES + 19) / 20))
  for ((k = EOS_LINES + 1; k <= ETOTAL; k += step)); do
    lines "$k" $((k + step - 1 < ETOTAL ? k + step - 1 : ETOTAL)) >>"$EIN"
    sleep 0.2
  done
) &
APPENDER_PID=$!
sleep 1
if stop_worker; then
  pass "connect eos-worker-stop-midway (SIGTERM while lines are being appended)"
else
  fail "connect eos-worker-stop-midway" "the exactly-once worker did not exit cleanly on SIGTERM" "$WLOG"
fi
# the appender ends by itself after ~4 s
for ((i = 0; i < 300; i++)); do kill -0 "$APPENDER_PID" 2>/dev/null || break; sleep 0.1; done
kill "$APPENDER_PID" 2>/dev/null || true
wait "$APPENDER_PID" 2>/dev/null || true
APPENDER_PID=""
[[ "$(wc -l <"$EIN")" == "$ETOTAL" ]] || echo "connect: the eos input has $(wc -l <"$EIN") lines, want $ETOTAL" >&2

start_worker 4
if worker_ready && wait_running; then
  pass "connect eos-worker-restart (same properties; connector RUNNING again)"
else
  fail "connect eos-worker-restart" "the second exactly-once worker did not come up with the connector RUNNING" "$WLOG"
fi
# read until the whole file is there (or the wait ends); each read ends after 5 s without records
deadline=$(($(now_ms) + WAIT * 1000))
while :; do
  read_committed "$WORK/eos-read2.txt" --timeout-ms 5000
  got="$(wc -l <"$WORK/eos-read2.txt")"
  ((got < ETOTAL && $(now_ms) < deadline)) && kill -0 "$WORKER_PID" 2>/dev/null || break
  echo "      read_committed: $got of $ETOTAL lines"
done
emissing="$(comm -23 <(sort -u "$EIN") <(sort -u "$WORK/eos-read2.txt") | wc -l)"
edups="$(sort "$WORK/eos-read2.txt" | uniq -d | wc -l)"
if cmp -s "$EIN" "$WORK/eos-read2.txt"; then
  pass "connect eos-exactly-once ($ETOTAL lines read_committed across the restart: none lost, none twice, in order)"
else
  fail "connect eos-exactly-once" "read $got lines read_committed, want $ETOTAL: $emissing missing, $edups twice; first difference: $(cmp "$EIN" "$WORK/eos-read2.txt" 2>&1 | head -n1)" "$WLOG"
fi
# every committed transaction left a marker, which takes an offset: end offset > records
eend=""
if tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$B" --topic "$EDATA" >"$WORK/eos-offsets.out" 2>&1; then
  eend="$(sed -nE "s/^$EDATA:0:([0-9]+)$/\1/p" "$WORK/eos-offsets.out")"
fi
if [[ -n "$eend" ]] && ((eend > ETOTAL)); then
  pass "connect eos-transactional (end offset $eend > $ETOTAL records: transaction markers)"
else
  fail "connect eos-transactional" "want an end offset above $ETOTAL; kafka-get-offsets: $(head -c 300 "$WORK/eos-offsets.out")"
fi
stop_worker || echo "connect: the second exactly-once worker did not stop cleanly" >&2

summary
[[ $failed -eq 0 ]]
