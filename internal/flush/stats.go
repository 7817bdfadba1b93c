package flush

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of a Flusher's counters. Fields are read at slightly
// different times, so they need not be consistent with each other.
type Stats struct {
	// Flushes counts Flush calls that were admitted (not ErrClosed, context
	// not already done).
	Flushes int64
	// Coalesced counts Flush calls that joined a generation another caller
	// had already opened, i.e. did not open one of their own.
	Coalesced int64
	// Redelivered counts BeginWrite and EndOp calls skipped because their
	// op was at or below the persisted watermark (see BeginWrite).
	Redelivered int64
	// Generations counts generations frozen (Freeze calls that returned).
	// Retries of a failed generation are not counted again.
	Generations int64
	// Writes counts Generation.Write calls (first writes and retries).
	Writes int64
	// Failures counts failed attempts: a Write or wait error, a panic or
	// runtime.Goexit in Freeze, Write, wait, Release or Settle. One failure
	// can fail several generations (every later one in flight).
	Failures int64
	// LastErr is the error of the most recent failure, or nil if none.
	LastErr error
	// DiskFull counts the failures matching ErrDiskFull, and the Stall
	// calls that stalled the flusher (a store waiting for disk space).
	DiskFull int64
	// Stalled is the error of Stall while the flusher is stalled, else nil.
	Stalled error
	// Stalls counts BeginWrite calls that waited on backpressure
	// (MaxPendingBytes), and StallTime the total time they waited.
	Stalls    int64
	StallTime time.Duration
	// InFlight is the number of generations frozen and not yet released;
	// MaxInFlight its highest value so far (at most Options.PipelineDepth).
	InFlight    int
	MaxInFlight int
	// HighestOp is the highest op number seen: written, batched, begun or
	// ended, or Options.HighestOp (seen before a reopen), and at least
	// Options.Watermark.
	HighestOp uint64
	// CompletedOp is the highest op n such that every op <= n has ended
	// (see CompletedOp): what the next freeze may claim before the
	// Options.LogBeforeData cap.
	CompletedOp uint64
	// OpenOps is the number of ops begun and not ended.
	OpenOps int
	// ClaimedOp is the watermark of the newest frozen generation (initially
	// Options.Watermark): writes of ops at or below it are refused.
	ClaimedOp uint64
	// Watermark is the persisted watermark (see Flusher.Watermark).
	Watermark uint64
	// PendingBytes is Target.PendingBytes at the time of the call.
	PendingBytes int64
	// Active is the number of operations inside the drain gate (Flush
	// calls, Enter tickets, Exclusive calls, writes waiting for room).
	// Writes in progress hold the write barrier instead and are not
	// counted.
	Active int64
	// Latency is the distribution of admitted Flush calls' durations
	// (whatever their result).
	Latency Histogram
}

// Histogram is a distribution of durations in fixed logarithmic buckets:
// bucket 0 holds durations under 1.024µs, then each power of two from
// 1.024µs to about 68.7s is split into 4 equal buckets (so a bucket's upper
// bound is at most 25% above its lower bound), and the last bucket holds
// everything longer. Bucket i counts durations d with
// BucketBound(i-1) <= d < BucketBound(i); the bounds map directly onto
// Prometheus histogram buckets ("le") by making Counts cumulative.
type Histogram struct {
	// Counts holds the number of observations per bucket (not cumulative).
	Counts [HistogramBuckets]int64
	// Count is the number of observations and Sum their total.
	Count int64
	Sum   time.Duration
}

// HistogramBuckets is the number of Histogram buckets.
const HistogramBuckets = 2 + histOctaves*histSub

const (
	histMinShift = 10 // the first bound is 1<<10 ns
	histOctaves  = 26 // 2^10 .. 2^36 ns
	histSub      = 4
)

// BucketBound returns the exclusive upper bound of bucket i; the last
// bucket's is math.MaxInt64.
func BucketBound(i int) time.Duration {
	switch {
	case i <= 0:
		return 1 << histMinShift
	case i >= HistogramBuckets-1:
		return math.MaxInt64
	}
	e := (i-1)/histSub + histMinShift
	sub := (i - 1) % histSub
	return time.Duration(histSub+sub+1) << (e - 2)
}

func histBucket(d time.Duration) int {
	if d < 1<<histMinShift {
		return 0
	}
	e := bits.Len64(uint64(d)) - 1
	if e >= histMinShift+histOctaves {
		return HistogramBuckets - 1
	}
	sub := int(uint64(d)>>(e-2)) & (histSub - 1)
	return 1 + (e-histMinShift)*histSub + sub
}

// Quantile returns an upper estimate of the q-quantile (0 <= q <= 1): the
// upper bound of the bucket holding the observation of that rank, or 0 with
// no observations.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := int64(math.Ceil(min(max(q, 0), 1) * float64(h.Count)))
	rank = max(rank, 1)
	var n int64
	for i, c := range h.Counts {
		if n += c; n >= rank {
			return BucketBound(i)
		}
	}
	return BucketBound(HistogramBuckets - 1)
}

// histogram is the concurrent recorder behind Histogram.
type histogram struct {
	counts [HistogramBuckets]atomic.Int64
	sum    atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	h.counts[histBucket(d)].Add(1)
	h.sum.Add(int64(d))
}

func (h *histogram) snapshot() Histogram {
	var s Histogram
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i] // so that Quantile's ranks match Counts
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}
