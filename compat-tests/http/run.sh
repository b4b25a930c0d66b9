#!/usr/bin/env bash
# The HTTP API (REST Proxy v2 and v3, stateless consumers) against one Millrace broker with
# --http-listen: every case script in cases/ (curl requests as Confluent's and Redpanda's
# documentation shows them, cross-checks with a Kafka client), then schemathesis against
# Millrace's OpenAPI document for v3 (docs/http-v3.openapi.yaml). Cases that need a cluster or
# a restart start their own brokers (cases/cluster-*.sh).
#
#   compat-tests/http/run.sh [case ...]        e.g. run.sh v2-produce
#
# Env: MILLRACE_BIN, PYTHON (venv interpreter, default python3), KEEP_WORK=1 keeps the work dir,
#      HTTP_TIMEOUT (seconds per curl call, default 30), SCHEMATHESIS_MAX_EXAMPLES (default 20),
#      SCHEMATHESIS_SEED (default 1; the checks are chosen in schemathesis.toml).
# Last line printed: "N passed, M failed" and the suite's time.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

started=$(date +%s)
failed=0
summary() {
  local p f
  p="$(grep -c '^pass$' "$RESULTS" 2>/dev/null || true)"
  f="$(grep -c '^fail$' "$RESULTS" 2>/dev/null || true)"
  echo "http: suite took $(($(date +%s) - started)) s"
  echo "${p:-0} passed, ${f:-0} failed"
}

# --- venv (schemathesis, confluent-kafka) ----------------------------------
VENV="$HERE/.venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "http: creating venv $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  if ! timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; then
    echo "http: pip install failed" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
  echo "$want" >"$STAMP"
fi
PY="$VENV/bin/python"
export PY

# --- the broker --------------------------------------------------------------
HTTP_PORT="$(millrace_free_ports 1)"
if ! millrace_session http failed \
  --set "millrace.http.listen=127.0.0.1:$HTTP_PORT" \
  --set "millrace.rest.consumer.instance.timeout.ms=60000"; then
  echo "0 passed, 1 failed"
  exit 1
fi
RESULTS="$WORK/results"
: >"$RESULTS"
export BASE="http://127.0.0.1:$HTTP_PORT" BOOTSTRAP="$MILLRACE_ADDR" RESULTS
for _ in $(seq 1 100); do
  curl -sf "$BASE/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "http: broker pid $MILLRACE_PID, Kafka at $BOOTSTRAP, HTTP at $BASE"

cases=()
if (($#)); then
  for c in "$@"; do cases+=("$HERE/cases/${c%.sh}.sh"); done
else
  for c in "$HERE"/cases/*.sh; do [[ -f "$c" ]] && cases+=("$c"); done
fi
for c in "${cases[@]}"; do
  name="$(basename "$c" .sh)"
  CASE_WORK="$WORK/cases/$name"
  mkdir -p "$CASE_WORK"
  export CASE_WORK
  echo "--- $name"
  case_started=$(date +%s)
  # A case runs in a subshell: its variables and a failed command stay there.
  if ! (set -uo pipefail; source "$c"); then
    fail "$name" "the case script ended with an error"
  fi
  echo "    ($name: $(($(date +%s) - case_started)) s)"
done

# --- schemathesis on the v3 document --------------------------------------
# schemathesis_fixture.py first makes the topics and the consumer group (with a live member) that
# schemathesis.toml has the generated requests name, and exports their ids; the member stays until
# the stop file appears. The run takes about a minute.
SPEC="$ROOT/docs/http-v3.openapi.yaml"
if (($# == 0)) && [[ -f "$SPEC" ]]; then
  echo "--- schemathesis ($SPEC)"
  st_env="$WORK/schemathesis.env"
  "$PY" "$HERE/schemathesis_fixture.py" "$BOOTSTRAP" "$st_env" >"$WORK/schemathesis-fixture.log" 2>&1 &
  st_fixture=$!
  for _ in $(seq 1 600); do
    [[ -f "$st_env" ]] && break
    kill -0 "$st_fixture" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -f "$st_env" ]]; then
    fail "schemathesis-v3" "the fixture did not start; see below"
    tail -n 20 "$WORK/schemathesis-fixture.log"
  else
    set -a
    # shellcheck disable=SC1090
    source "$st_env"
    set +a
    st_started=$(date +%s)
    if SCHEMATHESIS_HOOKS="$HERE/schemathesis_hooks.py" \
      timeout 600 "$VENV/bin/schemathesis" --config-file "$HERE/schemathesis.toml" \
      run "$SPEC" --url "$BASE" \
      --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-20}" --seed "${SCHEMATHESIS_SEED:-1}" \
      --no-color >"$WORK/schemathesis.log" 2>&1; then
      pass "schemathesis-v3"
    else
      fail "schemathesis-v3" "see below"
      tail -n 60 "$WORK/schemathesis.log"
    fi
    echo "    (schemathesis: $(($(date +%s) - st_started)) s; $(grep -E '^Test cases:' -A1 "$WORK/schemathesis.log" | tail -n1 | xargs))"
  fi
  touch "$st_env.stop"
  wait "$st_fixture" 2>/dev/null || true
fi

[[ "$(grep -c '^fail$' "$RESULTS" || true)" == 0 ]] || failed=1
summary
((failed == 0))
