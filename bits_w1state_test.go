package kvbuf

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestBitsStateAfterFlush checks the state an engine leaves its overlay in
// after a flush of W1's shape (random sets over a slice created empty,
// flushed, then more sets): the state BenchmarkBitsW1State found equal to
// that of an overlay over a file created at its full length, on which
// Get's fast path over a dense active table relies (bits13): no sealed
// table (the flushed generation's table released), not direct, the active
// table dense and filtered, its filter covering the file.
func TestBitsStateAfterFlush(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), &Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bs, err := db.Bits("w1")
	if err != nil {
		t.Fatal(err)
	}
	const nbits, n = 1 << 20, 1 << 18
	rng := rand.New(rand.NewPCG(1, 2))
	op := uint64(0)
	set := func() {
		for range n {
			op++
			if err := bs.Set(ctx, rng.Uint64N(nbits), rng.IntN(2) == 1, op); err != nil {
				t.Fatal(err)
			}
		}
	}
	set()
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	set()
	s := bs.ov.State()
	if s.Direct || s.Sealed != 0 || !s.Dense || s.Unfiltered || uint64(s.FilterLen)*64*64 < s.NBits || s.NBits == 0 {
		t.Fatalf("state after flush and sets: %+v", s)
	}
}
