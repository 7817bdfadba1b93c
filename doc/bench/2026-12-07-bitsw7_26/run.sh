#!/usr/bin/env bash
# bitsw7_26: kvtool built from each revision (REVS, "name=dir" pairs whose
# dir holds the revision's tree), rows alternating, the order rotated every
# run, each kvtool invocation under the shared benchmark lock:
#   REVS="base=/path/main a1=/path/wt" RUNS=3 RE='^W7/lookup-under-writes$' NAME=w7 run.sh
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
runs=${RUNS:-3}; re=${RE:?}; name=${NAME:?}
read -r -a pairs <<< "${REVS:?}"
for p in "${pairs[@]}"; do
	n=${p%%=*}; d=${p#*=}
	[ -x "/tmp/b26/kvtool-$n" ] || (cd "$d" && go build -o "/tmp/b26/kvtool-$n" ./cmd/kvtool)
done
for ((i = 1; i <= runs; i++)); do
	order=("${pairs[@]:$(( (i - 1) % ${#pairs[@]} ))}" "${pairs[@]:0:$(( (i - 1) % ${#pairs[@]} ))}")
	for p in "${order[@]}"; do
		n=${p%%=*}
		{ echo "# kvtool-$n bench --workload '$re' --rounds 5; load $(cut -d' ' -f1-3 /proc/loadavg)"
		  flock /tmp/kvbuf-bench.lock "/tmp/b26/kvtool-$n" bench --workload "$re" --rounds 5; } > "$dir/$name-$n-run$i.txt" 2>&1
	done
done
