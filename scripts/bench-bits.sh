#!/usr/bin/env bash
# The bit side's figures (issue 26), preliminary: the paired overlay
# benchmarks of package buffer (BenchmarkBitsW1, BenchmarkBitsFewPending,
# BenchmarkBitsW6, BenchmarkBitsSets, BenchmarkBitsOpen,
# BenchmarkBitsSparseOnes: every row of one benchmark timed in
# the same b.Loop iteration, block by block, in rotating order, so their
# ratios come from the same moments of a shared machine), then kvtool bench
# over the bit workloads through the public API (W1 lookups at 0.3 of full
# scale, W6's bit flush, W7's lookups under writes and W10 at full scale).
# Every output is kept in OUTDIR with the command that made it.
#
# Usage: scripts/bench-bits.sh OUTDIR
#
# Environment:
#   COUNT   go test -count of the buffer benchmarks (default 5)
#   ROUNDS  kvtool bench --rounds (default 5)
#
# On the 2-core machine it takes about 10 minutes.
. "$(dirname "$0")/lib/revisions.sh"

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
out="$1"
count="${COUNT:-5}"
rounds="${ROUNDS:-5}"
out_dir "$out"
echo "revision $(head_rev)" >"$out/command.txt"

(cd "$repo" && go test -c -o "$out/buffer.test" ./internal/buffer/ && go build -o "$out/kvtool" ./cmd/kvtool)

run() { # name, then the command (run in the repository's internal/buffer/ or in OUTDIR)
	local name="$1"
	shift
	echo "$name: $*" >>"$out/command.txt"
	echo "$name" >&2
	"$@" >"$out/$name.txt" 2>&1
}

cd "$repo/internal/buffer"
run buffer-w1 "$out/buffer.test" -test.run '^$' -test.bench '^BenchmarkBitsW1$' -test.benchtime 30x -test.count "$count"
run buffer-few "$out/buffer.test" -test.run '^$' -test.bench '^BenchmarkBitsFewPending$' -test.benchtime 30x -test.count "$count"
run buffer-w6 "$out/buffer.test" -test.run '^$' -test.bench '^BenchmarkBitsW6$' -test.benchtime 10x -test.count "$count"
run buffer-sets "$out/buffer.test" -test.run '^$' -test.bench '^BenchmarkBitsSets$' -test.benchtime 6x -test.count "$count"
run buffer-open "$out/buffer.test" -test.run '^$' -test.bench '^BenchmarkBitsOpen$' -test.benchtime 5x -test.count "$count"
run buffer-ones "$out/buffer.test" -test.run '^$' -test.bench '^BenchmarkBitsSparseOnes$' -test.benchtime 50x -test.count "$count"
cd "$out"
run kvtool-w1 "$out/kvtool" bench --workload '^W1/lookup-with(out)?-pending-changes$' --scale 0.3 --rounds "$rounds"
run kvtool-w6 "$out/kvtool" bench --workload '^W6/flush-bits-1m$' --rounds "$rounds"
run kvtool-w7 "$out/kvtool" bench --workload '^W7/lookup-under-writes$' --rounds "$rounds"
run kvtool-w10 "$out/kvtool" bench --workload '^W10/' --rounds "$rounds"
rm -f "$out/buffer.test" "$out/kvtool"
uptime >"$out/load.txt"
