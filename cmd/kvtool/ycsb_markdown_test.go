package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/bench/ycsb"
)

// TestYCSBMarkdownScans: the --markdown table's read p99 columns give a
// workload that reads only by scans (E) its scans' p99s, marked "scan"
// ("scan –" for an engine that never flushed during it), and a workload
// with reads as well as scans its reads', unmarked.
func TestYCSBMarkdownScans(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	row := func(w, engine string, ops map[string]ycsb.OpStats) ycsb.Row {
		return ycsb.Row{Workload: w, Threads: 1, Engine: engine, Durability: "window", Rounds: 1,
			OpsPerSec: 1000, MinOpsPerSec: 1000, MaxOpsPerSec: 1000, Ops: ops}
	}
	st := func(p99 time.Duration) ycsb.OpStats {
		return ycsb.OpStats{Count: 10, P50: p99 / 2, P99: p99, P999: p99}
	}
	rows := []ycsb.Row{
		row("e", "kvbuf", map[string]ycsb.OpStats{ycsb.OpScan: st(ms(3)), ycsb.OpScanInFlush: st(ms(7)), ycsb.OpInsert: st(ms(1))}),
		row("e", "pebble", map[string]ycsb.OpStats{ycsb.OpScan: st(ms(2)), ycsb.OpInsert: st(ms(1))}),
		row("mixed", "kvbuf", map[string]ycsb.OpStats{ycsb.OpRead: st(ms(5)), ycsb.OpReadInFlush: st(ms(9)), ycsb.OpScan: st(ms(11))}),
		row("mixed", "pebble", map[string]ycsb.OpStats{ycsb.OpRead: st(ms(4)), ycsb.OpScan: st(ms(13))}),
	}
	md := ycsbMarkdown(rows, ycsb.Config{})
	var e, mixed string
	for _, l := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(l, "| E |"):
			e = l
		case strings.HasPrefix(l, "| mixed |"):
			mixed = l
		}
	}
	if !strings.HasSuffix(e, "| scan 3 ms / scan 2 ms | scan 7 ms / scan – |") {
		t.Errorf("E's row ends %q, want its scans' p99s marked scan:\n%s", e, md)
	}
	if !strings.HasSuffix(mixed, "| 5 ms / 4 ms | 9 ms / – |") {
		t.Errorf("the mixed row ends %q, want its reads' p99s:\n%s", mixed, md)
	}
}
