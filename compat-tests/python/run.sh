#!/usr/bin/env bash
# Python client compatibility suite: confluent-kafka (librdkafka) and
# kafka-python 3.x against Millrace. Each test module starts its own broker.
#
#   compat-tests/python/run.sh [pytest args...]     e.g. -k roundtrip
#
# Env: MILLRACE_BIN (broker binary; built with cargo when missing),
#      PYTHON (interpreter for the venv, default python3),
#      COMPAT_PYTHON_TIMEOUT (whole-suite limit in seconds, default 1500).
# Last line printed: "N passed, M failed" (pytest errors count as failed).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

VENV="$HERE/.venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"

summary() { echo "$1 passed, $2 failed"; }

# --- venv with pinned packages (skipped when already up to date) ------------
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "python: creating venv $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  if ! timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; then
    echo "python: pip install failed" >&2
    summary 0 1
    exit 1
  fi
  echo "$want" >"$STAMP"
fi

# --- broker binary (built once here, not inside every test module) ----------
if ! MILLRACE_BIN="$(millrace_bin)"; then
  echo "python: no broker binary" >&2
  summary 0 1
  exit 1
fi
export MILLRACE_BIN

# --- run ---------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-python.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$HERE"
rc=0
timeout --kill-after=30 "${COMPAT_PYTHON_TIMEOUT:-1500}" \
  "$VENV/bin/python" -m pytest -v --junitxml="$WORK/junit.xml" "$@" 2>&1 | tee "$WORK/pytest.log" || rc=$?

passed="" failed=""
if [[ -s "$WORK/junit.xml" ]]; then
  read -r passed failed < <("$VENV/bin/python" - "$WORK/junit.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - bad - skipped, bad)
PY
  ) || true
fi
if [[ -z "$passed" || -z "$failed" ]]; then
  # No report (killed by the suite timeout, crash): count pytest -v's lines.
  echo "python: pytest wrote no report (exit code $rc); counting its output" >&2
  passed=$(grep -cE '^[^ ]+::[^ ]+ PASSED' "$WORK/pytest.log" || true)
  failed=$(grep -cE '^[^ ]+::[^ ]+ (FAILED|ERROR)' "$WORK/pytest.log" || true)
  failed=$((failed + 1))
fi
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1  # pytest failed without a failing test (timeout, crash, usage error)
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
