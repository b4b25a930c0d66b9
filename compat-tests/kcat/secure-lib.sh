# shellcheck shell=bash disable=SC2034  # KCAT, PORT1, SASL_PORT, ... are read by the scripts that source this
# Shared by tls.sh, sasl.sh and scram.sh (source it after lib/millrace.sh, or java/common.sh, which
# sources that): one broker of the script's own with two listeners beside PLAINTEXT (--listen),
# throwaway certificates from python/tls_material.py, and kcat checks against it.
#
#   secure_init SUITE          counters, pass/fail/summary ("PASS  SUITE: CHECK (...)", last line
#                              "N passed, M failed"), a work dir in WORK kept on failure or with
#                              KEEP_WORK, EXIT/INT/TERM traps that stop the broker
#   secure_material            the certificates in M ($WORK/tls)
#   secure_start L1 L2 --set name=value ...
#                              the broker with listeners L1 and L2 on free ports PORT1 and PORT2
#   secure_start_sasl --set name=value ...
#                              the same with SASL_PLAINTEXT (SASL_PORT) and SASL_SSL (SASL_SSL_PORT,
#                              key store $M/server.pem)
#   kc, metadata_names, metadata_check, roundtrip, refused, still_served: the checks (see each)
#   secure_finish              the broker is still alive; the summary; the script's exit status
#
# Env: KCAT (default kcat), KCAT_TIMEOUT (seconds per kcat call, default 60), KEEP_WORK.

KCAT="${KCAT:-kcat}"
LINES=1000 # lines per round trip
REFUSE_S=5 # metadata timeout (-m) of a client that must be refused
KC_LIBDIR="" # put first on kcat's library path (scram.sh: a newer librdkafka)

# secure_init SUITE: see above
secure_init() {
  SUITE="$1"
  passed=0
  failed=0
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-kcat-$SUITE.XXXXXX")"
  trap secure_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

pass() { passed=$((passed + 1)); echo "PASS  $SUITE: $1"; }
# fail CHECK WHY [LOG]: a failed check, with the tail of LOG when it is not empty
fail() {
  failed=$((failed + 1))
  echo "FAIL  $SUITE: $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then tail -n 15 "$3" | sed 's/^/      /'; fi
}
summary() { echo "$passed passed, $failed failed"; }
# give_up CHECK WHY [LOG]: fail, the summary and exit 1 (nothing after CHECK can run)
give_up() {
  fail "$@"
  summary
  exit 1
}

secure_cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then
    echo "$SUITE: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}

secure_material() {
  M="$WORK/tls"
  if ! timeout 120 python3 "$MILLRACE_REPO_ROOT/compat-tests/python/tls_material.py" "$M" 2>"$WORK/material.err"; then
    give_up "material" "making the certificates with openssl failed" "$WORK/material.err"
  fi
}

# secure_start L1 L2 [--set name=value ...]: see above
secure_start() {
  local l1="$1" l2="$2" ports
  shift 2
  mapfile -t ports < <(millrace_free_ports 2)
  PORT1="${ports[0]}" PORT2="${ports[1]}"
  if ! millrace_start "$WORK/broker" --set "listeners=$l1://127.0.0.1:$PORT1,$l2://127.0.0.1:$PORT2" "$@"; then
    give_up "broker-start" "the broker with $l1 and $l2 listeners did not start" "$WORK/broker/broker.stderr"
  fi
  echo "$SUITE: broker pid $MILLRACE_PID, PLAINTEXT $MILLRACE_ADDR, $l1 127.0.0.1:$PORT1, $l2 127.0.0.1:$PORT2"
}

# secure_start_sasl [--set name=value ...]: see above
secure_start_sasl() {
  secure_start SASL_PLAINTEXT SASL_SSL \
    --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL" \
    --set ssl.keystore.type=PEM --set "ssl.keystore.location=$M/server.pem" "$@"
  SASL_PORT="$PORT1" SASL_SSL_PORT="$PORT2"
}

# kc ADDR ARGS... : kcat against ADDR, bounded
kc() {
  local addr="$1"
  shift
  timeout --kill-after=5 "${KCAT_TIMEOUT:-60}" env ${KC_LIBDIR:+LD_LIBRARY_PATH="$KC_LIBDIR"} "$KCAT" -b "$addr" "$@"
}

# metadata_names NAME ADDR PORT OPTS... : kcat -L -J through ADDR lists exactly one broker, 127.0.0.1:PORT
metadata_names() {
  local name="$1" addr="$2" port="$3"
  shift 3
  if kc "$addr" "$@" -L -J >"$WORK/$name.json" 2>"$WORK/$name.err" &&
    python3 - "$WORK/$name.json" "$port" <<'PY'; then
import json, sys
md = json.load(open(sys.argv[1]))
assert [b["name"] for b in md["brokers"]] == [f"127.0.0.1:{sys.argv[2]}"], md["brokers"]
PY
    return 0
  fi
  return 1
}

# metadata_check NAME LISTENER WHO PORT OPTS... : check NAME, metadata_names over LISTENER
# (127.0.0.1:PORT) as WHO ("as alice", or nothing)
metadata_check() {
  local name="$1" listener="$2" who="$3" port="$4"
  shift 4
  if metadata_names "$name" "127.0.0.1:$port" "$port" "$@"; then
    pass "$name (kcat -L ${who:+$who }over $listener names 127.0.0.1:$port)"
  else
    fail "$name" "kcat -L -J over $listener must list only 127.0.0.1:$port" "$WORK/$name.err"
  fi
}

# roundtrip NAME ADDR OPTS... : LINES distinct lines through kcat -P and back with kcat -C -e
roundtrip() {
  local name="$1" addr="$2"
  shift 2
  local topic="kcat-$SUITE-$name-$RANDOM$RANDOM"
  awk -v n="$LINES" -v c="$name" -v over="${SUITE^^}" 'BEGIN { for (i = 0; i < n; i++) printf "%s line %05d over %s\n", c, i, over }' >"$WORK/$name.in"
  if ! kc "$addr" "$@" -P -t "$topic" <"$WORK/$name.in" 2>"$WORK/$name.produce.err"; then
    fail "$name-roundtrip" "kcat -P exited non-zero" "$WORK/$name.produce.err"
  elif ! kc "$addr" "$@" -C -t "$topic" -o beginning -e >"$WORK/$name.out" 2>"$WORK/$name.consume.err"; then
    fail "$name-roundtrip" "kcat -C -e exited non-zero (or timed out)" "$WORK/$name.consume.err"
  elif ! cmp -s "$WORK/$name.in" "$WORK/$name.out"; then
    fail "$name-roundtrip" "read back $(wc -l <"$WORK/$name.out") lines, not the $LINES produced ($(cmp "$WORK/$name.in" "$WORK/$name.out" 2>&1 | head -n1))"
  else
    pass "$name-roundtrip ($LINES lines byte-identical)"
  fi
}

# refused NAME KC ADDR ACCEPTED WANT OPTS... : kcat -L through ADDR (run by function KC: kc, or
# one like it) gets no metadata within REFUSE_S seconds and exits non-zero by itself, with
# librdkafka's transport failure (what Apache Kafka 4.1.1 gives) and, WANT not empty, WANT (a
# fixed string) in librdkafka's log. ACCEPTED: the failure when it gets metadata.
refused() {
  local name="$1" kcf="$2" addr="$3" accepted="$4" want="$5" rc=0 t0 took
  shift 5
  t0=$(date +%s)
  "$kcf" "$addr" "$@" -m "$REFUSE_S" -L >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  took=$(($(date +%s) - t0))
  if [[ $rc -eq 0 ]]; then
    fail "$name" "$accepted" "$WORK/$name.out"
  elif [[ $rc -ge 124 ]]; then
    fail "$name" "kcat -L did not end by itself (exit $rc after ${took}s)" "$WORK/$name.err"
  elif ! grep -q "Failed to acquire metadata: Local: Broker transport failure" "$WORK/$name.err"; then
    fail "$name" "kcat -L exited $rc without librdkafka's 'Broker transport failure'" "$WORK/$name.err"
  elif [[ -n $want ]] && ! grep -qF "$want" "$WORK/$name.err"; then
    fail "$name" "no '$want' in librdkafka's log" "$WORK/$name.err"
  else
    if [[ -z $want ]]; then # what librdkafka saw: a TLS alert, or the connection closed
      want="$(grep -oE 'alert [a-z ]+: SSL alert number [0-9]+|Disconnected[^(]*' "$WORK/$name.err" | head -n1 || true)"
    fi
    pass "$name (exit $rc after ${took}s: ${want:-transport failure})"
  fi
}

# still_served CHECK WHAT LISTENER... : after the refusals, PLAINTEXT and each LISTENER ("NAME
# PORT OPTS", OPTS the name of an array of kcat options) pass metadata_names: one PASS "CHECK
# (WHAT)", or a FAIL of CHECK for each listener that does not. CHECK ends in "refusal" or
# "refusals", as the failures say.
still_served() {
  local check="$1" what="$2" ok=1 spec lname lport lopts
  shift 2
  for spec in "PLAINTEXT $MILLRACE_PORT" "$@"; do
    read -r lname lport lopts <<<"$spec"
    if ! listener_served "$lname" "$lport" "$lopts"; then
      fail "$check" "kcat -L over $lname failed after the ${check##*-}" "$WORK/after-$lname.err"
      ok=0
    fi
  done
  if ((ok)); then pass "$check ($what)"; fi
}

# listener_served NAME PORT OPTS: metadata_names after-NAME over 127.0.0.1:PORT with the kcat
# options in the array named OPTS (none when empty)
listener_served() {
  local opts=()
  if [[ -n $3 ]]; then
    local -n given="$3"
    opts=("${given[@]}")
  fi
  metadata_names "after-$1" "127.0.0.1:$2" "$2" "${opts[@]+"${opts[@]}"}"
}

# secure_finish: see above (call it last)
secure_finish() {
  if ! millrace_alive; then
    fail "broker-alive" "the broker died during the run" "$WORK/broker/broker.stderr"
  fi
  summary
  [[ $failed -eq 0 ]]
}
