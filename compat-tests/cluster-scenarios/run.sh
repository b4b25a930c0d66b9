#!/usr/bin/env bash
# Cluster scenarios: the Done-when scenarios of issues 12 and 13 on a 3-node cluster (the issue's
# command line, lib/millrace.py Cluster), through kcat, confluent-kafka, the Java AdminClient and
# Kafka's CLI tools (kafka-topics, kafka-configs). Each test starts its own cluster.
#
#   compat-tests/cluster-scenarios/run.sh [pytest args...]     e.g. -k controller
#   (run by compat-tests/run-all.sh like every */run.sh; about 95 s on 2 cores)
#   MILLRACE_BIN=$PWD/compat-tests/cluster-scenarios/kafka-cluster-shim.sh \
#       compat-tests/cluster-scenarios/run.sh                  # against Apache Kafka 4.4.0 (by hand, ~4 min)
#
# Needs python3, java 17+ and mvn (Kafka's tools, resolved by compat-tests/java/common.sh), kcat
# (installed with apt-get when missing).
# Env: MILLRACE_BIN (broker; built with cargo when unset), PYTHON (venv interpreter, default
#      python3), COMPAT_SCENARIOS_TIMEOUT (whole run, seconds, default 600), MILLRACE_KEEP_WORK=1
#      (keep every cluster's work dir; kept anyway for a failed test), TOOL_TIMEOUT (per CLI run, 90).
# Last line printed: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../java/common.sh
source "$ROOT/compat-tests/java/common.sh" # lib/millrace.sh, java_dist_classpath

VENV="$HERE/.venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"

summary() { echo "$1 passed, $2 failed"; }

# --- venv with pinned packages (skipped when already up to date) ------------
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "cluster-scenarios: creating venv $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  if ! timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; then
    echo "cluster-scenarios: pip install failed" >&2
    summary 0 1
    exit 1
  fi
  echo "$want" >"$STAMP"
fi

# --- kcat, Kafka's CLI tools, the broker ----------------------------------------
if ! command -v "${KCAT:-kcat}" >/dev/null 2>&1; then
  echo "cluster-scenarios: kcat not installed; apt-get install -y kcat"
  if ! { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq kcat; } >&2; then
    echo "cluster-scenarios: installing kcat failed" >&2
    summary 0 1
    exit 1
  fi
fi
if ! command -v java >/dev/null || ! command -v "${MVN:-mvn}" >/dev/null || ! java_dist_classpath; then
  echo "cluster-scenarios: needs java 17+ and mvn for Kafka's CLI tools" >&2
  summary 0 1
  exit 1
fi
export DIST_CP
if ! MILLRACE_BIN="$(millrace_bin)"; then
  echo "cluster-scenarios: no broker binary" >&2
  summary 0 1
  exit 1
fi
export MILLRACE_BIN
echo "cluster-scenarios: broker $MILLRACE_BIN"

# --- run ---------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-cluster-scenarios.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$HERE"
rc=0
timeout --kill-after=30 "${COMPAT_SCENARIOS_TIMEOUT:-600}" \
  "$VENV/bin/python" -m pytest -v -s --junitxml="$WORK/junit.xml" "$@" 2>&1 |
  grep --line-buffered -vE '^%[0-9]+\|[0-9.]+\|(FAIL|BGQUEUE)\|' | tee "$WORK/pytest.log" || rc=${PIPESTATUS[0]}

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
  echo "cluster-scenarios: pytest wrote no report (exit code $rc); counting its output" >&2
  passed=$(grep -cE '::[^ ]+ PASSED' "$WORK/pytest.log" || true)
  failed=$(grep -cE '::[^ ]+ (FAILED|ERROR)' "$WORK/pytest.log" || true)
  failed=$((failed + 1))
fi
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1 # pytest failed without a failing test (timeout, crash, usage error)
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
