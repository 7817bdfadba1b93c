#!/usr/bin/env bash
# Issue 26's W1 lookup gap, suspect by suspect (BenchmarkBitsW1Gap in
# bits_w1gap_linux_test.go): builds the root package's test binary at each
# revision given (from `git archive`, which must hold the benchmark), then
# RUNS times, in rotating order (run r starts with revision r mod N), runs
# each revision's binary once with -test.benchtime ITERS x (rows in
# rotating order within it). Prints per revision, sub-benchmark and metric
# the median over runs (min-max over runs) of the per-run medians: the
# ratios are times ÷ atomic-words' in the same block or pass (below 1:
# faster). Every run's output is kept in OUTDIR.
#
# Usage: scripts/bench-bits-w1gap.sh OUTDIR REV...
#   e.g. scripts/bench-bits-w1gap.sh /tmp/gap HEAD~1 HEAD
# Environment: RUNS (default 3), ITERS (default 10), BENCH (default
# BenchmarkBitsW1Gap) the -test.bench pattern.
. "$(dirname "$0")/lib/revisions.sh"

revs_args bitsw1gap "$@"
runs="${RUNS:-3}"
iters="${ITERS:-10}"
bench="${BENCH:-BenchmarkBitsW1Gap}"
for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	(cd "$work/src$i" && go test -c -o "$work/root$i.test" .)
	note_rev "$i" "${revs[$i]}"
done
bargs=(-test.run '^$' -test.bench "$bench" -test.benchtime "${iters}x")
{
	echo "RUNS=$runs; each run, per revision: root.test ${bargs[*]}"
	echo "load before: $(cat /proc/loadavg)"
} >"$out/command.txt"
n=${#revs[@]}
run_one() { # run_one RUN I
	(cd "$work" && TMPDIR="$work" "$work/root$2.test" "${bargs[@]}") >"$out/rev$2-run$1.txt"
}
rotate "$runs" "$n" run_one
echo "load after: $(cat /proc/loadavg)" >>"$out/command.txt"
for ((i = 0; i < n; i++)); do
	echo "revision $i = ${revs[$i]}"
	cat "$out"/rev"$i"-run*.txt >"$work/all$i.txt"
	"$repo/scripts/bits-w1gap-summary.sh" "$work/all$i.txt"
done | tee "$out/summary.txt"
