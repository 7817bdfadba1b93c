package buffer

import (
	"iter"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// bitsFile is the write side of a *bitslice.File the flush uses. It is an
// interface so that tests can inject I/O failures around a real file; reads
// go straight to the file's mapped words.
type bitsFile interface {
	Len() uint64
	Grow(nbits uint64) error
	ApplyWords(changes []bitslice.WordChange) error
	WriteWords(first uint64, words []uint64) error
	StartWriteback(first, n uint64) error
	SetWatermark(op uint64)
	Sync() error
	SyncLagged() error
}

// Bits is the pending-changes overlay of one bitslice file: Set and SetRange
// land in memory and are visible to reads at once; the flush protocol
// (Freeze, BitsGen.Write, Release) moves them to the file.
//
// Writes must not run concurrently with Freeze, Snapshot or Settle (the
// engine admits writes under the shared side of its write barrier and calls
// those with it held exclusively). Everything else is safe for concurrent
// use. The publication order is in bits_protocol.go (rules B1-B13).
//
// # Read path
//
// With nothing pending anywhere a read loads the view, finds it direct and
// loads the file's word from the mapping the view holds: one check and one
// load more than the file alone (B1-B3). Over a fast view (open, no
// sealed table, the active table dense: B13) it loads the table's word and
// the file's from the view's first line, re-loads the view and combines.
// Otherwise it checks the word of the bit in the active table's filter
// (and, with sealed tables, in their union), bounded by the view's alim
// or flim (B4a, B14): with neither marked (few bits pending, the common
// case) it reads the file's word and re-loads the view (B8). Else it folds the packed
// word of every table of the view and the file's word without branching on
// which holds the bit (the loads overlap), and re-loads the view to detect
// a table recycled under it (B8).
type Bits struct {
	// Read-mostly: the view, loaded twice by every lookup, on a line no
	// write stores to (the set-bit count and the end, stored by writes,
	// are below the padding).
	view atomic.Pointer[bitsView]
	file *bitslice.File
	fio  bitsFile
	acct *Account
	max  uint64
	keep int64
	sum  atomic.Pointer[bitsSummary] // written by the flush only (B9)
	_    [64]byte                    // keep the read-mostly fields above off the writers' lines

	hi   atomic.Uint64 // highest index ever set + 1
	ones atomic.Int64  // set bits, pending changes included

	// unionBuf is a zeroed slice, never published, whose pages were
	// touched off the flush's line (Recycle): the next union of sealed
	// filters (publish) fills it instead of fresh memory, whose first
	// stores fault its pages in (issue 26: 0.05-0.1 ms of a 1M-bit
	// freeze). Under vmu.
	unionBuf []uint64

	vmu     sync.Mutex // view changes, pinning, snapshots and undo layers
	closed  bool       // MarkClosed was called: every view published is closed (vmu)
	spare   *bitsTable // a reset table for the next active one
	recycle *bitsTable // a released table Recycle resets into spare (vmu)
	lastGen uint64     // highest generation frozen
	snaps   map[*BitsSnapshot]uint64
	undo    atomic.Pointer[[]*undoLayer] // oldest first; published under vmu (B10)

	many    sync.Pool // *manyScratch of SetMany's coalescing path
	manyCfg manyConfig

	wmu      sync.Mutex // serialises generation writes
	scratch  []bitslice.WordChange
	sumPages []changedPage // summarize's pages, reused; under wmu
	// summarizeWords' scratch, under wmu: the pages it wrote.
	sumTouched []uint64
	// applyPages' scratch, under wmu: the new words of a run of pages and
	// what they hold.
	runWords []uint64
	runPages []runPage
}

// NewBits returns an overlay over f, which must not be written through other
// paths while the overlay has pending changes. acct, if not nil, receives the
// overlay's pending bytes. The overlay does not own f.
func NewBits(f *bitslice.File, acct *Account, opts *Options) (*Bits, error) {
	r, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	return newBits(f, f, acct, r), nil
}

// InitBits makes *b, which must be the zero Bits and never moved after, an
// overlay over f, as NewBits does: for an owner that holds the overlay by
// value, so that its hot fields are one address computation away from
// the owner's, not one load.
func InitBits(b *Bits, f *bitslice.File, acct *Account, opts *Options) error {
	r, err := opts.resolve()
	if err != nil {
		return err
	}
	b.init(f, f, acct, r)
	return nil
}

func newBits(f *bitslice.File, fio bitsFile, acct *Account, r resolved) *Bits {
	b := new(Bits)
	b.init(f, fio, acct, r)
	return b
}

// init makes the zero *b an overlay over f (written through fio).
func (b *Bits) init(f *bitslice.File, fio bitsFile, acct *Account, r resolved) {
	b.file, b.fio, b.acct, b.max, b.keep = f, fio, acct, r.maxBits, r.poolBytes
	b.snaps, b.manyCfg = map[*BitsSnapshot]uint64{}, defaultMany
	v := &bitsView{direct: true}
	v.active = b.newTable()
	v.setFile(f.View())
	b.publish(v)
	sum, ones := buildSummary(v.words, v.nbits)
	b.sum.Store(sum)
	b.ones.Store(int64(ones))
}

// Get returns bit i: the newest pending value if there is one, else the
// file's (false at or beyond the length). After MarkClosed it returns
// false.
func (b *Bits) Get(i uint64) bool {
	v, _ := b.Lookup(i, (*Bits).LookupSlowErr)
	return v
}

// LookupClosed is LookupSlow's result when the overlay was closed.
const LookupClosed = 2

// Lookup returns bit i as Get does, and kverr.ErrClosed (with false) if
// the overlay was closed (MarkClosed) before the read loaded the view. A
// read of a direct view loaded before MarkClosed reads the file's words
// through the mapping that view holds, which stays the file's while the
// view is reachable, after the file's Close too (B12). slow must be
// (*Bits).LookupSlowErr.
//
// Lookup holds the direct path alone (B1-B3, B12), small enough for Go's
// inliner to put it in kvbuf.Bits.Get and so in the host's loop, as the
// file's own Get is (issue 26: a call per lookup put W1's lookups with
// nothing pending at 0.62x the raw file's speed). It calls slow for the
// rest. slow is a parameter, not a named call, because the inliner charges
// 57 for a call of a function and 17 for a call of a parameter, against a
// budget of 80 that kvbuf.Bits.Get must fit in with Lookup inlined (79
// with Go 1.26, TestBitsGetInlines); inlined, the call is of a known
// function, which the compiler inlines (LookupSlowErr) and calls directly
// (LookupSlow), on the slow path only. Lookup returns Get's two results
// itself, so that the direct path's are the constant nil and the bit: the
// host's test of the error and its use of the bit follow the word's load
// with nothing in between (with one word returned, the error was picked
// from a table by it, two loads and four instructions more on every
// lookup, and the host's loop values were spilled on the direct path).
// The view is loaded through atomic.LoadPointer on b.view's word, not
// b.view.Load: the generic Load costs the inliner 5 more a load, and
// atomic.Pointer's only field that is not zero-size is that word
// (TestBitsViewWord checks it). The bit is read from its byte of the
// mapping (the view's base: the file is little-endian, bitslice's only
// layout), by a plain load: a byte has no atomic load in sync/atomic, the
// word's costs the inliner the 3 that Get lacks, the file's words are
// stored by pwrite or by atomic operations only, and a byte is loaded
// whole (B7: a word torn by a pwrite differs only in bits pending in a
// table, which a direct view has not).
func (b *Bits) Lookup(i uint64, slow func(*Bits, *bitsView, uint64) (bool, error)) (bool, error) {
	v := (*bitsView)(atomic.LoadPointer((*unsafe.Pointer)(unsafe.Pointer(&b.view))))
	if i < v.limit {
		if invariants.Enabled && testHook != nil {
			// In the invariants build only, where inlining does not
			// matter: a constant false condition costs the inliner
			// nothing, so the normal build's Lookup keeps its budget.
			testHook("bits-lookup-direct")
		}
		// No second load of the view (B12): the mapping v holds is the
		// file's while v is reachable, after MarkClosed and the file's
		// Close too, so the byte is the file's and the read is one before
		// MarkClosed. The byte's address points into the mapping, which
		// the garbage collector does not trace: without the KeepAlive, v
		// (and with it perhaps the mapping's last View) is dead once the
		// address is computed, and a collection and the mapping's cleanup
		// in between could unmap the byte before its load. No test stops
		// a goroutine between those two instructions (an address held in
		// a variable for a hook there costs Get its inlining): rule B12
		// and TestBitsGetInlines keep it.
		x := *(*uint8)(unsafe.Add(v.base, i>>3))
		runtime.KeepAlive(v)
		return x>>(i&7)&1 != 0, nil
	}
	return slow(b, v, i)
}

// LookupSlowErr is LookupSlow in Lookup's two results, for Lookup's slow
// argument only: the bit, or kverr.ErrClosed if the overlay was closed.
func (b *Bits) LookupSlowErr(v *bitsView, i uint64) (bool, error) {
	x := b.LookupSlow(v, i)
	if x == LookupClosed {
		return false, kverr.ErrClosed
	}
	return x == 1, nil
}

// LookupSlow is Lookup past its direct path, for LookupSlowErr only: bit
// i as one word (0 or 1, or LookupClosed if the overlay was closed), over
// the view v Lookup loaded, which was not direct for i.
// Given v, a lookup with bits pending loads the view once, as before
// Lookup was split off.
func (b *Bits) LookupSlow(v *bitsView, i uint64) uint64 {
	// The path of W7's lookups under writes (a few hundred bits pending,
	// most words unmarked, no sealed table most of the time) comes first,
	// gated by one test: below alim, the active filter's word decides
	// (B4a: no table can hold the bit if its word is unmarked), then the
	// file's word and the view again, with no other field or global
	// loaded (both words read through unsafe: alim bounds both). Below
	// flim (a view with sealed tables), one word of each filter decides.
	// publish sets both to 0 in a view that must take neither: a closed
	// one (B12), a fast one (B13) and, in tests, one published while the
	// "bits-filter" hook is on (filterHook), so that those take the
	// branches past them, where each is told apart. A fast view (W1's
	// million pending bits) is tested right after alim, before flim: one
	// compare more than when it came first (bitsw7_24, W1: the second
	// cost its lookups 6%).
	l := i >> filterShift
	k := l >> 6
	if i < v.alim {
		if atomic.LoadUint64((*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(v.afilt)), k*8)))>>(l&63)&1 == 0 {
			// Unmarked: the file's word and the view again, as below,
			// written out here so that this path falls through, with no
			// jump taken.
			if invariants.Enabled && testHook != nil {
				// In the invariants build only: the normal build's
				// path has no hook (a constant false costs nothing).
				testHook("bits-lookup-alim")
			}
			x := fileWordAt(v.words, i)
			if b.view.Load() == v {
				return x >> (i & 63) & 1
			}
			return b.getPending(i)
		}
		goto marked
	} else if v.fast {
		// A fast view (B13: open, no sealed table, the active table
		// dense, never direct: limit 0) goes straight to the active
		// table's probe below, with nothing else tested.
		goto active
	} else if i < v.flim {
		f := atomic.LoadUint64((*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(v.afilt)), k*8))) |
			*(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(v.sfilt)), k*8))
		if f>>(l&63)&1 == 0 {
			// Unmarked in both: as below alim.
			if invariants.Enabled && testHook != nil {
				// In the invariants build only, as below alim.
				testHook("bits-lookup-flim")
			}
			x := fileWordAt(v.words, i)
			if b.view.Load() == v {
				return x >> (i & 63) & 1
			}
			return b.getPending(i)
		}
		goto marked
	} else {
		if testHook != nil {
			testHook("bits-filter")
		}
		// Past alim and flim (the file's end, covers, unfiltered
		// tables), a closed view, or a hooked one: maybe decides with
		// its bounds checks.
		if v.closed {
			return LookupClosed
		}
		if v.maybe(l) {
			goto marked
		}
	}
	// Unmarked. The filters are the tables' and a released table's is
	// reset (zeroed) while the view may still be read: re-validate (B8)
	// as a fold does, or the view's file words may predate the growth
	// that holds the bit. A direct view that reached here (its direct
	// read raced a view change) is re-validated the same way, and takes
	// getPending if its word is marked (B2: a writer's view came first).
	// A dense table has every word marked (B4a), so its flag is not
	// read: a view whose active table is dense and that has no sealed
	// table is fast (B13) but in the moment between the flag and
	// densed's publish, when the filter check finds the word marked.
	{
		var x uint64
		if i < v.nbits {
			x = fileWordAt(v.words, i)
		}
		if b.view.Load() == v {
			return x >> (i & 63) & 1
		}
		return b.getPending(i)
	}
marked:
	if len(v.sealed) != 0 || i < v.limit {
		return b.getPending(i)
	}
active:
	// The active table alone, on the view already loaded: the file's word
	// first, then the table's, two independent loads whose cache misses
	// overlap, both between the view's two loads (B8a, B12).
	var fw uint64
	if i < v.nbits {
		fw = fileWordAt(v.words, i)
	}
	p := activeWord(v.adir, i)
	if b.view.Load() == v {
		return pendingBit(p, fw, i)
	}
	return b.getPending(i)
}

func (b *Bits) getPending(i uint64) uint64 {
	w, sh := i>>5, i&31
	for {
		v := b.view.Load()
		if v.closed {
			return LookupClosed
		}
		if !v.maybe(i >> filterShift) {
			// No table can hold the bit (B4a): the file alone,
			// re-validated as below (see Get).
			fw := v.fileWord(i >> 6)
			if b.view.Load() == v {
				return fw >> (i & 63) & 1
			}
			continue
		}
		m, val := v.fold(w)
		fw := v.fileWord(i >> 6)
		// Unchanged view: no table we probed was recycled under us (B8).
		if b.view.Load() == v {
			pick := -(m >> sh & 1) // all ones if the bit is pending
			return (val>>sh&pick | fw>>(i&63)&^pick) & 1
		}
	}
}

// GetMany sets out[j] = Get(idx[j]) for every j: the same values as that
// loop, read at some instant during the call, with the cache misses of
// independent indexes overlapped. len(out) must be at least len(idx).
func (b *Bits) GetMany(idx []uint64, out []bool) {
	out = out[:len(idx)]
	v := b.view.Load()
	if v.direct {
		words, n := v.words, v.nbits
		for j, i := range idx {
			var x uint64
			if i < n {
				x = fileWordAt(words, i) // i < n: no bounds check
			}
			out[j] = x>>(i&63)&1 != 0
		}
		runtime.KeepAlive(v)
		return
	}
	for {
		dense := v.active.dense.Load()
		if len(v.sealed) == 0 {
			b.getManyActive(v, dense, idx, out)
		} else {
			b.getManyFold(v, dense, idx, out)
		}
		if nv := b.view.Load(); nv != v {
			v = nv // B8: retry on the new view
			continue
		}
		return
	}
}

// getManyActive is GetMany's loop over a view without sealed tables: per
// index, the file's word and the active table's word, each load in line
// (no call), so that the misses of many indexes are in flight at once
// (B8a). The caller re-validates v.
func (b *Bits) getManyActive(v *bitsView, dense bool, idx []uint64, out []bool) {
	out = out[:len(idx)]
	words, n, adir := v.words, v.nbits, v.adir
	for j, i := range idx {
		var fw, p uint64
		if i < n {
			fw = fileWordAt(words, i)
		}
		if dense || v.maybe(i>>filterShift) {
			p = activeWord(adir, i)
		}
		out[j] = pendingOver(p, fw, i)
	}
	runtime.KeepAlive(v) // the mapping must outlive the loads
}

// fileWordAt loads the file word holding bit i without a bounds check: the
// caller knows i < nbits <= 64*len(words), and keeps the view (and so the
// mapping) alive.
func fileWordAt(words []uint64, i uint64) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(words)), i>>6*8)))
}

// activeWord loads the packed word holding bit i from the active table's
// directory adir (B5, B8a): 0 (nothing pending) where the page is absent.
func activeWord(adir []atomic.Pointer[bitsPage], i uint64) uint64 {
	if pi := i >> (5 + pageShift); pi < uint64(len(adir)) {
		if c := adir[pi].Load(); c != nil {
			return atomic.LoadUint64(&c[i>>5&pageMask])
		}
	}
	return 0
}

// pendingOver returns bit i: packed word p's value if the bit is pending
// there, else file word fw's.
func pendingOver(p, fw, i uint64) bool { return pendingBit(p, fw, i) != 0 }

// pendingBit is pendingOver's bit as 0 or 1.
func pendingBit(p, fw, i uint64) uint64 {
	// Bit 0 of q is the bit's pending value, bit 0 of m its mask bit and
	// bit 0 of f the file's (the higher bits are other bits', cut by the
	// final & 1): f, with the bits where q differs replaced where m is
	// set; no all-ones mask to build (bitsget21).
	q := p >> (i & 31)
	m := q >> 32
	f := fw >> (i & 63)
	return (f ^ (q^f)&m) & 1
}

// getManyFold is GetMany's loop over a view with sealed tables: every
// table folded over the file's word. The caller re-validates v.
func (b *Bits) getManyFold(v *bitsView, dense bool, idx []uint64, out []bool) {
	out = out[:len(idx)]
	for j, i := range idx {
		w, sh := i>>5, i&31
		var m, val uint64
		if dense || v.maybe(i>>filterShift) {
			m, val = v.fold(w)
		}
		fw := v.fileWord(i >> 6)
		pick := -(m >> sh & 1)
		out[j] = (val>>sh&pick|fw>>(i&63)&^pick)&1 != 0
	}
}

// Len returns the overlay's length in bits: the larger of the file's length
// and the highest index ever set plus one.
func (b *Bits) Len() uint64 { return max(b.file.Len(), b.hi.Load()) }

// Count returns the number of set bits, pending changes included. It is
// maintained by every write (not a scan). It is exact for writes that have
// returned; a write in progress may or may not be counted yet.
func (b *Bits) Count() uint64 { return uint64(max(b.ones.Load(), 0)) }

func (b *Bits) checkIndex(i uint64) error {
	if i >= b.max {
		return kverr.Errorf("bit %d (max %d): %w", i, b.max, kverr.ErrOutOfRange)
	}
	return nil
}

// CheckSet reports the error Set would return for index i.
func (b *Bits) CheckSet(i uint64) error { return b.checkIndex(i) }

// InRange reports whether Set accepts index i (below Max): CheckSet's
// answer without its error, small enough to inline.
func (b *Bits) InRange(i uint64) bool { return i < b.max }

// SetInRange records bit i = v as pending, as Set, for an index InRange
// (or CheckSet) accepted: no second check.
func (b *Bits) SetInRange(i uint64, v bool) { b.set(i, v) }

// Many is a SetMany's changes as CheckMany checked them, with their
// lowest and highest index: SetChecked records them without a second pass
// over the indexes (a million indexes take about a millisecond to read).
// If CheckMany coalesced them (s not nil: a slice large enough whose
// indexes all lie in one window), s holds the coalesced window, private
// until SetChecked applies it; a Many never recorded leaves s to the
// garbage collector.
type Many struct {
	idx    []uint64
	vals   []bool
	lo, hi uint64
	s      *manyScratch
	w0     uint64 // the window's first packed word, if s is not nil
}

// CheckMany reports the error SetMany would return for idx and vals; with
// none, it returns the changes for SetChecked (which records them as
// SetMany would: idx and vals must not change in between, as Max never
// does). A large slice is coalesced in the same pass (see Many), before
// the caller's admission: nothing shared is read or written.
func (b *Bits) CheckMany(idx []uint64, vals []bool) (Many, error) {
	if len(vals) != len(idx) {
		return Many{}, kverr.Errorf("SetMany: %d indexes and %d values: %w", len(idx), len(vals), kverr.ErrBadRange)
	}
	if len(idx) >= b.manyCfg.min {
		if m, ok, err := b.checkCoalesce(idx, vals); ok || err != nil {
			return m, err
		}
	}
	lo, hi := ^uint64(0), uint64(0)
	for _, i := range idx {
		lo, hi = min(lo, i), max(hi, i)
	}
	if len(idx) > 0 && hi >= b.max {
		for _, i := range idx {
			if err := b.checkIndex(i); err != nil {
				return Many{}, err
			}
		}
	}
	return Many{idx: idx, vals: vals, lo: lo, hi: hi}, nil
}

// CheckRange reports the error SetRange would return for [lo, hi).
func (b *Bits) CheckRange(lo, hi uint64) error {
	if lo > hi {
		return kverr.Errorf("bits [%d, %d): %w", lo, hi, kverr.ErrBadRange)
	}
	if hi > b.max {
		return kverr.Errorf("bits [%d, %d) (max %d): %w", lo, hi, b.max, kverr.ErrOutOfRange)
	}
	return nil
}

// beneath returns the mask-free values of packed word w beneath the active
// table (sealed tables, then the file), re-validated against recycling.
func (b *Bits) beneath(w uint64) uint64 {
	for {
		v := b.view.Load()
		x := v.beneathWord(w)
		if b.view.Load() == v {
			return x
		}
	}
}

// onesBeneath counts the set bits of page pi beneath the active table
// (sealed tables, then the file), re-validated against recycling.
func (b *Bits) onesBeneath(pi uint64) uint64 {
	for {
		v := b.view.Load()
		var n uint64
		for w := pi * pageWords64; w < (pi+1)*pageWords64; w++ {
			m, val := foldTables64(v.sealed, w, 0, 0)
			n += uint64(bits.OnesCount64(val | v.fileWord(w)&^m))
		}
		if b.view.Load() == v {
			return n
		}
	}
}

// Set records bit i = v as pending. Indexes at or beyond the file's length
// grow it at the next flush; an index at or beyond Max is an error wrapping
// kverr.ErrOutOfRange.
func (b *Bits) Set(i uint64, v bool) error {
	if err := b.checkIndex(i); err != nil {
		return err
	}
	b.set(i, v)
	return nil
}

// SetMany records bit idx[j] = vals[j] as pending for every j, in order (a
// later change of the same bit wins). It checks every index before it
// records any: an index at or beyond Max, or lengths that differ, fail it
// with nothing recorded. A concurrent reader may see part of the changes.
func (b *Bits) SetMany(idx []uint64, vals []bool) error {
	m, err := b.CheckMany(idx, vals)
	if err != nil {
		return err
	}
	b.SetChecked(m)
	return nil
}

// SetChecked records the changes CheckMany returned, as SetMany.
func (b *Bits) SetChecked(m Many) {
	idx, vals, lo, hi := m.idx, m.vals, m.lo, m.hi
	if len(idx) == 0 {
		return
	}
	a := b.writable()
	if m.s != nil {
		delta := b.applyWindow(a, m.s, m.w0)
		b.many.Put(m.s)
		b.finishMany(a, delta, hi)
		return
	}
	if b.manyCfg.coalescible(len(idx), lo, hi) {
		b.finishMany(a, b.setCoalesced(a, idx, vals, lo, hi), hi)
		return
	}
	// In chunks: first every slot, value beneath and table word of the
	// chunk (independent loads, whose cache misses overlap), then the
	// atomic ORs (each a full fence, so a miss taken there would not
	// overlap with the next); the count and the ends once at the end.
	var (
		slots [setChunk]*uint64
		under [setChunk]uint64
		delta int64
		top   uint64
	)
	for lo := 0; lo < len(idx); lo += setChunk {
		chunk := idx[lo:min(lo+setChunk, len(idx))]
		for k, i := range chunk {
			a.mark(i, i+1) // B4a
			slots[k] = a.slot(i >> 5)
			top = max(top, i)
		}
		b.beneathMany(chunk, slots[:len(chunk)], under[:len(chunk)])
		for k, i := range chunk {
			u := under[k]>>(i&31)&1 != 0
			delta += setPacked(slots[k], i&31, vals[lo+k], func() bool { return u })
		}
	}
	b.finishMany(a, delta, top)
}

// finishMany ends a SetMany whose highest index is top: the count change,
// then the table's and the overlay's ends.
func (b *Bits) finishMany(a *bitsTable, delta int64, top uint64) {
	if delta != 0 {
		b.ones.Add(delta) // B6: before the write returns
	}
	if e := (top>>5 + 1) << 5; e > a.hi.Load() {
		atomicMax(&a.hi, e)
	}
	if top >= b.hi.Load() {
		atomicMax(&b.hi, top+1)
	}
}

// setChunk is how many of SetMany's changes are prepared at once.
const setChunk = 32

// beneathMany sets under[k] to the mask-free values of the packed word of
// bit idx[k] beneath the active table (as beneath), re-validated against
// recycling, and loads each slot's table word on the way (so that the
// atomic operations on it find it in cache).
func (b *Bits) beneathMany(idx []uint64, slots []*uint64, under []uint64) {
	var touch uint64
	for {
		v := b.view.Load()
		for k, i := range idx {
			w := i >> 5
			under[k] = v.beneathWord(w)
			touch += atomic.LoadUint64(slots[k])
		}
		if b.view.Load() == v {
			benchSink.Store(touch)
			return
		}
	}
}

// benchSink keeps beneathMany's loads of table words from being dropped.
var benchSink atomic.Uint64

// set records bit i = v in the active table of the view and keeps the
// count exact (B4, B6). The common case runs in line, without a call: the
// view's active table, its filter word already marked (B4a), its page
// private, and no sealed table beneath (the value beneath is the file's
// word). The count's change is computed from the OR's old word without a
// branch on the values (W6's random values made those branches a
// misprediction in two of three sets).
func (b *Bits) set(i uint64, v bool) {
	vw := b.view.Load()
	a := vw.active
	if vw.direct {
		a = b.writable() // B2
	}
	w, sh := i>>5, i&31
	// B4a: a marked filter bit stays marked until reset; mark handles the
	// rest (an unmarked bit, a bit past the filter's cover).
	if k := i >> 12; k >= uint64(len(a.lines)) || atomic.LoadUint64(&a.lines[k])>>(i>>6&63)&1 == 0 {
		a.mark(i, i+1)
	}
	var p *uint64
	if d, pi := a.dir.Load(), w>>pageShift; pi < uint64(len(d.pages)) {
		if c := d.pages[pi].Load(); c != nil && !isShared(c) {
			p = &c[w&pageMask]
		}
	}
	if p == nil {
		p = a.slotSlow(w)
	}
	// The table word and the value beneath are loaded before the atomic
	// OR: the loads are independent, so their cache misses overlap, and
	// the OR (a full fence) finds its line in cache. The value beneath is
	// used only if the view did not change meanwhile (re-validated as
	// beneath does, B8).
	vw = b.view.Load()
	var under uint64
	if len(vw.sealed) == 0 {
		under = vw.fileWord(w>>1) >> (32 * (w & 1))
	} else {
		under = vw.beneathWord(w)
	}
	bit, val := uint64(1)<<sh, b2u(v)
	// A bit pending with this value already needs no store and no count
	// (B4: the word a reader loads already says it); the ends below are
	// raised all the same (a concurrent write may not have raised them yet).
	if cur := atomic.LoadUint64(p); cur>>(32+sh)&1 == 0 || cur>>sh&1 != val {
		// B4: one OR sets the mask bit, and the value bit if v (a bit
		// not pending has a zero value bit, so for v = 0 the OR alone
		// makes it 0).
		old := atomic.OrUint64(p, bit<<32|val<<sh)
		om, ov := old>>(32+sh)&1, old>>sh&1
		var d int64
		if om&ov&^val != 0 {
			// Pending as 1, now 0: the AND clears the value bit and
			// counts the clear it made (B6).
			d = clearPending(p, bit)
		} else {
			if b.view.Load() != vw {
				under = b.beneath(w)
			}
			// The bit's value before the OR: pending, or beneath.
			before := ov&om | under>>sh&^om&1
			d = int64(val) - int64(before)
		}
		if d != 0 {
			b.ones.Add(d) // B6
		}
	}
	// The table's end is rounded up to its packed word: the flush grows
	// the file to whole packed words.
	if e := (w + 1) << 5; e > a.hi.Load() {
		atomicMax(&a.hi, e)
	}
	if i >= b.hi.Load() {
		atomicMax(&b.hi, i+1)
	}
}

// clearPending clears value bit bit of packed word *p, pending as 1 when
// its caller's OR set its mask bit, and returns the count's change: -1 if
// the AND cleared it, 0 if a concurrent write had (B4, B6).
func clearPending(p *uint64, bit uint64) int64 {
	if testHook != nil {
		testHook("bits-and")
	}
	if atomic.AndUint64(p, ^bit)&bit != 0 {
		return -1
	}
	return 0
}

// SetRange records every bit i with lo <= i < hi as v, pending, and keeps
// Count exact. Pages of 32768 bits that the range covers whole and that
// hold no pending bit yet cost one directory pointer each.
func (b *Bits) SetRange(lo, hi uint64, v bool) error {
	if err := b.CheckRange(lo, hi); err != nil {
		return err
	}
	if lo == hi {
		return nil
	}
	a := b.writable()
	for i := lo; i < hi; {
		if i%pageBits == 0 && hi-i >= pageBits {
			pi := i / pageBits
			// Count first, install after: the page's bits beneath cannot
			// change while writers run (B6), and a failed install falls
			// back to word by word below.
			before := b.onesBeneath(pi)
			a.mark(i, i+pageBits) // B4a
			if a.install(pi, fullPage(v)) {
				delta := -int64(before)
				if v {
					delta += pageBits
				}
				b.ones.Add(delta)
				i += pageBits
				continue
			}
		}
		w := i >> 5
		end := min(hi, (w+1)<<5)
		m := (uint64(1)<<(end-i) - 1) << (i & 31)
		if end-i == 32 {
			m = lowHalf
		}
		b.update(a, w, m, v)
		i = end
	}
	atomicMax(&a.hi, hi)
	atomicMax(&b.hi, hi)
	return nil
}

// update sets the bits of m (a low-half mask) of packed word w in the
// active table a to v with one compare-and-swap, and adjusts the set-bit
// count by the exact change (B6).
func (b *Bits) update(a *bitsTable, w, m uint64, v bool) {
	a.mark(w<<5, w<<5+32) // B4a
	p := a.slot(w)
	for {
		old := atomic.LoadUint64(p)
		om := old >> 32
		prev := old & om & m
		if rest := m &^ om; rest != 0 {
			prev |= b.beneath(w) & rest
		}
		nw := old | m<<32
		if v {
			nw |= m
		} else {
			nw &^= m
		}
		if atomic.CompareAndSwapUint64(p, old, nw) {
			delta := -int64(bits.OnesCount64(prev))
			if v {
				delta += int64(bits.OnesCount64(m))
			}
			if delta != 0 {
				b.ones.Add(delta)
			}
			atomicMax(&a.hi, (w+1)<<5)
			return
		}
	}
}

// OnesUntil returns the indexes of set bits at or after from, in increasing
// order, pending changes included. The sequence is read live, a batch of
// up to 256 bits at a time: a write concurrent with the iteration may or
// may not be seen. Pages with nothing pending are read through the file's
// region summary (B9): a sparse page's set bits are listed there, so it
// costs no file word; a denser one costs the lines the summary marks.
//
// It ends early, without error, once *stop is set (if stop is not nil): it
// checks it before each page (32768 bits), so that a caller that must end
// iterations at Close pays a load per page instead of one per bit.
func (b *Bits) OnesUntil(from uint64, stop *atomic.Bool) iter.Seq[uint64] {
	// Small: inlined with the loop that ranges over it, so that each bit
	// costs the loop body, not a call (onesCursor).
	return func(yield func(uint64) bool) {
		c := onesCursor{b: b, stop: stop, pos: from, n: b.Len()}
		var buf [onesBatch]uint64
		// A batch spans pages: *stop is checked again before the first
		// bit of each (check, a local so that it stays in a register).
		check := ^uint64(0)
		if stop != nil {
			check = 0
		}
		for k := c.fill(buf[:]); k > 0; k = c.fill(buf[:]) {
			for _, i := range buf[:k] {
				if i >= check {
					if stop.Load() {
						return
					}
					check = (i/pageBits + 1) * pageBits
				}
				if !yield(i) {
					return
				}
			}
		}
	}
}

// NextOnes reads the indexes of the set bits at or after from into dst, in
// increasing order, pending changes included, and returns how many (n) and
// where the next call continues (next: above the last one read, with no
// set bit between them as read).
// It reads as Ones does (the same cursor and page reads, B8/B9), live: a
// write concurrent with the call may or may not be seen. n is len(dst)
// unless the bitslice's length when the call began was reached (next is
// then that length, or from if from was past it) or *stop was set (if stop
// is not nil; checked before each page, as OnesUntil does).
func (b *Bits) NextOnes(from uint64, dst []uint64, stop *atomic.Bool) (n int, next uint64) {
	c := onesCursor{b: b, stop: stop, pos: from, n: b.Len()}
	n = c.fill(dst)
	return n, c.pos
}

// ones yields the set bits at or after from and below n, reading bitslice
// word w with word (snapshots: every word).
func ones(from, n uint64, word func(w uint64) uint64, yield func(uint64) bool) {
	for w := from >> 6; w<<6 < n; w++ {
		x := word(w)
		if w == from>>6 {
			x &^= uint64(1)<<(from&63) - 1
		}
		for x != 0 {
			i := w<<6 | uint64(bits.TrailingZeros64(x))
			if i >= n || !yield(i) {
				return
			}
			x &= x - 1
		}
	}
}

// word64 returns the effective bitslice word w, pending changes applied.
func (b *Bits) word64(w uint64) uint64 {
	for {
		v := b.view.Load()
		fw := v.fileWord(w)
		if v.direct {
			runtime.KeepAlive(v)
			return fw
		}
		am, av := v.activeWord64(w)
		m, val := foldTables64(v.sealed, w, am, av&am)
		if b.view.Load() == v {
			return val | fw&^m
		}
	}
}
