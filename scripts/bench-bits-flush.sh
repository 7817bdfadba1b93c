#!/usr/bin/env bash
# The bit flush's designs side by side (issue 26): builds cmd/kvtool at each
# revision given (from `git archive`, so the working tree is never
# touched), then runs `kvtool bench --json --workload '^W6/flush-bits-1m$'`
# with the binaries in rotating order (run r starts with revision r mod N),
# RUNS times each, and prints, per revision, the kvbuf rows' speedups over
# their baselines (ratio_vs: the baseline's time / kvbuf's in the same
# round, median over the run's rounds): the flush alone
# (kvbuf-flush-only over apply-words+msync) and sets plus Flush
# (kvbuf-setmany over coalesce+apply-words+msync), as the median over runs
# of each run's median, with the min-max of the runs' medians, and the
# median time and CPU per op. Only these ratios are worth comparing on a
# shared machine. Every run's output is kept in OUTDIR.
#
# Usage: scripts/bench-bits-flush.sh OUTDIR REV...
#   e.g. scripts/bench-bits-flush.sh /tmp/flush e13829a HEAD
#
# Environment: RUNS (default 3) runs of each revision, ROUNDS (default 5)
# kvtool bench --rounds per run.
. "$(dirname "$0")/lib/revisions.sh"

revs_args bitsflush "$@"
runs="${RUNS:-3}"
rounds="${ROUNDS:-5}"

for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	(cd "$work/src$i" && go build -o "$work/kvtool$i" ./cmd/kvtool)
	note_rev "$i" "${revs[$i]}"
done
args=(bench --json --workload '^W6/flush-bits-1m$' --rounds "$rounds" --dir "$work")
echo "RUNS=$runs; each run: kvtool ${args[*]}" >"$out/command.txt"
n=${#revs[@]}
run_one() { # run_one RUN I
	"$work/kvtool$2" "${args[@]}" >"$out/rev$2-run$1.json"
}
rotate "$runs" "$n" run_one

for ((i = 0; i < n; i++)); do
	cat "$out"/rev"$i"-run*.json | jq -rs --arg rev "$i = ${revs[$i]}" '
		def med: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
		def fmt: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
		def ms: if . == null then "-" else (. / 1e4 | round / 100 | tostring) + " ms" end;
		def row($impl; $base):
			[.[] | select(.impl == $impl) | .ratio_vs[$base]] as $r
			| [.[] | select(.impl == $impl) | .ns_per_op] as $t
			| [.[] | select(.impl == $impl) | .cpu_ns_per_op] as $c
			| [.[] | select(.impl == $base) | .ns_per_op] as $bt
			| "  \($impl) vs \($base): \($r | med | fmt)x (runs \($r | min | fmt)-\($r | max | fmt)); time \($t | med | ms) vs \($bt | med | ms), CPU \($c | med | ms)";
		"revision \($rev)",
		row("kvbuf-flush-only"; "apply-words+msync"),
		row("kvbuf-setmany"; "coalesce+apply-words+msync")'
done | tee "$out/summary.txt"
