#!/usr/bin/env bash
# CI's fuzz step: builds the cargo-fuzz targets and runs each for a bounded time from the seeds
# captured from real clients (fuzz/seeds/). Fails if any target crashes, panics or aborts; the
# input that did it is left in fuzz/artifacts/<target>/. Installs cargo-fuzz on a fresh machine.
#
# Toolchain: cargo-fuzz passes nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable
# toolchain accept them (no second toolchain to download). Sanitizer: none, the workspace forbids
# unsafe code; libFuzzer's coverage guidance and Rust's own checks (debug assertions, overflow
# checks) are what finds bugs here. See docs/reliability.md.
#
# Profile: dev (--dev). It builds in half the time of release (218 s against 425 s on 2 cores,
# most of it the kafka-protocol crate) and keeps debug assertions and overflow checks on, which
# release turns off; it runs ~30x fewer inputs per second, which a 20-second smoke from the seeds
# can spare. Long runs by hand use release (docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS_PER_TARGET:-20}
targets=(request batch decompress sasl tls)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build -s none --dev
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "-- fuzz $t for ${seconds}s"
  # -max_total_time bounds the run; timeout is a backstop should the target hang.
  status=0
  timeout $((seconds + 120)) cargo fuzz run -s none --dev "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E "INITED|DONE|stat::number_of_executed_units|panicked|ERROR|SUMMARY" "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$log"
    echo "fuzz target $t failed (exit $status); crashing inputs: fuzz/artifacts/$t/"
    exit 1
  fi
done
