# The preamble shared by the scripts that build and compare revisions
# (bench-bits-w1.sh, bench-bits-w1gap.sh, bench-bits-w6.sh, bench-bits-w7.sh,
# bench-bits-flush.sh, bench-buffer-compare.sh, bench-compare.sh,
# budget-ab.sh, gobench-compare.sh, w6-ab.sh, watch-ab.sh, w9-ab.sh,
# w9-syncs.sh) or record the revision they ran (bench-bits.sh,
# bench-buffer.sh, ycsb-configs.sh).
# Sourced, not run:
#
#	. "$(dirname "$0")/lib/revisions.sh"
#
# It sets repo, the repository's top directory. The functions below set
# the globals out and work where they say so; they exit the script on a
# usage error, and a failing command fails the script (set -euo pipefail).

set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# need_args MIN USAGE ARG...: exits 2 after "usage: SCRIPT USAGE" on stderr
# when fewer than MIN ARGs are given.
need_args() {
	local min="$1" usage="$2"
	shift 2
	if [[ $# -lt $min ]]; then
		echo "usage: $0 $usage" >&2
		exit 2
	fi
}

# out_dir DIR: makes DIR (and its parents) and sets out to its absolute path.
out_dir() {
	mkdir -p "$1"
	out="$(cd "$1" && pwd)"
}

# work_dir NAME: sets work to a new temporary directory
# ($TMPDIR/kvbuf-NAME.XXXXXX) that is removed when the script exits.
work_dir() {
	work="$(mktemp -d "${TMPDIR:-/tmp}/kvbuf-$1.XXXXXX")"
	trap 'rm -rf "$work"' EXIT
}

# revs_args NAME OUTDIR REV...: the usage check and set-up of a script
# that compares revisions: exits 2 with "usage: SCRIPT OUTDIR REV..." when
# no REV is given, makes OUTDIR and sets out to it (out_dir), sets revs to
# the REVs, work to a new temporary directory named after NAME (work_dir),
# and empties $out/revisions.txt for note_rev.
revs_args() {
	local name="$1"
	shift
	need_args 2 "OUTDIR REV..." "$@"
	out_dir "$1"
	shift
	revs=("$@")
	work_dir "$name"
	: >"$out/revisions.txt"
}

# archive REV DIR: writes the files of revision REV into DIR (made if
# needed) with git archive, so that the working tree is never touched.
archive() {
	mkdir -p "$2"
	(cd "$repo" && git archive "$1") | (cd "$2" && tar -xf -)
}

# short_rev REV: prints REV's abbreviated commit hash.
short_rev() {
	(cd "$repo" && git rev-parse --short "$1")
}

# head_rev: prints HEAD's abbreviated hash, followed by " (plus uncommitted
# changes)" if the working tree differs from it.
head_rev() {
	echo "$(short_rev HEAD)$(cd "$repo" && git diff --quiet HEAD || echo ' (plus uncommitted changes)')"
}

# note_rev LABEL REV: appends "LABEL = REV (HASH)" to $out/revisions.txt
# and prints it on stderr.
note_rev() {
	echo "$1 = $2 ($(short_rev "$2"))" | tee -a "$out/revisions.txt" >&2
}

# buffer_pkg DIR: prints the buffer package's directory in the source tree
# DIR: internal/buffer, or buffer for a revision from before the move.
buffer_pkg() {
	if [[ -d "$1/internal/buffer" ]]; then
		echo internal/buffer
	else
		echo buffer
	fi
}

# rotate RUNS N FUNC: runs FUNC RUN I for RUN = 1..RUNS and every revision
# I = 0..N-1, RUN's order starting with revision (RUN-1) mod N, so that
# each revision takes every position; "run RUN: revision I" goes to stderr
# before each.
rotate() {
	local runs="$1" n="$2" fn="$3" r k i
	for ((r = 0; r < runs; r++)); do
		for ((k = 0; k < n; k++)); do
			i=$(((r + k) % n))
			echo "run $((r + 1)): revision $i" >&2
			"$fn" "$((r + 1))" "$i"
		done
	done
}
