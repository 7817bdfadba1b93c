package buffer

import (
	"context"
	"math/bits"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// applyBatch bounds the word changes applied (and the undo recorded) at once.
const applyBatch = 1 << 16

// Write applies the generation to the file: grow it if a change lies beyond
// its end, apply the changes (oldest table first, page by page, whole
// words), stage wm as the file's watermark and sync (data, then the
// header). If an open snapshot needs the words it overwrites, it records
// them first (see BitsSnapshot). It may be called again after a failure: it
// is idempotent. The order is B7 of bits_protocol.go.
func (g *BitsGen) Write(ctx context.Context, wm uint64) error {
	b := g.b
	b.wmu.Lock()
	defer b.wmu.Unlock()
	var hi uint64
	for _, t := range g.tables {
		hi = max(hi, t.hi.Load())
	}
	if hi > b.fio.Len() {
		if err := b.fio.Grow(hi); err != nil {
			return kverr.Errorf("grow to %d bits: %w", hi, err)
		}
	}
	if fv := b.file.View(); fv != nil && fv.Len() != b.view.Load().nbits {
		b.refreshFile() // B7: the new words before any is applied
		b.growSummary(fv.Len())
	}
	undo := b.needUndo(g.g)
	for _, t := range g.tables {
		nw := (t.hi.Load() + 63) >> 6
		for w := uint64(0); w < nw; {
			if err := ctx.Err(); err != nil {
				return err
			}
			var words []bitslice.WordChange
			words, w = t.appendWords(b.scratch[:0], w, nw, applyBatch)
			b.scratch = words[:0]
			if len(words) == 0 {
				continue
			}
			if undo {
				b.recordUndo(g.g, words) // B10
			}
			if err := b.fio.ApplyWords(words); err != nil {
				return kverr.Errorf("apply %d words: %w", len(words), err)
			}
			b.markLines(words) // B9: before Release
		}
	}
	b.fio.SetWatermark(wm)
	if err := b.fio.Sync(); err != nil {
		return kverr.Errorf("sync: %w", err)
	}
	return nil
}

// A bitsSummary is the region summary of a bitslice file: bit l of lines
// says that line l of the file (bitslice words 8l to 8l+7, one cache line
// of 512 bits) may hold a set bit; a clear bit says it holds none. Summary
// word k covers exactly page k of a table (32768 bits), so Ones reads one
// summary word per page with nothing pending, and one cache line of the
// file per marked line. A line is the unit because it is what a load
// brings in anyway: at 0.1% of bits set at random, a bit per 8192 bits
// would mark nearly every region, while a bit per line skips 60% of the
// file's lines and reads the rest once.
//
// It costs a bit per 512 bits of file (0.2%). It is built by a scan at
// NewBits (which counts the set bits anyway) and kept by the flush (B9).
type bitsSummary struct {
	lines []uint64
}

const lineWords = 8 // bitslice words per summary line

// summaryWords is the length of the summary of a file of nbits bits.
func summaryWords(nbits uint64) uint64 {
	lines := (nbits + lineWords*64 - 1) / (lineWords * 64)
	return (lines + 63) / 64
}

// buildSummary scans the file's words (of a file of nbits bits) and returns
// its summary and its number of set bits.
func buildSummary(words []uint64, nbits uint64) (*bitsSummary, uint64) {
	s := &bitsSummary{lines: make([]uint64, summaryWords(nbits))}
	var n uint64
	v := bitsView{words: words, nbits: nbits}
	for w := range uint64(len(words)) {
		x := v.fileWord(w)
		if x != 0 {
			n += uint64(bits.OnesCount64(x))
			l := w / lineWords
			s.lines[l>>6] |= 1 << (l & 63)
		}
	}
	return s, n
}

// growSummary publishes a summary for a file of nbits bits, filled from the
// current one first (B9). wmu held.
func (b *Bits) growSummary(nbits uint64) {
	old := b.sum.Load()
	n := summaryWords(nbits)
	if n <= uint64(len(old.lines)) {
		return
	}
	s := &bitsSummary{lines: make([]uint64, n)}
	for k := range old.lines {
		s.lines[k] = atomic.LoadUint64(&old.lines[k])
	}
	b.sum.Store(s)
}

// markLines brings the summary bits of the lines words changed up to date
// with the file (B9). wmu held.
func (b *Bits) markLines(words []bitslice.WordChange) {
	s := b.sum.Load()
	v := b.view.Load()
	last := ^uint64(0)
	for _, c := range words {
		l := c.Word / lineWords
		if l == last {
			continue
		}
		last = l
		var or uint64
		for w := l * lineWords; w < (l+1)*lineWords; w++ {
			or |= v.fileWord(w)
		}
		k, bit := l>>6, uint64(1)<<(l&63)
		if k >= uint64(len(s.lines)) {
			continue // past the file: nothing was applied there
		}
		p := &s.lines[k]
		switch x := atomic.LoadUint64(p); {
		case or != 0 && x&bit == 0:
			atomic.OrUint64(p, bit)
		case or == 0 && x&bit != 0:
			atomic.AndUint64(p, ^bit)
		}
	}
}

// onesPage yields the set bits of page pi of the file (at or after from,
// below n) through the summary: only the lines it marks are read. v is
// the view the caller loaded before s (B9) and keeps alive.
func (s *bitsSummary) onesPage(v *bitsView, pi, from, n uint64, yield func(uint64) bool) bool {
	if pi >= uint64(len(s.lines)) {
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
