#!/usr/bin/env bash
# W9 (doc/workloads.md): replicated writes at 1, 16 and 64 clients on a
# 3-node raftkv cluster on loopback, and the restart after WRITES
# acknowledged writes, for kvbuf and two pebble replicas a replica engineer
# would write (pebble-ready-nosync+logsync: an unsynced batch per Ready and
# a synced LogData every 100 ms; pebble-ready-sync: a synced batch per
# Ready; both read their applied index back at Open). Runs ROUNDS rounds of
# `go test -bench BenchmarkW9 ./raftkv`, the k-th with -w9.rotate=k (the
# implementations in the order of bench.RoundOrder), saves the raw output
# and prints per row the median over the rounds, then per client count and
# baseline the ratio kvbuf / baseline computed round by round: its median
# and its range over the rounds.
#
# Usage: scripts/w9.sh [OUT]   (ROUNDS=3 WRITES=1000000 BENCHTIME=2s
# BENCH=BenchmarkW9 by default; OUT defaults to doc/bench/<UTC date>-w9;
# SUMMARY_ONLY=1 only recomputes OUT/summary.txt from OUT/w9.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-3}"
writes="${WRITES:-1000000}"
benchtime="${BENCHTIME:-2s}"
bench="${BENCH:-BenchmarkW9}"
out="${1:-doc/bench/$(date -u +%F)-w9}"
mkdir -p "$out"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
[ -n "${SUMMARY_ONLY:-}" ] || {
	# OUT itself is left out of the check when it is inside the repository.
	ex=()
	case "$(realpath -m "$out")/" in "$(pwd -P)"/*) ex=(":(exclude)$out") ;; esac
	echo "revision: $(git rev-parse HEAD)$(git diff --quiet -- . "${ex[@]}" || echo ' (with uncommitted changes)')"
	echo "go: $(go version)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
	echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "command: ROUNDS=$rounds WRITES=$writes BENCHTIME=$benchtime BENCH='$bench' scripts/w9.sh $out"
} >"$out/machine.txt"
raw="$out/w9.txt"
if [ -z "${SUMMARY_ONLY:-}" ]; then
	: >"$raw"
	for ((r = 0; r < rounds; r++)); do
		echo "== round $r" | tee -a "$raw" >&2
		# A failed row (an election on a loaded machine) costs that row, not
		# the run: the summary takes the rows that completed.
		go test -run '^$' -bench "$bench" -benchtime "$benchtime" -timeout 120m ./raftkv \
			-args -w9.rotate="$r" -w9.writes="$writes" -w9.cache="$cache" | tee -a "$raw" >&2 ||
			echo "round $r: a row failed" | tee -a "$out/machine.txt" >&2
	done
	echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
fi
awk '
	/^== round / { round = $3; if (round + 1 > nr) nr = round + 1 }
	/^BenchmarkW9\// {
		name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkW9\//, "", name)
		for (i = 3; i < NF; i += 2) { v[name, $(i+1)] = v[name, $(i+1)] " " $i; per[name, $(i+1), round] = $i }
		if (name ~ /^restart\//) { v[name, "restart-ms"] = v[name, "restart-ms"] " " $3 / 1e6; per[name, "restart-ms", round] = $3 / 1e6 }
		rows[name] = 1
	}
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		if (n == 0) return ""
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	# ratio prints the per-round ratio num/den of metric (or den/num if inv).
	function ratio(label, num, den, metric, inv,   r, s, lo, hi, q, k) {
		s = ""; k = 0
		for (r = 0; r < nr; r++) if ((num, metric, r) in per && (den, metric, r) in per && per[den, metric, r] > 0 && per[num, metric, r] > 0) {
			q = inv ? per[den, metric, r] / per[num, metric, r] : per[num, metric, r] / per[den, metric, r]
			s = s " " q; k++
			if (k == 1 || q < lo) lo = q
			if (k == 1 || q > hi) hi = q
		}
		if (k > 0) printf "%-58s %6.2fx  (%.2f-%.2f over %d rounds)\n", label, median(s), lo, hi, k
	}
	END {
		n = 0
		for (r in rows) names[++n] = r
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
		printf "%-58s %10s %9s %9s %12s %11s %10s\n", "row (median of rounds)", "writes/s", "p50 us", "p99 us", "cpu-ns/op", "restart ms", "replayed"
		for (i = 1; i <= n; i++) {
			r = names[i]
			printf "%-58s %10s %9s %9s %12s %11s %10s\n", r, median(v[r, "writes/s"]), median(v[r, "p50-us"]), median(v[r, "p99-us"]), median(v[r, "cpu-ns/op"]), median(v[r, "restart-ms"]), median(v[r, "replayed-entries"])
		}
		print ""
		print "ratios within each round (median, range):"
		for (i = 1; i <= n; i++) {
			r = names[i]
			if (r !~ /^writes(-pipelined)?\// || r ~ /impl=kvbuf$/) continue
			k = r; sub(/impl=.*/, "impl=kvbuf", k)
			c = r; sub(/\/impl=.*/, "", c)
			b = r; sub(/.*impl=/, "", b)
			ratio(c " writes/s kvbuf / " b, k, r, "writes/s", 0)
			ratio(c " p99 " b " / kvbuf", k, r, "p99-us", 1)
		}
		for (i = 1; i <= n; i++) {
			r = names[i]
			if (r !~ /^restart\// || r ~ /impl=kvbuf$/) continue
			k = r; sub(/impl=.*/, "impl=kvbuf", k)
			b = r; sub(/.*impl=/, "", b)
			ratio("restart time kvbuf / " b, k, r, "restart-ms", 0)
		}
	}' "$raw" | tee "$out/summary.txt"
