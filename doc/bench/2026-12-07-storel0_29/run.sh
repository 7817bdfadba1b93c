#!/bin/sh
# run.sh NAME BIN [workloads] : one kvtool ycsb invocation under the bench lock
n=$1; b=$2; w=${3:-a,b}
uptime > load-$n-before.txt
flock /tmp/kvbuf-bench.lock sh -c "date -u +%T > lockstart-$n.txt; /tmp/storel0_29/kvtool-$b ycsb --records 200000 --rounds 1 --max-time 4s --threads 1 --durability window --workload $w --db kvbuf,pebble --json --markdown $n.md > $n.jsonl 2> $n.err; date -u +%T > lockend-$n.txt"
uptime > load-$n-after.txt
