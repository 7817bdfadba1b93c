package flush

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// MaxOp is the largest op number: the tracker packs an op and two state
// bits into one word. Writes, batches, BeginOp and EndOp of a larger op
// fail with ErrBadOp.
const MaxOp = 1<<62 - 1

// Head states: how the highest op begun stands.
const (
	headEnded    = 0 // complete: ended by EndOp or a batch, or never begun here
	headImplicit = 1 // begun by a write without BeginOp: open until a later op begins or it ends
	headExplicit = 2 // begun by BeginOp: open until EndOp or a batch of it (and listed in open)
	headStates   = 2 // bits
)

// opTracker follows the host's ops between Options.Watermark and the
// highest op begun, to compute the contiguous prefix of complete ops (the
// highest op n such that every op <= n has ended), which is what a
// generation may claim.
//
// An op is begun explicitly (BeginOp), implicitly (the first write of an
// op above every op begun), or begun and ended at once (a batch of an op
// above every op begun). Ops are begun in increasing order: the host
// numbers them under its log's lock. So an op below the highest begun that
// was never begun here never will be, and counts as complete (a host whose
// log feeds several engines skips numbers). An implicitly begun op ends
// when a later op begins (the sequential host's rule: it finishes op n
// before it starts n+1) or when EndOp or a batch ends it; an explicitly
// begun one only by EndOp or a batch: concurrent writers end their ops in
// any order.
//
// Every method is called with the shared side of the write barrier held,
// and completed with it held exclusively (at a freeze, or in Exclusive), so
// a freeze sees no op change half made. Among themselves the methods
// synchronise through head (compare-and-swap) and mu.
//
// Publication order 15 (internal/buffer/protocol.go): BeginOp publishes head = (op,
// explicit) before it appends op to open, both under mu. A write that reads
// head = (op, explicit) proceeds without mu (the op is open); one that
// needs open takes mu and so sees the append. Ending an explicit op removes it from open
// before it marks head ended, both under mu; a write racing the end may be
// admitted or refused (ErrStaleOp), and if admitted it holds the shared
// barrier, so the freeze that claims the op includes it.
type opTracker struct {
	// head is the highest op begun (shifted left by headStates) and its
	// state. It only grows, except for its state going to headEnded.
	head atomic.Uint64

	mu sync.Mutex
	// open lists the explicitly begun ops, in increasing order, with those
	// ended in the middle marked so; the first entry is never ended
	// (ended entries are dropped from the front).
	open []openOp
}

type openOp struct {
	op    uint64
	ended bool
}

func packHead(op uint64, state uint64) uint64 { return op<<headStates | state }

func unpackHead(h uint64) (op, state uint64) { return h >> headStates, h & (1<<headStates - 1) }

func (t *opTracker) init(wm uint64) { t.head.Store(packHead(wm, headEnded)) }

// highest returns the highest op begun.
func (t *opTracker) highest() uint64 {
	op, _ := unpackHead(t.head.Load())
	return op
}

func checkOpRange(what string, op uint64) error {
	if op > MaxOp {
		return kverr.Errorf("%s of op %d: above the largest op number %d: %w", what, op, uint64(MaxOp), kverr.ErrBadOp)
	}
	return nil
}

// write admits a write of op (not 0), beginning it implicitly if it is
// above every op begun. ErrStaleOp if op is complete.
func (t *opTracker) write(op uint64) error {
	for {
		h := t.head.Load()
		hop, st := unpackHead(h)
		switch {
		case op == hop && st != headEnded:
			return nil // the open head op: the common case, no store
		case op > hop:
			if t.head.CompareAndSwap(h, packHead(op, headImplicit)) {
				return nil
			}
		default:
			t.mu.Lock()
			_, open := t.find(op)
			t.mu.Unlock()
			if open {
				return nil
			}
			return t.staleErr(op)
		}
	}
}

// openHead reports whether op (not 0) is the highest op begun and open:
// write's common case, which needs no store.
func (t *opTracker) openHead(op uint64) bool {
	hop, st := unpackHead(t.head.Load())
	return op == hop && st != headEnded
}

// apply admits a batch of op (not 0): begin and end in one. ErrStaleOp if
// op is complete.
func (t *opTracker) apply(op uint64) error {
	for {
		h := t.head.Load()
		hop, st := unpackHead(h)
		switch {
		case op > hop:
			if t.head.CompareAndSwap(h, packHead(op, headEnded)) {
				return nil
			}
		case op == hop && st == headImplicit:
			if t.head.CompareAndSwap(h, packHead(op, headEnded)) {
				return nil
			}
		default:
			if t.endExplicit(op) {
				return nil
			}
			return t.staleErr(op)
		}
	}
}

// begin begins op (not 0) explicitly. ErrBadOp unless op is above every op
// begun.
func (t *opTracker) begin(op uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		h := t.head.Load()
		hop, _ := unpackHead(h)
		if op <= hop {
			return kverr.Errorf("BeginOp(%d) out of order: op %d was begun already (ops are begun in increasing order, under the host's log lock): %w", op, hop, kverr.ErrBadOp)
		}
		if t.head.CompareAndSwap(h, packHead(op, headExplicit)) {
			if invariants.Enabled {
				invariants.Check(len(t.open) == 0 || t.open[len(t.open)-1].op < op, "flush: op %d begun below an open op", op)
			}
			t.open = append(t.open, openOp{op: op})
			return nil
		}
	}
}

// end ends op (not 0). Ending a complete op is a no-op; ErrBadOp if op is
// above every op begun.
func (t *opTracker) end(op uint64) error {
	for {
		h := t.head.Load()
		hop, st := unpackHead(h)
		switch {
		case op > hop:
			return kverr.Errorf("EndOp(%d): op %d was never begun (the highest op begun is %d): %w", op, op, hop, kverr.ErrBadOp)
		case op == hop && st == headImplicit:
			if t.head.CompareAndSwap(h, packHead(op, headEnded)) {
				return nil
			}
		case op == hop && st == headEnded:
			return nil
		default:
			t.endExplicit(op) // false: complete already
			return nil
		}
	}
}

// endExplicit ends op if it is explicitly begun and open, and reports
// whether it was.
func (t *opTracker) endExplicit(op uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, open := t.find(op)
	if !open {
		return false
	}
	t.open[i].ended = true
	n := 0
	for n < len(t.open) && t.open[n].ended {
		n++
	}
	if n == len(t.open) {
		t.open = t.open[:0]
	} else if n > 0 {
		t.open = t.open[n:]
	}
	for {
		h := t.head.Load()
		if hop, st := unpackHead(h); hop != op || st != headExplicit ||
			t.head.CompareAndSwap(h, packHead(op, headEnded)) {
			return true
		}
	}
}

// find returns op's index in open and whether it is open. t.mu held.
func (t *opTracker) find(op uint64) (int, bool) {
	i, ok := slices.BinarySearchFunc(t.open, op, func(e openOp, op uint64) int {
		switch {
		case e.op < op:
			return -1
		case e.op > op:
			return 1
		}
		return 0
	})
	return i, ok && !t.open[i].ended
}

func (t *opTracker) staleErr(op uint64) error {
	return kverr.Errorf("op %d is complete (ended, or below an op begun later; the highest op begun is %d): %w", op, t.highest(), kverr.ErrStaleOp)
}

// completed returns the highest op n such that every op <= n has ended.
// Stable only with the barrier held exclusively.
func (t *opTracker) completed() uint64 {
	hop, st := unpackHead(t.head.Load())
	c := hop
	if st != headEnded {
		c = hop - 1 // hop >= 1: an open op is never op 0
	}
	t.mu.Lock()
	if len(t.open) > 0 {
		c = min(c, t.open[0].op-1)
	}
	t.mu.Unlock()
	return c
}

// numOpen returns the number of ops begun and not ended.
func (t *opTracker) numOpen() int {
	hop, st := unpackHead(t.head.Load())
	t.mu.Lock()
	n := 0
	for _, e := range t.open {
		if !e.ended {
			n++
		}
	}
	t.mu.Unlock()
	if st == headImplicit && hop > 0 {
		n++
	}
	return n
}
