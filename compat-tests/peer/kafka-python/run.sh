#!/usr/bin/env bash
# kafka-python's own integration tests (test/integration of its sdist) against one Millrace broker.
#
#   compat-tests/peer/kafka-python/run.sh [extra pytest args...]
#
# The sdist comes from PyPI (pip download --no-binary), its test/ directory is unpacked under
# compat-tests/peer/.cache/ (gitignored) with two files it lacks there: an empty test/__init__.py
# (so that `test` is this package, not the standard library's) and service.py from this folder
# (kafka-python's fixtures then only ever use an external broker), and conftest.py from this
# folder (a shorter metadata_max_age_ms for every client: a client race, see the file). Runs the tests named in
# ALLOWLIST with KAFKA_URI=<broker> KAFKA_VERSION=4.4.0 (the version Millrace's API ranges match:
# kafka-python infers (4, 3), its newest, from them as from Kafka 4.4; test_kafka_version_infer
# checks that). The broker listens on a port chosen
# here and advertises it (advertised.listeners), as a Kafka started from server.properties does;
# num.partitions=4 and group.min.session.timeout.ms=1000 as the tests expect (test_group uses
# 3-second sessions, below Kafka's 6-second minimum).
#
# Env: MILLRACE_BIN, KAFKA_PYTHON_VERSION (default 3.0.12, must match requirements.txt),
#      PEER_KPY_TIMEOUT (seconds for pytest, default 360), KEEP_WORK=1.
# Last line printed: "N passed, M failed" (skipped tests count neither way).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

V="${KAFKA_PYTHON_VERSION:-3.0.12}"
CACHE="$HERE/../.cache"
SRC="$CACHE/kafka-python-$V"
VENV="$CACHE/kafka-python-venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"
summary() { echo "$1 passed, $2 failed"; }
mkdir -p "$CACHE"

# --- venv with pinned packages (skipped when already up to date) ------------
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "kafka-python: creating venv $VENV"
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  if ! timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; then
    echo "kafka-python: pip install failed" >&2
    summary 0 1
    exit 1
  fi
  echo "$want" >"$STAMP"
fi

# --- the test sources (cached) -------------------------------------------------
if [[ ! -f "$SRC/.complete" ]]; then
  echo "kafka-python: fetching the kafka-python $V sdist from PyPI"
  rm -rf "$SRC" "$SRC.tmp"
  mkdir -p "$SRC.tmp"
  if ! timeout 300 "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps \
    --no-binary :all: -d "$SRC.tmp" "kafka-python==$V"; then
    echo "kafka-python: pip download failed" >&2
    summary 0 1
    exit 1
  fi
  tar -xzf "$SRC.tmp/kafka_python-$V.tar.gz" -C "$SRC.tmp" --strip-components=1 \
    "kafka_python-$V/test"
  rm -f "$SRC.tmp/kafka_python-$V.tar.gz"
  mv "$SRC.tmp" "$SRC"
  touch "$SRC/.complete"
fi
# Ours, refreshed on every run.
touch "$SRC/test/__init__.py"
cp "$HERE/service.py" "$SRC/test/service.py"
cp "$HERE/conftest.py" "$SRC/test/conftest.py"
mkdir -p "$SRC/servers/kafka-bin"

mapfile -t tests < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/ALLOWLIST" | grep -v '^$')

# --- broker ------------------------------------------------------------------
port="$(millrace_free_ports 1)"
failed=0
if ! MILLRACE_LISTEN="127.0.0.1:$port" millrace_session kafka-python failed \
  --set "advertised.listeners=PLAINTEXT://127.0.0.1:$port" --set num.partitions=4 \
  --set group.min.session.timeout.ms=1000; then
  summary 0 1
  exit 1
fi
echo "kafka-python: broker pid $MILLRACE_PID at $MILLRACE_ADDR; ${#tests[@]} allow-listed tests, kafka-python $V"

rc=0
(cd "$SRC" &&
  PYTHONPATH="$SRC" KAFKA_URI="PLAINTEXT://$MILLRACE_ADDR" KAFKA_VERSION=4.4.0 \
    KAFKA_ROOT="$SRC/servers/kafka-bin" \
    timeout --kill-after=20 "${PEER_KPY_TIMEOUT:-360}" "$VENV/bin/python" -m pytest -p no:cacheprovider \
    -q -rfE -o log_level=WARNING --timeout=120 --junitxml="$WORK/junit.xml" "${tests[@]}" "$@") 2>&1 |
  tee "$WORK/pytest.log" || rc=$?

passed=0
if [[ -s "$WORK/junit.xml" ]]; then
  read -r passed failed < <("$VENV/bin/python" - "$WORK/junit.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - bad - skipped, bad)
PY
)
else
  failed=1
fi
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1
fi
if ! millrace_alive; then
  echo "kafka-python: the broker is no longer running; stderr tail:" >&2
  tail -n 20 "$WORK/broker/broker.stderr" >&2 || true
  failed=$((failed + 1))
fi
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
