package flush

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Target is what a Flusher makes durable (the engine).
type Target interface {
	// Freeze seals every pending change into generation g (g = 1, 2, 3, ...
	// in order) and returns it. The Flusher calls it with the write barrier
	// held exclusively, so no write is in flight; it must not block on I/O.
	// It is never called concurrently with another Freeze or a Write, but
	// may run while an earlier generation's wait or Release runs on another
	// goroutine. If Freeze panics, the next Freeze gets the same g (the
	// number is consumed only by a Freeze that returned). It must not
	// return nil: a generation with no change still writes the watermark.
	Freeze(g uint64) Generation
	// PendingBytes is the memory held by pending changes (unfrozen and
	// frozen-not-released). Called on every BeginWrite: must be cheap. It
	// must be positive while unfrozen changes exist that were not made under
	// BeginWrite (the Flusher notices those only when no generation is in
	// flight).
	PendingBytes() int64
}

// Generation is one frozen set of changes.
type Generation interface {
	// Write starts making the generation and watermark wm durable and
	// returns a function that waits until they are. The Flusher calls Write
	// for generations in order, one at a time, and calls Write of g+1 only
	// after Write of g returned nil (wait may still be running: that is the
	// pipelining). After a failure of Write or wait, the Flusher calls Write
	// again later (a retry), for that generation and then every later one,
	// in order; Write must be idempotent. ctx is never cancelled.
	//
	// The Flusher calls every wait function it got exactly once, in Write
	// order, on one goroutine (not the one calling Write), even when an
	// earlier generation failed meanwhile (its result is then ignored and
	// the generation is written again). A nil wait means already durable.
	Write(ctx context.Context, wm uint64) (wait func() error, err error)
	// Release drops the generation's changes from memory. Called exactly
	// once, in generation order, after its wait returned nil and every
	// earlier generation was released. It may run concurrently with Freeze
	// and Write of later generations.
	Release()
}

// Settler is optionally implemented by a Target: Settle is called with the
// write barrier held exclusively after a Release that left no generation in
// flight (the bit overlay uses it to restore its nothing-pending fast path).
// A panic in Settle is counted as a failure (Stats) but fails no caller.
type Settler interface{ Settle() }

// PendingCounter is implemented by a Target whose PendingBytes is the value
// of one counter whenever that counter is not zero, and 0 or 1 when it is
// (the engine's target: one byte for a catalog change with no data).
// Admission then loads the counter itself on every write and calls
// PendingBytes only when the counter is above Options.FlushBytes: the same
// decisions (with FlushBytes positive, a zero counter is never above it,
// nor is PendingBytes' 0 or 1), without an interface call per write.
type PendingCounter interface {
	// PendingCounter returns the counter; the Flusher only loads it.
	PendingCounter() *atomic.Int64
}

// Recycler is optionally implemented by a Generation whose Release leaves
// work no Flush caller needs to wait for (the bit overlay's reset of a
// released table for reuse): the Flusher calls Recycle once, after Release
// returned nil and the generation's callers were woken (and after Settle,
// if it runs). A panic in Recycle is counted as a failure (Stats) but fails
// no caller.
type Recycler interface{ Recycle() }

// PanicError describes a panic or runtime.Goexit inside the Target during a
// flush stage. It matches ErrPanicked with errors.Is, and also the panic
// value when that value is an error. Its text is "kvbuf: flush panicked: "
// and the value, or "kvbuf: flush target called runtime.Goexit".
type PanicError struct {
	// Value is the value passed to panic; nil for runtime.Goexit.
	Value any
	// Goexit reports that the target called runtime.Goexit.
	Goexit bool
	// Stack is the stack of the panicking goroutine.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string {
	if e.Goexit {
		return kverr.Prefix + "flush target called runtime.Goexit"
	}
	return fmt.Sprintf("%sflush panicked: %v", kverr.Prefix, e.Value)
}

// Unwrap returns ErrPanicked and, if the panic value is an error, that error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{kverr.ErrPanicked, err}
	}
	return []error{kverr.ErrPanicked}
}
