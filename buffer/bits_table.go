package buffer

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
)

// A bitsTable holds one generation's pending bit changes in packed words:
// table word w covers bits [32w, 32w+32); its high half is the mask (which of
// them are pending), its low half their values. One atomic load reads a
// consistent (mask, value) pair; one compare-and-swap updates both.
//
// The words are split into lazily allocated chunks found through a directory
// of atomic pointers, because a bitslice's pending bits are typically spread
// over the whole slice: a hash table keyed by index would cost a cache miss
// per lookup, while this layout keeps 32 bits in 8 bytes.
//
// A directory entry may point at a shared, immutable full chunk (every bit
// pending, all ones or all zeros): SetRange installs them for chunks it
// covers whole and that hold nothing yet, so a range over billions of bits
// costs a pointer per 32768 bits. A writer that needs to change a word of a
// shared chunk installs a private copy first (copy on write).
//
// Invariants:
//
//  1. Words only go from "not pending" to "pending" (mask bits are never
//     cleared) until reset.
//  2. A directory entry goes nil -> chunk, or nil -> shared -> private copy,
//     by compare-and-swap; directory growth (a copy) and chunk allocation are
//     serialised by mu. Readers never lock.
//  3. reset runs only when the table left every view and no snapshot or
//     iterator pins it; a reader that raced it re-validates its view.
type bitsTable struct {
	dir     atomic.Pointer[bitsDir]
	hi      atomic.Uint64 // highest pending index + 1
	nchunks atomic.Int64  // private chunks installed
	held    atomic.Int64  // bytes charged to acct since the last reset
	pins    atomic.Int32
	acct    *Account

	mu   sync.Mutex   // directory growth, chunk allocation, free
	free []*bitsChunk // zeroed chunks kept for reuse

	gen uint64 // flush generation that froze it; under the overlay's vmu
}

type bitsDir struct {
	chunks []atomic.Pointer[bitsChunk]
}

const (
	chunkShift = 10 // packed words per chunk: 32768 bits, 8 KiB
	chunkWords = 1 << chunkShift
	chunkMask  = chunkWords - 1
	chunkBits  = chunkWords * 32
	chunkBytes = chunkWords * 8
	maxSlab    = 16 // chunks allocated at once, at most
	lowHalf    = 0xffffffff
)

type bitsChunk [chunkWords]uint64

// Shared full chunks. They are never written: writers copy them first.
var fullChunks = func() (c [2]bitsChunk) {
	for i := range c[0] {
		c[0][i] = lowHalf << 32         // all pending, all zero
		c[1][i] = lowHalf<<32 | lowHalf // all pending, all one
	}
	return c
}()

func fullChunk(v bool) *bitsChunk {
	if v {
		return &fullChunks[1]
	}
	return &fullChunks[0]
}

func isShared(c *bitsChunk) bool { return c == &fullChunks[0] || c == &fullChunks[1] }

func newBitsTable(acct *Account) *bitsTable {
	t := &bitsTable{acct: acct}
	t.dir.Store(new(bitsDir))
	return t
}

// charge adds n bytes to the table's and the account's totals. t.mu held.
func (t *bitsTable) charge(n int64) {
	t.held.Add(n)
	t.acct.add(n)
}

// word returns packed word w (0 if nothing in it is pending).
func (t *bitsTable) word(w uint64) uint64 {
	d := t.dir.Load()
	if ci := w >> chunkShift; ci < uint64(len(d.chunks)) {
		if c := d.chunks[ci].Load(); c != nil {
			return atomic.LoadUint64(&c[w&chunkMask])
		}
	}
	return 0
}

// word64 returns the mask and values of bitslice word w (64 bits), built
// from two packed words of the same chunk.
func (t *bitsTable) word64(w uint64) (mask, val uint64) {
	d := t.dir.Load()
	w2 := w << 1
	if ci := w2 >> chunkShift; ci < uint64(len(d.chunks)) {
		if c := d.chunks[ci].Load(); c != nil {
			p0 := atomic.LoadUint64(&c[w2&chunkMask])
			p1 := atomic.LoadUint64(&c[(w2+1)&chunkMask])
			return p0>>32 | p1&^lowHalf, p0&lowHalf | p1<<32
		}
	}
	return 0, 0
}

// slot returns the address of packed word w in a private chunk, installing
// the chunk (or a private copy of a shared one) if needed.
func (t *bitsTable) slot(w uint64) *uint64 {
	ci := w >> chunkShift
	for {
		d := t.dir.Load()
		if ci < uint64(len(d.chunks)) {
			if c := d.chunks[ci].Load(); c != nil && !isShared(c) {
				return &c[w&chunkMask]
			}
		}
		t.install(ci, nil)
	}
}

// install puts a chunk at ci if it holds none (want == nil: a private zero
// chunk; else want, a shared one) or replaces a shared chunk by a private
// copy (want == nil). It reports whether want was installed.
func (t *bitsTable) install(ci uint64, want *bitsChunk) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dir.Load()
	if ci >= uint64(len(d.chunks)) {
		// Grow to the next power of two covering ci (at least 8), so a
		// table filled in order copies its directory O(log n) times.
		n := uint64(8)
		if ci >= n {
			n = 1 << bits.Len64(ci)
		}
		nd := &bitsDir{chunks: make([]atomic.Pointer[bitsChunk], n)}
		for j := range d.chunks {
			nd.chunks[j].Store(d.chunks[j].Load())
		}
		t.dir.Store(nd)
		t.charge(int64(n-uint64(len(d.chunks))) * 8)
		d = nd
	}
	cur := d.chunks[ci].Load()
	switch {
	case want != nil && cur == nil:
		d.chunks[ci].Store(want)
		return true
	case want != nil || cur != nil && !isShared(cur):
		return false
	}
	c := t.allocChunk()
	if cur != nil { // copy on write
		for i := range c {
			// c may be a reset chunk that a reader of an older view still
			// loads atomically (see reset).
			atomic.StoreUint64(&c[i], cur[i])
		}
	}
	d.chunks[ci].Store(c)
	t.nchunks.Add(1)
	t.charge(chunkBytes)
	return false
}

// allocChunk returns a zeroed private chunk. t.mu held.
func (t *bitsTable) allocChunk() *bitsChunk {
	if len(t.free) == 0 {
		// Slabs that double with the table (1, 1, 2, 4, ... maxSlab
		// chunks): a sparse table costs one chunk, a dense one gets
		// contiguous memory, which keeps lookups TLB-friendly.
		n := min(max(int(t.nchunks.Load()), 1), maxSlab)
		slab := make([]bitsChunk, n)
		for k := n - 1; k >= 0; k-- {
			t.free = append(t.free, &slab[k])
		}
	}
	c := t.free[len(t.free)-1]
	t.free[len(t.free)-1] = nil
	t.free = t.free[:len(t.free)-1]
	return c
}

// empty reports whether nothing was set since the last reset.
func (t *bitsTable) empty() bool { return t.hi.Load() == 0 }

// bytes is the memory charged for the table's pending changes: private
// chunks and directory growth since the last reset (a reused directory is
// not charged again).
func (t *bitsTable) bytes() int64 { return t.held.Load() }

// appendWords appends the table's pending bitslice words with index in
// [from, to) (64-bit words), in order, as word changes; it returns the
// extended slice and the next word index not visited (to stop early at
// limit changes).
func (t *bitsTable) appendWords(dst []bitslice.WordChange, from, to uint64, limit int) ([]bitslice.WordChange, uint64) {
	d := t.dir.Load()
	w := from
	for w < to {
		ci := (w << 1) >> chunkShift
		if ci >= uint64(len(d.chunks)) {
			return dst, to
		}
		c := d.chunks[ci].Load()
		end := min(to, (ci+1)*chunkWords/2)
		if c == nil {
			w = end
			continue
		}
		for ; w < end; w++ {
			if len(dst) >= limit {
				return dst, w
			}
			w2 := w << 1
			p0 := atomic.LoadUint64(&c[w2&chunkMask])
			p1 := atomic.LoadUint64(&c[(w2+1)&chunkMask])
			m := p0>>32 | p1&^lowHalf
			if m == 0 {
				continue
			}
			dst = append(dst, bitslice.WordChange{Word: w, Mask: m, Bits: (p0&lowHalf | p1<<32) & m})
		}
	}
	return dst, to
}

// reset empties the table for reuse, keeping its directory and up to keep
// bytes of zeroed chunks. The table must have left every view and be
// unpinned; straggling readers re-validate their view.
func (t *bitsTable) reset(keep int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dir.Load()
	for ci := range d.chunks {
		c := d.chunks[ci].Load()
		if c == nil {
			continue
		}
		d.chunks[ci].Store(nil)
		if isShared(c) || int64(len(t.free)+1)*chunkBytes > keep {
			continue
		}
		for j := range c {
			if atomic.LoadUint64(&c[j]) != 0 {
				atomic.StoreUint64(&c[j], 0)
			}
		}
		t.free = append(t.free, c)
	}
	t.nchunks.Store(0)
	t.held.Store(0)
	t.hi.Store(0)
	t.gen = 0
}

// atomicMax raises *p to v if v is larger.
func atomicMax(p *atomic.Uint64, v uint64) {
	for {
		old := p.Load()
		if v <= old || p.CompareAndSwap(old, v) {
			return
		}
	}
}
