#!/usr/bin/env bash
# Before/after comparison of two revisions with a Go benchmark of one
# package: builds the package's test binary at each revision (from `git
# archive`, so the working tree is never touched; the files named in
# OVERLAY are taken from NEWREV into both, so a benchmark added with the
# change runs on the old code too), runs the benchmark with the two
# binaries alternately (old, new, new, old, ...: the order rotates every
# round), ROUNDS runs of each, and prints per sub-benchmark the median
# ns/op of each revision, the median of the per-round new/old ratios and
# their range. With PAIR=a/b (two sub-benchmark name suffixes, such as
# kvbuf-iter/pebble-iter) it also prints, per revision, the median and
# range of the per-run ratios a/b: a ratio within one run is what to
# compare on a shared machine.
#
# Usage: scripts/gobench-compare.sh OLDREV NEWREV PKG BENCH [OUTDIR]
#   e.g. OVERLAY=storage/bench_test.go PAIR=kvbuf-iter/pebble-iter \
#        scripts/gobench-compare.sh 608254b 3a32306 ./storage BenchmarkStoreScan
#
# Environment: ROUNDS (default 5), BENCHTIME (default 1s), OVERLAY, PAIR,
# BENCH_LOCK (a lock file held during each run, not the builds).
. "$(dirname "$0")/lib/revisions.sh"

need_args 4 "OLDREV NEWREV PKG BENCH [OUTDIR]" "$@"
old="$1" new="$2" pkg="$3" bench="$4"
rounds="${ROUNDS:-5}"
benchtime="${BENCHTIME:-1s}"
work_dir gobench
out_dir "${5:-$work/out}"

build() { # build REV NAME
	local rev="$1" name="$2" f
	archive "$rev" "$work/$name"
	for f in ${OVERLAY:-}; do
		(cd "$repo" && git show "$new:$f") >"$work/$name/$f"
	done
	(cd "$work/$name" && go test -c -o "$work/$name.test" "$pkg")
	echo "$name = $(short_rev "$rev")" | tee -a "$out/revisions.txt" >&2
}
: >"$out/revisions.txt"
build "$old" old
build "$new" new
echo "go test $pkg -run '^\$' -bench '$bench' -benchtime $benchtime (ROUNDS=$rounds, OVERLAY=${OVERLAY:-})" >"$out/command.txt"
for ((r = 1; r <= rounds; r++)); do
	order=(old new)
	((r % 2 == 0)) && order=(new old)
	for name in "${order[@]}"; do
		echo "round $r: $name" >&2
		(cd "$work/$name/$pkg" && locked "$work/$name.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime") >"$out/$name-$r.txt"
	done
done

awk -v rounds="$rounds" -v pair="${PAIR:-}" '
	function median(list,   a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	function lo(list,   a, n, i, m) { n = split(list, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] + 0 < m + 0) m = a[i]; return m }
	function hi(list,   a, n, i, m) { n = split(list, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] + 0 > m + 0) m = a[i]; return m }
	FNR == 1 { split(FILENAME, p, "/"); f = p[length(p)]; sub(/\.txt$/, "", f); split(f, q, "-"); rev = q[1]; run = q[2] }
	/^Benchmark/ && $4 == "ns/op" {
		name = $1; sub(/-[0-9]+$/, "", name)
		ns[rev, run, name] = $3; names[name] = 1
	}
	END {
		split(pair, pp, "/")
		printf "%-52s %14s %14s %10s %s\n", "benchmark", "old ns/op", "new ns/op", "new/old", "(range over rounds)"
		for (name in names) {
			lo_ = ""; ol = ""; nl = ""; rl = ""
			for (r = 1; r <= rounds; r++) {
				if ((("old", r, name) in ns) && (("new", r, name) in ns)) {
					ol = ol " " ns["old", r, name]; nl = nl " " ns["new", r, name]
					rl = rl " " ns["new", r, name] / ns["old", r, name]
				}
			}
			if (rl == "") continue
			printf "%-52s %14.0f %14.0f %10.3f [%.3f, %.3f]\n", name, median(ol), median(nl), median(rl), lo(rl), hi(rl)
		}
		if (pair == "") exit
		print ""
		printf "%-40s %-4s %10s %s\n", "pair " pair, "rev", "median", "(range over runs)"
		for (name in names) {
			if (substr(name, length(name) - length(pp[1]) + 1) != pp[1]) continue
			base = substr(name, 1, length(name) - length(pp[1]))
			other = base pp[2]
			if (!(other in names)) continue
			for (i = 1; i <= 2; i++) {
				rev = i == 1 ? "old" : "new"
				rl = ""
				for (r = 1; r <= rounds; r++) if (((rev, r, name) in ns) && ((rev, r, other) in ns)) rl = rl " " ns[rev, r, name] / ns[rev, r, other]
				if (rl != "") printf "%-40s %-4s %10.3f [%.3f, %.3f]\n", base, rev, median(rl), lo(rl), hi(rl)
			}
		}
	}
' "$out"/old-*.txt "$out"/new-*.txt | tee "$out/summary.txt"
