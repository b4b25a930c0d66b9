#!/usr/bin/env bash
# Cluster fault test: the checker's unit tests, then the fault harness (harness.py) against
# Millrace (default) or Apache Kafka, ending with "N passed, M failed".
# The fault run has two workloads side by side: plain producers/consumers (workload.py) and
# transactional consume-transform-produce (ctp.py), whose checks are also PASS/FAIL lines; a
# 3-node Millrace run adds tiered storage (a SeaweedFS S3 server, a tiered topic, the remote-log
# checks: tiered.py).
#
#   compat-tests/cluster/run.sh                         # Millrace: 3 nodes, or 1 node when the binary
#                                                       # has no cluster support (it says so)
#   compat-tests/cluster/run.sh --system kafka          # Apache Kafka 4.4.0, 3 nodes (reference run)
#   compat-tests/cluster/run.sh --system kafka --broken # acks=1, min.insync.replicas=1, unclean
#                                                       # election: must REPORT lost writes
#   compat-tests/cluster/run.sh --seed 1234             # rerun a seed (same faults, same order)
#   compat-tests/cluster/run.sh --secure                # every Kafka listener SASL_SSL, the brokers'
#                                                       # own links included (secure.py)
#
# Extra args go to harness.py (--duration, --nodes, --rate, --keep, --min-faults ...).
# Env: MILLRACE_BIN (broker; built with cargo when unset), CHAOS_PROXY_BIN (proxy; built when
#      unset; not named MILLRACE_*: the broker reads every MILLRACE_* variable as a config),
#      SEAWEEDFS_BIN (the object store of a 3-node Millrace run: tiered storage; default: what
#      scripts/seaweedfs.sh prints, which builds SeaweedFS once per machine, ~9 min),
#      PYTHON (interpreter for the venv, default python3), CLUSTER_TIMEOUT (seconds for the
#      harness, default 900), CHAOS_CLIENT_DEBUG (librdkafka debug contexts, e.g. eos,broker,msg:
#      every client's debug log in its client-*.log). --system kafka needs java >= 17 and mvn.
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
  echo "cluster: creating venv $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  if ! timeout 900 "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"; then
    echo "cluster: pip install failed" >&2
    summary 0 1
    exit 1
  fi
  echo "$want" >"$STAMP"
fi

# --- binaries ----------------------------------------------------------------
if ! MILLRACE_BIN="$(millrace_bin)"; then
  echo "cluster: no broker binary" >&2
  summary 0 1
  exit 1
fi
export MILLRACE_BIN
if [[ -z "${CHAOS_PROXY_BIN:-}" ]]; then
  if ! (cd "$ROOT" && timeout "${MILLRACE_BUILD_TIMEOUT:-3600}" cargo build -q -p millrace-chaos >&2); then
    echo "cluster: cargo build -p millrace-chaos failed" >&2
    summary 0 1
    exit 1
  fi
  CHAOS_PROXY_BIN="$ROOT/target/debug/millrace-chaos"
fi
export CHAOS_PROXY_BIN

WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-cluster-run.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$HERE"

# --- 1. the checker proves itself on hand-made histories; the plan and adapters --
rc=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$WORK/junit.xml" test_checker.py test_share_checker.py test_plan.py test_replicas.py || rc=$?
read -r unit_passed unit_failed < <("$VENV/bin/python" - "$WORK/junit.xml" <<'PY' || echo "0 1"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - bad - skipped, bad)
PY
)
if [[ $rc -ne 0 && $unit_failed -eq 0 ]]; then unit_failed=1; fi

# --- 2. the fault run ------------------------------------------------------------
rc=0
timeout --kill-after=30 "${CLUSTER_TIMEOUT:-900}" "$VENV/bin/python" harness.py "$@" 2>&1 | tee "$WORK/harness.log" || rc=$?
line="$(grep -E '^harness: [0-9]+ passed, [0-9]+ failed$' "$WORK/harness.log" | tail -n1 || true)"
if [[ -n "$line" ]]; then
  run_passed="${line#harness: }"
  run_passed="${run_passed%% passed*}"
  run_failed="${line#*passed, }"
  run_failed="${run_failed%% failed}"
else
  echo "cluster: the harness ended without its summary line (exit code $rc)" >&2
  run_passed=0 run_failed=1
fi
if [[ $rc -ne 0 && $run_failed -eq 0 ]]; then run_failed=1; fi

passed=$((unit_passed + run_passed))
failed=$((unit_failed + run_failed))
summary "$passed" "$failed"
[[ $failed -eq 0 ]]
