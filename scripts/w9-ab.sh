#!/usr/bin/env bash
# A/B of W9 write rows (doc/workloads.md) between two revisions: builds the
# raftkv test binary of each (from `git archive`, so the repository and its
# worktrees are left alone), runs the selected BenchmarkW9 rows ROUNDS
# times, alternating which revision goes first, and prints per row the
# median writes/s of each and the median and range of the per-round ratios
# NEW / OLD (above 1: NEW is faster). For a regression check of a change to
# the host, not for headline figures (scripts/w9.sh makes those).
#
# Usage: scripts/w9-ab.sh OLD NEW [ROW-REGEXP]
#   ROW-REGEXP defaults to the kvbuf write rows:
#   'BenchmarkW9/writes/clients=(1|16|64)/impl=kvbuf$'
# Environment: ROUNDS (default 3), BENCHTIME (default 2s), OUT (a file to
# keep the raw output in; default a temporary one), ARGS_OLD / ARGS_NEW
# (extra test flags for one side, e.g. OLD and NEW the same revision and
# ARGS_NEW=-w9.nologsync to measure what the raft log's syncs cost, or
# ARGS_OLD=-w9.syncready to compare with the synchronous Ready loop; the
# design flags are listed in doc/workloads.md, W9).
. "$(dirname "$0")/lib/revisions.sh"

need_args 2 "OLD NEW [ROW-REGEXP]" "$@"
cd "$repo"
old="$1"
new="$2"
rows="${3:-BenchmarkW9/writes/clients=(1|16|64)/impl=kvbuf\$}"
rounds="${ROUNDS:-3}"
benchtime="${BENCHTIME:-2s}"
work_dir w9ab
raw="${OUT:-$work/raw.txt}"
: >"$raw"
for side in old new; do
	rev="${!side}"
	archive "$rev" "$work/$side"
	(cd "$work/$side" && go test -buildvcs=false -c -o "$work/$side.test" ./raftkv)
	args=ARGS_${side^^}
	echo "$side = $(short_rev "$rev") ${!args:-}" | tee -a "$raw" >&2
done
for ((r = 0; r < rounds; r++)); do
	order=(old new)
	((r % 2 == 1)) && order=(new old)
	for side in "${order[@]}"; do
		echo "== round $r $side" >&2
		args=ARGS_${side^^}
		# shellcheck disable=SC2086 # the extra flags are words
		(cd "$work" && "./$side.test" -test.run '^$' -test.bench "$rows" -test.benchtime "$benchtime" -test.timeout 60m ${!args:-}) |
			awk -v side="$side" -v round="$r" '/^BenchmarkW9\// { print "round=" round, "side=" side, $0 }' | tee -a "$raw" >&2
	done
done
# Per row: the writes/s metric of each side per round, medians, ratios.
awk '
	function median(a, n,    i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	$1 ~ /^round=/ {
		split($1, rr, "="); split($2, ss, "="); name = $3; sub(/-[0-9]+$/, "", name)
		for (i = 4; i < NF; i++) if ($(i + 1) == "writes/s") v[name, ss[2], rr[2]] = $i
		rows[name] = 1; if (rr[2] + 1 > nr) nr = rr[2] + 1
	}
	END {
		printf "%-55s %12s %12s %8s %17s\n", "row", "old w/s", "new w/s", "new/old", "ratio range"
		for (name in rows) {
			n = 0; no = 0; nn = 0
			for (r = 0; r < nr; r++) {
				if ((name, "old", r) in v) o[++no] = v[name, "old", r]
				if ((name, "new", r) in v) w[++nn] = v[name, "new", r]
				if ((name, "old", r) in v && (name, "new", r) in v) q[++n] = v[name, "new", r] / v[name, "old", r]
			}
			lo = q[1]; hi = q[1]
			for (i = 2; i <= n; i++) { if (q[i] < lo) lo = q[i]; if (q[i] > hi) hi = q[i] }
			printf "%-55s %12.0f %12.0f %8.2f %8.2f-%-8.2f\n", name, median(o, no), median(w, nn), median(q, n), lo, hi
		}
	}' "$raw"
