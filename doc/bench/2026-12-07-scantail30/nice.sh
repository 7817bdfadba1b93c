for v in 0 19 0 19 0 19; do
  echo "NICE=$v"
  if [ $v = 0 ]; then KVBUF_SCANFLUSH_N=200000 /tmp/st30n.test -test.run '^$' -test.bench 'ScanDuringFlush/round=0/default' -test.benchtime 100000x 2>&1 | grep "^Benchmark"
  else KVBUF_FLUSH_NICE=$v KVBUF_SCANFLUSH_N=200000 /tmp/st30n.test -test.run '^$' -test.bench 'ScanDuringFlush/round=0/default' -test.benchtime 100000x 2>&1 | grep "^Benchmark"; fi
done
