#!/usr/bin/env bash
# Runs every benchmark the issue notes and the README quote, one after the
# other (never in parallel: this is a 2-core machine), writing raw output to
# OUT (default bench-results/). Figures are compared as ratios within one
# run; `benchstat` (go run golang.org/x/perf/cmd/benchstat@latest) reads
# the .txt files.
#
# Usage: scripts/bench-all.sh [OUT]    (about 30 minutes here)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results}"
mkdir -p "$out"
run() { # name, then go test arguments
	local name="$1"
	shift
	echo "== $name: go test $*" | tee "$out/$name.txt"
	go test -run '^$' "$@" 2>&1 | tee -a "$out/$name.txt"
}
# W1: the overlay against the maps, and the raw floor (buffer, bitslice).
run w1-buffer -bench '^BenchmarkW1$' -benchtime 3x -count 5 -cpu 1,2 ./buffer
run w1-bitslice -bench '^BenchmarkW1$|^BenchmarkReadPath$' -count 5 -cpu 1,2 ./bitslice
# W2: KV overlay over pebble; storage's own Get against raw pebble.
run w2-buffer -bench '^BenchmarkW2$' -benchtime 300ms -count 5 -timeout 60m ./buffer
run storage-get -bench '^BenchmarkStoreGet$' -benchtime 300000x -count 5 ./storage
# W3: contended table, 1 and 2 goroutines (2 cores), and construction.
run w3-buffer -bench '^BenchmarkW3$' -benchtime 200ms -count 5 -cpu 1,2 ./buffer
# W4/W5: flush coalescing and the drain gate.
run w4-flush -bench '^BenchmarkW4$' -benchtime 5x -count 5 ./flush
run w5-flush -bench '^BenchmarkW5$' -benchtime 200ms -count 5 -cpu 1,2 ./flush
# W6: flush throughput, KV and bits.
run w6-buffer -bench '^BenchmarkW6' -benchtime 3x -count 5 -timeout 60m ./buffer
run pool-buffer -bench '^BenchmarkPoolCycle$' -benchtime 20x -count 5 ./buffer
# The engine-level side-by-side run (README table and chart).
echo "== kvtool bench" | tee "$out/kvtool-bench.txt"
go run ./cmd/kvtool bench --svg "$out/bench.svg" 2>/dev/null | tee -a "$out/kvtool-bench.txt"
