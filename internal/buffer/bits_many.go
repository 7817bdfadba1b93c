package buffer

import (
	"math/bits"
	"sync/atomic"
)

// SetMany's coalescing path. A slice of many changes is first coalesced
// privately into packed words (mask and value halves, as a table's), plain
// loads and stores into a window of scratch that no other goroutine sees;
// then each touched word is applied to the active table with one atomic OR
// (and, only if a bit set to 0 was pending as 1, one atomic AND), its count
// change computed with popcounts (rules B4, B6). A million sets over a few
// million bits touch each packed word about eight times: the atomic
// operations, the filter marks and the values beneath are paid per word
// instead of per bit.
//
// Windows are 2^17 packed words (4,194,304 bits, 128 pages, 1 MiB of
// scratch: defaultMany), aligned so that each page of the table lies in one window. A
// slice whose indexes span more than one window is first partitioned by
// window, in order (a counting sort, stable, so a later change of a bit
// still wins). A slice within one window (any slice over a bitslice of at
// most 4,194,304 bits) is coalesced by CheckMany in the pass that checks
// it, before the write's admission (checkCoalesce); the admitted write
// then only applies the window.

// manyConfig says when and how SetMany coalesces. Tests use smaller
// windows and thresholds, so that small slices take every path.
type manyConfig struct {
	// min is the fewest changes SetMany coalesces; fewer go bit by bit
	// (the window's walk would cost more than it saves).
	min int
	// shift is log2 of a window's packed words (at least pageShift).
	shift uint
	// spread bounds the windows a coalesced SetMany may span per change
	// (0: no bound): sparser slices go bit by bit (a window with few
	// changes costs little, as only its touched pages are walked, but
	// the counting sort keeps a counter per window).
	spread uint64
}

var defaultMany = manyConfig{min: 2048, shift: 17, spread: 16}

// manyScratch is one SetMany's private coalescing state, pooled per
// overlay.
type manyScratch struct {
	words   []uint64          // packed: mask << 32 | value, per word of the window
	touched []uint8           // pages of the window with a change: 1 (a byte each: a plain store, no read)
	under   [pageWords]uint64 // values beneath, per word of a page
	part    []uint64          // changes partitioned by window: index << 1 | value
	counts  []int
}

// coalescible reports whether SetMany should coalesce n changes whose
// indexes lie in [lo, hi].
func (c *manyConfig) coalescible(n int, lo, hi uint64) bool {
	if n < c.min {
		return false
	}
	nwin := (hi>>5)>>c.shift - (lo>>5)>>c.shift + 1
	return c.spread == 0 || nwin <= max(1, uint64(n)/c.spread)
}

// setCoalesced records idx[j] = vals[j] for every j into the active table
// a (the indexes checked, within [lo, hi]) and returns the change to the
// set-bit count.
func (b *Bits) setCoalesced(a *bitsTable, idx []uint64, vals []bool, lo, hi uint64) int64 {
	shift := b.manyCfg.shift
	s, _ := b.many.Get().(*manyScratch)
	if s == nil {
		s = &manyScratch{words: make([]uint64, 1<<shift), touched: make([]uint8, 1<<(shift-pageShift))}
	}
	defer b.many.Put(s)
	w0 := (lo >> 5) &^ (1<<shift - 1)
	nwin := int(((hi>>5)-w0)>>shift) + 1
	var delta int64
	// A slice within one window was coalesced by CheckMany
	// (checkCoalesce); this one spans several (it also works for one).
	// Partition by window, stable: counts, then offsets, then scatter.
	if cap(s.counts) < nwin+1 {
		s.counts = make([]int, nwin+1)
	}
	counts := s.counts[:nwin+1]
	clear(counts)
	for _, i := range idx {
		counts[((i>>5)-w0)>>shift+1]++
	}
	for k := 1; k <= nwin; k++ {
		counts[k] += counts[k-1]
	}
	if cap(s.part) < len(idx) {
		s.part = make([]uint64, len(idx))
	}
	part := s.part[:len(idx)]
	for j, i := range idx {
		k := ((i >> 5) - w0) >> shift
		part[counts[k]] = i<<1 | b2u(vals[j])
		counts[k]++
	}
	// counts[k] is now the end of window k's changes.
	start := 0
	for k := range nwin {
		end := counts[k]
		if start == end {
			continue
		}
		base := w0 + uint64(k)<<shift
		words, touched := s.words, s.touched
		for _, e := range part[start:end] {
			o := e>>1 - base<<5
			w, sh := o>>5&(1<<shift-1), o&31
			words[w] = (words[w]|1<<(sh+32))&^(1<<sh) | (e&1)<<sh
			touched[w>>pageShift] = 1
		}
		delta += b.applyWindow(a, s, base)
		start = end
	}
	return delta
}

// checkCoalesce is CheckMany's pass for a large slice: it checks idx and
// vals, finds their bounds and coalesces them into a window of scratch in
// one pass over the indexes, betting that they all lie in the window of
// the first (true of any slice over a bitslice of at most 4,194,304 bits,
// and of a host's batch of nearby ids). It reports false, with the scratch
// cleaned and returned, at the first index outside that window (the caller
// then checks as before and SetChecked partitions); an error at the first
// index at or past Max (every earlier index was valid, so it is the error
// CheckMany's ordered check would find).
func (b *Bits) checkCoalesce(idx []uint64, vals []bool) (Many, bool, error) {
	shift := b.manyCfg.shift
	s, _ := b.many.Get().(*manyScratch)
	if s == nil {
		s = &manyScratch{words: make([]uint64, 1<<shift), touched: make([]uint8, 1<<(shift-pageShift))}
	}
	w0 := (idx[0] >> 5) &^ (1<<shift - 1)
	words, touched := s.words, s.touched
	vals = vals[:len(idx)]
	lo, hi := ^uint64(0), uint64(0)
	for j, i := range idx {
		if i >= b.max || (i>>5)-w0 >= 1<<shift {
			b.dropScratch(s)
			if i >= b.max {
				return Many{}, false, b.checkIndex(i)
			}
			return Many{}, false, nil
		}
		lo, hi = min(lo, i), max(hi, i)
		// Plain loads and stores, no branch on the value (random
		// values would mispredict half the time).
		o := i - w0<<5
		w, sh := o>>5, o&31
		words[w] = (words[w]|1<<(sh+32))&^(1<<sh) | b2u(vals[j])<<sh
		touched[w>>pageShift] = 1
	}
	return Many{idx: idx, vals: vals, lo: lo, hi: hi, s: s, w0: w0}, true, nil
}

// dropScratch zeroes the touched pages of s and returns it to the pool.
func (b *Bits) dropScratch(s *manyScratch) {
	for lp, t := range s.touched {
		if t != 0 {
			s.touched[lp] = 0
			clear(s.words[lp*pageWords : (lp+1)*pageWords])
		}
	}
	b.many.Put(s)
}

// b2u is 1 for true, 0 for false.
func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// applyWindow applies the window of s (packed word base is its first) to
// the active table a, page by page, and leaves s zeroed; it returns the
// change to the set-bit count.
func (b *Bits) applyWindow(a *bitsTable, s *manyScratch, base uint64) int64 {
	var delta int64
	for lp, t := range s.touched {
		if t == 0 {
			continue
		}
		s.touched[lp] = 0
		ws := s.words[lp*pageWords : (lp+1)*pageWords]
		delta += b.applyPage(a, s, (base>>pageShift)+uint64(lp), (*[pageWords]uint64)(ws))
	}
	return delta
}

// applyPage applies the coalesced words ws of page pi to the active table
// a and zeroes them; it returns the change to the set-bit count.
func (b *Bits) applyPage(a *bitsTable, s *manyScratch, pi uint64, ws *[pageWords]uint64) int64 {
	// B4a: mark the page's bitslice words in the filter before any table
	// word is written, a filter word (64 bitslice words) at a time.
	var marks [pageWords64 / 64]uint64
	for j := 0; j < pageWords; j += 2 {
		if ws[j]|ws[j+1] != 0 {
			marks[j/128] |= 1 << (j / 2 % 64)
		}
	}
	a.markWords(pi*pageWords64/64, &marks)
	// The values beneath the table (older tables, then the file) of every
	// word with a change, re-validated against recycling (B8); they do
	// not change while writers run (B6).
	under := &s.under
	w0 := pi << pageShift
	for {
		v := b.view.Load()
		for j, x := range ws {
			if x == 0 {
				continue
			}
			w := w0 + uint64(j)
			under[j] = v.beneathWord(w)
		}
		if b.view.Load() == v {
			break
		}
	}
	if a.page(pi) == nil {
		if delta, ok := fillPage(a, pi, ws, under); ok {
			return delta
		}
	}
	c := a.privatePage(pi)
	var delta int64
	for j, x := range ws {
		if x == 0 {
			continue
		}
		ws[j] = 0
		delta += applyPacked(&c[j], x>>32, x&lowHalf, under[j])
	}
	return delta
}

// fillPage installs at pi, where the active table a had no page, a page
// holding the coalesced words ws (B5: filled, then published), zeroes ws
// and returns the change to the set-bit count: nothing of the page was
// pending in a, so each bit was its value beneath. If another writer
// installed a page there meanwhile, it reports false and leaves ws as it
// was (the caller ORs them into that page). A page kept dirty by a
// release is overwritten word by word instead of being zeroed first: one
// atomic store per word where zeroing, then an OR, would take two.
func fillPage(a *bitsTable, pi uint64, ws, under *[pageWords]uint64) (int64, bool) {
	c, dirty := a.takeFill()
	var delta int64
	for j, x := range ws {
		if x != 0 {
			m := x >> 32
			delta += int64(bits.OnesCount64(x&m)) - int64(bits.OnesCount64(under[j]&m))
		}
		// c may be a released table's page that a reader of an older
		// view still loads (B8): atomic stores, where its word differs.
		if (x != 0 || dirty) && atomic.LoadUint64(&c[j]) != x {
			atomic.StoreUint64(&c[j], x)
		}
	}
	if testHook != nil {
		testHook("bits-fill")
	}
	if !a.installFilled(pi, c) {
		return 0, false
	}
	clear(ws[:])
	return delta, true
}

// applyPacked records the bits of m (a low-half mask) of packed word *p as
// the values val (val&^m == 0) and returns the change to the set-bit count
// it made (B4, B6): one atomic OR of their mask bits and of the bits set to
// 1, then, only if a bit set to 0 was pending as 1, one atomic AND of
// those. under is the values beneath the table of the word (older tables,
// then the file), which a bit not pending in the table had.
func applyPacked(p *uint64, m, val, under uint64) int64 {
	old := atomic.OrUint64(p, m<<32|val)
	om := old >> 32
	// What each bit of m was: the table's value if pending (a value bit
	// is never set without its mask bit), else the value beneath.
	was := old&m | under&m&^om
	// Bits set to 1 count +1 unless they were 1; bits set to 0 that were
	// not pending count -1 if they were 1 beneath.
	zero := m &^ val
	delta := int64(bits.OnesCount64(val&^was)) - int64(bits.OnesCount64(was&zero&^om))
	// Bits set to 0 that were pending as 1: cleared by the AND, counted
	// from the word it returns (a concurrent write may have changed them).
	if z1 := old & zero; z1 != 0 {
		if testHook != nil {
			testHook("bits-and")
		}
		delta -= int64(bits.OnesCount64(atomic.AndUint64(p, ^z1) & z1))
	}
	return delta
}
