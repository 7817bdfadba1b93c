#!/bin/bash
# rotating order: head nojudge nojudge head ...
i=2
for b in nojudge head head nojudge nojudge head head nojudge; do
  uptime > ./r$i-$b-hot.uptime
  flock ${BENCH_LOCK:-/tmp/kvbuf-bench.lock} ${BIN:-.}/$b.test -test.run '^$' -test.bench 'BenchmarkMissRead/keys=hot' -test.benchtime 2000x > ./r$i-$b-hot.txt 2>&1
  i=$((i+1))
done
