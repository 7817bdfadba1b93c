#!/usr/bin/env bash
# Mutation check: reintroduces known bugs, one at a time, and reports which
# tests of the normal test run catch each one.
#
# Each patch in testdata/mutations/*.patch reintroduces one bug (its first
# line says which). For each, the script copies the working tree (committed
# or not; never .git) to a temporary directory, applies the patch there with
# `git apply` (the repository itself is never touched), runs the normal test
# command, `go test -race -count=1`, on the packages concerned (every package
# of ./... that is, or whose tests depend on, a package the patch changes)
# and records the tests that fail. A baseline run on an unpatched copy comes
# first: a test that fails there too is listed apart, so that every test
# named in the "caught by" column failed because of the mutation. A
# mutation no test catches is reported as NOT CAUGHT and makes the script
# exit 1.
#
# The patches in testdata/mutations/fixes/ are applied to every copy,
# baseline included, before the mutation: each fixes an engine bug the
# suite found and that is not fixed in the repository yet (its first line
# says which, and which test fails without it), so that the baseline is
# green and a failure is the mutation's. One that no longer applies (the
# bug was fixed) is skipped.
#
# Usage: scripts/mutations.sh [PATCH...]   (default: every patch)
#
# Environment:
#   PKGS     packages to test for every patch (default: the packages
#            concerned by each patch; the baseline runs all of ./...)
#   EXCLUDE  space-separated import path suffixes never tested (for
#            packages whose tests are broken or hang for reasons of their
#            own, e.g. EXCLUDE="cmd/kvtool bench")
#   RUN      go test -run pattern for every run, baseline included (default:
#            every test; e.g. RUN='^Test(KV|Protocol)' for a quick check of
#            the KV patches on a busy machine)
#   SKIP     go test -skip pattern for every run, baseline included
#   TIMEOUT  go test -timeout (default 5m: a mutation that makes a writer
#            spin forever hangs some packages' tests until then)
#   TAGS     go test -tags for every run, baseline included (patches
#            caught only in the invariants build, where a hook the normal
#            build cannot afford is compiled in, go in
#            testdata/mutations/invariants/, 617 and 618 at present: TAGS=invariants
#            scripts/mutations.sh testdata/mutations/invariants/*.patch)
#   KEEP=1   keep the temporary directory (logs of every run)
#
# About 1.5 to 2 minutes per patch on the 2-core machine; the table is
# printed at the end (and kept in the temporary directory).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
pkgs="${PKGS:-}"
exclude="${EXCLUDE:-}"
module="$(cd "$repo" && go list -m)"
timeout="${TIMEOUT:-5m}"
run="${RUN:-}"
skip="${SKIP:-}"
tags="${TAGS:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvbuf-mutations.XXXXXX")"
if [[ "${KEEP:-}" != 1 ]]; then
	trap 'rm -rf "$work"' EXIT
fi
src="$work/src"

if [[ $# -gt 0 ]]; then
	patches=("$@")
else
	patches=("$repo"/testdata/mutations/*.patch)
fi

# fresh_copy makes $src a copy of the working tree with the fixes applied.
fresh_copy() {
	rm -rf "$src"
	mkdir -p "$src"
	(cd "$repo" && tar --exclude=./.git -cf - .) | (cd "$src" && tar -xf -)
	local f
	for f in "$repo"/testdata/mutations/fixes/*.patch; do
		[[ -e "$f" ]] || continue
		if (cd "$src" && git apply --check "$f" 2>/dev/null); then
			(cd "$src" && git apply "$f")
		elif [[ ! -e "$work/skipped-$(basename "$f")" ]]; then
			echo "note: fix $(basename "$f") does not apply (fixed in the repository?): skipped" >&2
			touch "$work/skipped-$(basename "$f")"
		fi
	done
}

# failing prints the failing tests of a go test log, one per line, as
# package.Test (module prefix dropped), or package:what for a package that
# failed without a failing test (build failure, panic outside a test, ...).
failing() {
	awk '
		function short(p) { sub("^github.com/kvbuf/kvbuf/?", "", p); return p == "" ? "kvbuf" : p }
		/^[ \t]*--- FAIL: / {
			name = $3; sub("/.*", "", name); tests[name] = 1; next
		}
		/stress watchdog: Test/ {
			name = $0; sub(".*stress watchdog: ", "", name); sub(":.*", "", name); tests[name] = 1; next
		}
		/^panic: test timed out/ { timedout = 1; next }
		timedout && /^[ \t]+Test[A-Za-z0-9_]+ \(/ { name = $1; tests[name] = 1; next }
		/^panic: / { panicked = 1; next }
		/^FAIL[ \t]+[^ \t]+.*\[build failed\]/ { print short($2) ":build-failed"; delete tests; panicked = 0; timedout = 0; next }
		/^FAIL[ \t]+[^ \t]+[ \t]/ {
			n = 0
			for (t in tests) { print short($2) "." t; n++ }
			if (n == 0) print short($2) ":" (panicked ? "panic" : "failed")
			delete tests; panicked = 0; timedout = 0; next
		}
		/^ok[ \t]/ { delete tests; panicked = 0; timedout = 0 }
	' "$1" | sort -u
}

# excluded filters out of its input the packages EXCLUDE names.
excluded() {
	local p x keep
	while read -r p; do
		keep=1
		for x in $exclude; do
			[[ "$p" == *"$x" ]] && keep=0
		done
		[[ $keep == 1 ]] && echo "$p"
	done
}

# concerned prints the packages of ./... that are, or whose tests depend on,
# a package that patch $1 changes.
concerned() {
	local changed
	changed="$(sed -n 's|^+++ b/||p' "$1" | sed -E 's|/?[^/]*$||' | sort -u |
		awk -v m="$module" '{ print ($0 == "" ? m : m "/" $0) }' | paste -sd' ' -)"
	(cd "$src" && go list -test -f '{{.ImportPath}}|{{join .Deps " "}}' ./...) |
		awk -F'|' -v changed="$changed" '
			BEGIN { n = split(changed, c, " "); for (i = 1; i <= n; i++) want[c[i]] = 1 }
			{
				p = $1; sub(/ \[.*/, "", p); sub(/\.test$/, "", p); sub(/_test$/, "", p)
				if (p in want) { print p; next }
				m = split($2, d, " ")
				for (i = 1; i <= m; i++) if (d[i] in want) { print p; next }
			}' | sort -u | excluded
}

# run_tests runs the normal test command in $src on packages $2..., logging
# to $1.
run_tests() {
	local log="$1"
	shift
	(cd "$src" && go test -race -count=1 -timeout "$timeout" ${tags:+-tags "$tags"} ${run:+-run "$run"} ${skip:+-skip "$skip"} "$@") >"$log" 2>&1 || true
}

echo "mutation check of $repo (go test -race -count=1 -timeout $timeout${tags:+ -tags $tags}${run:+ -run $run}${skip:+ -skip $skip}); logs in $work" >&2
fresh_copy
if [[ -n "$pkgs" ]]; then
	base_pkgs=($pkgs)
else
	mapfile -t base_pkgs < <(cd "$src" && go list ./... | excluded)
fi
echo "baseline: ${base_pkgs[*]}" >&2
start=$(date +%s)
run_tests "$work/baseline.log" "${base_pkgs[@]}"
failing "$work/baseline.log" >"$work/baseline.fail"
echo "baseline: $(($(date +%s) - start))s, failing: $(tr '\n' ' ' <"$work/baseline.fail")" >&2

table="$work/table.txt"
uncaught=0
printf '%-36s | %s\n' "mutation" "caught by (tests that fail with it and pass without it)" >"$table"
printf '%-36s-+-%s\n' "$(printf -- '-%.0s' {1..36})" "$(printf -- '-%.0s' {1..60})" >>"$table"
for p in "${patches[@]}"; do
	name="$(basename "$p" .patch)"
	fresh_copy
	if ! (cd "$src" && git apply "$p") 2>"$work/$name.apply"; then
		printf '%-36s | DOES NOT APPLY: %s\n' "$name" "$(head -1 "$work/$name.apply")" | tee -a "$table" >&2
		uncaught=1
		continue
	fi
	if [[ -n "$pkgs" ]]; then
		these=($pkgs)
	else
		mapfile -t these < <(concerned "$p")
		[[ ${#these[@]} -gt 0 ]] || these=("${base_pkgs[@]}")
	fi
	echo "$name: go test -race -count=1 -timeout $timeout${tags:+ -tags $tags} ${these[*]}" >&2
	start=$(date +%s)
	run_tests "$work/$name.log" "${these[@]}"
	failing "$work/$name.log" >"$work/$name.fail"
	caught="$(comm -23 "$work/$name.fail" "$work/baseline.fail" | paste -sd, - | sed 's/,/, /g')"
	also="$(comm -12 "$work/$name.fail" "$work/baseline.fail" | paste -sd, - | sed 's/,/, /g')"
	if [[ -z "$caught" ]]; then
		caught="NOT CAUGHT"
		uncaught=1
	fi
	[[ -n "$also" ]] && caught="$caught (also failing in the baseline: $also)"
	printf '%-36s | %s\n' "$name" "$caught" | tee -a "$table" >&2
	echo "  ($(($(date +%s) - start))s)" >&2
done
echo
echo "Mutation check: go test -race -count=1 -timeout $timeout${tags:+ -tags $tags}${run:+ -run $run}${skip:+ -skip $skip}, on ${pkgs:-the packages concerned by each patch}${exclude:+ (never: $exclude)}"
if [[ -s "$work/baseline.fail" ]]; then
	echo "baseline failures: $(paste -sd, "$work/baseline.fail" | sed 's/,/, /g')"
else
	echo "baseline failures: none"
fi
echo
cat "$table"
exit $uncaught
