package flush

import (
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Options configures a Flusher. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// Interval is how long after the previous freeze the background
	// goroutine flushes again if anything is pending. Default: DefaultInterval (1s). Negative
	// disables interval flushes (byte-triggered and explicit flushes still
	// run).
	Interval time.Duration

	// MaxPendingBytes bounds Target.PendingBytes: a BeginWrite that finds
	// more pending waits (honouring its context) until a generation is
	// released and makes room. The bound is checked before each write, so it
	// can be exceeded by the writes in flight. Default: 64 MiB. Negative
	// disables backpressure and byte-triggered flushes.
	MaxPendingBytes int64

	// FlushBytes is the pending size at which a BeginWrite kicks a
	// background flush without waiting. Default: MaxPendingBytes/2. It is
	// capped at MaxPendingBytes.
	FlushBytes int64

	// RetryMin is the delay before the background goroutine retries after a
	// failure; it doubles after each further failure up to RetryMax and
	// resets once a generation is released. Explicit Flush calls (and
	// Close's final flush) retry at once. Default: 100ms. Negative values
	// are ErrBadOptions.
	RetryMin time.Duration

	// RetryMax caps the retry delay. Default: 10s (raised to RetryMin if
	// smaller). Negative values are ErrBadOptions.
	RetryMax time.Duration

	// Watermark is the persisted watermark at start (the one storage
	// reports after Open). The first claim starts from it, so generations
	// never carry a lower one and writes of ops at or below it are refused
	// with ErrStaleOp. Default: 0.
	Watermark uint64

	// HighestOp is the highest op number seen before (the engine persists
	// it with each generation): Stats.HighestOp starts from it, so that it
	// means the same after a reopen. It does not change what is admitted.
	// Default: 0 (Watermark).
	HighestOp uint64

	// LogBeforeData caps every claimed watermark at the highest op the
	// host reported durable in its own log with LogDurable (starting at
	// Watermark): a host that group-commits its log acknowledges op n only
	// once its log is durable, and a watermark persisted above that would
	// tell it, after a power loss, not to replay ops its log lost. Default:
	// false (no cap).
	LogBeforeData bool

	// PipelineDepth bounds the generations frozen but not yet released
	// (frozen, being written, waiting for their sync, or failed and waiting
	// for a retry). When the bound is reached, new freezes wait for a
	// release, and Flush callers accumulate in the open generation, which
	// makes it larger. Default: 4 (enough for a writer to keep a few
	// generations in the WAL while one sync is in flight; deeper pipelines
	// only add memory held by frozen tables). Negative values and values
	// above MaxPipelineDepth are ErrBadOptions.
	PipelineDepth int

	// GroupWait bounds the sibling wait of group commit: when no sync is in
	// flight and the generations released since the last freeze had k > 1
	// Flush callers, the flusher waits for k callers to join the open
	// generation before freezing it, at most GroupWait, and at most
	// GroupWait/4 after the last caller joined (the siblings come back in a
	// burst: a pause means the rest are not coming soon). With one caller
	// it never waits. It spins, yielding the processor, rather than
	// sleeping: Go timers shorter than a millisecond sleep about a
	// millisecond in an idle process. Default: DefaultGroupWait. Negative
	// disables the wait.
	GroupWait time.Duration
}

// DefaultGroupWait is the default Options.GroupWait, chosen with
// BenchmarkGroupWait (W4 over a file whose fdatasync takes ~200µs, 2
// cores): without the wait 4 to 64 goroutines need up to twice the syncs
// per Flush; 16 goroutines come back in ~8µs, 64 in ~30µs. With the
// GroupWait/4 pause rule, 50µs to 200µs give the same syncs per Flush
// (1/G) at 16 and 64 goroutines; 50µs keeps the cost of siblings that do
// not come back at 12.5µs.
const DefaultGroupWait = 50 * time.Microsecond

// Defaults of Options, documented on the fields. The engine (package kvbuf)
// documents them to its users by these names.
const (
	// DefaultInterval is the default Options.Interval.
	DefaultInterval = time.Second
	// DefaultMaxPendingBytes is the default Options.MaxPendingBytes.
	DefaultMaxPendingBytes = 64 << 20
	// DefaultPipelineDepth is the default Options.PipelineDepth.
	DefaultPipelineDepth = 4
	// MaxPipelineDepth is the largest Options.PipelineDepth.
	MaxPipelineDepth = 64

	defaultRetryMin = 100 * time.Millisecond
	defaultRetryMax = 10 * time.Second
)

// Validate reports an error wrapping ErrBadOptions for a value out of range
// (a nil *Options is valid). New calls it.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	switch {
	case o.PipelineDepth < 0 || o.PipelineDepth > MaxPipelineDepth:
		return kverr.Errorf("PipelineDepth %d (want 1..%d, 0 for the default): %w", o.PipelineDepth, MaxPipelineDepth, kverr.ErrBadOptions)
	case o.RetryMin < 0:
		return kverr.Errorf("RetryMin %v: %w", o.RetryMin, kverr.ErrBadOptions)
	case o.RetryMax < 0:
		return kverr.Errorf("RetryMax %v: %w", o.RetryMax, kverr.ErrBadOptions)
	}
	return nil
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Interval == 0 {
		r.Interval = DefaultInterval
	}
	if r.MaxPendingBytes == 0 {
		r.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if r.MaxPendingBytes > 0 {
		if r.FlushBytes <= 0 {
			r.FlushBytes = r.MaxPendingBytes / 2
		}
		r.FlushBytes = min(r.FlushBytes, r.MaxPendingBytes)
	}
	if r.RetryMin == 0 {
		r.RetryMin = defaultRetryMin
	}
	if r.RetryMax == 0 {
		r.RetryMax = defaultRetryMax
	}
	r.RetryMax = max(r.RetryMax, r.RetryMin)
	if r.PipelineDepth == 0 {
		r.PipelineDepth = DefaultPipelineDepth
	}
	if r.GroupWait == 0 {
		r.GroupWait = DefaultGroupWait
	}
	return r
}
