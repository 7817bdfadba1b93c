package buffer

import (
	"math/bits"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
)

// A bitsSummary is the region summary of a bitslice file, in two parts,
// both per page of a table (32768 bits, 512 words of the file):
//
//   - lines: bit l says that line l of the file (bitslice words 8l to
//     8l+7, one cache line of 512 bits) may hold a set bit; a clear bit
//     says it holds none. Summary word k covers page k. Updated in place.
//   - index: for every page holding at most maxIndexed set bits, their
//     sorted offsets in the page (2 bytes each), all pages' in one flat
//     array; a denser page is not indexed and Ones reads it through lines.
//     Immutable: the flush publishes a new one.
//
// Ones over a page with nothing pending walks its index, which reads no
// file word at all (the way a roaring bitmap walks an array container, but
// every page's offsets in one array, read in order), or, for a dense page,
// only the lines that hold a set bit. A bit per 8192 bits, as a coarser
// summary would have it, skips nothing at 0.1% of bits set at random
// (nearly every such region holds one); a bit per line skips 60% of the
// lines but still reads 40% of the file; the index reads 2 bytes per set
// bit.
//
// Lines cost a bit per 512 bits of file (0.2%); the index 4 bytes per page
// plus 2 bytes per set bit of the sparse pages. Both are built by the scan
// NewBits does to count the file's set bits (they are not persisted) and
// kept by the flush (B9).
type bitsSummary struct {
	lines []uint64
	index atomic.Pointer[pageIndex]
}

// pageIndex is the index part of a summary: page pi's set bits are at
// offsets flat[start[pi]:start[pi+1]] from the page's first bit, unless
// dense has bit pi (the page is not indexed).
type pageIndex struct {
	start []uint32 // one per page, plus the end
	dense []uint64
	flat  []uint16
}

const (
	lineWords  = 8    // bitslice words per summary line
	maxIndexed = 1024 // set bits of a page the index lists, at most (2 KiB)
)

// summaryPages is the number of pages of a file of nbits bits.
func summaryPages(nbits uint64) uint64 { return (nbits + pageBits - 1) / pageBits }

// pageSummary is what a scan of one page of the file found.
type pageSummary struct {
	lines uint64   // the page's line bits
	n     uint64   // its set bits
	offs  []uint16 // their offsets, if n <= maxIndexed
}

// scanPage reads page pi of the file as v reads it. Only the flush (wmu
// held, so nothing else writes the file's words) and buildSummary call it.
func scanPage(v *bitsView, pi uint64) pageSummary {
	lo := pi * pageWords64
	hi := min(lo+pageWords64, uint64(len(v.words)))
	var ws []uint64
	if lo < hi {
		ws = v.words[lo:hi]
	}
	// Only the file's last word may hold bits past its length.
	last := ^uint64(0)
	if r := v.nbits - (hi-1)<<6; lo < hi && r < 64 {
		last = uint64(1)<<r - 1
	}
	word := func(j int) uint64 {
		x := atomic.LoadUint64(&ws[j])
		if j == len(ws)-1 {
			x &= last
		}
		return x
	}
	var p pageSummary
	for j := range ws {
		if x := word(j); x != 0 {
			p.n += uint64(bits.OnesCount64(x))
			p.lines |= 1 << (j / lineWords)
		}
	}
	if p.n > maxIndexed {
		return p
	}
	p.offs = make([]uint16, 0, p.n)
	for l := p.lines; l != 0; l &= l - 1 {
		first := bits.TrailingZeros64(l) * lineWords
		for j := first; j < first+lineWords && j < len(ws); j++ {
			for x := word(j); x != 0; x &= x - 1 {
				p.offs = append(p.offs, uint16(j<<6|bits.TrailingZeros64(x)))
			}
		}
	}
	return p
}

// buildSummary scans the file's words (of a file of nbits bits) and returns
// its summary and its number of set bits.
func buildSummary(words []uint64, nbits uint64) (*bitsSummary, uint64) {
	np := summaryPages(nbits)
	s := &bitsSummary{lines: make([]uint64, np)}
	v := bitsView{words: words, nbits: nbits}
	ix := &pageIndex{start: make([]uint32, np+1), dense: make([]uint64, (np+63)/64)}
	var n uint64
	for pi := range np {
		p := scanPage(&v, pi)
		n += p.n
		s.lines[pi] = p.lines
		ix.add(pi, p)
	}
	s.index.Store(ix)
	return s, n
}

// add appends page pi's summary (pages in order).
func (ix *pageIndex) add(pi uint64, p pageSummary) {
	if p.n > maxIndexed {
		ix.dense[pi/64] |= 1 << (pi % 64)
	} else {
		ix.flat = append(ix.flat, p.offs...)
	}
	ix.start[pi+1] = uint32(len(ix.flat))
}

// offsets returns page pi's offsets and whether it is indexed.
func (ix *pageIndex) offsets(pi uint64) ([]uint16, bool) {
	if pi+1 >= uint64(len(ix.start)) || ix.dense[pi/64]>>(pi%64)&1 != 0 {
		return nil, false
	}
	return ix.flat[ix.start[pi]:ix.start[pi+1]], true
}

// growSummary publishes a summary for a file of nbits bits, filled from the
// current one first (B9); the new pages are empty. wmu held.
func (b *Bits) growSummary(nbits uint64) {
	old := b.sum.Load()
	np := summaryPages(nbits)
	if np <= uint64(len(old.lines)) {
		return
	}
	s := &bitsSummary{lines: make([]uint64, np)}
	for k := range old.lines {
		s.lines[k] = atomic.LoadUint64(&old.lines[k])
	}
	oi := old.index.Load()
	ix := &pageIndex{start: make([]uint32, np+1), dense: make([]uint64, (np+63)/64), flat: oi.flat}
	copy(ix.start, oi.start)
	copy(ix.dense, oi.dense)
	for k := len(oi.start); k < len(ix.start); k++ {
		ix.start[k] = uint32(len(ix.flat))
	}
	s.index.Store(ix)
	b.sum.Store(s)
}

// summarizeWords is summarize for the pages of words (sorted by word), each
// once. wmu held.
func (b *Bits) summarizeWords(words []bitslice.WordChange) {
	pages := b.sumTouched[:0]
	last := ^uint64(0)
	for _, c := range words {
		if pi := c.Word / pageWords64; pi != last {
			pages = append(pages, pi)
			last = pi
		}
	}
	b.summarize(pages)
	b.sumTouched = pages[:0]
}

// summarize brings the summary of the given pages (their indexes, in
// increasing order, each once) up to date with the file (B9): their lines
// in place, then, if the index changes, a new index. wmu held.
func (b *Bits) summarize(pages []uint64) {
	r := b.summaryRun()
	for _, pi := range pages {
		r.page(pi)
	}
	r.done()
}

// sumRun is one summarize: page scans each page written (in increasing
// order, each once; the flush's page path calls it right after applying
// the page, while its words are in cache), done publishes the index if it
// changed. wmu held throughout.
//
// The pages changed are collected in a slice, not a map: a flush of a
// dense slice touches every page, and a map grown to that size each flush
// cost more than the scans. A page that was not indexed (dense) and still
// is not leaves the index as it was, so a flush that writes only dense
// pages publishes no new index.
type sumRun struct {
	b       *Bits
	s       *bitsSummary
	v       *bitsView
	oi      *pageIndex
	changed []changedPage
	same    bool
}

func (b *Bits) summaryRun() sumRun {
	s := b.sum.Load()
	return sumRun{b: b, s: s, v: b.view.Load(), oi: s.index.Load(), changed: b.sumPages[:0], same: true}
}

// page brings page pi's lines up to date and records what it holds.
func (r *sumRun) page(pi uint64) {
	if pi < uint64(len(r.s.lines)) {
		r.record(pi, scanPage(r.v, pi))
	}
}

// ran is page for a page whose every word the flush wrote, with the lines
// and set bits it wrote: only a page sparse enough for the index is read
// again, for its offsets.
func (r *sumRun) ran(pi, lines, ones uint64) {
	if pi >= uint64(len(r.s.lines)) {
		return
	}
	p := pageSummary{lines: lines, n: ones}
	if p.n <= maxIndexed {
		p = scanPage(r.v, pi)
	}
	r.record(pi, p)
}

// record stores page pi's lines and keeps what it holds for done.
func (r *sumRun) record(pi uint64, p pageSummary) {
	s := r.s
	if atomic.LoadUint64(&s.lines[pi]) != p.lines {
		atomic.StoreUint64(&s.lines[pi], p.lines)
	}
	if _, indexed := r.oi.offsets(pi); indexed || p.n <= maxIndexed {
		r.same = false
	}
	r.changed = append(r.changed, changedPage{pi, p})
}

// done publishes a new index if a page written was or is indexed.
func (r *sumRun) done() {
	s, oi, changed := r.s, r.oi, r.changed
	defer func() {
		clear(changed) // no offsets kept alive until the next flush
		r.b.sumPages = changed[:0]
	}()
	if r.same {
		return
	}
	np := uint64(len(s.lines))
	ix := &pageIndex{start: make([]uint32, np+1), dense: make([]uint64, (np+63)/64), flat: make([]uint16, 0, len(oi.flat))}
	k := 0
	for pi := range np {
		var p pageSummary
		if k < len(changed) && changed[k].pi == pi {
			p = changed[k].p
			k++
		} else {
			offs, indexed := oi.offsets(pi)
			p = pageSummary{n: uint64(len(offs)), offs: offs}
			if !indexed {
				p.n = maxIndexed + 1
			}
		}
		ix.add(pi, p)
	}
	s.index.Store(ix) // B9: filled, then published
}

// changedPage is a page summarize scanned, and what it found.
type changedPage struct {
	pi uint64
	p  pageSummary
}
