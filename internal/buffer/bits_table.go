package buffer

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
)

// A bitsTable holds one generation's pending bit changes in a dense, paged
// layout: pages of packed words found through a directory of atomic page
// pointers. Packed word w covers bits [32w, 32w+32): its high half is the
// mask (which of them are pending), its low half their values, so one
// atomic load reads a consistent (mask, value) pair and one atomic OR sets
// a bit (rule B4 of bits_protocol.go).
//
// A lookup is three dependent loads (directory, page pointer, packed word)
// after the view; a page is 8 KiB (32768 bits), so a table of pending bits
// spread over a slice costs 2 bits of memory per bit of the pages it
// touches, and the flush walks the pages in order and applies whole words.
//
// A directory entry may point at a shared, immutable full page (every bit
// pending, all ones or all zeros): SetRange installs them for pages it
// covers whole and that hold nothing yet, so a range over billions of bits
// costs a pointer per 32768 bits. A writer that needs to change a word of a
// shared page installs a private copy first (copy on write).
//
// Invariants:
//
//  1. Mask bits only go from "not pending" to "pending" until reset, and a
//     value bit is set only with its mask bit (B4).
//  2. A directory entry goes nil -> page, or nil -> shared -> private copy;
//     directory growth (a copy) and page installs are serialised by mu and
//     published with atomic stores (B5). Readers never lock.
//  3. reset runs only when the table left every view and no snapshot pins
//     it; a reader that raced it re-validates its view (B8).
type bitsTable struct {
	dir atomic.Pointer[bitsDir]
	// lines is the table's pending-word filter: bit l%64 of lines[l/64]
	// says that bitslice word l (bits [64l, 64l+64)) may hold a pending
	// bit, so that a lookup of a bit in a word no write touched reads the
	// file without probing the tables (B4a). It covers the bits below
	// 4096*len(lines), fixed when the table is made; a write past that
	// marks every bit, then sets unfiltered. Once an eighth of its bits are
	// marked, every bit is, and dense is set: a dense table is probed on
	// every lookup. Never reassigned (reset zeroes it); not charged to the
	// account (a 512th of the file's bits, in bytes).
	lines      []uint64
	unfiltered atomic.Bool
	dense      atomic.Bool
	marked     atomic.Int64  // filter bits marked since the last reset
	hi         atomic.Uint64 // highest pending index + 1
	npages     atomic.Int64  // private pages installed
	held       atomic.Int64  // bytes charged to acct since the last reset
	pins       atomic.Int32
	acct       *Account

	mu   sync.Mutex  // directory growth, page allocation, free, dirty
	free []*bitsPage // zeroed pages kept for reuse
	// dirty are pages kept for reuse without zeroing (reset found more
	// than keepWritten words written): SetMany's page fill stores every
	// word of one anyway (fill), and allocPage zeroes one only when no
	// zeroed page is left.
	dirty []*bitsPage

	gen uint64 // flush generation that froze it; under the overlay's vmu

	// grown, if set, is called (t.mu held) after the directory grew and
	// before a page is installed in the new one (B5).
	grown func(*bitsTable)
	// densed, if set, is called once dense is set (B13), by the writer
	// that set it (t.mu held or not: the lock order is t.mu, then vmu).
	densed func(*bitsTable)
}

type bitsDir struct {
	pages []atomic.Pointer[bitsPage]
}

const (
	pageShift = 10 // packed words per page: 32768 bits, 8 KiB
	pageWords = 1 << pageShift
	pageMask  = pageWords - 1
	pageBits  = pageWords * 32
	pageBytes = pageWords * 8
	// pageWords64 is the number of 64-bit bitslice words a page covers.
	pageWords64 = pageWords / 2
	maxSlab     = 16 // pages allocated at once, at most
	// keepWritten is the most words a released page may have written for
	// reset to zero it; a page with more is kept dirty (see reset).
	keepWritten = 64
	lowHalf     = 0xffffffff
)

type bitsPage [pageWords]uint64

// Shared full pages. They are never written: writers copy them first.
var fullPages = func() (c [2]bitsPage) {
	for i := range c[0] {
		c[0][i] = lowHalf << 32         // all pending, all zero
		c[1][i] = lowHalf<<32 | lowHalf // all pending, all one
	}
	return c
}()

func fullPage(v bool) *bitsPage {
	if v {
		return &fullPages[1]
	}
	return &fullPages[0]
}

func isShared(c *bitsPage) bool { return c == &fullPages[0] || c == &fullPages[1] }

// newBitsTable returns an empty table whose line filter covers at least
// nbits bits (a file's length), with room to grow.
func newBitsTable(acct *Account, nbits uint64) *bitsTable {
	cover := max(nbits+nbits/2, 1<<20)
	t := &bitsTable{acct: acct, lines: make([]uint64, (cover+filterWordBits-1)/filterWordBits)}
	t.dir.Store(new(bitsDir))
	return t
}

// mark records in the line filter that bits [lo, hi) may be pending (B4a:
// before the table's words are written).
func (t *bitsTable) mark(lo, hi uint64) {
	if t.unfiltered.Load() {
		return
	}
	for l := lo >> filterShift; l<<filterShift < hi; l++ {
		k, bit := l>>6, uint64(1)<<(l&63)
		if k >= uint64(len(t.lines)) {
			// Past the cover: every word of the filter marked first (a
			// lookup within the cover must not trust it any more), then
			// unfiltered for the lookups past it.
			t.markAll()
			t.unfiltered.Store(true)
			return
		}
		if l&63 == 0 && (l+64)<<filterShift <= hi {
			// A whole filter word.
			if atomic.LoadUint64(&t.lines[k]) != ^uint64(0) {
				atomic.StoreUint64(&t.lines[k], ^uint64(0))
				t.count(64)
			}
			l += 63
			continue
		}
		if atomic.LoadUint64(&t.lines[k])&bit == 0 && atomic.OrUint64(&t.lines[k], bit)&bit == 0 {
			t.count(1)
		}
	}
}

// markWords records in the line filter that the bitslice words marked in
// marks may hold a pending bit: marks[k] is filter word k0+k (B4a: before
// the table's words are written).
func (t *bitsTable) markWords(k0 uint64, marks *[pageWords64 / 64]uint64) {
	if t.unfiltered.Load() {
		return
	}
	for k, m := range marks {
		if m == 0 {
			continue
		}
		fk := k0 + uint64(k)
		if fk >= uint64(len(t.lines)) {
			t.markAll() // past the cover: as mark
			t.unfiltered.Store(true)
			return
		}
		if old := atomic.LoadUint64(&t.lines[fk]); old&m != m {
			old = atomic.OrUint64(&t.lines[fk], m)
			if n := bits.OnesCount64(m &^ old); n > 0 {
				t.count(int64(n))
			}
		}
	}
}

// count adds n newly marked filter bits; past an eighth of the filter, it
// marks every bit and sets dense (B4a: a dense table is probed on every
// lookup).
func (t *bitsTable) count(n int64) {
	if t.marked.Add(n) > int64(len(t.lines))*64/8 && !t.dense.Load() {
		t.markAll()
	}
}

// markAll marks every bit of the filter, then sets dense (B4a); the writer
// that sets it calls densed (B13).
func (t *bitsTable) markAll() {
	for k := range t.lines {
		if atomic.LoadUint64(&t.lines[k]) != ^uint64(0) {
			atomic.StoreUint64(&t.lines[k], ^uint64(0))
		}
	}
	if !t.dense.Swap(true) && t.densed != nil {
		t.densed(t)
	}
}

// filterShift is log2 of the bits a filter bit covers (a bitslice word).
const (
	filterShift    = 6
	filterWordBits = 64 << filterShift
)

// maybe reports whether filter bit l may cover a pending bit (B4a).
func (t *bitsTable) maybe(l uint64) bool {
	if k := l >> 6; k < uint64(len(t.lines)) {
		return atomic.LoadUint64(&t.lines[k])>>(l&63)&1 != 0
	}
	return t.unfiltered.Load()
}

// charge adds n bytes to the table's and the account's totals. t.mu held.
func (t *bitsTable) charge(n int64) {
	t.held.Add(n)
	t.acct.add(n)
}

// page returns page pi, or nil.
func (t *bitsTable) page(pi uint64) *bitsPage {
	d := t.dir.Load()
	if pi < uint64(len(d.pages)) {
		return d.pages[pi].Load()
	}
	return nil
}

// word returns packed word w (0 if nothing in it is pending), through the
// line filter (B4a).
func (t *bitsTable) word(w uint64) uint64 {
	if !t.maybe(w >> (filterShift - 5)) {
		return 0
	}
	return t.pageWord(w)
}

// pageWord is word without the filter.
func (t *bitsTable) pageWord(w uint64) uint64 {
	d := t.dir.Load()
	if pi := w >> pageShift; pi < uint64(len(d.pages)) {
		if c := d.pages[pi].Load(); c != nil {
			if testHook != nil {
				testHook("bits-page")
			}
			return atomic.LoadUint64(&c[w&pageMask])
		}
	}
	return 0
}

// word64 returns the mask and values of bitslice word w (64 bits), built
// from two packed words of the same page.
func (t *bitsTable) word64(w uint64) (mask, val uint64) {
	if !t.maybe(w >> (filterShift - 6)) {
		return 0, 0
	}
	d := t.dir.Load()
	w2 := w << 1
	if pi := w2 >> pageShift; pi < uint64(len(d.pages)) {
		if c := d.pages[pi].Load(); c != nil {
			return pageWord64(c, w2)
		}
	}
	return 0, 0
}

// pageWord64 is word64 of packed words w2 and w2+1 of page c.
func pageWord64(c *bitsPage, w2 uint64) (mask, val uint64) {
	p0 := atomic.LoadUint64(&c[w2&pageMask])
	p1 := atomic.LoadUint64(&c[(w2+1)&pageMask])
	return p0>>32 | p1&^lowHalf, p0&lowHalf | p1<<32
}

// slot returns the address of packed word w in a private page, installing
// the page (or a private copy of a shared one) if needed.
func (t *bitsTable) slot(w uint64) *uint64 {
	pi := w >> pageShift
	d := t.dir.Load()
	if pi < uint64(len(d.pages)) {
		if c := d.pages[pi].Load(); c != nil && !isShared(c) {
			return &c[w&pageMask]
		}
	}
	return t.slotSlow(w)
}

// privatePage returns page pi, private, installing it (or a private copy
// of a shared one) if needed.
func (t *bitsTable) privatePage(pi uint64) *bitsPage {
	for {
		d := t.dir.Load()
		if pi < uint64(len(d.pages)) {
			if c := d.pages[pi].Load(); c != nil && !isShared(c) {
				return c
			}
		}
		t.install(pi, nil)
	}
}

func (t *bitsTable) slotSlow(w uint64) *uint64 {
	pi := w >> pageShift
	for {
		t.install(pi, nil)
		d := t.dir.Load()
		if c := d.pages[pi].Load(); c != nil && !isShared(c) {
			return &c[w&pageMask]
		}
	}
}

// install puts a page at pi if it holds none (want == nil: a private zero
// page; else want, a shared one) or replaces a shared page by a private
// copy (want == nil). It reports whether want was installed.
func (t *bitsTable) install(pi uint64, want *bitsPage) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.growDir(pi)
	cur := d.pages[pi].Load()
	switch {
	case want != nil && cur == nil:
		d.pages[pi].Store(want)
		return true
	case want != nil || cur != nil && !isShared(cur):
		return false
	}
	c := t.allocPage()
	if cur != nil { // copy on write
		for i := range c {
			// c may be a reset page that a reader of an older view still
			// loads atomically (see reset).
			atomic.StoreUint64(&c[i], cur[i])
		}
	}
	d.pages[pi].Store(c) // B5: copied, then published
	t.npages.Add(1)
	t.charge(pageBytes)
	return false
}

// growDir returns the directory, grown first if it does not reach page
// pi. t.mu held.
func (t *bitsTable) growDir(pi uint64) *bitsDir {
	d := t.dir.Load()
	if pi < uint64(len(d.pages)) {
		return d
	}
	// Grow to the next power of two covering pi (at least 8), so a table
	// filled in order copies its directory O(log n) times.
	n := uint64(8)
	if pi >= n {
		n = 1 << bits.Len64(pi)
	}
	nd := &bitsDir{pages: make([]atomic.Pointer[bitsPage], n)}
	for j := range d.pages {
		nd.pages[j].Store(d.pages[j].Load())
	}
	t.dir.Store(nd) // B5: filled, then published
	t.charge(int64(n-uint64(len(d.pages))) * 8)
	if t.grown != nil {
		t.grown(t) // B5: in the view before a page is installed in it
	}
	return nd
}

// takeFill returns a private page for SetMany to fill (every word it
// stores) and whether it is dirty (its words must all be stored, zeros
// included). It is in no directory.
func (t *bitsTable) takeFill() (c *bitsPage, dirty bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.dirty); n > 0 {
		c = t.dirty[n-1]
		t.dirty[n-1] = nil
		t.dirty = t.dirty[:n-1]
		return c, true
	}
	return t.allocPage(), false
}

// installFilled stores c, a page from takeFill filled by its caller, at
// pi if nothing is there yet (B5: filled, then published), and reports
// whether it did; if not, it keeps c as dirty.
func (t *bitsTable) installFilled(pi uint64, c *bitsPage) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.growDir(pi)
	if d.pages[pi].Load() != nil {
		t.dirty = append(t.dirty, c)
		return false
	}
	d.pages[pi].Store(c)
	t.npages.Add(1)
	t.charge(pageBytes)
	return true
}

// allocPage returns a zeroed private page. t.mu held.
func (t *bitsTable) allocPage() *bitsPage {
	if n := len(t.dirty); len(t.free) == 0 && n > 0 {
		c := t.dirty[n-1]
		t.dirty[n-1] = nil
		t.dirty = t.dirty[:n-1]
		zeroPage(c)
		return c
	}
	if len(t.free) == 0 {
		// Slabs that double with the table (1, 1, 2, 4, ... maxSlab
		// pages): a sparse table costs one page, a dense one gets
		// contiguous memory, which keeps lookups TLB-friendly.
		n := min(max(int(t.npages.Load()), 1), maxSlab)
		slab := make([]bitsPage, n)
		for k := n - 1; k >= 0; k-- {
			t.free = append(t.free, &slab[k])
		}
	}
	c := t.free[len(t.free)-1]
	t.free[len(t.free)-1] = nil
	t.free = t.free[:len(t.free)-1]
	return c
}

// setPacked records bit sh of packed word *p as v (B4) and returns the
// change to the set-bit count it made, given a function for the value
// beneath the table (older tables, then the file) of a bit this table did
// not hold.
func setPacked(p *uint64, sh uint64, v bool, beneath func() bool) int64 {
	bit := uint64(1) << sh
	if v {
		// One OR sets the mask and the value bit: the old word says
		// exactly what the bit was.
		old := atomic.OrUint64(p, bit<<32|bit)
		switch {
		case old&bit != 0:
			return 0 // pending as 1 already
		case old>>32&bit != 0:
			return 1 // pending as 0
		case beneath():
			return 0
		}
		return 1
	}
	// The mask bit first: a bit not pending has a zero value bit, so the
	// OR alone makes it 0. A bit pending as 1 then has its value cleared;
	// each step counts the change it made.
	old := atomic.OrUint64(p, bit<<32)
	if old>>32&bit == 0 {
		if beneath() {
			return -1
		}
		return 0
	}
	if old&bit == 0 {
		return 0
	}
	if testHook != nil {
		testHook("bits-and")
	}
	if atomic.AndUint64(p, ^bit)&bit != 0 {
		return -1
	}
	return 0
}

// empty reports whether nothing was set since the last reset.
func (t *bitsTable) empty() bool { return t.hi.Load() == 0 }

// bytes is the memory charged for the table's pending changes: private
// pages and directory growth since the last reset (a reused directory is
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
		pi := (w << 1) >> pageShift
		if pi >= uint64(len(d.pages)) {
			return dst, to
		}
		c := d.pages[pi].Load()
		end := min(to, (pi+1)*pageWords64)
		if c == nil {
			w = end
			continue
		}
		for ; w < end; w++ {
			if len(dst) >= limit {
				return dst, w
			}
			m, v := pageWord64(c, w<<1)
			if m == 0 {
				continue
			}
			dst = append(dst, bitslice.WordChange{Word: w, Mask: m, Bits: v & m})
		}
	}
	return dst, to
}

// reset empties the table for reuse, keeping its directory and up to keep
// bytes of zeroed pages. The table must have left every view and be
// unpinned; straggling readers re-validate their view (B8).
func (t *bitsTable) reset(keep int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dir.Load()
	for pi := range d.pages {
		c := d.pages[pi].Load()
		if c == nil {
			continue
		}
		d.pages[pi].Store(nil)
		if isShared(c) || int64(len(t.free)+len(t.dirty)+1)*pageBytes > keep {
			continue
		}
		// Zeroing takes an atomic store per word written (a reader of an
		// older view may still load the page, B8), each a locked
		// instruction: a page with many is kept dirty instead, for
		// SetMany's fill, which stores every word anyway.
		var nz int
		for j := range c {
			if atomic.LoadUint64(&c[j]) != 0 {
				nz++
			}
		}
		if nz > keepWritten {
			t.dirty = append(t.dirty, c)
			continue
		}
		zeroPage(c)
		t.free = append(t.free, c)
	}
	for k := range t.lines {
		if atomic.LoadUint64(&t.lines[k]) != 0 {
			atomic.StoreUint64(&t.lines[k], 0)
		}
	}
	t.unfiltered.Store(false)
	t.dense.Store(false)
	t.marked.Store(0)
	t.npages.Store(0)
	t.held.Store(0)
	t.hi.Store(0)
	t.gen = 0
}

// zeroPage zeroes the words of c that are not zero, with atomic stores: c
// may be a page of a released table that a reader of an older view still
// loads (B8).
func zeroPage(c *bitsPage) {
	for j := range c {
		if atomic.LoadUint64(&c[j]) != 0 {
			atomic.StoreUint64(&c[j], 0)
		}
	}
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
