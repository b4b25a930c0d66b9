#!/usr/bin/env bash
# Apache Kafka 4.4.0 (reference/pom.xml's kafka.version; one KRaft node, broker + controller)
# behind Millrace's cluster command line, so that the cluster scenarios and the leader-change
# tests can be checked against the reference by hand (not in CI: three JVMs need ~1 min to start
# on 2 cores):
#
#   MILLRACE_BIN=$PWD/compat-tests/cluster-scenarios/kafka-cluster-shim.sh \
#       compat-tests/cluster-scenarios/run.sh
#
# Usage: kafka-cluster-shim.sh --node-id I --data-dir D --listen H:K --controller-listen H:C
#            --controller-voters 1@H:C1,... [--set name=value ...]
# Instead of --listen, `--set listeners=NAME://H:K` makes NAME (e.g. SASL_SSL) the node's one Kafka
# listener and the inter-broker one (the settings then carry its TLS and SASL keys, as for
# millrace); the controller listener is PLAINTEXT unless the settings map CONTROLLER to SSL in
# listener.security.protocol.map (the last value of a key wins).
# Like millrace it prints "millrace ready (listening on H:K)" on stdout once Kafka serves, and on
# stderr "this node is the active controller term=T" when Kafka's QuorumController becomes active
# (epoch T). The process is Kafka's JVM itself (exec), so kill -9 / SIGTERM of the pid hit Kafka;
# a small watcher child translates the log lines and ends with it. Kafka's log: D/kafka.log.
# The cluster id is derived from the voters list, so every node formats the same cluster.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REF_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/../reference/pom.xml")"
CPFILE="$HERE/../.work/kafka-cluster-shim-$REF_VERSION.classpath"

node_id="" data_dir="" listen="" clisten="" voters="" sets=() kafka_listener=""
while (($#)); do
  case "$1" in
    --node-id) node_id="$2"; shift 2 ;;
    --data-dir) data_dir="$2"; shift 2 ;;
    --listen) listen="$2"; shift 2 ;;
    --controller-listen) clisten="$2"; shift 2 ;;
    --controller-voters) voters="$2"; shift 2 ;;
    --set)
      case "$2" in
        listeners=*) kafka_listener="${2#listeners=}" ;;
        *) sets+=("$2") ;;
      esac
      shift 2
      ;;
    --help) sed -n '2,16p' "$0"; echo "--controller-voters"; exit 0 ;;
    *) echo "kafka-cluster-shim: unknown argument $1" >&2; exit 2 ;;
  esac
done
# NAME://H:K given as `listeners`: H:K is what --listen would be.
if [[ -n "$kafka_listener" ]]; then
  listen="${kafka_listener#*://}"
else
  kafka_listener="PLAINTEXT://$listen"
fi
listener_name="${kafka_listener%%://*}"
[[ -n "$node_id" && -n "$data_dir" && -n "$listen" && -n "$clisten" && -n "$voters" ]] || {
  echo "usage: $0 --node-id I --data-dir D --listen H:K --controller-listen H:C --controller-voters V [--set k=v]..." >&2
  exit 2
}

if [[ ! -s "$CPFILE" ]]; then
  echo "kafka-cluster-shim: resolving Kafka's classpath with mvn (compat-tests/reference/pom.xml)" >&2
  mkdir -p "$(dirname "$CPFILE")"
  timeout 900 mvn -q -B -f "$HERE/../reference/pom.xml" dependency:build-classpath \
    -Dmdep.outputFile="$CPFILE.tmp" -DincludeScope=runtime >&2
  mv "$CPFILE.tmp" "$CPFILE"
fi
CP="$(cat "$CPFILE")"

mkdir -p "$data_dir"
data_dir="$(cd "$data_dir" && pwd)"
props="$data_dir/server.properties"
cat >"$props" <<PROPS
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=$kafka_listener,CONTROLLER://$clisten
advertised.listeners=$kafka_listener
inter.broker.listener.name=$listener_name
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
log.dirs=$data_dir/logs
PROPS
for kv in "${sets[@]+"${sets[@]}"}"; do echo "$kv" >>"$props"; done
# SCRAM on a SASL listener: Kafka wants a server-side JAAS entry per listener and mechanism and
# does not start without one; SCRAM's takes no options (the credentials are in the metadata log).
# Added as reference/kafka-shim.sh does, unless given.
mechs="$(sed -n 's/^sasl\.enabled\.mechanisms=//p' "$props" | tail -1)"
if [[ $listener_name == SASL_* ]]; then
  IFS=, read -ra mech_list <<<"${mechs// /}"
  for m in "${mech_list[@]+"${mech_list[@]}"}"; do
    [[ $m == SCRAM-SHA-256 || $m == SCRAM-SHA-512 ]] || continue
    key="listener.name.${listener_name,,}.${m,,}.sasl.jaas.config"
    grep -qF "$key=" "$props" && continue
    echo "$key=org.apache.kafka.common.security.scram.ScramLoginModule required;" >>"$props"
  done
fi

if [[ ! -f "$data_dir/logs/meta.properties" ]]; then
  cluster_id="$(python3 -c 'import base64, hashlib, sys; print(base64.urlsafe_b64encode(hashlib.sha256(sys.argv[1].encode()).digest()[:16]).decode().rstrip("="))' "$voters")"
  java -cp "$CP" kafka.tools.StorageTool format -t "$cluster_id" -c "$props" >"$data_dir/format.log" 2>&1 || {
    echo "kafka-cluster-shim: storage format failed:" >&2
    tail -20 "$data_dir/format.log" >&2
    exit 1
  }
fi

log="$data_dir/kafka.log"
cat >"$data_dir/log4j.properties" <<L4J
log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=$log
log4j.appender.F.Append=true
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=[%d] %p %m (%c)%n
L4J
touch "$log"
from=$(($(wc -l <"$log") + 1))

# The watcher: this shell's pid becomes Kafka's JVM (exec below); it follows the new log lines
# until that pid is gone.
jvm=$$
(
  ready=0
  while kill -0 "$jvm" 2>/dev/null; do
    n=$(wc -l <"$log")
    if ((n >= from)); then
      while IFS= read -r line; do
        if ((!ready)) && [[ "$line" == *"Kafka Server started"* ]]; then
          echo "millrace ready (listening on $listen)"
          ready=1
        fi
        if [[ "$line" =~ Becoming\ the\ active\ controller\ at\ epoch\ ([0-9]+) ]]; then
          echo "this node is the active controller term=${BASH_REMATCH[1]}" >&2
        fi
      done < <(sed -n "${from},${n}p" "$log")
      from=$((n + 1))
    fi
    sleep 0.1
  done
) &
exec java -Xms256m -Xmx640m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Dlog4j.configuration="file:$data_dir/log4j.properties" -cp "$CP" kafka.Kafka "$props" >>"$data_dir/kafka.out" 2>&1
