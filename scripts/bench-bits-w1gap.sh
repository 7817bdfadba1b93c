#!/usr/bin/env bash
# Issue 26's W1 lookup gap, suspect by suspect (BenchmarkBitsW1Gap in
# bits_w1gap_linux_test.go): builds the root package's test binary at the
# working tree, runs the benchmark COUNT times (each a round: its rows in
# rotating order within it) and prints, per sub-benchmark and row, the
# median over rounds of the row's per-round median time ÷ atomic-words'
# (min-max over rounds) and the median ns/op. Raw output in OUTDIR.
#
# Usage: scripts/bench-bits-w1gap.sh OUTDIR
# Environment: COUNT (default 5) rounds, ITERS (default 15) b.Loop
# iterations per round, BENCH (default BenchmarkBitsW1Gap) the -bench
# pattern.
set -euo pipefail
out="$1"
mkdir -p "$out"
count="${COUNT:-5}"
iters="${ITERS:-15}"
bench="${BENCH:-BenchmarkBitsW1Gap}"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/root.test" .
{
	echo "go test -c .; root.test -test.run '^\$' -test.bench '$bench' -test.benchtime ${iters}x -test.count $count"
	echo "revision: $(git rev-parse --short HEAD) $(git status --porcelain | grep -q . && echo '(with uncommitted changes)')"
	echo "load before: $(cat /proc/loadavg)"
} >"$out/command.txt"
(cd "$bin" && TMPDIR="$bin" ./root.test -test.run '^$' -test.bench "$bench" -test.benchtime "${iters}x" -test.count "$count") >"$out/raw.txt"
echo "load after: $(cat /proc/loadavg)" >>"$out/command.txt"
scripts/bits-w1gap-summary.sh "$out/raw.txt" | tee "$out/summary.txt"
