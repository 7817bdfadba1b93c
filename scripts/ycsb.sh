#!/usr/bin/env bash
# Produces the YCSB tables of the README and doc/workloads.md from kvtool
# ycsb runs, and saves the raw output under OUT (default
# doc/bench/<UTC date>-ycsb/):
#
#   machine.txt              machine, revision, load before and after
#   defaults.jsonl/.md       kvbuf with default Options (1 s flush interval,
#                            64 MiB pending, 8 MiB cache) against pebble,
#                            badger and bbolt given the same memory
#   tuned.jsonl/.md          the same with kvbuf's FlushInterval 5 s and
#                            MaxPendingBytes 256 MiB (doc/workloads.md,
#                            "YCSB"): the other engines follow (their
#                            memtables 256 MiB, their syncs every 5 s)
#   time.txt                 how long each step took
#
# Each run covers workloads A-F at 1 and 4 threads on 1M records of 1 KB, in
# both durability modes (window: the same loss window, kvbuf's writes going
# through a host log; acked: every write durable when it returns), ROUNDS
# rotating rounds, every run timed through its Close. Paste the .md files
# into the docs as they are: the tables are generated, never edited by
# hand.
#
# Environment: ROUNDS (default 3), RECORDS (1000000), OPS (1000000),
# MAX_TIME (30s per measured run), THREADS (1,4), DURABILITY (window,acked),
# STEPS (defaults,tuned). Run it on a quiet machine: with the defaults it
# takes several hours on 2 cores (the acked mode syncs on every write).
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
durability="${DURABILITY:-window,acked}"
steps="${STEPS:-defaults,tuned}"
{
	date -u
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	go version
	echo "revision: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	git status --short 2>/dev/null | sed 's/^/  modified: /' || true
	echo "rounds=$rounds records=$records ops=$ops max_time=$max_time threads=$threads durability=$durability steps=$steps"
} >"$out/machine.txt"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/kvtool" ./cmd/kvtool
common=(--records "$records" --ops "$ops" --rounds "$rounds" --max-time "$max_time" --threads "$threads"
	--durability "$durability" --json)
: >"$out/time.txt"
for step in ${steps//,/ }; do
	start=$SECONDS
	case "$step" in
	defaults)
		"$bin/kvtool" ycsb "${common[@]}" --markdown "$out/defaults.md" >"$out/defaults.jsonl"
		;;
	tuned)
		# kvbuf as a host with this workload would size it: flushes every
		# 5 s and up to 256 MiB pending; the other engines get the same
		# memory and loss window (doc/workloads.md, "YCSB").
		"$bin/kvtool" ycsb "${common[@]}" \
			-p kvbuf.flush_interval=5s -p kvbuf.max_pending_bytes=268435456 \
			--markdown "$out/tuned.md" >"$out/tuned.jsonl"
		;;
	*)
		echo "ycsb.sh: unknown step $step (want defaults, tuned)" >&2
		exit 2
		;;
	esac
	echo "$step: $((SECONDS - start)) s" >>"$out/time.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)" >>"$out/machine.txt"
cat "$out/time.txt"
