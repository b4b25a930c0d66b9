#!/usr/bin/env bash
# Group configs (GROUP config resources, KIP-848/KIP-932) with Apache Kafka 4.4's kafka-configs.sh
# (org.apache.kafka.tools.ConfigCommand from kafka-tools 4.4.0, group-configs/pom.xml) against one
# broker: --alter --add-config on a group that does not exist yet, --describe of its dynamic
# configs with their synonyms, --describe --all with the broker's values, --describe of every
# group with configs, a value outside the broker's bounds refused with Kafka's message, and
# --delete-config until the group has no configs left. Run by run.sh as its `group-configs` part,
# or alone:
#
#   compat-tests/java/group-configs.sh
#   MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 compat-tests/java/group-configs.sh
#
# Last line: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/common.sh"

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }

# kafka-tools 4.4 (group-configs/pom.xml), resolved once per pom change.
CP="$(pom_classpath group-configs)" || { fail classpath "could not resolve kafka-tools 4.4"; summary; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-group-configs.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "group-configs: work dir kept: $WORK"; else rm -rf "$WORK"; fi
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
echo "group-configs: broker pid $MILLRACE_PID at $B ($MILLRACE_BIN)"

G="gcfg-$RANDOM$RANDOM"
# configs NAME ARGS... : kafka-configs.sh --bootstrap-server B ARGS, output in $WORK/NAME.out
configs() {
  local name="$1"
  shift
  OUT="$WORK/$name.out"
  timeout --kill-after=10 "${TOOL_TIMEOUT:-90}" java "${JAVA_TOOL_OPTS[@]}" -cp "$CP" \
    org.apache.kafka.tools.ConfigCommand --bootstrap-server "$B" "$@" >"$OUT" 2>&1
}

if configs alter --entity-type groups --entity-name "$G" --alter \
  --add-config share.record.lock.duration.ms=20000,share.auto.offset.reset=earliest,consumer.session.timeout.ms=50000 &&
  grep -q "Completed updating config for group $G" "$OUT"; then
  pass "alter: a group that does not exist yet takes configs"
else
  fail alter "kafka-configs --alter --add-config" "$OUT"
fi

if configs describe --entity-type groups --entity-name "$G" --describe &&
  grep -q "Dynamic configs for group $G are:" "$OUT" &&
  grep -q "share.record.lock.duration.ms=20000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.record.lock.duration.ms=20000, DEFAULT_CONFIG:group.share.record.lock.duration.ms=30000}" "$OUT" &&
  grep -q "share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}" "$OUT" &&
  grep -q "consumer.session.timeout.ms=50000" "$OUT" &&
  [[ "$(grep -c '^  ' "$OUT")" == 3 ]]; then
  pass "describe: the group's dynamic configs with their synonyms"
else
  fail describe "kafka-configs --describe" "$OUT"
fi

if configs describe-all --entity-type groups --entity-name "$G" --describe --all &&
  grep -q "All configs for group $G are:" "$OUT" &&
  grep -q "share.isolation.level=read_uncommitted sensitive=false synonyms={DEFAULT_CONFIG:share.isolation.level=read_uncommitted}" "$OUT" &&
  grep -q "share.delivery.count.limit=5 sensitive=false synonyms={DEFAULT_CONFIG:group.share.delivery.count.limit=5}" "$OUT" &&
  grep -q "share.record.lock.duration.ms=20000" "$OUT"; then
  pass "describe --all: the broker's values for the rest"
else
  fail describe-all "kafka-configs --describe --all" "$OUT"
fi

if configs describe-groups --entity-type groups --describe &&
  grep -q "Dynamic configs for group $G are:" "$OUT"; then
  pass "describe without a name: every group with configs"
else
  fail describe-groups "kafka-configs --entity-type groups --describe" "$OUT"
fi

if ! configs refused --entity-type groups --entity-name "$G" --alter --add-config share.delivery.count.limit=11 &&
  grep -q "InvalidConfigurationException: share.delivery.count.limit must be in the range 2 to 10 inclusive." "$OUT"; then
  pass "alter: a value outside the broker's bounds is refused with Kafka's message"
else
  fail refused "share.delivery.count.limit=11 was not refused as Kafka refuses it" "$OUT"
fi

if configs delete --entity-type groups --entity-name "$G" --alter \
  --delete-config share.record.lock.duration.ms,share.auto.offset.reset,consumer.session.timeout.ms &&
  configs describe-deleted --entity-type groups --entity-name "$G" --describe &&
  grep -q "The group '$G' doesn't exist and doesn't have dynamic config." "$OUT"; then
  pass "delete-config: a group without configs or members is gone"
else
  fail delete "kafka-configs --delete-config" "$OUT"
fi

summary
