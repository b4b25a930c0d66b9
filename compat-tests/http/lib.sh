# Helpers for the HTTP API cases (compat-tests/http/cases/*.sh), sourced by run.sh.
#
#   BASE            http://127.0.0.1:<http port> of the broker under test
#   BOOTSTRAP       its Kafka listener (127.0.0.1:<port>)
#   PY              the suite's venv python (confluent-kafka, schemathesis)
#   CASE_WORK       a scratch dir for the running case
#
#   req METHOD PATH [CONTENT_TYPE BODY] [curl args...]
#       sends one request with curl; sets STATUS (the HTTP status) and BODY_OUT (the body) and
#       returns 0 whatever the status (a transport failure sets STATUS=000).
#   expect_status NAME WANT                 PASS/FAIL on $STATUS
#   expect_jq NAME FILTER                   PASS when `jq -e FILTER` holds on $BODY_OUT
#   check NAME CMD...                       PASS when CMD succeeds
#   pass NAME / fail NAME REASON            count one result
#
# Each result is one "PASS  name" or "FAIL  name: reason" line; run.sh sums them.

req() {
  local method="$1" path="$2" ctype="" body=""
  shift 2
  if (($# >= 2)) && [[ "$1" != -* ]]; then
    ctype="$1" body="$2"
    shift 2
  fi
  local out="$CASE_WORK/body.$$"
  local args=(-sS -o "$out" -w '%{http_code}' -X "$method" --max-time "${HTTP_TIMEOUT:-30}")
  [[ -n "$ctype" ]] && args+=(-H "Content-Type: $ctype" --data-binary "$body")
  STATUS="$(curl "${args[@]}" "$@" "$BASE$path" 2>"$CASE_WORK/curl.err" || true)"
  [[ -n "$STATUS" ]] || STATUS=000
  BODY_OUT="$(cat "$out" 2>/dev/null || true)"
  rm -f "$out"
}

pass() {
  echo "PASS  $1"
  echo pass >>"$RESULTS"
}

fail() {
  echo "FAIL  $1: $2"
  echo fail >>"$RESULTS"
}

expect_status() {
  if [[ "$STATUS" == "$2" ]]; then
    pass "$1"
  else
    fail "$1" "status $STATUS, want $2; body: ${BODY_OUT:0:300}"
  fi
}

expect_jq() {
  if jq -e "$2" >/dev/null 2>&1 <<<"$BODY_OUT"; then
    pass "$1"
  else
    fail "$1" "jq '$2' does not hold on: ${BODY_OUT:0:300}"
  fi
}

check() {
  local name="$1"
  shift
  if "$@" >"$CASE_WORK/check.out" 2>&1; then
    pass "$name"
  else
    fail "$name" "$(tail -n 5 "$CASE_WORK/check.out" | tr '\n' ' ')"
  fi
}
