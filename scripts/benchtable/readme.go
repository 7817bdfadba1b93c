package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
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
// each row times and, in its fairness table, what each side has made
// durable, with what memory, and what is off the clock). A line whose own
// row or baseline carries a label (write only, a component) is not a
// headline: readmeTable prints it in a second table with the label. The
// -cpu2 rows need a run with --cpu 1,2.
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
		bases: []string{"careful-group-commit", "per-caller-sync"}},
	{label: "W4 write + `Flush`, 64 goroutines", workload: "W4/flush-g64", own: "kvbuf",
		bases: []string{"careful-group-commit", "per-caller-sync"}},
	{label: "W4 write + `Flush`, 16 goroutines, against a flush that skips callers", workload: "W4/flush-g16", own: "kvbuf",
		bases: []string{"singleflight"}},
	{label: "same, 64 goroutines", workload: "W4/flush-g64", own: "kvbuf",
		bases: []string{"singleflight"}},
	{label: "W6 1M KV puts (one `Put` each) + the `Flush` that makes them durable", workload: "W6/flush-kv-1m", own: "kvbuf",
		bases: w6Pebble},
	{label: "same, the puts in one `Batch`", workload: "W6/flush-kv-1m", own: "kvbuf-one-batch",
		bases: w6Pebble},
	{label: "same, engine with default Options", workload: "W6/flush-kv-1m", own: "kvbuf-default-options",
		bases: w6Pebble},
	{label: "W6 the `Flush` of 1M pending KV puts alone", workload: "W6/flush-kv-1m", own: "kvbuf-flush-only",
		bases: []string{"pebble-batch-sync-sorted-input"}},
	{label: "W6 1M bit sets + `Flush`", workload: "W6/flush-bits-1m", own: "kvbuf",
		bases: []string{"coalesce+pwrite-words+sync", "coalesce+apply-words+msync", "file-set-loop+msync"}},
	{label: "W6 the `Flush` of 1M pending bit sets alone", workload: "W6/flush-bits-1m", own: "kvbuf-flush-only",
		bases: []string{"pwrite-words+sync", "apply-words+msync"}},
	{label: "W7 mixed `Get` under 100k writes/s, flush every 10 ms", workload: "W7/get-mixed-under-writes", own: "kvbuf",
		bases: []string{"rwmutex+map+pebble", "mutex+map+pebble"}},
	{label: "W7 bit lookups under the same load", workload: "W7/lookup-under-writes", own: "kvbuf",
		bases: []string{"rwmutex+map", "mutex+map"}},
	{label: "W8 64 puts as one batch (per put)", workload: "W8/batch-64-puts", own: "kvbuf",
		bases: []string{"pebble-batch-nosync", "mutex+map+arena", "rwmutex+btree+arena"}},
	{label: "W8 puts + durable, unique keys (per put)", workload: "W8/end-to-end-unique", own: "kvbuf",
		bases: w8Durable},
	{label: "same, engine with default Options", workload: "W8/end-to-end-unique", own: "kvbuf-default-options",
		bases: w8Durable},
	{label: "W8 puts + durable, each key 10× (per put)", workload: "W8/end-to-end-hot-keys-x10", own: "kvbuf",
		bases: w8Durable},
	{label: "same, engine with default Options", workload: "W8/end-to-end-hot-keys-x10", own: "kvbuf-default-options",
		bases: w8Durable},
	{label: "W8 delete 1M keys, durable", workload: "W8/delete-1m", own: "kvbuf",
		bases: []string{"pebble-deleterange+sync", "delete-loop"}},
}

// w6Pebble and w8Durable are the pebble baselines that make W6's and W8's
// writes durable (bench/pebble_baselines.go), and W8's coalescing map.
var (
	w6Pebble = []string{"pebble-batch-sync", "pebble-batch-sync-store-memtable",
		"pebble-nowal+flush", "pebble-nowal+flush-store-memtable"}
	w8Durable = []string{"pebble-batch-sync", "pebble-nosync+logsync", "pebble-nowal+flush",
		"pebble-batch-sync-store-memtable", "pebble-nosync+logsync-store-memtable", "pebble-nowal+flush-store-memtable",
		"mutex+map+pebble-batch-sync"}
)

// readmeTable writes the headline table, then the lines that are not
// headlines (a row with a label) in a table of their own.
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
	type rendered struct {
		text   string
		labels []string
	}
	// The disk column appears when the run has the figure (runs before it
	// existed keep their table).
	withDisk := slices.ContainsFunc(rows, func(r row) bool { return r.DiskBytesPerUserByte != nil })
	var lines []rendered
	for _, l := range readmeLines {
		own, ok := get(l.workload, l.own)
		ownCell, ownCPU := "–", "–"
		var labels []string
		if ok {
			ownCell, ownCPU = cell(l, own), cpuCell(own)
			if l.memory {
				ownCPU = "–" // the row's CPU is the GC's (the same run), not the memory's
			}
			if own.Label != "" {
				labels = append(labels, own.Label)
			}
			if l.own != "kvbuf" {
				ownCell = "`" + l.own + "` " + ownCell
			}
		}
		ownDisk := "–"
		if ok && !l.memory {
			ownDisk = diskCell(own)
		}
		var baseCells, ratios, cpus, disks []string
		for _, b := range l.bases {
			base, bok := get(l.workload, b)
			name := "`" + b + "`"
			if bok && base.Floor {
				name += " (floor)"
			}
			if bok && base.Label != "" && !slices.Contains(labels, base.Label) {
				labels = append(labels, base.Label)
			}
			if !bok {
				baseCells, ratios, cpus, disks = append(baseCells, name+" –"), append(ratios, "–"), append(cpus, name+" –"), append(disks, name+" –")
				continue
			}
			baseCells = append(baseCells, name+" "+cell(l, base))
			if l.memory {
				cpus, disks = append(cpus, name+" –"), append(disks, name+" –")
			} else {
				cpus, disks = append(cpus, name+" "+cpuCell(base)), append(disks, name+" "+diskCell(base))
			}
			switch {
			case !ok, l.memory:
				ratios = append(ratios, "–")
			default:
				ratios = append(ratios, fmtPairRatio(own, base))
			}
		}
		text := fmt.Sprintf("| %s | %s | %s | %s | %s; %s |", l.label, ownCell, strings.Join(baseCells, "; "), strings.Join(ratios, "; "), ownCPU, strings.Join(cpus, "; "))
		if withDisk {
			text += fmt.Sprintf(" %s; %s |", ownDisk, strings.Join(disks, "; "))
		}
		lines = append(lines, rendered{text, labels})
	}
	head := "| workload (1 goroutine unless noted) | kvbuf: median (min–max) | baselines: median (min–max) | baseline ÷ kvbuf per round: median (min–max) | CPU per op: kvbuf; baselines |"
	rule := "| --- | --- | --- | --- | --- |"
	if withDisk {
		head += " disk bytes per user byte: kvbuf; baselines |"
		rule += " --- |"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, l := range lines {
		if len(l.labels) == 0 {
			fmt.Fprintln(w, l.text)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Not headlines: each of these rows leaves part of the work, or the durability, out of the clock (doc/workloads.md, \"Fairness\").")
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.TrimSuffix(head, " |")+" | not a headline because |")
	fmt.Fprintln(w, rule+" --- |")
	for _, l := range lines {
		if len(l.labels) > 0 {
			fmt.Fprintf(w, "%s %s |\n", l.text, strings.Join(l.labels, "; "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "‡: the slowest round took more than 1.5× the fastest (on a ratio: the largest per-round ratio exceeds 1.5× the smallest); W4 violations are a lower bound. CPU: user+system CPU time of the whole process over the timed part, per operation.")
	if withDisk {
		fmt.Fprintln(w, "Disk bytes per user byte: what the process wrote to disk during the round and a settle step after it (memtables flushed, compactions waited out) over the keys and values the round wrote (bit Sets: one bit each), over all rounds (their disk bytes summed over their user bytes summed), then the per-round min–max (doc/workloads.md, \"Disk writes per user byte\").")
	}
	if slices.ContainsFunc(lines, func(l rendered) bool { return strings.Contains(l.text, " §") }) {
		fmt.Fprintln(w, busyNote(rows))
	}
	if len(missing) > 0 && !partial {
		return errors.New("rows missing from the run: " + strings.Join(missing, ", "))
	}
	return nil
}

// fmtPairRatio formats base's ratio to own: the median of the per-round
// ratios and their min–max (own's ratio_vs), marked ‡ when noisy. A run
// without per-round ratios (before they existed) gives median ÷ median,
// marked "(medians)".
func fmtPairRatio(own, base row) string {
	if m, ok := own.RatioVs[base.Impl]; ok && own.RatioVsMin != nil {
		s := fmt.Sprintf("%.3g× (%.3g–%.3g)", m, own.RatioVsMin[base.Impl], own.RatioVsMax[base.Impl])
		if own.RatioVsNoisy[base.Impl] {
			s += " ‡"
		}
		return s
	}
	return fmtRatio(base.NsPerOp, own.NsPerOp) + " (medians)"
}

// diskCell formats a row's bytes written to disk per byte of user data
// over all rounds and, when the row has them, the per-round min–max; "–"
// when the row has none or it is negative (pages of other, removed files
// taken back from the count).
func diskCell(r row) string {
	if r.DiskBytesPerUserByte == nil || *r.DiskBytesPerUserByte < 0 {
		return "–"
	}
	if len(r.DiskPerUserByteRounds) == 0 {
		return fmt.Sprintf("%.3g", *r.DiskBytesPerUserByte)
	}
	return fmt.Sprintf("%.3g (%.3g–%.3g)", *r.DiskBytesPerUserByte, slices.Min(r.DiskPerUserByteRounds), slices.Max(r.DiskPerUserByteRounds))
}

// cpuCell formats a row's CPU time per operation, or "–".
func cpuCell(r row) string {
	if r.CPUNsPerOp == nil {
		return "–"
	}
	return bench.FormatNs(*r.CPUNsPerOp)
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
