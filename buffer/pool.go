package buffer

import (
	"math/bits"
	"sync"
)

const (
	poolClasses = 48 // size classes: log2 of a table's capacity bytes
	poolDepth   = 2  // tables kept per class
)

// tablePool keeps released tables, cleared, for the next generation, so
// steady write/flush cycles reuse grown slot arrays instead of growing fresh
// tables (each growth step allocates and rehashes). Tables are grouped in
// size classes (log2 of the bytes they keep) with a bounded depth per class,
// and the pool's total is bounded by limit bytes: a burst's big tables are
// dropped, not pinned forever. A miss allocates; a full class frees.
//
// Only tables whose contents are durable elsewhere may be put: a reader that
// still holds a released table sees either nothing (and falls through to
// storage, which has the data) or a later generation's newer values. A table
// pinned by an iterator is never pooled.
type tablePool[K Key, V any] struct {
	mu      sync.Mutex
	limit   int64
	bytes   int64
	classes [poolClasses][]*Table[K, V]
	hits    int64
	misses  int64
}

func newTablePool[K Key, V any](limit int64) *tablePool[K, V] {
	return &tablePool[K, V]{limit: limit}
}

func poolClass(n int64) int {
	return min(bits.Len64(uint64(n)), poolClasses-1)
}

// get returns a cleared table whose capacity is closest to want bytes
// (preferring larger), or nil.
func (p *tablePool[K, V]) get(want int64) *Table[K, V] {
	if p.limit <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := poolClass(want)
	for d := 0; d < poolClasses; d++ {
		for _, cl := range [2]int{c + d, c - d - 1} {
			if cl < 0 || cl >= poolClasses {
				continue
			}
			if q := p.classes[cl]; len(q) > 0 {
				t := q[len(q)-1]
				q[len(q)-1] = nil
				p.classes[cl] = q[:len(q)-1]
				p.bytes -= t.capacityBytes()
				p.hits++
				return t
			}
		}
	}
	p.misses++
	return nil
}

// put clears t and keeps it if the bounds allow; it reports whether t was
// kept. t must be released (contents durable) and is not used by the caller
// afterwards.
func (p *tablePool[K, V]) put(t *Table[K, V]) bool {
	if p.limit <= 0 || t == nil || t.pins.Load() != 0 {
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+cb > p.limit || len(p.classes[c]) >= poolDepth {
		return false
	}
	p.classes[c] = append(p.classes[c], t)
	p.bytes += cb
	return true
}
