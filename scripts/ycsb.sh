#!/usr/bin/env bash
# Produces the YCSB table of the README and doc/workloads.md from one run of
# kvtool ycsb, and saves the raw output under OUT (default
# doc/bench/<UTC date>-ycsb/): machine.txt (machine and revision),
# tuned.jsonl and tuned.md (every engine, workloads A-F at 1 and 4 threads,
# 1M records of 1 KB, kvbuf with the options of doc/workloads.md, "YCSB"),
# defaults.jsonl and defaults.md (the same for kvbuf with default Options
# and pebble), and time.txt. Paste tuned.md and defaults.md into the docs
# as they are: the tables are generated, never edited by hand.
#
# Environment: ROUNDS (default 3), RECORDS (1000000), OPS (1000000),
# MAX_TIME (30s per measured run), THREADS (1,4). Run it on a quiet machine:
# with the defaults it takes about 2 hours here (ROUNDS=1: about 40
# minutes).
#
# Usage: scripts/ycsb.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-}"
if [ -z "$out" ]; then
	out="doc/bench/$(date -u +%F)-ycsb"
	[ -e "$out" ] && out="doc/bench/$(date -u +%F-%H%M)-ycsb"
fi
mkdir -p "$out"
rounds="${ROUNDS:-3}"
records="${RECORDS:-1000000}"
ops="${OPS:-1000000}"
max_time="${MAX_TIME:-30s}"
threads="${THREADS:-1,4}"
{
	date -u
	uptime
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	go version
	echo "revision: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	echo "rounds=$rounds records=$records ops=$ops max_time=$max_time threads=$threads"
} >"$out/machine.txt"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/kvtool" ./cmd/kvtool
common=(--records "$records" --ops "$ops" --rounds "$rounds" --max-time "$max_time" --threads "$threads" --json)
start=$SECONDS
# kvbuf as a host with this workload would run it: flushes every 5 s and up
# to 256 MiB pending (doc/workloads.md, "YCSB").
"$bin/kvtool" ycsb "${common[@]}" \
	-p kvbuf.flush_interval=5s -p kvbuf.max_pending_bytes=268435456 \
	--markdown "$out/tuned.md" >"$out/tuned.jsonl"
echo "tuned: $((SECONDS - start)) s" >"$out/time.txt"
start=$SECONDS
"$bin/kvtool" ycsb "${common[@]}" --db kvbuf,pebble \
	--markdown "$out/defaults.md" >"$out/defaults.jsonl"
echo "defaults: $((SECONDS - start)) s" >>"$out/time.txt"
cat "$out/time.txt"
