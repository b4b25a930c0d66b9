#!/usr/bin/env bash
# Share groups (KIP-932) with Apache Kafka's Java KafkaShareConsumer, 4.4 and 4.3, against one broker
# (share/ShareConsumerCheck.java): three members split a partition with every record delivered
# once; RELEASE redelivers with a higher delivery count and REJECT never redelivers; a record
# released up to group.share.delivery.count.limit (3 here) is archived; a member that stops
# polling loses its records to another member once their lock (group.share.record.lock.duration.ms,
# 2000 here) ends. Each check runs once per client version (SHARE_CLIENT_VERSIONS, default
# "4.4.0 4.3.2"; its name says which). Run by run.sh as its `share` part, or alone:
#
#   compat-tests/java/share.sh
#   MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 compat-tests/java/share.sh
#
# Last line: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/common.sh"

DELIVERY_LIMIT=3
LOCK_MS=2000

java_broker_bin || { fail broker-binary "no broker binary"; summary; exit 1; }

VERSIONS="${SHARE_CLIENT_VERSIONS:-4.4.0 4.3.2}"

# kafka-clients of one version (share/pom.xml), resolved once per pom change.
client_classpath() {
  local version="$1" cpfile="$HERE/target/share-$1.classpath"
  if [[ ! -s "$cpfile" || "$HERE/share/pom.xml" -nt "$cpfile" ]]; then
    mkdir -p "$HERE/target"
    mvn_cmd 900 -f "$HERE/share/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath \
      -Dkafka.version="$version" -Dmdep.outputFile="$cpfile.tmp" >&2 || return 1
    mv "$cpfile.tmp" "$cpfile"
  fi
  cat "$cpfile"
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-java-share.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then echo "share: work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


# The shortest lock Kafka allows is group.share.min.record.lock.duration.ms (1000 at its lowest).
if ! millrace_start "$WORK/broker" \
  --set millrace.share.groups.enable=true \
  --set group.share.delivery.count.limit="$DELIVERY_LIMIT" \
  --set group.share.min.record.lock.duration.ms=1000 \
  --set group.share.record.lock.duration.ms="$LOCK_MS"; then
  fail broker-start "broker did not start" "$WORK/broker/broker.stderr"
  summary
  exit 1
fi
echo "share: broker pid $MILLRACE_PID at $MILLRACE_ADDR ($MILLRACE_BIN)"

for version in $VERSIONS; do
  if ! CP="$(client_classpath "$version")"; then
    fail "classpath-$version" "could not resolve kafka-clients $version"
    continue
  fi
  classes="$WORK/classes-$version" log="$WORK/check-$version.log"
  mkdir -p "$classes"
  if ! javac -d "$classes" -cp "$CP" "$HERE/share/ShareConsumerCheck.java" >"$WORK/javac-$version.log" 2>&1; then
    fail "compile-$version" "javac ShareConsumerCheck.java against kafka-clients $version" "$WORK/javac-$version.log"
    continue
  fi
  rc=0
  timeout --kill-after=10 600 java -cp "$classes:$CP" ShareConsumerCheck "$MILLRACE_ADDR" \
    "$DELIVERY_LIMIT" "$LOCK_MS" >"$log" 2>&1 || rc=$?
  while IFS= read -r line; do
    case "$line" in
      "PASS "*) pass "[$version] ${line#PASS }" ;;
      "FAIL "*) fail "[$version] ${line#FAIL }" "" "$log" ;;
    esac
  done <"$log"
  if [[ $rc -ne 0 ]] && ! grep -q '^FAIL ' "$log"; then
    fail "share-check-$version" "ShareConsumerCheck ($version) exited $rc" "$log"
  fi
done
summary
