#!/usr/bin/env bash
# A/B of W6 through the engine (BenchmarkFlushW6Put: kvbuf/puts and
# kvbuf/batches against pebble's synced batch, within each run) between
# revisions: builds the root package's test binary of each (from `git
# archive`, so the working tree is never touched) and runs the benchmark of
# every revision ROUNDS times in rotating order (run r starts with revision
# r-1 mod N). Each run's ratios are against the pebble rows of the same
# run; the summary prints, per revision and metric, the median over runs
# and the range. For comparing designs of the put path and the flush, not
# for headline figures.
#
# Usage: scripts/w6-ab.sh OUTDIR REV...
#   e.g. scripts/w6-ab.sh /tmp/w6ab HEAD~1 HEAD
# Environment: ROUNDS (default 3) runs of each revision, BENCHTIME (default
# 3x) rounds per run.
. "$(dirname "$0")/lib/revisions.sh"

revs_args w6ab "$@"
rounds="${ROUNDS:-3}"
benchtime="${BENCHTIME:-3x}"
for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/r$i"
	(cd "$work/r$i" && go test -buildvcs=false -c -o "$work/r$i.test" .)
	note_rev "r$i" "${revs[$i]}"
done
echo "ROUNDS=$rounds BENCHTIME=$benchtime scripts/w6-ab.sh $out ${revs[*]}" >"$out/command.txt"
run() { # run RUN I
	(cd "$work" && "./r$2.test" -test.run '^$' -test.bench 'BenchmarkFlushW6Put$' -test.benchtime "$benchtime" -test.timeout 60m) |
		awk -v rev="r$2" -v run="$1" '/^BenchmarkFlushW6Put/ { print "run=" run, "rev=" rev, $0 }' | tee -a "$out/raw.txt" >&2
}
: >"$out/raw.txt"
rotate "$rounds" "${#revs[@]}" run
# Per revision and metric: the median over runs, and the range.
awk '
	function median(a, n,    i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{
		split($2, rr, "=")
		for (i = 5; i < NF; i += 2) { k = rr[2] SUBSEP $(i + 1); v[k, ++c[k]] = $i; m[$(i + 1)] = 1; revs[rr[2]] = 1 }
	}
	END {
		for (name in m) for (rev in revs) {
			k = rev SUBSEP name; n = c[k]
			if (n == 0) continue
			lo = v[k, 1]; hi = v[k, 1]
			for (i = 1; i <= n; i++) { a[i] = v[k, i]; if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
			printf "%-45s %-3s median %10.4g  range %10.4g - %-10.4g (%d runs)\n", name, rev, median(a, n), lo, hi, n
		}
	}
' "$out/raw.txt" | sort | tee "$out/summary.txt"
