#!/usr/bin/env bash
# BenchmarkWatchReadSum's three readers, 5 rounds, the order rotating each
# round, each case its own invocation of one test binary (TEST), under
# BENCH_LOCK. Output: OUT/rR-CASE.txt.
set -euo pipefail
cases=(many events staged)
for r in 0 1 2 3 4; do
	for k in 0 1 2; do
		c=${cases[$(((k + r) % 3))]}
		flock "$BENCH_LOCK" "$TEST" -test.run '^$' -test.bench "BenchmarkWatchReadSum/$c\$" -test.benchtime 400x >"$OUT/r$r-$c.txt"
	done
done
