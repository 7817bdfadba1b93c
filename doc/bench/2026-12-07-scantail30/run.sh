cd "$(dirname "$0")"
for r in 0 1 2; do
  { date -u; uptime; } >> machine.txt
  KVBUF_SCANFLUSH_N=200000 timeout 330 flock /tmp/kvbuf-bench.lock /tmp/st30.test -test.run '^$' -test.bench "ScanDuringFlush/round=$r/" -test.benchtime 60000x > designs-round$r.txt 2>&1
done
{ date -u; uptime; } >> machine.txt
KVBUF_SCANFLUSH_N=200000 timeout 330 flock /tmp/kvbuf-bench.lock /tmp/st30.test -test.run '^$' -test.bench "ScanDuringFlush/round=0/default" -test.benchtime 60000x -test.cpu 2,4,2,4 > gomaxprocs.txt 2>&1
{ date -u; uptime; } >> machine.txt
echo done > done.txt
