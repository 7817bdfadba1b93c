package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
)

// W1 sizes at Scale 1 (doc/workloads.md).
const (
	w1Bits    = 4_194_304
	w1Sets    = 1_000_000
	w1Lookups = 1_000_000
	// manyBatch is the batch size of the GetMany rows.
	manyBatch = 64
	// w1CountReps is how many Count calls one W1/count round makes (Count
	// is O(1): one call is too short to time).
	w1CountReps = 100_000
)

// w1Change is one random Set of the workload.
type w1Change struct {
	i uint64
	v bool
}

// w1Changes draws n Sets over [0, nbits).
func w1Changes(rng *rand.Rand, n int, nbits uint64) []w1Change {
	c := make([]w1Change, n)
	for k := range c {
		c[k] = w1Change{rng.Uint64N(nbits), rng.IntN(2) == 1}
	}
	return c
}

// b2i is 1 for true: counting with it compiles to a flag set, not a branch
// on a coin flip.
func b2i(v bool) int64 {
	var x int64
	if v {
		x = 1
	}
	return x
}

// w1State is everything W1's implementations read. Every baseline keeps
// its pending changes in front of the raw file: the pending structure
// first, the file on a miss (what a buffered bitslice guarded by a lock,
// a concurrent map or atomic words does).
type w1State struct {
	nbits   uint64
	op      uint64 // the engines' last op number
	lookups []uint64
	bits    *kvbuf.Bits // engine A
	twin    *kvbuf.Bits // engine B: the same changes, for the snapshot rows
	def     *kvbuf.Bits // engine C: the same changes, default Options
	dbs     []*kvbuf.DB // A, B, C
	raw     *bitslice.File
	roar    *w1Roaring // w1_roaring.go

	mu   sync.Mutex
	mm   map[uint64]bool
	rwmu sync.RWMutex
	rwm  map[uint64]bool
	sm   sync.Map
	xm   *xsync.Map[uint64, bool]

	// Dense pending words: bit i is pending if mask[i/64] has it, with the
	// value in val[i/64]; behind wmu, or read and written atomically
	// (value first, then mask, so a reader that sees the mask bit sees the
	// value written with it).
	wmu         sync.RWMutex
	wmask       []uint64
	wval        []uint64
	amask, aval []atomic.Uint64
}

// engines are the bitslices of the three engines, which get every change.
func (s *w1State) engines() []*kvbuf.Bits { return []*kvbuf.Bits{s.bits, s.twin, s.def} }

// pend makes ch pending in every implementation that keeps changes.
func (s *w1State) pend(ctx context.Context, ch w1Change) error {
	s.op++
	for _, b := range s.engines() {
		if err := b.Set(ctx, ch.i, ch.v, s.op); err != nil {
			return err
		}
	}
	s.mm[ch.i] = ch.v
	s.rwm[ch.i] = ch.v
	s.sm.Store(ch.i, ch.v)
	s.xm.Store(ch.i, ch.v)
	s.roar.set(ch)
	w, bit := ch.i/64, uint64(1)<<(ch.i%64)
	s.wmask[w] |= bit
	if ch.v {
		s.wval[w] |= bit
		s.aval[w].Or(bit)
	} else {
		s.wval[w] &^= bit
		s.aval[w].And(^bit)
	}
	s.amask[w].Or(bit)
	return nil
}

// The W1 implementations.
type (
	w1Kvbuf struct {
		s *w1State
		b *kvbuf.Bits
	}
	w1KvbufMany struct{ s *w1State }
	w1Raw       struct{ s *w1State }
	w1Mutex     struct{ s *w1State }
	w1RWMutex   struct{ s *w1State }
	w1SyncMap   struct{ s *w1State }
	w1XsyncMap  struct{ s *w1State }
	w1Words     struct{ s *w1State }
	w1Atomic    struct{ s *w1State }
)

func (x w1Kvbuf) Loop(_, lo, hi int) (int64, error) { return getLoopOf(x.b, x.s.lookups[lo:hi]) }

// getLoopOf is the engine's lookup row of W1 and W10: Get of every index,
// the set bits counted.
func getLoopOf(b *kvbuf.Bits, lookups []uint64) (int64, error) {
	var n int64
	for _, i := range lookups {
		v, err := b.Get(i)
		if err != nil {
			return n, err
		}
		n += b2i(v)
	}
	return n, nil
}

// countRound is the engine's count row of W1 and W10: w1CountReps Counts
// of b, the last one checked. It is not inlined: inlined into its callers,
// the closure it returns was cloned there and compiled without inlining
// Bits.Count, one more call per Count than the engine's callers pay
// (sweep14).
//
//go:noinline
func countRound(b *kvbuf.Bits) RoundFunc {
	return func(context.Context, int) (RoundResult, error) {
		var c uint64
		var err error
		for range w1CountReps {
			if c, err = b.Count(); err != nil {
				return RoundResult{}, err
			}
		}
		return RoundResult{Ops: w1CountReps, Checks: int64(c)}, nil
	}
}

func (x w1KvbufMany) Loop(_, lo, hi int) (int64, error) {
	var n int64
	var out [manyBatch]bool
	b, idx := x.s.bits, x.s.lookups
	for j := lo; j < hi; j += manyBatch {
		e := min(j+manyBatch, hi)
		if err := b.GetMany(idx[j:e], out[:]); err != nil {
			return n, err
		}
		for _, v := range out[:e-j] {
			n += b2i(v)
		}
	}
	return n, nil
}

func (x w1Raw) Loop(_, lo, hi int) (int64, error) {
	return rawLoopOf(x.s.raw, x.s.lookups[lo:hi]), nil
}

// rawLoopOf is the raw rows' loop (W1, W1/lookup-sparse, W10): the mapped
// file's Get over lookups, counting the bits set.
func rawLoopOf(raw *bitslice.File, lookups []uint64) int64 {
	var n int64
	for _, i := range lookups {
		n += b2i(raw.Get(i))
	}
	return n
}

func (x w1Mutex) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	for _, i := range s.lookups[lo:hi] {
		s.mu.Lock()
		v, ok := s.mm[i]
		s.mu.Unlock()
		if !ok {
			v = s.raw.Get(i)
		}
		n += b2i(v)
	}
	return n, nil
}

func (x w1RWMutex) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	for _, i := range s.lookups[lo:hi] {
		s.rwmu.RLock()
		v, ok := s.rwm[i]
		s.rwmu.RUnlock()
		if !ok {
			v = s.raw.Get(i)
		}
		n += b2i(v)
	}
	return n, nil
}

func (x w1SyncMap) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	for _, i := range s.lookups[lo:hi] {
		var v bool
		if a, ok := s.sm.Load(i); ok {
			v = a.(bool)
		} else {
			v = s.raw.Get(i)
		}
		n += b2i(v)
	}
	return n, nil
}

func (x w1XsyncMap) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	for _, i := range s.lookups[lo:hi] {
		v, ok := s.xm.Load(i)
		if !ok {
			v = s.raw.Get(i)
		}
		n += b2i(v)
	}
	return n, nil
}

func (x w1Words) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	for _, i := range s.lookups[lo:hi] {
		w, bit := i/64, uint64(1)<<(i%64)
		s.wmu.RLock()
		m, v := s.wmask[w], s.wval[w]
		s.wmu.RUnlock()
		if m&bit != 0 {
			n += b2i(v&bit != 0)
		} else {
			n += b2i(s.raw.Get(i))
		}
	}
	return n, nil
}

func (x w1Atomic) Loop(_, lo, hi int) (int64, error) {
	var n int64
	s := x.s
	for _, i := range s.lookups[lo:hi] {
		w, bit := i/64, uint64(1)<<(i%64)
		if s.amask[w].Load()&bit != 0 {
			n += b2i(s.aval[w].Load()&bit != 0)
		} else {
			n += b2i(s.raw.Get(i))
		}
	}
	return n, nil
}

// setupW1 builds W1: three kvbuf engines with a bitslice (A; its twin B for
// the snapshot rows; C opened with default Options), a raw bitslice file,
// all holding the same flushed Sets; the lookup indexes; the baselines'
// empty pending structures; and W1/lookup-sparse's own engine, file and
// bitmap (w1_sparse.go). The second workload's prepare step adds the
// same pending changes to every implementation.
func setupW1(ctx context.Context, s *Suite, c Config) error {
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed))
	st, err := openW1(s, nbits)
	if err != nil {
		return err
	}
	if err := st.preload(ctx, w1Changes(rng, c.scaled(w1Sets, 16), nbits)); err != nil {
		return err
	}
	st.lookups = make([]uint64, c.scaled(w1Lookups, 16))
	for k := range st.lookups {
		st.lookups[k] = rng.Uint64N(nbits)
	}
	pending := w1Changes(rng, c.scaled(w1Sets, 16), nbits)
	sparse, err := setupW1Sparse(ctx, s, c, nbits, st.lookups)
	if err != nil {
		return err
	}
	s.add(st.lookupWorkloads(pending)...)
	s.add(sparse.workload())
	s.add(st.featureWorkloads(s)...)
	return nil
}

// openW1 opens W1's engines and raw file with empty pending structures.
func openW1(s *Suite, nbits uint64) (*w1State, error) {
	st := &w1State{nbits: nbits, mm: map[uint64]bool{}, rwm: map[uint64]bool{}, xm: xsync.NewMap[uint64, bool](),
		wmask: make([]uint64, (nbits+63)/64), wval: make([]uint64, (nbits+63)/64),
		amask: make([]atomic.Uint64, (nbits+63)/64), aval: make([]atomic.Uint64, (nbits+63)/64), roar: newW1Roaring()}
	// The bit tables of 1M pending Sets take a few MiB: the default
	// pending limit holds them.
	opts := pendingOptions(0)
	for _, e := range []struct {
		dir  string
		opts *kvbuf.Options
		b    **kvbuf.Bits
	}{{"engine", opts, &st.bits}, {"engine-twin", opts, &st.twin}, {"engine-default", nil, &st.def}} {
		db, err := openEngine(s, e.dir, e.opts)
		if err != nil {
			return nil, err
		}
		if *e.b, err = db.Bits("w1"); err != nil {
			return nil, err
		}
		st.dbs = append(st.dbs, db)
	}
	var err error
	st.raw, err = createBits(s, "raw.bits", nbits)
	return st, err
}

// preload applies changes to the engines and the raw file and makes them
// durable everywhere.
func (st *w1State) preload(ctx context.Context, changes []w1Change) error {
	for k, ch := range changes {
		if err := cancelled(ctx, k); err != nil {
			return err
		}
		st.op++
		for _, b := range st.engines() {
			if err := b.Set(ctx, ch.i, ch.v, st.op); err != nil {
				return err
			}
		}
		if err := st.raw.Set(ch.i, ch.v); err != nil {
			return err
		}
		st.roar.set(ch)
	}
	for _, db := range st.dbs {
		if err := db.Flush(ctx); err != nil {
			return err
		}
	}
	st.raw.SetWatermark(st.op)
	return st.raw.Sync()
}

// lookupWorkloads are W1's two lookup workloads; the second's prepare step
// makes the pending changes pending everywhere.
func (st *w1State) lookupWorkloads(pending []w1Change) []*Workload {
	impls := func(pendingRows bool) []Impl {
		im := []Impl{
			{Name: ImplKvbuf, Loop: w1Kvbuf{st, st.bits}},
			{Name: ImplKvbufGetMany, Loop: w1KvbufMany{st}},
		}
		if pendingRows {
			im = append(im, Impl{Name: ImplKvbufDefault, Loop: w1Kvbuf{st, st.def}})
		}
		return append(im,
			Impl{Name: ImplRaw, Floor: pendingRows, Loop: w1Raw{st}},
			Impl{Name: ImplMutexMap, Loop: w1Mutex{st}},
			Impl{Name: ImplRWMutexMap, Loop: w1RWMutex{st}},
			Impl{Name: ImplSyncMap, Loop: w1SyncMap{st}},
			Impl{Name: ImplXsyncMap, Loop: w1XsyncMap{st}},
			Impl{Name: ImplRWMutexWords, Loop: w1Words{st}},
			Impl{Name: ImplAtomicWords, Loop: w1Atomic{st}},
			st.roaringRow(),
		)
	}
	ops := len(st.lookups)
	return []*Workload{
		{Name: "W1/lookup-without-pending-changes", Unit: "lookup", Ops: ops, Parallel: true, Impls: impls(false)},
		{Name: "W1/lookup-with-pending-changes", Unit: "lookup", Ops: ops, Parallel: true, Impls: impls(true),
			prepare: func(ctx context.Context) error {
				check := pendingGuard(st.dbs[0], st.dbs[1])
				for k, ch := range pending {
					if err := cancelled(ctx, k); err != nil {
						return err
					}
					if err := st.pend(ctx, ch); err != nil {
						return err
					}
				}
				if n, err := st.bits.Len(); err != nil || n > (st.nbits+63)&^63 {
					return fmt.Errorf("engine bitslice length %d (%v), want at most %d rounded up to a word", n, err, st.nbits)
				}
				return check()
			}},
	}
}

// featureWorkloads are W1's Count, Ones and open-snapshot rows.
func (st *w1State) featureWorkloads(s *Suite) []*Workload {
	open := snapshotOpener(s, st.dbs[1])
	snapRows := func(name string, n int) *Workload {
		return &Workload{Name: name, Unit: "lookup", Ops: len(st.lookups), Impls: []Impl{
			{Name: ImplKvbuf, Loop: w1Kvbuf{st, st.twin}},
			{Name: ImplWithoutSnapshots, Loop: w1Kvbuf{st, st.bits}},
		}, prepare: open(n)}
	}
	return []*Workload{
		{Name: "W1/count-with-pending-changes", Unit: "count", Impls: []Impl{
			{Name: ImplKvbuf, Round: countRound(st.bits)},
			{Name: ImplGetLoop, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				n, _, err := getLoop(st.bits)
				return RoundResult{Ops: 1, Checks: n}, err
			})},
		}},
		{Name: "W1/ones-with-pending-changes", Unit: "pass", Impls: []Impl{
			{Name: ImplKvbuf, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				var n, sum int64
				for i := range st.bits.Ones(0) {
					n++
					sum += int64(i)
				}
				return RoundResult{Ops: 1, Checks: n ^ sum<<20}, nil
			})},
			{Name: ImplGetLoop, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				n, sum, err := getLoop(st.bits)
				return RoundResult{Ops: 1, Checks: n ^ sum<<20}, err
			})},
		}},
		snapRows("W1/lookup-with-pending-changes-1-snapshot", 1),
		snapRows("W1/lookup-with-pending-changes-16-snapshots", 16),
	}
}

// getLoop counts the set bits of b, and sums their indexes, with a loop of
// Get over [0, Len): what Count and Ones replace.
func getLoop(b *kvbuf.Bits) (n, sum int64, err error) {
	l, err := b.Len()
	if err != nil {
		return 0, 0, err
	}
	for i := range l {
		v, err := b.Get(i)
		if err != nil {
			return 0, 0, err
		}
		if v {
			n++
			sum += int64(i)
		}
	}
	return n, sum, nil
}
