package kvbufprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvbuf/kvbuf"
)

// budgetCollector reports a BudgetMetrics snapshot per scrape.
type budgetCollector struct {
	metrics func() kvbuf.BudgetMetrics

	size, high, bytes, maxBytes, engines  *prometheus.Desc
	forcedBytes, maxForced                *prometheus.Desc
	forced, forcedErrors, flushesInFlight *prometheus.Desc
	waits, waitSeconds, waiting           *prometheus.Desc
}

// NewBudgetCollector returns a collector of the metrics of a memory budget
// shared by several engines (kvbuf.MemoryBudget.Metrics, read once per
// scrape). Register one per budget, next to the engines' collectors (whose
// kvbuf_budget_* series are each engine's share); opts.ConstLabels tell
// the budgets of one process apart, opts.AllLatencyBuckets is unused.
//
//	kvbuf_memory_budget_size_bytes               the budget's size (Size)
//	kvbuf_memory_budget_high_mark_bytes          the total past which it forces flushes (HighMark)
//	kvbuf_memory_budget_bytes                    the engines' pending bytes together (Bytes)
//	kvbuf_memory_budget_max_bytes                the highest total so far (MaxBytes)
//	kvbuf_memory_budget_forced_bytes_total       the shares its forced flushes started with (ForcedBytes)
//	kvbuf_memory_budget_max_forced_bytes         the largest of them (MaxForcedBytes)
//	kvbuf_memory_budget_engines                  engines open with the budget (Engines)
//	kvbuf_memory_budget_forced_flushes_total     flushes the budget forced (ForcedFlushes)
//	kvbuf_memory_budget_forced_flush_errors_total  forced flushes that failed (ForcedFlushErrors)
//	kvbuf_memory_budget_flushes_in_progress      forced flushes running now (FlushesInProgress)
//	kvbuf_memory_budget_waits_total              writes that queued for the budget (Waits)
//	kvbuf_memory_budget_wait_seconds_total       the time they waited (WaitTime)
//	kvbuf_memory_budget_waiting                  writes waiting now (Waiting)
func NewBudgetCollector(b *kvbuf.MemoryBudget, opts *Options) prometheus.Collector {
	return newBudgetCollector(b.Metrics, opts)
}

func newBudgetCollector(metrics func() kvbuf.BudgetMetrics, opts *Options) *budgetCollector {
	desc := descMaker("kvbuf_memory_budget_", opts)
	return &budgetCollector{
		metrics:         metrics,
		size:            desc("size_bytes", "The memory budget's size."),
		high:            desc("high_mark_bytes", "The total pending bytes past which the budget forces flushes."),
		bytes:           desc("bytes", "The pending bytes of the budget's engines together, as of their latest writes and flushes."),
		maxBytes:        desc("max_bytes", "The highest total pending bytes of the budget's engines so far."),
		forcedBytes:     desc("forced_bytes_total", "The engines' shares when the budget forced them to flush, summed."),
		maxForced:       desc("max_forced_bytes", "The largest share an engine held when the budget forced it to flush."),
		engines:         desc("engines", "Engines open with the budget."),
		forced:          desc("forced_flushes_total", "Flushes the budget forced."),
		forcedErrors:    desc("forced_flush_errors_total", "Flushes the budget forced that failed."),
		flushesInFlight: desc("flushes_in_progress", "Flushes the budget forced that are running now."),
		waits:           desc("waits_total", "Writes that queued for the budget (past half its high mark, or behind a round in progress)."),
		waitSeconds:     desc("wait_seconds_total", "Time writes queued for the budget."),
		waiting:         desc("waiting", "Writes waiting for the budget now."),
	}
}

func (c *budgetCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.size, c.high, c.bytes, c.maxBytes, c.forcedBytes, c.maxForced, c.engines,
		c.forced, c.forcedErrors, c.flushesInFlight, c.waits, c.waitSeconds, c.waiting}
}

// Describe implements prometheus.Collector.
func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.descs()) }

// Collect implements prometheus.Collector.
func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.metrics()
	out := sink(ch)
	out.gauge(c.size, float64(m.Size))
	out.gauge(c.high, float64(m.HighMark))
	out.gauge(c.bytes, float64(m.Bytes))
	out.gauge(c.maxBytes, float64(m.MaxBytes))
	out.counter(c.forcedBytes, float64(m.ForcedBytes))
	out.gauge(c.maxForced, float64(m.MaxForcedBytes))
	out.gauge(c.engines, float64(m.Engines))
	out.counter(c.forced, float64(m.ForcedFlushes))
	out.counter(c.forcedErrors, float64(m.ForcedFlushErrors))
	out.gauge(c.flushesInFlight, float64(m.FlushesInProgress))
	out.counter(c.waits, float64(m.Waits))
	out.counter(c.waitSeconds, m.WaitTime.Seconds())
	out.gauge(c.waiting, float64(m.Waiting))
}
