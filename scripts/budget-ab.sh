#!/usr/bin/env bash
# A/B of W11 (many engines under one MemoryBudget, both policies) between
# revisions: builds kvtool of each (from `git archive`, so the working tree
# is never touched) and runs `kvtool bench --quick --workload '^W11/'`
# (100 engines, 3 rounds after a warm-up) of every revision ROUNDS times in
# rotating order (run r starts with revision r-1 mod N). The summary
# prints, per row and revision, the median over runs and the range of
# TIME/OP (µs), PEAK/BUDGET, GEN/BUDGET and OVER/GEN, and the median and
# range of the per-run ratio of TIME/OP to the first revision's of the same
# run. For comparing designs of the budget, not for headline figures.
#
# Usage: scripts/budget-ab.sh OUTDIR REV...
#   e.g. scripts/budget-ab.sh /tmp/budgetab HEAD~1 HEAD
# Environment: ROUNDS (default 3) runs of each revision; SCALE (default:
# --quick) a kvtool --scale instead.
. "$(dirname "$0")/lib/revisions.sh"

revs_args budgetab "$@"
arg_out="$1" # command.txt names OUTDIR as given
rounds="${ROUNDS:-3}"
size=(--quick)
if [[ -n "${SCALE:-}" ]]; then
	size=(--scale "$SCALE")
fi
for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/r$i"
	(cd "$work/r$i" && go build -buildvcs=false -o "$work/r$i.kvtool" ./cmd/kvtool)
	note_rev "r$i" "${revs[$i]}"
done
echo "ROUNDS=$rounds SCALE=${SCALE:-} scripts/budget-ab.sh $arg_out ${revs[*]}" >"$out/command.txt"
run() { # run RUN I
	"$work/r$2.kvtool" bench "${size[@]}" --workload '^W11/' 2>&1 |
		awk -v rev="r$2" -v run="$1" '/^W11\// {
			t = $4; u = $5
			if (u == "ns") t /= 1000; else if (u == "ms") t *= 1000
			print "run=" run, "rev=" rev, $1, t, $(NF-2), $(NF-1), $NF
		}' | tee -a "$out/raw.txt" >&2
}
: >"$out/raw.txt"
rotate "$rounds" "${#revs[@]}" run
uptime >"$out/load.txt"
awk '
	function median(a, n,    i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	function put(k, x) { v[k, ++c[k]] = x; keys[k] = 1 }
	{
		split($1, rn, "="); split($2, rr, "=")
		row = $3; rows[row] = 1; revs[rr[2]] = 1
		put(row SUBSEP rr[2] SUBSEP "time-us", $4)
		put(row SUBSEP rr[2] SUBSEP "peak", $5)
		put(row SUBSEP rr[2] SUBSEP "gen", $6)
		put(row SUBSEP rr[2] SUBSEP "over-gen", $7)
		tm[row, rr[2], rn[2]] = $4; runs[rn[2]] = 1
	}
	END {
		for (row in rows) for (rev in revs) for (run in runs) if ((row, rev, run) in tm && (row, "r0", run) in tm)
			put(row SUBSEP rev SUBSEP "time/r0", tm[row, rev, run] / tm[row, "r0", run])
		for (k in keys) {
			n = c[k]; lo = v[k, 1]; hi = v[k, 1]
			for (i = 1; i <= n; i++) { a[i] = v[k, i]; if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
			split(k, p, SUBSEP)
			printf "%-40s %-3s %-9s median %8.4g  range %8.4g - %-8.4g (%d runs)\n", p[1], p[2], p[3], median(a, n), lo, hi, n
		}
	}
' "$out/raw.txt" | sort | tee "$out/summary.txt"
