#!/usr/bin/env bash
# Compares kvbuf configurations on YCSB workloads: `kvtool ycsb --db kvbuf`
# once per configuration per round, the configurations in rotating order
# (round r starts with configuration r mod n), each run a fresh engine
# loaded with --records records. Every run's JSON rows are kept in OUTDIR;
# summary.txt has, per workload and configuration, the median throughput
# over the rounds, each round's value, and the read p99 (median over the
# rounds) overall and during flushes.
#
# Usage: scripts/ycsb-configs.sh OUTDIR NAME=PROPS [NAME=PROPS ...]
#   PROPS is a comma-separated list of kvtool ycsb -p properties ("" for
#   the defaults), e.g.
#     scripts/ycsb-configs.sh out tier=  notier=kvbuf.read_tier_bytes=-1
#
# Environment:
#   ROUNDS     rounds (default 3)
#   WORKLOADS  comma-separated workloads (default a,b,d,f)
#   RECORDS    records (default 100000)
#   OPS        measured operations per run (default 100000)
#   THREADS    client threads (default 1)
#   EXTRA      more kvtool ycsb flags for every run
. "$(dirname "$0")/lib/revisions.sh"

need_args 2 "OUTDIR NAME=PROPS [NAME=PROPS ...]" "$@"
out="$1"
shift
rounds="${ROUNDS:-3}"
workloads="${WORKLOADS:-a,b,d,f}"
records="${RECORDS:-100000}"
ops="${OPS:-100000}"
threads="${THREADS:-1}"
out_dir "$out"
(cd "$repo" && go build -o "$out/kvtool" ./cmd/kvtool)
names=()
props=()
for c in "$@"; do
	names+=("${c%%=*}")
	props+=("${c#*=}")
done
n=${#names[@]}
{
	echo "revision $(head_rev)"
	echo "$0 $out $*"
	echo "ROUNDS=$rounds WORKLOADS=$workloads RECORDS=$records OPS=$ops THREADS=$threads EXTRA=${EXTRA:-}"
	echo "start: $(uptime)"
} >"$out/command.txt"
for ((r = 0; r < rounds; r++)); do
	for ((j = 0; j < n; j++)); do
		i=$(((r + j) % n))
		flags=()
		IFS=',' read -ra ps <<<"${props[$i]}"
		for p in "${ps[@]}"; do
			[[ -n "$p" ]] && flags+=(--p "$p")
		done
		echo "round $((r + 1)): ${names[$i]}" >&2
		"$out/kvtool" ycsb --db kvbuf --workload "$workloads" --records "$records" --ops "$ops" \
			--threads "$threads" --rounds 1 --json ${flags[@]+"${flags[@]}"} ${EXTRA:-} \
			>"$out/round-$((r + 1))-${names[$i]}.json"
	done
done
echo "end: $(uptime)" >>"$out/command.txt"
rm -f "$out/kvtool"
{
	printf '%-8s %-12s %12s  %-40s %12s %12s\n' workload config "median op/s" "rounds" "read p99" "p99@flush"
	for w in load ${workloads//,/ }; do
		for name in "${names[@]}"; do
			vals=$(cat "$out"/round-*-"$name".json | jq -r --arg w "$w" 'select(.workload == $w) | .ops_per_sec' | sort -g)
			[[ -z "$vals" ]] && continue
			med=$(echo "$vals" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
			p99=$(cat "$out"/round-*-"$name".json | jq -r --arg w "$w" 'select(.workload == $w) | (.ops.READ.p99_ns // 0)' | sort -g | awk '{a[NR]=$1} END {printf "%.0fus", a[int((NR+1)/2)]/1000}')
			p99f=$(cat "$out"/round-*-"$name".json | jq -r --arg w "$w" 'select(.workload == $w) | (.ops["READ@FLUSH"].p99_ns // 0)' | sort -g | awk '{a[NR]=$1} END {printf "%.0fus", a[int((NR+1)/2)]/1000}')
			printf '%-8s %-12s %12.0f  %-40s %12s %12s\n' "$w" "$name" "$med" "$(echo $vals | tr '\n' ' ')" "$p99" "$p99f"
		done
	done
} >"$out/summary.txt"
cat "$out/summary.txt"
