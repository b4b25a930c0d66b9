#!/usr/bin/env bash
# librdkafka's own tests/ (test-runner) over SASL_SSL with SCRAM against one Millrace broker
# (issue 16): its SASL/SSL tests that apply to one broker without Kafka's scripts, and a subset of
# ../librdkafka/ALLOWLIST (produce, consume, metadata, groups) again over TLS + SCRAM.
#
#   compat-tests/peer/librdkafka-sasl/run.sh [allow-list-entry-substring ...]
#
# Build: the same librdkafka source as ../librdkafka/run.sh (rdkafka-sys's bundled copy,
# RDKAFKA_SRC, or apt-get source), built once with SSL (--enable-ssl: OpenSSL, SCRAM, OAUTHBEARER
# builtin) into compat-tests/peer/.cache/librdkafka-VERSION-ssl (gitignored); the sibling suites'
# build has no SSL.
#
# Broker: --listen 127.0.0.1:0 (PLAINTEXT, only for creating the users) and
# listeners=SASL_SSL://127.0.0.1:P with sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
# (PLAIN's one user, alice, from listener.name.sasl_ssl.plain.sasl.jaas.config), a PEM keystore
# from ../../python/tls_material.py (a throwaway CA), num.partitions=4 (as the sibling),
# group.initial.rebalance.delay.ms=0 (as reference/kafka-shim.sh gives Kafka; Millrace's default
# 3000 adds 3 s to every first join) and connections.max.reauth.ms=RDK_REAUTH_MS (default 10000:
# 0142_reauthentication needs a non-zero value; every connection that lives longer than that
# re-authenticates, KIP-368). SCRAM users, created over PLAINTEXT with AlterUserScramCredentials
# (scram_users.py, which then waits until each logs in over SASL_SSL): alice SCRAM-SHA-256, bob
# SCRAM-SHA-512.
#
# Clients: tests/test.conf has metadata.broker.list=127.0.0.1:P, security.protocol=SASL_SSL,
# sasl.mechanisms=SCRAM-SHA-256 as alice (an entry tagged SCRAM-SHA-512: bob; PLAIN: alice),
# ssl.ca.location (the CA) and ssl.certificate.location/ssl.key.location/ssl.key.password (a client
# certificate; the broker does not ask for one). The SSL_* variables trivup would set (the client key
# and certificate as PEM, DER and PKCS#12, the CA as PEM and DER) are exported for 0097_ssl_verify,
# which needs both; it is left out of ALLOWLIST (FINDINGS.md F1) but runs once added there.
#
# ALLOWLIST lines: NAME or NAME/SUBTEST (only the subtests whose name contains SUBTEST run, through
# the runner's SUBTESTS variable, and at least one must pass), then optionally SCRAM-SHA-512 or
# PLAIN. Each distinct (test number, SUBTEST, mechanism) runs in its own test-runner process (-E no
# sockem, -r JSON report, and -Q quick mode except for the numbers in FULL_MODE), RDK_PARALLEL at a
# time, in ALLOWLIST order. An allow-listed test that skips itself counts as failed here (a skip
# means the SASL/SSL set-up did not reach it), and so does one that passes in 0.000 s (under -Q a
# test made only of non-quick subtests runs nothing). Tests that share a number with an
# allow-listed test also run; they are printed but not counted.
#
# Env: MILLRACE_BIN, MILLRACE_START_TIMEOUT, RDKAFKA_SRC, RDK_PARALLEL (default 3),
#      RDK_TEST_TIMEOUT (seconds per runner, default 300), RDK_TIMEOUT_MULTIPLIER (default 2),
#      RDK_REAUTH_MS (default 10000), RDK_DEBUG (librdkafka's debug= for every client, e.g.
#      broker,security,protocol), KEEP_WORK=1 (kept anyway on failure).
# Last line printed: "N passed, M failed" (allow-listed entries only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

CACHE="$(mkdir -p "$HERE/../.cache" && cd "$HERE/../.cache" && pwd)"
summary() { echo "$1 passed, $2 failed"; }
# Test numbers whose subtests are all SUB_TEST (not SUB_TEST_QUICK): -Q would skip every one.
FULL_MODE=(0142)
P12_PASSWORD="millrace-peer-p12"
PLAIN_JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'

# --- source (as ../librdkafka/run.sh) --------------------------------------------------------
src="${RDKAFKA_SRC:-}"
if [[ -z "$src" ]]; then
  shopt -s nullglob
  found=("${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka)
  shopt -u nullglob
  ((${#found[@]} == 0)) || src="$(printf '%s\n' "${found[@]}" | sort -V | tail -n1)"
fi
if [[ -n "$src" && -f "$src/configure" ]]; then
  ver="$(sed -nE 's/^#define RD_KAFKA_VERSION +0x([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2}).*/\1 \2 \3/p' "$src/src/rdkafka.h" |
    { read -r a b c; echo "$((16#$a)).$((16#$b)).$((16#$c))"; })"
else
  src=""
  ver="debian"
fi
B="$CACHE/librdkafka-$ver-ssl"

# --- build with SSL (cached) -------------------------------------------------------------------
if [[ ! -x "$B/tests/test-runner" || ! -f "$B/.complete" ]]; then
  rm -rf "$B.tmp" && mkdir -p "$B.tmp"
  if [[ -n "$src" ]]; then
    echo "librdkafka-sasl: building $ver with SSL from $src"
    cp -r "$src/." "$B.tmp/"
  else
    echo "librdkafka-sasl: no rdkafka-sys source; apt-get source librdkafka"
    if ! grep -rqs '^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/ &&
      ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/; then
      sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    fi
    (cd "$B.tmp" && timeout 300 apt-get update -qq && timeout 600 apt-get source -qq librdkafka) >&2 || {
      echo "librdkafka-sasl: apt-get source failed" >&2; summary 0 1; exit 1; }
    found=("$B.tmp"/librdkafka-*/)
    mv "${found[0]}" "$B.src" && rm -rf "$B.tmp" && mv "$B.src" "$B.tmp"
  fi
  need=()
  pkg-config --exists openssl 2>/dev/null || need+=(libssl-dev)
  pkg-config --exists libzstd 2>/dev/null || need+=(libzstd-dev)
  [[ -f /usr/include/rapidjson/rapidjson.h ]] || need+=(rapidjson-dev)
  if ((${#need[@]})); then
    echo "librdkafka-sasl: apt-get install ${need[*]}"
    { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need[@]}"; } >&2 || true
  fi
  # (The log must not be called configure.*: mklove loads ./configure.NAME files as modules.)
  blog="$CACHE/librdkafka-$ver-ssl.build.log"
  t0=$(date +%s)
  if ! (cd "$B.tmp" &&
    ./configure --enable-ssl --disable-gssapi --disable-curl --enable-zstd --enable-zlib >"$blog" 2>&1 &&
    grep -q '^#define WITH_SSL 1' config.h && grep -q '^#define WITH_SASL_SCRAM 1' config.h &&
    timeout 1200 make -j"$(nproc)" -C src >>"$blog" 2>&1 &&
    timeout 1200 make -j"$(nproc)" -C src-cpp >>"$blog" 2>&1 &&
    timeout 1800 make -j"$(nproc)" -C tests build >>"$blog" 2>&1); then
    echo "librdkafka-sasl: build failed (or configured without SSL/SCRAM); tail of $blog:" >&2
    tail -n 20 "$blog" >&2 || true
    summary 0 1
    exit 1
  fi
  rm -rf "$B" && mv "$B.tmp" "$B" && touch "$B/.complete"
  echo "librdkafka-sasl: built in $(($(date +%s) - t0))s"
fi
T="$B/tests"
export LD_LIBRARY_PATH="$B/src:$B/src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- allow-list: entries "NAME[/SUBTEST] [SCRAM-SHA-512]" -> runner units ------------------------
mapfile -t lines < <(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$HERE/ALLOWLIST" | grep -v '^$')
allow=()
for l in "${lines[@]}"; do
  read -r name mech extra <<<"$l"
  mech="${mech:-SCRAM-SHA-256}"
  if [[ -n "${extra:-}" || ! "$name" =~ ^[0-9]{4}_[A-Za-z0-9_]+(/[A-Za-z0-9_:]+)?$ ||
    ! "$mech" =~ ^(SCRAM-SHA-256|SCRAM-SHA-512|PLAIN)$ ]]; then
    echo "librdkafka-sasl: bad ALLOWLIST line: $l" >&2
    summary 0 1
    exit 1
  fi
  allow+=("$name $mech")
done
if (($#)); then
  sel=()
  for t in "${allow[@]}"; do
    for f in "$@"; do [[ "$t" == *"$f"* ]] && { sel+=("$t"); break; }; done
  done
  allow=("${sel[@]}")
fi
# unit id: NNNN~SUBTEST~MECH (a directory name); in ALLOWLIST order, once each
units=()
for t in "${allow[@]}"; do
  read -r name mech <<<"$t"
  sub=""
  [[ "$name" == */* ]] && sub="${name#*/}"
  u="${name:0:4}~$sub~$mech"
  [[ " ${units[*]} " == *" $u "* ]] || units+=("$u")
done

# --- work dir, TLS material, broker ----------------------------------------------------------------
failed=0
WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-librdkafka-sasl.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -ne 0 ]]; then
    echo "librdkafka-sasl: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

M="$WORK/tls"
if ! { timeout 120 python3 "$ROOT/compat-tests/python/tls_material.py" "$M" &&
  timeout 30 openssl x509 -in "$M/client-cert.pem" -outform DER -out "$M/client-cert.der" &&
  timeout 30 openssl pkey -in "$M/client-key.pem" -outform DER -out "$M/client-key.der" &&
  timeout 30 openssl x509 -in "$M/ca.pem" -outform DER -out "$M/ca.der" &&
  timeout 30 openssl pkcs12 -export -in "$M/client-cert.pem" -inkey "$M/client-key.pem" \
    -certfile "$M/ca.pem" -passout "pass:$P12_PASSWORD" -out "$M/client.p12"; } >"$WORK/material.log" 2>&1; then
  echo "librdkafka-sasl: making the TLS material failed:" >&2
  tail -n 20 "$WORK/material.log" >&2 || true
  failed=1
  summary 0 1
  exit 1
fi

SASL_PORT="$(millrace_free_ports 1)"
if ! millrace_start "$WORK/broker" --set num.partitions=4 \
  --set "listeners=SASL_SSL://127.0.0.1:$SASL_PORT" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL" \
  --set sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN \
  --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$PLAIN_JAAS" \
  --set ssl.keystore.type=PEM --set "ssl.keystore.location=$M/server.pem" \
  --set "connections.max.reauth.ms=${RDK_REAUTH_MS:-10000}" \
  --set group.initial.rebalance.delay.ms=0; then
  failed=1
  summary 0 1
  exit 1
fi
if ! timeout 90 python3 "$HERE/scram_users.py" --admin "$MILLRACE_ADDR" --login "127.0.0.1:$SASL_PORT" \
  --tls "$M/ca.pem" --timeout 60 alice:alice-secret:SCRAM-SHA-256 bob:bob-secret:SCRAM-SHA-512:16384; then
  echo "librdkafka-sasl: the SCRAM users could not be created or cannot log in over SASL_SSL" >&2
  failed=1
  summary 0 1
  exit 1
fi

for mech in SCRAM-SHA-256 SCRAM-SHA-512 PLAIN; do
  user=alice
  [[ $mech == SCRAM-SHA-512 ]] && user=bob
  cat >"$WORK/test-$mech.conf" <<CONF
metadata.broker.list=127.0.0.1:$SASL_PORT
security.protocol=SASL_SSL
sasl.mechanisms=$mech
sasl.username=$user
sasl.password=$user-secret
ssl.ca.location=$M/ca.pem
ssl.certificate.location=$M/client-cert.pem
ssl.key.location=$M/client-key.pem
ssl.key.password=$P12_PASSWORD
test.timeout.multiplier=${RDK_TIMEOUT_MULTIPLIER:-2}
test.topic.random=true
${RDK_DEBUG:+debug=$RDK_DEBUG}
CONF
done
# What trivup exports for 0097_ssl_verify (tests/README.md, "SSL_*").
export SSL_pkcs="$M/client.p12" SSL_password="$P12_PASSWORD" SSL_client_auth=none \
  SSL_pub_pem="$M/client-cert.pem" SSL_pub_der="$M/client-cert.der" \
  SSL_priv_pem="$M/client-key.pem" SSL_priv_der="$M/client-key.der" \
  SSL_ca_der="$M/ca.der" SSL_all_cas_pem="$M/ca.pem"
echo "librdkafka-sasl: $ver with SSL, broker pid $MILLRACE_PID, PLAINTEXT $MILLRACE_ADDR, SASL_SSL 127.0.0.1:$SASL_PORT (SCRAM-SHA-256/512, PLAIN; connections.max.reauth.ms=${RDK_REAUTH_MS:-10000}); ${#allow[@]} allow-listed entries in ${#units[@]} runs"

# --- run: one test-runner per unit, RDK_PARALLEL at a time -----------------------------------------
mkdir -p "$WORK/t"
ln -s "$B/src" "$WORK/t/src"
run_unit() {
  local u="$1" d="$WORK/t/$1" rc=0 t0 n sub mech
  IFS='~' read -r n sub mech <<<"$u"
  local flags=(-E -r)
  [[ " $FULL_MODE_S " == *" $n "* ]] || flags=(-Q "${flags[@]}")
  mkdir -p "$d"
  ln -s "$T/fixtures" "$d/fixtures"
  t0=$(date +%s)
  local envs=(RDKAFKA_TEST_CONF="$WORK/test-$mech.conf" TEST_KAFKA_VERSION=4.1.0 TESTS="$n")
  [[ -z "$sub" ]] || envs+=(SUBTESTS="$sub")
  (cd "$d" && env "${envs[@]}" \
    timeout --kill-after=10 "${RDK_TEST_TIMEOUT:-300}" "$T/test-runner" "${flags[@]}" >log 2>&1) || rc=$?
  echo "$rc" >"$d/rc"
  echo "librdkafka-sasl: $n${sub:+ /$sub} ($mech) done in $(($(date +%s) - t0))s (exit $rc)"
}
export -f run_unit
FULL_MODE_S="${FULL_MODE[*]}"
export WORK T FULL_MODE_S
# shellcheck disable=SC2016 # $1 is the inner shell's argument
printf '%s\n' "${units[@]}" | xargs -P "${RDK_PARALLEL:-3}" -I{} bash -c 'run_unit "$1"' _ {}

# --- results ------------------------------------------------------------------------------------------
python3 - "$WORK" "${allow[@]}" <<'PY'
import glob, json, os, re, sys
work, allow = sys.argv[1], sys.argv[2:]
ansi = re.compile(r"\x1b\[[0-9;]*m")
units = {}  # unit id -> (states, log, rc)
for d in sorted(glob.glob(os.path.join(work, "t", "[0-9]*"))):
    u = os.path.basename(d)
    n = u[:4]
    rcf, logf = os.path.join(d, "rc"), os.path.join(d, "log")
    rc = open(rcf).read().strip() if os.path.exists(rcf) else "?"
    log = ansi.sub("", open(logf, encoding="utf-8", errors="replace").read()) if os.path.exists(logf) else ""
    states = {}
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
            print(f"librdkafka-sasl: unreadable report {rep}: {e}")
    units[u] = (states, log, rc)

def verdict(name, mech):
    test, _, sub = name.partition("/")
    u = f"{test[:4]}~{sub}~{mech}"
    if u not in units:
        return "FAIL", "not run"
    states, log, rc = units[u]
    st = states.get(test)
    if st is None:
        return "FAIL", f"no result (test-runner exited {rc}: crash or timeout)"
    if st == "FAILED":
        m = re.search(r'### Test "' + re.escape(test) + r'[^"]*" failed at ([^\n]*)\n([^\n]*)', log)
        return "FAIL", (f"{m.group(1).split(' at ')[0]}: {m.group(2).strip()}" if m else "state FAILED")
    if st == "SKIPPED":
        m = re.search(r"SKIPPING TEST: ([^\n]*)", log)
        return "FAIL", "skipped itself" + (f": {m.group(1).strip()}" if m else "")
    if sub:
        # SUB_TEST lines: "[ func:line: what: PASS (1.23s) ]" / "... SKIP: reason ]"
        ran = [m.group(1) for m in re.finditer(r"\[ (\S*" + re.escape(sub) + r"[^\n]*?): PASS \(", log)]
        skipped = re.findall(r"\[ \S*" + re.escape(sub) + r"[^\n]*?: SKIP", log)
        if not ran:
            return "FAIL", "no subtest matching " + sub + " passed" + (" (skipped)" if skipped else "")
        if skipped:
            return "FAIL", f"a subtest matching {sub} skipped itself"
        return "PASS", f"{len(ran)} subtest(s): " + "; ".join(r.split(": ", 1)[-1] for r in ran)
    # The runner's summary table: "| NAME | PASSED | 0.000s |". A test whose subtests are all
    # SUB_TEST (not SUB_TEST_QUICK) runs none of them under -Q and passes in no time.
    m = re.search(r"^\| " + re.escape(test) + r" +\| +PASSED +\| +([0-9.]+)s", log, re.M)
    if m and float(m.group(1)) < 0.001:
        return "FAIL", f"passed in {m.group(1)}s: ran nothing (-Q skips its non-quick subtests)"
    return "PASS", ""

passed = failed = 0
print("\n=== librdkafka tests over SASL_SSL ===")
for entry in allow:
    name, mech = entry.split(" ")
    v, why = verdict(name, mech)
    label = name + ("" if mech == "SCRAM-SHA-256" else f" ({mech})")
    if v == "PASS":
        passed += 1
    else:
        failed += 1
    print(f"{v:15} {label}" + (f": {why}" if why else ""))
counted = {e.split(" ")[0].split("/")[0] for e in allow}
for u, (states, _, _) in sorted(units.items()):
    for name in sorted(states):
        if name not in counted and states[name] != "SKIPPED":
            print(f"(not allow-listed, ran alongside) {states[name]:8} {name}")
with open(os.path.join(work, "counts"), "w") as fh:
    fh.write(f"{passed} {failed}\n")
PY
read -r passed failed <"$WORK/counts" 2>/dev/null || { passed=0; failed=1; }
if ! millrace_alive; then
  echo "librdkafka-sasl: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
  failed=$((failed + 1))
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
