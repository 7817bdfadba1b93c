#!/usr/bin/env bash
# Buffer-level benchmarks of the KV tables (package buffer: BenchmarkW2,
# BenchmarkW2Interleaved, BenchmarkW3, BenchmarkW8; see internal/buffer/kv_bench_test.go)
# in ROUNDS separate processes of one test binary, every output kept in
# OUTDIR, then a summary: per row and metric the median over the rounds,
# and per workload each row's median divided by the kvbuf row's (the
# `kvbuf-overlay` row, else the workload's first kvbuf row): for times
# (ns/op, cpu-ns/op, gc-ns) above 1 means kvbuf is faster, for sizes
# (heap-B/entry) above 1 means kvbuf is smaller. The 1M-entry rows
# (W2/first-iter-1m, W2/memory, W2/gc-1m) are these benchmarks' only
# 1M-entry measurements of the tables' internals (both designs of the active
# table's order, the cost of the visible sequence number); the public-API
# figures are kvtool bench's (scripts/bench-compare.sh).
#
# Usage: scripts/bench-buffer.sh OUTDIR
#
# Environment:
#   ROUNDS     processes (default 5)
#   BENCH      -bench pattern (default: the four benchmarks above)
#   BENCHTIME  -benchtime (default 1s)
#
# On the 2-core machine a round takes about 3-5 minutes.
. "$(dirname "$0")/lib/revisions.sh"

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
out="$1"
rounds="${ROUNDS:-5}"
bench="${BENCH:-^(BenchmarkW2|BenchmarkW2Interleaved|BenchmarkW3|BenchmarkW8)$}"
benchtime="${BENCHTIME:-1s}"
out_dir "$out"
(cd "$repo" && go test -c -o "$out/buffer.test" ./internal/buffer/)
echo "revision $(head_rev)" >"$out/command.txt"
echo "buffer.test -test.run '^\$' -test.bench '$bench' -test.benchtime $benchtime, $rounds rounds" >>"$out/command.txt"
for ((r = 1; r <= rounds; r++)); do
	echo "round $r" >&2
	(cd "$repo/internal/buffer" && "$out/buffer.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime") >"$out/round-$r.txt"
done
rm -f "$out/buffer.test"

cat "$out"/round-*.txt | awk '
	function median(list,   a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) {
			t = a[i] + 0
			for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
			a[j + 1] = t
		}
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	/^Benchmark/ {
		name = $1
		sub(/-[0-9]+$/, "", name)
		if (!(name in seen)) { seen[name] = 1; names[++nn] = name }
		for (i = 3; i + 1 <= NF; i += 2) {
			u = $(i + 1)
			if (u == "B/op") continue
			k = name SUBSEP u
			if (!(k in vals)) units[name] = units[name] " " u
			vals[k] = vals[k] " " $i
		}
	}
	END {
		for (i = 1; i <= nn; i++) {
			n = names[i]
			g = n; sub(/\/[^\/]*$/, "", g)
			impl = n; sub(/.*\//, "", impl)
			if (impl == "kvbuf-overlay" || (impl ~ /^kvbuf/ && !(g in ref))) ref[g] = n
		}
		printf "%-62s %-18s %12s %10s\n", "row", "metric", "median", "kvbuf x"
		for (i = 1; i <= nn; i++) {
			n = names[i]
			g = n; sub(/\/[^\/]*$/, "", g)
			m = split(units[n], us, " ")
			for (j = 1; j <= m; j++) {
				u = us[j]
				med = median(vals[n, u])
				ratio = "-"
				if (g in ref && ref[g] != n && (ref[g], u) in vals && u != "allocs/op") {
					rm = median(vals[ref[g], u])
					if (rm > 0) ratio = sprintf("%.2fx", med / rm)
				}
				printf "%-62s %-18s %12.4g %10s\n", n, u, med, ratio
			}
		}
	}' | tee "$out/summary.txt"
