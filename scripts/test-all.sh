#!/usr/bin/env bash
# Runs every Millrace test on a fresh machine: installs what the tests need, checks formatting and
# lints, runs the Rust unit and integration tests (real broker processes, real clients), then the
# client compatibility suites in compat-tests/. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A clean build gains nothing from incremental compilation; its caches only take disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

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
echo "== cargo fmt --check (at $((SECONDS / 60)) min)"
cargo fmt --all -- --check
echo "== cargo clippy (at $((SECONDS / 60)) min)"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test (at $((SECONDS / 60)) min)"
cargo test --workspace -- --test-threads=2
echo "== fuzz smoke (at $((SECONDS / 60)) min)"
bash fuzz/ci.sh
echo "== bench smoke (at $((SECONDS / 60)) min)"
bash crates/bench/smoke.sh
echo "== compat-tests (at $((SECONDS / 60)) min)"
cargo build -p millrace-broker
MILLRACE_BIN="$PWD/target/debug/millrace" bash compat-tests/run-all.sh
echo "== all tests done in $((SECONDS / 60)) min (disk free: $(df -h --output=avail . | tail -1 | tr -d ' '))"
