#!/usr/bin/env bash
# Compares revisions of the change feed with BenchmarkW8Watch
# (watch_bench_test.go; BENCH names another of its benchmarks): builds
# the root package's test binary at each revision (from `git archive`,
# the working tree untouched; the files in
# OVERLAY are taken from the last revision into every build, so a
# benchmark changed with the feed runs on the older code too), then runs
# the benchmark with each binary in turn, ROUNDS times, the order rotating
# every round, and prints every run's metrics: the per-mode ratios to the
# unwatched mode within that run (medians of its rounds, with their
# spread), the durable delivery p50/p99 and the feed's own part after the
# watermark. Compare revisions by their within-run ratios: absolute times
# move on a shared machine.
#
# At the end it prints, per revision and metric, the median over the runs
# and their range (summarize; `scripts/watch-ab.sh --summarize DIR` does
# it again for a kept OUT directory).
#
# Usage: scripts/watch-ab.sh REV... (e.g. scripts/watch-ab.sh 9cab197~1 9cab197)
# Environment: BENCH (default BenchmarkW8Watch), ROUNDS (default 3), BENCHTIME (default 6x: rounds of every
# mode per run), MODES (KVBUF_WATCH_MODES, default none,visible,durable),
# OVERLAY (default watch_bench_test.go), OUT (a directory to keep the raw
# output in), BENCH_LOCK (a lock file each run holds: scripts/lib/revisions.sh's
# locked).
. "$(dirname "$0")/lib/revisions.sh"

summarize() { # summarize DIR: median (min-max) per revision and metric over the runs
	local dir="$1" f
	for f in "$dir"/r*-*.txt; do
		grep -H '^Benchmark' "$f" || true
	done | awk '
		function median(list,   a, n, i, j, t) {
			n = split(list, a, " ")
			for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
			return (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
		}
		{
			rev = $1; sub(/.*\//, "", rev); sub(/-[0-9]+\.txt:.*/, "", rev)
			for (i = 3; i < NF; i += 2) {
				k = rev " " $(i+1); v[k] = v[k] " " $i
				if (!(k in lo) || $i + 0 < lo[k]) lo[k] = $i + 0
				if (!(k in hi) || $i + 0 > hi[k]) hi[k] = $i + 0
				n[k]++
			}
		}
		END { for (k in v) printf "%s %.4g (%.4g-%.4g, %d runs)\n", k, median(substr(v[k], 2)), lo[k], hi[k], n[k] }' | sort
}
if [[ "${1:-}" == --summarize ]]; then
	summarize "$2"
	exit 0
fi
need_args 1 "REV..." "$@"
rounds="${ROUNDS:-3}"
bench="${BENCH:-BenchmarkW8Watch}"
benchtime="${BENCHTIME:-6x}"
overlay="${OVERLAY-watch_bench_test.go}"
work_dir watchab
out_dir "${OUT:-$work/out}"
revs=("$@")
last="${revs[$((${#revs[@]} - 1))]}"
for i in "${!revs[@]}"; do
	rev="${revs[$i]}"
	archive "$rev" "$work/r$i"
	for f in $overlay; do
		(cd "$repo" && git show "$last:$f") >"$work/r$i/$f"
	done
	(cd "$work/r$i" && go test -c -o "$work/r$i.test" .)
	echo "r$i = $rev ($(short_rev "$rev"))" | tee -a "$out/revisions.txt"
done
echo "$bench -benchtime $benchtime, ROUNDS=$rounds, MODES=${MODES:-all}" | tee "$out/command.txt"
n=${#revs[@]}
run_one() { # run_one I ROUND: one run of revision I's binary (under BENCH_LOCK if set)
	(cd "$work/r$1" && KVBUF_WATCH_MODES="${MODES:-}" "$work/r$1.test" -test.run '^$' \
		-test.bench "^$bench\$" -test.benchtime "$benchtime") >"$out/r$1-$2.txt"
}
for ((r = 0; r < rounds; r++)); do
	for ((k = 0; k < n; k++)); do
		i=$(((k + r) % n))
		locked run_one "$i" "$r"
		echo "round $r r$i: $(grep "^$bench-" "$out/r$i-$r.txt" | tr -s ' \t' ' ' | cut -d' ' -f3-)"
	done
done
summarize "$out"
