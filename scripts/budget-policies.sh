#!/usr/bin/env bash
# Compares the memory budget's flush policies (doc/design.md, "Memory
# budget") on W11: runs the oldest-first (default) and largest-first suites
# ITER times, alternating which goes first, each with `kvtool bench
# --json`, and prints per suite the median time per put, the worst
# engine fairness (fewest and most puts of an engine over the mean once
# the budget was full, and the least and most mean put latency of an
# engine over the mean of every put then) and the peak of the budget's total over its size,
# then the per-iteration ratios oldest-first / largest-first of the time
# per put (above 1: largest-first is faster).
#
# Usage: scripts/budget-policies.sh
# Environment: ITER (default 3), SCALE (default 0.1: 100 engines), ROUNDS
# (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
iter="${ITER:-3}"
scale="${SCALE:-0.1}"
rounds="${ROUNDS:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
go build -o "$work/kvtool" ./cmd/kvtool
for i in $(seq 1 "$iter"); do
	if ((i % 2)); then order="largest oldest"; else order="oldest largest"; fi
	for p in $order; do
		case $p in
		largest) w='W11/budget-1000-engines-largest-first' ;;
		oldest) w='W11/budget-1000-engines' ;;
		esac
		"$work/kvtool" bench --json --scale "$scale" --rounds "$rounds" --workload "$w" >"$work/$p.$i.json"
	done
done
python3 - "$work" "$iter" <<'PY'
import json, statistics, sys
work, iters = sys.argv[1], int(sys.argv[2])
ns = {"largest": [], "oldest": []}
for p in ns:
    lo, hi, llo, lhi, peak = [], [], [], [], []
    for i in range(1, iters + 1):
        r = json.loads(open(f"{work}/{p}.{i}.json").read().splitlines()[0])
        ns[p].append(r["ns_per_op"])
        lo.append(r["engine_min_share"]); hi.append(r["engine_max_share"]); peak.append(r["budget_peak"])
        llo.append(r["engine_min_lat"]); lhi.append(r["engine_max_lat"])
    print(f"{p}-first: {statistics.median(ns[p]):.0f} ns/put (per iteration {', '.join(f'{x:.0f}' for x in ns[p])}); "
          f"engine puts/mean {min(lo):.2f}-{max(hi):.2f}; engine latency/mean {min(llo):.2f}-{max(lhi):.2f}; peak/budget {max(peak):.3f}")
ratios = [o / l for o, l in zip(ns["oldest"], ns["largest"])]
print(f"oldest/largest time per put: median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
PY
