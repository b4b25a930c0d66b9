#!/usr/bin/env bash
# Java compatibility suite: Apache Kafka 4.4 Java clients and Streams, 4.1 CLI tools and Kafka Connect against
# Millrace. Resolves everything with Maven (Maven Central; default local repo ~/.m2, or
# MAVEN_REPO_LOCAL), uses/builds the broker, then runs
#   1. the JUnit 5 tests (Surefire; src/test/java: idempotent producer across a broker kill,
#      AdminClient, cooperative-sticky consumer group, exactly-once consume-transform-produce
#      across two kill -9, Kafka Streams exactly_once_v2 word count across a stop and a kill),
#      each class with its own broker;
#   2. cli.sh (kafka-topics, console producer/consumer, kafka-consumer-groups, kafka-configs,
#      kafka-producer-perf-test, kafka-get-offsets);
#   3. connect.sh (Kafka Connect distributed, FileStreamSource -> topic -> FileStreamSink, resume;
#      an exactly-once source worker, exactly.once.source.support=enabled, across a worker restart);
#   4. cluster: ClusterLeaderChangeTest on a 3-node cluster (lib/millrace.sh millrace_cluster_start):
#      the default producer across a kill -9 of the partition leader, read back exactly once;
#   5. share.sh: share groups (KIP-932) with Kafka 4.4's KafkaShareConsumer (share/);
#   6. share-cli.sh: Kafka 4.4's kafka-share-groups.sh (ShareGroupCommand) list/describe/
#      reset-offsets/delete-offsets/delete on a share group a KafkaShareConsumer makes (share-cli/).
#   7. group-configs.sh: GROUP resource configs with Kafka 4.4's kafka-configs.sh (group-configs/);
#   8. broker-configs.sh: dynamic broker configs (cluster default and per broker) with Kafka 4.4's
#      kafka-configs.sh: describe with synonyms, message.max.bytes live on a topic without
#      overrides (kafka-producer-perf-test), precedence, delete-config, refusals (group-configs/);
#   9. quorum-cli.sh: Kafka 4.4's kafka-metadata-quorum.sh describe on a 3-node cluster, across a
#      kill -9 of the quorum leader.
# and prints one line "N passed, M failed" summing the parts (exit status non-zero on failures).
#
#   compat-tests/java/run.sh                 # everything
#   compat-tests/java/run.sh junit cli       # some parts (junit, cli, connect, cluster, share,
#                                            # share-cli, group-configs, broker-configs,
#                                            # quorum-cli)
#   JUNIT_TEST=AdminClientTest compat-tests/java/run.sh junit    # one class (Surefire -Dtest)
#   MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 compat-tests/java/run.sh
#
# Env: MILLRACE_BIN (default <repo>/target/debug/millrace, built when missing),
#      MILLRACE_START_TIMEOUT (s, default 10; 120 for kafka-shim.sh), JUNIT_TEST,
#      JAVA_JUNIT_TIMEOUT (s, whole Surefire run, default 600), MAVEN_REPO_LOCAL,
#      KEEP_WORK=1 (keep target/run-PID: Surefire reports and broker dirs; cli/connect work dirs).
# Each run builds in its own target/run-PID, so concurrent runs do not clash.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
cd "$HERE"

parts=("$@")
((${#parts[@]})) || parts=(junit cli connect cluster share share-cli group-configs broker-configs quorum-cli)
total_p=0 total_f=0
lines=()
add() { # add PART PASSED FAILED
  total_p=$((total_p + $2))
  total_f=$((total_f + $3))
  lines+=("$(printf '%-8s %4s passed, %4s failed' "$1" "$2" "$3")")
}
final() {
  echo
  echo "=== java suite summary ==="
  local l
  for l in "${lines[@]}"; do echo "$l"; done
  echo "$total_p passed, $total_f failed"
}
trap 'exit 130' INT
trap 'exit 143' TERM

command -v java >/dev/null && command -v "${MVN:-mvn}" >/dev/null || {
  echo "java: needs java (17+) and mvn on PATH" >&2
  add setup 0 1
  final
  exit 1
}
if ! java_broker_bin; then
  add broker 0 1
  final
  exit 1
fi
echo "java: broker $MILLRACE_BIN"
START_TIMEOUT="${MILLRACE_START_TIMEOUT:-10}"
BUILD_DIR="$HERE/target/run-$$"
cleanup() {
  millrace_cluster_stop
  if [[ -n "${KEEP_WORK:-}" ]]; then echo "java: kept $BUILD_DIR"; else rm -rf "$BUILD_DIR" "$BUILD_DIR-cluster"; fi
}
trap cleanup EXIT

# last "N passed, M failed" line of a log -> "N M"
counts() { sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1 \2/p' "$1" | tail -n1; }

# surefire_counts DIR: prints PASS/FAIL lines of the Surefire reports in DIR on stderr, "P F" on stdout
surefire_counts() {
  python3 - "$1" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
p = f = 0
for path in sorted(glob.glob(sys.argv[1] + "/TEST-*.xml")):
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("classname", "").rsplit(".", 1)[-1] + "." + tc.get("name", "")
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        if tc.find("skipped") is not None:
            print("SKIP  " + name, file=sys.stderr)
        elif bad is None:
            p += 1
            print("PASS  " + name, file=sys.stderr)
        else:
            f += 1
            msg = (bad.get("message") or bad.get("type") or "?").strip().splitlines() or ["?"]
            print("FAIL  " + name + ": " + msg[0][:400], file=sys.stderr)
            for line in msg[1:8]:
                print("        " + line[:400], file=sys.stderr)
print(p, f)
PY
}

for part in "${parts[@]}"; do
  case "$part" in
    junit)
      echo "=== junit (Surefire) ==="
      args=(test -Dmaven.test.failure.ignore=true "-DbuildDir=$BUILD_DIR" "-Dmillrace.bin=$MILLRACE_BIN"
        "-Dmillrace.start.timeout.s=$START_TIMEOUT")
      [[ -n "${JUNIT_TEST:-}" ]] && args+=("-Dtest=$JUNIT_TEST")
      rc=0
      mvn_cmd "${JAVA_JUNIT_TIMEOUT:-600}" "${args[@]}" 2>&1 | grep -vE '^\[(INFO|WARNING)\]' || rc=${PIPESTATUS[0]}
      res="$(surefire_counts "$BUILD_DIR/surefire-reports")" || res=""
      read -r p f <<<"${res:-0 0}"
      if [[ $rc -ne 0 ]]; then
        echo "java: mvn test exited $rc (build error, dependency resolution, or timeout)" >&2
        f=$((f + 1))
      elif ((p + f == 0)); then
        echo "java: Surefire ran no tests" >&2
        f=1
      fi
      echo "junit: $p passed, $f failed (reports and broker dirs in $BUILD_DIR: KEEP_WORK=1 keeps them)"
      add junit "$p" "$f"
      ;;
    cli | connect | share | share-cli | group-configs | broker-configs | quorum-cli)
      echo "=== $part ==="
      log="$(mktemp "${TMPDIR:-/tmp}/millrace-java-$part.XXXXXX.log")"
      rc=0
      MILLRACE_START_TIMEOUT="$START_TIMEOUT" timeout --kill-after=30 900 bash "$HERE/$part.sh" 2>&1 | tee "$log" || rc=$?
      c="$(counts "$log")"
      if [[ -n "$c" ]]; then read -r p f <<<"$c"; else p=0 f=0; fi
      [[ $rc -ne 0 && $f -eq 0 ]] && f=1
      rm -f "$log"
      add "$part" "$p" "$f"
      ;;
    cluster)
      # ClusterLeaderChangeTest on a 3-node cluster (lib/millrace.sh), in its own build dir so
      # that its reports do not mix with the junit part's (where it skips itself).
      echo "=== cluster (ClusterLeaderChangeTest, 3-node cluster) ==="
      p=0 f=1
      if millrace_cluster_start 3 "$BUILD_DIR-cluster/nodes"; then
        export MILLRACE_CLUSTER_NODES
        rc=0
        mvn_cmd 300 test -Dmaven.test.failure.ignore=true "-DbuildDir=$BUILD_DIR-cluster" \
          "-Dmillrace.bin=$MILLRACE_BIN" -Dtest=ClusterLeaderChangeTest 2>&1 |
          grep -vE '^\[(INFO|WARNING)\]' || rc=${PIPESTATUS[0]}
        export -n MILLRACE_CLUSTER_NODES
        millrace_cluster_stop
        grep -h '^leader-change:' "$BUILD_DIR-cluster"/surefire-reports/*ClusterLeaderChangeTest-output.txt 2>/dev/null || true
        res="$(surefire_counts "$BUILD_DIR-cluster/surefire-reports")" || res=""
        read -r p f <<<"${res:-0 0}"
        if [[ $rc -ne 0 ]]; then
          echo "java: mvn test exited $rc" >&2
          f=$((f + 1))
        elif ((p + f == 0)); then
          echo "java: ClusterLeaderChangeTest did not run" >&2
          f=1
        fi
      else
        echo "java: the 3-node cluster did not start" >&2
      fi
      echo "cluster: $p passed, $f failed"
      add cluster "$p" "$f"
      ;;
    *)
      echo "java: unknown part $part (junit, cli, connect, cluster, share, share-cli, group-configs, broker-configs, quorum-cli)" >&2
      add "$part" 0 1
      ;;
  esac
done

final
[[ $total_f -eq 0 ]]
