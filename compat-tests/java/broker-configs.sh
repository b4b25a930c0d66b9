#!/usr/bin/env bash
# Dynamic broker configs (BROKER config resources: the cluster default, `--entity-default`,
# resource name "", and one broker, `--entity-name ID`) with Apache Kafka 4.4's kafka-configs.sh
# (org.apache.kafka.tools.ConfigCommand from kafka-tools 4.4.0, group-configs/pom.xml) against one
# broker: --describe of the cluster default before and after --alter --add-config, the broker's
# --describe --all with the synonyms, the LIVE effect of message.max.bytes on a topic without its
# own override (a 5,000-byte record produced with kafka-producer-perf-test,
# org.apache.kafka.tools.ProducerPerformance, is refused with MESSAGE_TOO_LARGE under the default
# 2000, accepted under the broker's own 10000, refused again once that is deleted, accepted once
# the default is deleted too), a per-broker log.retention.ms, --delete-config until nothing is
# left, and two refusals with Kafka's errors (a value that is not a number; a read-only key).
# Run by run.sh as its `broker-configs` part, or alone:
#
#   compat-tests/java/broker-configs.sh
#   MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 compat-tests/java/broker-configs.sh
#
# Last line: "N passed, M failed".
#
# What Apache Kafka 4.4.0 (single node, node.id=1, through reference/kafka-shim.sh) prints, step
# by step ("  " = the two leading spaces of a config line):
#
#  1. --entity-type brokers --entity-default --describe, before anything (exit 0):
#       Default configs for brokers in the cluster are:
#         min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}
#     (Kafka 4.x's `kafka-storage format` writes that cluster-default min.insync.replicas into the
#     bootstrap metadata, so "no dynamic default" is checked as: the header, no message.max.bytes
#     or log.retention.ms line, and every line listed is a DYNAMIC_DEFAULT_BROKER_CONFIG one.)
#     --entity-type brokers --describe (no name: every broker, then the default; exit 0):
#       Dynamic configs for broker 1 are:
#       Default configs for brokers in the cluster are:
#         min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}
#  2. --entity-default --alter --add-config message.max.bytes=2000 (exit 0):
#       Completed updating default config for brokers in the cluster.
#  3. --entity-default --describe:
#         message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000}
#  4. --entity-name 1 --describe --all ("All configs for broker 1 are:", ~300 lines, sorted):
#         message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}
#     (and e.g. "  log.dirs=DIR sensitive=false synonyms={STATIC_BROKER_CONFIG:log.dirs=DIR}",
#     "  log.retention.ms=null sensitive=false synonyms={}")
#  5. kafka-topics --create --topic T --partitions 1 --replication-factor 1: "Created topic T."
#     kafka-producer-perf-test --num-records 1 --record-size 5000 (exit 0 even when it fails):
#       org.apache.kafka.common.errors.RecordTooLargeException: The request included a message larger than the max message size the server will accept.
#       0 records sent, 0.000000 records/sec (0.00 MB/sec), NaN ms avg latency, ...
#     (that text is Kafka's MESSAGE_TOO_LARGE (10) default message, i.e. the broker's answer; a
#     record over the client's own max.request.size would say "The message is N bytes when
#     serialized ..."). --record-size 500:
#       1 records sent, 1.001001 records/sec (0.00 MB/sec), 977.00 ms avg latency, ...
#  6. --entity-name 1 --alter --add-config message.max.bytes=10000 (exit 0):
#       Completed updating config for broker 1.
#     --entity-name 1 --describe:
#       Dynamic configs for broker 1 are:
#         message.max.bytes=10000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=10000, DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}
#     and the 5,000-byte record: "1 records sent, ...".
#  7. --entity-name 1 --alter --add-config log.retention.ms=3600000: "Completed updating config
#     for broker 1."; --describe adds (lines sorted by name):
#         log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168}
#  8. --entity-name 1 --alter --delete-config message.max.bytes: "Completed updating config for
#     broker 1."; the 5,000-byte record: RecordTooLargeException again.
#     --entity-default --alter --delete-config message.max.bytes: "Completed updating default
#     config for brokers in the cluster."; the 5,000-byte record: "1 records sent"; the default's
#     --describe lists min.insync.replicas only. --entity-name 1 --delete-config log.retention.ms,
#     then --describe: "Dynamic configs for broker 1 are:" and no config line.
#  9. --entity-default --alter --add-config message.max.bytes=abc (exit 1; the same for
#     --entity-name 1):
#       Error while executing config command with args '--bootstrap-server ... --add-config message.max.bytes=abc'
#       java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.InvalidRequestException: Invalid value abc for configuration message.max.bytes: Not a number of type INT
#       ...
#       Caused by: org.apache.kafka.common.errors.InvalidRequestException: Invalid value abc for configuration message.max.bytes: Not a number of type INT
#     --entity-default --alter --add-config log.dirs=/tmp/x (exit 1; the same for --entity-name 1):
#       java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.InvalidRequestException: Cannot update these configs dynamically: [log.dirs]
#     Both are INVALID_REQUEST (42), not INVALID_CONFIG: checked as InvalidRequestException, the
#     key's name and "Invalid value" / "dynamically".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$HERE/common.sh"

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }

# kafka-tools 4.4 (group-configs/pom.xml: ConfigCommand, TopicCommand, ProducerPerformance and
# kafka-clients 4.4), resolved once per pom change.
CP="$(pom_classpath group-configs)" || { fail classpath "could not resolve kafka-tools 4.4"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-broker-configs.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "broker-configs: work dir kept: $WORK"; else rm -rf "$WORK"; fi
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
echo "broker-configs: broker pid $MILLRACE_PID at $B ($MILLRACE_BIN)"

# run_tool NAME CLASS ARGS... : a kafka-tools 4.4 class, output in $WORK/NAME.out ($OUT)
run_tool() {
  local name="$1" cls="$2"
  shift 2
  OUT="$WORK/$name.out"
  timeout --kill-after=10 "${TOOL_TIMEOUT:-90}" java "${JAVA_TOOL_OPTS[@]}" -cp "$CP" \
    "$cls" "$@" >"$OUT" 2>&1
}
# configs NAME ARGS... : kafka-configs.sh --bootstrap-server B --entity-type brokers ARGS
configs() {
  local name="$1"
  shift
  run_tool "$name" org.apache.kafka.tools.ConfigCommand --bootstrap-server "$B" --entity-type brokers "$@"
}
# config_lines: the config lines ("  key=value sensitive=... synonyms={...}") of $OUT
config_lines() { grep '^  ' "$OUT" || true; }

T="bcfg-$RANDOM$RANDOM"
# produce NAME SIZE : one SIZE-byte record to $T with kafka-producer-perf-test, acks=all, no
# retrying for long; prints "sent" (the broker acknowledged it), "too-large" (the broker answered
# MESSAGE_TOO_LARGE) or "other" (anything else; see $WORK/NAME.out)
produce() {
  local name="$1" size="$2"
  if ! run_tool "$name" org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$B" \
    --topic "$T" --num-records 1 --record-size "$size" --throughput -1 \
    --command-property acks=all linger.ms=0 request.timeout.ms=10000 delivery.timeout.ms=15000 \
    max.block.ms=15000; then
    echo other
  elif grep -q '^1 records sent' "$OUT" && ! grep -q 'Exception' "$OUT"; then
    echo sent
  elif grep -q '^0 records sent' "$OUT" && grep -q 'RecordTooLargeException' "$OUT" &&
    ! grep -q 'when serialized' "$OUT"; then
    # The broker's MESSAGE_TOO_LARGE (Kafka sends no message, so the client prints its own text;
    # Millrace names the batch size and the limit); not the producer's local size check.
    echo too-large
  else
    echo other
  fi
}
# produce_expect NAME SIZE WANT : produce until the answer is WANT (a change reaches the broker's
# logs when it applies the committed metadata: at most 5 tries, 1 s apart); true when it was
LAST=""
produce_expect() {
  local name="$1" size="$2" want="$3" i
  for i in 1 2 3 4 5; do
    LAST="$(produce "$name" "$size")"
    OUT="$WORK/$name.out" # produce ran in a subshell
    if [[ "$LAST" == "$want" ]]; then
      ((i == 1)) || echo "broker-configs: $name: $want after $i tries"
      return 0
    fi
    sleep 1
  done
  return 1
}

# 1. The cluster default before anything: no message.max.bytes/log.retention.ms, only
# DYNAMIC_DEFAULT_BROKER_CONFIG lines (Kafka lists the min.insync.replicas its format wrote).
if configs default-before --entity-default --describe &&
  grep -qx "Default configs for brokers in the cluster are:" "$OUT" &&
  ! grep -qE '^  (message\.max\.bytes|log\.retention\.ms)=' "$OUT" &&
  ! config_lines | grep -qv 'synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:'; then
  pass "describe --entity-default: no dynamic default set yet"
else
  fail default-before "kafka-configs --entity-default --describe" "$OUT"
fi

# The broker's id, from the per-broker headers of a describe without a name.
ID=""
if configs describe-all-brokers --describe &&
  ID="$(sed -nE 's/^Dynamic configs for broker ([0-9]+) are:$/\1/p' "$OUT" | head -n1)" &&
  [[ -n "$ID" ]] &&
  grep -qx "Default configs for brokers in the cluster are:" "$OUT"; then
  pass "describe without a name: broker $ID and the cluster default"
else
  fail describe-all-brokers "kafka-configs --entity-type brokers --describe named no broker" "$OUT"
  ID=1
fi

# 2. Set the cluster default.
if configs default-set --entity-default --alter --add-config message.max.bytes=2000 &&
  grep -qx "Completed updating default config for brokers in the cluster." "$OUT"; then
  pass "alter --entity-default: message.max.bytes=2000"
else
  fail default-set "kafka-configs --entity-default --alter --add-config message.max.bytes=2000" "$OUT"
fi

# 3. The default's describe.
if configs default-describe --entity-default --describe &&
  grep -qx "Default configs for brokers in the cluster are:" "$OUT" &&
  grep -qxF "  message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000}" "$OUT"; then
  pass "describe --entity-default: message.max.bytes=2000 as DYNAMIC_DEFAULT_BROKER_CONFIG"
else
  fail default-describe "kafka-configs --entity-default --describe" "$OUT"
fi

# 4. The broker's --all: the default's value over the key's default.
if configs broker-all --entity-name "$ID" --describe --all &&
  grep -qx "All configs for broker $ID are:" "$OUT" &&
  grep -qxF "  message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}" "$OUT"; then
  pass "describe --entity-name $ID --all: message.max.bytes=2000 from DYNAMIC_DEFAULT_BROKER_CONFIG over DEFAULT_CONFIG"
else
  fail broker-all "kafka-configs --entity-name $ID --describe --all" "$OUT"
fi

# 5. Live: a topic without overrides takes the default's message.max.bytes.
if run_tool topic-create org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" --create \
  --topic "$T" --partitions 1 --replication-factor 1 &&
  grep -q "Created topic $T" "$OUT"; then
  pass "kafka-topics --create: $T without config overrides"
else
  fail topic-create "kafka-topics --create $T" "$OUT"
fi
if produce_expect produce-big-default 5000 too-large; then
  pass "live: a 5,000-byte record is refused with MESSAGE_TOO_LARGE under the default 2000"
else
  fail produce-big-default "the 5,000-byte record: $LAST, not RecordTooLargeException" "$OUT"
fi
if produce_expect produce-small-default 500 sent; then
  pass "live: a 500-byte record is accepted under the default 2000"
else
  fail produce-small-default "the 500-byte record: $LAST, not sent" "$OUT"
fi

# 6. The broker's own value beats the cluster default.
if configs broker-set --entity-name "$ID" --alter --add-config message.max.bytes=10000 &&
  grep -qx "Completed updating config for broker $ID." "$OUT"; then
  pass "alter --entity-name $ID: message.max.bytes=10000"
else
  fail broker-set "kafka-configs --entity-name $ID --alter --add-config message.max.bytes=10000" "$OUT"
fi
if configs broker-describe --entity-name "$ID" --describe &&
  grep -qx "Dynamic configs for broker $ID are:" "$OUT" &&
  grep -qxF "  message.max.bytes=10000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=10000, DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}" "$OUT" &&
  [[ "$(config_lines | wc -l)" == 1 ]]; then
  pass "describe --entity-name $ID: DYNAMIC_BROKER_CONFIG 10000, then DYNAMIC_DEFAULT_BROKER_CONFIG 2000, DEFAULT_CONFIG"
else
  fail broker-describe "kafka-configs --entity-name $ID --describe" "$OUT"
fi
if produce_expect produce-big-broker 5000 sent; then
  pass "live: the 5,000-byte record is accepted under the broker's 10000"
else
  fail produce-big-broker "the 5,000-byte record: $LAST, not sent" "$OUT"
fi

# 7. A per-broker log.retention.ms.
if configs retention-set --entity-name "$ID" --alter --add-config log.retention.ms=3600000 &&
  grep -qx "Completed updating config for broker $ID." "$OUT" &&
  configs retention-describe --entity-name "$ID" --describe &&
  grep -qF "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000" "$OUT" &&
  grep -qF "  message.max.bytes=10000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=10000" "$OUT" &&
  [[ "$(config_lines | wc -l)" == 2 ]]; then
  pass "alter/describe --entity-name $ID: log.retention.ms=3600000 as DYNAMIC_BROKER_CONFIG"
else
  fail retention "kafka-configs --entity-name $ID log.retention.ms=3600000" "$OUT"
fi

# 8. Deleting: the broker's value, then the default's.
if configs broker-delete --entity-name "$ID" --alter --delete-config message.max.bytes &&
  grep -qx "Completed updating config for broker $ID." "$OUT"; then
  pass "delete-config --entity-name $ID: message.max.bytes"
else
  fail broker-delete "kafka-configs --entity-name $ID --delete-config message.max.bytes" "$OUT"
fi
if produce_expect produce-big-default-again 5000 too-large; then
  pass "live: the 5,000-byte record is refused again under the default 2000"
else
  fail produce-big-default-again "the 5,000-byte record: $LAST, not RecordTooLargeException" "$OUT"
fi
if configs default-delete --entity-default --alter --delete-config message.max.bytes &&
  grep -qx "Completed updating default config for brokers in the cluster." "$OUT"; then
  pass "delete-config --entity-default: message.max.bytes"
else
  fail default-delete "kafka-configs --entity-default --delete-config message.max.bytes" "$OUT"
fi
if produce_expect produce-big-none 5000 sent; then
  pass "live: the 5,000-byte record is accepted with neither value set"
else
  fail produce-big-none "the 5,000-byte record: $LAST, not sent" "$OUT"
fi
if configs default-after --entity-default --describe &&
  grep -qx "Default configs for brokers in the cluster are:" "$OUT" &&
  ! grep -q 'message\.max\.bytes' "$OUT"; then
  pass "describe --entity-default: message.max.bytes gone"
else
  fail default-after "kafka-configs --entity-default --describe still lists message.max.bytes" "$OUT"
fi
if configs retention-delete --entity-name "$ID" --alter --delete-config log.retention.ms &&
  grep -qx "Completed updating config for broker $ID." "$OUT" &&
  configs broker-after --entity-name "$ID" --describe &&
  grep -qx "Dynamic configs for broker $ID are:" "$OUT" &&
  [[ "$(config_lines | wc -l)" == 0 ]]; then
  pass "delete-config --entity-name $ID: log.retention.ms; the broker has no dynamic configs left"
else
  fail broker-after "kafka-configs --entity-name $ID: dynamic configs left" "$OUT"
fi

# 9. Refusals (INVALID_REQUEST, naming the key).
if ! configs refused-value --entity-default --alter --add-config message.max.bytes=abc &&
  grep -q "InvalidRequestException: .*Invalid value abc for configuration message\.max\.bytes" "$OUT"; then
  pass "alter --entity-default: message.max.bytes=abc refused (InvalidRequestException, Invalid value)"
else
  fail refused-value "message.max.bytes=abc was not refused as Kafka refuses it" "$OUT"
fi
if ! configs refused-readonly --entity-default --alter --add-config log.dirs=/tmp/x &&
  grep -q "InvalidRequestException: .*dynamically.*log\.dirs" "$OUT"; then
  pass "alter --entity-default: log.dirs refused (InvalidRequestException, cannot update dynamically)"
else
  fail refused-readonly "log.dirs=/tmp/x was not refused as Kafka refuses it" "$OUT"
fi
if configs after-refusals --entity-default --describe &&
  ! grep -qE '^  (message\.max\.bytes|log\.dirs)=' "$OUT"; then
  pass "describe --entity-default: the refused changes left nothing"
else
  fail after-refusals "a refused change was kept" "$OUT"
fi

summary
