package kvbuf

// A model-based randomized test: goroutines run random Put, Delete, Get,
// Scan, Set-bit, Get-bit and Flush calls against the engine and an
// in-memory model; between rounds the engine is flushed, closed and
// reopened, or closed while the goroutines are still writing. Each
// goroutine owns its keys ("g<i>/...") and its bits (indexes = i mod G, so
// goroutines share words but never bits), which makes every read exactly
// checkable despite the concurrency. A failure prints the seed; replay it
// with -model.seed (and the same -model.steps and -model.goroutines).

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
)

var (
	modelSeed       = flag.Uint64("model.seed", 0, "seed of TestModel (0: time-based, printed)")
	modelSteps      = flag.Int("model.steps", 4000, "operations per goroutine in TestModel")
	modelGoroutines = flag.Int("model.goroutines", 4, "goroutines in TestModel")
)

// goModel is one goroutine's share of the model.
type goModel struct {
	kv   map[string]string
	bits map[uint64]bool
}

func TestModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = uint64(rand.Int64())
	}
	steps, G := *modelSteps, *modelGoroutines
	if testing.Short() {
		steps = min(steps, 500)
	}
	t.Logf("seed %d (replay: go test -run TestModel -model.seed %d -model.steps %d -model.goroutines %d)", seed, seed, steps, G)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	dir := t.TempDir()
	models := make([]*goModel, G)
	for g := range models {
		models[g] = &goModel{kv: map[string]string{}, bits: map[uint64]bool{}}
	}
	var op, maxAcked atomic.Uint64 // op numbers handed out; highest acknowledged
	const rounds = 8
	main := rand.New(rand.NewPCG(seed, 0))
	db := openT(t, dir, &Options{FlushInterval: -1, MaxPendingBytes: 1 << 20, Shards: 1 + main.IntN(16)})
	var counts [8]atomic.Int64 // per op kind, for the log
	for r := range rounds {
		closeMidway := main.IntN(4) == 0
		var progress atomic.Int64
		half := make(chan struct{})
		var halfOnce sync.Once
		var wg sync.WaitGroup
		errs := make(chan error, G)
		for g := range G {
			rng := rand.New(rand.NewPCG(seed, uint64(r*G+g+1)))
			wg.Go(func() {
				if err := modelWorker(db, g, G, rng, steps/rounds, models[g], &op, &maxAcked, &counts, func() {
					if progress.Add(1) == int64(G*steps/rounds/2) {
						halfOnce.Do(func() { close(half) })
					}
				}); err != nil {
					errs <- err
				}
			})
		}
		if closeMidway {
			// Close while the goroutines are still working: they see
			// ErrClosed from then on, and the model holds only what they
			// were acknowledged.
			select {
			case <-half:
			case <-waitChan(&wg):
			}
			closeT(t, db)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			fail("round %d: %v", r, err)
		}
		switch {
		case closeMidway:
			db = openT(t, dir, nil)
		case main.IntN(3) == 0:
			closeT(t, db)
			db = openT(t, dir, &Options{FlushInterval: -1})
		case main.IntN(2) == 0:
			if err := db.Flush(ctx); err != nil {
				fail("flush: %v", err)
			}
		}
		if err := verifyModel(db, G, models); err != nil {
			fail("after round %d (close midway %v): %v", r, closeMidway, err)
		}
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if err := verifyModel(db, G, models); err != nil {
		fail("after the final reopen: %v", err)
	}
	if wm := db.Watermark(); wm != maxAcked.Load() {
		fail("watermark %d, want the last acknowledged op %d", wm, maxAcked.Load())
	}
	var c [8]int64
	for i := range c {
		c[i] = counts[i].Load()
	}
	t.Logf("ops put/delete/get/scan/set/getbit/flush/closed: %v", c)
}

func waitChan(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// modelWorker runs n random operations of goroutine g. An ErrClosed ends it
// quietly (Close began); any other surprise is returned.
func modelWorker(db *DB, g, G int, rng *rand.Rand, n int, m *goModel, op, maxAcked *atomic.Uint64, counts *[8]atomic.Int64, tick func()) error {
	closed := func(err error) bool {
		if errors.Is(err, ErrClosed) {
			counts[7].Add(1)
			return true
		}
		return false
	}
	k, err := db.KV("model")
	if err != nil {
		if closed(err) {
			return nil
		}
		return err
	}
	b, err := db.Bits("model")
	if err != nil {
		if closed(err) {
			return nil
		}
		return err
	}
	acked := func(o uint64) {
		for cur := maxAcked.Load(); o > cur && !maxAcked.CompareAndSwap(cur, o); cur = maxAcked.Load() {
		}
	}
	key := func() string { return fmt.Sprintf("g%d/%03d", g, rng.IntN(64)) }
	bit := func() uint64 {
		j := uint64(rng.IntN(2048))
		if rng.IntN(50) == 0 {
			j += uint64(rng.IntN(1 << 16)) // far: grows the file
		}
		return j*uint64(G) + uint64(g)
	}
	for range n {
		tick()
		var err error
		switch p := rng.IntN(100); {
		case p < 30:
			kk, v := key(), fmt.Sprintf("v%d-%d", g, rng.Uint32())
			o := op.Add(1)
			if err = k.Put(ctx, []byte(kk), []byte(v), o); err == nil {
				m.kv[kk] = v
				acked(o)
			}
			counts[0].Add(1)
		case p < 40:
			kk := key()
			o := op.Add(1)
			if err = k.Delete(ctx, []byte(kk), o); err == nil {
				delete(m.kv, kk)
				acked(o)
			}
			counts[1].Add(1)
		case p < 60:
			kk := key()
			var v []byte
			v, err = k.Get([]byte(kk))
			want, ok := m.kv[kk]
			switch {
			case closed(err):
				return nil
			case ok && (err != nil || string(v) != want):
				return fmt.Errorf("g%d Get(%s) = %q, %v; want %q", g, kk, v, err, want)
			case !ok && !errors.Is(err, ErrNotFound):
				return fmt.Errorf("g%d Get(%s) = %q, %v; want ErrNotFound", g, kk, v, err)
			}
			err = nil
			counts[2].Add(1)
		case p < 65:
			err = scanOwn(k, g, m)
			counts[3].Add(1)
		case p < 85:
			i, v := bit(), rng.IntN(2) == 0
			o := op.Add(1)
			if err = b.Set(ctx, i, v, o); err == nil {
				m.bits[i] = v
				acked(o)
			}
			counts[4].Add(1)
		case p < 98:
			i := bit()
			var v bool
			v, err = b.Get(i)
			if err == nil && v != m.bits[i] {
				return fmt.Errorf("g%d bit %d = %v, want %v", g, i, v, m.bits[i])
			}
			counts[5].Add(1)
		default:
			err = db.Flush(ctx)
			counts[6].Add(1)
		}
		if err != nil {
			if closed(err) {
				return nil
			}
			return fmt.Errorf("g%d: %w", g, err)
		}
	}
	return nil
}

// scanOwn compares a scan of goroutine g's keys with its model.
func scanOwn(k *KV, g int, m *goModel) error {
	lo, hi := fmt.Sprintf("g%d/", g), fmt.Sprintf("g%d0", g) // '0' follows '/'
	it, err := k.NewIter([]byte(lo), []byte(hi))
	if err != nil {
		return err
	}
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	want := make([]string, 0, len(m.kv))
	for kk, v := range m.kv {
		want = append(want, kk+"="+v)
	}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("g%d scan:\n got %v\nwant %v", g, got, want)
	}
	return nil
}

// verifyModel checks every goroutine's keys (by Get and by scan) and bits.
func verifyModel(db *DB, G int, models []*goModel) error {
	k, err := db.KV("model")
	if err != nil {
		return err
	}
	b, err := db.Bits("model")
	if err != nil {
		return err
	}
	for g, m := range models {
		if err := scanOwn(k, g, m); err != nil {
			return err
		}
		for i := range 64 {
			kk := fmt.Sprintf("g%d/%03d", g, i)
			v, err := k.Get([]byte(kk))
			want, ok := m.kv[kk]
			if ok && (err != nil || string(v) != want) || !ok && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("Get(%s) = %q, %v; want %q (present %v)", kk, v, err, want, ok)
			}
		}
		for i, want := range m.bits {
			if v, err := b.Get(i); err != nil || v != want {
				return fmt.Errorf("bit %d (g%d) = %v, %v; want %v", i, g, v, err, want)
			}
		}
		for j := range uint64(2048) { // bits never set read false
			i := j*uint64(G) + uint64(g)
			if _, set := m.bits[i]; !set {
				if v, err := b.Get(i); err != nil || v {
					return fmt.Errorf("never-set bit %d = %v, %v", i, v, err)
				}
			}
		}
	}
	return nil
}
