package flush

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/stripe"
)

// drainGate is a drain gate: every operation enters it and leaves it, and Close
// refuses new operations and waits until every admitted one has left. Any
// number of observers can wait for the drain with Done or Wait.
//
// The closed state lives in each in-flight counter's sign bit: Enter
// increments with a compare-and-swap that fails once the bit is set, so no
// operation is ever admitted, even transiently, after its counter was
// closed, and Leave is a single atomic add. Both are small enough to be
// inlined. Only the drain pays for reading every counter.
//
// The zero drainGate is open and ready to use, with one in-flight counter: cheap
// to create (about 100 bytes), right for a wait-group-like gate. A gate
// entered from many goroutines at once (every write of an engine) should
// call Stripe first, which spreads the count over gateStripes cache-line
// padded counters so that concurrent Enter calls do not bounce one line. A
// drainGate must not be copied after first use.
type drainGate struct {
	s *[gateStripes]stripe.Counter // nil until Stripe; then never changes

	closing atomic.Bool
	mu      sync.Mutex
	drained bool
	done    chan struct{} // created lazily; closed when drained
	// doneP publishes done once created, so observers after the first
	// read it without taking mu (drain-4-observers: four goroutines
	// calling Done at once would otherwise queue on mu).
	doneP atomic.Pointer[chan struct{}]

	c0 stripe.Counter // the in-flight counter of an unstriped gate
}

// gateStripes is fixed (not GOMAXPROCS-sized) so that Enter needs no bounds
// check and stays inlinable. 16 stripes keep the chance that two running
// goroutines share one at about 1/16; on larger machines goroutines share
// stripes, which is slower but still correct.
const (
	gateBits    = 4
	gateStripes = 1 << gateBits
)

// closedBit marks a counter closed; it is the sign bit so that one compare
// tests it.
const closedBit = math.MinInt64

// Stripe gives the gate gateStripes padded in-flight counters (1 KiB), one
// picked per goroutine by stripe.Hint. Call it before the gate is shared:
// it must not run concurrently with any other method. Calling it again is a
// no-op.
func (g *drainGate) Stripe() {
	if g.s == nil {
		g.s = new([gateStripes]stripe.Counter)
	}
}

// gateToken is the proof of one admitted operation; pass it to Leave exactly
// once. The zero token is accepted by Leave and does nothing.
type gateToken struct {
	c *stripe.Counter
}

// Enter admits one operation, or returns ErrClosed once Close (or Shut) has
// begun. It never blocks.
//
// The increment is a compare-and-swap conditional on the stripe's closed bit,
// so a Close racing with Enter can never let an operation in after its
// stripe was closed (the check-flag-then-increment race), and a refused
// Enter leaves no trace to clean up.
func (g *drainGate) Enter() (gateToken, error) {
	c := &g.c0
	if s := g.s; s != nil {
		c = &s[stripe.Hint(gateBits)]
	}
	for {
		v := c.Load()
		if v < 0 {
			return gateToken{}, kverr.ErrClosed
		}
		if c.CompareAndSwap(v, v+1) {
			return gateToken{c: c}, nil
		}
	}
}

// Leave ends the operation admitted with t. Calling it twice with the same
// token corrupts the count (the drain may finish early, or the stripe look
// closed); the zero token is ignored.
func (g *drainGate) Leave(t gateToken) {
	if t.c != nil && t.c.Add(-1) < 0 {
		g.checkDrained()
	}
}

// InFlight returns the number of admitted operations that have not left.
// It is a racy estimate meant for statistics.
func (g *drainGate) InFlight() int64 {
	n := g.c0.Load() &^ closedBit
	if g.s != nil {
		for i := range g.s {
			n += g.s[i].Load() &^ closedBit
		}
	}
	return n
}

// Shut begins closing without waiting: once it returns, Enter returns
// ErrClosed. It reports whether this call was the one that shut the gate.
func (g *drainGate) Shut() bool {
	first := g.closing.CompareAndSwap(false, true)
	// Every caller marks every stripe (Or is idempotent), so that Enter fails
	// after any Shut has returned, not only after the first one finished.
	g.c0.Or(closedBit)
	if g.s != nil {
		for i := range g.s {
			g.s[i].Or(closedBit)
		}
	}
	g.checkDrained()
	return first
}

// Close shuts the gate and waits until every admitted operation has left.
// It is idempotent and safe to call from many goroutines; every call
// returns once the drain is complete. It waits without a deadline: use Shut
// and Wait to bound the wait.
func (g *drainGate) Close() {
	g.Shut()
	<-g.Done()
}

// Done returns a channel closed once the gate has been shut and every
// admitted operation has left.
func (g *drainGate) Done() <-chan struct{} {
	if p := g.doneP.Load(); p != nil {
		return *p // done is never reassigned once published
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		g.done = make(chan struct{})
		g.doneP.Store(&g.done)
		if g.drained {
			close(g.done)
		}
	}
	return g.done
}

// Wait blocks until the gate has drained (see Done) or ctx ends, in which
// case it returns ctx.Err(). It does not shut the gate.
func (g *drainGate) Wait(ctx context.Context) error {
	select {
	case <-g.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkDrained is called by Shut once every stripe is closed, and by every
// Leave on a closed stripe. Stripes only decrease once closed, so whichever
// of the two happens last sees every stripe closed and empty and marks the
// drain complete.
func (g *drainGate) checkDrained() {
	if g.c0.Load() != closedBit {
		return // open (Shut still marking) or busy
	}
	if g.s != nil {
		for i := range g.s {
			if g.s[i].Load() != closedBit {
				return
			}
		}
	}
	g.mu.Lock()
	if !g.drained {
		g.drained = true
		if g.done != nil {
			close(g.done)
		}
	}
	g.mu.Unlock()
}
