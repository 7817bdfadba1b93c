package flush

import "time"

// Options configures a Flusher. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// Interval is how long after the previous flush ended the background
	// goroutine flushes again if anything is pending. Default: 1s. Negative
	// disables interval flushes (byte-triggered and explicit flushes still run).
	Interval time.Duration

	// MaxPendingBytes bounds the sum of Target.PendingBytes: a BeginWrite that
	// finds more pending waits (honouring its context) until a flush makes
	// room. The bound is checked before each write, so it can be exceeded by
	// the writes in flight. Default: 64 MiB. Negative disables backpressure
	// and byte-triggered flushes.
	MaxPendingBytes int64

	// FlushBytes is the pending size at which a BeginWrite kicks a background
	// flush without waiting. Default: MaxPendingBytes/2. It is capped at
	// MaxPendingBytes.
	FlushBytes int64

	// RetryMin is the delay before the background goroutine retries after a
	// failed flush; it doubles after each further failure up to RetryMax and
	// resets after a success. Explicit Flush calls are never delayed by it.
	// Default: 100ms.
	RetryMin time.Duration

	// RetryMax caps the retry delay. Default: 10s (raised to RetryMin if
	// smaller).
	RetryMax time.Duration

	// Watermark is the persisted watermark at start (the one storage
	// reports after Open). Flushes never persist a lower one. Default: 0.
	Watermark uint64
}

const (
	defaultInterval        = time.Second
	defaultMaxPendingBytes = 64 << 20
	defaultRetryMin        = 100 * time.Millisecond
	defaultRetryMax        = 10 * time.Second
)

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Interval == 0 {
		r.Interval = defaultInterval
	}
	if r.MaxPendingBytes == 0 {
		r.MaxPendingBytes = defaultMaxPendingBytes
	}
	if r.MaxPendingBytes > 0 {
		if r.FlushBytes <= 0 {
			r.FlushBytes = r.MaxPendingBytes / 2
		}
		r.FlushBytes = min(r.FlushBytes, r.MaxPendingBytes)
	}
	if r.RetryMin <= 0 {
		r.RetryMin = defaultRetryMin
	}
	if r.RetryMax <= 0 {
		r.RetryMax = defaultRetryMax
	}
	r.RetryMax = max(r.RetryMax, r.RetryMin)
	return r
}
