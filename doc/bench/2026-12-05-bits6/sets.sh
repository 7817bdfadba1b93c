#!/usr/bin/env bash
# SetMany's designs at buffer level (issue 26, bits6): BenchmarkBitsSets
# (package internal/buffer: SetMany coalescing, a loop of Set, SetMany bit
# by bit, and the baseline's coalescing into dense (mask, value) words, in
# rotating order within each b.Loop iteration, the flush untimed) built at
# each revision given, the binaries run in rotating order RUNS times. The
# benchmark file of the working tree is copied into each revision, so that
# all run the same rows. Compare coalesce-dense/setmany (the baseline's
# coalescing time over SetMany's, in one process: above 1, SetMany is the
# faster) between revisions.
# Usage: doc/bench/2026-12-05-bits6/sets.sh OUTDIR REV...
. "$(dirname "$0")/../../../scripts/lib/revisions.sh"

need_args 2 "OUTDIR REV..." "$@"
out_dir "$1"
shift
revs=("$@")
work_dir bits6sets
: >"$out/revisions.txt"
for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	cp "$repo/internal/buffer/bits_bench_test.go" "$work/src$i/internal/buffer/"
	(cd "$work/src$i" && go test -c -o "$work/b$i.test" ./internal/buffer)
	note_rev "$i" "${revs[$i]}"
done
args=(-test.run '^$' -test.bench 'BenchmarkBitsSets$' -test.benchtime "${ITERS:-10}x")
echo "RUNS=${RUNS:-4}; each run: buffer.test ${args[*]}" >"$out/command.txt"
run_one() { # run_one RUN I
	(cd "$work" && "$work/b$2.test" "${args[@]}") >"$out/rev$2-run$1.txt"
}
rotate "${RUNS:-4}" "${#revs[@]}" run_one
for i in "${!revs[@]}"; do
	echo "revision $i = ${revs[$i]}"
	for m in setmany-ns/set coalesce-dense-ns/set coalesce-dense/setmany setmany-bits/setmany set-loop/setmany; do
		cat "$out"/rev$i-run*.txt | awk -v m="$m" '/^BenchmarkBitsSets/ { for (k = 1; k < NF; k++) if ($(k+1) == m) print $k }' | sort -g |
			awk -v m="$m" 'NF { v[NR] = $1 } END { if (NR) printf "  %-24s %10.4g  (%.4g-%.4g, %d runs)\n", m, v[int((NR+1)/2)], v[1], v[NR], NR }'
	done
done | tee "$out/summary.txt"
