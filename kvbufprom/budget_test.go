package kvbufprom

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvbuf/kvbuf"
)

// TestBudgetCollector reports a real budget with one engine: its size, the
// engine's share after a write, and zero after the engine's Close.
func TestBudgetCollector(t *testing.T) {
	b, err := kvbuf.NewMemoryBudget(1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := kvbuf.Open(t.TempDir(), &kvbuf.Options{MemoryBudget: b, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := db.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(context.Background(), []byte("a"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	c := NewBudgetCollector(b, &Options{ConstLabels: prometheus.Labels{"budget": "main"}})
	share := db.Metrics().BudgetBytes
	if share <= 0 {
		t.Fatalf("engine share %d after a write", share)
	}
	want := func(bytes, maxBytes int64, engines int) string {
		return strings.NewReplacer("BYTES", itoa(bytes), "MAX", itoa(maxBytes), "ENGINES", itoa(int64(engines))).Replace(`
# HELP kvbuf_memory_budget_size_bytes The memory budget's size.
# TYPE kvbuf_memory_budget_size_bytes gauge
kvbuf_memory_budget_size_bytes{budget="main"} 1.048576e+06
# HELP kvbuf_memory_budget_high_mark_bytes The total pending bytes past which the budget forces flushes.
# TYPE kvbuf_memory_budget_high_mark_bytes gauge
kvbuf_memory_budget_high_mark_bytes{budget="main"} 943718
# HELP kvbuf_memory_budget_bytes The pending bytes of the budget's engines together, as of their latest writes and flushes.
# TYPE kvbuf_memory_budget_bytes gauge
kvbuf_memory_budget_bytes{budget="main"} BYTES
# HELP kvbuf_memory_budget_max_bytes The highest total pending bytes of the budget's engines so far.
# TYPE kvbuf_memory_budget_max_bytes gauge
kvbuf_memory_budget_max_bytes{budget="main"} MAX
# HELP kvbuf_memory_budget_engines Engines open with the budget.
# TYPE kvbuf_memory_budget_engines gauge
kvbuf_memory_budget_engines{budget="main"} ENGINES
# HELP kvbuf_memory_budget_waits_total Writes that queued for the budget (past half its high mark, or behind a round in progress).
# TYPE kvbuf_memory_budget_waits_total counter
kvbuf_memory_budget_waits_total{budget="main"} 0
`)
	}
	names := []string{"kvbuf_memory_budget_size_bytes", "kvbuf_memory_budget_high_mark_bytes", "kvbuf_memory_budget_bytes",
		"kvbuf_memory_budget_max_bytes", "kvbuf_memory_budget_engines", "kvbuf_memory_budget_waits_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(share, share, 1)), names...); err != nil {
		t.Error(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(0, share, 0)), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 13 {
		t.Errorf("%d series, want 13", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatFloat(float64(n), 'g', -1, 64) }
