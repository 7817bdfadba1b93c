package bench

import (
	"context"
	"math/rand/v2"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bitslice"
)

// w1SparseDensity is the share of W1/lookup-sparse's bits that are set
// (0.1%, W10's density).
const w1SparseDensity = 1000

// w1Sparse is W1/lookup-sparse: a slice of W1's length with 0.1% of its
// bits set at random, flushed to an engine (nothing pending) and to a raw
// bitslice file, and held by a roaring bitmap (RunOptimized); looked up at
// W1's indexes. W1's other lookup rows hold a dense set (the coin-flip
// Sets leave about a tenth of the bits set), where roaring keeps bitmap
// containers; here it keeps array containers, its sparse case.
type w1Sparse struct {
	nbits   uint64
	set     int // how many bits are set
	bits    *kvbuf.Bits
	raw     *bitslice.File
	rb      *roaring.Bitmap
	lookups []uint64
}

// setupW1Sparse builds W1/lookup-sparse over lookups (W1's indexes), with
// its own random stream so that W1's other inputs stay as they were.
func setupW1Sparse(ctx context.Context, s *Suite, c Config, nbits uint64, lookups []uint64) (*w1Sparse, error) {
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+1))
	set := distinct(rng, int(max(nbits/w1SparseDensity, 1)), nbits)
	slices.Sort(set)
	st := &w1Sparse{nbits: nbits, set: len(set), lookups: lookups, rb: roaring.New()}
	db, err := openEngine(s, "engine-sparse", pendingOptions(0))
	if err != nil {
		return nil, err
	}
	if st.bits, err = db.Bits("w1-sparse"); err != nil {
		return nil, err
	}
	if st.raw, err = createBits(s, "raw-sparse.bits", nbits); err != nil {
		return nil, err
	}
	ones := make([]bool, len(set))
	for k, i := range set {
		ones[k] = true
		if err := st.raw.Set(i, true); err != nil {
			return nil, err
		}
		st.rb.Add(uint32(i))
		if err := cancelled(ctx, k); err != nil {
			return nil, err
		}
	}
	st.rb.RunOptimize()
	// The engine's slice is as long as the raw file's: its last bit is
	// set, then cleared, in the same write (as W10's).
	if err := st.bits.SetMany(ctx, append(slices.Clone(set), nbits-1, nbits-1),
		append(ones, true, set[len(set)-1] == nbits-1), 0); err != nil {
		return nil, err
	}
	if err := db.Flush(ctx); err != nil {
		return nil, err
	}
	return st, st.raw.Sync()
}

// workload is W1/lookup-sparse. The memory column is each side's bytes
// per set bit: the engine's (and the raw file's) data words, mapped, not
// heap; roaring's GetSizeInBytes.
func (st *w1Sparse) workload() *Workload {
	fileBytes := float64((st.nbits+63)/64*8) / float64(st.set)
	return &Workload{Name: "W1/lookup-sparse", Unit: "lookup", Ops: len(st.lookups), Parallel: true, Impls: []Impl{
		{Name: ImplKvbuf, BytesPerEntry: fileBytes, Loop: w1SparseGet{st}},
		{Name: ImplRaw, BytesPerEntry: fileBytes, Loop: w1SparseRaw{st}},
		{Name: ImplRoaring, BytesPerEntry: float64(st.rb.GetSizeInBytes()) / float64(max(st.rb.GetCardinality(), 1)),
			Loop: w1SparseContains{st}},
	}}
}

type (
	w1SparseGet      struct{ st *w1Sparse }
	w1SparseRaw      struct{ st *w1Sparse }
	w1SparseContains struct{ st *w1Sparse }
)

func (x w1SparseGet) Loop(_, lo, hi int) (int64, error) {
	return getLoopOf(x.st.bits, x.st.lookups[lo:hi])
}

func (x w1SparseRaw) Loop(_, lo, hi int) (int64, error) {
	return rawLoopOf(x.st.raw, x.st.lookups[lo:hi]), nil
}

func (x w1SparseContains) Loop(_, lo, hi int) (int64, error) {
	return containsLoopOf(x.st.rb, x.st.lookups[lo:hi]), nil
}
