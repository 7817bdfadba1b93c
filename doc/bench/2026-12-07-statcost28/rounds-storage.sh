#!/bin/bash
# BenchmarkStoreGetOverhead/hot/getappend (storage package): the store's
# point read against pebble's DB.Get in the same op; head vs nojudge in
# rotating order.
i=1
for b in head nojudge nojudge head head nojudge nojudge head; do
  uptime > ./s$i-$b.uptime
  flock ${BENCH_LOCK:-/tmp/kvbuf-bench.lock} ${BIN:-.}/s$b.test -test.run '^$' -test.bench 'BenchmarkStoreGetOverhead/hot/getappend' -test.benchtime 1s > ./s$i-$b.txt 2>&1
  i=$((i+1))
done
