package buffer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/bitslice"
)

// These tests hunt the stale reads that lock-free code hides from polite
// tests: many more goroutines than cores (so that a goroutine is preempted
// between two atomic stores), flushes in a tight loop, pooled tables on and
// readers pinning old tables with open iterators. Each of them caught a real
// bug of an earlier design (see doc/design.md, "The read path: views");
// reintroducing either bug makes them fail within a normal `go test -race`.

// raceDuration is how long each race test's workload runs at least:
// 400ms, or KVBUF_STRESS (a time.ParseDuration string) for a long run.
var raceDuration = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KVBUF_STRESS")); err == nil && d > 0 {
		return d
	}
	return 400 * time.Millisecond
}()

// runFor lets a race test's goroutines run for d, then on until enough
// reports true (checked every 10ms), for at most 50 times d: on a machine
// busy with other work the flushes a test needs come slower, and a fixed
// duration would make the test's own "did it exercise anything" check fail.
func runFor(d time.Duration, enough func() bool) {
	start := time.Now()
	time.Sleep(d)
	for !enough() && time.Since(start) < 50*d {
		time.Sleep(10 * time.Millisecond)
	}
}

// firstFailure keeps the first failure a race test's goroutines report.
type firstFailure struct{ atomic.Pointer[string] }

func (f *firstFailure) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.CompareAndSwap(nil, &msg)
}

// finishRace lets a race test's goroutines run (runFor d and enough),
// stops them (closes stop, waits for wg) and fails t with the first
// failure they reported.
func finishRace(t *testing.T, stop chan struct{}, wg *sync.WaitGroup, failure *firstFailure, d time.Duration, enough func() bool) {
	t.Helper()
	runFor(d, enough)
	close(stop)
	wg.Wait()
	if msg := failure.Load(); msg != nil {
		t.Fatal(*msg)
	}
}

func raceProcs(t *testing.T, n int) {
	old := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// kvFlushLoop freezes, writes and releases generations until stop is closed.
func kvFlushLoop(r *kvRig, stop <-chan struct{}, wg *sync.WaitGroup, flushes *atomic.Int64) {
	defer wg.Done()
	for !stopped(stop) {
		r.bar.Lock()
		r.gen++
		g := r.kv.Freeze(r.gen)
		r.bar.Unlock()
		if g == nil {
			runtime.Gosched()
			continue
		}
		b := r.st.NewBatch()
		if err := g.AddTo(context.Background(), b); err != nil {
			panic(err)
		}
		c, err := r.st.Commit(b)
		if err == nil {
			err = c.Wait()
		}
		if err != nil {
			panic(err)
		}
		g.Release()
		flushes.Add(1)
	}
}

// TestKVReadYourWritesWithPinnedTables: writers Put then Get their own key
// while other goroutines keep iterators open (pinning old tables, so that a
// newer table is recycled while an older one stays intact) and a flush loop
// recycles tables. A writer's Get must return its own last value.
func TestKVReadYourWritesWithPinnedTables(t *testing.T) {
	raceProcs(t, 16)
	r := newKVRig(t, &Options{Shards: 2})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var flushes, reads atomic.Int64
	var failure firstFailure
	wg.Add(1)
	go kvFlushLoop(r, stop, &wg, &flushes)
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped(stop) {
				it, err := r.kv.NewIter(nil, nil)
				if err != nil {
					panic(err)
				}
				it.First()
				for range p {
					runtime.Gosched()
				}
				it.Close()
			}
		}()
	}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("w%d", w))
			// Range deletes over a span of the writer's own (other than
			// key) seal tables while the flush loop releases others.
			lo, hi := []byte(fmt.Sprintf("x%d", w)), []byte(fmt.Sprintf("x%d~", w))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				val := []byte(fmt.Sprint(n))
				r.bar.RLock()
				err := r.kv.Put(key, val)
				if err == nil && n%16 == 0 {
					_ = r.kv.Put(append(lo, 'a'), val)
					err = r.kv.DeleteRange(lo, hi)
				}
				r.bar.RUnlock()
				if err != nil {
					panic(err)
				}
				got, err := r.kv.Get(key)
				reads.Add(1)
				if err != nil || string(got) != string(val) {
					msg := fmt.Sprintf("writer %d: Get after Put(%s) = %q, %v", w, val, got, err)
					failure.CompareAndSwap(nil, &msg)
					return
				}
			}
		}()
	}
	runFor(raceDuration, func() bool { return flushes.Load() >= 10 })
	close(stop)
	wg.Wait()
	if msg := failure.Load(); msg != nil {
		t.Fatalf("stale read: %s (%d flushes, %d reads)", *msg, flushes.Load(), reads.Load())
	}
	t.Logf("%d flushes, %d reads", flushes.Load(), reads.Load())
	if flushes.Load() < 10 {
		t.Fatalf("only %d flushes: the test did not exercise recycling", flushes.Load())
	}
}

// bitsRig drives one Bits overlay like the engine does.
type bitsRig struct {
	t    testing.TB
	f    *bitslice.File
	b    *Bits
	acct Account
	bar  sync.RWMutex
	gen  uint64
}

// hookFilter makes h the test hook with filterHook on, and replaces the
// view by a copy whose alim and flim are 0 (as publish makes them while filterHook is
// on; the copy keeps the view's other fields, fast included), so that
// lookups from now on call h at "bits-filter"; the returned func turns
// both off.
func (r *bitsRig) hookFilter(h func(point string)) (off func()) {
	filterHook.Store(true)
	testHook = h
	r.b.vmu.Lock()
	n := *r.b.view.Load()
	n.alim, n.flim = 0, 0
	r.b.view.Store(&n)
	r.b.vmu.Unlock()
	return func() {
		testHook = nil
		filterHook.Store(false)
	}
}

func newBitsRig(t testing.TB, opts *Options) *bitsRig {
	t.Helper()
	f, err := bitslice.Create(filepath.Join(t.TempDir(), "b.bits"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r := &bitsRig{t: t, f: f}
	r.b, err = NewBits(f, &r.acct, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// writeRelease writes and releases g, frozen as generation r.gen (nil:
// nothing was pending), and counts it in flushes, for a flusher goroutine
// of a race test: false after reporting a write's failure to failure.
func (r *bitsRig) writeRelease(g *BitsGen, failure *firstFailure, flushes *atomic.Int64) bool {
	if g == nil {
		return true
	}
	if err := g.Write(context.Background(), r.gen); err != nil {
		failure.fail("write: %v", err)
		return false
	}
	r.b.Release(r.gen)
	flushes.Add(1)
	return true
}

// flush freezes, writes and releases one generation, then settles.
func (r *bitsRig) flush() {
	r.bar.Lock()
	r.gen++
	g := r.b.Freeze(r.gen)
	r.bar.Unlock()
	if g != nil {
		if err := g.Write(context.Background(), r.gen); err != nil {
			r.t.Fatal(err)
		}
		r.b.Release(r.gen)
	}
	r.bar.Lock()
	r.b.Settle()
	r.bar.Unlock()
}

// TestBitsNoStaleReadDuringFlush: one writer sets bit i and then publishes
// i; readers read the latest published bit while a flush loop freezes,
// writes, releases and settles. Every read must see true.
func TestBitsNoStaleReadDuringFlush(t *testing.T) {
	raceProcs(t, 16)
	r := newBitsRig(t, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var published atomic.Int64
	published.Store(-1)
	var flushes, reads atomic.Int64
	var failure firstFailure
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped(stop) {
			r.bar.Lock()
			r.gen++
			g := r.b.Freeze(r.gen)
			r.bar.Unlock()
			if g != nil {
				if err := g.Write(context.Background(), r.gen); err != nil {
					panic(err)
				}
				r.b.Release(r.gen)
				flushes.Add(1)
			}
			r.bar.Lock()
			r.b.Settle()
			r.bar.Unlock()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.bar.RLock()
			err := r.b.Set(i*7%(1<<20), true)
			r.bar.RUnlock()
			if err != nil {
				panic(err)
			}
			published.Store(int64(i))
		}
	}()
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped(stop) {
				i := published.Load()
				if i < 0 {
					continue
				}
				reads.Add(1)
				if !r.b.Get(uint64(i) * 7 % (1 << 20)) {
					msg := fmt.Sprintf("bit %d read false after it was set and published", uint64(i)*7%(1<<20))
					failure.CompareAndSwap(nil, &msg)
					return
				}
			}
		}()
	}
	time.Sleep(raceDuration)
	close(stop)
	wg.Wait()
	if msg := failure.Load(); msg != nil {
		t.Fatalf("stale read: %s (%d flushes, %d reads)", *msg, flushes.Load(), reads.Load())
	}
	t.Logf("%d flushes, %d reads", flushes.Load(), reads.Load())
}

// stopped reports whether stop is closed: the loops of the race tests run
// until it is.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
