#!/usr/bin/env bash
# BenchmarkBitsW7 (internal/buffer) of two revisions, alternating, the
# order swapped every run, each under the shared benchmark lock. The test
# binaries are built beforehand (go test -c) from each revision's tree with
# the head's bits_w7_bench_test.go (the few-active row):
#   SERIES=micro1 RUNS=3 micro.sh e247016 3120547   (binaries /tmp/b26/buffer-REV.test)
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
a=$1 b=$2 runs=${RUNS:-3} series=${SERIES:?}
for ((i = 1; i <= runs; i++)); do
	if ((i % 2)); then order="$a $b"; else order="$b $a"; fi
	for v in $order; do
		{ echo "# buffer-$v.test -test.run '^\$' -test.bench 'BenchmarkBitsW7\$' -test.benchtime 30x; load $(cut -d' ' -f1-3 /proc/loadavg)"
		  flock /tmp/kvbuf-bench.lock "/tmp/b26/buffer-$v.test" -test.run '^$' -test.bench 'BenchmarkBitsW7$' -test.benchtime 30x; } > "$dir/$series-$v-run$i.txt" 2>&1
	done
done
