#!/usr/bin/env bash
# Apache Kafka 4.4.0 (single-node KRaft; the version is reference/pom.xml's kafka.version) behind the Millrace command-line
# contract, so the client suites can be checked against a reference broker:
#
#   MILLRACE_BIN=compat-tests/reference/kafka-shim.sh MILLRACE_START_TIMEOUT=120 \
#       compat-tests/run-all.sh
#
# Usage: kafka-shim.sh --data-dir DIR --listen 127.0.0.1:0 [--set name=value ...]
# Prints "listening on 127.0.0.1:PORT" on stdout when the broker is up; Kafka's
# own log goes to DIR/kafka.log. SIGTERM stops Kafka (controlled shutdown), exit 0.
# Needs java >= 17 and mvn (first run resolves the jars from Maven Central).
#
# Listeners: --listen is the listener named PLAINTEXT (as in Millrace). Further listeners come from
# `--set listeners=NAME://host:port,...` (e.g. SSL://127.0.0.1:P1,MTLS://127.0.0.1:P2) and their
# protocols from `--set listener.security.protocol.map=...`; the shim merges them with its own:
#   listeners            = PLAINTEXT://<--listen>,<given>,CONTROLLER://127.0.0.1:<free port>
#   advertised.listeners = PLAINTEXT://<--listen>,<given>
#   listener.security.protocol.map = <given, or PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:
#                          SASL_PLAINTEXT,SASL_SSL:SASL_SSL>,CONTROLLER:PLAINTEXT
#   inter.broker.listener.name = PLAINTEXT
# Without those two settings the broker has only PLAINTEXT (+ CONTROLLER), as before. A restart
# on the same data dir keeps the extra listeners of the first start unless it is given new ones.
#
# TLS with PEM files (Kafka 4.1.1, DefaultSslEngineFactory): ssl.keystore.type=PEM with
# ssl.keystore.location=FILE holding the certificate chain and the private key. The key must be
# PKCS#8 ("-----BEGIN PRIVATE KEY-----"; RSA, DSA or EC; "BEGIN RSA/EC PRIVATE KEY" is not read)
# or an encrypted PKCS#8 key ("BEGIN ENCRYPTED PRIVATE KEY") with ssl.key.password. For an
# unencrypted key ssl.key.password must be left UNSET (any value, even an empty one, makes Kafka
# decrypt the key as EncryptedPrivateKeyInfo, which fails), and ssl.keystore.password must never
# be set with PEM ("SSL key store password cannot be specified with PEM format"). Likewise
# ssl.truststore.type=PEM takes ssl.truststore.location=FILE of CA certificates and refuses
# ssl.truststore.password. Per-listener settings use Kafka's prefix, e.g.
# listener.name.mtls.ssl.client.auth=required.
#
# SCRAM (sasl.enabled.mechanisms naming SCRAM-SHA-256 and/or SCRAM-SHA-512): Kafka 4.1.1 wants a
# server-side JAAS entry for every SASL listener and enabled mechanism and does not start without
# one ("Could not find a 'KafkaServer' or 'sasl_plaintext.KafkaServer' entry in the JAAS
# configuration. System property 'java.security.auth.login.config' is not set"). SCRAM's server
# side takes no options (the credentials live in the metadata log, set with kafka-configs /
# AlterUserScramCredentials), so on a first start the shim adds
#   listener.name.<listener>.<mechanism>.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# for each SASL_PLAINTEXT/SASL_SSL listener (from listeners= and the protocol map) and each SCRAM
# mechanism of the broker-wide sasl.enabled.mechanisms, unless that key is given. Millrace needs no
# such line. Nothing else is needed for SCRAM here: the inter-broker listener is PLAINTEXT, so
# sasl.mechanism.inter.broker.protocol stays at its default.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIBS="$HERE/../.work/kafka-ref/libs"

data_dir="" listen="" sets=() extra_listeners="" protocol_map=""
while (($#)); do
  case "$1" in
    --data-dir) data_dir="$2"; shift 2 ;;
    --listen) listen="$2"; shift 2 ;;
    --set)
      case "$2" in
        listeners=*) extra_listeners="${2#listeners=}" ;;
        listener.security.protocol.map=*) protocol_map="${2#listener.security.protocol.map=}" ;;
        *) sets+=("$2") ;;
      esac
      shift 2
      ;;
    *) echo "kafka-shim: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$data_dir" && -n "$listen" ]] || { echo "usage: $0 --data-dir DIR --listen HOST:PORT [--set k=v]..." >&2; exit 2; }

# The jars are resolved once per version: .complete holds the version they are.
REF_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/pom.xml")"
if [[ "$(cat "$LIBS/.complete" 2>/dev/null)" != "$REF_VERSION" ]]; then
  echo "kafka-shim: resolving Kafka $REF_VERSION jars with mvn into $LIBS" >&2
  rm -rf "$LIBS"
  mkdir -p "$LIBS"
  timeout 900 mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS" -DincludeScope=runtime >&2
  echo "$REF_VERSION" >"$LIBS/.complete"
fi

host="${listen%:*}" port="${listen##*:}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
[[ "$port" == 0 ]] && port="$(free_port)"
cport="$(free_port)"

mkdir -p "$data_dir"
data_dir="$(cd "$data_dir" && pwd)"
props="$data_dir/server.properties"
# Ports change on every start (the contract allows --listen 127.0.0.1:0). The extra listeners
# (--set listeners=...) are kept in $extras_file for a restart that does not name them again.
extras_file="$data_dir/shim.extra-listeners"
if [[ -n "$extra_listeners" ]]; then
  printf '%s\n' "$extra_listeners" >"$extras_file"
elif [[ -f "$extras_file" ]]; then
  extra_listeners="$(cat "$extras_file")"
fi
set_listeners() {
  local advertised="PLAINTEXT://$host:$port${extra_listeners:+,$extra_listeners}"
  sed -i -e '/^listeners=/d' -e '/^advertised.listeners=/d' "$props"
  echo "listeners=$advertised,CONTROLLER://127.0.0.1:$cport" >>"$props"
  echo "advertised.listeners=$advertised" >>"$props"
  if [[ -n "$protocol_map" ]]; then
    sed -i -e '/^listener.security.protocol.map=/d' "$props"
    echo "listener.security.protocol.map=$(protocol_map_of "$protocol_map")" >>"$props"
  fi
}
# protocol_map_of MAP: MAP (or Kafka's default map) with PLAINTEXT:PLAINTEXT (the --listen
# listener) when MAP does not name PLAINTEXT, and CONTROLLER:PLAINTEXT
protocol_map_of() {
  local map="${1:-PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL}"
  [[ ",$map" == *",PLAINTEXT:"* ]] || map="PLAINTEXT:PLAINTEXT,$map"
  echo "$map,CONTROLLER:PLAINTEXT"
}
# scram_jaas_defaults: the SCRAM JAAS lines described above, appended to $props
scram_jaas_defaults() {
  local kv mechs="" map entry l name proto m key
  local -a entries
  for kv in "${sets[@]+"${sets[@]}"}"; do
    [[ $kv == sasl.enabled.mechanisms=* ]] && mechs="${kv#*=}"
  done
  [[ ",${mechs// /}," == *,SCRAM-SHA-* ]] || return 0
  map="$(protocol_map_of "$protocol_map")"
  local -a listeners_given mech_list
  IFS=, read -ra listeners_given <<<"$extra_listeners"
  IFS=, read -ra mech_list <<<"${mechs// /}"
  for l in "${listeners_given[@]+"${listeners_given[@]}"}"; do
    name="${l%%://*}" proto=""
    IFS=, read -ra entries <<<"$map"
    for entry in "${entries[@]}"; do
      [[ "${entry%%:*}" == "$name" ]] && proto="${entry#*:}"
    done
    [[ $proto == SASL_PLAINTEXT || $proto == SASL_SSL ]] || continue
    for m in "${mech_list[@]}"; do
      [[ $m == SCRAM-SHA-256 || $m == SCRAM-SHA-512 ]] || continue
      key="listener.name.${name,,}.${m,,}.sasl.jaas.config"
      grep -qF "$key=" "$props" && continue
      echo "$key=org.apache.kafka.common.security.scram.ScramLoginModule required;" >>"$props"
    done
  done
  return 0
}
if [[ ! -f "$props" ]]; then
  cat >"$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
controller.listener.names=CONTROLLER
listener.security.protocol.map=$(protocol_map_of "$protocol_map")
inter.broker.listener.name=PLAINTEXT
log.dirs=$data_dir/logs
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  for kv in "${sets[@]+"${sets[@]}"}"; do echo "$kv" >>"$props"; done
  scram_jaas_defaults
  set_listeners
  cluster_id="$(python3 -c 'import base64,uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
  # `--cluster-id=` form: a random id may start with '-', which would read as an option.
  java -cp "$LIBS/*" kafka.tools.StorageTool format --cluster-id="$cluster_id" -c "$props" >&2
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
  kill -0 "$kpid" 2>/dev/null || { echo "kafka-shim: Kafka exited during startup" >&2; tail -n 50 "$data_dir/kafka.out" "$log" >&2; exit 1; }
  sleep 0.1
done
echo "kafka-shim: Kafka did not start in 120 s" >&2
kill -TERM "$kpid"; wait "$kpid" || true
exit 1
