#!/usr/bin/env bash
# The concurrency suites beside a CPU hog: builds three race-enabled test
# binaries (the root package; the root package with the kvbuf_yield and
# invariants tags; internal/buffer), starts HOG busy loops (shell loops at
# nice 10, so that the tests' threads are preempted between steps), and runs
# the binaries in turn, with GOMAXPROCS and KVBUF_STRESS_PROCS at PROCS,
# until SECONDS seconds have passed: the root package's stress and
# linearizability tests (-run 'Stress|Linearizability', porcupine-checked
# histories) and internal/buffer's racing tests
# (-run 'Stress|Racing|Concurrent|Under'). A line per run goes to
# OUTDIR/log.txt; a failing run's output is kept in OUTDIR/fail-N-NAME.txt,
# and the script exits 1 if any run failed.
#
# Usage: scripts/stress-beside-hog.sh OUTDIR
#
# Environment: SECONDS_TOTAL (default 1800), PROCS (default 16), HOG
# (default 2, the machine's cores is a good choice).
set -euo pipefail
if [[ $# -lt 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
total="${SECONDS_TOTAL:-1800}"
procs="${PROCS:-16}"
hogs="${HOG:-2}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvbuf-stresshog.XXXXXX")"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$repo" &&
	go test -c -race -o "$work/race.test" . &&
	go test -c -race -tags 'kvbuf_yield invariants' -o "$work/yield.test" . &&
	go test -c -race -o "$work/buffer.test" ./internal/buffer)

for ((h = 0; h < hogs; h++)); do
	nice -n 10 bash -c 'while :; do :; done' &
	pids+=($!)
done
echo "PROCS=$procs HOG=$hogs SECONDS_TOTAL=$total at $(cd "$repo" && git rev-parse --short HEAD); load $(cat /proc/loadavg)" >"$out/log.txt"
end=$(($(date +%s) + total))
failed=0 n=0
while [[ $(date +%s) -lt $end ]]; do
	for name in race yield buffer; do
		pat='Stress|Linearizability'
		[[ $name == buffer ]] && pat='Stress|Racing|Concurrent|Under'
		n=$((n + 1))
		dir="$work/run$n"
		mkdir -p "$dir"
		if (cd "$dir" && GOMAXPROCS="$procs" KVBUF_STRESS_PROCS="$procs" nice -n 10 \
			"$work/$name.test" -test.run "$pat" -test.count 1 -test.timeout 14m >out.txt 2>&1); then
			echo "$(date +%T) run $n $name ok" >>"$out/log.txt"
		else
			echo "$(date +%T) run $n $name FAIL" >>"$out/log.txt"
			cp "$dir/out.txt" "$out/fail-$n-$name.txt"
			failed=1
		fi
		rm -rf "$dir"
	done
done
echo "$n runs, load $(cat /proc/loadavg)" >>"$out/log.txt"
exit "$failed"
