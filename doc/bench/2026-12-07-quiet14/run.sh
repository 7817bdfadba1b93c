#!/usr/bin/env bash
# quiet14: the round's rows alone on the machine, the session's base (BASE)
# against the merged code (HEAD), from the repository root:
#   BASE=fd0e0d6 HEAD=<rev> doc/bench/2026-12-07-quiet14/run.sh
# kvtool-REV is `go build ./cmd/kvtool` of `git archive REV`; every kvtool
# row runs the two revisions alternating, the order swapped every run.
set -eu
base=${BASE:?}; head=${HEAD:?}
dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in "$base" "$head"; do
	mkdir -p "$tmp/$r" && git archive "$r" | tar -x -C "$tmp/$r"
	(cd "$tmp/$r" && go build -o "$tmp/kvtool-$r" ./cmd/kvtool)
done
ab() { # ab NAME RUNS WORKLOAD-REGEXP: kvtool bench --rounds 5, alternating
	local name=$1 runs=$2 re=$3 i order v
	for ((i = 1; i <= runs; i++)); do
		if ((i % 2)); then order="$base $head"; else order="$head $base"; fi
		for v in $order; do
			{ echo "# kvtool-$v bench --workload '$re' --rounds 5; load $(cut -d' ' -f1-3 /proc/loadavg)"
			  "$tmp/kvtool-$v" bench --workload "$re" --rounds 5; } > "$dir/$name-$v-run$i.txt" 2>&1
		done
	done
}
echo "base $base head $head; load at start $(cat /proc/loadavg)" > "$dir/command.txt"
ab w1 4 '^W1/lookup-(without-pending-changes|with-pending-changes|sparse)$'
ab w7 4 '^W7/lookup-under-writes$'
ab w6 2 '^W6/flush-bits-1m$'
OUT="$dir/watch" ROUNDS=5 scripts/watch-ab.sh "$base" "$head" > "$dir/watch-ab.txt" 2>&1
echo "load at end $(cat /proc/loadavg)" >> "$dir/command.txt"
