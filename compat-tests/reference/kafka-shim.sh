#!/usr/bin/env bash
# Apache Kafka 4.1.1 (single-node KRaft) behind the Millrace command-line
# contract, so the client suites can be checked against a reference broker:
#
#   MILLRACE_BIN=compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 \
#       compat-tests/run-all.sh
#
# Usage: kafka-shim.sh --data-dir DIR --listen 127.0.0.1:0 [--set name=value ...]
# Prints "listening on 127.0.0.1:PORT" on stdout when the broker is up; Kafka's
# own log goes to DIR/kafka.log. SIGTERM stops Kafka (controlled shutdown), exit 0.
# Needs java >= 17 and mvn (first run resolves the jars from Maven Central).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIBS="$HERE/../.work/kafka-ref/libs"

data_dir="" listen="" sets=()
while (($#)); do
  case "$1" in
    --data-dir) data_dir="$2"; shift 2 ;;
    --listen) listen="$2"; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    *) echo "kafka-shim: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$data_dir" && -n "$listen" ]] || { echo "usage: $0 --data-dir DIR --listen HOST:PORT [--set k=v]..." >&2; exit 2; }

if [[ ! -f "$LIBS/.complete" ]]; then
  echo "kafka-shim: resolving Kafka jars with mvn into $LIBS" >&2
  mkdir -p "$LIBS"
  timeout 900 mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS" -DincludeScope=runtime >&2
  touch "$LIBS/.complete"
fi

host="${listen%:*}" port="${listen##*:}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
[[ "$port" == 0 ]] && port="$(free_port)"
cport="$(free_port)"

mkdir -p "$data_dir"
data_dir="$(cd "$data_dir" && pwd)"
props="$data_dir/server.properties"
# Ports change on every start (the contract allows --listen 127.0.0.1:0).
set_listeners() {
  sed -i -e '/^listeners=/d' -e '/^advertised.listeners=/d' "$props"
  echo "listeners=PLAINTEXT://$host:$port,CONTROLLER://127.0.0.1:$cport" >>"$props"
  echo "advertised.listeners=PLAINTEXT://$host:$port" >>"$props"
}
if [[ ! -f "$props" ]]; then
  cat >"$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data_dir/logs
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  for kv in "${sets[@]+"${sets[@]}"}"; do echo "$kv" >>"$props"; done
  set_listeners
  cluster_id="$(python3 -c 'import base64,uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
  java -cp "$LIBS/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$props" >&2
else
  # Restart on an existing data dir: keep the cluster, take new ports.
  sed -i -e "s/^controller.quorum.voters=.*/controller.quorum.voters=1@127.0.0.1:$cport/" "$props"
  set_listeners
fi

log="$data_dir/kafka.log"
cat >"$data_dir/log4j.properties" <<L4J
log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=$log
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=[%d] %p %m (%c)%n
L4J
: >"$log"
java -Xms256m -Xmx768m -XX:+UseSerialGC -Dlog4j.configuration="file:$data_dir/log4j.properties" \
  -cp "$LIBS/*" kafka.Kafka "$props" >"$data_dir/kafka.out" 2>&1 &
kpid=$!
# shellcheck disable=SC2317  # called from the trap
stop() { kill -TERM "$kpid" 2>/dev/null || true; wait "$kpid" 2>/dev/null || true; exit 0; }
trap stop TERM INT

for _ in $(seq 1 1200); do
  if grep -q "Kafka Server started" "$log" 2>/dev/null; then
    echo "listening on $host:$port"
    wait "$kpid"
    exit $?
  fi
  kill -0 "$kpid" 2>/dev/null || { echo "kafka-shim: Kafka exited during startup" >&2; tail -50 "$data_dir/kafka.out" "$log" >&2; exit 1; }
  sleep 0.1
done
echo "kafka-shim: Kafka did not start in 120 s" >&2
kill -TERM "$kpid"; wait "$kpid" || true
exit 1
