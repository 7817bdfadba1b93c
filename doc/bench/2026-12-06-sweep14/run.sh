#!/bin/sh
# sweep14's before/after, run from this directory: KVTOOL_OLD, KVTOOL_NEW
# (kvtool binaries) and FLUSH_OLD, FLUSH_NEW (internal/flush test binaries),
# 3 pairs in rotating order. LOCK, if set, is a file flock(1) holds around
# each run.
set -e
W='W10/count-sparse|W1/count-with-pending-changes'
B='BenchmarkW5/(complete|nested)-4-workers'
run() { if [ -n "$LOCK" ]; then flock "$LOCK" nice -n 5 "$@"; else nice -n 5 "$@"; fi; }
uptime > load-before.txt
for i in 1 2 3; do
  case $i in 2) order="new old";; *) order="old new";; esac
  for v in $order; do
    if [ $v = old ]; then k=$KVTOOL_OLD; t=$FLUSH_OLD; else k=$KVTOOL_NEW; t=$FLUSH_NEW; fi
    run "$k" bench --workload "$W" --rounds 3 > count-$v-$i.txt 2>&1
    run "$t" -test.run '^$' -test.bench "$B" -test.benchtime 100000x -test.count 1 > w5-$v-$i.txt 2>&1
  done
done
uptime > load-after.txt
