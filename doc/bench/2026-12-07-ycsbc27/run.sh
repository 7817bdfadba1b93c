#!/usr/bin/env bash
# The comparison of doc/bench/2026-12-07-ycsbc27 (README.md): kvtool ycsb in
# the suite's order (A, B, then C, at 1 and 4 threads) against pebble, one
# round per invocation, HEAD and the fix alternating, each invocation under
# the shared benchmark lock. Usage: run.sh HEAD_KVTOOL FIX_KVTOOL OUT
set -euo pipefail
head=$1 fix=$2 out=$3
mkdir -p "$out"
run() { # round variant binary
	{ date -u; uptime; } >"$out/load-start-$1-$2.txt"
	flock /tmp/kvbuf-bench.lock "$3" ycsb --records 1000000 --workload a,b,c --threads 1,4 --rounds 1 \
		--max-time 8s --durability window --db kvbuf,pebble --json --cpuprofile "$out/cmp-$1-$2.prof" \
		--dir /tmp >"$out/cmp-$1-$2.jsonl" 2>"$out/cmp-$1-$2.err"
	{ date -u; uptime; } >"$out/load-end-$1-$2.txt"
}
run 1 fix "$fix"
run 1 head "$head"
run 2 head "$head"
run 2 fix "$fix"
