#!/usr/bin/env bash
# Before/after comparison of two revisions with kvtool bench: builds
# cmd/kvtool at each revision (from `git archive`, so the working tree is
# never touched), runs `kvtool bench --json ARGS...` with the two binaries
# alternately (old, new, old, new, ...; ROUNDS runs of each), keeps every
# run's output in OUTDIR, and prints, per row, the median time per op of
# each revision and, for kvbuf rows, the median speedup over each baseline
# (ratio_vs: baseline time / kvbuf time, above 1: kvbuf faster) in each
# revision. Ratios within one run are what to compare on a shared machine;
# times across runs move with its load.
#
# Usage: scripts/bench-compare.sh OLDREV NEWREV OUTDIR [kvtool bench flags...]
#   e.g. scripts/bench-compare.sh 65247c8 HEAD /tmp/cmp --workload 'W2/get-*' --rounds 3
#
# Environment: ROUNDS (default 2) runs of each revision; BENCH_LOCK, a
# lock file the runs (not the builds) hold (lib/revisions.sh).
. "$(dirname "$0")/lib/revisions.sh"

need_args 3 "OLDREV NEWREV OUTDIR [kvtool bench flags...]" "$@"
old="$1" new="$2" out="$3"
shift 3
rounds="${ROUNDS:-2}"
out_dir "$out"
work_dir compare

build() { # build REV NAME
	local rev="$1" name="$2"
	archive "$rev" "$work/$name"
	(cd "$work/$name" && go build -o "$work/kvtool-$name" ./cmd/kvtool)
	echo "$name = $(short_rev "$rev")" | tee -a "$out/revisions.txt" >&2
}
: >"$out/revisions.txt"
build "$old" old
build "$new" new
echo "kvtool bench --json $*" >"$out/command.txt"
for ((r = 1; r <= rounds; r++)); do
	for name in old new; do
		echo "run $r: $name" >&2
		locked "$work/kvtool-$name" bench --json "$@" >"$out/$name-$r.json"
	done
done

# summary: one line per workload/impl/goroutines with the median ns/op of
# each revision, and per kvbuf row the median ratio_vs of each baseline.
awk '
	function field(line, name,   m) {
		if (match(line, "\"" name "\":(\"[^\"]*\"|[-0-9.e+]+)")) {
			m = substr(line, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
			gsub(/"/, "", m)
			return m
		}
		return ""
	}
	function median(list,   a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		if (n == 0) return ""
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	FNR == 1 { rev = FILENAME; sub(/.*\//, "", rev); sub(/-[0-9]+\.json$/, "", rev) }
	/^\{/ {
		key = field($0, "workload") " " field($0, "impl") " g" field($0, "goroutines")
		if (!(key in seen)) { seen[key] = 1; order[++n] = key }
		t[key, rev] = t[key, rev] " " field($0, "ns_per_op")
		if (match($0, /"ratio_vs":\{[^}]*\}/)) {
			rv = substr($0, RSTART + 12, RLENGTH - 13)
			m = split(rv, pairs, ",")
			for (i = 1; i <= m; i++) {
				split(pairs[i], kvp, ":"); b = kvp[1]; gsub(/"/, "", b)
				rk = key " vs " b
				if (!(rk in rseen)) { rseen[rk] = 1; rorder[key] = rorder[key] "|" b }
				r[rk, rev] = r[rk, rev] " " kvp[2]
			}
		}
	}
	END {
		printf "%-58s %12s %12s %9s\n", "row", "old ns/op", "new ns/op", "old/new"
		for (i = 1; i <= n; i++) {
			k = order[i]; o = median(t[k, "old"]); w = median(t[k, "new"])
			printf "%-58s %12.4g %12.4g %9s\n", k, o, w, (o != "" && w != "" && w > 0) ? sprintf("%.2fx", o / w) : "-"
			m = split(substr(rorder[k], 2), bs, "|")
			for (j = 1; j <= m; j++) {
				rk = k " vs " bs[j]
				printf "    %-54s %12s %12s\n", "speedup vs " bs[j], \
					(r[rk, "old"] != "") ? sprintf("%.2fx", median(r[rk, "old"])) : "-", \
					(r[rk, "new"] != "") ? sprintf("%.2fx", median(r[rk, "new"])) : "-"
			}
		}
	}
' "$out"/old-*.json "$out"/new-*.json | tee "$out/summary.txt"
