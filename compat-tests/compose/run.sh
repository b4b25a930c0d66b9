#!/usr/bin/env bash
# Compose test: docker-compose.yml brings up one 3-node Millrace cluster in containers that
# clients use through the brokers' host ports, that tiers a topic to the file's object store
# (SeaweedFS), that survives a stopped, a killed and a crashed node, and that leaves nothing behind.
#
#   compat-tests/compose/run.sh
#
# Steps: install the engine when missing (apt-get install docker.io docker-compose) and start
# dockerd when no daemon answers (stopped again at the end); build a FROM-scratch test image from
# the broker binary plus exactly the shared libraries ldd lists (no image can be pulled here), and
# one of the static `weed` binary (scripts/seaweedfs.sh, cached outside the clone) laid out like
# deploy/seaweedfs/Dockerfile's; `up` docker-compose.yml with a loopback override (the test
# images, network_mode: host, each broker's and the object store's ports free 127.0.0.1 ports
# through the file's port variables, and the brokers' remote log manager and retention checks
# every second instead of Kafka's 30 s and 5 min); wait for the object-store-bucket service to
# exit 0, the three ready lines and for kcat -L to list brokers 1, 2, 3; create a 6-partition RF-3
# topic through broker 3's port (confluent-kafka AdminClient), produce 1,000 records with
# acks=all and read them back; tiered storage: a 3-partition topic with remote.storage.enable,
# segment.bytes 128 KiB and local.retention.bytes 256 KiB gets 3,000 records of 1 KB, broker 1's
# /remote-log lists at least 3 segments per partition contiguous from offset 0, the bucket holds
# their .log objects (the filer's listing), every partition's local log start (ListOffsets -4) is
# above 0 while its log start (-2) is 0, and all 3,000 records read back from offset 0;
# `stop` node 2 (SIGTERM: exits 0, its leaderships move: controlled shutdown), read everything from
# the two left, produce 1,000 more, `start` it; `kill` node 1 (SIGKILL: not restarted, its
# leaderships move after the broker session timeout), start it; kill -9 node 3's process (the
# restart policy brings it back); every partition led with its ISR back to 3, all 2,000 records
# read, and the tiered topic's 3,000 again from offset 0; `down -v` and remove the images — also
# on failure or interruption (trap).
#
# Env: MILLRACE_BIN (broker; built with cargo when unset), MILLRACE_WEED (SeaweedFS's weed; what
#      scripts/seaweedfs.sh prints when unset), KCAT (default kcat), PYTHON (for the
#      venv, default python3), COMPOSE_STEP_TIMEOUT (seconds per step, default 60),
#      KEEP_WORK=1 keeps the work dir (also kept when a check fails).
# Last line printed: "N passed, M failed" ("0 passed, 0 failed" after a SKIP line when no
# container engine can run here: not root and no daemon, or dockerd does not start).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

KCAT="${KCAT:-kcat}"
T="${COMPOSE_STEP_TIMEOUT:-60}"
# Kafka's broker.session.timeout.ms (9 s) plus the heartbeat interval and metadata propagation.
FENCE_WAIT_S=40
COMPOSE_FILE="$ROOT/docker-compose.yml"
TOPIC="compose-$RANDOM$RANDOM"
PROJECT="millrace-compose-test-$$"
IMAGE="millrace-compose-test:$$"
WEED_IMAGE="millrace-compose-test-weed:$$"
SERVICES=(millrace-1 millrace-2 millrace-3)
STORE_SERVICES=(object-store object-store-bucket)
# The tiered topic: small segments and a small local tail, so 3,000 records of 1 KB over 3
# partitions (about 1 MB each) roll about 8 segments per partition and leave the disk after upload.
TIERED_TOPIC="$TOPIC-tiered"
TIERED_PARTITIONS=3
TIERED_RECORDS=3000
TIERED_VALUE_BYTES=1000
TIERED_SEGMENT_BYTES=131072
TIERED_LOCAL_RETENTION_BYTES=262144
TIERED_SEGMENTS_MIN=3
# The bucket and prefix of the file's millrace.remote.storage.url, as a filer folder.
BUCKET_FOLDER=/buckets/millrace/cluster

passed=0
failed=0
summary() { echo "$passed passed, $failed failed"; }
pass() { passed=$((passed + 1)); echo "PASS  $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL  $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then
    echo "      --- $3 (last 15 lines) ---"
    tail -n 15 "$3" | sed -e '/^$/d' -e 's/^/      /'
  fi
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-compose.XXXXXX")"
DOCKERD_PID=""
IMAGE_BUILT=""
UP=""
cleanup() {
  if [[ -n "$UP" ]]; then
    compose logs --no-color --tail=20 >"$WORK/compose.log" 2>&1 || true
    compose down -v --remove-orphans -t 30 >"$WORK/down.log" 2>&1 || true
  fi
  if [[ -n "$IMAGE_BUILT" ]]; then
    timeout 60 docker image rm -f "$IMAGE" "$WEED_IMAGE" >/dev/null 2>&1 || true
  fi
  if [[ -n "$DOCKERD_PID" ]]; then
    kill -TERM "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$DOCKERD_PID" 2>/dev/null || true
  fi
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then
    echo "compose: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

skip() {
  echo "compose: SKIP: $1"
  summary
  exit 0
}

# --- the container engine ---------------------------------------------------------
engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1 ||
  ! { command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1; }; then
  if ((EUID != 0)); then
    skip "no container engine installed, and installing one needs root"
  fi
  echo "compose: installing the engine: apt-get install -y docker.io docker-compose"
  if ! { timeout 300 apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq docker.io docker-compose; } \
    >"$WORK/apt.log" 2>&1; then
    fail "engine-install" "apt-get install docker.io docker-compose failed" "$WORK/apt.log"
    summary
    exit 1
  fi
fi
if ! engine_answers; then
  if ((EUID != 0)); then
    skip "no Docker daemon answers, and starting dockerd needs root"
  fi
  echo "compose: no daemon answers; starting dockerd in the background"
  # Its own session: a TERM sent to this script's process group (run-all's timeout) must not stop
  # the daemon before the cleanup has used it to remove the containers and volumes.
  setsid dockerd >"$WORK/dockerd.log" 2>&1 </dev/null &
  DOCKERD_PID=$!
  end=$(($(now_ms) + 60000))
  until engine_answers; do
    if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
      DOCKERD_PID=""
      echo "compose: dockerd log (last 15 lines):"
      tail -n 15 "$WORK/dockerd.log" | sed 's/^/      /'
      KEEP_WORK=1 skip "dockerd exited at start (no cgroups or privileges for containers here?)"
    fi
    if (($(now_ms) > end)); then
      tail -n 15 "$WORK/dockerd.log" | sed 's/^/      /'
      KEEP_WORK=1 skip "dockerd did not answer within 60 s"
    fi
    sleep 0.5
  done
fi
if command -v docker-compose >/dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  COMPOSE=(docker compose)
fi
echo "compose: engine $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'), $("${COMPOSE[@]}" version --short 2>/dev/null || echo '?')"

# --- clients: kcat and the cluster suite's venv (confluent-kafka) -------------------
if ! command -v "$KCAT" >/dev/null 2>&1; then
  echo "compose: installing kcat"
  if ! { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq kcat; } >"$WORK/apt-kcat.log" 2>&1; then
    fail "kcat-install" "apt-get install kcat failed" "$WORK/apt-kcat.log"
    summary
    exit 1
  fi
fi
VENV="$ROOT/compat-tests/cluster/.venv"
REQ="$ROOT/compat-tests/cluster/requirements.txt"
STAMP="$VENV/.requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "compose: creating venv $VENV (compat-tests/cluster/requirements.txt)"
  if ! { "${PYTHON:-python3}" -m venv "$VENV" &&
    timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; } >"$WORK/pip.log" 2>&1; then
    fail "venv" "pip install failed" "$WORK/pip.log"
    summary
    exit 1
  fi
  echo "$want" >"$STAMP"
fi
# client_step LABEL STEP ARGS...: check.py STEP ARGS (confluent-kafka); PASS with the line it
# prints, or FAIL with that line and its stderr (librdkafka's log).
client_step() {
  local label="$1"
  shift
  if CHECK_TIMEOUT="$T" timeout --kill-after=10 $((T + 30)) "$VENV/bin/python" "$HERE/check.py" "$@" \
    >"$WORK/step" 2>"$WORK/step.err"; then
    pass "${label:+$label: }$(cat "$WORK/step")"
  else
    fail "${label:+$label: }$*" "$(tail -n 3 "$WORK/step")" "$WORK/step.err"
  fi
}

# --- the test image: FROM scratch, the binary and what ldd lists --------------------
if ! bin="$(millrace_bin)"; then
  fail "broker-binary" "no broker binary"
  summary
  exit 1
fi
ctx="$WORK/image"
mkdir -p "$ctx/rootfs/usr/local/bin"
cp -l "$bin" "$ctx/rootfs/usr/local/bin/millrace" 2>/dev/null || cp "$bin" "$ctx/rootfs/usr/local/bin/millrace"
# "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)";
# linux-vdso has no file. Each library goes where ldd found it, symlinks resolved.
libs=()
while read -r lib; do libs+=("$lib"); done < <(ldd "$bin" | sed -nE 's#.*=> (/[^ ]+) .*#\1#p; s#^[[:space:]]*(/[^ ]+) \(0x.*#\1#p')
for lib in "${libs[@]}"; do
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done
cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
ENV MILLRACE_DATA_DIR=/data MILLRACE_LISTEN=0.0.0.0:9092
ENTRYPOINT ["/usr/local/bin/millrace"]
EOF
start=$(now_ms)
if DOCKER_BUILDKIT=0 timeout 300 docker build -q -t "$IMAGE" "$ctx" >"$WORK/build.log" 2>&1; then
  IMAGE_BUILT=1
  pass "image: $IMAGE FROM scratch: millrace + ${#libs[@]} files from ldd ($(basename -a "${libs[@]}" | tr '\n' ' ')) in $(($(now_ms) - start)) ms"
else
  IMAGE_BUILT=1
  fail "image" "docker build failed" "$WORK/build.log"
  summary
  exit 1
fi
rm -rf "$ctx"

# --- the object store's test image: FROM scratch, the static weed binary ----------------
# The layout of deploy/seaweedfs/Dockerfile's image (which builds weed from the Go module proxy,
# out of reach here): /usr/bin/weed, a /tmp for its sockets, /data, and the empty
# /buckets/millrace that object-store-bucket copies into the filer. That Dockerfile builds the
# version scripts/seaweedfs.sh caches; a drift between the two is a failure.
want_version="$(sed -nE 's/^VERSION="\$\{SEAWEEDFS_VERSION:-([^}]+)\}"$/\1/p' "$ROOT/scripts/seaweedfs.sh")"
file_version="$(sed -nE 's/^ARG SEAWEEDFS_VERSION=(.+)$/\1/p' "$ROOT/deploy/seaweedfs/Dockerfile")"
if [[ -n "$want_version" && "$want_version" == "$file_version" ]]; then
  pass "deploy/seaweedfs/Dockerfile builds SeaweedFS $file_version, the version scripts/seaweedfs.sh caches"
else
  fail "SeaweedFS version" "deploy/seaweedfs/Dockerfile has '$file_version', scripts/seaweedfs.sh '$want_version'"
fi
weed="${MILLRACE_WEED:-}"
if [[ -z "$weed" ]] && ! weed="$(timeout 1200 bash "$ROOT/scripts/seaweedfs.sh" 2>"$WORK/weed-build.log" | tail -n1)"; then
  weed=""
fi
if [[ -z "$weed" || ! -x "$weed" ]]; then
  fail "weed-binary" "no SeaweedFS binary ('$weed')" "$WORK/weed-build.log"
  summary
  exit 1
fi
if ldd "$weed" >/dev/null 2>&1; then
  fail "weed-binary" "$weed is dynamically linked; a FROM-scratch image needs it static (CGO_ENABLED=0)"
  summary
  exit 1
fi
ctx="$WORK/weed-image"
mkdir -p "$ctx/rootfs/usr/bin" "$ctx/rootfs/tmp" "$ctx/rootfs/data" "$ctx/rootfs/buckets/millrace"
chmod 1777 "$ctx/rootfs/tmp"
cp -l "$weed" "$ctx/rootfs/usr/bin/weed" 2>/dev/null || cp "$weed" "$ctx/rootfs/usr/bin/weed"
cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
VOLUME /data
ENTRYPOINT ["/usr/bin/weed"]
EOF
start=$(now_ms)
if DOCKER_BUILDKIT=0 timeout 300 docker build -q -t "$WEED_IMAGE" "$ctx" >"$WORK/build-weed.log" 2>&1; then
  pass "image: $WEED_IMAGE FROM scratch: the static weed ($("$weed" version 2>/dev/null | head -n1)) in $(($(now_ms) - start)) ms"
else
  fail "weed image" "docker build failed" "$WORK/build-weed.log"
  summary
  exit 1
fi
rm -rf "$ctx"

# --- the compose project: the shipped file plus a loopback override -----------------
# Free loopback ports for the file's variables: CLUSTER_HOST, BROKER_n_PORT, CONTROLLER_n_PORT,
# HTTP_n_PORT, and the object store's STORE_*_PORT (HTTP and gRPC of S3, filer, master, volume).
read -r -a ports < <("$VENV/bin/python" - <<'PY'
import socket
socks = [socket.socket() for _ in range(17)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
)
export CLUSTER_HOST=127.0.0.1
export BROKER_1_PORT="${ports[0]}" CONTROLLER_1_PORT="${ports[1]}"
export BROKER_2_PORT="${ports[2]}" CONTROLLER_2_PORT="${ports[3]}"
export BROKER_3_PORT="${ports[4]}" CONTROLLER_3_PORT="${ports[5]}"
export HTTP_1_PORT="${ports[6]}" HTTP_2_PORT="${ports[7]}" HTTP_3_PORT="${ports[8]}"
export STORE_S3_PORT="${ports[9]}" STORE_S3_GRPC_PORT="${ports[10]}"
export STORE_FILER_PORT="${ports[11]}" STORE_FILER_GRPC_PORT="${ports[12]}"
export STORE_MASTER_PORT="${ports[13]}" STORE_MASTER_GRPC_PORT="${ports[14]}"
export STORE_VOLUME_PORT="${ports[15]}" STORE_VOLUME_GRPC_PORT="${ports[16]}"
B1="127.0.0.1:$BROKER_1_PORT" B2="127.0.0.1:$BROKER_2_PORT" B3="127.0.0.1:$BROKER_3_PORT"
ALL="$B1,$B2,$B3"
H1="127.0.0.1:$HTTP_1_PORT"
FILER="127.0.0.1:$STORE_FILER_PORT"
{
  echo "services:"
  for s in "${SERVICES[@]}"; do
    printf '  %s:\n    image: %s\n    network_mode: host\n' "$s" "$IMAGE"
    # Kafka's remote.log.manager.task.interval.ms (30 s) and log.retention.check.interval.ms
    # (5 min) would make the tiered steps wait minutes; the file keeps Kafka's defaults.
    printf '    environment:\n      MILLRACE_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS: "1000"\n'
    printf '      MILLRACE_LOG_RETENTION_CHECK_INTERVAL_MS: "1000"\n'
  done
  for s in "${STORE_SERVICES[@]}"; do
    printf '  %s:\n    image: %s\n    network_mode: host\n' "$s" "$WEED_IMAGE"
  done
} >"$WORK/override.yml"
compose() {
  timeout --kill-after=10 "$T" "${COMPOSE[@]}" --ansi never -p "$PROJECT" \
    -f "$COMPOSE_FILE" -f "$WORK/override.yml" "$@"
}
container_of() { compose ps -q "$1" 2>/dev/null; }

# ready_count SERVICE: how many "millrace ready" lines the service's container has printed.
ready_count() { compose logs --no-color "$1" 2>/dev/null | grep -c 'millrace ready' || true; }
# wait_ready SERVICE N: until the service has printed N ready lines (bounded by T).
wait_ready() {
  local end=$(($(now_ms) + T * 1000))
  until (($(ready_count "$1") >= $2)); do
    (($(now_ms) < end)) || return 1
    sleep 0.3
  done
}
# metadata [TOPIC]: kcat -L through every broker's port, into $WORK/meta.
metadata() {
  timeout --kill-after=5 20 "$KCAT" -b "$ALL" -m 10 -L ${1:+-t "$1"} >"$WORK/meta" 2>"$WORK/meta.err"
}
brokers_listed() { metadata && sed -nE 's/^ +broker ([0-9]+) at .*/\1/p' "$WORK/meta" | sort -n | tr '\n' ' ' | sed 's/ $//'; }
# wait_brokers "1 2 3": until kcat -L lists exactly those brokers.
wait_brokers() {
  local end=$(($(now_ms) + T * 1000)) seen=""
  while :; do
    seen="$(brokers_listed || true)"
    [[ "$seen" == "$1" ]] && return 0
    (($(now_ms) < end)) || { echo "brokers listed: '$seen'" >"$WORK/why"; return 1; }
    sleep 0.5
  done
}
# partitions: "partition leader isr-count" per partition of $TOPIC, from the last metadata call.
partitions() { sed -nE 's/^ +partition ([0-9]+), leader (-?[0-9]+), replicas: [0-9,]*, isrs: ([0-9,]*).*/\1 \2 \3/p' "$WORK/meta"; }
# wait_partitions ID_NOT_LEADING ISR_SIZE SECONDS: until all 6 partitions of $TOPIC have a live
# leader other than ID_NOT_LEADING (0 = any) and at least ISR_SIZE in-sync replicas.
wait_partitions() {
  local avoid="$1" isr_min="$2" end=$(($(now_ms) + $3 * 1000))
  while :; do
    if metadata "$TOPIC"; then
      local n=0 good=0 l isr
      while read -r _ l isr; do
        n=$((n + 1))
        local isr_size
        isr_size=$(tr ',' '\n' <<<"$isr" | grep -c . || true)
        if ((l >= 0 && l != avoid && isr_size >= isr_min)); then good=$((good + 1)); fi
      done < <(partitions)
      ((n == 6 && good == 6)) && return 0
    fi
    if (($(now_ms) > end)); then
      { echo "last metadata:"; cat "$WORK/meta"; } >"$WORK/why"
      return 1
    fi
    sleep 0.5
  done
}
leaders() { partitions | awk '{printf "%s%s->%s", sep, $1, $2; sep=" "}'; }
exit_code_of() { docker inspect -f '{{.State.ExitCode}}' "$1" 2>/dev/null; }

start=$(now_ms)
UP=1
if ! compose up -d --no-build >"$WORK/up.log" 2>&1; then
  fail "up" "docker-compose up failed" "$WORK/up.log"
  summary
  exit 1
fi
# The object store: object-store-bucket exits 0 once the filer has made the bucket (it fails
# and is restarted while the filer is not up yet).
bucket_made() {
  local c
  c="$(container_of object-store-bucket)"
  [[ -n "$c" && "$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$c" 2>/dev/null)" == "exited 0" ]]
}
end=$(($(now_ms) + T * 1000))
until bucket_made || (($(now_ms) > end)); do sleep 0.3; done
if bucket_made; then
  pass "object store: S3 on 127.0.0.1:$STORE_S3_PORT, bucket millrace made by object-store-bucket ($(docker inspect -f '{{.RestartCount}}' "$(container_of object-store-bucket)") restarts) $(($(now_ms) - start)) ms after up"
else
  fail "object store" "object-store-bucket did not exit 0 within ${T}s"
  compose logs --no-color --tail=15 object-store object-store-bucket 2>&1 | sed 's/^/      /'
fi
ok=1
for s in "${SERVICES[@]}"; do
  wait_ready "$s" 1 || { ok=""; fail "up: $s ready" "no 'millrace ready' line within ${T}s"; compose logs --no-color --tail=15 "$s"; }
done
[[ -n "$ok" ]] && pass "up: 3 services ready in $(($(now_ms) - start)) ms (brokers on $ALL, controllers on ports $CONTROLLER_1_PORT,$CONTROLLER_2_PORT,$CONTROLLER_3_PORT)"
if wait_brokers "1 2 3"; then
  pass "kcat -L lists brokers 1 2 3 (one cluster; controller: $(sed -nE 's/^ +broker ([0-9]+) at .*\(controller\).*/\1/p' "$WORK/meta"))"
else
  fail "kcat -L brokers" "wanted '1 2 3' within ${T}s" "$WORK/why"
fi

# --- a replicated topic: create, produce, consume ------------------------------------
client_step "through broker 3's port ($B3)" create "$B3" "$TOPIC" 6 3
client_step "" produce "$ALL" "$TOPIC" 0 1000
client_step "" consume "$ALL" "$TOPIC" 1000

# The file's broker configs reach the brokers: a topic auto-created by a produce gets
# default.replication.factor=3 (Kafka's default is 1).
AUTO="$TOPIC-auto"
replicas=""
if echo auto | timeout --kill-after=5 20 "$KCAT" -b "$ALL" -P -t "$AUTO" 2>"$WORK/step.err"; then
  end=$(($(now_ms) + T * 1000))
  while (($(now_ms) < end)); do
    metadata "$AUTO" || true
    replicas="$(sed -nE 's/^ +partition 0, leader -?[0-9]+, replicas: ([0-9,]+),.*/\1/p' "$WORK/meta")"
    [[ -n "$replicas" ]] && break
    sleep 0.5
  done
fi
if [[ "$(tr ',' '\n' <<<"$replicas" | grep -c . || true)" == 3 ]]; then
  pass "auto-created topic (kcat -P) has 3 replicas ($replicas): default.replication.factor from the compose file"
else
  fail "auto-created topic's replicas" "wanted 3, got '$replicas'" "$WORK/step.err"
fi

# --- tiered storage: segments upload to the object store, the local log keeps its tail --
client_step "tiered" create "$B1" "$TIERED_TOPIC" "$TIERED_PARTITIONS" 3 remote.storage.enable=true \
  segment.bytes="$TIERED_SEGMENT_BYTES" local.retention.bytes="$TIERED_LOCAL_RETENTION_BYTES"
start=$(now_ms)
client_step "tiered" produce "$ALL" "$TIERED_TOPIC" 0 "$TIERED_RECORDS" "$TIERED_VALUE_BYTES"
client_step "tiered" remote-log "$H1" "$TIERED_TOPIC" "$TIERED_PARTITIONS" "$TIERED_SEGMENTS_MIN"
client_step "tiered" bucket "$FILER" "$BUCKET_FOLDER" "$TIERED_TOPIC" $((TIERED_PARTITIONS * TIERED_SEGMENTS_MIN))
client_step "tiered" local-start "$ALL" "$TIERED_TOPIC" "$TIERED_PARTITIONS"
echo "compose: tiered: produce, uploads and the local trim checked in $(($(now_ms) - start)) ms"
client_step "tiered, from offset 0" consume "$ALL" "$TIERED_TOPIC" "$TIERED_RECORDS"

# --- stop node 2: a controlled shutdown ------------------------------------------------
c2="$(container_of millrace-2)"
metadata "$TOPIC" || true
echo "compose: leaders before stopping node 2: $(leaders)"
start=$(now_ms)
compose stop -t 30 millrace-2 >"$WORK/step" 2>&1 || true
stop_ms=$(($(now_ms) - start))
code="$(exit_code_of "$c2")"
if [[ "$code" == "0" ]]; then pass "stop millrace-2 (SIGTERM): exited 0 after $stop_ms ms"; else fail "stop millrace-2" "exit code '$code' after $stop_ms ms"; fi
start=$(now_ms)
if wait_partitions 2 1 "$FENCE_WAIT_S"; then
  pass "no partition led by stopped broker 2, $(($(now_ms) - start)) ms after the stop returned (leaders $(leaders))"
else
  fail "leaderships of stopped broker 2" "still led by 2 or leaderless after ${FENCE_WAIT_S}s" "$WORK/why"
fi
if wait_brokers "1 3"; then pass "kcat -L lists brokers 1 3"; else fail "brokers after stopping 2" "wanted '1 3'" "$WORK/why"; fi
client_step "node 2 stopped" consume "$ALL" "$TOPIC" 1000
client_step "node 2 stopped" produce "$ALL" "$TOPIC" 1000 1000
before="$(ready_count millrace-2)"
compose start millrace-2 >"$WORK/step" 2>&1 || true
if wait_ready millrace-2 $((before + 1)) && wait_brokers "1 2 3"; then
  pass "start millrace-2: ready again (same container, same volume), kcat -L lists 1 2 3"
else
  fail "start millrace-2" "not ready or not listed within ${T}s" "$WORK/why"
fi

# --- kill node 1: fenced after the session timeout -------------------------------------
c1="$(container_of millrace-1)"
start=$(now_ms)
compose kill -s SIGKILL millrace-1 >"$WORK/step" 2>&1 || true
if wait_partitions 1 1 "$FENCE_WAIT_S"; then
  pass "kill millrace-1 (SIGKILL): no partition led by broker 1 after $(($(now_ms) - start)) ms (leaders $(leaders))"
else
  fail "leaderships of killed broker 1" "still led by 1 or leaderless after ${FENCE_WAIT_S}s" "$WORK/why"
fi
running="$(docker inspect -f '{{.State.Running}} {{.RestartCount}}' "$c1" 2>/dev/null || echo '?')"
if [[ "$running" == "false 0" ]]; then pass "killed by the user, millrace-1 stays down (restart: unless-stopped)"; else fail "millrace-1 after kill" "running/restarts: $running"; fi
before="$(ready_count millrace-1)"
compose start millrace-1 >"$WORK/step" 2>&1 || true
if wait_ready millrace-1 $((before + 1)) && wait_brokers "1 2 3"; then
  pass "start millrace-1: ready again, kcat -L lists 1 2 3"
else
  fail "start millrace-1" "not ready or not listed within ${T}s" "$WORK/why"
fi

# --- crash node 3: the restart policy brings it back -----------------------------------
c3="$(container_of millrace-3)"
pid3="$(docker inspect -f '{{.State.Pid}}' "$c3" 2>/dev/null || echo 0)"
before="$(ready_count millrace-3)"
if ((pid3 > 0)) && kill -KILL "$pid3"; then
  start=$(now_ms)
  if wait_ready millrace-3 $((before + 1)); then
    pass "kill -9 of millrace-3's process ($pid3): restarted by Docker (restarts: $(docker inspect -f '{{.RestartCount}}' "$c3")), ready after $(($(now_ms) - start)) ms"
  else
    fail "crash of millrace-3" "not restarted and ready within ${T}s"
  fi
else
  fail "crash of millrace-3" "no process id for its container ($pid3)"
fi

# --- everything back: full ISR, all records --------------------------------------------
if wait_partitions 0 3 "$T"; then
  pass "every partition led, ISR back to 3 replicas (leaders $(leaders))"
else
  fail "ISR back to 3" "not within ${T}s" "$WORK/why"
fi
client_step "after the restarts" consume "$ALL" "$TOPIC" 2000
client_step "tiered, after the restarts" consume "$ALL" "$TIERED_TOPIC" "$TIERED_RECORDS"

# --- tear down --------------------------------------------------------------------------
if ((failed > 0)); then
  echo "compose: service logs (last 20 lines each):"
  compose logs --no-color --tail=20 2>&1 | sed 's/^/      /' || true
fi
start=$(now_ms)
compose down -v --remove-orphans -t 30 >"$WORK/down.log" 2>&1 || true
UP=""
timeout 60 docker image rm -f "$IMAGE" "$WEED_IMAGE" >/dev/null 2>&1 || true
IMAGE_BUILT=""
left="$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"; docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT"; docker network ls -q --filter "label=com.docker.compose.project=$PROJECT"; docker image ls -q "$IMAGE"; docker image ls -q "$WEED_IMAGE")"
if [[ -z "$left" ]]; then
  pass "down -v and image rm: no container, volume, network or image of $PROJECT left ($(($(now_ms) - start)) ms)"
else
  fail "teardown" "left: $(tr '\n' ' ' <<<"$left")" "$WORK/down.log"
fi

summary
[[ $failed -eq 0 ]]
