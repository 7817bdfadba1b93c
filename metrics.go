package kvbuf

import (
	"time"

	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/storage"
)

// LatencyHistogram is a distribution of durations in fixed logarithmic
// buckets: four per power of two from 1.024µs to about 68.7s, one below
// (under 1.024µs) and one above. Quantile gives percentiles; the buckets
// map onto Prometheus histogram buckets (package kvbufprom).
type LatencyHistogram struct {
	// Counts holds the number of observations per bucket (not
	// cumulative); bucket i holds durations below LatencyBucketBound(i)
	// and at or above the bound of bucket i-1.
	Counts [LatencyBuckets]int64
	// Count is the number of observations and Sum their total.
	Count int64
	Sum   time.Duration
}

// LatencyBuckets is the number of LatencyHistogram buckets.
const LatencyBuckets = flush.HistogramBuckets

// LatencyBucketBound returns the exclusive upper bound of bucket i of a
// LatencyHistogram; the last bucket's is math.MaxInt64.
func LatencyBucketBound(i int) time.Duration { return flush.BucketBound(i) }

// Quantile returns an upper estimate of the q-quantile (0 <= q <= 1): the
// upper bound of the bucket holding the observation of that rank, or 0 with
// no observations.
func (h *LatencyHistogram) Quantile(q float64) time.Duration {
	fh := flush.Histogram(*h) // the same layout: the flusher records it
	return fh.Quantile(q)
}

// Metrics is a snapshot of an engine's counters and gauges. Fields are read
// at slightly different times, so they need not be consistent with each
// other. Counters count since Open.
type Metrics struct {
	// PendingBytes is the memory held by pending changes: written, not yet
	// durable and released (keys, values, nodes, range tombstones, bit
	// chunks).
	PendingBytes int64
	// PendingKeys is the number of KV keys held by pending tables (a key
	// pending in two generations counts twice).
	PendingKeys int64

	// Flushes counts Flush calls admitted; Coalesced those that joined a
	// generation another caller had opened (group commit).
	Flushes, Coalesced int64
	// Generations counts generations frozen (physical flushes, including
	// background ones); GenerationWrites their writes, retries included.
	Generations, GenerationWrites int64
	// Failures counts failed flush attempts; LastError is the newest
	// failure's error (nil if none).
	Failures  int64
	LastError error
	// DiskFull counts the times the engine met a full disk (see "A full
	// disk" in the DB caveats): each episode of store writes finding no
	// space (the first of them; the store then waits for space, or pebble
	// retries), each flush attempt that failed with ErrDiskFull, each time
	// such a wait stalled the flusher, and each Checkpoint that failed
	// with it. DiskFullWaiting reports that store writes are waiting for
	// space now (Flush returns ErrDiskFull at once meanwhile).
	DiskFull        int64
	DiskFullWaiting bool
	// Stalls counts writes that waited for a flush because pending memory
	// was over Options.MaxPendingBytes, and StallTime their total wait.
	Stalls    int64
	StallTime time.Duration
	// BudgetBytes is the engine's share of its Options.MemoryBudget: its
	// pending bytes as of its latest write or flush (0 without a budget).
	// BudgetForcedFlushes counts the flushes the budget forced on the
	// engine; BudgetWaits the engine's writes that queued for a round of
	// the budget (past half its high mark, or while a round was in
	// progress or other writes queued; a write that started a round
	// itself is not counted), and BudgetWaitTime their total wait.
	BudgetBytes         int64
	BudgetForcedFlushes int64
	BudgetWaits         int64
	BudgetWaitTime      time.Duration
	// The change feed (DB.Watch). WatchSubscribers is the number of open
	// watches; WatchDelivered counts the events (changes and marks) Next
	// returned (a batch's changes that a watch of everything reads as one
	// run are counted when the run's last is returned); WatchLagged the watches ended by ErrLagged; WatchOverflows
	// the times unresolved changes outgrew the feed's bound and every
	// watch lagged. WatchBufferBytes is the memory the feed holds
	// (resolved and unresolved changes, counted as WatchBufferBytes
	// bounds them). WatchResolvedOp is the op of the newest resolved mark
	// and WatchDurableOp that of the newest mark durable-mode watches may
	// read; a watch's lag is the newest mark minus the last it read.
	// WatchRetainedBytes and WatchRetainedFrom describe the retention in
	// the store (Options.WatchRetain; 0 without): the durable retained
	// changes' bytes and the lowest op a watch may resume from. Only
	// WatchDelivered, WatchLagged and WatchOverflows count from Open.
	WatchSubscribers   int
	WatchDelivered     uint64
	WatchLagged        uint64
	WatchOverflows     uint64
	WatchBufferBytes   int64
	WatchResolvedOp    uint64
	WatchDurableOp     uint64
	WatchRetainedBytes int64
	WatchRetainedFrom  uint64
	// FlushLatency is the distribution of Flush calls' durations.
	FlushLatency LatencyHistogram
	// InFlight is the number of generations frozen and not yet durable;
	// MaxInFlight its highest value (at most Options.PipelineDepth).
	InFlight, MaxInFlight int

	// Watermark is the persisted watermark. HighestOp is the highest op
	// number the engine has seen: written, applied as a Batch, begun or
	// ended, in this session or (as far as a flush recorded it) before a
	// reopen, and at least Watermark. ReceiptLag = HighestOp - Watermark:
	// how far the durable receipt trails the ops, the same in every mode
	// (sequential single calls, batches, BeginOp/EndOp); after a reopen it
	// is at least the number of ops the host must replay. All three are 0
	// for a host that does not track ops.
	Watermark, HighestOp, ReceiptLag uint64

	// CompletedOp is the highest op n such that every op <= n has ended:
	// what the next flush may persist as the watermark (capped by
	// LogDurable under Options.LogBeforeData). OpenOps is the number of
	// ops begun and not ended: a host that never ends one holds the
	// watermark at the op before it.
	CompletedOp uint64
	OpenOps     int

	// Redelivered counts writes, batches and EndOp calls skipped because
	// their op was at or below the watermark (see "Ops and the watermark"):
	// a host replaying its log, or a raft host whose log redelivers
	// entries after a restart, causes them.
	Redelivered int64

	// Keyspaces, Bitslices and Snapshots count those open.
	Keyspaces, Bitslices, Snapshots int

	// StoreJobs is the number of the store's (pebble's) flushes and
	// compactions in progress: reads that reach the store while it is
	// above 0 share the disk and the CPU with them, so a benchmark that
	// times such reads waits for 0 first. 0 after Close.
	StoreJobs int64

	// While store writes wait for space (DiskFullWaiting), StoreJobs,
	// StoreL0Files, StoreReadAmp and StoreLogBytes are those of the last
	// reading before the wait: pebble's own metrics wait for the MANIFEST
	// write that waits for space, and Metrics must not.
	//
	// StoreL0Files is the number of sstables in the store's level 0 and
	// StoreReadAmp its read amplification (memtables, L0 sublevels and
	// lower levels a point read may search): flushes by ingestion add
	// tables to L0 until pebble compacts them. 0 after Close.
	StoreL0Files int64
	StoreReadAmp int

	// StoreLogBytes is the live data of the store's write-ahead log: what
	// its memtables hold (flush receipts, generations written as one
	// batch) that no memtable flush has written to an sstable yet; 0 after
	// FlushMemtables. 0 after Close.
	StoreLogBytes int64

	// StoreFlushes, StoreCompactions and StoreIngests count the store's
	// memtable flushes, compactions and ingestions since Open.
	// StoreCompactedBytes is what its compactions wrote, and
	// StoreBytesWritten everything it wrote: its write-ahead log, the
	// tables its flushes and compactions wrote, and the tables ingested.
	// They tell where a workload's disk writes go: a generation written as
	// one batch costs a log write and, later, a memtable flush; an ingested
	// one a table; and each compaction of L0 rewrites the tables of the
	// level below that it overlaps. After Close they keep the values read
	// when Close closed the store.
	StoreFlushes, StoreCompactions, StoreIngests int64
	StoreCompactedBytes, StoreBytesWritten       int64

	// IngestedGenerations counts generations flushed by ingestion
	// (Options.IngestThreshold); the others went through the store's
	// write-ahead log as one batch.
	IngestedGenerations int64

	// StoreL0Waits counts the flushes by ingestion that waited, their
	// tables written, for the store to compact its L0 below its stop-writes
	// depth (12 sublevels, pebble's own for batch writes; see
	// doc/design.md, "L0 under a sustained write load"), and
	// StoreL0WaitTime their total wait: the flush waits, and so, once
	// pending memory reaches MaxPendingBytes, do the writes (Stalls).
	StoreL0Waits    int64
	StoreL0WaitTime time.Duration

	// ReadTierBytes is the memory held by the read tier (flushed
	// generations kept readable, Options.ReadTierBytes): the engine's
	// memory besides PendingBytes and the store's cache and memtables.
	// ReadTierGenerations is the number of generations it holds,
	// ReadTierEvictions the number it evicted.
	ReadTierBytes       int64
	ReadTierGenerations int
	ReadTierEvictions   int64

	// FlushYields counts the times the flusher yielded the processor
	// between two slices of its work on a generation's tables
	// (Options.FlushQuantum); FlushThrottled is the time it slept to stay
	// within Options.FlushCPUPercent.
	FlushYields    int64
	FlushThrottled time.Duration
}

// InFlight returns the number of generations frozen and not yet durable:
// Metrics.InFlight, read alone, from two atomic loads. Metrics reads much
// more (the store's figures come from pebble's metrics, tens of
// microseconds), so a host that polls whether a flush is under way, to
// schedule its own work around flushes or to time its reads apart, polls
// this. It works after Close (0 once Close has returned nil; a final
// flush that failed leaves its generations counted).
func (db *DB) InFlight() int { return db.flusher.InFlight() }

// Metrics returns a snapshot of the engine's metrics. It works after Close
// (the counters stop).
func (db *DB) Metrics() Metrics {
	st := db.flusher.Stats()
	m := Metrics{
		PendingBytes:     st.PendingBytes,
		Flushes:          st.Flushes,
		Coalesced:        st.Coalesced,
		Generations:      st.Generations,
		GenerationWrites: st.Writes,
		Failures:         st.Failures,
		LastError:        st.LastErr,
		DiskFull:         st.DiskFull + db.diskFull.Load(),
		Stalls:           st.Stalls,
		StallTime:        st.StallTime,
		FlushLatency:     LatencyHistogram(st.Latency),
		InFlight:         st.InFlight,
		MaxInFlight:      st.MaxInFlight,
		Watermark:        st.Watermark,
		HighestOp:        st.HighestOp,
		CompletedOp:      st.CompletedOp,
		OpenOps:          st.OpenOps,
		Redelivered:      st.Redelivered,
	}
	if m.HighestOp > m.Watermark {
		m.ReceiptLag = m.HighestOp - m.Watermark
	}
	for _, k := range db.targets.Load().kvs {
		m.PendingKeys += k.ov.PendingKeys()
	}
	db.mu.Lock()
	m.Keyspaces, m.Bitslices, m.Snapshots = len(db.keyspaces), len(db.bits), len(db.snaps)
	db.mu.Unlock()
	if db.guard != nil {
		m.DiskFullWaiting = db.guard.Waiting() > 0
	}
	if lsm, ok := db.lsmStats(m.DiskFullWaiting); ok {
		m.StoreJobs = lsm.BackgroundJobs
		m.StoreL0Files = lsm.L0Files
		m.StoreReadAmp = lsm.ReadAmp
		m.StoreLogBytes = int64(lsm.LogBytes)
	}
	if lsm := db.lastLSM.Load(); lsm != nil {
		// The last reading (this call's, or the one Close took): the
		// counters go on being reported after Close.
		m.StoreFlushes, m.StoreCompactions = lsm.Flushes, lsm.Compactions
		m.StoreIngests = int64(lsm.Ingests)
		m.StoreCompactedBytes = int64(lsm.CompactedBytes)
		m.StoreBytesWritten = int64(lsm.BytesWritten)
	}
	m.IngestedGenerations = db.ingests.Load()
	m.StoreL0Waits = db.l0Waits.Load()
	m.StoreL0WaitTime = time.Duration(db.l0WaitNs.Load())
	m.ReadTierBytes = db.tier.bytes.Load()
	m.ReadTierGenerations = db.tier.generations()
	m.ReadTierEvictions = db.tier.evicted.Load()
	m.FlushYields = db.pacer.yields.Load()
	m.FlushThrottled = time.Duration(db.pacer.throttled.Load())
	if s := db.share; s != nil {
		m.BudgetBytes = max(s.bytes.Load(), 0) // detachedShare after Close
		m.BudgetForcedFlushes = s.forced.Load()
		m.BudgetWaits = s.waits.Load()
		m.BudgetWaitTime = time.Duration(s.waitNs.Load())
	}
	db.feed.metrics(&m)
	return m
}

// lsmNewer reports whether a is a reading of the store's counters at
// least as late as b's (each counter only grows).
func lsmNewer(a, b storage.LSMStats) bool {
	return a.BytesWritten >= b.BytesWritten && a.Compactions >= b.Compactions &&
		a.Flushes >= b.Flushes && a.Ingests >= b.Ingests
}

// lsmStats returns the store's LSM figures, or the last ones read if the
// store's writes wait for space (waiting): pebble's Metrics takes the
// mutex a compaction holds while its MANIFEST write waits for space, and
// a host's metrics scrape must not hang on a full disk. A wait that begins
// during the call can still hold it until space returns.
func (db *DB) lsmStats(waiting bool) (storage.LSMStats, bool) {
	if db.store == nil {
		return storage.LSMStats{}, false
	}
	if waiting {
		if p := db.lastLSM.Load(); p != nil {
			return *p, true
		}
		return storage.LSMStats{}, false
	}
	lsm, err := db.store.LSM()
	if err != nil { // closed
		return storage.LSMStats{}, false
	}
	// Kept only if no later reading was stored meanwhile (a Metrics call
	// racing Close's own reading), so that the counters Metrics reports
	// after Close never step back: pebble's counters only grow.
	for {
		p := db.lastLSM.Load()
		if p != nil && !lsmNewer(lsm, *p) {
			break
		}
		if db.lastLSM.CompareAndSwap(p, &lsm) {
			break
		}
	}
	return lsm, true
}
