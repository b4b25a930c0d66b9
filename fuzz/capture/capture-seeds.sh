#!/usr/bin/env bash
# Regenerates fuzz/seeds/ from real clients: starts a millrace broker that advertises a recording
# proxy (record_proxy.py), runs kcat and the Python clients of workload.py through it, and keeps
# every request frame as a `request` seed; extract_batches.py derives the `batch` and `decompress`
# seeds from the captured Produce requests. Needs kcat and python3 (installs the Python clients
# into a temporary venv). Bounded: every client step has a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=fuzz/capture
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
broker_port=$(free_port)
proxy_port=$(free_port)
cargo build -q -p millrace-broker
target/debug/millrace --data-dir "$work/data" --listen "127.0.0.1:$broker_port" \
  --advertised-listener "127.0.0.1:$proxy_port" --set num.partitions=2 >"$work/broker.out" 2>"$work/broker.err" &
pids+=($!)
for _ in $(seq 1 100); do grep -q "listening on" "$work/broker.out" 2>/dev/null && break; sleep 0.1; done
python3 "$here/record_proxy.py" "$proxy_port" "127.0.0.1:$broker_port" "$work/frames" &
pids+=($!)
sleep 0.5
boot="127.0.0.1:$proxy_port"

# kcat (librdkafka): metadata, produce with every codec, consume, a consumer group, offsets by time.
timeout 20 kcat -b "$boot" -L >/dev/null
for codec in none gzip snappy lz4 zstd; do
  seq 1 50 | sed "s/^/kcat-$codec-/" | timeout 20 kcat -b "$boot" -t fuzz -P -z "$codec" -K: -H h=v
done
timeout 20 kcat -b "$boot" -t fuzz -C -o beginning -e -q >/dev/null
timeout 15 kcat -b "$boot" -G seed-kcat-group fuzz -o beginning -e -q >/dev/null || true
timeout 20 kcat -b "$boot" -Q -t "fuzz:0:$(($(date +%s) * 1000 - 60000))" >/dev/null || true

venv="$work/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q -r compat-tests/python/requirements.txt
timeout 120 "$venv/bin/python" "$here/workload.py" "$boot"

mkdir -p fuzz/seeds/request
cp "$work"/frames/* fuzz/seeds/request/
python3 "$here/extract_batches.py" fuzz/seeds/request fuzz/seeds/batch fuzz/seeds/decompress
echo "request seeds: $(ls fuzz/seeds/request | wc -l)"
