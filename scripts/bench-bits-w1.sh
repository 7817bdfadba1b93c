#!/usr/bin/env bash
# W1 lookups with 1M bits pending (or, WORKLOAD=without, with nothing
# pending), designs side by side at both levels
# (issue 26): builds, at each revision given (from `git archive`, so the
# working tree is never touched), package buffer's test binary and
# kvtool, then RUNS times, in rotating order (run r starts with revision
# r mod N), runs with each revision
#   - buffer.test -test.bench 'BenchmarkBitsW1$/lookup-with-pending-changes$'
#     (the overlay: kvbuf, kvbuf-getmany and atomic-words timed block by
#     block in one b.Loop, so their ratios come from the same moments), and
#   - kvtool bench --workload '^W1/lookup-with-pending-changes$' (the
#     public API: Bits.Get, Bits.GetMany and atomic-words, rounds in a
#     Williams design).
# It prints per revision the median over runs (min-max of the runs) of
# kvbuf/atomic-words and kvbuf-getmany/atomic-words (times: below 1 is
# kvbuf faster) at each level; the kvtool figures are each run's medians
# over its rounds. Only ratios are worth comparing on a shared machine.
# Every run's output is kept in OUTDIR.
#
# Usage: scripts/bench-bits-w1.sh OUTDIR REV...
#   e.g. scripts/bench-bits-w1.sh /tmp/w1 main HEAD
#
# Environment: RUNS (default 3) runs of each revision, ITERS (default 20)
# b.Loop iterations of the buffer benchmark, ROUNDS (default 5) kvtool
# rounds, SCALE (default 1) kvtool --scale, KVTOOL=0 to run the buffer
# benchmark alone, WORKLOAD=without for the rows with nothing pending
# (lookup-without-pending-changes at both levels: the ratios printed are
# then kvbuf/raw and kvbuf-getmany/raw, the raw file's Get the baseline)
# instead of the default WORKLOAD=with.
. "$(dirname "$0")/lib/revisions.sh"

revs_args bitsw1 "$@"
runs="${RUNS:-3}"
iters="${ITERS:-20}"
rounds="${ROUNDS:-5}"
scale="${SCALE:-1}"
case "${WORKLOAD:-with}" in
with) row=lookup-with-pending-changes base=atomic-words ;;
without) row=lookup-without-pending-changes base=raw ;;
*)
	echo "$0: WORKLOAD must be with or without" >&2
	exit 2
	;;
esac

for i in "${!revs[@]}"; do
	archive "${revs[$i]}" "$work/src$i"
	pkg=$(buffer_pkg "$work/src$i")
	(cd "$work/src$i" && go test -c -o "$work/buffer$i.test" "./$pkg" && go build -o "$work/kvtool$i" ./cmd/kvtool)
	note_rev "$i" "${revs[$i]}"
done
bargs=(-test.run '^$' -test.bench "BenchmarkBitsW1\$/$row\$" -test.benchtime "${iters}x")
kargs=(bench --workload "^W1/$row\$" --rounds "$rounds" --scale "$scale")
{
	echo "RUNS=$runs KVTOOL=${KVTOOL:-1} WORKLOAD=${WORKLOAD:-with}; each run, per revision: buffer.test ${bargs[*]}; kvtool ${kargs[*]} (not if KVTOOL=0)"
	echo "load before: $(cat /proc/loadavg)"
} >"$out/command.txt"
n=${#revs[@]}
run_one() { # run_one RUN I
	(cd "$work" && TMPDIR="$work" "$work/buffer$2.test" "${bargs[@]}") >"$out/buffer-rev$2-run$1.txt"
	if [[ "${KVTOOL:-1}" != 0 ]]; then
		(cd "$work" && TMPDIR="$work" "$work/kvtool$2" "${kargs[@]}") >"$out/kvtool-rev$2-run$1.txt"
	fi
}
rotate "$runs" "$n" run_one
echo "load after: $(cat /proc/loadavg)" >>"$out/command.txt"

med='function med(s,   a, k, n, j, t) {
	n = split(s, a, " ")
	for (k = 2; k <= n; k++) for (j = k; j > 1 && a[j] + 0 < a[j - 1] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return sprintf("%.2f (%.2f-%.2f)", a[int((n + 1) / 2)], a[1], a[n])
}'
for ((i = 0; i < n; i++)); do
	echo "revision $i = ${revs[$i]}"
	cat "$out"/buffer-rev"$i"-run*.txt | grep '^BenchmarkBitsW1' | awk -v base="$base" "$med"'
		{ for (f = 3; f < NF; f += 2) v[$(f + 1)] = v[$(f + 1)] " " $f }
		END {
			printf "  buffer  %-28s%s\n", "kvbuf/" base, med(v["kvbuf/" base])
			printf "  buffer  %-28s%s\n", "kvbuf-getmany/" base, med(v["kvbuf-getmany/" base])
		}'
	[[ "${KVTOOL:-1}" != 0 ]] || continue
	for f in "$out"/kvtool-rev"$i"-run*.txt; do
		awk -v w="W1/$row" -v base="$base" '$1 == w { t[$2] = $4 } END { printf "%s %s\n", t["kvbuf"] / t[base], t["kvbuf-getmany"] / t[base] }' "$f"
	done | awk -v base="$base" "$med"'
		{ g = g " " $1; m = m " " $2 }
		END {
			printf "  kvtool  %-28s%s\n", "kvbuf/" base, med(g)
			printf "  kvtool  %-28s%s\n", "kvbuf-getmany/" base, med(m)
		}'
done | tee "$out/summary.txt"
