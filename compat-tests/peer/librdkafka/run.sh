#!/usr/bin/env bash
# librdkafka's own tests/ (test-runner) against one Millrace broker.
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
# Then every test number that ALLOWLIST names runs in its own test-runner
# process (-Q quick, -E no sockem, -r JSON report), a few at a time, against
# a broker started with --set num.partitions=4 (what librdkafka's test
# clusters use), with tests/test.conf = metadata.broker.list=<broker> and
# TEST_KAFKA_VERSION=4.1.0. Tests that share a number with an allow-listed
# test also run (the runner selects by number); they are printed but not
# counted.
#
# Env: MILLRACE_BIN, RDKAFKA_SRC, RDK_PARALLEL (processes at once, default 3),
#      RDK_TEST_TIMEOUT (seconds per test number, default 300),
#      RDK_TIMEOUT_MULTIPLIER (test.timeout.multiplier, default 2),
#      KEEP_WORK=1.
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

# --- allow-list ----------------------------------------------------------------
mapfile -t allow < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/ALLOWLIST" | grep -v '^$')
if (($#)); then
  sel=()
  for t in "${allow[@]}"; do
    for f in "$@"; do [[ "$t" == *"$f"* ]] && { sel+=("$t"); break; }; done
  done
  allow=("${sel[@]}")
fi
mapfile -t nums < <(printf '%s\n' "${allow[@]}" | cut -c1-4 | sort -u)

# --- broker ----------------------------------------------------------------------
failed=0
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

# --- run: one test-runner per test number, RDK_PARALLEL at a time ------------------
# Each runner works in its own directory $WORK/t/NNNN, with the paths the
# tests open relative to tests/ linked in: ../src/statistics_schema.json
# (0053) and ./fixtures.
mkdir -p "$WORK/t"
ln -s "$B/src" "$WORK/t/src"
run_one() {
  local n="$1" d="$WORK/t/$1" rc=0 t0
  mkdir -p "$d"
  ln -s "$T/fixtures" "$d/fixtures"
  t0=$(date +%s)
  (cd "$d" && RDKAFKA_TEST_CONF="$WORK/test.conf" TEST_KAFKA_VERSION=4.1.0 TESTS="$n" \
    timeout --kill-after=10 "${RDK_TEST_TIMEOUT:-300}" "$T/test-runner" -Q -E -r >log 2>&1) || rc=$?
  echo "$rc" >"$d/rc"
  echo "librdkafka: $n done in $(($(date +%s) - t0))s (exit $rc)"
}
export -f run_one
export WORK T
printf '%s\n' "${nums[@]}" | xargs -P "${RDK_PARALLEL:-3}" -I{} bash -c 'run_one {}'

# --- results ---------------------------------------------------------------------------
python3 - "$WORK" "${allow[@]}" <<'PY'
import glob, json, os, re, sys
work, allow = sys.argv[1], sys.argv[2:]
states, logs, rcs = {}, {}, {}
ansi = re.compile(r"\x1b\[[0-9;]*m")
for d in sorted(glob.glob(os.path.join(work, "t", "[0-9]*"))):
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
print("\n=== librdkafka tests ===")
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
with open(os.path.join(work, "counts"), "w") as fh:
    fh.write(f"{passed} {failed}\n")
PY
read -r passed failed <"$WORK/counts" 2>/dev/null || { passed=0; failed=1; }
if ! millrace_alive; then
  echo "librdkafka: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
  failed=$((failed + 1))
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
