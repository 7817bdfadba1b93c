#!/usr/bin/env bash
# Summarises BenchmarkBitsW1Gap output (scripts/bench-bits-w1gap.sh, or
# one run of the test binary with -test.count): per
# sub-benchmark and metric, the median over rounds (min-max over rounds)
# of each ratio and ns/op metric.
# Usage: scripts/bits-w1gap-summary.sh RAW.txt
awk '
function med(s,   a, k, n, j, t) {
	n = split(s, a, " ")
	for (k = 2; k <= n; k++) for (j = k; j > 1 && a[j] + 0 < a[j - 1] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return sprintf("%.3f (%.3f-%.3f) n=%d", a[int((n + 1) / 2)], a[1], a[n], n)
}
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++nn] = name }
	for (f = 3; f < NF; f += 2) {
		m = $(f + 1)
		if (m ~ /-(min|max)$/ || m == "ns/op") continue
		key = name SUBSEP m
		if (!(key in have)) { have[key] = 1; mets[name] = mets[name] " " m }
		v[key] = v[key] " " $f
	}
}
END {
	for (i = 1; i <= nn; i++) {
		print order[i]
		n = split(mets[order[i]], ms, " ")
		for (k = 1; k <= n; k++) printf "  %-36s %s\n", ms[k], med(v[order[i] SUBSEP ms[k]])
	}
}' "$1"
