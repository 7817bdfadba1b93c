package buffer

import (
	"math/bits"
	"slices"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
)

// A bitsSummary is the region summary of a bitslice file, in two parts,
// both per page of a table (32768 bits, 512 words of the file):
//
//   - lines: bit l says that line l of the file (bitslice words 8l to
//     8l+7, one cache line of 512 bits) may hold a set bit; a clear bit
//     says it holds none. Summary word k covers page k.
//   - index: for a page holding at most maxIndexed set bits, their sorted
//     offsets in the page (2 bytes each; none for an empty page); nil for a
//     denser page, which Ones reads through lines.
//
// Ones over a page with nothing pending walks its index, which reads no
// file word at all (the way a roaring bitmap walks an array container),
// or, for a dense page, only the lines that hold a set bit. A bit per 8192
// bits, as a coarser summary would have it, skips nothing at 0.1% of bits
// set at random (nearly every such region holds one); a bit per line
// skips 60% of the lines but still reads 40% of the file; the index reads
// 2 bytes per set bit.
//
// Lines cost a bit per 512 bits of file (0.2%); the index 8 bytes per page
// plus 2 bytes per set bit of the sparse pages. Both are built by the scan
// NewBits does to count the file's set bits (they are not persisted) and
// kept by the flush (B9).
type bitsSummary struct {
	lines []uint64
	index []atomic.Pointer[pageIndex]
}

// pageIndex lists the set bits of one sparse page of the file.
type pageIndex struct {
	offs []uint16 // sorted offsets from the page's first bit
}

const (
	lineWords  = 8    // bitslice words per summary line
	maxIndexed = 1024 // set bits of a page the index lists, at most (2 KiB)
)

// emptyIndex is the index of a page with no set bit.
var emptyIndex = &pageIndex{}

// summaryPages is the number of pages of a file of nbits bits.
func summaryPages(nbits uint64) uint64 { return (nbits + pageBits - 1) / pageBits }

// buildSummary scans the file's words (of a file of nbits bits) and returns
// its summary and its number of set bits.
func buildSummary(words []uint64, nbits uint64) (*bitsSummary, uint64) {
	np := summaryPages(nbits)
	s := &bitsSummary{lines: make([]uint64, np), index: make([]atomic.Pointer[pageIndex], np)}
	v := bitsView{words: words, nbits: nbits}
	var n uint64
	for pi := range np {
		n += s.rebuild(&v, pi)
	}
	return s, n
}

// rebuild brings page pi's lines and index up to date with the file as v
// reads it, and returns the page's set bits. Only the flush (wmu held, so
// nothing else writes the file's words) and buildSummary call it.
func (s *bitsSummary) rebuild(v *bitsView, pi uint64) uint64 {
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
	var lines, n uint64
	for j := range ws {
		x := atomic.LoadUint64(&ws[j])
		if j == len(ws)-1 {
			x &= last
		}
		if x != 0 {
			n += uint64(bits.OnesCount64(x))
			lines |= 1 << (j / lineWords)
		}
	}
	if atomic.LoadUint64(&s.lines[pi]) != lines {
		atomic.StoreUint64(&s.lines[pi], lines)
	}
	ix := emptyIndex
	switch {
	case n > maxIndexed:
		ix = nil
	case n > 0:
		ix = &pageIndex{offs: make([]uint16, 0, n)}
		for l := lines; l != 0; l &= l - 1 {
			first := bits.TrailingZeros64(l) * lineWords
			for j := first; j < first+lineWords && j < len(ws); j++ {
				for x := word(j); x != 0; x &= x - 1 {
					ix.offs = append(ix.offs, uint16(j<<6|bits.TrailingZeros64(x)))
				}
			}
		}
	}
	s.index[pi].Store(ix) // B9: filled, then published
	return n
}

// growSummary publishes a summary for a file of nbits bits, filled from the
// current one first (B9); the new pages are empty. wmu held.
func (b *Bits) growSummary(nbits uint64) {
	old := b.sum.Load()
	np := summaryPages(nbits)
	if np <= uint64(len(old.lines)) {
		return
	}
	s := &bitsSummary{lines: make([]uint64, np), index: make([]atomic.Pointer[pageIndex], np)}
	for k := range old.lines {
		s.lines[k] = atomic.LoadUint64(&old.lines[k])
		s.index[k].Store(old.index[k].Load())
	}
	for k := len(old.lines); k < len(s.lines); k++ {
		s.index[k].Store(emptyIndex)
	}
	b.sum.Store(s)
}

// summarize brings the summary of the pages words changed up to date with
// the file (B9). words is sorted by word. wmu held.
func (b *Bits) summarize(words []bitslice.WordChange) {
	s := b.sum.Load()
	v := b.view.Load()
	last := ^uint64(0)
	for _, c := range words {
		pi := c.Word / pageWords64
		if pi == last || pi >= uint64(len(s.lines)) {
			continue
		}
		last = pi
		s.rebuild(v, pi)
	}
}

// onesPage yields the set bits of page pi of the file (at or after from,
// below n) through the summary. v is the view the caller loaded before s
// (B9) and keeps alive.
func (s *bitsSummary) onesPage(v *bitsView, pi, from, n uint64, yield func(uint64) bool) bool {
	if pi >= uint64(len(s.lines)) {
		return true
	}
	base := pi * pageBits
	if ix := s.index[pi].Load(); ix != nil {
		offs := ix.offs
		if from > base {
			k, _ := slices.BinarySearch(offs, uint16(min(from-base, pageBits-1)))
			if from-base >= pageBits {
				k = len(offs)
			}
			offs = offs[k:]
		}
		if n < base+pageBits {
			k, _ := slices.BinarySearch(offs, uint16(n-base))
			offs = offs[:k]
		}
		for _, o := range offs {
			if !yield(base + uint64(o)) {
				return false
			}
		}
		return true
	}
	x := atomic.LoadUint64(&s.lines[pi])
	fw := from >> 6
	for x != 0 {
		l := pi<<6 | uint64(bits.TrailingZeros64(x))
		x &= x - 1
		for w := max(l*lineWords, fw); w < (l+1)*lineWords; w++ {
			if y := v.fileWord(w); y != 0 && !yieldWord(w, y, from, n, yield) {
				return false
			}
		}
	}
	return true
}
