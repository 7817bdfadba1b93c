#!/usr/bin/env bash
# W9 (doc/workloads.md): replicated writes at 1, 16 and 64 clients on a
# 3-node raftkv cluster on loopback, kvbuf against pebble with a synced
# apply per entry and pebble with unsynced applies, and the restart after
# ENTRIES applied entries (kvbuf replays from its watermark, the unsynced
# pebble state machine the whole log). Runs ROUNDS rounds of
# `go test -bench BenchmarkW9 ./raftkv`, the k-th with -w9.rotate=k (every
# group of rows starts at implementation k mod n), saves the raw output and
# prints per row the median over the rounds, and the ratios within the run.
#
# Usage: scripts/w9.sh [OUT]   (ROUNDS=3 ENTRIES=1000000 BENCHTIME=2s by
# default; OUT defaults to doc/bench/<UTC date>-w9; SUMMARY_ONLY=1 only
# recomputes OUT/summary.txt from OUT/w9.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-3}"
entries="${ENTRIES:-1000000}"
benchtime="${BENCHTIME:-2s}"
out="${1:-doc/bench/$(date -u +%F)-w9}"
mkdir -p "$out"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
[ -n "${SUMMARY_ONLY:-}" ] || {
	echo "revision: $(git rev-parse HEAD)$(git diff --quiet -- . ":(exclude)$out" || echo ' (with uncommitted changes)')"
	echo "go: $(go version)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
	echo "command: ROUNDS=$rounds ENTRIES=$entries BENCHTIME=$benchtime scripts/w9.sh $out"
} >"$out/machine.txt"
raw="$out/w9.txt"
if [ -z "${SUMMARY_ONLY:-}" ]; then
: >"$raw"
for ((r = 0; r < rounds; r++)); do
	echo "== round $r" >&2
	go test -run '^$' -bench BenchmarkW9 -benchtime "$benchtime" -timeout 120m ./raftkv \
		-args -w9.rotate="$r" -w9.entries="$entries" -w9.cache="$cache" | tee -a "$raw" >&2
done
fi
# Medians per row, then the ratios.
awk '
	/^BenchmarkW9\// {
		name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkW9\//, "", name)
		for (i = 3; i < NF; i += 2) { v[name, $(i+1)] = v[name, $(i+1)] " " $i; units[$(i+1)] = 1 }
		if (name ~ /^restart\//) v[name, "restart-ms"] = v[name, "restart-ms"] " " $3 / 1e6
		rows[name] = 1
	}
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		if (n == 0) return ""
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		n = 0
		for (r in rows) names[++n] = r
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
		printf "%-48s %12s %10s %10s %12s %14s\n", "row (median of rounds)", "writes/s", "p50 us", "p99 us", "restart ms", "replayed"
		# restart ms: ns/op (the mean restart of the round), in ms
		for (i = 1; i <= n; i++) {
			r = names[i]
			printf "%-48s %12s %10s %10s %12s %14s\n", r, median(v[r, "writes/s"]), median(v[r, "p50-us"]), median(v[r, "p99-us"]), median(v[r, "restart-ms"]), median(v[r, "replayed-entries"])
			m[r] = median(v[r, "writes/s"]); rm[r] = median(v[r, "restart-ms"])
		}
		print ""
		for (c = 1; c <= 64; c *= 4) {
			if (c == 4) continue
			k = "writes/clients=" c "/impl=kvbuf"
			for (i = 1; i <= n; i++) {
				r = names[i]
				if (index(r, "writes/clients=" c "/impl=") == 1 && r != k && m[r] > 0 && m[k] > 0)
					printf "clients=%-3d kvbuf / %-14s %.2fx writes/s\n", c, substr(r, length("writes/clients=" c "/impl=") + 1), m[k] / m[r]
			}
		}
		for (i = 1; i <= n; i++) if (names[i] ~ /^restart\/.*impl=kvbuf$/) kr = names[i]
		for (i = 1; i <= n; i++) if (names[i] ~ /^restart\/.*impl=pebble-replay$/ && rm[names[i]] > 0)
			printf "restart: kvbuf / whole-log replay %.3f of the time (%s ms / %s ms)\n", rm[kr] / rm[names[i]], rm[kr], rm[names[i]]
	}' "$raw" | tee "$out/summary.txt"
