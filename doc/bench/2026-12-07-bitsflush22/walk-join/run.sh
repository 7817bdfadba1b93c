#!/bin/bash
# 20 rounds, each a run of BenchmarkBitsWalk from the fused walk (A, 0e2448e)
# and from the walk that shares the helper's queued ranges (B, 7ae269d),
# alternating which goes first; the whole loop under one hold of the lock.
cd "$(dirname "$0")"
uptime > uptime-start.txt
for r in $(seq 1 20); do
	if [ $((r%2)) = 0 ]; then o="A B"; else o="B A"; fi
	for v in $o; do ../walk$v.test -test.run '^$' -test.bench 'BenchmarkBitsWalk$' -test.benchtime 500x > walk-$v-$r.txt 2>&1; done
done
uptime > uptime-end.txt
