package buffer

import (
	"runtime"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/invariants"
)

// Seq numbers the KV changes of one engine and publishes them, pebble-style:
// a batch reserves one sequence number per change (Reserve), applies every
// change tagged with its own number, then publishes the whole range
// (SeqRange.Publish). A read loads the visible sequence number once and
// ignores every change above it (where in its loads it takes the number
// depends on the read: publication order 7 in protocol.go), so a batch
// becomes visible to readers in one
// step, when Publish moves the visible number past it; and a write never
// replaces a change with a higher number, so concurrent batches over the
// same keys end in the state of their serial order by sequence number.
//
// Ranges are published in the order they were reserved: a batch applied
// before an earlier one waits for it. A waiting batch records its range in a
// ring that whoever advances the visible number reads (pebble's
// commitPipeline.publish), so that one finishing batch publishes the run of
// finished batches behind it instead of handing over one at a time.
//
// The zero value is ready to use. Every overlay of one engine shares one Seq
// (through their Account).
type Seq struct {
	last    atomic.Uint64 // last sequence number handed out
	visible atomic.Uint64 // every change numbered <= visible is applied
	// ring holds, at index start%seqRing, the end of a range applied and
	// waiting for its predecessors; allocated by the first batch that has
	// to wait (an overlay without concurrent writers never allocates it).
	ring atomic.Pointer[[seqRing]atomic.Uint64]
}

// seqRing bounds the ranges waiting for publication that can be recorded at
// once: a range whose start is more than seqRing above the visible number
// waits for it to move before it records itself (it could not be published
// anyway).
const seqRing = 1024

// Visible returns the highest sequence number whose batch (and every batch
// before it) is applied and published.
func (q *Seq) Visible() uint64 { return q.visible.Load() }

// Last returns the highest sequence number handed out.
func (q *Seq) Last() uint64 { return q.last.Load() }

// SeqRange is a range of sequence numbers reserved for one batch; each
// change of the batch takes the next one (Next), and Publish makes them all
// visible at once. A SeqRange must be published exactly once, even if the
// batch fails half way (the changes applied so far become visible then), or
// every later batch waits forever.
type SeqRange struct {
	q           *Seq
	first, last uint64
	next        uint64
}

// Reserve reserves n sequence numbers (none if n < 1: the range's Publish
// does nothing, and Next must not be called). Callers must apply and
// Publish promptly: every batch reserved after this one waits for it.
// Ranges are handed out in order (publication order 5a).
func (q *Seq) Reserve(n int) SeqRange {
	if n < 1 {
		return SeqRange{}
	}
	last := q.last.Add(uint64(n))
	first := last - uint64(n) + 1
	return SeqRange{q: q, first: first, last: last, next: first}
}

// Next returns the next sequence number of the range.
func (r *SeqRange) Next() uint64 {
	s := r.next
	if invariants.Enabled {
		invariants.Check(s >= r.first && s <= r.last, "buffer: sequence number %d outside the reserved [%d, %d]", s, r.first, r.last)
	}
	r.next++
	return s
}

// Take returns the first of the next n sequence numbers of the range (for
// KV.ApplyAt).
func (r *SeqRange) Take(n int) uint64 {
	s := r.next
	if invariants.Enabled {
		invariants.Check(n >= 1 && s+uint64(n)-1 <= r.last, "buffer: %d sequence numbers taken from %d in [%d, %d]", n, s, r.first, r.last)
	}
	r.next += uint64(n)
	return s
}

// Publish makes every change of the range visible, once every range
// reserved before it is published, and returns then.
//
// Publication order 5b (protocol.go): every change
// of the range is stored before Publish, and the compare-and-swap that
// moves the visible number past the range comes after those stores, so a
// reader whose load of the visible number sees the new value sees every
// change of the range in any table it loads afterwards (or in the store,
// for a table flushed meanwhile: see the read orders, order 7), and one
// that loads an older number ignores every one of them.
func (r *SeqRange) Publish() {
	q := r.q
	if q == nil {
		return
	}
	r.q = nil
	// Fast path: every earlier range is published.
	if q.visible.CompareAndSwap(r.first-1, r.last) {
		if ring := q.ring.Load(); ring != nil {
			q.advance(ring) // publish the ranges that finished before us
		}
		return
	}
	recorded := false
	for spins := 0; q.visible.Load() < r.last; spins++ {
		if q.visible.CompareAndSwap(r.first-1, r.last) {
			if ring := q.ring.Load(); ring != nil {
				q.advance(ring)
			}
			return
		}
		if !recorded && r.first-q.visible.Load() <= seqRing {
			// Record the range for whoever advances past our
			// predecessor. The window check keeps every range
			// recorded in the ring at a distinct index: the waiting
			// ranges start within (visible, visible+seqRing].
			ring := q.ringFor()
			ring[r.first%seqRing].Store(r.last)
			recorded = true
			q.advance(ring)
			continue
		}
		if invariants.Enabled {
			invariants.Check(spins < 1<<26, "buffer: publication of [%d, %d] waited %d rounds at visible %d", r.first, r.last, spins, q.visible.Load())
		}
		if spins > 8 {
			runtime.Gosched()
		}
	}
}

// ringFor returns the ring, allocating it on first use.
func (q *Seq) ringFor() *[seqRing]atomic.Uint64 {
	if ring := q.ring.Load(); ring != nil {
		return ring
	}
	q.ring.CompareAndSwap(nil, new([seqRing]atomic.Uint64))
	return q.ring.Load()
}

// advance moves the visible number past every recorded range that follows
// it. An index of the ring holds either the end of the range starting at
// visible+1 (> visible: publish it) or a stale end of an older range at the
// same index (<= visible: stop). A stale visible makes the compare-and-swap
// fail, never publish out of order: the number only grows.
func (q *Seq) advance(ring *[seqRing]atomic.Uint64) {
	for {
		v := q.visible.Load()
		end := ring[(v+1)%seqRing].Load()
		if end <= v {
			return
		}
		q.visible.CompareAndSwap(v, end)
	}
}
