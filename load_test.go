package kvbuf

// Load tests: many writes without an explicit flush stay within the
// pending-memory bound (backpressure and byte-triggered flushes), and many
// goroutines mixing every operation keep every read exact (the model test's
// workers, checked against their models).
//
//	go test -run TestLoadPendingBound -load.writes 10000000 -v .   # the full 10M
//	go test -run TestLoadSoak -load.soak 30s -v .                  # 64 goroutines, 30 s

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

var (
	loadWrites = flag.Int("load.writes", 300_000, "writes in TestLoadPendingBound (env KVBUF_LOAD_WRITES; 10000000 for the full run)")
	loadSoak   = flag.Duration("load.soak", 2*time.Second, "duration of TestLoadSoak (30s for the soak)")
)

// liveHeap is the bytes of live and not-yet-swept heap objects.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestLoadPendingBound(t *testing.T) {
	n := *loadWrites
	if s := os.Getenv("KVBUF_LOAD_WRITES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("KVBUF_LOAD_WRITES=%q: %v", s, err)
		}
		n = v
	}
	if testing.Short() {
		n = min(n, 50_000)
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
		if i%4096 == 0 {
			peakPending = max(peakPending, db.Stats().PendingBytes)
			peakHeap = max(peakHeap, liveHeap())
		}
	}
	st := db.Stats()
	closeT(t, db)
	// Writers check the bound before they write, so writes in flight can
	// pass it by their own size: a few KiB here (one writer).
	if peakPending > bound+64<<10 {
		t.Fatalf("pending bytes peaked at %d, bound %d", peakPending, bound)
	}
	// The heap holds the pending tables (active and frozen, each within the
	// bound), a recycled table (buffer.Options.PoolBytes, 8 MiB), pebble's
	// memtables and block cache (8 MiB each by default) and garbage not yet
	// collected: allow 4 bounds plus 48 MiB over the baseline. Without
	// backpressure, 10M writes would hold ~1 GiB.
	limit := base + 4*bound + 48<<20
	if peakHeap > limit {
		t.Fatalf("live heap peaked at %d MiB over a baseline of %d MiB, limit %d MiB", peakHeap>>20, base>>20, limit>>20)
	}
	t.Logf("%d writes without an explicit flush: pending peak %.1f MiB (bound %d MiB), live heap peak %.1f MiB (baseline %.1f MiB), %d physical flushes",
		n, float64(peakPending)/(1<<20), bound>>20, float64(peakHeap)/(1<<20), float64(base)/(1<<20), st.PhysicalFlushes)
	if st.PhysicalFlushes == 0 && int64(n)*40 > bound {
		t.Fatalf("no flush ran although the writes exceed the bound")
	}
}

// TestLoadSoak runs 64 goroutines mixing every operation (the model test's
// workers, each checking its reads exactly) plus observers calling Stats,
// FlushMemtables and Keyspaces, then verifies everything after a reopen.
func TestLoadSoak(t *testing.T) {
	d := *loadSoak
	if testing.Short() {
		d = min(d, 500*time.Millisecond)
	}
	const G = 64
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d goroutines for %v", seed, G, d)
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: 20 * time.Millisecond, MaxPendingBytes: 4 << 20})
	models := make([]*goModel, G)
	var op, acked atomic.Uint64
	var counts [8]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range G {
		models[g] = &goModel{kv: map[string]string{}, bits: map[uint64]bool{}}
		rng := rand.New(rand.NewPCG(seed, uint64(g)))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := modelWorker(db, g, G, rng, 100, models[g], &op, &acked, &counts, func() {}); err != nil {
					t.Errorf("seed %d: %v", seed, err)
					return
				}
			}
		})
	}
	wg.Go(func() { // observers
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = db.Stats()
			_ = db.Keyspaces()
			if i%50 == 0 {
				if err := db.FlushMemtables(ctx); err != nil {
					t.Errorf("FlushMemtables: %v", err)
					return
				}
			}
			runtime.Gosched()
		}
	})
	time.Sleep(d) // the soak's length; nothing is asserted about timing
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if err := verifyModel(db, G, models); err != nil {
		t.Fatalf("seed %d: after reopen: %v", seed, err)
	}
	if wm := db.Watermark(); wm != acked.Load() {
		t.Fatalf("watermark %d, want the last acknowledged op %d", wm, acked.Load())
	}
	var c [8]int64
	var total int64
	for i := range c {
		c[i] = counts[i].Load()
		total += c[i]
	}
	t.Logf("%d operations (put/delete/get/scan/set/getbit/flush/closed %v)", total, c)
}

// TestBackpressureKickNotLost reproduces a lost wake-up in the flusher's
// loop (flush/flusher.go): a byte-triggered kick that arrives while a flush
// runs, when that flush leaves nothing pending, used to leave the "kicked"
// flag set with no flush coming, so every later writer over the bound
// waited in backpressure forever (TestLoadPendingBound hung about one run in
// ten). Each round: freeze more than FlushBytes into a flush stalled inside
// pebble's WAL write, make a writer kick (a Put whose value is then
// rejected, so it adds nothing), let the flush finish, then write past the
// bound. A writer that waits longer than the generous deadline is stuck.
func TestBackpressureKickNotLost(t *testing.T) {
	var armed atomic.Bool
	stalled, release := make(chan struct{}, 1), make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) && armed.CompareAndSwap(true, false) {
			stalled <- struct{}{}
			<-release
		}
		return nil
	})
	const bound = 1 << 20
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: bound, MaxValueSize: 64,
		storeFS: errorfs.Wrap(vfs.NewMem(), inj)})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	key, val := make([]byte, 16), make([]byte, 64)
	n := 0
	put := func(c context.Context) error {
		n++
		key = fmt.Appendf(key[:0], "%016d", n)
		return k.Put(c, key, val, 0)
	}
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	skipped := 0
	for r := range rounds {
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for db.Stats().PendingBytes <= bound/2 { // FlushBytes: no kick yet
			if err := put(ctx); err != nil {
				t.Fatal(err)
			}
		}
		armed.Store(true)
		flushed := make(chan error, 1)
		go func() { flushed <- db.Flush(ctx) }()
		select {
		case <-stalled: // a flush froze everything and is inside the WAL write
		case err := <-flushed:
			// A background flush (an earlier kick) took the writes before
			// the stall was armed: nothing for this round to stall.
			if !armed.CompareAndSwap(true, false) {
				<-stalled // it stalled after all; let it go
				release <- struct{}{}
			}
			if err != nil {
				t.Fatal(err)
			}
			skipped++
			continue
		}
		if err := k.Put(ctx, []byte("kick"), make([]byte, 65), 0); !errors.Is(err, ErrValueTooLarge) {
			t.Fatalf("oversize Put: %v", err)
		}
		release <- struct{}{}
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang detector, not a timing assertion
		for range 2 * bound / 100 {
			if err := put(c); err != nil {
				cancel()
				t.Fatalf("round %d: writer stuck in backpressure (%v): the byte-triggered kick was lost; stats %+v", r, err, db.Stats())
			}
		}
		cancel()
	}
	t.Logf("%d rounds, %d without a stall", rounds, skipped)
}
