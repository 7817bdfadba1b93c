for v in 0 1 0 1 0 1; do
  echo "BPS=$v"
  if [ $v = 0 ]; then KVBUF_SCANFLUSH_N=200000 /tmp/st30s.test -test.run '^$' -test.bench 'ScanDuringFlush/round=0/default/threads=1' -test.benchtime 150000x 2>&1 | grep "^Benchmark"
  else KVBUF_EXP_BPS=1 KVBUF_SCANFLUSH_N=200000 /tmp/st30s.test -test.run '^$' -test.bench 'ScanDuringFlush/round=0/default/threads=1' -test.benchtime 150000x 2>&1 | grep "^Benchmark"; fi
done
