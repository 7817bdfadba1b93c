package buffer

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/puzpuzpuz/xsync/v4"
)

// W1 (workloads.md): a 4,194,304-bit slice, 1,000,000 seeded random Sets
// flushed, 1,000,000 pre-generated uniform lookups; then 1,000,000 more random
// Sets left pending (about 21% of lookups hit a pending index).
const (
	w1Bits    = 4_194_304
	w1Sets    = 1_000_000
	w1Lookups = 1_000_000
)

// w1Change is one random Set of the workload.
type w1Change struct {
	i uint64
	v bool
}

func w1Changes(rng *rand.Rand, n int) []w1Change {
	c := make([]w1Change, n)
	for k := range c {
		c[k] = w1Change{rng.Uint64N(w1Bits), rng.IntN(2) == 1}
	}
	return c
}

// runW1Lookups runs one round of the lookups on each of GOMAXPROCS goroutines
// (each starting at its own offset) and returns the number of true results,
// so that the lookups cannot be optimized away.
func runW1Lookups(lookups []uint64, get func(uint64) bool) int {
	p := runtime.GOMAXPROCS(0)
	round := func(g int) int {
		n := 0
		off := g * len(lookups) / p
		for _, i := range lookups[off:] {
			if get(i) {
				n++
			}
		}
		for _, i := range lookups[:off] {
			if get(i) {
				n++
			}
		}
		return n
	}
	if p == 1 {
		return round(0)
	}
	var wg sync.WaitGroup
	counts := make([]int, p)
	for g := range p {
		wg.Go(func() { counts[g] = round(g) })
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// benchW1Lookups times rounds of lookups; one op is one round per goroutine.
// ns/lookup is wall time per lookup over all goroutines (like RunParallel's
// ns/op), the figure to compare between rows.
func benchW1Lookups(b *testing.B, lookups []uint64, get func(uint64) bool) {
	b.ReportAllocs()
	for b.Loop() {
		runW1Lookups(lookups, get)
	}
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp/float64(len(lookups)*runtime.GOMAXPROCS(0)), "ns/lookup")
}

func BenchmarkW1(b *testing.B) {
	f, err := bitslice.Create(b.TempDir()+"/w1", w1Bits)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	bits := NewBits(f, nil)
	for _, c := range w1Changes(rng, w1Sets) {
		if err := bits.Set(c.i, c.v, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := bits.Apply(context.Background(), bits.Freeze()); err != nil {
		b.Fatal(err)
	}
	bits.Release()
	lookups := make([]uint64, w1Lookups)
	for k := range lookups {
		lookups[k] = rng.Uint64N(w1Bits)
	}

	b.Run("lookup-without-pending-changes/raw", func(b *testing.B) {
		benchW1Lookups(b, lookups, f.Get)
	})
	b.Run("lookup-without-pending-changes/kvbuf", func(b *testing.B) {
		benchW1Lookups(b, lookups, bits.Get)
	})

	// The same pending changes in the overlay and in each baseline; a
	// baseline lookup checks its map, then falls through to the file. Each
	// baseline builds its map in its own sub-benchmark and drops it after, so
	// no row runs beside another row's big heap.
	pending := w1Changes(rng, w1Sets)
	model := make(map[uint64]bool, w1Sets)
	for _, c := range pending {
		if err := bits.Set(c.i, c.v, 2); err != nil {
			b.Fatal(err)
		}
		model[c.i] = c.v
	}
	hits := 0
	for _, i := range lookups { // the overlay must agree with the model
		v, ok := model[i]
		if ok {
			hits++
		} else {
			v = f.Get(i)
		}
		if bits.Get(i) != v {
			b.Fatalf("overlay bit %d = %v, want %v", i, !v, v)
		}
	}
	model = nil
	runtime.GC()

	with := "lookup-with-pending-changes/"
	b.Run(with+"raw", func(b *testing.B) {
		benchW1Lookups(b, lookups, f.Get)
	})
	b.Run(with+"kvbuf", func(b *testing.B) {
		benchW1Lookups(b, lookups, bits.Get)
		b.ReportMetric(float64(hits)/float64(len(lookups)), "hit-ratio")
	})
	b.Run(with+"mutex+map", func(b *testing.B) {
		var mu sync.Mutex
		mm := make(map[uint64]bool)
		for _, c := range pending {
			mm[c.i] = c.v
		}
		benchW1Lookups(b, lookups, func(i uint64) bool {
			mu.Lock()
			v, ok := mm[i]
			mu.Unlock()
			if ok {
				return v
			}
			return f.Get(i)
		})
	})
	b.Run(with+"rwmutex+map", func(b *testing.B) {
		var rwmu sync.RWMutex
		rwm := make(map[uint64]bool)
		for _, c := range pending {
			rwm[c.i] = c.v
		}
		benchW1Lookups(b, lookups, func(i uint64) bool {
			rwmu.RLock()
			v, ok := rwm[i]
			rwmu.RUnlock()
			if ok {
				return v
			}
			return f.Get(i)
		})
	})
	b.Run(with+"sync.Map", func(b *testing.B) {
		var sm sync.Map
		for _, c := range pending {
			sm.Store(c.i, c.v)
		}
		benchW1Lookups(b, lookups, func(i uint64) bool {
			if v, ok := sm.Load(i); ok {
				return v.(bool)
			}
			return f.Get(i)
		})
	})
	b.Run(with+"xsync.Map", func(b *testing.B) {
		xm := xsync.NewMap[uint64, bool]()
		for _, c := range pending {
			xm.Store(c.i, c.v)
		}
		benchW1Lookups(b, lookups, func(i uint64) bool {
			if v, ok := xm.Load(i); ok {
				return v
			}
			return f.Get(i)
		})
	})
}
