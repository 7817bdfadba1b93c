package buffer

import (
	"math/bits"
	"sync"
)

const (
	poolClasses = 48 // size classes: log2 of a table's capacity bytes
	poolDepth   = 2  // tables kept per class
)

// tablePool keeps released KV tables, cleared, for later generations, so
// steady write/flush cycles reuse grown slot arrays instead of growing fresh
// ones (arena chunks are not kept: see chunkDir). Tables are grouped by
// size class (log2 of the bytes they keep) with a bounded depth per class,
// and the total is bounded by limit bytes: a burst's big tables are
// dropped, not pinned forever. A miss allocates; a full class frees.
//
// Only tables that left every view and are not pinned may be put; see the
// read path's re-validation in KV.
type tablePool struct {
	mu      sync.Mutex
	limit   int64
	bytes   int64
	classes [poolClasses][]*table
}

func poolClass(n int64) int { return min(bits.Len64(uint64(n)), poolClasses-1) }

// get returns a cleared, sealed table whose capacity is closest to want
// bytes (preferring larger), or nil.
func (p *tablePool) get(want int64) *table {
	if p.limit <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := poolClass(want)
	for d := range poolClasses {
		for _, cl := range [2]int{c + d, c - d - 1} {
			if cl < 0 || cl >= poolClasses {
				continue
			}
			if q := p.classes[cl]; len(q) > 0 {
				t := q[len(q)-1]
				q[len(q)-1] = nil
				p.classes[cl] = q[:len(q)-1]
				p.bytes -= t.capacityBytes()
				return t
			}
		}
	}
	return nil
}

// put clears t and keeps it if the bounds allow; it reports whether t was
// kept. A table still pinned is never kept (the garbage collector frees it
// once its readers are done): the caller published the view without t
// first, so no pin is taken after this check (publication order 10).
func (p *tablePool) put(t *table) bool {
	if p.limit <= 0 || t.pins.Load() != 0 || !t.reusable() {
		return false
	}
	cb := t.capacityBytes()
	c := poolClass(cb)
	p.mu.Lock()
	fits := p.bytes+cb <= p.limit && len(p.classes[c]) < poolDepth
	p.mu.Unlock()
	if !fits {
		return false
	}
	t.clear() // outside the lock: clearing a large table takes a while
	if testHook != nil {
		testHook("pool-clear")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+cb > p.limit || len(p.classes[c]) >= poolDepth {
		return false
	}
	p.classes[c] = append(p.classes[c], t)
	p.bytes += cb
	return true
}
