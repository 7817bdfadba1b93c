package buffer

import (
	"iter"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/bitslice"
)

// This file is the Bits overlay's lifecycle: views, freeze, release,
// settle, snapshots and pins. It knows tables only through a few methods
// (empty, bytes, reset, word, word64, page, pins, gen), so that the same
// lifecycle can serve another table layout.

// bitsView is what a reader loads first (B1): immutable once published.
// The first fields are those of the direct path, on one cache line.
type bitsView struct {
	limit uint64 // direct ? nbits : 0: a read of i < limit loads words (B2, B3)
	// base is words' first byte (nil without words): the direct path
	// reads bit i's byte at base + i/8 (Lookup).
	base   unsafe.Pointer
	words  []uint64 // the file's mapped words (fv's)
	direct bool     // nothing pending in any table: read words
	closed bool     // published by MarkClosed or after it: Get reports closed (B12)
	// fast: open, not direct, no sealed table and the active table dense
	// when published (B13): Get probes the active table on this line's
	// fields alone, with no filter, flag or table field loaded.
	fast  bool
	nbits uint64 // the file's length when the view was published
	// adir is the active table's directory as of the view: a grown one
	// is published in a new view before any page is installed in it (B5),
	// so a lookup reaches the active table's word in two loads.
	adir []atomic.Pointer[bitsPage]
	// afilt is the active table's word filter (live: writers mark it);
	// sfilt the union of the sealed tables' filters (immutable: built when
	// the sealed tables change) and sunf whether one of them is unfiltered
	// past sfilt's cover. A lookup of a bit whose line neither marks reads
	// the file alone (B4a).
	afilt []uint64
	sfilt []uint64
	sunf  bool
	// alim and flim bound LookupSlow's filter paths (B14), both bit
	// indexes below the file's length: alim is min(nbits, the bits afilt
	// covers) in a view without sealed tables, else 0, and a lookup of a
	// bit below it loads the active filter's word and the file's with no
	// other bounds check, and nothing else to decide; flim is min(nbits,
	// the bits both filters cover) in a view with sealed tables, else 0,
	// and below it one word of each filter decides. Both are 0 in a
	// closed view, a fast one and one published while the tests'
	// "bits-filter" hook is on (filterHook), so that LookupSlow's tests
	// of alim and flim keep them all off its filter paths: they are told
	// apart past them (B12, B13).
	alim   uint64
	flim   uint64
	fv     *bitslice.View
	active *bitsTable
	sealed []*bitsTable // newest first
}

// publish stores v as the view (B1), its limit set from its other fields.
// vmu held (or NewBits).
func (b *Bits) publish(v *bitsView) {
	v.limit = 0
	v.closed = b.closed
	if v.direct && !v.closed {
		v.limit = v.nbits
	}
	v.adir = v.active.dir.Load().pages
	v.afilt = v.active.lines
	if old := b.view.Load(); old == nil || !sameTables(old.sealed, v.sealed) {
		// Taken once: the union is published in v and never written
		// again (B4a).
		var buf []uint64
		buf, b.unionBuf = b.unionBuf, nil
		v.sfilt, v.sunf = unionFilters(v.sealed, buf)
	}
	v.fast = !v.closed && !v.direct && len(v.sealed) == 0 && v.active.dense.Load() // B13
	v.alim, v.flim = 0, 0
	switch {
	case v.closed || v.fast || filterHook.Load():
		// LookupSlow tests closed (B12), fast (B13) and the tests'
		// hook only past alim and flim.
	case len(v.sealed) == 0:
		v.alim = min(v.nbits, uint64(len(v.afilt))*filterWordBits)
	default:
		v.flim = min(v.nbits, uint64(min(len(v.afilt), len(v.sfilt)))*filterWordBits)
	}
	b.view.Store(v)
}

// MarkClosed publishes a closed view (B12): from then on Lookup reports
// the overlay closed, and so does every view published after (a flush
// running after it keeps the mark). A lookup that loaded a view before
// it reads the file's words through that view's mapping, which the file's
// Close leaves in place. Writes, flushes and the other reads are not
// affected.
func (b *Bits) MarkClosed() {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	b.closed = true
	n := *b.view.Load()
	b.publish(&n)
}

// DropFile publishes a closed view without the file's words (B12), so that
// the overlay no longer keeps the file's mappings reachable: bitslice's
// Close leaves a mapping in place until no View of it is reachable, and
// the overlay's views would otherwise hold the last one for as long as
// the overlay is reachable. Reads that loaded an earlier view finish on
// its words; a read that loads the view after DropFile reads the file as
// empty (Lookup reports closed). The owner calls it after MarkClosed and
// after the overlay's last flush, once it has closed the file.
func (b *Bits) DropFile() {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	b.closed = true
	n := *b.view.Load()
	n.setFile(nil)
	b.publish(&n)
}

// sameTables reports whether a and b are the same slice of tables.
func sameTables(a, b []*bitsTable) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// unionFilters returns the union of the line filters of sealed tables
// (which no write changes any more) and whether one is unfiltered. The
// union is buf if it is long enough (zeroed and never published: the union
// is published in the view and never written again), else new memory.
func unionFilters(ts []*bitsTable, buf []uint64) ([]uint64, bool) {
	var n int
	unf := false
	for _, t := range ts {
		n = max(n, len(t.lines))
		unf = unf || t.unfiltered.Load()
	}
	if n == 0 {
		return nil, unf
	}
	u := buf[:min(n, len(buf))]
	if len(u) < n {
		u = make([]uint64, n)
	}
	if unf {
		// A table unfiltered past its cover may hold bits anywhere past
		// it, within the others' covers too.
		for k := range u {
			u[k] = ^uint64(0)
		}
		return u, true
	}
	for _, t := range ts {
		for k := range t.lines {
			u[k] |= atomic.LoadUint64(&t.lines[k])
		}
	}
	return u, false
}

// maybe reports whether filter bit l may cover a bit pending in any table
// of the view (B4a).
func (v *bitsView) maybe(l uint64) bool {
	k := l >> 6
	var f uint64
	if k < uint64(len(v.afilt)) {
		f = atomic.LoadUint64(&v.afilt[k])
	} else if v.active.unfiltered.Load() {
		return true
	}
	if k < uint64(len(v.sfilt)) {
		f |= v.sfilt[k]
	} else if v.sunf {
		return true
	}
	return f>>(l&63)&1 != 0
}

// dirGrown republishes the view after t's directory grew, if t is the
// active table (B5). t.mu held: the lock order is t.mu, then vmu.
func (b *Bits) dirGrown(t *bitsTable) {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	if v := b.view.Load(); v.active == t {
		n := *v
		b.publish(&n)
	}
}

// densed republishes the view after t became dense, if t is the active
// table, so that the view is fast (B13). Called by the writer that set the
// flag; the lock order is t.mu, then vmu.
func (b *Bits) densed(t *bitsTable) {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	if v := b.view.Load(); v.active == t && !v.fast {
		n := *v
		b.publish(&n)
	}
}

// newTable returns a new empty table whose directory growth and whose
// becoming dense republish the view, its line filter sized for the
// overlay's length.
func (b *Bits) newTable() *bitsTable {
	t := newBitsTable(b.acct, b.Len())
	t.grown = b.dirGrown
	t.densed = b.densed
	return t
}

// fits reports whether table t's line filter covers the overlay's length,
// so that t may be reused as the active table. A filter is sized when its
// table is made and never grows: a reused table made when the file was
// short would go unfiltered (B4a) at the first write past its cover, and
// every lookup would then probe the tables until the next Freeze, each
// generation again (a bitslice created empty and filled by its first
// flushes kept such tables in the pool forever).
func (b *Bits) fits(t *bitsTable) bool {
	return uint64(len(t.lines))*filterWordBits >= b.Len()
}

// setFile makes v read the file through fv (nil after Close: no words).
func (v *bitsView) setFile(fv *bitslice.View) {
	v.fv = fv
	v.words, v.nbits = nil, 0
	if fv != nil {
		v.words, v.nbits = fv.Words(), fv.Len()
	}
	v.base = unsafe.Pointer(unsafe.SliceData(v.words))
}

// with returns a copy of v with the given tables, not direct.
func (v *bitsView) with(active *bitsTable, sealed []*bitsTable) *bitsView {
	n := *v
	n.direct, n.active, n.sealed = false, active, sealed
	return &n
}

// fileWord returns bitslice word w of the file as of the view (0 at or
// past its length). The caller keeps v alive until it is done.
func (v *bitsView) fileWord(w uint64) uint64 {
	if w >= uint64(len(v.words)) {
		return 0
	}
	x := atomic.LoadUint64(&v.words[w])
	if r := v.nbits - w<<6; r < 64 {
		x &= uint64(1)<<r - 1
	}
	return x
}

// beneathWord returns the values of packed word w beneath the active
// table: the sealed tables' pending values, newest first, over the file's.
// The caller re-validates v against recycling.
func (v *bitsView) beneathWord(w uint64) uint64 {
	var m, val uint64
	for _, t := range v.sealed {
		p := t.word(w)
		tm := p >> 32 &^ m
		val |= p & tm
		m |= tm
	}
	fw := v.fileWord(w>>1) >> (32 * (w & 1)) & lowHalf
	return val | fw&^m
}

// fold returns the pending mask and values of packed word w across every
// table of the view, newest first.
func (v *bitsView) fold(w uint64) (m, val uint64) {
	if pi := w >> pageShift; pi < uint64(len(v.adir)) {
		if c := v.adir[pi].Load(); c != nil {
			p := atomic.LoadUint64(&c[w&pageMask])
			m = p >> 32
			val = p & m
		}
	}
	for _, t := range v.sealed {
		p := t.word(w)
		tm := p >> 32 &^ m
		val |= p & tm
		m |= tm
	}
	return m, val
}

// activeWord64 is the active table's word64 through the view's directory.
func (v *bitsView) activeWord64(w uint64) (mask, val uint64) {
	if pi := (w << 1) >> pageShift; pi < uint64(len(v.adir)) {
		if c := v.adir[pi].Load(); c != nil {
			return pageWord64(c, w<<1)
		}
	}
	return 0, 0
}

// pendingPage reports whether any table of the view has page pi.
func (v *bitsView) pendingPage(pi uint64) bool {
	if v.active.page(pi) != nil {
		return true
	}
	for _, t := range v.sealed {
		if t.page(pi) != nil {
			return true
		}
	}
	return false
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

// writable returns the active table for a write, leaving the direct path
// first if the view is on it (B2).
func (b *Bits) writable() *bitsTable {
	v := b.view.Load()
	if v.direct {
		b.vmu.Lock()
		if v = b.view.Load(); v.direct {
			v = v.with(v.active, v.sealed)
			b.publish(v)
		}
		b.vmu.Unlock()
	}
	return v.active
}

// refreshFile publishes a view that reads the file's current mapping
// (after Grow). It keeps the direct flag: a direct view reads the file.
func (b *Bits) refreshFile() {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	v := b.view.Load()
	n := *v
	n.setFile(b.file.View())
	b.publish(&n)
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
		b.publish(v.with(b.takeSpare(), prependBits(a, v.sealed))) // B1
	}
	if len(frozen) == 0 {
		return nil
	}
	return &BitsGen{b: b, g: g, tables: frozen}
}

func (b *Bits) takeSpare() *bitsTable {
	if t := b.spare; t != nil {
		b.spare = nil
		if b.fits(t) {
			return t
		}
	}
	return b.newTable()
}

func prependBits(t *bitsTable, ts []*bitsTable) []*bitsTable {
	out := make([]*bitsTable, 0, len(ts)+1)
	return append(append(out, t), ts...)
}

// Release drops generation g's tables once their changes are durable in the
// file, and keeps one unpinned table for reuse. Generations must be released
// in order. It is ReleaseView then Recycle.
func (b *Bits) Release(g uint64) {
	b.ReleaseView(g)
	b.Recycle()
}

// ReleaseView is Release without the reset of the table kept for reuse:
// it publishes the view without generation g's tables (B8) and leaves
// that table to Recycle, which the owner calls once it has woken whoever
// waited for the release (the reset scans and zeroes every page the table
// had, a fifth of a 1M-bit flush). Until Recycle, a Freeze takes a new
// table instead.
func (b *Bits) ReleaseView(g uint64) {
	b.vmu.Lock()
	v := b.view.Load()
	cut, ok := sealedCut(v.sealed, g)
	if !ok {
		b.vmu.Unlock()
		return
	}
	gone := v.sealed[cut:]
	// B8: publish first, reset after (Recycle).
	b.publish(v.with(v.active, v.sealed[:cut:cut]))
	var freed int64
	for _, t := range gone {
		freed += t.bytes()
		t.held.Add(-t.bytes())
	}
	if b.spare == nil && b.recycle == nil && b.keep > 0 {
		for _, t := range gone {
			if t.pins.Load() == 0 && b.fits(t) { // B11
				b.recycle = t
				break
			}
		}
	}
	b.vmu.Unlock()
	b.acct.add(-freed)
}

// Recycle resets the table the last ReleaseView kept for reuse, if any,
// and makes it the spare the next Freeze takes. The table is in no view
// (ReleaseView published one without it first, B8) and was unpinned when
// it left (B11, no pin after that), so only a reader of an older view
// still loads its pages, and reset's stores are atomic for it.
func (b *Bits) Recycle() {
	b.prepareUnion()
	b.vmu.Lock()
	t := b.recycle
	b.recycle = nil
	b.vmu.Unlock()
	if t == nil {
		return
	}
	t.reset(b.keep)
	b.vmu.Lock()
	if b.spare == nil {
		b.spare = t
	}
	b.vmu.Unlock()
}

// prepareUnion gives the next union of sealed filters (publish, at the next
// Freeze) a buffer as long as the active table's filter, its pages touched
// here, off the flush's line, instead of on first store during the freeze.
// The buffer is private until a view publishes it (B1).
func (b *Bits) prepareUnion() {
	b.vmu.Lock()
	n := len(b.view.Load().active.lines)
	have := len(b.unionBuf) >= n
	b.vmu.Unlock()
	if have || n == 0 {
		return
	}
	u := make([]uint64, n)
	for k := range u {
		u[k] = 0 // touch: fresh memory is mapped on first store
	}
	b.vmu.Lock()
	if len(b.unionBuf) < n {
		b.unionBuf = u
	}
	b.vmu.Unlock()
}

// Settle restores the direct read path once every table is empty or
// released (B3). The caller must exclude writers.
func (b *Bits) Settle() {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	v := b.view.Load()
	if !v.direct && len(v.sealed) == 0 && v.active.empty() {
		n := *v
		n.direct = true
		n.setFile(b.file.View())
		b.publish(&n)
	}
}

// direct reports whether reads take the direct path (tests).
func (b *Bits) direct() bool { return b.view.Load().direct }

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
// before they are overwritten (B10).
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
// snapshot of the bitslice. The caller must exclude writers, as for Freeze:
// for the instant to be one, and for Count to stay exact (B6: a write
// still in flight to the table sealed here and one to the new active table
// would both count a change of the same bit). Close the snapshot when
// done.
func (b *Bits) Snapshot() *BitsSnapshot {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	v := b.view.Load()
	if a := v.active; !a.empty() {
		v = v.with(b.takeSpare(), prependBits(a, v.sealed))
		b.publish(v) // B1
	}
	ts := append([]*bitsTable(nil), v.sealed...)
	pinTables(ts) // B11: under vmu
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
	unpinTables(s.tables)
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
	// B10: the file word first, the layers after.
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

// NextOnes is Bits.NextOnes as of the snapshot (no stop flag: the snapshot
// does not change). It reads word by word through ones, as the snapshot's
// Ones does (no cursor: the snapshot has no region summary of its own).
func (s *BitsSnapshot) NextOnes(from uint64, dst []uint64) (n int, next uint64) {
	next = max(from, s.length) // unless dst fills
	if len(dst) == 0 {
		return 0, from
	}
	ones(from, s.length, s.word64, func(i uint64) bool {
		dst[n] = i
		n++
		if n == len(dst) {
			next = i + 1
			return false
		}
		return true
	})
	return n, next
}
