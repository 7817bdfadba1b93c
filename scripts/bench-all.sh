#!/usr/bin/env bash
# Runs every benchmark that the README, doc/workloads.md and doc/design.md
# quote, one after the other (never in parallel: this is a 2-core machine),
# and saves the raw output under OUT (default doc/bench/<UTC date>/, or
# doc/bench/<UTC date>-<hhmm>/ if that exists):
#
#   machine.txt          the machine and the revision: kernel, CPU, Go, the
#                        file system of the benchmark directory (on tmpfs a
#                        sync costs nothing, which changes every flush row),
#                        transparent huge pages, load average before and
#                        after the run
#   kvtool-bench.json    one `kvtool bench --cpu 1,2 --json` run: every row
#                        of every workload, the README table's only source
#   kvtool-bench.md      all of its rows as markdown tables (scripts/benchtable)
#   readme-table.md      the README's headline table from the same run
#   bench.svg            the speedup chart of the same run
#   w*.txt, ...          go test -bench output (full runs only)
#
# Put the README table in place with
#   go run ./scripts/benchtable -w README.md OUT/kvtool-bench.json
#
# Order: the implementations of a workload run in rotating order. kvtool
# bench interleaves them round by round (round r in the order of row r of a
# Williams design, bench.RoundOrder: every implementation at every
# position), at least 7 measured rounds after a warm-up and one per
# implementation when a workload has more; its ratios are computed per
# round and reported with their min-max, and every row has its CPU time
# per operation and reads back what it wrote. go test runs a
# sub-benchmark's -count repetitions back to back, so the bench package is
# run seven times with -count 1 instead, the k-th with -rotate=k (it orders
# every workload's sub-benchmarks as round k), which gives benchstat seven
# samples of each row in one file. Compare figures as ratios within one
# run.
#
# Comparing two runs (for example before and after a change, each made
# with this script on the same quiet machine):
#   go run golang.org/x/perf/cmd/benchstat@latest OLD/w2.txt NEW/w2.txt
# benchstat pairs the rows by name and reports the change of each median
# with its confidence interval (it needs at least 6 samples per row for
# that, hence seven rotated runs). For the kvtool runs, compare the two
# kvtool-bench.md files: each row carries its median and min-max.
#
# Usage: scripts/bench-all.sh [--engine-only] [OUT]
#   --engine-only runs only the kvtool bench step (the README's table; about
#   an hour at full scale on 2 cores), not the go test steps.
# BENCH_DIR (default $TMPDIR or /tmp) is where the engines and stores are
# created; it should be the file system the figures are meant for.
# KVTOOL_BENCH_FLAGS adds flags to the kvtool bench step (for example
# --quick, to check the script end to end in a few minutes; such a run is
# not one to quote). It is recorded in machine.txt.
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
bench_dir="${BENCH_DIR:-${TMPDIR:-/tmp}}"
mkdir -p "$out" "$bench_dir"

thp() { # THP mode: the bracketed word of the sysfs file
	cat "/sys/kernel/mm/transparent_hugepage/$1" 2>/dev/null || echo "unknown"
}
{
	echo "date:        $(date -u)"
	echo "revision:    $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	git status --short 2>/dev/null | sed 's/^/  modified: /' || true
	echo "kernel:      $(uname -srvm)"
	echo "cpu:         $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc)"
	echo "memory:      $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "go:          $(go version)"
	echo "bench dir:   $bench_dir (file system: $(df --output=fstype "$bench_dir" | tail -1))"
	df -hT "$bench_dir" | sed 's/^/  /'
	echo "THP enabled: $(thp enabled)"
	echo "THP defrag:  $(thp defrag)"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "kvtool bench flags: --cpu 1,2 --json ${KVTOOL_BENCH_FLAGS:-}"
} >"$out/machine.txt"

rotated() { # name, then go test arguments: seven runs, -rotate=0..6
	local name="$1"
	shift
	echo "== $name: go test ./bench -run '^\$' $* -benchdir $bench_dir -rotate=k for k in 0..6 (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$out/$name.txt"
	for k in 0 1 2 3 4 5 6; do
		go test ./bench -run '^$' "$@" -benchdir "$bench_dir" -rotate="$k" 2>&1 | tee -a "$out/$name.txt"
	done
}

run() { # name, package, then go test arguments
	local name="$1" pkg="$2"
	shift 2
	echo "== $name: go test $pkg -run '^\$' $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$out/$name.txt"
	go test "$pkg" -run '^$' "$@" 2>&1 | tee -a "$out/$name.txt"
}

if [ "$engine_only" = 0 ]; then
	# The workloads (package bench): the same code as kvtool bench. Parallel
	# workloads (W1 and W2 lookups, W3) run in GOMAXPROCS goroutines: -cpu 1,2.
	rotated w1 -bench '^BenchmarkW1$' -benchtime 500ms -cpu 1,2 -timeout 60m
	rotated w2 -bench '^BenchmarkW2$' -benchtime 500ms -cpu 1,2 -timeout 60m
	rotated w2-memory -bench '^BenchmarkW2Memory$' -benchtime 3x -timeout 60m
	rotated w3 -bench '^BenchmarkW3$' -benchtime 200ms -cpu 1,2 -timeout 60m
	rotated w4 -bench '^BenchmarkW4$' -benchtime 3x -timeout 60m
	rotated w6 -bench '^BenchmarkW6$' -benchtime 3x -timeout 60m
	rotated w7 -bench '^BenchmarkW7$' -benchtime 3x -timeout 60m
	rotated w8 -bench '^BenchmarkW8$' -benchtime 3x -timeout 60m

	# Floors and component benchmarks of the packages underneath.
	run bitslice ./bitslice -bench '^(BenchmarkW1|BenchmarkReadPath|BenchmarkW6)$' -count 7 -cpu 1,2
	run storage-get ./storage -bench '^BenchmarkStoreGet(Overhead)?$' -count 7
	run storage-w6 ./storage -bench '^(BenchmarkW6|BenchmarkCommitPipeline)$' -benchtime 3x -count 7 -timeout 60m
	run w4-flush ./internal/flush -bench '^BenchmarkW4Interleaved$' -benchtime 5x -count 7
	run w5-flush ./internal/flush -bench '^BenchmarkW5$' -benchtime 200ms -count 7 -cpu 1,2
fi

# The engine-level run: every workload, the parallel ones at 1 and 2
# goroutines, one process, one JSON file; the tables and the chart are made
# from it.
# shellcheck disable=SC2086 # KVTOOL_BENCH_FLAGS is a list of flags
echo "== kvtool bench --cpu 1,2 --json --dir $bench_dir ${KVTOOL_BENCH_FLAGS:-} (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
go run ./cmd/kvtool bench --cpu 1,2 --json --dir "$bench_dir" --svg "$out/bench.svg" ${KVTOOL_BENCH_FLAGS:-} >"$out/kvtool-bench.json"
go run ./scripts/benchtable "$out/kvtool-bench.json" >"$out/kvtool-bench.md"
go run ./scripts/benchtable -readme "$out/kvtool-bench.json" >"$out/readme-table.md"

echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
echo "finished:    $(date -u)" >>"$out/machine.txt"
echo "wrote $out (README table: go run ./scripts/benchtable -w README.md $out/kvtool-bench.json)" >&2
