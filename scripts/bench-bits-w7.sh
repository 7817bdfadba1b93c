#!/usr/bin/env bash
# W7's bit lookups over the overlay, designs side by side (issue 26): builds
# the buffer package's test binary at each revision given (from `git
# archive`, so the working tree is never touched; the benchmark file
# internal/buffer/bits_w7_bench_test.go of the working tree is copied into each, so
# that older revisions run the same benchmark), then runs
# `-test.bench 'BenchmarkBitsW7$'` with the binaries in rotating order (run
# r starts with revision r mod N), RUNS times each, and prints per revision
# the median over runs (min-max of the runs) of each run's median ratios:
# writer/no-writer (W7), writer-no-flush/no-writer and
# few-pending/no-writer, and the median ns per lookup of each state. Only
# the ratios are worth comparing on a shared machine. Every run's output is
# kept in OUTDIR.
#
# Usage: scripts/bench-bits-w7.sh OUTDIR REV...
#   e.g. scripts/bench-bits-w7.sh /tmp/w7 main HEAD
#
# Environment: RUNS (default 5) runs of each revision, ITERS (default 20)
# b.Loop iterations (-test.benchtime ITERSx) per run.
. "$(dirname "$0")/lib/revisions.sh"

revs_args bitsw7 "$@"
runs="${RUNS:-5}"
iters="${ITERS:-20}"

for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	pkg=$(buffer_pkg "$work/src$i")
	cp "$repo/internal/buffer/bits_w7_bench_test.go" "$work/src$i/$pkg/"
	(cd "$work/src$i" && go test -c -o "$work/buffer$i.test" "./$pkg")
	note_rev "$i" "${revs[$i]}"
done
args=(-test.run '^$' -test.bench 'BenchmarkBitsW7$' -test.benchtime "${iters}x")
echo "RUNS=$runs; each run: buffer.test ${args[*]} (from $work/buffer)" >"$out/command.txt"
n=${#revs[@]}
run_one() { # run_one RUN I
	(cd "$work" && TMPDIR="$work" "$work/buffer$2.test" "${args[@]}") >"$out/rev$2-run$1.txt"
}
rotate "$runs" "$n" run_one

for ((i = 0; i < n; i++)); do
	echo "revision $i = ${revs[$i]}"
	cat "$out"/rev"$i"-run*.txt | grep '^BenchmarkBitsW7' | awk '
		{ for (f = 3; f < NF; f += 2) v[$(f + 1)] = v[$(f + 1)] " " $f }
		function med(s,   a, k, n, j, t) {
			n = split(s, a, " ")
			for (k = 2; k <= n; k++) for (j = k; j > 1 && a[j] + 0 < a[j - 1] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
			return sprintf("%.2f (%.2f-%.2f)", a[int((n + 1) / 2)], a[1], a[n])
		}
		END {
			split("writer/no-writer writer-no-flush/no-writer few-pending/no-writer no-writer-ns/op few-pending-ns/op writer-no-flush-ns/op writer-ns/op", m, " ")
			for (k = 1; k <= 7; k++) printf "  %-26s %s\n", m[k], med(v[m[k]])
		}'
done | tee "$out/summary.txt"
