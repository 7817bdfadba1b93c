#!/usr/bin/env bash
# Paired comparison of revisions on package buffer's benchmarks: builds the
# buffer test binary of each revision (from `git archive`, so the working
# tree is never touched), then, ROUNDS times, runs every benchmark row of
# ROWS once with each binary, one row at a time, in an order that rotates
# from round to round and from row to row (so that no revision always runs
# first, or always right after the same one), every run its own process.
# Every run's output is kept in OUTDIR. The summary gives, per row and
# metric (ns/op, cpu-ns/op), the median of each revision and, for every
# revision after the first, the median of its per-round ratios to the
# first revision's run of the same round and row (below 1: faster than the
# first) with their range (min-max): on a shared machine these ratios, of
# two runs close in time, are the figures to quote, not the times.
#
# Usage: scripts/bench-buffer-compare.sh OUTDIR REV REV...
#   e.g. ROUNDS=9 scripts/bench-buffer-compare.sh /tmp/cmp main HEAD
#
# Environment:
#   ROUNDS     rounds (default 5)
#   ROWS       space-separated -test.bench patterns, one row each (default:
#              the kvbuf rows of W2's lookups, W3 and W8)
#   BENCHTIME  -test.benchtime (default 0.5s)
#   KVSCALE    -kvscale of BenchmarkW2's fixture (default 0.3)
. "$(dirname "$0")/lib/revisions.sh"

need_args 3 "OUTDIR REV REV..." "$@"
out="$1"
shift
revs=("$@")
rounds="${ROUNDS:-5}"
benchtime="${BENCHTIME:-0.5s}"
kvscale="${KVSCALE:-0.3}"
rows=(${ROWS:-'^BenchmarkW2$/^get-pending-hit$/^kvbuf-overlay$'
	'^BenchmarkW2$/^get-pending-hit$/^kvbuf-getmany$'
	'^BenchmarkW2$/^get-pending-tombstone$/^kvbuf-overlay$'
	'^BenchmarkW2$/^get-miss-pending-side$/^kvbuf-overlay$'
	'^BenchmarkW3$/^hit_disjoint-1024$/^kvbuf-overlay$'
	'^BenchmarkW3$/^miss_churn-64$/^kvbuf-overlay$'
	'^BenchmarkW3$/^construct$/^kvbuf-overlay$'
	'^BenchmarkW8$/^batch-64-puts$/^kvbuf-overlay$'
	'^BenchmarkW8$/^batch-64-puts$/^kvbuf-single-puts$'
	'^BenchmarkW8$/^batch-64-puts-hot-keys$/^kvbuf-overlay$'})
out_dir "$out"
work_dir bcompare

: >"$out/revisions.txt"
pkgs=()
for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	pkgs+=("$(buffer_pkg "$work/src$i")")
	(cd "$work/src$i" && go test -c -o "$work/buffer$i.test" "./${pkgs[$i]}")
	note_rev "r$i" "${revs[$i]}"
done
{
	echo "ROUNDS=$rounds BENCHTIME=$benchtime KVSCALE=$kvscale scripts/bench-buffer-compare.sh OUT ${revs[*]}"
	printf 'row: %s\n' "${rows[@]}"
} >"$out/command.txt"

n=${#revs[@]}
for ((r = 1; r <= rounds; r++)); do
	for j in "${!rows[@]}"; do
		for ((k = 0; k < n; k++)); do
			i=$(((r + j + k) % n))
			echo "round $r row $j: r$i" >&2
			(cd "$work/src$i/${pkgs[$i]}" && "$work/buffer$i.test" -test.run '^$' -test.bench "${rows[$j]}" \
				-test.benchtime "$benchtime" -kvscale "$kvscale") |
				awk -v rev="r$i" -v round="$r" '/^Benchmark/ { print rev, round, $0 }' >>"$out/runs.txt"
		done
	done
done

# runs.txt: REV ROUND BenchmarkNAME-P N VALUE UNIT VALUE UNIT ...
awk -v nrev="$n" '
	function median(list,   a, m, i, j, t) {
		m = split(list, a, " ")
		for (i = 2; i <= m; i++) {
			t = a[i] + 0
			for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
			a[j + 1] = t
		}
		if (m == 0) return ""
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	function minmax(list,   a, m, i, lo, hi) {
		m = split(list, a, " ")
		lo = hi = a[1] + 0
		for (i = 2; i <= m; i++) { if (a[i] + 0 < lo) lo = a[i] + 0; if (a[i] + 0 > hi) hi = a[i] + 0 }
		return sprintf("%.3f-%.3f", lo, hi)
	}
	{
		name = $3; sub(/-[0-9]+$/, "", name)
		if (!(name in seen)) { seen[name] = 1; names[++nn] = name }
		for (i = 5; i + 1 <= NF; i += 2) {
			u = $(i + 1)
			if (u != "ns/op" && u != "cpu-ns/op") continue
			v[$1, $2, name, u] = $i
			vals[$1, name, u] = vals[$1, name, u] " " $i
			rounds[$2] = 1
			units[name, u] = 1
		}
	}
	END {
		printf "%-52s %-9s", "row", "metric"
		for (i = 0; i < nrev; i++) printf " %10s", "r" i
		for (i = 1; i < nrev; i++) printf " %20s", "r" i "/r0 (range)"
		printf "\n"
		for (x = 1; x <= nn; x++) {
			name = names[x]
			for (uu = 1; uu <= 2; uu++) {
				u = uu == 1 ? "ns/op" : "cpu-ns/op"
				if (!((name, u) in units)) continue
				printf "%-52s %-9s", substr(name, 10), u
				for (i = 0; i < nrev; i++) printf " %10.4g", median(vals["r" i, name, u])
				for (i = 1; i < nrev; i++) {
					rl = ""
					for (rd in rounds) {
						if ((("r" i, rd, name, u) in v) && (("r0", rd, name, u) in v) && v["r0", rd, name, u] > 0)
							rl = rl " " v["r" i, rd, name, u] / v["r0", rd, name, u]
					}
					printf " %20s", rl == "" ? "-" : sprintf("%.3f (%s)", median(rl), minmax(rl))
				}
				printf "\n"
			}
		}
	}' "$out/runs.txt" | tee "$out/summary.txt"
