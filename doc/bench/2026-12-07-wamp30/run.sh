#!/bin/sh
# run.sh NAME BINARY [extra args]: one YCSB A,B invocation at 200k records under the bench lock
N=$1; B=$2; shift 2
uptime > $N.load
flock /tmp/kvbuf-bench.lock ./$B ycsb --records 200000 --rounds 1 --max-time 4s --threads 1 --durability window --workload a,b --db kvbuf,pebble --json --markdown $N.md "$@" > $N.jsonl 2> $N.err
uptime >> $N.load
