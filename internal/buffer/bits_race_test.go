package buffer

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// TestBitsReadersSeeReturnedSets races readers (Get, GetMany, Ones, NextOnes, on the
// direct path and off it) against writers (Set, SetMany, each bit flipped
// pass after pass) and a flush loop that freezes, writes, releases and
// settles as fast as it can, with snapshots opened and closed meanwhile,
// at GOMAXPROCS well above the core count. Each writer owns a region; it
// announces the write it starts and the writes that returned. A reader
// that picks a bit whose last write returned before the read began, and
// whose next write had not started when the read ended, must see that
// write's value. It checks rules B2, B3, B4, B7, B8 and B9 of bits_protocol.go.
func TestBitsReadersSeeReturnedSets(t *testing.T) {
	raceProcs(t, 16)
	r := newBitsRig(t, nil)
	// SetMany's slices (8 changes) take the coalescing path (B4, B4a, B6
	// per word), a page per window.
	r.b.manyCfg = manyConfig{min: 8, shift: pageShift}
	const (
		writers = 3
		region  = 3 * pageBits / 2 // two pages each, so flushes grow the file
	)
	type progress struct{ started, done atomic.Int64 } // writes, in bit order, pass after pass
	var prog [writers]progress
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failure firstFailure
	var flushes, reads atomic.Int64
	wg.Go(func() {
		for !stopped(stop) {
			r.bar.Lock()
			r.gen++
			g := r.b.Freeze(r.gen)
			var s *BitsSnapshot
			if r.gen%7 == 0 {
				s = r.b.Snapshot() // pins the tables the next release drops
			}
			r.bar.Unlock()
			if !r.writeRelease(g, &failure, &flushes) {
				return
			}
			if s != nil {
				s.Close()
			}
			r.bar.Lock()
			r.b.Settle()
			r.bar.Unlock()
		}
	})
	// Bit k of writer w's sequence is region bit k%region, value (k/region)%2.
	bitOf := func(w int, k int64) uint64 { return uint64(w)*region + uint64(k%region) }
	for w := range writers {
		wg.Go(func() {
			p := &prog[w]
			for k := int64(0); !stopped(stop); {
				n := int64(1)
				if k%5 == 0 {
					n = 8 // a SetMany of the next 8 writes
				}
				p.started.Store(k + n)
				idx := make([]uint64, n)
				vals := make([]bool, n)
				for j := range n {
					idx[j], vals[j] = bitOf(w, k+j), (k+j)/region%2 == 1
				}
				r.bar.RLock()
				var err error
				if n == 1 {
					err = r.b.Set(idx[0], vals[0])
				} else {
					err = r.b.SetMany(idx, vals)
				}
				r.bar.RUnlock()
				if err != nil {
					failure.fail("set: %v", err)
					return
				}
				k += n
				p.done.Store(k)
			}
		})
	}
	for g := range 12 {
		wg.Go(func() {
			var out [4]bool
			for x := uint64(g); ; x++ {
				select {
				case <-stop:
					return
				default:
				}
				w := int(x % writers)
				p := &prog[w]
				done := p.done.Load()
				if done == 0 {
					continue
				}
				k := done - 1 - int64(x*7919%uint64(min(done, region)))
				i, want := bitOf(w, k), k/region%2 == 1
				var got bool
				switch x % 4 {
				case 0:
					got = r.b.Get(i)
				case 1:
					// The first set bit at or after i is i if it is set.
					got = false
					for j := range r.b.Ones(i) {
						got = j == i
						break
					}
				case 2:
					// The same through NextOnes, from i into a dst of 1
					// to 3 bits, or from the bit before it into 2 or 3.
					var dst [3]uint64
					from := i - min(i, x/4%2)
					n, _ := r.b.NextOnes(from, dst[:max(1+int(x/8%3), 1+int(i-from))], nil)
					got = slices.Contains(dst[:n], i)
				default:
					idx := []uint64{i, i, i, i}
					r.b.GetMany(idx, out[:])
					got = out[x%4]
				}
				// The next write of bit i is write k+region.
				if p.started.Load() <= k+region && got != want {
					failure.fail("writer %d bit %d: read %v, the write that returned set %v (flush %d)", w, i, got, want, flushes.Load())
					return
				}
				reads.Add(1)
			}
		})
	}
	finishRace(t, stop, &wg, &failure, raceDuration, func() bool { return flushes.Load() >= 20 && reads.Load() >= 1000 })
	t.Logf("%d flushes, %d reads", flushes.Load(), reads.Load())
}

// TestBitsReadRevalidatesRecycledPage makes the interleaving rule B8
// guards against happen on purpose: a Get has loaded a sealed table's
// page when the generation is released, the table is reset and reused as
// the active table, and the page, zeroed, is installed at another index
// and written (a pending 0 at the same offset of the next page). The read
// must not answer from the reused page: its re-validation sees a new view
// and reads again.
func TestBitsReadRevalidatesRecycledPage(t *testing.T) {
	r := newBitsRig(t, nil) // pooling on: a released table is reused
	const a = 100           // page 0; its twin a+pageBits has the same offset in page 1
	if err := r.b.Set(a, true); err != nil {
		t.Fatal(err)
	}
	g1 := r.b.Freeze(1)
	if err := g1.Write(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Set(5*pageBits, true); err != nil { // keeps the active table non-empty
		t.Fatal(err)
	}
	fired := false
	testHook = func(point string) {
		if point != "bits-page" || fired {
			return
		}
		fired = true
		r.b.Release(1) // the sealed table is reset and kept as the spare
		if g := r.b.Freeze(2); g == nil {
			t.Error("nothing to freeze")
		}
		// The spare is the active table now: its first page is the one
		// the read loaded, installed at page 1.
		if err := r.b.Set(a+pageBits, false); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHook = nil }()
	if !r.b.Get(a) {
		t.Fatal("bit 100 read false: the read answered from a page reused for another index")
	}
	if !fired {
		t.Fatal("the read never loaded the sealed table's page")
	}
}

// TestBitsFilterReadRevalidates: a Get has loaded a view in which bit 100
// is pending in the active table (the file still 0 bits long) when the
// generation is frozen, written (the file grows to hold it), released (the
// table's word filter is reset) and the overlay settles. The read's filter
// check then finds nothing pending, and the view's file words end before
// bit 100: it must re-validate the view (B4a, B8) and read again.
func TestBitsFilterReadRevalidates(t *testing.T) {
	r := newBitsRig(t, nil)
	if err := r.b.Set(100, true); err != nil {
		t.Fatal(err)
	}
	fired := false
	defer r.hookFilter(func(point string) {
		if point != "bits-filter" || fired {
			return
		}
		fired = true
		r.flush()
	})()
	if !r.b.Get(100) {
		t.Fatal("bit 100 read false: the read trusted a reset filter and a view older than the growth")
	}
	if !fired {
		t.Fatal("the read never reached the filter check")
	}
}

// TestBitsCountExactUnderRacingWriters races writers that set the same
// bits (the same packed words) to random values, through Set, SetRange
// and SetMany (coalesced: one atomic OR, maybe an AND, per word; and bit
// by bit), at GOMAXPROCS well above the core count, with a flush loop and
// snapshots. Each atomic operation counts the change it made from the old
// word it returned (rules B4, B6), so once the writers stop, Count is the
// number of set bits whatever the interleaving: checked after every
// pause of the writers, against the bits read back.
func TestBitsCountExactUnderRacingWriters(t *testing.T) {
	raceProcs(t, 16)
	for _, cfg := range []manyConfig{defaultMany, {min: 4, shift: pageShift}} {
		r := newBitsRig(t, nil)
		r.b.manyCfg = cfg
		const (
			writers  = 4
			universe = 2*pageBits + 96
		)
		for pause := range 6 {
			var wg sync.WaitGroup
			var failure firstFailure
			for w := range writers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(pause), uint64(w)))
					for range 300 {
						r.bar.RLock()
						var err error
						switch p := rng.IntN(10); {
						case p < 4:
							err = r.b.Set(rng.Uint64N(universe), rng.IntN(2) == 0)
						case p < 5:
							lo := rng.Uint64N(universe)
							err = r.b.SetRange(lo, min(universe, lo+rng.Uint64N(200)), rng.IntN(2) == 0)
						default:
							// Few distinct words, so that writers meet.
							idx := make([]uint64, 4+rng.IntN(60))
							vals := make([]bool, len(idx))
							base := rng.Uint64N(universe - 256)
							for j := range idx {
								idx[j], vals[j] = base+rng.Uint64N(256), rng.IntN(2) == 0
							}
							err = r.b.SetMany(idx, vals)
						}
						r.bar.RUnlock()
						if err != nil {
							failure.fail("set: %v", err)
							return
						}
					}
				})
			}
			if pause%2 == 1 {
				// Snapshot seals the active table: writers excluded, as
				// for Freeze (B6). Without the barrier a write still in
				// the sealed table and one in the new active table could
				// both count the same bit, and this test failed about
				// once in 15 runs.
				r.bar.Lock()
				s := r.b.Snapshot()
				r.bar.Unlock()
				r.flush()
				s.Close()
			}
			wg.Wait()
			if msg := failure.Load(); msg != nil {
				t.Fatal(*msg)
			}
			var n uint64
			for i := range uint64(universe) {
				if r.b.Get(i) {
					n++
				}
			}
			if got := r.b.Count(); got != n {
				t.Fatalf("config %+v, pause %d: Count %d, %d bits set", cfg, pause, got, n)
			}
		}
		r.flush()
	}
}

// TestBitsCountRacingClear makes the interleaving of rule B6's two-step
// clear happen on purpose: a write of 0 finds the bit pending as 1 with
// its atomic OR, and before its AND another write of 0 clears the bit.
// Each must count only the change its own AND made (the first finds the
// bit already 0), so the bit leaves Count once. Both orders of the two
// paths (a write of one bit, SetMany's per-word apply) are checked.
func TestBitsCountRacingClear(t *testing.T) {
	for _, outerMany := range []bool{false, true} {
		r := newBitsRig(t, nil)
		r.b.manyCfg = manyConfig{min: 1, shift: pageShift}
		for _, i := range []uint64{5, 6} {
			if err := r.b.Set(i, true); err != nil {
				t.Fatal(err)
			}
		}
		clear := func(many bool) {
			var err error
			if many {
				err = r.b.SetMany([]uint64{5}, []bool{false})
			} else {
				err = r.b.Set(5, false)
			}
			if err != nil {
				t.Error(err)
			}
		}
		fired := false
		testHook = func(point string) {
			if point != "bits-and" || fired {
				return
			}
			fired = true
			clear(!outerMany)
		}
		clear(outerMany)
		testHook = nil
		if !fired {
			t.Fatal("no write reached its AND")
		}
		if r.b.Get(5) || r.b.Count() != 1 {
			t.Fatalf("outer SetMany %v: bit 5 %v, Count %d; want false, 1", outerMany, r.b.Get(5), r.b.Count())
		}
	}
}

// TestBitsFillLosesInstall: SetMany fills a page privately for a
// directory entry it found empty, and before it installs it another write
// installs a page there (rule B5). SetMany must apply its words to that
// page instead (its changes and the other write's both count), and keep
// the page it filled as dirty: a later write that needs a zeroed page must
// not get it with SetMany's words still in it.
func TestBitsFillLosesInstall(t *testing.T) {
	r := newBitsRig(t, nil) // pooling on
	r.b.manyCfg = manyConfig{min: 1, shift: pageShift}
	const p1 = pageBits
	fired := false
	testHook = func(point string) {
		if point != "bits-fill" || fired {
			return
		}
		fired = true
		if err := r.b.Set(p1+7, true); err != nil {
			t.Error(err)
		}
	}
	err := r.b.SetMany([]uint64{p1 + 5, p1 + 7}, []bool{true, false})
	testHook = nil
	if err != nil {
		t.Fatal(err)
	}
	if !fired {
		t.Fatal("SetMany never filled a page")
	}
	if !r.b.Get(p1+5) || r.b.Get(p1+7) || r.b.Count() != 1 {
		t.Fatalf("after the lost install: bits %v %v, Count %d; want true false 1", r.b.Get(p1+5), r.b.Get(p1+7), r.b.Count())
	}
	// Pages for pages 2 to 5 come from the table's pool: none may carry
	// the filled page's words (the flush would write them).
	for k := uint64(2); k < 6; k++ {
		if err := r.b.Set(k*pageBits+100, true); err != nil {
			t.Fatal(err)
		}
	}
	r.flush()
	for k := uint64(2); k < 6; k++ {
		if r.b.Get(k*pageBits+5) || r.b.Get(k*pageBits+7) || !r.b.Get(k*pageBits+100) {
			t.Fatalf("page %d: bits 5, 7, 100 are %v %v %v, want false false true (a page that came with the words SetMany filled for page 1?)",
				k, r.b.Get(k*pageBits+5), r.b.Get(k*pageBits+7), r.b.Get(k*pageBits+100))
		}
	}
	if n := r.b.Count(); n != 5 || r.f.CountOnes() != 5 {
		t.Fatalf("Count %d, the file %d; want 5", n, r.f.CountOnes())
	}
}

// TestBitsFillDirtyPage: a released table's page with many words written
// is kept without zeroing (dirty), and SetMany's next fill of it must
// store every word: here the page held bits 0-4999 pending as 1 in an
// older generation, since cleared, and SetMany sets only bit 6000.
func TestBitsFillDirtyPage(t *testing.T) {
	r := newBitsRig(t, nil) // pooling on
	r.b.manyCfg = manyConfig{min: 1, shift: pageShift}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.b.SetRange(0, 5000, true)) // table A: page 0, 157 words written
	r.flush()                         // A released and kept (dirty); B active
	must(r.b.SetRange(0, 5000, false))
	r.flush() // B released; A active again, its page 0 dirty
	if r.b.Count() != 0 {
		t.Fatalf("Count %d after clearing, want 0", r.b.Count())
	}
	must(r.b.SetMany([]uint64{6000}, []bool{true}))
	for _, i := range []uint64{0, 10, 4999, 6000} {
		if got := r.b.Get(i); got != (i == 6000) {
			t.Fatalf("bit %d = %v before the flush (a word of the dirty page kept?)", i, got)
		}
	}
	r.flush()
	if r.b.Count() != 1 || r.f.CountOnes() != 1 || !r.b.Get(6000) {
		t.Fatalf("Count %d, the file %d, bit 6000 %v; want 1, 1, true", r.b.Count(), r.f.CountOnes(), r.b.Get(6000))
	}
}

// TestBitsLookupSealedNotWritten: bits pending only in a sealed table
// whose generation is frozen but not yet written (the file still holds
// the old values, or is too short to hold them) are read from that table
// by Get and GetMany, with the active table empty and then not: the
// lookups that probe the active table alone and read the file beneath it
// are for views without sealed tables only (B8a), with pooled tables on
// and off.
func TestBitsLookupSealedNotWritten(t *testing.T) {
	for _, pool := range []int64{0, -1} {
		r := newBitsRig(t, &Options{PoolBytes: pool})
		if err := r.b.Set(300, true); err != nil {
			t.Fatal(err)
		}
		r.flush() // bit 300 is 1 in the file
		for _, c := range []struct {
			i uint64
			v bool
		}{{300, false}, {100, true}, {70_000, true}} {
			if err := r.b.Set(c.i, c.v); err != nil {
				t.Fatal(err)
			}
		}
		if r.b.Freeze(2) == nil {
			t.Fatal("nothing to freeze")
		}
		want := map[uint64]bool{300: false, 100: true, 70_000: true, 200: false}
		check := func(when string) {
			t.Helper()
			idx := []uint64{300, 100, 70_000, 200}
			out := make([]bool, len(idx))
			r.b.GetMany(idx, out)
			for k, i := range idx {
				if got := r.b.Get(i); got != want[i] {
					t.Errorf("pool %d, %s: Get(%d) = %v, want %v", pool, when, i, got, want[i])
				}
				if out[k] != want[i] {
					t.Errorf("pool %d, %s: GetMany of %d = %v, want %v", pool, when, i, out[k], want[i])
				}
			}
		}
		check("active table empty")
		if err := r.b.Set(200, true); err != nil { // same word as 300's neighbours
			t.Fatal(err)
		}
		want[200] = true
		check("active table written")
	}
}

// TestBitsGetActiveTable checks Get over a view with the active table
// alone with the filters deciding and with a dense table (a fast view, B13,
// republished by the write that made the table dense: no flag or filter
// word loaded; bits12's design 2, bitsget18): a bit pending as 0
// over a file's 1, as 1 over a file's 0, and bits not pending over either
// file value.
func TestBitsGetActiveTable(t *testing.T) {
	for _, dense := range []bool{false, true} {
		r := newBitsRig(t, nil)
		for _, i := range []uint64{300, 5000} {
			if err := r.b.Set(i, true); err != nil {
				t.Fatal(err)
			}
		}
		r.flush() // 300 and 5000 are 1 in the file
		want := map[uint64]bool{300: false, 301: true, 5000: true, 5002: false}
		for _, i := range []uint64{300, 301} {
			if err := r.b.Set(i, want[i]); err != nil {
				t.Fatal(err)
			}
		}
		if dense {
			// Far from the bits checked: a write in every second word
			// marks more than an eighth of the filter.
			for w := uint64(200); w < 200+4096*20; w += 2 {
				if err := r.b.Set(w*64+7, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		v := r.b.view.Load()
		if v.direct || len(v.sealed) != 0 || v.active.dense.Load() != dense || v.fast != dense {
			t.Fatalf("dense %v: view direct %v, %d sealed, active dense %v, fast %v", dense, v.direct, len(v.sealed), v.active.dense.Load(), v.fast)
		}
		for i, w := range want {
			if got := r.b.Get(i); got != w {
				t.Errorf("dense %v: Get(%d) = %v, want %v", dense, i, got, w)
			}
		}
	}
}

// TestBitsFastViewSealedClosed checks that a view is fast (B13) only while
// open and without sealed tables: with a dense active table over a sealed
// one, a bit pending only in the sealed table reads the sealed value
// (mutation 480), and after MarkClosed Lookup reports closed (481).
func TestBitsFastViewSealedClosed(t *testing.T) {
	r := newBitsRig(t, nil)
	if err := r.b.Set(300, true); err != nil {
		t.Fatal(err)
	}
	r.flush() // 300 is 1 in the file
	if err := r.b.Set(300, false); err != nil {
		t.Fatal(err)
	}
	if r.b.Freeze(2) == nil {
		t.Fatal("nothing to freeze")
	}
	// Far from bit 300: the new active table goes dense.
	for w := uint64(200); w < 200+4096*20; w += 2 {
		if err := r.b.Set(w*64+7, true); err != nil {
			t.Fatal(err)
		}
	}
	v := r.b.view.Load()
	if len(v.sealed) != 1 || !v.active.dense.Load() || v.fast {
		t.Fatalf("view: %d sealed, active dense %v, fast %v; want 1, true, false", len(v.sealed), v.active.dense.Load(), v.fast)
	}
	if r.b.Get(300) {
		t.Error("Get(300) = true over a sealed 0, want false")
	}
	if !r.b.Get(200*64 + 7) {
		t.Error("Get of a bit pending as 1 in the active table = false")
	}
	// Closed: a second overlay, its dense active table alone.
	r = newBitsRig(t, nil)
	for w := uint64(200); w < 200+4096*20; w += 2 {
		if err := r.b.Set(w*64+7, true); err != nil {
			t.Fatal(err)
		}
	}
	if v := r.b.view.Load(); !v.fast {
		t.Fatalf("view over a dense active table alone: fast %v, want true", v.fast)
	}
	r.b.MarkClosed()
	if x, err := r.b.Lookup(200*64+7, (*Bits).LookupSlowErr); x || err != kverr.ErrClosed {
		t.Errorf("Lookup after MarkClosed = %v, %v; want false, ErrClosed", x, err)
	}
}
