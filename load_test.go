package kvbuf

// Load tests: many writes without an explicit flush stay within the
// pending-memory bound (backpressure and byte-triggered flushes); many
// goroutines mixing every operation keep every read exact (the model
// test's workers, checked against their models); a byte-triggered kick is
// never lost.
//
//	go test -run TestLoadPendingBound -load.writes 10000000 -v .   # the full 10M
//	go test -run TestLoadSoak -load.soak 30s -v .                  # 64 goroutines, 30 s

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"
)

var (
	loadWrites = flag.Int("load.writes", 0, "writes in TestLoadPendingBound (env KVBUF_LOAD_WRITES; default 200000, 50000 under -race or -short; 10000000 for the full run)")
	loadSoak   = flag.Duration("load.soak", 1500*time.Millisecond, "duration of TestLoadSoak (30s for the soak)")
)

// liveHeap is the bytes of live and not-yet-swept heap objects.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestLoadPendingBound: sustained single-writer Puts and Sets with no
// Flush call stay within MaxPendingBytes (plus the write in flight), and
// the heap stays bounded: byte-triggered flushes and backpressure do their
// job.
func TestLoadPendingBound(t *testing.T) {
	n := *loadWrites
	if n == 0 {
		n = 200_000
		if raceEnabled() || testing.Short() {
			n = 50_000
		}
	}
	if s := os.Getenv("KVBUF_LOAD_WRITES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("KVBUF_LOAD_WRITES=%q: %v", s, err)
		}
		n = v
	}
	const bound = 8 << 20
	runtime.GC()
	base := liveHeap()
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: bound})
	k, b := mustKV(t, db, "load"), mustBits(t, db, "load")
	var peakPending int64
	var peakHeap uint64
	val := make([]byte, 32)
	key := make([]byte, 12)
	for i := range n {
		op := uint64(i + 1)
		var err error
		if i%4 == 3 {
			err = b.Set(ctx, uint64(i)*2654435761%(1<<26), i%8 == 3, op)
		} else {
			key = fmt.Appendf(key[:0], "%012d", uint64(i)*2654435761%uint64(n))
			val[0] = byte(i)
			err = k.Put(ctx, key, val, op)
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if i%1024 == 0 {
			peakPending = max(peakPending, db.Metrics().PendingBytes)
			peakHeap = max(peakHeap, liveHeap())
		}
	}
	m := db.Metrics()
	closeT(t, db)
	// Writers check the bound before they write, so writes in flight can
	// pass it by their own size: a few KiB here (one writer).
	if peakPending > bound+64<<10 {
		t.Fatalf("pending bytes peaked at %d, bound %d", peakPending, bound)
	}
	// The heap holds the pending tables (within the bound), pooled tables
	// (PoolBytes, 8 MiB), pebble's memtables and block cache (8 MiB each by
	// default) and garbage not yet collected: allow 4 bounds plus 48 MiB
	// over the baseline. Without backpressure, 10M writes hold ~1 GiB.
	limit := base + 4*bound + 48<<20
	if peakHeap > limit {
		t.Fatalf("live heap peaked at %d MiB over a baseline of %d MiB, limit %d MiB", peakHeap>>20, base>>20, limit>>20)
	}
	t.Logf("%d writes without an explicit flush: pending peak %.1f MiB (bound %d MiB), live heap peak %.1f MiB (baseline %.1f MiB), %d generations, %d stalls",
		n, float64(peakPending)/(1<<20), bound>>20, float64(peakHeap)/(1<<20), float64(base)/(1<<20), m.Generations, m.Stalls)
	if m.Generations == 0 && int64(n)*40 > bound {
		t.Fatalf("no flush ran although the writes exceed the bound")
	}
}

// TestLoadSoak runs 64 goroutines mixing every operation (the model test's
// workers: puts, deletes, range deletes, reads, GetMany, scans in both
// directions, sets, SetRange, batches, snapshots, DropKV, flushes, each
// checking its reads exactly) plus observers calling Metrics, Keyspaces,
// FlushMemtables and taking whole-engine snapshots, then verifies
// everything after a reopen.
func TestLoadSoak(t *testing.T) {
	d := *loadSoak
	if testing.Short() {
		d = min(d, 300*time.Millisecond)
	}
	const G = 64
	seed := testSeed(t)
	t.Logf("%d goroutines for %v (-load.soak)", G, d)
	dir := t.TempDir()
	e := &modelEnv{db: openT(t, dir, &Options{FlushInterval: 20 * time.Millisecond, MaxPendingBytes: 4 << 20}), G: G}
	models := make([]*goModel, G)
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	for g := range G {
		models[g] = newGoModel()
		rng := rand.New(rand.NewPCG(seed, uint64(g)))
		wg.Go(func() {
			for !stopped() {
				if err := modelWorker(e, g, rng, 50, models[g], func() {}); err != nil {
					t.Errorf("seed %d: %v", seed, err)
					return
				}
			}
		})
	}
	wg.Go(func() { // observers
		for i := 0; !stopped(); i++ {
			m := e.db.Metrics()
			if m.InFlight > m.MaxInFlight || m.MaxInFlight > 4 {
				t.Errorf("metrics: InFlight %d MaxInFlight %d", m.InFlight, m.MaxInFlight)
				return
			}
			_ = e.db.Keyspaces()
			if i%50 == 0 {
				if err := e.db.FlushMemtables(ctx); err != nil {
					t.Errorf("FlushMemtables: %v", err)
					return
				}
			}
			if i%10 == 0 {
				s, err := e.db.NewSnapshot()
				if err != nil {
					t.Errorf("NewSnapshot: %v", err)
					return
				}
				sb, _ := s.Bits("model")
				c1, _ := sb.Count()
				n := uint64(0)
				for range sb.Ones(0) {
					n++
				}
				s.Close()
				if n != c1 {
					t.Errorf("snapshot Count %d, Ones yields %d", c1, n)
					return
				}
			}
			runtime.Gosched()
		}
	})
	timer := time.NewTimer(d) // the soak's length; nothing is asserted about timing
	select {
	case <-timer.C:
	case <-waitChan(&wg): // every worker failed
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if err := verifyModel(e.db, G, models); err != nil {
		t.Fatalf("seed %d: before reopen: %v", seed, err)
	}
	closeT(t, e.db)
	e.db = openT(t, dir, nil)
	defer closeT(t, e.db)
	if err := verifyModel(e.db, G, models); err != nil {
		t.Fatalf("seed %d: after reopen: %v", seed, err)
	}
	if wm, acked := e.db.Watermark(), e.maxAcked.Load(); wm+1 < acked || wm > e.op.Load() {
		t.Fatalf("watermark %d, highest acknowledged op %d, ops handed out %d", wm, acked, e.op.Load())
	}
	t.Logf("ops: %v", &e.counts)
}

// TestBackpressureKickNotLost reproduces a lost wake-up in the flusher's
// loop: a byte-triggered kick that arrives while a flush runs, when that
// flush leaves nothing pending, used to leave the "kicked" flag set with no
// flush coming, so every later writer over the bound waited in
// backpressure forever. Each round: freeze more than half the bound into a
// flush stalled inside pebble's WAL write, make a writer kick (an empty
// range delete: admitted, but it adds nothing), let the flush finish, then
// write past the bound. A writer that waits longer than the generous
// deadline is stuck.
func TestBackpressureKickNotLost(t *testing.T) {
	sfs, fsys := newStallFS()
	const bound = 256 << 10
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: bound, MaxValueSize: 64, storeFS: fsys})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	key, val := make([]byte, 16), make([]byte, 64)
	n := 0
	put := func(c context.Context) error {
		n++
		key = fmt.Appendf(key[:0], "%016d", n)
		return k.Put(c, key, val, 0)
	}
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	skipped := 0
	for r := range rounds {
		mustFlush(t, db)
		for db.Metrics().PendingBytes <= bound/2 { // the flush threshold: no kick yet
			if err := put(ctx); err != nil {
				t.Fatal(err)
			}
		}
		sfs.armed.Store(true)
		flushed := make(chan error, 1)
		go func() { flushed <- db.Flush(ctx) }()
		select {
		case <-sfs.stalled: // a flush froze everything and is inside the WAL write
		case <-time.After(hangTimeout):
			t.Fatal("the flush neither stalled nor finished")
		case err := <-flushed:
			// A background flush (an earlier kick) took the writes before
			// the stall was armed: nothing for this round to stall.
			if !sfs.armed.CompareAndSwap(true, false) {
				sfs.waitStalled(t) // it stalled after all; let it go
				sfs.release()
			}
			if err != nil {
				t.Fatal(err)
			}
			skipped++
			continue
		}
		// An empty range delete is admitted (it kicks) and adds nothing.
		if err := k.DeleteRange(ctx, []byte("kick"), []byte("kick"), 0); err != nil {
			t.Fatalf("empty DeleteRange: %v", err)
		}
		sfs.release()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang detector, not a timing assertion
		for range 2 * bound / 100 {
			if err := put(c); err != nil {
				cancel()
				t.Fatalf("round %d: writer stuck in backpressure (%v): the byte-triggered kick was lost; metrics %+v", r, err, db.Metrics())
			}
		}
		cancel()
	}
	t.Logf("%d rounds, %d without a stall", rounds, skipped)
}
