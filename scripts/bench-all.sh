#!/usr/bin/env bash
# Runs every benchmark that doc/workloads.md and the design notes quote, one
# after the other (never in parallel: this is a 2-core machine), and saves
# the raw output under OUT (default doc/bench/<UTC date>/, or
# doc/bench/<UTC date>-<hhmm>/ if that exists), with machine.txt
# describing the machine and the revision. Compare figures as ratios within
# one file; `go run golang.org/x/perf/cmd/benchstat@latest FILE` reads the
# go test ones.
#
# Order: the implementations of a workload run in rotating order. kvtool
# bench interleaves them round by round (round r starts at implementation r
# mod n). go test runs a sub-benchmark's -count repetitions back to back, so
# the internal/bench packages are run five times with -count 1 instead, the
# k-th with -rotate=k (it starts every workload at implementation k mod n);
# benchstat reads the five samples of each row from the one file. The flush
# package's W4 is run interleaved (BenchmarkW4Interleaved).
#
# Usage: scripts/bench-all.sh [--engine-only] [OUT]    (about 70 minutes
# here; --engine-only runs only the two kvtool bench steps at the end, the
# README's table, in about a third of that)
set -euo pipefail
cd "$(dirname "$0")/.."
engine_only=0
if [ "${1:-}" = "--engine-only" ]; then
	engine_only=1
	shift
fi
out="${1:-}"
if [ -z "$out" ]; then
	out="doc/bench/$(date -u +%F)"
	[ -e "$out" ] && out="doc/bench/$(date -u +%F-%H%M)"
fi
mkdir -p "$out"
{
	date -u
	uptime
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	go version
	echo "revision: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	git status --short 2>/dev/null | sed 's/^/  /' || true
} >"$out/machine.txt"

run() { # name, package, then go test arguments
	local name="$1" pkg="$2"
	shift 2
	echo "== $name: go test $pkg -run '^\$' $* ($(uptime))" | tee "$out/$name.txt"
	go test "$pkg" -run '^$' "$@" 2>&1 | tee -a "$out/$name.txt"
}

rotated() { # name, package, then go test arguments: five runs, -rotate=0..4
	local name="$1" pkg="$2"
	shift 2
	echo "== $name: go test $pkg -run '^\$' $* -rotate=k for k in 0..4 ($(uptime))" | tee "$out/$name.txt"
	for k in 0 1 2 3 4; do
		go test "$pkg" -run '^$' "$@" -rotate="$k" 2>&1 | tee -a "$out/$name.txt"
	done
}

if [ "$engine_only" = 0 ]; then
# The workloads (internal/bench): the same code as kvtool bench. Parallel
# workloads (W1 and W2 lookups, W3) run in GOMAXPROCS goroutines: -cpu 1,2.
rotated w1 ./internal/bench -bench '^BenchmarkW1$' -benchtime 500ms -cpu 1,2 -timeout 60m
rotated w2 ./internal/bench -bench '^BenchmarkW2$' -benchtime 500ms -cpu 1,2 -timeout 60m
rotated w3 ./internal/bench -bench '^BenchmarkW3$' -benchtime 200ms -cpu 1,2 -timeout 60m
rotated w4 ./internal/bench -bench '^BenchmarkW4$' -benchtime 3x -timeout 60m
rotated w6 ./internal/bench -bench '^BenchmarkW6$' -benchtime 3x -timeout 60m
rotated w7 ./internal/bench -bench '^BenchmarkW7$' -benchtime 3x -timeout 60m
rotated w8 ./internal/bench -bench '^BenchmarkW8$' -benchtime 3x -timeout 60m

# Floors and component benchmarks of the packages underneath.
run bitslice ./bitslice -bench '^(BenchmarkW1|BenchmarkReadPath|BenchmarkW6)$' -count 5 -cpu 1,2
run storage-get ./storage -bench '^BenchmarkStoreGet(Overhead)?$' -count 5
run storage-w6 ./storage -bench '^(BenchmarkW6|BenchmarkCommitPipeline)$' -benchtime 3x -count 5 -timeout 60m
run w4-flush ./flush -bench '^BenchmarkW4Interleaved$' -benchtime 5x -count 5
run w5-flush ./flush -bench '^BenchmarkW5$' -benchtime 200ms -count 5 -cpu 1,2
fi

# The engine-level side-by-side runs (README table and chart).
echo "== kvtool bench --svg $out/bench.svg ($(uptime))" | tee "$out/kvtool-bench.txt"
go run ./cmd/kvtool bench --svg "$out/bench.svg" 2>/dev/null | tee -a "$out/kvtool-bench.txt"
echo "== kvtool bench --cpu 1,2 (W1 and W2 lookups) ($(uptime))" | tee "$out/kvtool-bench-cpu.txt"
go run ./cmd/kvtool bench --cpu 1,2 --workload '^W1/lookup-with(out)?-pending-changes$|^W2/get-(pending-hit|pending-tombstone|miss|mixed)$' 2>/dev/null |
	tee -a "$out/kvtool-bench-cpu.txt"
