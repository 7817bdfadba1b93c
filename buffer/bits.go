package buffer

import (
	"context"
	"iter"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// bitsFile is the write side of a *bitslice.File the flush uses. It is an
// interface so that tests can inject I/O failures around a real file; reads
// go straight to the *bitslice.File.
type bitsFile interface {
	Len() uint64
	Grow(nbits uint64) error
	ApplyWords(changes []bitslice.WordChange) error
	SetWatermark(op uint64)
	Sync() error
}

// Bits is the pending-changes overlay of one bitslice file: Set and SetRange
// land in memory and are visible to reads at once; the flush protocol
// (Freeze, BitsGen.Write, Release) moves them to the file.
//
// Writes must not run concurrently with Freeze, Snapshot or Settle (the
// engine admits writes under the shared side of its write barrier and calls
// those with it held exclusively). Everything else is safe for concurrent
// use.
//
// # Read path
//
// With nothing pending anywhere one load decides and the read goes to the
// file. Otherwise a read loads the view (active table, sealed tables newest
// first), folds the word of every table and the file's word without
// branching on which holds the bit (the loads overlap), and re-loads the view
// to detect a table recycled under it.
type Bits struct {
	clean atomic.Bool // nothing pending in any table: read the file
	view  atomic.Pointer[bitsView]
	file  *bitslice.File
	fio   bitsFile
	hi    atomic.Uint64 // highest index ever set + 1
	ones  atomic.Int64  // set bits, pending changes included
	acct  *Account
	max   uint64
	keep  int64
	_     [64]byte // keep the read-mostly fields above off the writers' lines

	vmu     sync.Mutex // view changes, pinning, snapshots and undo layers
	spare   *bitsTable // a reset table for the next active one
	lastGen uint64     // highest generation frozen
	snaps   map[*BitsSnapshot]uint64
	undo    atomic.Pointer[[]*undoLayer] // oldest first; published under vmu

	wmu     sync.Mutex // serialises generation writes
	scratch []bitslice.WordChange
}

type bitsView struct {
	active *bitsTable
	sealed []*bitsTable // newest first
}

// fold returns the pending mask and values of packed word w across every
// table of the view, newest first.
func (v *bitsView) fold(w uint64) (m, val uint64) {
	p := v.active.word(w)
	m = p >> 32
	val = p & m
	for _, t := range v.sealed {
		p = t.word(w)
		tm := p >> 32 &^ m
		val |= p & tm
		m |= tm
	}
	return m, val
}

// foldTables64 is fold for a 64-bit bitslice word of the sealed tables only
// (everything beneath the active table) or of all of them.
func foldTables64(ts []*bitsTable, w uint64, m, val uint64) (uint64, uint64) {
	for _, t := range ts {
		tm, tv := t.word64(w)
		tm &^= m
		val |= tv & tm
		m |= tm
	}
	return m, val
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

func newBits(f *bitslice.File, fio bitsFile, acct *Account, r resolved) *Bits {
	b := &Bits{file: f, fio: fio, acct: acct, max: r.maxBits, keep: r.poolBytes, snaps: map[*BitsSnapshot]uint64{}}
	b.view.Store(&bitsView{active: newBitsTable(acct)})
	b.ones.Store(int64(f.CountOnes()))
	b.clean.Store(true)
	return b
}

// Get returns bit i: the newest pending value if there is one, else the
// file's (false at or beyond the length).
func (b *Bits) Get(i uint64) bool {
	if b.clean.Load() {
		return b.file.Get(i)
	}
	return b.getPending(i)
}

// GetCheck is Get followed by a load of *closed, for a caller that must
// refuse reads that finish after it began closing (checking after the read
// is what makes a read racing the close safe: see package kvbuf). It is one
// call, so that the caller's wrapper stays small enough to inline.
func (b *Bits) GetCheck(i uint64, closed *atomic.Bool) (v, isClosed bool) {
	if b.clean.Load() {
		v = b.file.Get(i)
	} else {
		v = b.getPending(i)
	}
	return v, closed.Load()
}

func (b *Bits) getPending(i uint64) bool {
	w, sh := i>>5, i&31
	for {
		v := b.view.Load()
		m, val := v.fold(w)
		fw := b.file.Word(i >> 6)
		// Unchanged view: no table we probed was recycled under us.
		if b.view.Load() == v {
			pick := -(m >> sh & 1) // all ones if the bit is pending
			return (val>>sh&pick|fw>>(i&63)&^pick)&1 != 0
		}
	}
}

// GetMany sets out[j] = Get(idx[j]) for every j: the same values as that
// loop, read at some instant during the call, with the cache misses of
// independent indexes overlapped. len(out) must be at least len(idx).
func (b *Bits) GetMany(idx []uint64, out []bool) {
	out = out[:len(idx)]
	if b.clean.Load() {
		for j, i := range idx {
			out[j] = b.file.Get(i)
		}
		return
	}
	for {
		v := b.view.Load()
		for j, i := range idx {
			w, sh := i>>5, i&31
			m, val := v.fold(w)
			fw := b.file.Word(i >> 6)
			pick := -(m >> sh & 1)
			out[j] = (val>>sh&pick|fw>>(i&63)&^pick)&1 != 0
		}
		if b.view.Load() == v {
			return
		}
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
		return kverr.Errorf("bit %d (max %d): %w", i, b.max, bitslice.ErrOutOfRange)
	}
	return nil
}

// CheckSet reports the error Set would return for index i.
func (b *Bits) CheckSet(i uint64) error { return b.checkIndex(i) }

// CheckRange reports the error SetRange would return for [lo, hi).
func (b *Bits) CheckRange(lo, hi uint64) error {
	if lo > hi {
		return kverr.Errorf("bits [%d, %d): %w", lo, hi, ErrBadRange)
	}
	if hi > b.max {
		return kverr.Errorf("bits [%d, %d) (max %d): %w", lo, hi, b.max, bitslice.ErrOutOfRange)
	}
	return nil
}

// beneath returns the mask-free values of packed word w beneath the active
// table (sealed tables, then the file), re-validated against recycling.
func (b *Bits) beneath(w uint64) uint64 {
	for {
		v := b.view.Load()
		var m, val uint64
		for _, t := range v.sealed {
			p := t.word(w)
			tm := p >> 32 &^ m
			val |= p & tm
			m |= tm
		}
		fw := b.file.Word(w>>1) >> (32 * (w & 1)) & lowHalf
		if b.view.Load() == v {
			return val | fw&^m
		}
	}
}

// onesBeneath counts the set bits of chunk ci beneath the active table
// (sealed tables, then the file), re-validated against recycling.
func (b *Bits) onesBeneath(ci uint64) uint64 {
	for {
		v := b.view.Load()
		var n uint64
		for w := ci * chunkWords / 2; w < (ci+1)*chunkWords/2; w++ {
			m, val := foldTables64(v.sealed, w, 0, 0)
			n += uint64(bits.OnesCount64(val | b.file.Word(w)&^m))
		}
		if b.view.Load() == v {
			return n
		}
	}
}

// Set records bit i = v as pending. Indexes at or beyond the file's length
// grow it at the next flush; an index at or beyond Max is an error wrapping
// bitslice.ErrOutOfRange.
func (b *Bits) Set(i uint64, v bool) error {
	if err := b.checkIndex(i); err != nil {
		return err
	}
	b.dirty()
	w, bit := i>>5, uint64(1)<<(i&31)
	b.update(w, bit, v)
	atomicMax(&b.hi, i+1)
	return nil
}

// SetRange records every bit i with lo <= i < hi as v, pending, and keeps
// Count exact. Chunks of 32768 bits that the range covers whole and that
// hold no pending bit yet cost one directory pointer each.
func (b *Bits) SetRange(lo, hi uint64, v bool) error {
	if err := b.CheckRange(lo, hi); err != nil {
		return err
	}
	if lo == hi {
		return nil
	}
	b.dirty()
	a := b.view.Load().active
	for i := lo; i < hi; {
		if i%chunkBits == 0 && hi-i >= chunkBits {
			ci := i / chunkBits
			// Count first, install after: the chunk's bits beneath cannot
			// change while writers run, and a failed install falls back to
			// word by word below.
			before := b.onesBeneath(ci)
			if a.install(ci, fullChunk(v)) {
				delta := -int64(before)
				if v {
					delta += chunkBits
				}
				b.ones.Add(delta)
				atomicMax(&a.hi, i+chunkBits)
				i += chunkBits
				continue
			}
		}
		w := i >> 5
		end := min(hi, (w+1)<<5)
		m := (uint64(1)<<(end-i) - 1) << (i & 31)
		if end-i == 32 {
			m = lowHalf
		}
		b.update(w, m, v)
		i = end
	}
	atomicMax(&a.hi, hi)
	atomicMax(&b.hi, hi)
	return nil
}

// dirty leaves the nothing-pending fast path before a write lands: a reader
// that sees clean after the write returned would miss it.
func (b *Bits) dirty() {
	if b.clean.Load() {
		b.clean.Store(false)
	}
}

// update sets the bits of m (a low-half mask) of packed word w in the active
// table to v with one compare-and-swap, and adjusts the set-bit count by the
// exact change: a bit's old value is the active table's if it was pending
// there, else the value beneath, which cannot change while writers run.
func (b *Bits) update(w, m uint64, v bool) {
	a := b.view.Load().active
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

// Ones returns the indexes of set bits at or after from, in increasing
// order, pending changes included. The sequence is read live, word by word:
// a write concurrent with the iteration may or may not be seen.
func (b *Bits) Ones(from uint64) iter.Seq[uint64] {
	return func(yield func(uint64) bool) { ones(from, b.Len(), b.word64, yield) }
}

// ones yields the set bits at or after from and below n, reading bitslice
// word w with word.
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
	if b.clean.Load() {
		return b.file.Word(w)
	}
	for {
		v := b.view.Load()
		am, av := v.active.word64(w)
		m, val := foldTables64(v.sealed, w, am, av&am)
		fw := b.file.Word(w)
		if b.view.Load() == v {
			return val | fw&^m
		}
	}
}

// BitsGen is one bitslice's part of a frozen flush generation.
type BitsGen struct {
	b      *Bits
	g      uint64
	tables []*bitsTable // oldest first
}

// Freeze seals the active table (if it holds any change) into generation g,
// with every table sealed since the last Freeze, and returns them; nil if
// nothing is pending. The caller must exclude writers.
func (b *Bits) Freeze(g uint64) *BitsGen {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	b.lastGen = g
	v := b.view.Load()
	var frozen []*bitsTable
	for i := len(v.sealed) - 1; i >= 0; i-- {
		if t := v.sealed[i]; t.gen == 0 || t.gen == g { // see KV.Freeze
			t.gen = g
			frozen = append(frozen, t)
		}
	}
	if a := v.active; !a.empty() {
		a.gen = g
		frozen = append(frozen, a)
		b.view.Store(&bitsView{active: b.takeSpare(), sealed: prependBits(a, v.sealed)})
	}
	if len(frozen) == 0 {
		return nil
	}
	return &BitsGen{b: b, g: g, tables: frozen}
}

func (b *Bits) takeSpare() *bitsTable {
	if t := b.spare; t != nil {
		b.spare = nil
		return t
	}
	return newBitsTable(b.acct)
}

func prependBits(t *bitsTable, ts []*bitsTable) []*bitsTable {
	out := make([]*bitsTable, 0, len(ts)+1)
	return append(append(out, t), ts...)
}

// applyBatch bounds the word changes applied (and the undo recorded) at once.
const applyBatch = 1 << 16

// Write applies the generation to the file: grow it if a change lies beyond
// its end, apply the changes (oldest table first), stage wm as the file's
// watermark and sync (data, then the header). If an open snapshot needs the
// words it overwrites, it records them first (see BitsSnapshot). It may be
// called again after a failure: it is idempotent.
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
				b.recordUndo(g.g, words)
			}
			if err := b.fio.ApplyWords(words); err != nil {
				return kverr.Errorf("apply %d words: %w", len(words), err)
			}
		}
	}
	b.fio.SetWatermark(wm)
	if err := b.fio.Sync(); err != nil {
		return kverr.Errorf("sync: %w", err)
	}
	return nil
}

// Release drops generation g's tables once their changes are durable in the
// file, and keeps one unpinned table for reuse. Generations must be released
// in order.
func (b *Bits) Release(g uint64) {
	b.vmu.Lock()
	v := b.view.Load()
	cut := len(v.sealed)
	for cut > 0 && v.sealed[cut-1].gen == g {
		cut--
	}
	if cut == len(v.sealed) {
		b.vmu.Unlock()
		return
	}
	gone := v.sealed[cut:]
	// Publish first, reset after: see KV.Release.
	b.view.Store(&bitsView{active: v.active, sealed: v.sealed[:cut:cut]})
	var freed int64
	for _, t := range gone {
		freed += t.bytes()
		t.held.Add(-t.bytes())
	}
	var reuse *bitsTable
	if b.spare == nil && b.keep > 0 {
		for _, t := range gone {
			if t.pins.Load() == 0 {
				reuse = t
				break
			}
		}
	}
	b.vmu.Unlock()
	b.acct.add(-freed)
	if reuse != nil {
		reuse.reset(b.keep)
		b.vmu.Lock()
		if b.spare == nil {
			b.spare = reuse
		}
		b.vmu.Unlock()
	}
}

// Settle restores the nothing-pending fast path once every table is empty
// or released. The caller must exclude writers.
func (b *Bits) Settle() {
	v := b.view.Load()
	if len(v.sealed) == 0 && v.active.empty() {
		b.clean.Store(true)
	}
}

// PendingBytes returns the memory held by the overlay's pending changes.
func (b *Bits) PendingBytes() int64 {
	v := b.view.Load()
	n := v.active.bytes()
	for _, t := range v.sealed {
		n += t.bytes()
	}
	return n
}

// undoLayer holds the file words one batch of a generation's write
// overwrote, for snapshots older than the generation: sorted by word.
type undoLayer struct {
	gen   uint64
	words []uint64
	old   []uint64
}

func (l *undoLayer) find(w uint64) (uint64, bool) {
	i, ok := slices.BinarySearch(l.words, w)
	if !ok {
		return 0, false
	}
	return l.old[i], true
}

// needUndo reports whether an open snapshot predates generation g.
func (b *Bits) needUndo(g uint64) bool {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	for _, last := range b.snaps {
		if last < g {
			return true
		}
	}
	return false
}

// recordUndo publishes the current file words that words will overwrite,
// before they are overwritten: a snapshot reader that finds the layer reads
// the old word, one that does not read the file before the write.
func (b *Bits) recordUndo(g uint64, words []bitslice.WordChange) {
	l := &undoLayer{gen: g, words: make([]uint64, len(words)), old: make([]uint64, len(words))}
	for i, c := range words {
		l.words[i] = c.Word
		l.old[i] = b.file.Word(c.Word)
	}
	b.vmu.Lock()
	var cur []*undoLayer
	if p := b.undo.Load(); p != nil {
		cur = *p
	}
	next := append(append(make([]*undoLayer, 0, len(cur)+1), cur...), l)
	b.undo.Store(&next)
	b.vmu.Unlock()
}

// trimUndoLocked drops the layers no open snapshot needs. vmu held.
func (b *Bits) trimUndoLocked() {
	p := b.undo.Load()
	if p == nil {
		return
	}
	minLast := ^uint64(0)
	for _, last := range b.snaps {
		minLast = min(minLast, last)
	}
	var keep []*undoLayer
	for _, l := range *p {
		if l.gen > minLast {
			keep = append(keep, l)
		}
	}
	if len(keep) == len(*p) {
		return
	}
	if len(keep) == 0 {
		b.undo.Store(nil)
		return
	}
	b.undo.Store(&keep)
}

// BitsSnapshot reads a bitslice as it was when the snapshot was taken. Later
// writes and flushes do not change what it reads. Safe for concurrent use.
type BitsSnapshot struct {
	b       *Bits
	tables  []*bitsTable // newest first, sealed and pinned
	lastGen uint64
	fileLen uint64
	length  uint64
	ones    uint64
	closed  atomic.Bool
}

// Snapshot seals the active table (if it holds changes) and returns a
// snapshot of the bitslice. The caller must exclude writers for the instant
// to be one, and Close the snapshot when done.
func (b *Bits) Snapshot() *BitsSnapshot {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	v := b.view.Load()
	if a := v.active; !a.empty() {
		v = &bitsView{active: b.takeSpare(), sealed: prependBits(a, v.sealed)}
		b.view.Store(v)
	}
	ts := append([]*bitsTable(nil), v.sealed...)
	for _, t := range ts {
		t.pins.Add(1)
	}
	s := &BitsSnapshot{b: b, tables: ts, lastGen: b.lastGen, fileLen: b.file.Len(), ones: b.Count()}
	s.length = max(s.fileLen, b.hi.Load())
	b.snaps[s] = s.lastGen
	return s
}

// Close releases the snapshot. It is idempotent.
func (s *BitsSnapshot) Close() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	b := s.b
	b.vmu.Lock()
	delete(b.snaps, s)
	b.trimUndoLocked()
	b.vmu.Unlock()
	for _, t := range s.tables {
		if t.pins.Add(-1) < 0 {
			invariants.Check(false, "buffer: bits table unpinned more often than pinned")
		}
	}
}

// Len is Bits.Len as of the snapshot.
func (s *BitsSnapshot) Len() uint64 { return s.length }

// Count is Bits.Count as of the snapshot.
func (s *BitsSnapshot) Count() uint64 { return s.ones }

// word64 returns bitslice word w as of the snapshot.
func (s *BitsSnapshot) word64(w uint64) uint64 {
	m, val := foldTables64(s.tables, w, 0, 0)
	if w<<6 >= s.fileLen {
		return val
	}
	// The file word first, the layers after: a write publishes its layer
	// before it overwrites the word.
	fw := s.b.file.Word(w)
	if p := s.b.undo.Load(); p != nil {
		for _, l := range *p {
			if l.gen <= s.lastGen {
				continue
			}
			if old, ok := l.find(w); ok {
				fw = old
				break
			}
		}
	}
	if rem := s.fileLen - w<<6; rem < 64 {
		fw &= uint64(1)<<rem - 1
	}
	return val | fw&^m
}

// Get is Bits.Get as of the snapshot.
func (s *BitsSnapshot) Get(i uint64) bool {
	return s.word64(i>>6)>>(i&63)&1 != 0
}

// GetMany is Bits.GetMany as of the snapshot.
func (s *BitsSnapshot) GetMany(idx []uint64, out []bool) {
	out = out[:len(idx)]
	for j, i := range idx {
		out[j] = s.Get(i)
	}
}

// Ones is Bits.Ones as of the snapshot.
func (s *BitsSnapshot) Ones(from uint64) iter.Seq[uint64] {
	return func(yield func(uint64) bool) { ones(from, s.length, s.word64, yield) }
}
