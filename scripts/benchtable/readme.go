package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kvbuf/kvbuf/bench"
)

// line is one line of the README's headline table: an own row of a
// workload against some of its baselines.
type line struct {
	label    string
	workload string
	own      string
	bases    []string
	// memory lines compare bytes_per_entry instead of times.
	memory bool
}

// readmeLines is the README's headline table (doc/workloads.md says what
// each row times). The -cpu2 rows need a run with --cpu 1,2.
var readmeLines = []line{
	{label: "W1 bit lookup, nothing pending", workload: "W1/lookup-without-pending-changes", own: "kvbuf",
		bases: []string{"raw", "atomic-words", "xsync.Map", "mutex+map"}},
	{label: "W1 bit lookup, 1M bits pending", workload: "W1/lookup-with-pending-changes", own: "kvbuf",
		bases: []string{"atomic-words", "rwmutex+words", "xsync.Map", "mutex+map"}},
	{label: "same, `GetMany`", workload: "W1/lookup-with-pending-changes", own: "kvbuf-getmany",
		bases: []string{"atomic-words", "rwmutex+words"}},
	{label: "same, 2 goroutines", workload: "W1/lookup-with-pending-changes-cpu2", own: "kvbuf",
		bases: []string{"atomic-words", "rwmutex+words", "xsync.Map"}},
	{label: "same, engine with default Options", workload: "W1/lookup-with-pending-changes", own: "kvbuf-default-options",
		bases: []string{"atomic-words", "rwmutex+words"}},
	{label: "W1 `Ones` pass, 1M pending", workload: "W1/ones-with-pending-changes", own: "kvbuf",
		bases: []string{"get-loop"}},
	{label: "W2 `Get`, pending hit", workload: "W2/get-pending-hit", own: "kvbuf",
		bases: []string{"rwmutex+map+pebble", "rwmutex+map+pebble-no-copy"}},
	{label: "W2 `GetMany`, pending hit (per key)", workload: "W2/get-pending-hit", own: "kvbuf-getmany",
		bases: []string{"rwmutex+map+pebble-64-per-lock"}},
	{label: "W2 `Get`, pending hit, 2 goroutines", workload: "W2/get-pending-hit-cpu2", own: "kvbuf",
		bases: []string{"rwmutex+map+pebble"}},
	{label: "W2 `Get`, pending hit, default Options", workload: "W2/get-pending-hit", own: "kvbuf-default-options",
		bases: []string{"rwmutex+map+pebble"}},
	{label: "W2 `Get`, pending tombstone", workload: "W2/get-pending-tombstone", own: "kvbuf",
		bases: []string{"rwmutex+map+pebble"}},
	{label: "W2 `Get`, miss (falls through to pebble)", workload: "W2/get-miss", own: "kvbuf",
		bases: []string{"pebble-get"}},
	{label: "W2 `Get`, mixed", workload: "W2/get-mixed", own: "kvbuf",
		bases: []string{"pebble-get", "rwmutex+map+pebble"}},
	{label: "W2 scan of 10,000 keys", workload: "W2/scan-10k", own: "kvbuf",
		bases: []string{"pebble-indexed-batch", "rwmutex+btree+pebble"}},
	{label: "W2 100 puts then a 100-key scan", workload: "W2/interleaved-puts-scans", own: "kvbuf",
		bases: []string{"pebble-indexed-batch", "rwmutex+btree+pebble"}},
	{label: "W2 first iterator after a write, 1M pending", workload: "W2/first-iter-1m", own: "kvbuf",
		bases: []string{"pebble-indexed-batch", "rwmutex+btree+pebble"}},
	{label: "W2 one `runtime.GC()`, 1M entries held", workload: "W2/gc-1m", own: "kvbuf",
		bases: []string{"rwmutex+map", "rwmutex+btree", "pebble-indexed-batch"}},
	{label: "W2 live heap per pending entry (8 B key, 16 B value)", workload: "W2/gc-1m", own: "kvbuf",
		bases: []string{"rwmutex+map", "rwmutex+btree", "pebble-indexed-batch"}, memory: true},
	{label: "W3 hits on 64 keys", workload: "W3/hit_disjoint-64", own: "kvbuf",
		bases: []string{"mutex+map", "xsync.Map"}},
	{label: "same, 2 goroutines", workload: "W3/hit_disjoint-64-cpu2", own: "kvbuf",
		bases: []string{"mutex+map", "xsync.Map"}},
	{label: "W3 put + delete churn", workload: "W3/miss_churn-64", own: "kvbuf",
		bases: []string{"mutex+map", "xsync.Map"}},
	{label: "W4 write + `Flush`, 1 goroutine", workload: "W4/flush-g1", own: "kvbuf",
		bases: []string{"per-caller-sync", "careful-group-commit"}},
	{label: "W4 write + `Flush`, 16 goroutines", workload: "W4/flush-g16", own: "kvbuf",
		bases: []string{"careful-group-commit", "singleflight", "per-caller-sync"}},
	{label: "W4 write + `Flush`, 64 goroutines", workload: "W4/flush-g64", own: "kvbuf",
		bases: []string{"careful-group-commit", "singleflight", "per-caller-sync"}},
	{label: "W6 1M KV puts + the `Flush` that makes them durable", workload: "W6/flush-kv-1m", own: "kvbuf",
		bases: []string{"pebble-batch-sync"}},
	{label: "W6 the `Flush` of 1M pending KV puts alone", workload: "W6/flush-kv-1m", own: "kvbuf-flush-only",
		bases: []string{"pebble-batch-sync-sorted-input"}},
	{label: "W6 1M bit sets + `Flush`", workload: "W6/flush-bits-1m", own: "kvbuf",
		bases: []string{"coalesce+apply-words+msync", "file-set-loop+msync"}},
	{label: "W6 the `Flush` of 1M pending bit sets alone", workload: "W6/flush-bits-1m", own: "kvbuf-flush-only",
		bases: []string{"apply-words+msync"}},
	{label: "W7 mixed `Get` under 100k writes/s, flush every 10 ms", workload: "W7/get-mixed-under-writes", own: "kvbuf",
		bases: []string{"rwmutex+map+pebble", "mutex+map+pebble"}},
	{label: "W7 bit lookups under the same load", workload: "W7/lookup-under-writes", own: "kvbuf",
		bases: []string{"rwmutex+map", "mutex+map"}},
	{label: "W8 64 puts as one batch, write only (per put)", workload: "W8/batch-64-puts", own: "kvbuf",
		bases: []string{"pebble-batch-nosync", "mutex+map", "rwmutex+btree"}},
	{label: "same, engine with default Options", workload: "W8/batch-64-puts", own: "kvbuf-default-options",
		bases: []string{"pebble-batch-nosync"}},
	{label: "W8 puts + durable, unique keys (per put)", workload: "W8/end-to-end-unique", own: "kvbuf",
		bases: []string{"pebble-nosync-batches+sync"}},
	{label: "W8 puts + durable, each key 10× (per put)", workload: "W8/end-to-end-hot-keys-x10", own: "kvbuf",
		bases: []string{"pebble-nosync-batches+sync"}},
	{label: "W8 delete 1M keys", workload: "W8/delete-1m", own: "kvbuf",
		bases: []string{"delete-loop"}},
}

// readmeTable writes the headline table.
func readmeTable(w io.Writer, rows []row, partial bool) error {
	byName := map[string]row{}
	for _, r := range rows {
		byName[r.Workload+"\x00"+r.Impl] = r
	}
	var missing []string
	get := func(workload, impl string) (row, bool) {
		r, ok := byName[workload+"\x00"+impl]
		if !ok {
			missing = append(missing, workload+" "+impl)
		}
		return r, ok
	}
	fmt.Fprintln(w, "| workload (1 goroutine unless noted) | kvbuf: median (min–max) | baselines: median (min–max) | baseline ÷ kvbuf |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, l := range readmeLines {
		own, ok := get(l.workload, l.own)
		ownCell := "–"
		if ok {
			ownCell = cell(l, own)
			if l.own != "kvbuf" {
				ownCell = "`" + l.own + "` " + ownCell
			}
		}
		var baseCells, ratios []string
		for _, b := range l.bases {
			base, bok := get(l.workload, b)
			name := "`" + b + "`"
			if bok && base.Floor {
				name += " (floor)"
			}
			if !bok {
				baseCells, ratios = append(baseCells, name+" –"), append(ratios, "–")
				continue
			}
			baseCells = append(baseCells, name+" "+cell(l, base))
			switch {
			case !ok:
				ratios = append(ratios, "–")
			case l.memory:
				ratios = append(ratios, "–")
			default:
				ratios = append(ratios, fmtRatio(base.NsPerOp, own.NsPerOp))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", l.label, ownCell, strings.Join(baseCells, "; "), strings.Join(ratios, "; "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "‡: the slowest round took more than 1.5× the fastest; W4 violations are a lower bound.")
	if len(missing) > 0 && !partial {
		return errors.New("rows missing from the run: " + strings.Join(missing, ", "))
	}
	return nil
}

// cell formats one row for the headline table.
func cell(l line, r row) string {
	if l.memory {
		if r.BytesPerEntry == nil {
			return "–"
		}
		s := fmt.Sprintf("%.0f B", *r.BytesPerEntry)
		if r.AccountedBytesPerEntry != nil {
			s += fmt.Sprintf(" (engine's count: %.0f B)", *r.AccountedBytesPerEntry)
		}
		return s
	}
	s := fmtRange(r)
	if r.Violations != nil {
		s += ", " + violations(*r.Violations)
	}
	if r.ReadsPerSec != nil {
		s += fmt.Sprintf(", p99 write %s", bench.FormatNs(*r.P99WriteNs))
	}
	return s
}
