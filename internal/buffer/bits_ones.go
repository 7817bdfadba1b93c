package buffer

import (
	"math/bits"
	"runtime"
	"slices"
	"sync/atomic"
)

// onesBatch is the most set bits Ones reads at a time.
const onesBatch = 256

// onesCursor reads the set bits of a Bits a batch at a time, for Ones and
// NextOnes: fill puts the next ones at or after pos into a buffer, so that
// the iterator's loop over them (small enough to be inlined into a
// range-over-func loop, with its body) calls no function per bit. The
// sequence stays live: each fill reads the view and the summary as they
// are then.
type onesCursor struct {
	b    *Bits
	stop *atomic.Bool
	pos  uint64 // the next bit to read
	n    uint64 // the length when the iteration began
}

// fill reads the next set bits into dst and returns how many: len(dst)
// unless it reached c.n (0 at the end) or *c.stop was set (checked before
// each page). c.pos is then the bit after the last one read: at or past
// c.n once fill returned fewer than len(dst) without a stop.
func (c *onesCursor) fill(dst []uint64) int {
	k := 0
	for c.pos < c.n && k < len(dst) {
		pi := c.pos / pageBits
		if c.stop != nil && c.stop.Load() {
			return k // and 0 at the next fill
		}
		v := c.b.view.Load()
		pending := !v.direct && v.pendingPage(pi)
		// B9: the view first, then the summary; B8: the view unchanged
		// after both, so that no table was reset under pendingPage and the
		// view's file words are the current ones. (A direct view needs no
		// check: the file and its summary hold every bit written before
		// it; a later write is concurrent with the iteration.)
		s := c.b.sum.Load()
		ix := s.index.Load()
		if !v.direct && c.b.view.Load() != v {
			continue // again, on the new view
		}
		if !pending {
			if offs, ok := ix.offsets(pi); ok {
				k = c.fillIndexed(dst, pi, offs, k)
				if v.direct {
					k = c.fillIndexedRun(dst, ix, k)
				}
				continue
			}
		}
		k = c.fillWords(dst, v, s, pi, pending, k)
		runtime.KeepAlive(v)
	}
	return k
}

// fillIndexed copies page pi's offsets (from its summary index) at or
// after c.pos and below c.n into dst from k, as many as fit, and moves
// c.pos past them.
func (c *onesCursor) fillIndexed(dst []uint64, pi uint64, offs []uint16, k int) int {
	base := pi * pageBits
	if c.pos > base {
		j, _ := slices.BinarySearch(offs, uint16(c.pos-base))
		offs = offs[j:]
	}
	end := base + pageBits
	if c.n < end {
		j, _ := slices.BinarySearch(offs, uint16(c.n-base))
		offs = offs[:j]
		end = c.n
	}
	if room := len(dst) - k; len(offs) > room {
		offs = offs[:room]
		end = base + uint64(offs[room-1]) + 1
	}
	out := dst[k : k+len(offs)]
	for j, o := range offs {
		out[j] = base + uint64(o)
	}
	c.pos = end
	return k + len(offs)
}

// fillIndexedRun is fillIndexed over the pages from c.pos's on, while they
// are indexed in ix, without loading the view and the summary again for
// each: the caller loaded ix after a direct view (B9), which holds every
// bit written before it, and whose index holds every indexed page's bits
// (a later write is concurrent with the read). It checks *c.stop before
// each page, as fill does.
func (c *onesCursor) fillIndexedRun(dst []uint64, ix *pageIndex, k int) int {
	for c.pos < c.n && k < len(dst) {
		pi := c.pos / pageBits
		offs, ok := ix.offsets(pi)
		if !ok || c.stop != nil && c.stop.Load() {
			return k
		}
		k = c.fillIndexed(dst, pi, offs, k)
	}
	return k
}

// fillWords reads the set bits of page pi at or after c.pos and below c.n
// into dst from k, as many as fit: word by word with the pending changes
// applied if pending, else the words of the lines the summary s marks. It
// moves c.pos past what it read (inside a word if dst filled there).
func (c *onesCursor) fillWords(dst []uint64, v *bitsView, s *bitsSummary, pi uint64, pending bool, k int) int {
	var lines uint64 = ^uint64(0)
	if !pending {
		lines = 0
		if pi < uint64(len(s.lines)) {
			lines = atomic.LoadUint64(&s.lines[pi])
		}
	}
	end := min((pi+1)*pageBits, c.n)
	for w := c.pos >> 6; w<<6 < end; w++ {
		if lines>>(w%pageWords64/lineWords)&1 == 0 {
			c.pos = (w + 1) << 6
			continue
		}
		if k == len(dst) {
			return k
		}
		var x uint64
		if pending {
			x = c.b.word64(w)
		} else {
			x = v.fileWord(w)
		}
		x &^= uint64(1)<<(c.pos&63) - 1
		if r := end - w<<6; r < 64 {
			x &= uint64(1)<<r - 1
		}
		if room := len(dst) - k; room < 64 && bits.OnesCount64(x) > room {
			// dst fills inside this word: stop after its room-th bit.
			for ; k < len(dst); x &= x - 1 {
				i := w<<6 | uint64(bits.TrailingZeros64(x))
				dst[k] = i
				k++
				c.pos = i + 1
			}
			return k
		}
		for ; x != 0; x &= x - 1 {
			dst[k] = w<<6 | uint64(bits.TrailingZeros64(x))
			k++
		}
		c.pos = (w + 1) << 6
	}
	c.pos = end // the loop ran to end; a skipped or whole last word may have overshot it
	return k
}
