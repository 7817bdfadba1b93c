#!/usr/bin/env bash
# Issue 20: is Flush latency on a busy machine (a flush every 10 ms: p50
# 5-40 ms, p99 80-470 ms against a 1.4 ms raw fsync) only CPU starvation?
#
# Runs, in one go and in rotating order, with the machine as it is
# ("as-is") and with HOGS extra processes spinning at normal priority
# ("hogs"):
#
#   - BenchmarkFlushLatency (root package): W7's write load (100k puts/s)
#     with a Flush every 10 ms; reports Flush p50/p99, the p50/p99 of a raw
#     4 KiB write + fdatasync next to the engine, and how late a goroutine
#     sleeping 1 ms wakes (scheduling delay), all from the same run;
#   - kvtool bench --quick --workload W7: reads under that load, kvbuf and
#     its baseline, whose ratio says whether the load slows both alike.
#
# Raw output goes to OUT (default doc/bench/<UTC date>-flush-latency/),
# with machine.txt (load average, revision).
#
# Usage: scripts/flush-latency.sh [OUT]   (HOGS, default nproc; ROUNDS,
# default 3; about 5 minutes on an idle machine, more on a busy one)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-doc/bench/$(date -u +%F)-flush-latency}"
hogs="${HOGS:-$(nproc)}"
rounds="${ROUNDS:-3}"
mkdir -p "$out"
{
	date -u
	uptime
	echo "nproc: $(nproc); hogs: $hogs; rounds: $rounds"
	grep -m1 'model name' /proc/cpuinfo || true
	go version
	echo "revision: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	git status --short 2>/dev/null | sed 's/^/  /' || true
} >"$out/machine.txt"

go build -o "$out/kvtool.bin" ./cmd/kvtool
go test -c -o "$out/kvbuf.test" .
trap 'rm -f "$out/kvtool.bin" "$out/kvbuf.test"; [ -n "${pids:-}" ] && kill $pids 2>/dev/null || true' EXIT

pids=""
start_hogs() {
	pids=""
	for _ in $(seq "$hogs"); do
		sh -c 'while :; do :; done' &
		pids="$pids $!"
	done
}
stop_hogs() {
	# shellcheck disable=SC2086
	[ -n "$pids" ] && kill $pids 2>/dev/null || true
	wait 2>/dev/null || true
	pids=""
}

measure() { # mode
	local mode="$1"
	echo "== $mode: BenchmarkFlushLatency ($(uptime))" | tee -a "$out/flush-latency.txt"
	"$out/kvbuf.test" -test.run '^$' -test.bench '^BenchmarkFlushLatency$' -test.benchtime 300x 2>&1 | grep -E '^(Benchmark|goos|cpu)' | sed "s/^/$mode /" | tee -a "$out/flush-latency.txt"
	echo "== $mode: kvtool bench --quick --workload W7 ($(uptime))" | tee -a "$out/w7.txt"
	"$out/kvtool.bin" bench --quick --workload W7 2>&1 | sed "s/^/$mode /" | tee -a "$out/w7.txt"
}

for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then
		measure as-is
		start_hogs; measure hogs; stop_hogs
	else
		start_hogs; measure hogs; stop_hogs
		measure as-is
	fi
done
