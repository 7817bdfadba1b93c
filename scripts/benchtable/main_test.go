package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixture writes a run holding every row the README's list names (medians
// 100 ns for own rows, 200 ns for baselines, per-round ratios 2 (1.5–3.5,
// noisy) on own rows, CPU 50 ns per op, disk bytes per user byte 2 on own
// rows and 3.5 on baselines of W6 and W8's puts, the labels kvtool bench
// gives) except those in skip.
func fixture(t *testing.T, skip ...string) string {
	t.Helper()
	seen := map[string]bool{}
	var b bytes.Buffer
	b.WriteString("== a header line bench-all.sh writes\n")
	bases := map[string][]string{}
	for _, l := range readmeLines {
		bases[l.workload] = append(bases[l.workload], l.bases...)
	}
	label := func(workload, impl string) string {
		switch {
		case workload == "W8/batch-64-puts":
			return "write only, durability not included"
		case impl == "kvbuf-flush-only" || impl == "pebble-batch-sync-sorted-input" || impl == "apply-words+msync":
			return "component: part of the work off the clock"
		case impl == "singleflight":
			return "breaks durability by design (violations)"
		}
		return ""
	}
	add := func(workload, impl string, ns float64) {
		key := workload + " " + impl
		if seen[key] || strings.Contains(strings.Join(skip, ","), key) {
			return
		}
		seen[key] = true
		v, viol := 90.0, int64(3)
		r := map[string]any{"workload": workload, "impl": impl, "unit": "op", "ns_per_op": ns,
			"ns_per_op_min": ns * 0.9, "ns_per_op_max": ns * 2, "noisy": true, "rounds": 7, "bytes_per_entry": v,
			"cpu_ns_per_op": 50.0}
		if l := label(workload, impl); l != "" {
			r["label"] = l
		}
		if strings.HasPrefix(workload, "W6/") || strings.HasPrefix(workload, "W8/") && workload != "W8/delete-1m" {
			r["disk_bytes_per_user_byte"], r["disk_bytes_per_user_byte_rounds"] = 3.5, []float64{3.5}
			if strings.HasPrefix(impl, "kvbuf") {
				r["disk_bytes_per_user_byte"], r["disk_bytes_per_user_byte_rounds"] = 2.0, []float64{2}
			}
		}
		if strings.HasPrefix(impl, "kvbuf") {
			ratio, lo, hi, noisy := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]bool{}
			for _, base := range bases[workload] {
				ratio[base], lo[base], hi[base], noisy[base] = 2, 1.5, 3.5, true
			}
			r["ratio_vs"], r["ratio_vs_min"], r["ratio_vs_max"], r["ratio_vs_noisy"] = ratio, lo, hi, noisy
		}
		if strings.HasPrefix(workload, "W4/") {
			r["violations"], r["syncs_per_flush"], r["p99_flush_ns"] = viol, 0.5, 1e6
		}
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(j, '\n'))
	}
	for _, l := range readmeLines {
		add(l.workload, l.own, 100)
		for _, base := range l.bases {
			add(l.workload, base, 200)
		}
	}
	path := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadmeTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(fixture(t), true, "", false, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	labelled := 0
	for _, l := range readmeLines {
		if l.workload == "W8/batch-64-puts" || l.own == "kvbuf-flush-only" || slices.Contains(l.bases, "singleflight") {
			labelled++
		}
	}
	if n := strings.Count(s, "\n| "); n != len(readmeLines)+4 { // two tables, each with a header and its rule
		t.Errorf("%d table lines, want %d:\n%s", n, len(readmeLines)+4, s)
	}
	head, rest, ok := strings.Cut(s, "Not headlines")
	if !ok || strings.Count(rest, "\n| ")-2 != labelled {
		t.Fatalf("second table holds %d lines, want the %d labelled ones:\n%s", strings.Count(rest, "\n| ")-2, labelled, s)
	}
	for _, want := range []string{"(7 measured rounds per workload after one warm-up)",
		"| W1 bit lookup, nothing pending | 100 ns (90 ns–200 ns) ‡ | `raw` 200 ns (180 ns–400 ns) ‡;",
		"| 2× (1.5–3.5) ‡ | 50 ns; `get-loop` 50 ns | –; `get-loop` – |\n", "≥3 violations", "`kvbuf-getmany` 100 ns", "90 B",
		"| CPU per op: kvbuf; baselines | disk bytes per user byte: kvbuf; baselines |\n",
		"| 2 (2–2); `pebble-batch-sync` 3.5 (3.5–3.5); `pebble-batch-sync-store-memtable` 3.5 (3.5–3.5);"} {
		if !strings.Contains(head, want) {
			t.Errorf("headline table lacks %q:\n%s", want, s)
		}
	}
	for _, want := range []string{"| W8 64 puts as one batch (per put) |", "write only, durability not included |\n",
		"| W6 the `Flush` of 1M pending KV puts alone |", "component: part of the work off the clock |\n"} {
		if !strings.Contains(rest, want) {
			t.Errorf("second table lacks %q:\n%s", want, s)
		}
	}
	if !strings.Contains(rest, "\nDisk bytes per user byte: what the process wrote") {
		t.Errorf("no note on the disk column:\n%s", s)
	}
	if strings.Contains(head, "W8 64 puts as one batch") || strings.Contains(head, "Flush` of 1M pending KV puts alone") {
		t.Errorf("a labelled line is in the headline table:\n%s", head)
	}
}

// TestReadmeTableOldRun: a run from before per-round ratios renders the
// ratio of medians, saying so.
func TestReadmeTableOldRun(t *testing.T) {
	own := row{Workload: "W", Impl: "kvbuf", NsPerOp: 100}
	base := row{Workload: "W", Impl: "b", NsPerOp: 250}
	if got := fmtPairRatio(own, base); got != "2.5× (medians)" {
		t.Errorf("old run: %q", got)
	}
	own.RatioVs, own.RatioVsMin, own.RatioVsMax = map[string]float64{"b": 2.4}, map[string]float64{"b": 2}, map[string]float64{"b": 2.9}
	if got := fmtPairRatio(own, base); got != "2.4× (2–2.9)" {
		t.Errorf("per-round ratio: %q", got)
	}
	if got := roundsOf([]row{{Rounds: 7}, {Rounds: 9}}); got != "7 to 9 measured rounds per workload after one warm-up" {
		t.Errorf("rounds: %q", got)
	}
}

// TestReadmeTableWithoutDisk: a run without disk figures (before they
// existed, or where nothing is counted) keeps the table without the disk
// column.
func TestReadmeTableWithoutDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	line := `{"workload":"W6/flush-kv-1m","impl":"kvbuf","unit":"flush","ns_per_op":1e6,"ns_per_op_min":1e6,"ns_per_op_max":1e6,"rounds":7}`
	if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(path, true, "", true, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "disk bytes") || strings.Contains(s, "Disk bytes") || !strings.Contains(s, "| CPU per op: kvbuf; baselines |\n") {
		t.Errorf("a run without disk figures:\n%s", s)
	}
}

func TestReadmeTableMissingRows(t *testing.T) {
	path := fixture(t, "W8/delete-1m delete-loop", "W2/get-pending-hit-cpu2 kvbuf")
	var out bytes.Buffer
	err := run(path, true, "", false, &out)
	if err == nil || !strings.Contains(err.Error(), "W8/delete-1m delete-loop") || !strings.Contains(err.Error(), "W2/get-pending-hit-cpu2 kvbuf") {
		t.Errorf("missing rows: err = %v", err)
	}
	out.Reset()
	if err := run(path, true, "", true, &out); err != nil || !strings.Contains(out.String(), "`delete-loop` –") {
		t.Errorf("-partial: err = %v\n%s", err, out.String())
	}
}

func TestAllTablesAndWrite(t *testing.T) {
	path := fixture(t)
	var out bytes.Buffer
	if err := run(path, false, "", false, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### W1\n", "### W8\n", "| W8/delete-1m | `delete-loop` | op | 200 ns (180 ns–400 ns) ‡ | 50 ns | – | 0 | 2× (1.5–3.5) ‡ | – |",
		"| W8/batch-64-puts | `kvbuf` | op | 100 ns (90 ns–200 ns) ‡ | 50 ns | 2 (2–2) | 0 | – | write only, durability not included |",
		"| W6/flush-kv-1m | `pebble-batch-sync` | op | 200 ns (180 ns–400 ns) ‡ | 50 ns | 3.5 (3.5–3.5) | 0 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tables lack %q", want)
		}
	}
	readme := filepath.Join(t.TempDir(), "README.md")
	doc := "# x\n\nbefore\n" + beginMarker + "\nold table\n" + endMarker + "\nafter\n"
	if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(path, true, readme, false, &out); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(readme)
	got := string(b)
	if strings.Contains(got, "old table") || !strings.HasPrefix(got, "# x\n\nbefore\n"+beginMarker+"\nGenerated by") ||
		!strings.HasSuffix(got, "\n"+endMarker+"\nafter\n") || !strings.Contains(got, "| W8 delete 1M keys, durable |") {
		t.Errorf("rewritten README:\n%s", got)
	}
	if err := os.WriteFile(readme, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(path, true, readme, false, &out); err == nil {
		t.Error("README without markers rewritten")
	}
	if err := run(filepath.Join(t.TempDir(), "none.json"), false, "", false, &out); err == nil {
		t.Error("missing run file accepted")
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	os.WriteFile(empty, []byte("== nothing\n"), 0o644)
	if err := run(empty, false, "", false, &out); err == nil {
		t.Error("run without rows accepted")
	}
}

// TestDiskCell: the disk figure over all rounds with the per-round
// min–max; none, or a negative figure, is "–".
func TestDiskCell(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		r    row
		want string
	}{
		{row{DiskBytesPerUserByte: f(4), DiskPerUserByteRounds: []float64{1, 1, 10}}, "4 (1–10)"},
		{row{DiskBytesPerUserByte: f(4)}, "4"},
		{row{DiskBytesPerUserByte: f(-0.5), DiskPerUserByteRounds: []float64{-0.5}}, "–"},
		{row{}, "–"},
	} {
		if got := diskCell(tc.r); got != tc.want {
			t.Errorf("diskCell(%v, rounds %v) = %q, want %q", tc.r.DiskBytesPerUserByte, tc.r.DiskPerUserByteRounds, got, tc.want)
		}
	}
}

// TestBusyRoundsMark: a row whose quiesce or settle step found a store
// still busy in some rounds (busy_rounds) is marked §N/M in both tables,
// which then explain the mark; a run without such a row has neither.
func TestBusyRoundsMark(t *testing.T) {
	mk := func(busy int) []row {
		return []row{{Workload: "W2/get-mixed", Impl: "kvbuf", Unit: "get", NsPerOp: 100, NsPerOpMin: 90, NsPerOpMax: 110, Rounds: 7, BusyRounds: busy}}
	}
	for _, busy := range []int{2, 0} {
		var all, readme strings.Builder
		if err := allTables(&all, mk(busy)); err != nil {
			t.Fatal(err)
		}
		if err := readmeTable(&readme, mk(busy), true); err != nil {
			t.Fatal(err)
		}
		for name, out := range map[string]string{"all": all.String(), "readme": readme.String()} {
			marked := strings.Contains(out, "(90 ns–110 ns) §2/7") && strings.Contains(out, "§N/M: in N of the row's M rounds")
			if marked != (busy > 0) || (busy == 0 && strings.Contains(out, "§")) {
				t.Errorf("%s table of a row with %d busy rounds:\n%s", name, busy, out)
			}
		}
	}
}
