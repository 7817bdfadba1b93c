#!/usr/bin/env bash
# W1's three lookup rows through kvtool at main and the branch, alternating:
# kvtool-main and kvtool-head built beforehand (go build ./cmd/kvtool at each
# revision, from git archive), run from the directory holding them.
set -eu
out=${OUT:?}; mkdir -p $out
echo "load before: $(cat /proc/loadavg)" > $out/command.txt
for r in 1 2 3 4; do
  if (( r % 2 )); then order="main head"; else order="head main"; fi
  for v in $order; do
    (flock "${BENCH_LOCK:?}" ./kvtool-$v bench --workload '^W1/lookup-(without-pending-changes|with-pending-changes|sparse)$' --rounds 5 > $out/kvtool-$v-run$r.txt 2>&1)
  done
done
echo "load after: $(cat /proc/loadavg)" >> $out/command.txt
