package kvbuf

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// Retention of the change feed in the store (Options.WatchRetain;
// doc/design.md, "Change feed", rules R1-R5). The retained changes are
// store entries in the reserved keyspace feedKS: each entry is a run of
// consecutive changes of one recorded write (a Batch's changes are one run
// unless the selection leaves some out, or the run passes retRunMax
// changes or retRunBytes bytes), keyed by its op and the index among its
// op's changes of its first change, so a generation written again after a
// failure writes the same entries. A run of one change is stored as a
// single change (its value starts with its kind, never 0); a longer run's
// value is 0, the number of changes, then each change's value
// length-prefixed.
//
// R1. The flush of generation g with watermark wm writes, in the same
//     batch or ingest as its data and its watermark, the retained changes
//     of every op in (wm of generation g-1, wm] and the meta entry
//     feedRetainMeta = (floor, wm). Every change of an op <= wm was
//     resolved by the cut at the freeze of g (that cut's op is at least
//     wm), so the feed has them all when g is written. After a crash the
//     store's retained changes are therefore exactly those of the ops
//     <= its watermark: the ops the host does not replay.
// R2. The floor only rises, and is raised in memory before the flush that
//     deletes the entries below it is committed: a reader that checked
//     the floor before reading never misses an entry it was promised.
// R3. A watch reads the store only up to the watermark of the newest
//     generation released (relWM): everything there is durable and
//     written; then it goes on with the in-memory log from relWM+1,
//     whose floor is at most relWM+1 (the log drops only durable steps).
// R4. An overflow of the in-memory feed (changes dropped before they were
//     resolved) raises the floor above every op that lost a change.
// R5. At Open, a meta entry whose op is below the store's watermark (a
//     session ran without retention) means ops are missing: the floor
//     becomes the watermark + 1 and the first flush deletes the rest.

// DefaultWatchRetainBytes is the default WatchRetention.MaxBytes: 64 MiB.
const DefaultWatchRetainBytes = 64 << 20

// feedKS is the store keyspace holding retained changes: above every id
// the keyspace catalog assigns (enginedir.MaxKeyspaceID).
const feedKS = storage.KeyspaceID(math.MaxUint32)

// feedRetainMeta is the meta entry (floor, op) of the retained feed: every
// retained change of every op in [floor, op] is in feedKS. 16 bytes.
const feedRetainMeta = "kvbuf/feed-retained"

// WatchRetention configures Options.WatchRetain: which changes the store
// keeps for watches that resume after a restart, and how many.
type WatchRetention struct {
	// Keyspaces and Bitslices name what is retained; both empty means
	// every keyspace and bitslice, including those created later. Names
	// need not exist yet. A watch that resumes from the store may select
	// only what is retained (else DB.Watch returns ErrCompacted).
	Keyspaces []string
	Bitslices []string
	// MaxBytes bounds the retained changes: past it the oldest ops'
	// changes are deleted by the next flush. The changes of one flush are
	// never deleted by it, so one flush may pass the bound. Default:
	// DefaultWatchRetainBytes; negative is ErrBadOptions.
	MaxBytes int64
	// MaxOps, if positive, keeps only the changes of the last MaxOps ops
	// at or below the watermark. Default 0: bound by MaxBytes alone.
	MaxOps uint64
}

func (r *WatchRetention) validate() error {
	if r == nil {
		return nil
	}
	if r.MaxBytes < 0 {
		return kverr.Errorf("WatchRetain.MaxBytes %d (negative): %w", r.MaxBytes, ErrBadOptions)
	}
	for _, n := range r.Keyspaces {
		if err := enginedir.CheckName("keyspace", n); err != nil {
			return kverr.Errorf("WatchRetain: %w: %w", err, ErrBadOptions)
		}
	}
	for _, n := range r.Bitslices {
		if err := enginedir.CheckName("bitslice", n); err != nil {
			return kverr.Errorf("WatchRetain: %w: %w", err, ErrBadOptions)
		}
	}
	return nil
}

// retRec is a resolved record whose changes (those the retainer keeps)
// the store is to retain: its op, the index among its op's changes of its
// first change, and the store's size of the entries of its kept changes
// (retRuns). The changes are expanded only when a flush encodes them
// (retWrite.each), so resolving a step costs no copy of its changes.
type retRec struct {
	op    uint64
	idx   uint32
	rec   feedRec
	bytes int64
}

// retOp is the store's size of one retained op's changes.
type retOp struct {
	op    uint64
	bytes int64
}

// retGen is what the flush of a generation wrote: its watermark and floor.
type retGen struct{ wm, floor uint64 }

// retainer is the feed's retention state; its fields after the
// configuration are under feed.mu.
type retainer struct {
	all      bool
	kvs      map[string]bool
	bits     map[string]bool
	maxBytes int64
	maxOps   uint64

	floor  uint64            // R2: every retained change of ops in [floor, relWM] is in the store
	stored uint64            // the floor the store's meta holds durably
	relWM  uint64            // the watermark of the newest generation released (or at Open)
	pool   []retRec          // resolved, of ops above relWM, in op order
	index  []retOp           // durable retained ops at or above floor
	bytes  int64             // sum of index
	gens   map[uint64]retGen // written, not yet released
	// written counts the entries written by flushes (metrics).
	written uint64
}

func newRetainer(o *WatchRetention) *retainer {
	r := &retainer{all: len(o.Keyspaces) == 0 && len(o.Bitslices) == 0, kvs: map[string]bool{}, bits: map[string]bool{},
		maxBytes: o.MaxBytes, maxOps: o.MaxOps, gens: map[uint64]retGen{}}
	for _, n := range o.Keyspaces {
		r.kvs[n] = true
	}
	for _, n := range o.Bitslices {
		r.bits[n] = true
	}
	return r
}

// keeps reports whether e is retained.
func (r *retainer) keeps(e *WatchEvent) bool {
	if e.Op == 0 || e.Kind == EventResolved {
		return false // op 0 has no place in op order (caveat)
	}
	if r.all {
		return true
	}
	if e.Kind == EventSetBits {
		return r.bits[e.Bitslice]
	}
	return r.kvs[e.Keyspace]
}

// covers reports whether every change w selects is retained.
func (r *retainer) covers(w *Watch) bool {
	if r.all {
		return true
	}
	if w.all {
		return false
	}
	for n := range w.kvs {
		if !r.kvs[n] {
			return false
		}
	}
	for n := range w.bits {
		if !r.bits[n] {
			return false
		}
	}
	return true
}

// collect returns the retained records of a resolved step's records (in
// op order, compacted), numbered within their op.
func (r *retainer) collect(recs []feedRec) []retRec {
	out := make([]retRec, 0, len(recs))
	var last uint64
	var idx uint32
	for i := range recs {
		rec := &recs[i]
		if rec.Op != last {
			last, idx = rec.Op, 0
		}
		var n int64
		r.runs(rec, func(j0, j1 int, size int64) { n += size })
		if n > 0 {
			out = append(out, retRec{op: rec.Op, idx: idx, rec: *rec, bytes: n})
		}
		idx += uint32(rec.count())
	}
	return out
}

// Runs: a retained entry holds at most retRunMax changes and, past its
// first change, retRunBytes bytes of values, so that a watch reading the
// store from the middle of a run decodes little it skips.
const (
	retRunMax   = 1024
	retRunBytes = 64 << 10
)

// runs calls fn with each run of rec's changes that r keeps, in order:
// changes [j0, j1) of rec, stored as one entry of size bytes (key and
// value, as Open counts them).
func (r *retainer) runs(rec *feedRec, fn func(j0, j1 int, size int64)) {
	n := rec.count()
	j0, vals, sum := -1, int64(0), int64(0) // the open run, its values' bytes and their prefixed sum
	flush := func(j1 int) {
		if j1-j0 == 1 {
			fn(j0, j1, 12+vals)
		} else {
			fn(j0, j1, 12+1+int64(uvLen(uint64(j1-j0)))+sum)
		}
		j0, vals, sum = -1, 0, 0
	}
	for j := range n {
		e := rec.event(j)
		if !r.keeps(&e) {
			if j0 >= 0 {
				flush(j)
			}
			continue
		}
		if j0 >= 0 && (j-j0 == retRunMax || vals >= retRunBytes) {
			flush(j)
		}
		if j0 < 0 {
			j0 = j
		}
		v := retEventBytes(&e) - 12
		vals += v
		sum += int64(uvLen(uint64(v))) + v
	}
	if j0 >= 0 {
		flush(n)
	}
}

// uvLen is the length of x as a uvarint.
func uvLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// openRetained loads the retained feed's state at Open (R5); wm is the
// store's watermark.
func (f *feed) openRetained(wm uint64) error {
	r := newRetainer(f.db.opts.WatchRetain)
	r.floor, r.relWM = wm+1, wm
	b, err := f.db.store.GetMeta(feedRetainMeta)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	case len(b) != 16:
		return kverr.Errorf("%s: retained feed meta of %d bytes: %w", f.db.Dir(), len(b), ErrCorrupt)
	default:
		floor, through := binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
		r.stored = floor
		if through == wm {
			r.floor = floor
		}
	}
	it, err := f.db.store.NewIter(feedKS, nil, nil)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		op, _, ok := decodeRetKey(k)
		if !ok {
			if err := it.Close(); err != nil {
				return err
			}
			return kverr.Errorf("%s: retained feed key %x: %w", f.db.Dir(), k, ErrCorrupt)
		}
		if op < r.floor || op > wm {
			continue
		}
		n := int64(len(it.Key()) + len(it.Value()))
		if k := len(r.index); k > 0 && r.index[k-1].op == op {
			r.index[k-1].bytes += n
		} else {
			r.index = append(r.index, retOp{op, n})
		}
		r.bytes += n
	}
	if err := it.Close(); err != nil {
		return err
	}
	f.ret = r
	return nil
}

// retWrite is what a generation's flush adds to its batch or ingest (R1).
type retWrite struct {
	r       *retainer // its selection (set at Open, read without a lock)
	recs    []retRec
	del     bool // delete every entry below floor
	floor   uint64
	through uint64
}

// retainWrite returns the retained changes the flush of generation g with
// watermark wm writes, or nil without retention. It resolves the cuts
// queued first (the freeze cut of g among them).
func (f *feed) retainWrite(g, wm uint64) *retWrite {
	if f.ret == nil {
		return nil
	}
	f.process()
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.ret
	lo := r.relWM
	if p, ok := r.gens[g-1]; ok {
		lo = max(lo, p.wm)
	}
	i := sort.Search(len(r.pool), func(i int) bool { return r.pool[i].op > lo })
	j := sort.Search(len(r.pool), func(i int) bool { return r.pool[i].op > wm })
	w := &retWrite{r: r, recs: slices.Clone(r.pool[i:j]), through: wm}
	floor := r.floor
	if r.maxOps > 0 && wm >= r.maxOps {
		floor = max(floor, wm-r.maxOps+1)
	}
	total := r.bytes
	for k := range w.recs {
		total += w.recs[k].bytes
	}
	for _, o := range r.index {
		if total <= r.maxBytes && o.op >= floor {
			break
		}
		total -= o.bytes
		floor = max(floor, o.op+1)
	}
	r.raiseFloor(floor)
	w.floor = r.floor
	w.del = r.floor > r.stored
	r.gens[g] = retGen{wm: wm, floor: r.floor}
	r.written += uint64(len(w.recs))
	return w
}

// raiseFloor raises the floor and forgets the durable ops below it.
// f.mu held.
func (r *retainer) raiseFloor(floor uint64) {
	if floor <= r.floor {
		return
	}
	r.floor = floor
	k := 0
	for k < len(r.index) && r.index[k].op < floor {
		r.bytes -= r.index[k].bytes
		k++
	}
	r.index = slices.Delete(r.index, 0, k)
}

// released records that generation g is durable: its retained changes are
// in the store. f.mu held.
func (r *retainer) released(g uint64) {
	p, ok := r.gens[g]
	if !ok {
		return
	}
	for h := range r.gens {
		if h <= g {
			delete(r.gens, h)
		}
	}
	r.stored = max(r.stored, p.floor)
	r.relWM = max(r.relWM, p.wm)
	k := 0
	for ; k < len(r.pool) && r.pool[k].op <= p.wm; k++ {
		rec := &r.pool[k]
		if rec.op < r.floor {
			continue
		}
		n := rec.bytes
		if m := len(r.index); m > 0 && r.index[m-1].op == rec.op {
			r.index[m-1].bytes += n
		} else {
			r.index = append(r.index, retOp{rec.op, n})
		}
		r.bytes += n
	}
	clear(r.pool[:k])
	r.pool = r.pool[k:]
}

// addToBatch adds w to a flush's batch.
func (w *retWrite) addToBatch(b *storage.Batch) {
	if w.del {
		b.DeleteRange(feedKS, nil, binary.BigEndian.AppendUint64(nil, w.floor))
	}
	w.each(func(key, val []byte) { b.Put(feedKS, key, val) })
	b.SetMeta(feedRetainMeta, w.meta())
}

// addToIngest adds w's changes to a flush's ingest, after every keyspace
// (feedKS is the last); its meta entry went in first (ingestMeta).
func (w *retWrite) addToIngest(in *storage.Ingest) {
	if w.del {
		in.DeleteRange(feedKS, nil, binary.BigEndian.AppendUint64(nil, w.floor))
	}
	w.each(func(key, val []byte) { in.Put(feedKS, key, val) })
}

// each calls put with the store key and value of every retained entry of
// w (a run of changes, retainer.runs), in key order; the slices are reused
// after put returns.
func (w *retWrite) each(put func(key, val []byte)) {
	var key, val, one []byte
	for i := range w.recs {
		rr := &w.recs[i]
		w.r.runs(&rr.rec, func(j0, j1 int, size int64) {
			key = retKey(key[:0], rr.rec.Op, rr.idx+uint32(j0))
			val = val[:0]
			if j1-j0 == 1 {
				e := rr.rec.event(j0)
				val = encodeRetained(val, &e)
			} else {
				val = binary.AppendUvarint(append(val, 0), uint64(j1-j0))
				for j := j0; j < j1; j++ {
					e := rr.rec.event(j)
					one = encodeRetained(one[:0], &e)
					val = binary.AppendUvarint(val, uint64(len(one)))
					val = append(val, one...)
				}
			}
			if invariants.Enabled {
				invariants.Check(int64(len(key)+len(val)) == size, "kvbuf: feed retention: an entry of %d bytes counted as %d", len(key)+len(val), size)
			}
			put(key, val)
		})
	}
}

// ingestMeta adds w's meta entry to an ingest, before any change.
func (w *retWrite) ingestMeta(in *storage.Ingest) { in.SetMeta(feedRetainMeta, w.meta()) }

func (w *retWrite) meta() []byte {
	b := binary.BigEndian.AppendUint64(nil, w.floor)
	return binary.BigEndian.AppendUint64(b, w.through)
}

// retKey is a retained change's key: op, then its index, big-endian.
func retKey(dst []byte, op uint64, idx uint32) []byte {
	dst = binary.BigEndian.AppendUint64(dst, op)
	return binary.BigEndian.AppendUint32(dst, idx)
}

func decodeRetKey(k []byte) (uint64, uint32, bool) {
	if len(k) != 12 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k), binary.BigEndian.Uint32(k[8:]), true
}

// retEventBytes is the size of e's store entry: key and value, as Open
// counts them.
func retEventBytes(e *WatchEvent) int64 {
	uv := uvLen
	name := e.Keyspace
	if e.Kind == EventSetBits {
		name = e.Bitslice
	}
	n := 12 + 2 + uv(uint64(len(name))) + len(name) + uv(e.Lo) + uv(e.Hi)
	n += uv(uint64(len(e.Key))) + len(e.Key) + uv(uint64(len(e.Value))) + len(e.Value) + uv(uint64(len(e.End))) + len(e.End)
	return int64(n)
}

// encodeRetained appends the store value of change e to val: kind,
// flags (1: Key set, 2: End set, 4: Bit), then the name, key, value and
// end as uvarint-prefixed bytes, then Lo and Hi as uvarints.
func encodeRetained(val []byte, e *WatchEvent) []byte {
	var fl byte
	if e.Key != nil {
		fl |= 1
	}
	if e.End != nil {
		fl |= 2
	}
	if e.Bit {
		fl |= 4
	}
	val = append(val, byte(e.Kind), fl)
	name := e.Keyspace
	if e.Kind == EventSetBits {
		name = e.Bitslice
	}
	val = binary.AppendUvarint(val, uint64(len(name)))
	val = append(val, name...)
	for _, b := range [][]byte{e.Key, e.Value, e.End} {
		val = binary.AppendUvarint(val, uint64(len(b)))
		val = append(val, b...)
	}
	val = binary.AppendUvarint(val, e.Lo)
	return binary.AppendUvarint(val, e.Hi)
}

// eachRetained calls fn with each change of the retained entry (key, val)
// and its index among its op's changes (the bytes are copied), until fn
// returns false. It returns false for an entry that does not decode.
func eachRetained(key, val []byte, fn func(idx uint32, e *WatchEvent) bool) bool {
	op, idx, ok := decodeRetKey(key)
	if !ok || len(val) == 0 {
		return false
	}
	if val[0] != 0 {
		e, ok := decodeRetained(op, val)
		if ok {
			fn(idx, &e)
		}
		return ok
	}
	n, k := binary.Uvarint(val[1:])
	if k <= 0 || n < 2 || n > uint64(len(val)) {
		return false
	}
	val = val[1+k:]
	for j := range n {
		m, k := binary.Uvarint(val)
		if k <= 0 || uint64(len(val)-k) < m {
			return false
		}
		e, ok := decodeRetained(op, val[k:k+int(m)])
		if !ok {
			return false
		}
		val = val[k+int(m):]
		if !fn(idx+uint32(j), &e) {
			return true
		}
	}
	return len(val) == 0
}

// decodeRetained decodes one retained change of op (its bytes are copied).
func decodeRetained(op uint64, val []byte) (WatchEvent, bool) {
	if len(val) < 2 {
		return WatchEvent{}, false
	}
	e := WatchEvent{Kind: WatchEventKind(val[0]), Op: op}
	fl := val[1]
	val = val[2:]
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(val)
		if k <= 0 || uint64(len(val)-k) < n {
			return nil, false
		}
		b := val[k : k+int(n)]
		val = val[k+int(n):]
		return b, true
	}
	name, ok := next()
	if !ok {
		return e, false
	}
	var parts [3][]byte
	for i := range parts {
		if parts[i], ok = next(); !ok {
			return e, false
		}
	}
	var k int
	if e.Lo, k = binary.Uvarint(val); k <= 0 {
		return e, false
	}
	val = val[k:]
	if e.Hi, k = binary.Uvarint(val); k <= 0 || k != len(val) {
		return e, false
	}
	switch e.Kind {
	case EventPut, EventDelete, EventDeleteRange, EventDropKeyspace:
		e.Keyspace = string(name)
	case EventSetBits:
		e.Bitslice = string(name)
	default:
		return e, false
	}
	if fl&1 != 0 {
		e.Key = append([]byte{}, parts[0]...)
	}
	if e.Kind == EventPut {
		e.Value = append([]byte{}, parts[1]...)
	}
	if fl&2 != 0 {
		e.End = append([]byte{}, parts[2]...)
	}
	e.Bit = fl&4 != 0
	return e, true
}

// readStored fills w.buf from the store (R3); once it has read every
// retained change up to relWM it delivers a mark there and moves w to the
// in-memory log. Called without f.mu.
func (f *feed) readStored(w *Watch) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	r := f.ret
	floor, top := r.floor, r.relWM
	f.mu.Unlock()
	start := w.rop
	if start < floor {
		return kverr.Errorf("watch from op %d: at op %d: retained changes from op %d: %w", w.start, w.lastMark, floor, ErrLagged)
	}
	w.buf, w.i = w.buf[:0], 0
	clear(w.runs) // returned whole before Next read on (watchRun)
	w.runs, w.r = w.runs[:0], 0
	// From the op's first entry: the change at ridx may be inside a run.
	it, err := f.db.store.NewIter(feedKS, retKey(nil, w.rop, 0), binary.BigEndian.AppendUint64(nil, top+1))
	if err != nil {
		return err
	}
	done := true
	for ok := it.First(); ok && done; ok = it.Next() {
		k := it.Key()
		ok := eachRetained(k, it.Value(), func(idx uint32, e *WatchEvent) bool {
			if e.Op == w.rop && idx < w.ridx {
				return true // read before
			}
			if len(w.buf) >= w.batch {
				done = false
				return false
			}
			w.match(e)
			w.rop, w.ridx = e.Op, idx+1
			return true
		})
		if !ok {
			if err := it.Close(); err != nil {
				return err // the store closed under it (ErrClosed), or a read failed
			}
			return kverr.Errorf("%s: retained feed entry %x: %w", f.db.Dir(), k, ErrCorrupt)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ret.floor > start {
		// R2: a flush trimmed what we read meanwhile.
		w.buf = w.buf[:0]
		return kverr.Errorf("watch from op %d: at op %d: retained changes from op %d: %w", w.start, w.lastMark, f.ret.floor, ErrLagged)
	}
	if !done {
		return nil
	}
	m := WatchEvent{Kind: EventResolved, Op: top, Watermark: top}
	w.match(&m)
	w.rop, w.ridx = top+1, 0
	if f.floor > top+1 {
		if f.ret.relWM > top {
			// The log dropped durable steps meanwhile: they are in the
			// store now; read on there.
			return nil
		}
		// R4: the in-memory feed lost changes above what the store holds.
		return kverr.Errorf("watch from op %d: at op %d: %w", w.start, top, ErrLagged)
	}
	w.stored = false
	w.from = max(w.from, top+1)
	w.pos = f.logPos(w.from)
	w.mop, w.midx = w.from, 0
	// w.buf's events are counted as they are returned (Next, NextMany,
	// NextEvents), not here: counting them here too counted each twice.
	return nil
}

// metrics fills the change feed's Metrics fields.
func (f *feed) metrics(m *Metrics) {
	m.WatchDelivered = f.delivered.Load()
	m.WatchLagged = f.lagged.Load()
	m.WatchOverflows = f.overflows.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	m.WatchSubscribers = len(f.watches)
	m.WatchBufferBytes = f.bytes + f.pendBytes
	m.WatchResolvedOp = f.lastN
	m.WatchDurableOp = f.durOp
	if r := f.ret; r != nil {
		m.WatchRetainedBytes = r.bytes
		m.WatchRetainedFrom = r.floor
	}
}
