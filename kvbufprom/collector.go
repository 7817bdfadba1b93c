// Package kvbufprom exports the metrics of a kvbuf engine (kvbuf.Metrics) to
// Prometheus.
//
// NewCollector returns a prometheus.Collector that reads DB.Metrics once per
// scrape and reports every field of it (NewCollectorFunc: of any function
// returning kvbuf.Metrics, for a host whose engine changes). Register one per engine; a host with
// an engine per shard tells them apart with a constant label:
//
//	reg.MustRegister(kvbufprom.NewCollector(db, &kvbufprom.Options{
//		ConstLabels: prometheus.Labels{"shard": "7"},
//	}))
//
// # Metrics
//
// Counters count since the engine was opened (they restart at zero when it is
// reopened, which Prometheus' rate functions treat as a reset):
//
//	kvbuf_flushes_total              Flush calls admitted (Metrics.Flushes)
//	kvbuf_flushes_coalesced_total    Flush calls that joined a generation another caller opened (Coalesced)
//	kvbuf_generations_total          generations frozen: physical flushes, background ones included (Generations)
//	kvbuf_generation_writes_total    generation writes, retries included (GenerationWrites)
//	kvbuf_flush_failures_total       failed flush attempts (Failures)
//	kvbuf_disk_full_total            times the engine met a full disk (DiskFull)
//	kvbuf_write_stalls_total         writes that waited for room under MaxPendingBytes (Stalls)
//	kvbuf_write_stall_seconds_total  the time those writes waited (StallTime)
//	kvbuf_redelivered_total          writes, batches and EndOps skipped: op at or below the watermark (Redelivered)
//	kvbuf_ingested_generations_total generations flushed by ingestion (IngestedGenerations)
//	kvbuf_store_flushes_total        the store's memtable flushes (StoreFlushes)
//	kvbuf_store_compactions_total    the store's compactions (StoreCompactions)
//	kvbuf_store_ingests_total        the store's ingestions (StoreIngests)
//	kvbuf_store_compacted_bytes_total  bytes the store's compactions wrote (StoreCompactedBytes)
//	kvbuf_store_written_bytes_total  bytes the store wrote: its log, flushed, compacted and ingested tables (StoreBytesWritten)
//	kvbuf_store_l0_waits_total       flushes by ingestion that waited for the store's L0 compactions (StoreL0Waits)
//	kvbuf_store_l0_wait_seconds_total    the time those flushes waited (StoreL0WaitTime)
//	kvbuf_read_tier_evictions_total  generations the read tier evicted (ReadTierEvictions)
//	kvbuf_flush_yields_total         times the flusher yielded the processor between slices of its work (FlushYields)
//	kvbuf_flush_throttled_seconds_total  time the flusher slept to stay within FlushCPUPercent (FlushThrottled)
//	kvbuf_budget_forced_flushes_total    flushes the engine's memory budget forced on it (BudgetForcedFlushes)
//	kvbuf_budget_waits_total             writes that queued for the memory budget (BudgetWaits)
//	kvbuf_budget_wait_seconds_total      the time those writes waited (BudgetWaitTime)
//	kvbuf_watch_delivered_total      change-feed events (changes and marks) watches read (WatchDelivered)
//	kvbuf_watch_lagged_total         watches ended because they fell behind the feed's buffer (WatchLagged)
//	kvbuf_watch_overflows_total      times unresolved changes outgrew the feed's bound and every watch lagged (WatchOverflows)
//
// Gauges:
//
//	kvbuf_pending_bytes              memory held by pending changes (PendingBytes)
//	kvbuf_pending_keys               KV keys held by pending tables (PendingKeys)
//	kvbuf_flush_last_error           1 once a flush attempt has failed since Open, else 0 (LastError != nil)
//	kvbuf_disk_full_waiting          1 while store writes wait for disk space, else 0 (DiskFullWaiting)
//	kvbuf_generations_in_flight      generations frozen and not yet durable (InFlight)
//	kvbuf_generations_in_flight_max  the highest InFlight so far (MaxInFlight)
//	kvbuf_watermark                  the persisted watermark, an op number (Watermark)
//	kvbuf_highest_op                 the highest op number seen, also before a reopen (HighestOp)
//	kvbuf_receipt_lag_ops            HighestOp - Watermark: how far the durable receipt trails the writes (ReceiptLag)
//	kvbuf_completed_op               the highest op n with every op <= n ended: what the next flush may persist (CompletedOp)
//	kvbuf_open_ops                   ops begun and not ended (OpenOps)
//	kvbuf_keyspaces                  keyspaces of the engine (Keyspaces)
//	kvbuf_bitslices                  bitslices of the engine (Bitslices)
//	kvbuf_snapshots                  open snapshots (Snapshots)
//	kvbuf_store_jobs                 the store's flushes and compactions in progress (StoreJobs)
//	kvbuf_store_l0_files             sstables in the store's level 0 (StoreL0Files)
//	kvbuf_store_read_amp             the store's read amplification (StoreReadAmp)
//	kvbuf_store_log_bytes            live data of the store's write-ahead log (StoreLogBytes)
//	kvbuf_read_tier_bytes            memory held by the read tier (ReadTierBytes)
//	kvbuf_read_tier_generations      generations the read tier holds (ReadTierGenerations)
//	kvbuf_budget_bytes               the engine's share of its memory budget (BudgetBytes)
//	kvbuf_watch_subscribers          open watches (WatchSubscribers)
//	kvbuf_watch_buffer_bytes         memory the change feed holds (WatchBufferBytes)
//	kvbuf_watch_resolved_op          the op of the feed's newest resolved mark (WatchResolvedOp)
//	kvbuf_watch_durable_op           the op of the newest mark durable-mode watches may read (WatchDurableOp)
//	kvbuf_watch_retained_bytes       bytes of changes retained in the store for resuming watches (WatchRetainedBytes)
//	kvbuf_watch_retained_from_op     the lowest op a watch may resume from the store (WatchRetainedFrom)
//
// Histogram:
//
//	kvbuf_flush_duration_seconds     durations of Flush calls (FlushLatency)
//
// The histogram's buckets are the engine's own (kvbuf.LatencyHistogram), made
// cumulative, so no observation is re-bucketed: by default one bucket per
// power of two from 1.024µs to about 68.7s (27 buckets plus +Inf), or all 105
// of the engine's buckets (four per power of two) with
// Options.AllLatencyBuckets. The engine's buckets exclude their upper bound
// where Prometheus' "le" includes it, so a duration exactly equal to a bound
// (to the nanosecond) is counted in the next bucket.
//
// The error text of Metrics.LastError is not exported: as a label value it
// would make a new series for every distinct error. Log it from
// DB.Metrics().LastError when kvbuf_flush_failures_total grows.
//
// Op numbers are exported as float64 values, exact up to 2^53.
//
// The collector works after the engine is closed (DB.Metrics does; the
// counters stop), so it need not be unregistered before DB.Close.
package kvbufprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvbuf/kvbuf"
)

// Options configures a collector. A nil *Options means the zero value.
type Options struct {
	// ConstLabels are added to every metric, to tell apart the engines of
	// one process (for example {"shard": "7"}). Label names must be valid
	// Prometheus label names; collectors registered with the same registry
	// must differ in their label values.
	ConstLabels prometheus.Labels

	// AllLatencyBuckets exports every bucket of the flush latency histogram
	// (four per power of two: 105 series plus +Inf) instead of one per power
	// of two (27 plus +Inf).
	AllLatencyBuckets bool
}

// collector reports a Metrics snapshot per scrape.
type collector struct {
	metrics func() kvbuf.Metrics
	bounds  []int // engine bucket indexes whose upper bounds are exported

	pendingBytes, pendingKeys                       *prometheus.Desc
	flushes, coalesced, generations, generationWrts *prometheus.Desc
	failures, lastError                             *prometheus.Desc
	diskFull, diskFullWaiting                       *prometheus.Desc
	stalls, stallSeconds                            *prometheus.Desc
	latency                                         *prometheus.Desc
	inFlight, maxInFlight                           *prometheus.Desc
	watermark, highestOp, receiptLag                *prometheus.Desc
	completedOp, openOps, redelivered               *prometheus.Desc
	keyspaces, bitslices, snapshots                 *prometheus.Desc
	storeJobs                                       *prometheus.Desc
	storeL0Files, storeReadAmp, storeLogBytes       *prometheus.Desc
	ingested                                        *prometheus.Desc
	storeFlushes, storeCompactions, storeIngests    *prometheus.Desc
	storeCompacted, storeWritten                    *prometheus.Desc
	storeL0Waits, storeL0WaitSeconds                *prometheus.Desc
	tierBytes, tierGenerations, tierEvictions       *prometheus.Desc
	flushYields, flushThrottled                     *prometheus.Desc
	budgetBytes, budgetForced                       *prometheus.Desc
	budgetWaits, budgetWaitSeconds                  *prometheus.Desc
	watchSubs, watchDelivered, watchLagged          *prometheus.Desc
	watchOverflows, watchBuffer                     *prometheus.Desc
	watchResolved, watchDurable                     *prometheus.Desc
	watchRetained, watchRetainedFrom                *prometheus.Desc
}

// NewCollector returns a collector of db's metrics (see the package
// documentation for the names). Each scrape calls db.Metrics once. Register
// it with a prometheus.Registerer; registering fails (Register returns an
// error, MustRegister panics) if opts.ConstLabels holds an invalid label
// name.
func NewCollector(db *kvbuf.DB, opts *Options) prometheus.Collector {
	return newCollector(db.Metrics, opts)
}

// NewCollectorFunc returns a collector of the metrics that metrics returns,
// called once per scrape: for a host whose engine changes while the
// collector is registered (a raftkv node installs a snapshot into a new
// engine, whose counters restart at zero). Otherwise as NewCollector.
func NewCollectorFunc(metrics func() kvbuf.Metrics, opts *Options) prometheus.Collector {
	return newCollector(metrics, opts)
}

func newCollector(metrics func() kvbuf.Metrics, opts *Options) *collector {
	var o Options
	if opts != nil {
		o = *opts
	}
	desc := descMaker("kvbuf_", &o)
	c := &collector{
		metrics: metrics,

		pendingBytes: desc("pending_bytes", "Memory held by pending changes: written, not yet durable and released."),
		pendingKeys:  desc("pending_keys", "KV keys held by pending tables (a key pending in two generations counts twice)."),

		flushes:        desc("flushes_total", "Flush calls admitted."),
		coalesced:      desc("flushes_coalesced_total", "Flush calls that joined a generation another caller had opened (group commit)."),
		generations:    desc("generations_total", "Generations frozen: physical flushes, background ones included."),
		generationWrts: desc("generation_writes_total", "Generation writes, retries of failed generations included."),

		failures:  desc("flush_failures_total", "Failed flush attempts."),
		lastError: desc("flush_last_error", "1 if a flush attempt has failed since the engine was opened, else 0 (the error text is DB.Metrics().LastError)."),

		diskFull:        desc("disk_full_total", "Times the engine met a full disk: store write episodes, flush attempts, stalls and checkpoints that found no space."),
		diskFullWaiting: desc("disk_full_waiting", "1 while store writes wait for disk space (Flush returns ErrDiskFull meanwhile), else 0."),

		stalls:       desc("write_stalls_total", "Writes that waited for a flush because pending memory was over its bound."),
		stallSeconds: desc("write_stall_seconds_total", "Time writes spent waiting for a flush because pending memory was over its bound."),

		latency: desc("flush_duration_seconds", "Durations of Flush calls."),

		inFlight:    desc("generations_in_flight", "Generations frozen and not yet durable."),
		maxInFlight: desc("generations_in_flight_max", "The highest number of generations in flight since the engine was opened."),

		watermark:  desc("watermark", "The persisted watermark: every write of every op up to it is durable."),
		highestOp:  desc("highest_op", "The highest op number seen: written, batched, begun or ended (also before a reopen, as far as a flush recorded it)."),
		receiptLag: desc("receipt_lag_ops", "Op numbers between the persisted watermark and the highest op admitted (0 if the host does not track ops)."),

		completedOp: desc("completed_op", "The highest op n such that every op up to n has ended: what the next flush may persist as the watermark."),
		openOps:     desc("open_ops", "Ops begun and not ended."),
		redelivered: desc("redelivered_total", "Writes, batches and EndOp calls skipped because their op was at or below the watermark (redelivered ops)."),

		keyspaces: desc("keyspaces", "Keyspaces of the engine."),
		bitslices: desc("bitslices", "Bitslices of the engine."),
		snapshots: desc("snapshots", "Open snapshots."),
		storeJobs: desc("store_jobs", "Flushes and compactions of the store (pebble) in progress."),

		storeL0Files:       desc("store_l0_files", "Sstables in level 0 of the store (pebble)."),
		storeReadAmp:       desc("store_read_amp", "Read amplification of the store: memtables, L0 sublevels and lower levels a point read may search."),
		storeLogBytes:      desc("store_log_bytes", "Live data of the store's write-ahead log: what its memtables hold that no flush has written to an sstable yet."),
		ingested:           desc("ingested_generations_total", "Generations flushed by ingesting sstables rather than through the write-ahead log."),
		storeL0Waits:       desc("store_l0_waits_total", "Flushes by ingestion that waited for the store to compact its L0 below its stop-writes depth."),
		storeL0WaitSeconds: desc("store_l0_wait_seconds_total", "Time flushes by ingestion waited for the store to compact its L0."),

		storeFlushes:     desc("store_flushes_total", "Memtable flushes of the store (pebble)."),
		storeCompactions: desc("store_compactions_total", "Compactions of the store (pebble)."),
		storeIngests:     desc("store_ingests_total", "Ingestions of sstables into the store (pebble)."),
		storeCompacted:   desc("store_compacted_bytes_total", "Bytes the store's compactions wrote."),
		storeWritten:     desc("store_written_bytes_total", "Bytes the store wrote: its write-ahead log, the tables its flushes and compactions wrote, and the tables ingested."),

		tierBytes:       desc("read_tier_bytes", "Memory held by the read tier: flushed generations kept readable."),
		tierGenerations: desc("read_tier_generations", "Flushed generations the read tier holds."),
		tierEvictions:   desc("read_tier_evictions_total", "Generations the read tier evicted."),

		flushYields:    desc("flush_yields_total", "Times the flusher yielded the processor between two slices of its work on a generation's tables."),
		flushThrottled: desc("flush_throttled_seconds_total", "Time the flusher slept to stay within its CPU share (FlushCPUPercent)."),

		budgetBytes:       desc("budget_bytes", "The engine's share of its memory budget: its pending bytes as of its latest write or flush."),
		budgetForced:      desc("budget_forced_flushes_total", "Flushes the engine's memory budget forced on it."),
		budgetWaits:       desc("budget_waits_total", "Writes that queued for the engine's memory budget (past half its high mark, or behind a round in progress)."),
		budgetWaitSeconds: desc("budget_wait_seconds_total", "Time writes queued for the engine's memory budget."),

		watchSubs:         desc("watch_subscribers", "Open watches of the change feed."),
		watchDelivered:    desc("watch_delivered_total", "Change-feed events (changes and resolved marks) watches read."),
		watchLagged:       desc("watch_lagged_total", "Watches ended because they fell behind the change feed's buffer (ErrLagged)."),
		watchOverflows:    desc("watch_overflows_total", "Times the change feed's unresolved changes outgrew its bound and every watch lagged."),
		watchBuffer:       desc("watch_buffer_bytes", "Memory the change feed holds: resolved and unresolved changes."),
		watchResolved:     desc("watch_resolved_op", "The op of the change feed's newest resolved mark."),
		watchDurable:      desc("watch_durable_op", "The op of the newest resolved mark durable-mode watches may read."),
		watchRetained:     desc("watch_retained_bytes", "Bytes of changes retained in the store for watches that resume after a restart."),
		watchRetainedFrom: desc("watch_retained_from_op", "The lowest op a watch may resume from with the changes retained in the store (0 without retention)."),
	}
	for i := range kvbuf.LatencyBuckets - 1 { // the last bucket is +Inf
		if o.AllLatencyBuckets || i%4 == 0 {
			c.bounds = append(c.bounds, i)
		}
	}
	return c
}

// sink is a Collect channel, with the sends of one sample.
type sink chan<- prometheus.Metric

func (ch sink) counter(d *prometheus.Desc, v float64) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
}

func (ch sink) gauge(d *prometheus.Desc, v float64) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
}

// descMaker returns the constructor of the descriptions of a collector's
// series: each name gets prefix, and opts' constant labels (opts may be
// nil).
func descMaker(prefix string, opts *Options) func(name, help string) *prometheus.Desc {
	var labels prometheus.Labels
	if opts != nil {
		labels = opts.ConstLabels
	}
	return func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, help, nil, labels)
	}
}

// describe sends descs to a Describe channel.
func describe(ch chan<- *prometheus.Desc, descs []*prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c *collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.pendingBytes, c.pendingKeys,
		c.flushes, c.coalesced, c.generations, c.generationWrts,
		c.failures, c.lastError,
		c.diskFull, c.diskFullWaiting,
		c.stalls, c.stallSeconds,
		c.latency,
		c.inFlight, c.maxInFlight,
		c.watermark, c.highestOp, c.receiptLag,
		c.completedOp, c.openOps, c.redelivered,
		c.keyspaces, c.bitslices, c.snapshots,
		c.storeJobs, c.storeL0Files, c.storeReadAmp, c.storeLogBytes, c.ingested,
		c.storeFlushes, c.storeCompactions, c.storeIngests, c.storeCompacted, c.storeWritten,
		c.storeL0Waits, c.storeL0WaitSeconds,
		c.tierBytes, c.tierGenerations, c.tierEvictions,
		c.flushYields, c.flushThrottled,
		c.budgetBytes, c.budgetForced, c.budgetWaits, c.budgetWaitSeconds,
		c.watchSubs, c.watchDelivered, c.watchLagged, c.watchOverflows, c.watchBuffer,
		c.watchResolved, c.watchDurable, c.watchRetained, c.watchRetainedFrom,
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.descs()) }

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := c.metrics()
	out := sink(ch)
	out.gauge(c.pendingBytes, float64(m.PendingBytes))
	out.gauge(c.pendingKeys, float64(m.PendingKeys))
	out.counter(c.flushes, float64(m.Flushes))
	out.counter(c.coalesced, float64(m.Coalesced))
	out.counter(c.generations, float64(m.Generations))
	out.counter(c.generationWrts, float64(m.GenerationWrites))
	out.counter(c.failures, float64(m.Failures))
	lastErr := 0.0
	if m.LastError != nil {
		lastErr = 1
	}
	out.gauge(c.lastError, lastErr)
	out.counter(c.diskFull, float64(m.DiskFull))
	waiting := 0.0
	if m.DiskFullWaiting {
		waiting = 1
	}
	out.gauge(c.diskFullWaiting, waiting)
	out.counter(c.stalls, float64(m.Stalls))
	out.counter(c.stallSeconds, m.StallTime.Seconds())
	ch <- c.histogram(&m.FlushLatency)
	out.gauge(c.inFlight, float64(m.InFlight))
	out.gauge(c.maxInFlight, float64(m.MaxInFlight))
	out.gauge(c.watermark, float64(m.Watermark))
	out.gauge(c.highestOp, float64(m.HighestOp))
	out.gauge(c.receiptLag, float64(m.ReceiptLag))
	out.gauge(c.completedOp, float64(m.CompletedOp))
	out.gauge(c.openOps, float64(m.OpenOps))
	out.counter(c.redelivered, float64(m.Redelivered))
	out.gauge(c.keyspaces, float64(m.Keyspaces))
	out.gauge(c.bitslices, float64(m.Bitslices))
	out.gauge(c.snapshots, float64(m.Snapshots))
	out.gauge(c.storeJobs, float64(m.StoreJobs))
	out.gauge(c.storeL0Files, float64(m.StoreL0Files))
	out.gauge(c.storeReadAmp, float64(m.StoreReadAmp))
	out.gauge(c.storeLogBytes, float64(m.StoreLogBytes))
	out.counter(c.ingested, float64(m.IngestedGenerations))
	out.counter(c.storeFlushes, float64(m.StoreFlushes))
	out.counter(c.storeCompactions, float64(m.StoreCompactions))
	out.counter(c.storeIngests, float64(m.StoreIngests))
	out.counter(c.storeCompacted, float64(m.StoreCompactedBytes))
	out.counter(c.storeWritten, float64(m.StoreBytesWritten))
	out.counter(c.storeL0Waits, float64(m.StoreL0Waits))
	out.counter(c.storeL0WaitSeconds, m.StoreL0WaitTime.Seconds())
	out.gauge(c.tierBytes, float64(m.ReadTierBytes))
	out.gauge(c.tierGenerations, float64(m.ReadTierGenerations))
	out.counter(c.tierEvictions, float64(m.ReadTierEvictions))
	out.counter(c.flushYields, float64(m.FlushYields))
	out.counter(c.flushThrottled, m.FlushThrottled.Seconds())
	out.gauge(c.budgetBytes, float64(m.BudgetBytes))
	out.counter(c.budgetForced, float64(m.BudgetForcedFlushes))
	out.counter(c.budgetWaits, float64(m.BudgetWaits))
	out.counter(c.budgetWaitSeconds, m.BudgetWaitTime.Seconds())
	out.gauge(c.watchSubs, float64(m.WatchSubscribers))
	out.counter(c.watchDelivered, float64(m.WatchDelivered))
	out.counter(c.watchLagged, float64(m.WatchLagged))
	out.counter(c.watchOverflows, float64(m.WatchOverflows))
	out.gauge(c.watchBuffer, float64(m.WatchBufferBytes))
	out.gauge(c.watchResolved, float64(m.WatchResolvedOp))
	out.gauge(c.watchDurable, float64(m.WatchDurableOp))
	out.gauge(c.watchRetained, float64(m.WatchRetainedBytes))
	out.gauge(c.watchRetainedFrom, float64(m.WatchRetainedFrom))
}

// histogram turns the engine's latency histogram into a Prometheus one:
// cumulative counts at the exported bounds. Counts sum to Count, so the
// +Inf bucket (Count) holds everything.
func (c *collector) histogram(h *kvbuf.LatencyHistogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.bounds))
	var cum int64
	next := 0
	for _, i := range c.bounds {
		for ; next <= i; next++ {
			cum += h.Counts[next]
		}
		buckets[kvbuf.LatencyBucketBound(i).Seconds()] = uint64(cum)
	}
	return prometheus.MustNewConstHistogram(c.latency, uint64(h.Count), h.Sum.Seconds(), buckets)
}
