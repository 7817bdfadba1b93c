#!/usr/bin/env bash
# Design B alone at buffer level: BenchmarkBitsSets (package
# internal/buffer; set-loop is a loop of Bits.Set, setmany the unchanged
# SetMany path, both in the same b.Loop iteration in rotating order) at
# revision A (c8cd281, the set path before B) and A+B (775ef39), the two
# binaries run in turn RUNS times. Compare set-loop/setmany (the ratio of a
# loop of Set to SetMany in one process) between revisions.
# Usage: doc/bench/2026-12-05-w6-bits/sets-ab.sh OUTDIR
set -euo pipefail
out="$(mkdir -p "$1" && cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvbuf-setsab.XXXXXX")"
trap 'rm -rf "$work"' EXIT
revs=(c8cd281 775ef39)
for i in 0 1; do
	mkdir -p "$work/src$i"
	(cd "$repo" && git archive "${revs[$i]}") | (cd "$work/src$i" && tar -xf -)
	(cd "$work/src$i" && go test -c -o "$work/b$i.test" ./internal/buffer)
done
for ((r = 1; r <= ${RUNS:-4}; r++)); do
	for k in 0 1; do
		i=$(((r + k) % 2))
		(cd "$work" && "$work/b$i.test" -test.run '^$' -test.bench 'BenchmarkBitsSets$' -test.benchtime 10x) >"$out/${revs[$i]}-run$r.txt"
	done
done
for i in 0 1; do
	echo "${revs[$i]}:"
	grep -h '^BenchmarkBitsSets' "$out/${revs[$i]}"-run*.txt | awk '{ for (k = 1; k < NF; k++) if ($(k+1) == "set-loop/setmany" || $(k+1) == "set-loop-ns/set") printf "  %s %s", $(k+1), $k; print "" }'
done | tee "$out/summary.txt"
