#!/usr/bin/env bash
# Runs every Millrace test on a fresh machine: installs what the tests need, checks formatting and
# lints, runs the Rust unit and integration tests (real broker processes, real clients), then the
# client compatibility suites in compat-tests/. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A clean build gains nothing from incremental compilation; its caches only take disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Stage times: `stage NAME` ends the stage before it and starts NAME; on exit, whether everything
# passed or a stage failed, a table of each stage's wall time (seconds) is printed, and the stage
# that failed is named. The exit code is the one the script would have had without the table.
stage_names=()
stage_seconds=()
stage_now=""
stage_started=$SECONDS
end_stage() {
  if [[ -n "$stage_now" ]]; then
    stage_names+=("$stage_now")
    stage_seconds+=($((SECONDS - stage_started)))
    stage_now=""
  fi
}
stage() {
  end_stage
  stage_now="$1"
  stage_started=$SECONDS
  echo "== $1 (at $((SECONDS / 60)) min)"
}
print_stage_times() {
  local rc=$? failed="$stage_now" i mark
  end_stage
  echo "== stage times (seconds)"
  for i in "${!stage_names[@]}"; do
    mark=""
    # The stage running at a failure is the last one recorded.
    if ((rc != 0 && i == ${#stage_names[@]} - 1)) && [[ -n "$failed" ]]; then mark="  FAILED"; fi
    printf '  %-16s %6s%s\n' "${stage_names[$i]}" "${stage_seconds[$i]}" "$mark"
  done
  printf '  %-16s %6s\n' "total" "$SECONDS"
  if [[ $rc -ne 0 ]]; then
    echo "== FAILED in stage: ${failed:-(none)} (exit $rc)"
  fi
  exit "$rc"
}
trap print_stage_times EXIT

stage install
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
command -v kcat >/dev/null || need_apt+=(kcat)
# librdkafka (built from source by the rdkafka crate) includes curl/curl.h.
[ -f /usr/include/curl/curl.h ] || [ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || need_apt+=(libcurl4-openssl-dev)
command -v java >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing system packages: ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "Rust (cargo) is required: https://rustup.rs"; exit 1; }
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# A full disk shows up as a linker killed by SIGBUS; say up front how much room there is.
echo "== disk free: $(df -h --output=avail . | tail -1 | tr -d ' ')"
# SeaweedFS (a real S3 server) for the tiered-storage tests: built once from the Go module proxy
# and cached outside the clone (scripts/seaweedfs.sh; ~5-9 min cold, nothing when cached).
stage "seaweedfs"
command -v go >/dev/null || { echo "Go is required to build SeaweedFS for the tiered-storage tests: https://go.dev/dl"; exit 1; }
MILLRACE_WEED="$(bash scripts/seaweedfs.sh)"
export MILLRACE_WEED
stage "fmt"
cargo fmt --all -- --check
# Cheap, so early: the checker's own test, then no module cycle inside any crate.
stage "module cycles"
python3 scripts/check-module-cycles.py --self-test
python3 scripts/check-module-cycles.py
stage "clippy"
cargo clippy --workspace --all-targets -- -D warnings
stage "cargo test"
cargo test --workspace -- --test-threads=2
stage "fuzz smoke"
bash fuzz/ci.sh
stage "bench smoke"
bash crates/bench/smoke.sh
stage "compat-tests"
cargo build -p millrace-broker
MILLRACE_BIN="$PWD/target/debug/millrace" bash compat-tests/run-all.sh
end_stage
echo "== all tests done in $((SECONDS / 60)) min (disk free: $(df -h --output=avail . | tail -1 | tr -d ' '))"
