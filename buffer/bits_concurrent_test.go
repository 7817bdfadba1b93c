package buffer

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBitsConcurrentModel runs writers, readers and a flushing goroutine (with
// injected Apply/Sync/Grow failures) at once and checks every read against a
// model:
//
//   - the file starts with bit i set iff i%3 == 0 over [0, fileBits);
//   - writers own disjoint indexes (i%writers == g); each owned index in the
//     write set moves once, from its initial value to its flipped value, and
//     half of them are re-written with the flipped value later (landing in
//     later generations and merges); every 512 writes a writer waits for a
//     flush cycle to complete, so flushes interleave with the writes;
//   - a writer reads its own write back at once (read-your-writes);
//   - readers check unwritten indexes always read their initial value, and
//     that once a reader saw an index flipped it never sees it unflipped
//     again (no read older than one already seen, across flushes);
//   - after a final clean flush the file holds exactly the model.
func TestBitsConcurrentModel(t *testing.T) {
	const (
		fileBits = 1 << 15
		maxIndex = 1 << 16 // writes reach past the file: grow at flush
		writers  = 4
		readers  = 2
	)
	b, ff := newBitsWithFaults(t, fileBits, nil)
	f := ff.File
	for i := uint64(0); i < fileBits; i += 3 {
		if err := f.Set(i, true); err != nil {
			t.Fatal(err)
		}
	}
	initial := func(i uint64) bool { return i < fileBits && i%3 == 0 }
	written := func(i uint64) bool { return (i*0x9E3779B97F4A7C15)>>61 != 0 } // ~7/8 of indexes

	var (
		wg      sync.WaitGroup
		done    atomic.Bool
		ops     atomic.Uint64
		flushes atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		wmMax   uint64 // the flusher's watermark, monotonic like flush's
	)
	fail := func(format string, args ...any) {
		errOnce.Do(func() { t.Errorf(format, args...) })
		failed.Store(true)
	}

	var writersWG sync.WaitGroup
	for g := range uint64(writers) {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			rng := rand.New(rand.NewPCG(g, 1))
			var mine []uint64
			for i := g; i < maxIndex; i += writers {
				if written(i) {
					mine = append(mine, i)
				}
			}
			for round := range 2 {
				rng.Shuffle(len(mine), func(a, c int) { mine[a], mine[c] = mine[c], mine[a] })
				for n, i := range mine {
					if round == 1 && i&8 != 0 {
						continue
					}
					if n%512 == 0 {
						for seen := flushes.Load(); flushes.Load() == seen && !failed.Load(); {
							runtime.Gosched()
						}
					}
					want := !initial(i)
					if err := b.Set(i, want, ops.Add(1)); err != nil {
						fail("Set(%d): %v", i, err)
						return
					}
					if got := b.Get(i); got != want {
						fail("writer %d: Get(%d) = %v right after Set(%v)", g, i, got, want)
						return
					}
					if failed.Load() {
						return
					}
				}
			}
		}()
	}
	for r := range uint64(readers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(r, 2))
			seen := make([]bool, maxIndex) // seen flipped
			for !done.Load() && !failed.Load() {
				i := rng.Uint64N(maxIndex)
				got := b.Get(i)
				flipped := got != initial(i)
				switch {
				case !written(i) && flipped:
					fail("reader: unwritten bit %d = %v, want %v", i, got, initial(i))
				case seen[i] && !flipped:
					fail("reader: bit %d went back to its old value %v", i, got)
				}
				seen[i] = seen[i] || flipped
			}
		}()
	}
	wg.Add(1)
	go func() { // flusher with injected faults
		defer wg.Done()
		rng := rand.New(rand.NewPCG(9, 9))
		for !done.Load() && !failed.Load() {
			switch rng.IntN(6) {
			case 0:
				ff.failApply.Store(1)
			case 1:
				ff.failSync.Store(1)
			case 2:
				ff.failApplyAfter.Store(1)
			case 3:
				ff.failGrow.Store(1)
			}
			wmMax = max(wmMax, b.Freeze())
			wm := wmMax
			err := b.Apply(context.Background(), wm)
			ff.failApply.Store(0)
			ff.failSync.Store(0)
			ff.failApplyAfter.Store(0)
			ff.failGrow.Store(0)
			if err != nil && !errors.Is(err, errBitsFault) {
				fail("Apply: %v", err)
			}
			if err == nil && ff.Watermark() != wm {
				fail("watermark %d after Apply(%d)", ff.Watermark(), wm)
			}
			b.Release()
			flushes.Add(1)
		}
	}()
	writersWG.Wait()
	done.Store(true)
	wg.Wait()
	if failed.Load() {
		return
	}
	wmMax = max(wmMax, b.Freeze())
	if err := b.Apply(context.Background(), wmMax); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if b.PendingBytes() != 0 {
		t.Fatalf("PendingBytes = %d after the final flush", b.PendingBytes())
	}
	if f.Len() < maxIndex-1 {
		t.Fatalf("file Len %d, want >= %d", f.Len(), maxIndex-1)
	}
	for i := range uint64(maxIndex) {
		want := initial(i) != written(i)
		if f.Get(i) != want || b.Get(i) != want {
			t.Fatalf("bit %d: file %v, overlay %v, want %v", i, f.Get(i), b.Get(i), want)
		}
	}
	if f.Watermark() != ops.Load() {
		t.Fatalf("watermark %d, want %d", f.Watermark(), ops.Load())
	}
}
