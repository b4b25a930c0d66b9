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
# Env: MILLRACE_BIN, CONNECT_TIMEOUT (seconds per wait, default 120), CONNECT_LINES (10000),
#      KEEP_WORK=1. Last line printed: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"

WAIT="${CONNECT_TIMEOUT:-120}"
LINES="${CONNECT_LINES:-10000}"
MORE=2000
CHECKS=(worker-start internal-topics connectors-created connectors-running files-identical
  worker-clean-stop worker-restart resume-no-loss resume-no-duplicates)

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }
java_dist_classpath || { fail classpath "could not resolve connect-runtime/connect-file"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-connect.XXXXXX")"
WORKER_PID=""
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

if ! millrace_start "$WORK/broker"; then
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

cat >"$WORK/worker.properties" <<PROPS
bootstrap.servers=$B
group.id=connect-compat-$S
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

# FileStreamSource: 10,000 distinct lines
seq 1 "$LINES" | awk '{printf "line-%06d some payload to make it longer %d\n", $1, $1 * 7919}' >"$IN"
: >"$OUTF"

start_worker() { # start_worker N
  local log="$WORK/worker.$1.log"
  java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    "-Dlog4j2.configurationFile=$HERE/log4j2-connect.properties" \
    -cp "$DIST_CP" org.apache.kafka.connect.cli.ConnectDistributed "$WORK/worker.properties" >"$log" 2>&1 </dev/null &
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

# both connectors and their task RUNNING
running() {
  local n s
  for n in file-source file-sink; do
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
seq $((LINES + 1)) $((LINES + MORE)) | awk '{printf "line-%06d some payload to make it longer %d\n", $1, $1 * 7919}' >>"$IN"

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

summary
[[ $failed -eq 0 ]]
