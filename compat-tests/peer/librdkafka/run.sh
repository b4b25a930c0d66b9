#!/usr/bin/env bash
# librdkafka's own tests/ (test-runner) against one Millrace broker, then the
# tests that need replication factor 3 against a 3-node Millrace cluster.
#
#   compat-tests/peer/librdkafka/run.sh [test-name-substring ...]
#
# Source: the librdkafka bundled in the rdkafka-sys crate
# (~/.cargo/registry/src/*/rdkafka-sys-*/librdkafka, present after the
# broker's cargo build; RDKAFKA_SRC overrides), or, when that is missing, the
# Debian source package (apt-get source librdkafka, deb-src enabled). It is
# copied to compat-tests/peer/.cache/ (gitignored) and built there once:
# ./configure && make -C src && make -C src-cpp && make -C tests build.
#
# Stage 1: every test number that ALLOWLIST names runs in its own test-runner
# process (-Q quick, -E no sockem, -r JSON report), a few at a time, against
# a broker started with --set num.partitions=4 (what librdkafka's test
# clusters use), with tests/test.conf = metadata.broker.list=<broker> and
# TEST_KAFKA_VERSION=4.1.0. Tests that share a number with an allow-listed
# test also run (the runner selects by number); they are printed but not
# counted.
# Stage 2: the names in ALLOWLIST.cluster (0103_transactions, 0098_consumer_txn)
# the same way, one at a time, against 3 nodes started with lib/millrace.sh
# millrace_cluster_start (details at the stage below), test.conf listing all
# three; the subtests that ran are printed. Both stages count into the last line.
#
# Env: MILLRACE_BIN, RDKAFKA_SRC, RDK_PARALLEL (processes at once, default 3),
#      RDK_TEST_TIMEOUT (seconds per test number, default 300),
#      RDK_TIMEOUT_MULTIPLIER (test.timeout.multiplier, default 2),
#      RDK_STAGES ("single cluster" by default; "cluster" skips the single broker),
#      RDK_CLUSTER_BIN, RDK_CLUSTER_FULL, RDK_CLUSTER_PARALLEL (stage 2, below),
#      KEEP_WORK=1.
# Apache Kafka 4.4.0 as the reference: MILLRACE_BIN=$PWD/compat-tests/reference/kafka-shim.sh
# (stage 2 then uses cluster-scenarios/kafka-cluster-shim.sh), or for stage 2 alone
#   RDK_STAGES=cluster MILLRACE_BIN=$PWD/compat-tests/cluster-scenarios/kafka-cluster-shim.sh
# Last line printed: "N passed, M failed" (allow-listed tests only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

CACHE="$(mkdir -p "$HERE/../.cache" && cd "$HERE/../.cache" && pwd)"
summary() { echo "$1 passed, $2 failed"; }

# --- source ------------------------------------------------------------------
src="${RDKAFKA_SRC:-}"
if [[ -z "$src" ]]; then
  src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka 2>/dev/null | sort -V | tail -n1 || true)"
fi
if [[ -n "$src" && -f "$src/configure" ]]; then
  ver="$(sed -nE 's/^#define RD_KAFKA_VERSION +0x([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2}).*/\1 \2 \3/p' "$src/src/rdkafka.h" |
    { read -r a b c; echo "$((16#$a)).$((16#$b)).$((16#$c))"; })"
else
  src=""
  ver="debian"
fi
B="$CACHE/librdkafka-$ver"

# --- build (cached) ------------------------------------------------------------
if [[ ! -x "$B/tests/test-runner" || ! -f "$B/.complete" ]]; then
  rm -rf "$B.tmp" && mkdir -p "$B.tmp"
  if [[ -n "$src" ]]; then
    echo "librdkafka: building $ver from $src"
    cp -r "$src/." "$B.tmp/"
  else
    echo "librdkafka: no rdkafka-sys source; apt-get source librdkafka"
    if ! grep -rqs '^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/ &&
      ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/; then
      sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    fi
    (cd "$B.tmp" && timeout 300 apt-get update -qq && timeout 600 apt-get source -qq librdkafka) >&2 || {
      echo "librdkafka: apt-get source failed" >&2; summary 0 1; exit 1; }
    d="$(ls -d "$B.tmp"/librdkafka-*/ | head -n1)"
    mv "$d" "$B.src" && rm -rf "$B.tmp" && mv "$B.src" "$B.tmp"
  fi
  # libzstd-dev: else librdkafka builds without zstd (0017 skips it);
  # rapidjson-dev: else 0053_stats and 0110_batch_size skip themselves.
  need=()
  pkg-config --exists libzstd 2>/dev/null || need+=(libzstd-dev)
  [[ -f /usr/include/rapidjson/rapidjson.h ]] || need+=(rapidjson-dev)
  if ((${#need[@]})); then
    echo "librdkafka: apt-get install ${need[*]}"
    { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need[@]}"; } >&2 || true
  fi
  # (The log must not be called configure.*: mklove loads ./configure.NAME
  # files as modules.)
  blog="$CACHE/librdkafka-$ver.build.log"
  t0=$(date +%s)
  if ! (cd "$B.tmp" &&
    ./configure --disable-ssl --disable-gssapi --disable-curl --enable-zstd --enable-zlib >"$blog" 2>&1 &&
    timeout 1200 make -j"$(nproc)" -C src >>"$blog" 2>&1 &&
    timeout 1200 make -j"$(nproc)" -C src-cpp >>"$blog" 2>&1 &&
    timeout 1800 make -j"$(nproc)" -C tests build >>"$blog" 2>&1); then
    echo "librdkafka: build failed; tail of $blog:" >&2
    tail -n 20 "$blog" >&2 || true
    summary 0 1
    exit 1
  fi
  rm -rf "$B" && mv "$B.tmp" "$B" && touch "$B/.complete"
  echo "librdkafka: built in $(($(date +%s) - t0))s"
fi
T="$B/tests"
export LD_LIBRARY_PATH="$B/src:$B/src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- allow-lists -----------------------------------------------------------------
# ALLOWLIST: the single-broker stage; ALLOWLIST.cluster: the cluster stage.
read_list() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$1" | grep -v '^$' || true; }
select_names() { # select_names NAME... -- FILTER...: the names containing one of the filters
  local names=() t f
  while [[ "$1" != -- ]]; do names+=("$1"); shift; done
  shift
  (($#)) || { ((${#names[@]})) && printf '%s\n' "${names[@]}"; return 0; }
  for t in "${names[@]}"; do
    for f in "$@"; do [[ "$t" == *"$f"* ]] && { echo "$t"; break; }; done
  done
}
stages=" ${RDK_STAGES:-single cluster} "
allow=() callow=()
if [[ "$stages" == *" single "* ]]; then
  mapfile -t allow < <(read_list "$HERE/ALLOWLIST")
  mapfile -t allow < <(select_names "${allow[@]}" -- "$@")
fi
if [[ "$stages" == *" cluster "* ]]; then
  mapfile -t callow < <(read_list "$HERE/ALLOWLIST.cluster")
  mapfile -t callow < <(select_names "${callow[@]}" -- "$@")
fi
mapfile -t nums < <(((${#allow[@]})) && printf '%s\n' "${allow[@]}" | cut -c1-4 | sort -u)
mapfile -t cnums < <(((${#callow[@]})) && printf '%s\n' "${callow[@]}" | cut -c1-4 | sort -u)

# --- run: one test-runner per test number, RDK_PARALLEL at a time ------------------
# Each runner works in its own directory $RDK_RUN_DIR/NNNN, with the paths the
# tests open relative to tests/ linked in: ../src/statistics_schema.json
# (0053) and ./fixtures. Numbers in RDK_FULL_NUMS run without -Q.
run_one() {
  local n="$1" d="$RDK_RUN_DIR/$1" rc=0 t0 flags=(-E -r)
  [[ " $RDK_FULL_NUMS " == *" $n "* ]] || flags=(-Q "${flags[@]}")
  mkdir -p "$d"
  ln -sfn "$T/fixtures" "$d/fixtures"
  t0=$(date +%s)
  (cd "$d" && RDKAFKA_TEST_CONF="$RDK_RUN_CONF" TEST_KAFKA_VERSION=4.1.0 TESTS="$n" \
    timeout --kill-after=10 "${RDK_TEST_TIMEOUT:-300}" "$T/test-runner" "${flags[@]}" >log 2>&1) || rc=$?
  echo "$rc" >"$d/rc"
  echo "librdkafka: $n done in $(($(date +%s) - t0))s (exit $rc)"
}
export -f run_one
export T
# run_numbers DIR CONF FULL PARALLEL NUMBER...
run_numbers() {
  local dir="$1" conf="$2" full="$3" par="$4"
  shift 4
  mkdir -p "$dir"
  ln -sfn "$B/src" "$dir/src"
  printf '%s\n' "$@" | RDK_RUN_DIR="$dir" RDK_RUN_CONF="$conf" RDK_FULL_NUMS="$full" \
    xargs -P "$par" -I{} bash -c 'run_one {}'
}

# --- results ---------------------------------------------------------------------------
# report DIR TITLE NAME...: prints one line per allow-listed name, writes "passed failed" to DIR/counts
report() {
python3 - "$@" <<'PY'
import glob, json, os, re, sys
work, title, allow = sys.argv[1], sys.argv[2], sys.argv[3:]
verbose = title.endswith("cluster")
states, logs, rcs = {}, {}, {}
ansi = re.compile(r"\x1b\[[0-9;]*m")
for d in sorted(glob.glob(os.path.join(work, "[0-9]*"))):
    n = os.path.basename(d)
    rcs[n] = open(os.path.join(d, "rc")).read().strip() if os.path.exists(os.path.join(d, "rc")) else "?"
    log = open(os.path.join(d, "log"), encoding="utf-8", errors="replace").read() if os.path.exists(os.path.join(d, "log")) else ""
    logs[n] = log = ansi.sub("", log)
    # The runner's own verdict lines (a crashed runner writes no JSON report).
    for m in re.finditer(r"={5,} Test (\S+) (PASSED|SKIPPED|FAILED)", log):
        if m.group(1).startswith(n):
            states[m.group(1)] = m.group(2)
    for m in re.finditer(r'### Test "(\S+)[^"]*" failed at', log):
        if m.group(1).startswith(n):
            states[m.group(1)] = "FAILED"
    for rep in glob.glob(os.path.join(d, "test_report_*.json")):
        try:
            for name, t in json.load(open(rep))["tests"].items():
                if name.startswith(n) and t.get("state") in ("PASSED", "FAILED") and states.get(name) != "FAILED":
                    states[name] = t["state"]
        except Exception as e:  # noqa: BLE001
            print(f"librdkafka: unreadable report {rep}: {e}")

def why(name):
    log = logs.get(name[:4], "")
    m = re.search(r'### Test "' + re.escape(name) + r'[^"]*" failed at ([^\n]*)\n([^\n]*)', log)
    if m:
        return f"{m.group(1).split(' at ')[0]}: {m.group(2).strip()}"
    st = states.get(name)
    if st is None:
        return f"no result (test-runner for {name[:4]} exited {rcs.get(name[:4])}: crash or timeout)"
    return f"state {st}"

passed = failed = 0
print(f"\n=== {title} ===")
for name in allow:
    st = states.get(name)
    if st == "PASSED":
        passed += 1
        print(f"PASS            {name}")
    elif st == "SKIPPED":
        print(f"SKIP            {name}")
    else:
        failed += 1
        print(f"FAIL            {name}: {why(name)}")
for name in sorted(states):
    if name not in allow and name[:4] in rcs and states[name] not in ("SKIPPED",):
        print(f"(not allow-listed, ran alongside) {states[name]:8} {name}" + (f": {why(name)}" if states[name] != "PASSED" else ""))
# The subtests (SUB_TEST) that started, passed, were skipped, per test number of this stage.
for n in sorted({a[:4] for a in allow}):
    started, ended = [], {}
    for line in logs.get(n, "").splitlines():
        m = re.search(r"s\] \[ (.+) \]\s*$", line)
        if not m:
            continue
        sub = m.group(1)
        if not re.match(r"[A-Za-z_]\w*:\d+", sub):
            continue  # a bracketed TEST_SAY of the test itself
        if re.search(r": PASS \([0-9.]+s\)$", sub):
            ended[re.sub(r": PASS \([0-9.]+s\)$", "", sub)] = "PASS"
        elif ": SKIP: " in sub:
            ended[sub.split(": SKIP: ")[0]] = "SKIP"
        else:
            started.append(sub)
    if verbose and not started and logs.get(n):
        # 0098 has no SUB_TESTs: its "Test N" sections, per producer
        print(f"  {n}: no subtests; its sections:")
        for line in logs.get(n, "").splitlines():
            # (under -Q test 5 runs without its heading: it follows the "Skipping" line)
            m = re.search(r"s\] (\[ Consumer transaction tests using \w+ producer|Test \d[\d.]*\b.*$|Skipping .*$)", line)
            if m:
                print(f"    {m.group(1).strip()}")
    if started:
        np = sum(1 for v in ended.values() if v == "PASS")
        print(f"  {n}: {len(started)} subtests started, {np} passed")
        if verbose:
            for sub in started:
                print(f"    {ended.get(sub, 'did not end'):12} {sub}")
with open(os.path.join(work, "counts"), "w") as fh:
    fh.write(f"{passed} {failed}\n")
PY
}

failed=0 passed=0
# --- stage 1: one broker -----------------------------------------------------------------
if ((${#allow[@]})); then
  if ! millrace_session librdkafka failed --set num.partitions=4; then
    summary 0 1
    exit 1
  fi
  cat >"$WORK/test.conf" <<CONF
metadata.broker.list=$MILLRACE_ADDR
test.timeout.multiplier=${RDK_TIMEOUT_MULTIPLIER:-2}
test.topic.random=true
CONF
  echo "librdkafka: $ver, broker pid $MILLRACE_PID at $MILLRACE_ADDR; ${#allow[@]} allow-listed tests in ${#nums[@]} test numbers"
  run_numbers "$WORK/t" "$WORK/test.conf" "" "${RDK_PARALLEL:-3}" "${nums[@]}"
  report "$WORK/t" "librdkafka tests" "${allow[@]}"
  read -r p f <"$WORK/t/counts" 2>/dev/null || { p=0; f=1; }
  passed=$((passed + p)) failed=$((failed + f))
  if ! millrace_alive; then
    echo "librdkafka: the broker is no longer running; stderr tail:" >&2
    tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
    failed=$((failed + 1))
  fi
  millrace_stop
else
  # No single-broker tests: the session's work dir and traps, without its broker.
  MILLRACE_SESSION_NAME=librdkafka MILLRACE_SESSION_FAILVAR=failed
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-librdkafka.XXXXXX")"
  trap millrace_session_end EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
fi

# --- stage 2: a 3-node cluster --------------------------------------------------------------
# The tests of ALLOWLIST.cluster create their topics with replication factor 3. The cluster
# (lib/millrace.sh millrace_cluster_start) gets what librdkafka's test clusters use
# (num.partitions=4, default.replication.factor=3) and group.initial.rebalance.delay.ms=0
# (Kafka's own config/server.properties; the reference shims set it too);
# transaction.state.log.replication.factor stays at its default 3 (min.isr 2).
# controlled.shutdown.enable=false: the three are stopped at once, and the last one's controlled
# shutdown would wait out its 10 s for a controller quorum that is gone.
# RDK_CLUSTER_BIN: the node binary (default MILLRACE_BIN; with MILLRACE_BIN=.../reference/
# kafka-shim.sh it is cluster-scenarios/kafka-cluster-shim.sh, Apache Kafka 4.4.0 nodes).
# 0098_consumer_txn also runs Kafka's Java TransactionProducerCli (tests/java): KAFKA_PATH is a
# directory of ours, bin/kafka-run-class.sh (plain `java -cp`) and libs/ with kafka-clients and
# its runtime jars (compat-tests/.work/kafka-ref/libs, else ~/.m2), compiled once with javac.
# RDK_CLUSTER_FULL: cluster test numbers to run without -Q (default none); RDK_CLUSTER_PARALLEL:
# test-runners at once in this stage (default 1; three brokers and the runners share the cores).
java_prep() { # java_prep DIR: KAFKA_PATH in DIR, classes compiled; non-zero with a reason on stderr
  local kp="$1" libs="" m2="${HOME}/.m2/repository" j
  command -v java >/dev/null && command -v javac >/dev/null || { echo "no java/javac" >&2; return 1; }
  mkdir -p "$kp/bin" "$kp/libs"
  if compgen -G "$ROOT/compat-tests/.work/kafka-ref/libs/kafka-clients-*.jar" >/dev/null; then
    libs="$ROOT/compat-tests/.work/kafka-ref/libs"
  else
    for j in "$m2"/org/apache/kafka/kafka-clients/4.1.1/kafka-clients-4.1.1.jar \
      "$m2"/org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar \
      "$m2"/org/lz4/lz4-java/*/lz4-java-*.jar "$m2"/org/xerial/snappy/snappy-java/*/snappy-java-*.jar \
      "$m2"/com/github/luben/zstd-jni/*/zstd-jni-*.jar; do
      [[ -f "$j" ]] && ln -sfn "$j" "$kp/libs/"
    done
    compgen -G "$kp/libs/kafka-clients-*.jar" >/dev/null ||
      { echo "no kafka-clients jar (compat-tests/.work/kafka-ref/libs or ~/.m2)" >&2; return 1; }
    libs="$kp/libs"
  fi
  [[ "$libs" == "$kp/libs" ]] || { rmdir "$kp/libs" && ln -sfn "$libs" "$kp/libs"; }
  cat >"$kp/bin/kafka-run-class.sh" <<'SH'
#!/usr/bin/env bash
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m -cp "$CLASSPATH:$(dirname "$0")/../libs/*" "$@"
SH
  chmod +x "$kp/bin/kafka-run-class.sh"
  (cd "$T/java" && KAFKA_PATH="$kp" make -s TransactionProducerCli.class) >&2 ||
    { echo "javac TransactionProducerCli failed" >&2; return 1; }
}

if ((${#callow[@]})); then
  cbin="${RDK_CLUSTER_BIN:-}"
  if [[ -z "$cbin" ]]; then
    cbin="$(millrace_bin)" || cbin=""
    [[ "$cbin" != */reference/kafka-shim.sh ]] || cbin="$ROOT/compat-tests/cluster-scenarios/kafka-cluster-shim.sh"
  fi
  if [[ "$cbin" == *kafka-cluster-shim.sh ]]; then : "${MILLRACE_CLUSTER_START_TIMEOUT:=240}"; export MILLRACE_CLUSTER_START_TIMEOUT; fi
  ct0=$(date +%s)
  if [[ -z "$cbin" ]] || ! MILLRACE_BIN="$cbin" millrace_cluster_start 3 "$WORK/cluster" --set num.partitions=4 \
    --set default.replication.factor=3 --set group.initial.rebalance.delay.ms=0 \
    --set controlled.shutdown.enable=false; then
    echo "librdkafka: the 3-node cluster did not start" >&2
    failed=$((failed + ${#callow[@]}))
  else
    cpids=("${MILLRACE_CLUSTER_PIDS[@]:1}") cerr_from=()
    for ((i = 1; i <= 3; i++)); do cerr_from[i]="$(wc -l <"$WORK/cluster/node$i/stderr.log")"; done
    echo "librdkafka: 3-node cluster ($cbin) pids ${cpids[*]} at $MILLRACE_CLUSTER_BOOTSTRAP, ready in $(($(date +%s) - ct0))s; ${#callow[@]} allow-listed tests in ${#cnums[@]} test numbers"
    cat >"$WORK/test-cluster.conf" <<CONF
metadata.broker.list=$MILLRACE_CLUSTER_BOOTSTRAP
test.timeout.multiplier=${RDK_TIMEOUT_MULTIPLIER:-2}
test.topic.random=true
CONF
    mkdir -p "$WORK/tc"
    if [[ " ${cnums[*]} " == *" 0098 "* ]]; then
      # test_run_java(): `make -s java` in the current directory, then java/run-class.sh.
      if java_prep "$WORK/kafka-path"; then
        mkdir -p "$WORK/tc/0098"
        ln -sfn "$T/java" "$WORK/tc/0098/java"
        printf 'java:\n\t@$(MAKE) -s -C java TransactionProducerCli.class\n' >"$WORK/tc/0098/Makefile"
        export KAFKA_PATH="$WORK/kafka-path"
      else
        echo "librdkafka: 0098's Java producer cannot run (see above); 0098 will fail" >&2
      fi
    fi
    run_numbers "$WORK/tc" "$WORK/test-cluster.conf" "${RDK_CLUSTER_FULL:-}" "${RDK_CLUSTER_PARALLEL:-1}" "${cnums[@]}"
    report "$WORK/tc" "librdkafka tests on a 3-node cluster" "${callow[@]}"
    read -r p f <"$WORK/tc/counts" 2>/dev/null || { p=0; f=1; }
    passed=$((passed + p)) failed=$((failed + f))
    for ((i = 1; i <= 3; i++)); do
      if ! millrace_pid_running "${MILLRACE_CLUSTER_PIDS[i]}"; then
        echo "librdkafka: cluster node $i is no longer running; stderr tail:" >&2
        tail -n 20 "$WORK/cluster/node$i/stderr.log" >&2 || true
        failed=$((failed + 1))
      fi
    done
    # WARN/ERROR lines the nodes logged after they were ready (the election at start-up logs some).
    for ((i = 1; i <= 3; i++)); do
      tail -n "+$((${cerr_from[i]:-0} + 1))" "$WORK/cluster/node$i/stderr.log" 2>/dev/null |
        grep -E ' (WARN|ERROR) ' | sed "s/^/node $i: /" | head -n 10 || true
    done
  fi
  st0=$(date +%s)
  millrace_cluster_stop
  echo "librdkafka: cluster stage took $(($(date +%s) - ct0))s (stop $(($(date +%s) - st0))s)"
fi

summary "$passed" "$failed"
[[ $failed -eq 0 ]]
