#!/usr/bin/env bash
# The file syncs of one W9 write row (doc/workloads.md), by kind: builds the
# raftkv test binary of revision REV (git archive: the working tree is left
# alone), runs ROW once under strace (only the sync calls are traced:
# --seccomp-bpf), and prints per kind (the raft log store's or the engine's
# files: WAL, MANIFEST, tables, directories, others) the syncs of the three
# nodes per second and the time each took (p50, p90, p99, in ms, as strace
# sees it: a few microseconds more than without it). Rates are over the
# seconds of the run in which the log's WAL was synced at least half as
# often as in its busiest second (the timed part, without the cluster's
# start and the read-back), and a table of syncs per second follows.
#
# Usage: scripts/w9-syncs.sh REV [ROW-REGEXP [TEST-FLAGS...]]
#   ROW-REGEXP defaults to 'BenchmarkW9/writes/clients=64/impl=kvbuf$';
#   TEST-FLAGS are extra flags of the test binary (e.g. -w9.engineflush=1h).
# Environment: BENCHTIME (default 4s), OUT (a file to keep strace's output
# in; default a temporary one).
. "$(dirname "$0")/lib/revisions.sh"

need_args 1 "REV [ROW-REGEXP [TEST-FLAGS...]]" "$@"
cd "$repo"
rev="$1"
rows="${2:-BenchmarkW9/writes/clients=64/impl=kvbuf\$}"
shift $(($# < 2 ? $# : 2))
benchtime="${BENCHTIME:-4s}"
work_dir w9syncs
trace="${OUT:-$work/strace.txt}"
archive "$rev" "$work/src"
(cd "$work/src" && go test -buildvcs=false -c -o "$work/raftkv.test" ./raftkv)
echo "rev = $(short_rev "$rev") $*, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
(cd "$work" && strace -f --seccomp-bpf -qq -ttt -T -y -o "$trace" \
	-e trace=fsync,fdatasync,sync_file_range,syncfs \
	./raftkv.test -test.run '^$' -test.bench "$rows" -test.benchtime "$benchtime" "$@") |
	grep '^BenchmarkW9/' >&2
awk '
	function kind(path) {
		store = path ~ /\/n[0-9]+\/log(\/|$)/ ? "log" : path ~ /\/n[0-9]+\/engine/ ? "engine" : "other"
		if (path ~ /\.log$/) f = "WAL"
		else if (path ~ /MANIFEST/) f = "MANIFEST"
		else if (path ~ /\.sst$/) f = "table"
		else if (path ~ /\/[^.\/]*$/) f = "dir"
		else f = "file"
		return store " " f
	}
	function qsort(a, lo, hi,    i, last, t) {
		if (lo >= hi) return
		i = lo + int((hi - lo + 1) * rand()); t = a[lo]; a[lo] = a[i]; a[i] = t
		last = lo
		for (i = lo + 1; i <= hi; i++) if (a[i] < a[lo]) { last++; t = a[last]; a[last] = a[i]; a[i] = t }
		t = a[lo]; a[lo] = a[last]; a[last] = t
		qsort(a, lo, last - 1); qsort(a, last + 1, hi)
	}
	# pct: the p-quantile of the sorted a[1..n] (nearest rank).
	function pct(a, n, p,    r) { r = int(n * p); if (r < n * p) r++; return a[r < 1 ? 1 : r] }
	# strace -f splits a call that another thread interrupts into an
	# "<unfinished ...>" line (with the file) and a "resumed" line (with the
	# time it took), both starting with the thread ID.
	function record(k, sec, dur) {
		n[k]++; d[k, n[k]] = dur * 1000; at[k, n[k]] = sec
		per[sec, k]++; secs[sec] = 1; kinds[k] = 1
		if (k ~ /^log WAL /) logw[sec]++
	}
	/^[0-9]+ +[0-9.]+ (fsync|fdatasync|sync_file_range|syncfs)\(/ {
		if (!match($0, /\([0-9]+<[^>]*>/)) next
		s = substr($0, RSTART + 1, RLENGTH - 2); sub(/^[0-9]+</, "", s)
		call = $3; sub(/\(.*/, "", call)
		k = kind(s) " " call
		if ($0 ~ /<unfinished \.\.\.>$/) { pending[$1] = k; pendsec[$1] = int($2); next }
		if ($0 !~ / = 0 <[0-9.]+>$/) next
		dur = $NF; gsub(/[<>]/, "", dur)
		record(k, int($2), dur)
		next
	}
	/^[0-9]+ +[0-9.]+ <\.\.\. (fsync|fdatasync|sync_file_range|syncfs) resumed>/ {
		if (!($1 in pending)) next
		k = pending[$1]; sec = pendsec[$1]; delete pending[$1]
		if ($0 !~ / = 0 <[0-9.]+>$/) next
		dur = $NF; gsub(/[<>]/, "", dur)
		record(k, sec, dur)
		next
	}
	END {
		max = 0
		for (s in logw) if (logw[s] > max) max = logw[s]
		span = 0
		for (s in secs) if (logw[s] >= max / 2) { busy[s] = 1; span++ }
		printf "busy seconds (log WAL syncs >= half of its busiest second, %d): %d\n", max, span
		printf "%-32s %8s %8s %8s %8s %8s\n", "kind (3 nodes)", "total", "busy/s", "p50 ms", "p90 ms", "p99 ms"
		for (k in kinds) {
			m = 0; delete b
			for (i = 1; i <= n[k]; i++) if (at[k, i] in busy) b[++m] = d[k, i]
			if (m == 0) { printf "%-32s %8d %8.1f\n", k, n[k], 0; continue }
			qsort(b, 1, m)
			printf "%-32s %8d %8.1f %8.2f %8.2f %8.2f\n", k, n[k], m / span, pct(b, m, 0.5), pct(b, m, 0.9), pct(b, m, 0.99)
		}
		printf "\nsyncs per second (log WAL, engine any, other any):\n"
		first = -1
		for (s in secs) if (first < 0 || s + 0 < first) first = s + 0
		for (s in secs) if (s + 0 > last) last = s + 0
		for (s = first; s <= last; s++) {
			lw = 0; e = 0; o = 0
			for (k in kinds) {
				if (k ~ /^log WAL/) lw += per[s, k]
				else if (k ~ /^engine/) e += per[s, k]
				else if (k !~ /^log/) o += per[s, k]
			}
			printf "  +%ds %6d %6d %6d%s\n", s - first, lw, e, o, (s in busy) ? "  busy" : ""
		}
	}' "$trace"
