#!/usr/bin/env bash
# W6's bit sets and flush at engine level, designs side by side (issue 26):
# builds the root package's test binary at each revision given (from `git
# archive`, so the working tree is never touched; the benchmark file
# bits_bench_test.go of the working tree is copied into each, so that older
# revisions run the same benchmark), then runs
# `-test.bench 'BenchmarkBitsW6$'` with the binaries in rotating order (run
# r starts with revision r mod N), RUNS times each. BenchmarkBitsW6 pairs
# each round with coalesce+apply-words+msync in the same process, so its
# ratios (speedup, speedup-flush: baseline ÷ kvbuf, medians of the rounds)
# are what to compare between revisions on a shared machine; the script
# prints per revision the median over runs (min-max of the runs) of those,
# and of kvbuf-ns/set, admission-ns/set, overlay-ns/set, coalesce-ns/set,
# kvbuf-flush-cpu-ns and apply-cpu-ns. Every run's output is kept in OUTDIR.
#
# Usage: scripts/bench-bits-w6.sh OUTDIR REV...
#   e.g. scripts/bench-bits-w6.sh /tmp/w6 main HEAD
#
# Environment: RUNS (default 5) runs of each revision, ITERS (default 12)
# b.Loop iterations (-test.benchtime ITERSx) per run.
. "$(dirname "$0")/lib/revisions.sh"

revs_args bitsw6 "$@"
runs="${RUNS:-5}"
iters="${ITERS:-12}"

for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	cp "$repo/bits_bench_test.go" "$work/src$i/"
	(cd "$work/src$i" && go test -c -o "$work/kvbuf$i.test" .)
	note_rev "$i" "${revs[$i]}"
done
args=(-test.run '^$' -test.bench 'BenchmarkBitsW6$' -test.benchtime "${iters}x")
echo "RUNS=$runs; each run: kvbuf.test ${args[*]}" >"$out/command.txt"
n=${#revs[@]}
run_one() { # run_one RUN I
	(cd "$work" && TMPDIR="$work" "$work/kvbuf$2.test" "${args[@]}") >"$out/rev$2-run$1.txt"
}
rotate "$runs" "$n" run_one

metrics=(speedup speedup-flush speedup-setmany speedup-pwrite speedup-flush-pwrite speedup-setmany-pwrite pwrite-words+sync-ns pwrite-cpu-ns setmany-ns/set setmany-flush-ns setmany-flush-cpu-ns kvbuf-ns/set admission-ns/set overlay-ns/set coalesce-ns/set kvbuf-flush-ns apply-words+msync-ns kvbuf-flush-cpu-ns apply-cpu-ns)
for ((i = 0; i < n; i++)); do
	echo "revision $i = ${revs[$i]}"
	for m in "${metrics[@]}"; do
		vals=$(cat "$out"/rev$i-run*.txt | awk -v m="$m" '/^BenchmarkBitsW6/ { for (k = 1; k < NF; k++) if ($(k+1) == m) print $k }' | sort -g)
		[[ -n "$vals" ]] || continue
		echo "$vals" | awk -v m="$m" '{ v[NR] = $1 } END { printf "  %-22s %10.4g  (%.4g-%.4g, %d runs)\n", m, v[int((NR+1)/2)], v[1], v[NR], NR }'
	done
done | tee "$out/summary.txt"
