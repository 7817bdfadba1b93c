package flush

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/stripe"
)

// Gate is a drain gate: every operation enters it and leaves it, and Close
// refuses new operations and waits until every admitted one has left. Any
// number of observers can wait for the drain with Done or Wait.
//
// Enter and Leave are on every read, so the in-flight count is striped over
// gateStripes cache-line padded counters (picked by stripe.Hint) instead of
// one contended word, and both are small enough to be inlined. The closed
// state lives in each counter's sign bit: Enter increments with a
// compare-and-swap that fails once the bit is set, so no operation is ever
// admitted, even transiently, after its stripe was closed, and Leave needs a
// single atomic add. Only the drain pays for reading every stripe.
//
// The zero Gate is open and ready to use; it takes gateStripes*64 bytes
// (1 KiB). A Gate must not be copied after first use.
type Gate struct {
	c [gateStripes]stripe.Counter

	closing atomic.Bool
	mu      sync.Mutex
	drained bool
	done    chan struct{} // created lazily; closed when drained
}

// gateStripes is fixed (not GOMAXPROCS-sized) so that the zero Gate works and
// Enter needs no pointer load, nil check or bounds check. 16 stripes keep
// the chance that two running goroutines share one at about 1/16; on larger
// machines goroutines share stripes, which is slower but still correct.
const gateStripes = 16

// closedBit marks a stripe closed; it is the sign bit so that one compare
// tests it.
const closedBit = math.MinInt64

// Token is the proof of one admitted operation; pass it to Leave exactly
// once. The zero Token is accepted by Leave and does nothing.
type Token struct {
	c *stripe.Counter
}

// Enter admits one operation, or returns ErrClosed once Close (or Shut) has
// begun. It never blocks.
//
// The increment is a compare-and-swap conditional on the stripe's closed bit,
// so a Close racing with Enter can never let an operation in after its
// stripe was closed (the check-flag-then-increment race), and a refused
// Enter leaves no trace to clean up.
func (g *Gate) Enter() (Token, error) {
	c := &g.c[stripe.Hint(gateStripes-1)]
	for {
		v := c.Load()
		if v < 0 {
			return Token{}, ErrClosed
		}
		if c.CompareAndSwap(v, v+1) {
			return Token{c: c}, nil
		}
	}
}

// Leave ends the operation admitted with t. Calling it twice with the same
// Token corrupts the count (the drain may finish early, or the stripe look
// closed); the zero Token is ignored.
func (g *Gate) Leave(t Token) {
	if t.c != nil && t.c.Add(-1) < 0 {
		g.checkDrained()
	}
}

// InFlight returns the number of admitted operations that have not left.
// It is a racy estimate meant for statistics.
func (g *Gate) InFlight() int64 {
	var n int64
	for i := range g.c {
		n += g.c[i].Load() &^ closedBit
	}
	return n
}

// Shut begins closing without waiting: once it returns, Enter returns
// ErrClosed. It reports whether this call was the one that shut the gate.
func (g *Gate) Shut() bool {
	if !g.closing.CompareAndSwap(false, true) {
		return false
	}
	for i := range g.c {
		g.c[i].Or(closedBit)
	}
	g.checkDrained()
	return true
}

// Closing reports whether Shut or Close has begun.
func (g *Gate) Closing() bool { return g.closing.Load() }

// Close shuts the gate and waits until every admitted operation has left.
// It is idempotent and safe to call from many goroutines; every call
// returns once the drain is complete. It waits without a deadline: use Shut
// and Wait to bound the wait.
func (g *Gate) Close() {
	g.Shut()
	<-g.Done()
}

// Done returns a channel closed once the gate has been shut and every
// admitted operation has left.
func (g *Gate) Done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		g.done = make(chan struct{})
		if g.drained {
			close(g.done)
		}
	}
	return g.done
}

// Wait blocks until the gate has drained (see Done) or ctx ends, in which
// case it returns ctx.Err(). It does not shut the gate.
func (g *Gate) Wait(ctx context.Context) error {
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
func (g *Gate) checkDrained() {
	for i := range g.c {
		if g.c[i].Load() != closedBit {
			return // open (Shut still marking) or busy
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
