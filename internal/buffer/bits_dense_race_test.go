package buffer

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
)

// newSizedBitsRig is newBitsRig over a file of nbits bits, so that the
// tables' filters cover them and a table turns dense only once an eighth
// of its filter is marked (a table made over an empty file is dense at
// its first write).
func newSizedBitsRig(t testing.TB, nbits uint64) *bitsRig {
	t.Helper()
	f, err := bitslice.Create(filepath.Join(t.TempDir(), "b.bits"), nbits)
	if err != nil {
		t.Fatal(err)
	}
	return newBitsRigOn(t, f)
}

// newBitsRigOn is a rig over the open file f, which it closes when the
// test ends.
func newBitsRigOn(t testing.TB, f *bitslice.File) *bitsRig {
	t.Helper()
	t.Cleanup(func() { f.Close() })
	r := &bitsRig{t: t, f: f}
	var err error
	if r.b, err = NewBits(f, &r.acct, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// denseProcs is GOMAXPROCS for the dense race: well above the cores, or
// KVBUF_STRESS_PROCS.
func denseProcs() int {
	if n, err := strconv.Atoi(os.Getenv("KVBUF_STRESS_PROCS")); err == nil && n > 0 {
		return n
	}
	return 16
}

// TestBitsGetDenseFlipRace: Get over a view without sealed tables decides
// "maybe pending" from the active table's dense flag (450295a). Readers
// Get bits while, generation after generation, a burst of writes to other
// words turns the active table dense (markAll, then the flag, B4a) under
// them, and a flush loop freezes (a new view whose active table is the
// spare, a table reset by Recycle, B11), writes, releases and settles.
// Writers flip their bits pass after pass, so the bits read were pending
// before the flip, after it, in a sealed table or only in the file. A read
// of a bit whose last write returned before the read began, and whose
// next write had not started when it ended, must return that write's
// value, as must a read of the bit of the burst's last write (the write
// whose mark may have turned the table dense); the test also checks that tables did turn dense, were reused,
// and came back from the pool not dense.
func TestBitsGetDenseFlipRace(t *testing.T) {
	raceProcs(t, denseProcs())
	const nbits = 1 << 20
	r := newSizedBitsRig(t, nbits)
	const (
		writers = 3
		region  = 2 * pageBits // the bits checked: [0, writers*region)
		far     = nbits / 2    // the burst's words: from here up
	)
	// A table is dense past an eighth of its filter's bits marked (one a
	// word written); the filter covers more than the file, for growth.
	marks := uint64(len(r.b.view.Load().active.lines)) * 64 / 8
	if 2*(marks+64) > far/64 {
		t.Fatalf("%d marks do not fit the burst's words", marks)
	}
	type progress struct{ started, done atomic.Int64 }
	var prog [writers]progress
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failure firstFailure
	var flushes, reads, denseGens, denseReads, reused atomic.Int64
	burst := make(chan struct{})
	// Burst write (pass, w) sets bit pass%64 of word 2w past far to
	// pass%2 == 0: each bit always to the same value. lastBurst is the
	// last one that returned, +1 (pass<<32 | w).
	burstBit := func(pass, w uint64) uint64 { return far + 2*w*64 + pass%64 }
	var lastBurst atomic.Uint64
	// The flush loop: one flush after each burst, so that every
	// generation's active table sees the flip while readers run.
	wg.Go(func() {
		seen := map[*bitsTable]bool{}
		for {
			select {
			case <-stop:
				return
			case <-burst:
			}
			r.bar.Lock()
			r.gen++
			g := r.b.Freeze(r.gen)
			if a := r.b.view.Load().active; seen[a] {
				reused.Add(1)
				if a.dense.Load() || a.marked.Load() != 0 {
					failure.fail("a reused table is published dense %v, %d marked", a.dense.Load(), a.marked.Load())
				}
			} else {
				seen[a] = true
			}
			r.bar.Unlock()
			if !r.writeRelease(g, &failure, &flushes) {
				return
			}
			r.bar.Lock()
			r.b.Settle()
			r.bar.Unlock()
		}
	})
	// The burst: a bit in every second word past far, one write at a
	// time, until the active table is dense, then a flush.
	wg.Go(func() {
		for pass := uint64(0); !stopped(stop); pass++ {
			for w := uint64(0); w < marks+64 && !stopped(stop); w++ {
				r.bar.RLock()
				err := r.b.Set(burstBit(pass, w), pass%2 == 0)
				dense := r.b.view.Load().active.dense.Load()
				r.bar.RUnlock()
				if err != nil {
					failure.fail("set: %v", err)
					return
				}
				lastBurst.Store(pass<<32 | w + 1)
				if dense {
					denseGens.Add(1)
					break
				}
			}
			select {
			case burst <- struct{}{}:
			case <-stop:
				return
			}
		}
	})
	bitOf := func(w int, k int64) uint64 { return uint64(w)*region + uint64(k%region)*7%region }
	for w := range writers {
		wg.Go(func() {
			p := &prog[w]
			for k := int64(0); !stopped(stop); k++ {
				p.started.Store(k + 1)
				r.bar.RLock()
				err := r.b.Set(bitOf(w, k), k/region%2 == 1)
				r.bar.RUnlock()
				if err != nil {
					failure.fail("set: %v", err)
					return
				}
				p.done.Store(k + 1)
			}
		})
	}
	for g := range 12 {
		wg.Go(func() {
			for x := uint64(g); !stopped(stop); x++ {
				if x%4 == 0 {
					// The bit of the burst's last write, maybe the one
					// whose mark turned the table dense (same word,
					// same instant).
					if lb := lastBurst.Load(); lb != 0 {
						pass, bw := (lb-1)>>32, (lb-1)&(1<<32-1)
						if got := r.b.Get(burstBit(pass, bw)); got != (pass%2 == 0) {
							failure.fail("burst pass %d word %d: read %v after the write returned (flush %d)", pass, bw, got, flushes.Load())
							return
						}
						reads.Add(1)
					}
					continue
				}
				w := int(x % writers)
				p := &prog[w]
				done := p.done.Load()
				if done == 0 {
					continue
				}
				k := done - 1 - int64(x*7919%uint64(min(done, region)))
				i, want := bitOf(w, k), k/region%2 == 1
				v := r.b.view.Load()
				got := r.b.Get(i)
				if len(v.sealed) == 0 && v.active.dense.Load() {
					denseReads.Add(1)
				}
				if p.started.Load() <= k+region && got != want {
					failure.fail("writer %d bit %d: read %v, the write that returned set %v (flush %d, dense generations %d)", w, i, got, want, flushes.Load(), denseGens.Load())
					return
				}
				reads.Add(1)
			}
		})
	}
	// With pooling compiled out (kvbuf_nopool) no table is reused: the
	// race still checks reads over tables turning dense.
	minReused := int64(0)
	if poolEnabled {
		minReused = 2
	}
	finishRace(t, stop, &wg, &failure, raceDuration, func() bool {
		return flushes.Load() >= 20 && denseGens.Load() >= 20 && reused.Load() >= 5*minReused/2 && denseReads.Load() >= 1000
	})
	t.Logf("%d flushes, %d generations turned dense, %d reused tables, %d reads (%d over a dense active table alone)",
		flushes.Load(), denseGens.Load(), reused.Load(), reads.Load(), denseReads.Load())
	if denseGens.Load() < 5 || reused.Load() < minReused || denseReads.Load() == 0 {
		t.Fatal("the race did not exercise dense tables or their reuse")
	}
}

// TestBitsGetDenseViewSwapped: Get decides from the word filters of the
// view it loaded (every word marked in a dense table; from the dense flag
// until bits22); here that view goes stale between the load and the
// filters' read (testHook "bits-filter"): the generation is
// frozen (the table, dense, now sealed), or written and released (the
// table reset into the pool, not dense), or also reused as the active
// table of the next generation and turned dense again without the bit.
// Bit 100, pending as 1 over a file's 0, must read 1 every time: the read
// re-validates its view whatever the flag said. (A fast view, B13, skips
// the flag and the hook; TestBitsGetDenseFlipRace races its reads with
// the same swaps, without forcing them.)
func TestBitsGetDenseViewSwapped(t *testing.T) {
	for stage := range 3 {
		r := newSizedBitsRig(t, 1<<20)
		densify := func() {
			t.Helper()
			for w := uint64(0); !r.b.view.Load().active.dense.Load(); w++ {
				if w > 1<<13 {
					t.Fatal("the active table never turned dense")
				}
				if err := r.b.Set((1<<19)+2*w*64, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The view stays not fast (B13): the table turning dense does
		// not republish it, so Get takes the filter check, as a read of a
		// view published just before the flag does.
		r.b.view.Load().active.densed = nil
		if err := r.b.Set(100, true); err != nil {
			t.Fatal(err)
		}
		densify()
		a := r.b.view.Load().active
		if r.b.view.Load().fast {
			t.Fatal("the view turned fast")
		}
		fired := false
		off := r.hookFilter(func(point string) {
			if point != "bits-filter" || fired {
				return
			}
			fired = true
			switch stage {
			case 0:
				r.bar.Lock()
				r.gen++
				if r.b.Freeze(r.gen) == nil {
					t.Error("nothing frozen")
				}
				r.bar.Unlock()
			case 1:
				r.flush()
			case 2:
				r.flush()
				if err := r.b.Set(200, true); err != nil { // a fresh active table
					t.Error(err)
				}
				r.flush() // a back in the pool, then active again
				densify()
				if r.b.view.Load().active != a {
					t.Log("the pool gave another table")
				}
			}
		})
		got := r.b.Get(100)
		off()
		if !fired {
			t.Fatalf("stage %d: the read never reached the filter check", stage)
		}
		if !got {
			t.Fatalf("stage %d: bit 100 read 0: the read answered from a stale view's table", stage)
		}
	}
}
