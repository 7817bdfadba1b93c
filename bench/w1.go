package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
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

// w1State is everything W1's implementations read.
type w1State struct {
	nbits   uint64
	lookups []uint64
	bits    *kvbuf.Bits // engine A
	twin    *kvbuf.Bits // engine B: the same changes, for the snapshot rows
	ov      *buffer.Bits
	raw     *bitslice.File

	mu   sync.Mutex
	mm   map[uint64]bool
	rwmu sync.RWMutex
	rwm  map[uint64]bool
	sm   sync.Map
	xm   *xsync.Map[uint64, bool]
}

// The W1 implementations. Each baseline is a pending map in front of the
// raw file: the map first, the file on a miss (what a buffered bitslice
// guarded by a lock or a concurrent map does).
type (
	w1Kvbuf struct {
		s *w1State
		b *kvbuf.Bits
	}
	w1KvbufMany struct{ s *w1State }
	w1Overlay   struct{ s *w1State }
	w1Raw       struct{ s *w1State }
	w1Mutex     struct{ s *w1State }
	w1RWMutex   struct{ s *w1State }
	w1SyncMap   struct{ s *w1State }
	w1XsyncMap  struct{ s *w1State }
)

func (x w1Kvbuf) Loop(_, lo, hi int) (int64, error) {
	var n int64
	b := x.b
	for _, i := range x.s.lookups[lo:hi] {
		v, err := b.Get(i)
		if err != nil {
			return n, err
		}
		n += b2i(v)
	}
	return n, nil
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

func (x w1Overlay) Loop(_, lo, hi int) (int64, error) {
	var n int64
	ov := x.s.ov
	for _, i := range x.s.lookups[lo:hi] {
		n += b2i(ov.Get(i))
	}
	return n, nil
}

func (x w1Raw) Loop(_, lo, hi int) (int64, error) {
	var n int64
	raw := x.s.raw
	for _, i := range x.s.lookups[lo:hi] {
		n += b2i(raw.Get(i))
	}
	return n, nil
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

// setupW1 builds W1: two kvbuf engines (A, and its twin B for the snapshot
// rows) with a bitslice, the buffer overlay over its own file and a raw
// bitslice file, all holding the same flushed Sets; the lookup indexes; the
// map baselines. The second workload's prepare step adds the same pending
// changes to every implementation.
func setupW1(ctx context.Context, s *Suite, c Config) error {
	nbits := uint64(c.scaled(w1Bits, 64))
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed))
	st := &w1State{nbits: nbits, mm: map[uint64]bool{}, rwm: map[uint64]bool{}, xm: xsync.NewMap[uint64, bool]()}

	dbA, err := openEngine(s, "engine")
	if err != nil {
		return err
	}
	dbB, err := openEngine(s, "engine-twin")
	if err != nil {
		return err
	}
	if st.bits, err = dbA.Bits("w1"); err != nil {
		return err
	}
	if st.twin, err = dbB.Bits("w1"); err != nil {
		return err
	}
	if st.raw, err = createBits(s, "raw.bits", nbits); err != nil {
		return err
	}
	// The overlay row: the buffer package's Bits over its own file, without
	// the engine façade (its closing check and error wrapping).
	ovFile, err := createBits(s, "overlay.bits", nbits)
	if err != nil {
		return err
	}
	if st.ov, err = buffer.NewBits(ovFile, nil, nil); err != nil {
		return err
	}

	var op uint64
	for _, ch := range w1Changes(rng, c.scaled(w1Sets, 16), nbits) {
		op++
		for _, b := range []*kvbuf.Bits{st.bits, st.twin} {
			if err := b.Set(ctx, ch.i, ch.v, op); err != nil {
				return err
			}
		}
		if err := st.ov.Set(ch.i, ch.v); err != nil {
			return err
		}
		if err := st.raw.Set(ch.i, ch.v); err != nil {
			return err
		}
	}
	for _, db := range []*kvbuf.DB{dbA, dbB} {
		if err := db.Flush(ctx); err != nil {
			return err
		}
	}
	if gen := st.ov.Freeze(1); gen != nil {
		if err := gen.Write(ctx, op); err != nil {
			return err
		}
		st.ov.Release(1)
	}
	st.ov.Settle()
	st.raw.SetWatermark(op)
	if err := st.raw.Sync(); err != nil {
		return err
	}
	st.lookups = make([]uint64, c.scaled(w1Lookups, 16))
	for k := range st.lookups {
		st.lookups[k] = rng.Uint64N(nbits)
	}

	impls := func(floorRaw bool) []Impl {
		return []Impl{
			{Name: ImplKvbuf, Loop: w1Kvbuf{st, st.bits}},
			{Name: ImplKvbufGetMany, Loop: w1KvbufMany{st}},
			{Name: ImplKvbufOverlay, Loop: w1Overlay{st}},
			{Name: ImplRaw, Floor: floorRaw, Loop: w1Raw{st}},
			{Name: ImplMutexMap, Loop: w1Mutex{st}},
			{Name: ImplRWMutexMap, Loop: w1RWMutex{st}},
			{Name: ImplSyncMap, Loop: w1SyncMap{st}},
			{Name: ImplXsyncMap, Loop: w1XsyncMap{st}},
		}
	}
	pendingSets := c.scaled(w1Sets, 16)
	ops := len(st.lookups)
	var snaps []*kvbuf.Snapshot
	s.onClose(func() error {
		for _, sn := range snaps {
			sn.Close()
		}
		return nil
	})
	openSnaps := func(n int) func(context.Context) error {
		return func(context.Context) error {
			for len(snaps) < n {
				sn, err := dbB.NewSnapshot()
				if err != nil {
					return err
				}
				snaps = append(snaps, sn)
			}
			return nil
		}
	}
	snapRows := func(name string, n int) *Workload {
		return &Workload{Name: name, Unit: "lookup", Ops: ops, prepare: openSnaps(n), Impls: []Impl{
			{Name: ImplKvbuf, Loop: w1Kvbuf{st, st.twin}},
			{Name: ImplWithoutSnapshots, Loop: w1Kvbuf{st, st.bits}},
		}}
	}
	s.add(
		&Workload{Name: "W1/lookup-without-pending-changes", Unit: "lookup", Ops: ops, Parallel: true, Impls: impls(false)},
		&Workload{Name: "W1/lookup-with-pending-changes", Unit: "lookup", Ops: ops, Parallel: true, Impls: impls(true),
			prepare: func(ctx context.Context) error {
				for _, ch := range w1Changes(rng, pendingSets, nbits) {
					op++
					for _, b := range []*kvbuf.Bits{st.bits, st.twin} {
						if err := b.Set(ctx, ch.i, ch.v, op); err != nil {
							return err
						}
					}
					if err := st.ov.Set(ch.i, ch.v); err != nil {
						return err
					}
					st.mm[ch.i] = ch.v
					st.rwm[ch.i] = ch.v
					st.sm.Store(ch.i, ch.v)
					st.xm.Store(ch.i, ch.v)
				}
				if n, err := st.bits.Len(); err != nil || n > (nbits+63)&^63 {
					return fmt.Errorf("engine bitslice length %d (%v), want at most %d rounded up to a word", n, err, nbits)
				}
				return nil
			}},
		&Workload{Name: "W1/count-with-pending-changes", Unit: "count", Impls: []Impl{
			{Name: ImplKvbuf, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				var c uint64
				var err error
				for range w1CountReps {
					if c, err = st.bits.Count(); err != nil {
						return RoundResult{}, err
					}
				}
				return RoundResult{Ops: w1CountReps, Checks: int64(c)}, nil
			})},
			{Name: ImplGetLoop, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				n, _, err := getLoop(st.bits)
				return RoundResult{Ops: 1, Checks: n}, err
			})},
		}},
		&Workload{Name: "W1/ones-with-pending-changes", Unit: "pass", Impls: []Impl{
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
	)
	return nil
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
