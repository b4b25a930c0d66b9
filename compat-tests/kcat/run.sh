#!/usr/bin/env bash
# kcat (Debian: kcat 1.7.1 + librdkafka 2.0.2) against one Millrace broker.
#
#   compat-tests/kcat/run.sh
#
# Checks: kcat -L (broker, controller, topics, partitions); for compression
# none/gzip/snappy/lz4/zstd: 10,000 distinct lines produced with `kcat -P -z`
# and read back byte-identical with `kcat -C -e -o beginning`, and (not for
# none) proof from librdkafka's debug log that the batches were compressed on
# the way in and came back compressed (fetched bytes << uncompressed); keys and
# headers; -o -N (ListOffsets latest); -o s@TS (ListOffsets by timestamp);
# groups.sh (balanced consumer -G), leader-change.sh (3-node cluster, kill -9 of the
# partition leader while kcat -P streams; every line read back exactly once, in order),
# tls.sh (SSL and mTLS listeners: metadata, round trips, refused client certificates) and
# sasl.sh (SASL/PLAIN over SASL_PLAINTEXT and SASL_SSL: metadata, round trips, a wrong password) and
# scram.sh (SASL/SCRAM-SHA-256/512 with users from kafka-configs: metadata, round trips, refusals).
#
# Env: MILLRACE_BIN, KCAT (default kcat), KCAT_MESSAGES (default 10000),
#      KCAT_TIMEOUT (seconds per kcat call, default 60),
#      KEEP_WORK=1 keeps the work dir (also kept when a check fails).
# Last line printed: "N passed, M failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"

KCAT="${KCAT:-kcat}"
N="${KCAT_MESSAGES:-10000}"
T="${KCAT_TIMEOUT:-60}"
CODECS=(none gzip snappy lz4 zstd)

passed=0
failed=0
failures=()
summary() { echo "$passed passed, $failed failed"; }
pass() { passed=$((passed + 1)); echo "PASS  $1"; }
fail() {
  failed=$((failed + 1))
  failures+=("$1")
  echo "FAIL  $1: $2"
  if [[ -n "${3:-}" && -s "$3" ]]; then
    echo "      --- $3 (last 15 lines) ---"
    { tail -n 15 "$3"; echo; } | sed -e '/^$/d' -e 's/^/      /'
  fi
}

# --- kcat --------------------------------------------------------------------
if ! command -v "$KCAT" >/dev/null 2>&1; then
  echo "kcat: not installed; apt-get install -y kcat"
  if ! { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq kcat; } >&2; then
    echo "kcat: installing kcat failed" >&2
    failed=1; summary; exit 1
  fi
fi
echo "kcat: $("$KCAT" -V 2>&1 | grep -m1 '^Version' || echo '?')"

# --- broker ------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/millrace-kcat.XXXXXX")"
cleanup() {
  millrace_stop
  if [[ -n "${KEEP_WORK:-}" || $failed -gt 0 ]]; then
    echo "kcat: work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! millrace_start "$WORK/broker"; then
  fail "broker-start" "broker did not start" "$WORK/broker/broker.stderr"
  summary
  exit 1
fi
B="$MILLRACE_ADDR"
echo "kcat: broker pid $MILLRACE_PID at $B"

kc() { timeout --kill-after=5 "$T" "$KCAT" -b "$B" "$@"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# --- metadata ----------------------------------------------------------------
META_TOPIC="kcat-meta-$RANDOM$RANDOM"
if echo "hello" | kc -P -t "$META_TOPIC" 2>"$WORK/meta-produce.err"; then
  pass "produce-auto-creates-topic"
else
  fail "produce-auto-creates-topic" "kcat -P exited non-zero" "$WORK/meta-produce.err"
fi

if kc -L >"$WORK/L.txt" 2>"$WORK/L.err"; then
  if grep -Eq "^ *1 brokers:" "$WORK/L.txt" &&
    grep -Eq "^ *broker [0-9]+ at 127\.0\.0\.1:$MILLRACE_PORT( |$)" "$WORK/L.txt"; then
    pass "metadata-lists-broker"
  else
    fail "metadata-lists-broker" "expected '1 brokers:' and 'broker N at 127.0.0.1:$MILLRACE_PORT'" "$WORK/L.txt"
  fi
  if grep -Eq "^ *broker [0-9]+ at 127\.0\.0\.1:$MILLRACE_PORT \(controller\)" "$WORK/L.txt"; then
    pass "metadata-controller-is-broker"
  else
    fail "metadata-controller-is-broker" "broker line lacks '(controller)': controller_id is not the live broker" "$WORK/L.txt"
  fi
  if grep -Fq "topic \"$META_TOPIC\" with 1 partitions:" "$WORK/L.txt"; then
    pass "metadata-lists-created-topic"
  else
    fail "metadata-lists-created-topic" "no 'topic \"$META_TOPIC\" with 1 partitions:' in kcat -L" "$WORK/L.txt"
  fi
else
  fail "metadata-lists-broker" "kcat -L exited non-zero" "$WORK/L.err"
  fail "metadata-controller-is-broker" "kcat -L exited non-zero"
  fail "metadata-lists-created-topic" "kcat -L exited non-zero"
fi

if kc -L -t "$META_TOPIC" >"$WORK/Lt.txt" 2>"$WORK/Lt.err" &&
  bid="$(sed -nE "s/^ *broker ([0-9]+) at 127\.0\.0\.1:$MILLRACE_PORT.*/\1/p" "$WORK/Lt.txt")" &&
  [[ -n "$bid" ]] &&
  grep -Eq "^ *partition 0, leader $bid, replicas: $bid, isrs: $bid *$" "$WORK/Lt.txt"; then
  pass "metadata-topic-partition-leader"
else
  fail "metadata-topic-partition-leader" "expected 'partition 0, leader ID, replicas: ID, isrs: ID'" "$WORK/Lt.txt"
fi

if kc -L -J >"$WORK/L.json" 2>"$WORK/LJ.err" &&
  python3 - "$WORK/L.json" "$MILLRACE_PORT" "$META_TOPIC" <<'PY'; then
import json, sys
md = json.load(open(sys.argv[1]))
port, topic = sys.argv[2], sys.argv[3]
assert [b["name"] for b in md["brokers"]] == [f"127.0.0.1:{port}"], md["brokers"]
[t] = [t for t in md["topics"] if t["topic"] == topic]
assert [p["partition"] for p in t["partitions"]] == [0], t
PY
  pass "metadata-json"
else
  fail "metadata-json" "kcat -L -J: wrong brokers/topic" "$WORK/L.json"
fi

# --- compression round trips -------------------------------------------------
declare -A FETCHED
for codec in "${CODECS[@]}"; do
  topic="kcat-$codec-$RANDOM$RANDOM"
  in="$WORK/$codec.in" out="$WORK/$codec.out"
  awk -v n="$N" -v c="$codec" 'BEGIN { for (i = 0; i < n; i++)
    printf "%s message %06d: the quick brown fox jumps over the lazy dog, again and again and again %d\n", c, i, i * 7919 % 10007 }' >"$in"
  # -d msg: librdkafka logs each ProduceRequest's codec and each fetched MessageSet size.
  if ! kc -P -t "$topic" -z "$codec" -X linger.ms=50 -d msg <"$in" 2>"$WORK/$codec.produce.err"; then
    fail "roundtrip-$codec" "kcat -P -z $codec exited non-zero" "$WORK/$codec.produce.err"
    [[ $codec != none ]] && fail "compressed-$codec" "produce failed"
    continue
  fi
  if ! kc -C -t "$topic" -o beginning -e -d msg >"$out" 2>"$WORK/$codec.consume.err"; then
    fail "roundtrip-$codec" "kcat -C -e exited non-zero (or timed out after ${T}s)" "$WORK/$codec.consume.err"
    [[ $codec != none ]] && fail "compressed-$codec" "consume failed"
    continue
  fi
  lines_in=$(wc -l <"$in") lines_out=$(wc -l <"$out")
  if [[ $lines_out -ne $lines_in ]]; then
    fail "roundtrip-$codec" "read back $lines_out lines, produced $lines_in" "$WORK/$codec.consume.err"
  elif ! cmp -s "$in" "$out"; then
    fail "roundtrip-$codec" "read back the right number of lines but not byte-identical ($(cmp "$in" "$out" 2>&1 | head -n1))"
  else
    pass "roundtrip-$codec"
  fi
  FETCHED[$codec]=$(sed -nE 's/.*MessageSet size ([0-9]+),.*/\1/p' "$WORK/$codec.consume.err" | awk '{s += $1} END {print s + 0}')
  [[ $codec == none ]] && continue

  # Compression check: the messages went out in batches of that codec
  # (librdkafka 2.0.2 quietly sends uncompressed when the broker's ApiVersions
  # ranges lack what it keys the codec on, see protocol-checklist §2.3), and
  # the fetched bytes are far below the uncompressed size, i.e. stored
  # compressed. librdkafka also sends a batch uncompressed when compressing
  # did not make it smaller (a 1-message tail batch), so >= 90% of messages.
  grep -F "Produce MessageSet with" "$WORK/$codec.produce.err" >"$WORK/$codec.batches" || true
  read -r nbatches msgs_all msgs_codec < <(awk -v c="$codec" '
    { n = $0; sub(/.*Produce MessageSet with /, "", n); sub(/ message.*/, "", n)
      b++; all += n; if ($0 ~ (", " c "\\)$")) with += n }
    END { print b + 0, all + 0, with + 0 }' "$WORK/$codec.batches")
  if grep -Eqi "not compressing|does not support compression|compression.*(not supported|disabled)" "$WORK/$codec.produce.err"; then
    fail "compressed-$codec" "librdkafka refused to compress: $(grep -Ei 'compress' "$WORK/$codec.produce.err" | head -n1)"
  elif [[ $nbatches -eq 0 ]]; then
    fail "compressed-$codec" "no 'Produce MessageSet' debug lines from librdkafka" "$WORK/$codec.produce.err"
  elif ((msgs_codec * 10 < msgs_all * 9)); then
    fail "compressed-$codec" "only $msgs_codec of $msgs_all messages were sent in $codec batches: $(grep -Ev ", $codec\)\$" "$WORK/$codec.batches" | head -n1)"
  elif [[ -z "${FETCHED[none]:-}" || ${FETCHED[none]} -eq 0 || ${FETCHED[$codec]} -eq 0 ]]; then
    fail "compressed-$codec" "no fetched MessageSet sizes to compare (none=${FETCHED[none]:-?}, $codec=${FETCHED[$codec]})"
  elif ((FETCHED[$codec] * 3 > FETCHED[none])); then
    fail "compressed-$codec" "fetched ${FETCHED[$codec]} bytes vs ${FETCHED[none]} uncompressed: not stored compressed"
  else
    pass "compressed-$codec"
    echo "      fetched ${FETCHED[$codec]} bytes ($codec) vs ${FETCHED[none]} (none); $msgs_codec/$msgs_all messages in $codec batches ($nbatches batches)"
  fi
done

# --- keys and headers ----------------------------------------------------------
topic="kcat-kh-$RANDOM$RANDOM"
printf 'k1:v1\nk2:value two\n:no key\n' >"$WORK/kh.in"
printf 'k1|v1|h1=a,h2=b\nk2|value two|h1=a,h2=b\n|no key|h1=a,h2=b\n' >"$WORK/kh.want"
if kc -P -t "$topic" -K: -H h1=a -H h2=b <"$WORK/kh.in" 2>"$WORK/kh.produce.err" &&
  kc -C -t "$topic" -o beginning -e -f '%k|%s|%h\n' >"$WORK/kh.out" 2>"$WORK/kh.consume.err" &&
  cmp -s "$WORK/kh.want" "$WORK/kh.out"; then
  pass "keys-and-headers"
else
  fail "keys-and-headers" "expected $(tr '\n' ';' <"$WORK/kh.want") got $(tr "\n" ";" 2>/dev/null <"$WORK/kh.out")" "$WORK/kh.consume.err"
fi

# --- offsets: -o -N (from end) and -o s@TS (by timestamp) ---------------------
topic="kcat-ts-$RANDOM$RANDOM"
seq 1 50 | sed 's/^/first-/' >"$WORK/ts-a.in"
seq 1 30 | sed 's/^/second-/' >"$WORK/ts-b.in"
if kc -P -t "$topic" <"$WORK/ts-a.in" 2>"$WORK/ts-a.err"; then
  mid=$(($(now_ms) + 1))
  while (($(now_ms) <= mid)); do :; done # every later record has timestamp > mid
  if kc -P -t "$topic" <"$WORK/ts-b.in" 2>"$WORK/ts-b.err"; then
    if kc -C -t "$topic" -o "s@$mid" -e >"$WORK/ts.out" 2>"$WORK/ts.err" && cmp -s "$WORK/ts-b.in" "$WORK/ts.out"; then
      pass "offset-by-timestamp"
    else
      fail "offset-by-timestamp" "kcat -o s@$mid should return exactly the 30 'second-*' lines, got $(wc -l <"$WORK/ts.out") lines starting '$(head -n1 "$WORK/ts.out")'" "$WORK/ts.err"
    fi
    if kc -C -t "$topic" -o -10 -e >"$WORK/tail.out" 2>"$WORK/tail.err" &&
      tail -n 10 "$WORK/ts-b.in" | cmp -s - "$WORK/tail.out"; then
      pass "offset-from-end"
    else
      fail "offset-from-end" "kcat -o -10 should return the last 10 lines" "$WORK/tail.err"
    fi
  else
    fail "offset-by-timestamp" "second produce failed" "$WORK/ts-b.err"
    fail "offset-from-end" "second produce failed"
  fi
else
  fail "offset-by-timestamp" "produce failed" "$WORK/ts-a.err"
  fail "offset-from-end" "produce failed"
fi

# --- broker still alive, clean shutdown -----------------------------------------
if millrace_alive; then
  millrace_stop
  if [[ "$MILLRACE_EXIT" == 0 ]]; then
    pass "broker-sigterm-exit-0"
  else
    fail "broker-sigterm-exit-0" "exit code $MILLRACE_EXIT after SIGTERM" "$WORK/broker/broker.stderr"
  fi
else
  fail "broker-sigterm-exit-0" "broker died during the run" "$WORK/broker/broker.stderr"
fi

# --- TLS listeners (SSL, mTLS): its own broker, see tls.sh -------------------------------------
tls_out="$(bash "$(dirname "${BASH_SOURCE[0]}")/tls.sh" 2>&1)" || true
echo "$tls_out" | sed -e 's/^/  /'
if [[ "$(echo "$tls_out" | tail -n 1)" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  passed=$((passed + BASH_REMATCH[1]))
  failed=$((failed + BASH_REMATCH[2]))
  ((BASH_REMATCH[2] == 0)) || failures+=("tls")
else
  fail "tls" "tls.sh printed no summary"
fi

# --- SASL/PLAIN listeners (SASL_PLAINTEXT, SASL_SSL): its own broker, see sasl.sh --------------
sasl_out="$(bash "$(dirname "${BASH_SOURCE[0]}")/sasl.sh" 2>&1)" || true
echo "$sasl_out" | sed -e 's/^/  /'
if [[ "$(echo "$sasl_out" | tail -n 1)" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  passed=$((passed + BASH_REMATCH[1]))
  failed=$((failed + BASH_REMATCH[2]))
  ((BASH_REMATCH[2] == 0)) || failures+=("sasl")
else
  fail "sasl" "sasl.sh printed no summary"
fi

# --- SASL/SCRAM (SCRAM-SHA-256, SCRAM-SHA-512; users from kafka-configs): its own broker, see scram.sh
scram_out="$(bash "$(dirname "${BASH_SOURCE[0]}")/scram.sh" 2>&1)" || true
echo "$scram_out" | sed -e 's/^/  /'
if [[ "$(echo "$scram_out" | tail -n 1)" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  passed=$((passed + BASH_REMATCH[1]))
  failed=$((failed + BASH_REMATCH[2]))
  ((BASH_REMATCH[2] == 0)) || failures+=("scram")
else
  fail "scram" "scram.sh printed no summary"
fi

# --- balanced consumer (-G): its own broker, see groups.sh ----------------------
groups_out="$(bash "$(dirname "${BASH_SOURCE[0]}")/groups.sh" 2>&1)" || true
echo "$groups_out" | sed -e 's/^/  groups: /'
if [[ "$(echo "$groups_out" | tail -n 1)" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  passed=$((passed + BASH_REMATCH[1]))
  failed=$((failed + BASH_REMATCH[2]))
  ((BASH_REMATCH[2] == 0)) || failures+=("groups")
else
  fail "groups" "groups.sh printed no summary"
fi

# --- forced leader change on a 3-node cluster: its own cluster, see leader-change.sh ------------
leader_out="$(bash "$(dirname "${BASH_SOURCE[0]}")/leader-change.sh" 2>&1)" || true
echo "$leader_out" | sed -e 's/^/  /'
# Its last summary line: stopping the cluster may print after it (a slow node's SIGKILL notice).
leader_summary="$(echo "$leader_out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)"
if [[ "$leader_summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  passed=$((passed + BASH_REMATCH[1]))
  failed=$((failed + BASH_REMATCH[2]))
  ((BASH_REMATCH[2] == 0)) || failures+=("leader-change")
else
  fail "leader-change" "leader-change.sh printed no summary"
fi

if ((failed > 0)); then
  echo "kcat: failed: ${failures[*]}"
fi
summary
[[ $failed -eq 0 ]]
