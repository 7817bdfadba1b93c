package bench

import (
	"github.com/RoaringBitmap/roaring/v2"
)

// ImplRoaring is a github.com/RoaringBitmap/roaring/v2 bitmap holding the
// whole set in memory: what a careful Go host keeps instead of a pending
// structure in front of a file (W1, W6, W10).
const ImplRoaring = "roaring"

// w1Roaring is W1's roaring baseline: one bitmap holding every Set of the
// workload, the flushed and the pending ones alike (a roaring host has no
// file to fall back on). Bitmaps are not safe for concurrent writes, but
// W1's Sets happen in setup and prepare, before any lookup.
type w1Roaring struct{ rb *roaring.Bitmap }

func newW1Roaring() *w1Roaring { return &w1Roaring{rb: roaring.New()} }

// set applies one of the workload's Sets.
func (r *w1Roaring) set(ch w1Change) {
	if ch.v {
		r.rb.Add(uint32(ch.i))
	} else {
		r.rb.Remove(uint32(ch.i))
	}
}

// bytesPerBit is the bitmap's size (roaring's own count of its
// containers) per set bit.
func (r *w1Roaring) bytesPerBit() float64 {
	return float64(r.rb.GetSizeInBytes()) / float64(max(r.rb.GetCardinality(), 1))
}

// w1RoaringLoop is the row: Contains per lookup.
type w1RoaringLoop struct {
	r       *w1Roaring
	lookups []uint64
}

func (x w1RoaringLoop) Loop(_, lo, hi int) (int64, error) {
	var n int64
	rb := x.r.rb
	for _, i := range x.lookups[lo:hi] {
		n += b2i(rb.Contains(uint32(i)))
	}
	return n, nil
}

// roaringRow is W1's roaring row. Its memory figure is the bitmap's size
// per set bit at setup (after the first million Sets).
func (st *w1State) roaringRow() Impl {
	return Impl{Name: ImplRoaring, Loop: w1RoaringLoop{st.roar, st.lookups}, BytesPerEntry: st.roar.bytesPerBit()}
}
