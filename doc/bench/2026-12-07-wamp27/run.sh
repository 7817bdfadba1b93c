#!/usr/bin/env bash
# The figure run of task wamp27: W6 and W8 at scale 0.3, each under the shared benchmark lock.
set -u
out=/tmp/wamp27-bench
for w in W6 W8; do
	flock /tmp/kvbuf-bench.lock bash -c "
		{ date -u; uptime; } > $out/load-start-$w.txt
		/tmp/wamp27-kvtool bench --workload $w --scale 0.3 --json --dir /tmp > $out/kvtool-bench-$w.json 2> $out/stderr-$w.txt
		echo \"exit \$?\" >> $out/stderr-$w.txt
		{ date -u; uptime; } > $out/load-end-$w.txt
	"
done
echo finished > $out/done
