for g in 100 400 100 400; do
  echo "GOGC=$g"
  KVBUF_SCANFLUSH_N=200000 GOGC=$g /tmp/st30.test -test.run '^$' -test.bench 'ScanDuringFlush/round=0/default' -test.benchtime 100000x 2>&1 | grep "^Benchmark"
done
