package bench

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
)

// W10 sizes at Scale 1 (doc/workloads.md).
const (
	w10Bits    = 100_000_000 // the sparse slice
	w10Set     = 100_000     // 0.1% of it set, uniformly
	w10Lookups = 1_000_000
	w10Pending = 1_000_000 // W10/pending-memory-1m: sets left pending
)

// Implementation names of W10's rows.
const (
	// ImplRoaringValues is roaring's iter.Seq (roaring.Values), the same
	// kind of API as Bits.Ones.
	ImplRoaringValues = "roaring-values"
	// ImplRoaringMany is roaring's batch iteration (ManyIterator.NextMany
	// into a buffer of 256), its fastest way through a bitmap.
	ImplRoaringMany = "roaring-nextmany"
	// ImplKvbufNextOnes is the engine's batch read (Bits.NextOnes into a
	// buffer of 256), the counterpart of roaring's NextMany.
	ImplKvbufNextOnes = "kvbuf-nextones"
	// ImplRawScan is a loop over the raw file's words (bitslice.File.Word),
	// every word read.
	ImplRawScan = "raw-word-scan"
)

// w10State is W10: a slice of 100,000,000 bits with 0.1% of them set at
// random, flushed to an engine (default Options but no interval flush) and
// to a raw bitslice file, and held by a roaring bitmap.
type w10State struct {
	nbits   uint64
	set     []uint64 // the set bits, sorted
	sum     int64    // their sum
	db      *kvbuf.DB
	bits    *kvbuf.Bits
	raw     *bitslice.File
	rb      *roaring.Bitmap
	lookups []uint64
	pending []uint64 // W10/pending-memory-1m's indexes
	ones    []bool   // true for each of them
	round   atomic.Uint64
}

// setupW10 builds W10 (sparse bitslices): the set, the engine, the raw file
// and the bitmap holding it, the lookup indexes.
func setupW10(ctx context.Context, s *Suite, c Config) error {
	st := &w10State{nbits: uint64(c.scaled(w10Bits, 1<<16))}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+10))
	st.set = distinct(rng, c.scaled(w10Set, 16), st.nbits)
	slices.Sort(st.set)
	for _, i := range st.set {
		st.sum += int64(i)
	}
	var err error
	if st.db, err = openEngine(s, "engine", &kvbuf.Options{FlushInterval: -1}); err != nil {
		return err
	}
	if st.bits, err = st.db.Bits("w10"); err != nil {
		return err
	}
	if st.raw, err = createBits(s, "raw.bits", st.nbits); err != nil {
		return err
	}
	st.rb = roaring.New()
	ones := make([]bool, len(st.set))
	for k, i := range st.set {
		ones[k] = true
		if err := st.raw.Set(i, true); err != nil {
			return err
		}
		st.rb.Add(uint32(i))
		if err := cancelled(ctx, k); err != nil {
			return err
		}
	}
	st.rb.RunOptimize()
	// The engine's slice is as long as the raw file's: its last bit is
	// set, then cleared, in the same write.
	if err := st.bits.SetMany(ctx, append(slices.Clone(st.set), st.nbits-1, st.nbits-1),
		append(ones, true, st.set[len(st.set)-1] == st.nbits-1), 0); err != nil {
		return err
	}
	if err := st.db.Flush(ctx); err != nil {
		return err
	}
	if err := st.raw.Sync(); err != nil {
		return err
	}
	st.lookups = make([]uint64, c.scaled(w10Lookups, 16))
	for k := range st.lookups {
		if k%2 == 0 {
			st.lookups[k] = st.set[rng.IntN(len(st.set))] // half hits
		} else {
			st.lookups[k] = rng.Uint64N(st.nbits)
		}
	}
	st.pending = make([]uint64, c.scaled(w10Pending, 16))
	st.ones = make([]bool, len(st.pending))
	for k := range st.pending {
		st.pending[k] = rng.Uint64N(st.nbits)
		st.ones[k] = true
	}
	s.add(st.workloads()...)
	return nil
}

// bitsBytesPerBit is the engine's memory per set bit: the file's data
// bytes (mapped, not heap) per set bit.
func (st *w10State) bitsBytesPerBit() float64 {
	return float64((st.nbits+63)/64*8) / float64(len(st.set))
}

func (st *w10State) roaringBytesPerBit(rb *roaring.Bitmap) float64 {
	return float64(rb.GetSizeInBytes()) / float64(max(rb.GetCardinality(), 1))
}

func (st *w10State) workloads() []*Workload {
	pass := func(f func() (n, sum int64, err error)) Rounder {
		return RoundFunc(func(context.Context, int) (RoundResult, error) {
			n, sum, err := f()
			if err == nil && (n != int64(len(st.set)) || sum != st.sum) {
				err = fmt.Errorf("found %d set bits (sum %d), want %d (sum %d)", n, sum, len(st.set), st.sum)
			}
			return RoundResult{Ops: 1, Checks: n ^ sum<<20}, err
		})
	}
	return []*Workload{
		{Name: "W10/ones-sparse", Unit: "pass", Impls: []Impl{
			{Name: ImplKvbuf, BytesPerEntry: st.bitsBytesPerBit(), Round: pass(func() (n, sum int64, err error) {
				for i := range st.bits.Ones(0) {
					n++
					sum += int64(i)
				}
				return n, sum, nil
			})},
			{Name: ImplKvbufNextOnes, Round: pass(func() (n, sum int64, err error) {
				var buf [256]uint64
				for k, next, err := st.bits.NextOnes(0, buf[:]); k > 0 || err != nil; k, next, err = st.bits.NextOnes(next, buf[:]) {
					if err != nil {
						return n, sum, err
					}
					for _, i := range buf[:k] {
						n++
						sum += int64(i)
					}
				}
				return n, sum, nil
			})},
			{Name: ImplRoaring, BytesPerEntry: st.roaringBytesPerBit(st.rb), Round: pass(func() (n, sum int64, err error) {
				st.rb.Iterate(func(x uint32) bool {
					n++
					sum += int64(x)
					return true
				})
				return n, sum, nil
			})},
			{Name: ImplRoaringValues, Round: pass(func() (n, sum int64, err error) {
				for x := range roaring.Values(st.rb) {
					n++
					sum += int64(x)
				}
				return n, sum, nil
			})},
			{Name: ImplRoaringMany, Round: pass(func() (n, sum int64, err error) {
				var buf [256]uint32
				it := st.rb.ManyIterator()
				for k := it.NextMany(buf[:]); k > 0; k = it.NextMany(buf[:]) {
					for _, x := range buf[:k] {
						n++
						sum += int64(x)
					}
				}
				return n, sum, nil
			})},
			{Name: ImplRawScan, Round: pass(func() (n, sum int64, err error) {
				nw := (st.nbits + 63) / 64
				for w := range nw {
					for x := st.raw.Word(w); x != 0; x &= x - 1 {
						n++
						sum += int64(w<<6 | uint64(bits.TrailingZeros64(x)))
					}
				}
				return n, sum, nil
			})},
		}},
		{Name: "W10/lookup-sparse", Unit: "lookup", Ops: len(st.lookups), Parallel: true, Impls: []Impl{
			{Name: ImplKvbuf, Loop: w10Get{st}},
			{Name: ImplRoaring, Loop: w10Contains{st}},
			{Name: ImplRaw, Loop: w10Raw{st}},
		}},
		{Name: "W10/count-sparse", Unit: "count", Impls: []Impl{
			{Name: ImplKvbuf, Round: countRound(st.bits)},
			{Name: ImplRoaring, Round: RoundFunc(func(context.Context, int) (RoundResult, error) {
				var c uint64
				for range w1CountReps {
					c = st.rb.GetCardinality()
				}
				return RoundResult{Ops: w1CountReps, Checks: int64(c)}, nil
			})},
		}},
		{Name: "W10/pending-memory-1m", Unit: "set", NoCheck: true, Impls: []Impl{
			{Name: ImplKvbufSetMany, Round: RoundFunc(st.pendingKvbuf)},
			{Name: ImplRoaring, Round: RoundFunc(st.pendingRoaring)},
		}},
	}
}

type (
	w10Get      struct{ st *w10State }
	w10Contains struct{ st *w10State }
	w10Raw      struct{ st *w10State }
)

func (x w10Get) Loop(_, lo, hi int) (int64, error) { return getLoopOf(x.st.bits, x.st.lookups[lo:hi]) }

func (x w10Contains) Loop(_, lo, hi int) (int64, error) {
	return containsLoopOf(x.st.rb, x.st.lookups[lo:hi]), nil
}

func (x w10Raw) Loop(_, lo, hi int) (int64, error) {
	return rawLoopOf(x.st.raw, x.st.lookups[lo:hi]), nil
}

// pendingKvbuf is W10/pending-memory-1m's engine row: 1,000,000 random Sets
// to 1 over the sparse slice in one SetMany, left pending; the row reports
// the engine's pending bytes per Set (Metrics.PendingBytes) and live heap
// per Set, checks the count, then (not timed) clears the bits it set that
// the sparse set does not hold and flushes.
func (st *w10State) pendingKvbuf(ctx context.Context, _ int) (RoundResult, error) {
	runtime.GC()
	h0 := liveHeap()
	res := RoundResult{Ops: len(st.pending)}
	err := Timed(&res, func() error { return st.bits.SetMany(ctx, st.pending, st.ones, 0) })
	if err != nil {
		return res, err
	}
	res.BytesPerEntry = perEntry(h0, liveHeap(), len(st.pending))
	res.AccountedBytes = float64(st.db.Metrics().PendingBytes) / float64(len(st.pending))
	want := st.unionCount()
	if c, err := st.bits.Count(); err != nil || c != want {
		return res, fmt.Errorf("count after the sets %d (%v), want %d", c, err, want)
	}
	// Back to the sparse set, durably: clear what it does not hold.
	in := make(map[uint64]bool, len(st.set))
	for _, i := range st.set {
		in[i] = true
	}
	var clear []uint64
	for _, i := range st.pending {
		if !in[i] {
			clear = append(clear, i)
		}
	}
	if err := st.bits.SetMany(ctx, clear, make([]bool, len(clear)), 0); err != nil {
		return res, err
	}
	if err := st.db.Flush(ctx); err != nil {
		return res, err
	}
	if c, err := st.bits.Count(); err != nil || c != uint64(len(st.set)) {
		return res, fmt.Errorf("count after clearing %d (%v), want %d", c, err, len(st.set))
	}
	return res, nil
}

// unionCount is the number of bits set once the pending Sets are applied.
func (st *w10State) unionCount() uint64 {
	u := st.rb.Clone()
	for _, i := range st.pending {
		u.Add(uint32(i))
	}
	return u.GetCardinality()
}

// pendingRoaring is the same Sets into a fresh bitmap: its size per Set.
func (st *w10State) pendingRoaring(context.Context, int) (RoundResult, error) {
	runtime.GC()
	h0 := liveHeap()
	res := RoundResult{Ops: len(st.pending)}
	rb := roaring.New()
	_ = Timed(&res, func() error {
		for _, i := range st.pending {
			rb.Add(uint32(i))
		}
		return nil
	})
	res.BytesPerEntry = perEntry(h0, liveHeap(), len(st.pending))
	res.AccountedBytes = float64(rb.GetSizeInBytes()) / float64(len(st.pending))
	runtime.KeepAlive(rb)
	return res, nil
}

// containsLoopOf is the roaring rows' lookup loop (W1/lookup-sparse, W10):
// Contains over lookups, counting the bits set.
func containsLoopOf(rb *roaring.Bitmap, lookups []uint64) int64 {
	var n int64
	for _, i := range lookups {
		n += b2i(rb.Contains(uint32(i)))
	}
	return n
}
