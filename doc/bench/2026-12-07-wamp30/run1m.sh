#!/bin/sh
# run1m.sh NAME BINARY [extra args]: YCSB A, B, C at 1M records, window, 1 thread, 3 rounds, under the bench lock
N=$1; B=$2; shift 2
uptime > $N.load
flock /tmp/kvbuf-bench.lock ./$B ycsb --records 1000000 --ops 1000000 --rounds 3 --max-time 8s --threads 1 --durability window --workload a,b,c --db kvbuf,pebble --json --markdown $N.md "$@" > $N.jsonl 2> $N.err
uptime >> $N.load
