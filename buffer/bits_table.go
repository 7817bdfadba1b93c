package buffer

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
)

// A bitsTable holds one generation of pending bit changes, grouped by 64-bit
// word. It is a dense array of words, split into lazily allocated chunks found
// through a directory of atomic pointers, because the pending bits of a
// bitslice are typically spread uniformly over the whole slice: a hash table
// keyed by bit index would cost a cache miss per lookup, while this layout
// keeps 64 bits per 16 bytes, so a W1-sized table (4 Mi bits) fits in 1 MiB.
//
// Each word is a pair {mask, bits}: bit k of the word is pending iff mask has
// bit k set, and its value is then bit k of bits. Bits under a clear mask bit
// are meaningless (reset clears only the masks).
//
// Concurrency: any number of goroutines may call get and set at once. set
// writes the bits word before the mask word, and get loads the mask before the
// bits, so a reader that sees a mask bit sees the value of the write that set
// it or of a later one. Directory growth and chunk installation are serialized
// by mu; readers never lock. reset and the iteration helpers (forEach, merge)
// must not run concurrently with set (the owner excludes writers).
type bitsTable struct {
	dir     atomic.Pointer[bitsDir]
	hi      atomic.Uint64 // highest pending index + 1
	maxOp   atomic.Uint64 // highest op number written into this table
	nchunks atomic.Int64  // chunks installed in dir

	mu   sync.Mutex   // guards dir growth, chunk installation and free
	free []*bitsChunk // reset chunks kept for reuse by this table
}

// newBitsTable returns an empty table. Its directory is never nil, which
// keeps the read path (word) small enough to inline.
func newBitsTable() *bitsTable {
	t := new(bitsTable)
	t.dir.Store(new(bitsDir))
	return t
}

// bitsDir is one immutable-length directory; growth replaces it by a copy.
type bitsDir struct {
	chunks []atomic.Pointer[bitsChunk]
}

const (
	chunkShift = 9 // words per chunk = 512, i.e. 32768 bits, 8 KiB
	chunkWords = 1 << chunkShift
	chunkMask  = chunkWords - 1
	// chunkBytes is the memory of one chunk, for PendingBytes.
	chunkBytes = chunkWords * 16
	// maxSlab bounds the chunks allocated at once (128 KiB).
	maxSlab = 16
)

// bitsChunk keeps each word's mask and bits side by side, so that one cache
// line holds both.
type bitsChunk [chunkWords]bitsWord

type bitsWord struct{ mask, bits uint64 }

// word returns the pending mask and bits of word w (bits only meaningful
// under the mask; both zero if nothing in the word is pending). The mask is
// loaded before the bits: see the type comment.
func (t *bitsTable) word(w uint64) (mask, bits uint64) {
	d := t.dir.Load() // never nil: see newBitsTable
	if ci := w >> chunkShift; ci < uint64(len(d.chunks)) {
		if c := d.chunks[ci].Load(); c != nil {
			p := &c[w&chunkMask]
			mask = atomic.LoadUint64(&p.mask)
			return mask, atomic.LoadUint64(&p.bits)
		}
	}
	return 0, 0
}

// set records bit i = v as pending. maxWords bounds directory growth.
func (t *bitsTable) set(i uint64, v bool, op uint64) {
	w := i >> 6
	p := &t.chunk(w >> chunkShift)[w&chunkMask]
	bit := uint64(1) << (i & 63)
	// Value first, then mask: see the type comment.
	if v {
		atomic.OrUint64(&p.bits, bit)
	} else {
		atomic.AndUint64(&p.bits, ^bit)
	}
	if atomic.LoadUint64(&p.mask)&bit == 0 {
		atomic.OrUint64(&p.mask, bit)
	}
	atomicMax(&t.hi, i+1)
	atomicMax(&t.maxOp, op)
}

// chunk returns chunk ci, installing it (and growing the directory) if needed.
func (t *bitsTable) chunk(ci uint64) *bitsChunk {
	if d := t.dir.Load(); ci < uint64(len(d.chunks)) {
		if c := d.chunks[ci].Load(); c != nil {
			return c
		}
	}
	return t.install(ci)
}

func (t *bitsTable) install(ci uint64) *bitsChunk {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dir.Load()
	if ci >= uint64(len(d.chunks)) {
		// Grow to the next power of two covering ci (at least 8 chunks), so a
		// table that fills up sequentially copies its directory O(log n) times.
		n := uint64(8)
		if ci >= n {
			n = 1 << bits.Len64(ci)
		}
		nd := &bitsDir{chunks: make([]atomic.Pointer[bitsChunk], n)}
		for j := range d.chunks {
			nd.chunks[j].Store(d.chunks[j].Load())
		}
		t.dir.Store(nd)
		d = nd
	}
	if c := d.chunks[ci].Load(); c != nil {
		return c
	}
	if len(t.free) == 0 {
		// Allocate chunks in slabs that double with the table (1, 1, 2, 4,
		// ... up to maxSlab chunks): a sparse table costs one chunk, a dense
		// one gets contiguous memory, which keeps lookups TLB-friendly
		// however the heap around it is laid out.
		n := min(max(int(t.nchunks.Load()), 1), maxSlab)
		slab := make([]bitsChunk, n)
		for k := n - 1; k >= 0; k-- {
			t.free = append(t.free, &slab[k])
		}
	}
	c := t.free[len(t.free)-1]
	t.free[len(t.free)-1] = nil
	t.free = t.free[:len(t.free)-1]
	d.chunks[ci].Store(c)
	t.nchunks.Add(1)
	return c
}

// empty reports whether nothing was ever set since the last reset.
func (t *bitsTable) empty() bool { return t.nchunks.Load() == 0 }

// appendWords appends the table's pending words, sorted by word index, as
// bitslice word changes.
func (t *bitsTable) appendWords(dst []bitslice.WordChange) []bitslice.WordChange {
	d := t.dir.Load()
	for ci := range d.chunks {
		c := d.chunks[ci].Load()
		if c == nil {
			continue
		}
		base := uint64(ci) << chunkShift
		for j := range c {
			m := atomic.LoadUint64(&c[j].mask)
			if m == 0 {
				continue
			}
			dst = append(dst, bitslice.WordChange{Word: base + uint64(j), Mask: m, Bits: atomic.LoadUint64(&c[j].bits) & m})
		}
	}
	return dst
}

// mergeFrom writes every pending bit of src over t (src is newer). Readers of
// t stay correct throughout: each word's bits are stored before its mask.
func (t *bitsTable) mergeFrom(src *bitsTable) {
	d := src.dir.Load()
	for ci := range d.chunks {
		sc := d.chunks[ci].Load()
		if sc == nil {
			continue
		}
		var dc *bitsChunk
		for j := range sc {
			m := atomic.LoadUint64(&sc[j].mask)
			if m == 0 {
				continue
			}
			if dc == nil {
				dc = t.chunk(uint64(ci))
			}
			sb := atomic.LoadUint64(&sc[j].bits)
			db := atomic.LoadUint64(&dc[j].bits)
			atomic.StoreUint64(&dc[j].bits, db&^m|sb&m)
			atomic.OrUint64(&dc[j].mask, m)
		}
	}
	atomicMax(&t.hi, src.hi.Load())
	atomicMax(&t.maxOp, src.maxOp.Load())
}

// reset empties the table for reuse, keeping its directory and (up to
// keepBytes) its chunks. The owner must have made the table unreachable for
// new readers first; straggling readers may observe the reset, which is why
// Bits.Get re-validates its view after probing.
func (t *bitsTable) reset(keepBytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	{
		d := t.dir.Load()
		for ci := range d.chunks {
			c := d.chunks[ci].Load()
			if c == nil {
				continue
			}
			d.chunks[ci].Store(nil)
			if int64(len(t.free)+1)*chunkBytes > keepBytes {
				continue // drop it; the GC frees it once stragglers are gone
			}
			for j := range c {
				if atomic.LoadUint64(&c[j].mask) != 0 {
					atomic.StoreUint64(&c[j].mask, 0)
				}
			}
			t.free = append(t.free, c)
		}
	}
	t.nchunks.Store(0)
	t.hi.Store(0)
	t.maxOp.Store(0)
}

// bytes is the memory the table holds for pending changes (a reset table's
// retained directory and free chunks are not pending).
func (t *bitsTable) bytes() int64 {
	n := t.nchunks.Load() * chunkBytes
	if n > 0 {
		d := t.dir.Load()
		n += int64(len(d.chunks)) * 8
	}
	return n
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
