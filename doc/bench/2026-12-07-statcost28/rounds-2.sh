#!/bin/bash
# The judgement's own work in isolation (scratch benchmark, judgecost_scratch_test.go.txt
# copied into storage/ for the build), then keys=all once per build.
uptime > ./judgecost.uptime
flock ${BENCH_LOCK:-/tmp/kvbuf-bench.lock} ${BIN:-.}/zz.test -test.run '^$' -test.bench 'BenchmarkZZJudgeCost' -test.benchtime 3000x -test.count 5 > ./judgecost.txt 2>&1
uptime >> ./judgecost.uptime
for b in head nojudge; do
  uptime > ./a-$b-all.uptime
  flock ${BENCH_LOCK:-/tmp/kvbuf-bench.lock} ${BIN:-.}/$b.test -test.run '^$' -test.bench 'BenchmarkMissRead/keys=all' -test.benchtime 300x > ./a-$b-all.txt 2>&1
done
