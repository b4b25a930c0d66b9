#!/usr/bin/env bash
# Goal: kcat's balanced consumer (-G, librdkafka) against Millrace: two members share a
# 4-partition topic, commit, leave; a new member resumes exactly at the committed offsets.
# Prints "N passed, M failed"; exits non-zero on any failure.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${MILLRACE_BIN:-$repo/target/debug/millrace}"
work="$(mktemp -d)"
passed=0
failed=0
broker_pid=""
members=()

cleanup() {
    for pid in "${members[@]:-}"; do [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; done
    if [ -n "$broker_pid" ]; then kill -9 "$broker_pid" 2>/dev/null; wait "$broker_pid" 2>/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT

check() { # name, condition result (0 = ok), detail
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1)); echo "ok   $1"
    else
        failed=$((failed + 1)); echo "FAIL $1: $3"
    fi
}

"$bin" --data-dir "$work/data" --listen 127.0.0.1:0 --set num.partitions=4 >"$work/out" 2>"$work/broker.log" &
broker_pid=$!
for _ in $(seq 1 100); do
    grep -q 'listening on' "$work/out" 2>/dev/null && break
    sleep 0.1
done
bs="$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$work/out" | head -1)"
[ -n "$bs" ] || { echo "broker did not start"; echo "0 passed, 1 failed"; exit 1; }

topic=kcat-groups
group=kcat-group
common=(-b "$bs" -X auto.offset.reset=earliest -X enable.auto.commit=true -X auto.commit.interval.ms=200 -X session.timeout.ms=10000)

produce() { # tag, count per partition
    for p in 0 1 2 3; do
        for i in $(seq 1 "$2"); do echo "$1-$p-$i"; done | kcat -P -b "$bs" -t "$topic" -p "$p"
    done
}

produce first 10

# Two members share the topic.
for n in 1 2; do
    kcat -G "$group" "${common[@]}" -u -f '%p %o\n' "$topic" >"$work/m$n.out" 2>"$work/m$n.err" &
    members+=($!)
done
for _ in $(seq 1 300); do
    [ "$(cat "$work/m1.out" "$work/m2.out" | wc -l)" -ge 40 ] && break
    sleep 0.1
done
sleep 2  # let auto-commit run
total="$(cat "$work/m1.out" "$work/m2.out" | sort -u | wc -l)"
check "two members consumed all 40 messages" "$([ "$total" -eq 40 ]; echo $?)" "got $total"
p1="$(cut -d' ' -f1 "$work/m1.out" | sort -u | tr '\n' ' ')"
p2="$(cut -d' ' -f1 "$work/m2.out" | sort -u | tr '\n' ' ')"
check "both members got partitions" "$([ -n "$p1" ] && [ -n "$p2" ]; echo $?)" "m1: [$p1] m2: [$p2]"
overlap="$(comm -12 <(echo "$p1" | tr ' ' '\n' | sort) <(echo "$p2" | tr ' ' '\n' | sort) | grep -c .)"
check "their partitions are disjoint" "$([ "$overlap" -eq 0 ]; echo $?)" "m1: [$p1] m2: [$p2]"

# Leave (SIGTERM: kcat commits and sends LeaveGroup).
for pid in "${members[@]}"; do kill -TERM "$pid" 2>/dev/null; done
for pid in "${members[@]}"; do wait "$pid" 2>/dev/null; done
members=()

produce second 5

# A new member resumes at the committed offsets: it sees exactly the 20 new messages.
timeout 60 kcat -G "$group" "${common[@]}" -f '%p %o %s\n' -e "$topic" >"$work/m3.out" 2>"$work/m3.err"
n3="$(wc -l <"$work/m3.out")"
old="$(grep -c ' first-' "$work/m3.out")"
min_offset="$(cut -d' ' -f2 "$work/m3.out" | sort -n | head -1)"
check "new member got exactly the 20 new messages" "$([ "$n3" -eq 20 ] && [ "$old" -eq 0 ]; echo $?)" "got $n3 ($old old)"
check "new member started at offset 10 (the commit)" "$([ "${min_offset:-x}" = 10 ]; echo $?)" "first offset ${min_offset:-none}"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
