package buffer

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// node is a key's place in its shard's skip list (ordered tables only). The
// key never changes; ent points at the key's current entry (nil once
// removed). Only the shard's writer (holding the shard mutex) links and
// unlinks nodes; readers walk the list with atomic loads. A node's own next
// pointers are set before it is published, and an unlinked node keeps them,
// so a reader standing on it can always move on.
type node[K Key, V any] struct {
	pfx   uint64 // string keys: first 8 bytes, big-endian (see keyPrefix)
	key   K
	ent   atomic.Pointer[entry[K, V]]
	next0 atomic.Pointer[node[K, V]]
	up    []atomic.Pointer[node[K, V]] // levels 1..height-1
}

func (n *node[K, V]) next(l int) *atomic.Pointer[node[K, V]] {
	if l == 0 {
		return &n.next0
	}
	return &n.up[l-1]
}

func (n *node[K, V]) height() int { return 1 + len(n.up) }

// randomHeight draws a tower height with p = 1/4 per extra level.
func (sh *shard[K, V]) randomHeight() int {
	x := sh.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sh.rng = x
	h := 1
	for h < maxLevel && x&3 == 0 {
		h++
		x >>= 2
	}
	return h
}

// less reports whether n's key is below k (whose prefix is kp). Comparing
// the inline prefixes first resolves most string comparisons without
// touching the key bytes (a cache miss per node on a large list).
func (n *node[K, V]) less(k K, kp uint64) bool {
	if n.pfx != kp {
		return n.pfx < kp
	}
	return n.key < k
}

// findPrev fills prev with the last node at each level whose key is < k.
func findPrev[K Key, V any](head *node[K, V], k K, kp uint64, prev *[maxLevel]*node[K, V]) {
	x := head
	for l := maxLevel - 1; l >= 0; l-- {
		for {
			nx := x.next(l).Load()
			if nx == nil || !nx.less(k, kp) {
				break
			}
			x = nx
		}
		prev[l] = x
	}
}

// link inserts n into sh's skip list. sh.mu held.
func (t *Table[K, V]) link(sh *shard[K, V], n *node[K, V]) {
	var prev [maxLevel]*node[K, V]
	findPrev(sh.head, n.key, n.pfx, &prev)
	if h := sh.randomHeight(); h > 1 {
		n.up = make([]atomic.Pointer[node[K, V]], h-1)
	}
	for l := range n.height() {
		n.next(l).Store(prev[l].next(l).Load())
	}
	for l := range n.height() {
		prev[l].next(l).Store(n) // level 0 first: from here readers see n
	}
}

// unlink removes n from sh's skip list. sh.mu held.
func (t *Table[K, V]) unlink(sh *shard[K, V], n *node[K, V]) {
	var prev [maxLevel]*node[K, V]
	findPrev(sh.head, n.key, n.pfx, &prev)
	for l := n.height() - 1; l >= 0; l-- {
		if prev[l].next(l).Load() == n {
			prev[l].next(l).Store(n.next(l).Load())
		}
	}
}

// seekGE returns the first node with key >= k in the list at head, or nil.
//
// It returns the level-0 successor it compared with k, never a fresh load of
// x.next0: a writer may link a node after x (the last node < k) at any
// moment, and that node's key may be < k too. Reloading returned such a key
// as the seek result, so a range scan started below its lower bound. A node
// >= k linked after the comparison is a concurrent write, which a scan may
// miss (see Iter).
func seekGE[K Key, V any](head *node[K, V], kind keyKind, k K) *node[K, V] {
	kp := keyPrefix(kind, k)
	x := head
	var nx *node[K, V]
	for l := maxLevel - 1; l >= 0; l-- {
		for {
			nx = x.next(l).Load()
			if nx == nil || !nx.less(k, kp) {
				break
			}
			x = nx
		}
	}
	return nx // from level 0: the first node >= k when it was loaded, or nil
}

// cursorSrc is one sorted list a mergeCursor reads: a shard's skip list head
// and the priority of its table (lower = newer, wins on equal keys).
type cursorSrc[K Key, V any] struct {
	head *node[K, V]
	kind keyKind
	prio int
}

type cursorItem[K Key, V any] struct {
	n    *node[K, V]
	prio int
}

// mergeCursor walks the skip lists of one or more ordered tables in key
// order (a k-way heap merge over their shards). Equal keys from several
// tables come out in priority order; the caller takes the first and skips
// the rest with skipKey.
type mergeCursor[K Key, V any] struct {
	srcs []cursorSrc[K, V]
	heap []cursorItem[K, V]
}

// addTable adds t's shards as sources with priority prio.
func (m *mergeCursor[K, V]) addTable(t *Table[K, V], prio int) {
	if t == nil || !t.ordered {
		return
	}
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		if sh := p.Load(); sh != nil {
			m.srcs = append(m.srcs, cursorSrc[K, V]{head: sh.head, kind: t.kind, prio: prio})
		}
	}
}

func (m *mergeCursor[K, V]) less(a, b cursorItem[K, V]) bool {
	if a.n.pfx != b.n.pfx {
		return a.n.pfx < b.n.pfx
	}
	if a.n.key != b.n.key {
		return a.n.key < b.n.key
	}
	return a.prio < b.prio
}

// seek positions the cursor at the first key >= k (or the first key at all
// when first is true).
func (m *mergeCursor[K, V]) seek(k K, first bool) {
	m.heap = m.heap[:0]
	for _, s := range m.srcs {
		var n *node[K, V]
		if first {
			n = s.head.next0.Load()
		} else {
			n = seekGE(s.head, s.kind, k)
		}
		if n != nil {
			m.heap = append(m.heap, cursorItem[K, V]{n: n, prio: s.prio})
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
}

func (m *mergeCursor[K, V]) valid() bool { return len(m.heap) > 0 }

// top is the current node (smallest key, newest table among equals).
func (m *mergeCursor[K, V]) top() *node[K, V] { return m.heap[0].n }

// advance moves the top source to its next node.
func (m *mergeCursor[K, V]) advance() {
	if nx := m.heap[0].n.next0.Load(); nx != nil {
		m.heap[0].n = nx
	} else {
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
		if last == 0 {
			return
		}
	}
	m.down(0)
}

// skipKey advances past every source positioned at key k.
func (m *mergeCursor[K, V]) skipKey(k K) {
	for m.valid() && m.heap[0].n.key == k {
		m.advance()
	}
}

func (m *mergeCursor[K, V]) down(i int) {
	h := m.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && m.less(h[r], h[l]) {
			c = r
		}
		if !m.less(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// Ascend calls fn for each entry in key order until fn returns false. On an
// ordered table it merges the shards' skip lists; on an unordered one it
// collects and sorts the entries first. Concurrent writes may or may not be
// seen; each key is visited at most once.
func (t *Table[K, V]) Ascend(fn func(K, V) bool) {
	if !t.ordered {
		var es []*entry[K, V]
		t.rangeEntries(func(e *entry[K, V]) bool { es = append(es, e); return true })
		slices.SortFunc(es, func(a, b *entry[K, V]) int { return cmp.Compare(a.key, b.key) })
		for _, e := range es {
			if !fn(e.key, e.val) {
				return
			}
		}
		return
	}
	var m mergeCursor[K, V]
	m.addTable(t, 0)
	var zero K
	for m.seek(zero, true); m.valid(); m.advance() {
		n := m.top()
		if e := n.ent.Load(); e != nil && !fn(e.key, e.val) {
			return
		}
	}
}

func (t *Table[K, V]) rangeEntries(fn func(*entry[K, V]) bool) {
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		sh := p.Load()
		if sh == nil {
			continue
		}
		arr := sh.slots.Load()
		if arr == nil {
			continue
		}
		tomb := &arr.tomb
		for i := range arr.s {
			if e := arr.s[i].ptr.Load(); e != nil && e != tomb && !fn(e) {
				return
			}
		}
	}
}
