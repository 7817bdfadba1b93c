package kvbuf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/storage"
)

func newBudgetT(t testing.TB, size int64, opts *BudgetOptions) *MemoryBudget {
	t.Helper()
	b, err := NewMemoryBudget(size, opts)
	if err != nil {
		t.Fatalf("NewMemoryBudget(%d, %+v): %v", size, opts, err)
	}
	return b
}

func TestMemoryBudgetBadInputs(t *testing.T) {
	for _, c := range []struct {
		size int64
		opts *BudgetOptions
	}{
		{0, nil},
		{-1, nil},
		{-1 << 40, nil},
		{1 << 20, &BudgetOptions{HighPercent: -1}},
		{1 << 20, &BudgetOptions{HighPercent: 101}},
		{1 << 20, &BudgetOptions{Policy: 3}},
		{1 << 20, &BudgetOptions{Policy: -1}},
		{1 << 20, &BudgetOptions{MaxFlushes: -1}},
	} {
		b, err := NewMemoryBudget(c.size, c.opts)
		if !errors.Is(err, ErrBadOptions) || b != nil {
			t.Errorf("NewMemoryBudget(%d, %+v) = %v, %v; want nil, ErrBadOptions", c.size, c.opts, b, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "kvbuf: memory budget") {
			t.Errorf("error text %q: want it to start with \"kvbuf: memory budget\"", err)
		}
	}
	b := newBudgetT(t, 1, &BudgetOptions{HighPercent: 100, Policy: BudgetOldestFirst, MaxFlushes: 1})
	if m := b.Metrics(); m.Size != 1 || m.HighMark != 1 || m.MaxForcedBytes != 0 {
		t.Fatalf("Metrics of a 1-byte budget: %+v", m)
	}
	if s := BudgetOldestFirst.String() + " " + BudgetLargestFirst.String() + " " + BudgetPolicy(7).String(); s != "oldest-first largest-first BudgetPolicy(7)" {
		t.Fatalf("policy names: %q", s)
	}

	// Close while an engine uses the budget fails and closes nothing; after
	// the engine's Close it succeeds, is idempotent, and Open refuses the
	// closed budget (creating nothing in the directory).
	b = newBudgetT(t, 1<<20, nil)
	db := openT(t, t.TempDir(), &Options{MemoryBudget: b})
	mustPut(t, mustKV(t, db, "k"), "a", "1", 0)
	if m := b.Metrics(); m.Engines != 1 || m.Bytes <= 0 || db.Metrics().BudgetBytes != m.Bytes {
		t.Fatalf("budget %+v, engine share %d after a write", m, db.Metrics().BudgetBytes)
	}
	if err := b.Close(); !errors.Is(err, ErrBudgetInUse) {
		t.Fatalf("Close of a budget in use = %v, want ErrBudgetInUse", err)
	}
	db2 := openT(t, t.TempDir(), &Options{MemoryBudget: b}) // still open
	closeT(t, db2)
	closeT(t, db)
	if m := b.Metrics(); m.Engines != 0 || m.Bytes != 0 {
		t.Fatalf("budget after its engines closed: %+v", m)
	}
	if err := db.Metrics().BudgetBytes; err != 0 {
		t.Fatalf("BudgetBytes after Close = %d", err)
	}
	for range 2 {
		if err := b.Close(); err != nil {
			t.Fatalf("Close of an unused budget: %v", err)
		}
	}
	dir := filepath.Join(t.TempDir(), "e")
	if db, err := Open(dir, &Options{MemoryBudget: b}); !errors.Is(err, ErrBudgetClosed) || db != nil {
		t.Fatalf("Open with a closed budget = %v, %v; want ErrBudgetClosed", db, err)
	}
	if names, _ := treeNames(dir); len(names) > 0 {
		t.Fatalf("Open with a closed budget left %v", names)
	}
}

// budgetFaultFS is a store file system, in memory, whose flushes by
// ingestion fail at random while armed (creating a generation's table):
// the flush fails, the engine keeps the changes and retries.
type budgetFaultFS struct {
	armed atomic.Bool
	hits  atomic.Int64
	fs    vfs.FS
}

func newBudgetFaultFS(seed uint64, percent int) *budgetFaultFS {
	f := &budgetFaultFS{}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 7))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !f.armed.Load() || op.Kind != errorfs.OpCreate || !strings.Contains(op.Path, storage.IngestDir) {
			return nil
		}
		mu.Lock()
		fail := rng.IntN(100) < percent
		mu.Unlock()
		if fail {
			f.hits.Add(1)
			return errorfs.ErrInjected
		}
		return nil
	})
	f.fs = errorfs.Wrap(vfs.NewMem(), inj)
	return f
}

// budgetEngines opens n engines under b. Every tenth engine (from the
// first) has its store in ffs and flushes by ingestion, its flushes
// failing at random while ffs is armed; the others have theirs in one
// in-memory file system and flush through the store's write-ahead log
// (about 20 times faster: a test of 1,000 engines pays for it).
func budgetEngines(t testing.TB, n int, b *MemoryBudget, ffs *budgetFaultFS) ([]*DB, []*KV) {
	t.Helper()
	root := t.TempDir()
	mem := vfs.NewMem()
	dbs := make([]*DB, n)
	kvs := make([]*KV, n)
	for i := range dbs {
		o := &Options{
			MemoryBudget:  b,
			FlushInterval: -1, // only the budget (and MaxPendingBytes) flush
			ReadTierBytes: -1,
			CacheSize:     64 << 10,
			PoolBytes:     -1,
			storeFS:       mem,
		}
		if i%10 == 0 {
			o.IngestThreshold = 1 // every flush by ingestion: the fault seam
			o.storeFS = ffs.fs
		}
		dbs[i] = openT(t, filepath.Join(root, fmt.Sprint(i)), o)
		kvs[i] = mustKV(t, dbs[i], "ks")
	}
	return dbs, kvs
}

// TestMemoryBudgetManyEngines writes at random to 1,000 engines (250 with
// -race, 100 with -short) under one budget while their flushes fail at random and writes
// give up at random (a context ending while they wait for the budget). A
// monitor sums the engines' pending bytes throughout: neither the sum nor
// the budget's own total ever passes the budget by more than one mean
// forced generation (issue 31's bound; mutation 580). Every acknowledged
// write is then readable and durable, and no write that returned an error
// is.
func TestMemoryBudgetManyEngines(t *testing.T) {
	// 1,000 engines take about 40 s in a normal build; the race
	// detector makes opening them alone take minutes, so the race build
	// (the README's test command) runs 250 and -short 100.
	n := 1000
	switch {
	case testing.Short():
		n = 100
	case raceEnabled():
		n = 250
	}
	const (
		writers   = 16
		valueSize = 200
	)
	// 32 KiB per engine (about 100 writes; 320 per engine in all, so
	// each is flushed a few times): a mean forced generation is larger
	// than a round of writes (below). Half the flushes of the engines on
	// ffs fail, so that -short's 10 of them fail some forced flushes.
	size := int64(n) * 32 << 10
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	seed := testSeed(t)
	ffs := newBudgetFaultFS(seed, 50)
	// One forced flush at a time, so that the flushes lag the writers and
	// the total reaches the size: with the default 4, at 1,000 engines, it
	// stayed at 0.92 of the size and the bound was never tried (mutation
	// 580, rounds started past the size, went uncaught).
	b := newBudgetT(t, size, &BudgetOptions{MaxFlushes: 1})
	dbs, kvs := budgetEngines(t, n, b, ffs)
	ffs.armed.Store(true)

	writesPer := 320 * n / writers
	var maxSum atomic.Int64
	stop := make(chan struct{})
	var mon sync.WaitGroup
	mon.Add(1)
	go func() {
		defer mon.Done()
		for {
			var sum int64
			for _, db := range dbs {
				sum += db.acct.Bytes()
			}
			atomicMaxInt(&maxSum, sum)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()

	type result struct{ ok, failed [][]byte }
	results := make([]result, writers) // keys written, by engine index in the key
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			val := make([]byte, valueSize)
			for i := range writesPer {
				e := rng.IntN(n)
				key := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{byte(w)}, uint32(e)), uint32(i))
				binary.BigEndian.PutUint64(val, uint64(w)<<32|uint64(i))
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(10) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(200))*time.Microsecond)
				}
				err := kvs[e].Put(ctx, key, val, 0)
				cancel()
				switch {
				case err == nil:
					results[w].ok = append(results[w].ok, key)
				case errors.Is(err, context.DeadlineExceeded):
					results[w].failed = append(results[w].failed, key)
				default:
					t.Errorf("Put to engine %d: %v", e, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(stop)
	mon.Wait()
	ffs.armed.Store(false)
	ctx := context.Background()
	for i, db := range dbs {
		if err := db.Flush(ctx); err != nil {
			t.Fatalf("engine %d: Flush with faults off: %v", i, err)
		}
	}

	m := b.Metrics()
	var okN, failedN int
	for _, r := range results {
		okN += len(r.ok)
		failedN += len(r.failed)
	}
	t.Logf("%d engines, budget %d, %d writers for %v: max pending sum %d (%.3f of the budget), budget max %d; largest forced %d, mean forced %d; %d forced flushes (%d failed, %d faults injected); %d waits, %v waiting; %d writes, %d gave up",
		n, size, writers, elapsed, maxSum.Load(), float64(maxSum.Load())/float64(size), m.MaxBytes, m.MaxForcedBytes, m.ForcedBytes/max(m.ForcedFlushes, 1), m.ForcedFlushes, m.ForcedFlushErrors, ffs.hits.Load(), m.Waits, m.WaitTime, okN, failedN)
	// Issue 31's bound: the total never passes the size by more than one
	// generation, here the mean generation the budget forced in the run
	// (ForcedBytes over ForcedFlushes: W11's OVER/GEN at most 1). The
	// budget's own bound is one round of writes, one per writer, and what
	// they grow their tables by: at 32 KiB per engine a mean forced
	// generation (about 43-51 KiB) is larger than a round of 16 writes
	// (about 1 KiB each, plus a table step when one crosses it; at 4 KiB
	// per engine, 6 KiB generations, it is not). With 48 writers a round
	// could reach it (a review measured 27-28 KiB over against a bound of
	// about 50), with 16 the total passed the size by 11-12 KiB. Both
	// the budget's exact total and the monitor's sum of the engines'
	// pending bytes (which counts writes not yet synced) are held to it.
	gen := m.ForcedBytes / max(m.ForcedFlushes, 1)
	if got := maxSum.Load(); got > size+gen {
		t.Errorf("pending bytes reached %d: budget %d + a mean forced generation %d", got, size, gen)
	}
	if m.MaxBytes > size+gen {
		t.Errorf("budget total reached %d: budget %d + a mean forced generation %d", m.MaxBytes, size, gen)
	}
	if m.ForcedFlushes == 0 || m.Waits == 0 || ffs.hits.Load() == 0 || m.ForcedFlushErrors == 0 || m.MaxBytes <= m.HighMark {
		t.Errorf("the run did not exercise the budget: %+v, %d faults", m, ffs.hits.Load())
	}
	if m.Waiting != 0 {
		t.Errorf("writes still waiting: %+v", m)
	}
	// A forced flush starts with its engine's share, which is part of the
	// total: the largest is above zero and at most the highest total.
	if m.MaxForcedBytes <= 0 || m.MaxForcedBytes > m.MaxBytes {
		t.Errorf("largest forced share %d, highest total %d", m.MaxForcedBytes, m.MaxBytes)
	}
	for w, r := range results {
		for _, key := range r.ok {
			e := binary.BigEndian.Uint32(key[1:])
			got, err := kvs[e].Get(key)
			if err != nil || binary.BigEndian.Uint64(got) != uint64(w)<<32|uint64(binary.BigEndian.Uint32(key[5:])) {
				t.Fatalf("engine %d key %x: %x, %v after an acknowledged write", e, key, got, err)
			}
		}
		for _, key := range r.failed {
			e := binary.BigEndian.Uint32(key[1:])
			if got, err := kvs[e].Get(key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("engine %d key %x: %x, %v after a write that failed", e, key, got, err)
			}
		}
	}
	for i, db := range dbs {
		if p := db.Metrics().PendingBytes; p != 0 {
			t.Fatalf("engine %d: %d bytes pending after its Flush", i, p)
		}
		closeT(t, db)
	}
	if m := b.Metrics(); m.Bytes != 0 || m.Engines != 0 || m.Waiting != 0 || m.FlushesInProgress != 0 {
		t.Fatalf("budget after every engine closed: %+v", m)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitForWaiting waits until n writes wait for b.
func waitForWaiting(t *testing.T, b *MemoryBudget, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.Metrics().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes waiting after 10s, want %d: %+v", b.Metrics().Waiting, n, b.Metrics())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMemoryBudgetWaitEnds fills a one-byte budget whose flushes all fail:
// writes wait. A waiting write whose context ends returns ctx.Err() and
// changes nothing; one whose engine closes returns ErrClosed; a write of
// another engine sharing the budget waits too (the budget is shared) and
// gets through once flushes succeed again.
func TestMemoryBudgetWaitEnds(t *testing.T) {
	ffs := newBudgetFaultFS(1, 100)
	b := newBudgetT(t, 1, nil)
	dbs, kvs := budgetEngines(t, 2, b, ffs)
	ctx := context.Background()
	mustPut(t, kvs[0], "first", "v", 0) // admitted: the budget was empty
	ffs.armed.Store(true)

	for _, c := range []struct {
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 20*time.Millisecond) }, context.DeadlineExceeded},
		{func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			return c, cancel
		}, context.Canceled},
	} {
		wctx, cancel := c.ctx()
		err := kvs[0].Put(wctx, []byte("late"), []byte("v"), 0)
		cancel()
		if err != c.want {
			t.Fatalf("Put waiting for a full budget = %v, want %v as it is", err, c.want)
		}
		if _, err := kvs[0].Get([]byte("late")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a write that gave up waiting was applied: %v", err)
		}
	}
	// Each wait ended with its 20 ms context, but the budget's clock
	// starts when the write begins to wait, after the context was made
	// (39.9 ms for the two at GOMAXPROCS=8 under -race): at least 15 ms
	// each.
	m := b.Metrics()
	if m.Waits != 2 || m.Waiting != 0 || m.WaitTime < 30*time.Millisecond || m.ForcedFlushErrors == 0 {
		t.Fatalf("budget after two writes gave up: %+v", m)
	}
	if em := dbs[0].Metrics(); em.BudgetWaits != 2 || em.BudgetWaitTime != m.WaitTime || em.BudgetForcedFlushes == 0 {
		t.Fatalf("engine metrics after two writes gave up: waits %d, %v, forced %d", em.BudgetWaits, em.BudgetWaitTime, em.BudgetForcedFlushes)
	}
	if err := kvs[1].Put(canceled(), []byte("x"), []byte("v"), 0); err != context.Canceled {
		t.Fatalf("Put with a cancelled context = %v", err)
	}

	// A write of each engine waits; engine 0 closes: its write ends with
	// ErrClosed, and its share (all the budget held: engine 1 wrote
	// nothing) is released, which lets engine 1's write through.
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { errs <- kvs[i].Put(ctx, []byte("w"), []byte("v"), 0) }()
	}
	waitForWaiting(t, b, 2)
	if err := dbs[0].Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close with its flushes failing = %v, want the injected error", err)
	}
	got := []error{<-errs, <-errs}
	if !(errors.Is(got[0], ErrClosed) && got[1] == nil || errors.Is(got[1], ErrClosed) && got[0] == nil) {
		t.Fatalf("the waiting writes of a closed engine and another = %v; want ErrClosed and nil", got)
	}
	// Engine 1's flushes succeed, so the budget may flush its write at any
	// moment and its share falls to 0 meanwhile (a check that the total
	// stayed above 0 failed that way under load): wait until the budget's
	// total and engine 1's share agree. Engine 0's share, had Close not
	// released it, would keep them apart, since engine 1's share only falls.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := b.Metrics()
		share := dbs[1].Metrics().BudgetBytes
		if m.Engines == 1 && m.Waiting == 0 && m.Bytes == share {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget after engine 0 closed: %+v, engine 1's share %d", m, share)
		}
		time.Sleep(time.Millisecond)
	}
	wantGet(t, kvs[1], "w", "v")
	ffs.armed.Store(false)
	closeT(t, dbs[1])
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryBudgetBitsSet: Bits.Set, whose common case is admitted in
// line (Flusher.EnterWrite), goes through the memory budget like every
// write: over a full budget whose flushes fail it waits, and a wait that
// its context ends returns ctx.Err() with nothing set (mutation 620: a Set
// that skips the budget returns at once).
func TestMemoryBudgetBitsSet(t *testing.T) {
	ffs := newBudgetFaultFS(1, 100)
	b := newBudgetT(t, 1, nil)
	dbs, kvs := budgetEngines(t, 1, b, ffs)
	bits := mustBits(t, dbs[0], "b")
	ctx := context.Background()
	// Every flush of the engine fails (its put makes each one ingest),
	// the one the put forces too: the budget stays full.
	ffs.armed.Store(true)
	mustPut(t, kvs[0], "first", "v", 0) // admitted: the budget was empty
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- bits.Set(wctx, 2, true, 0) }()
	waitForWaiting(t, b, 1) // fails after its wait if the Set returned without waiting
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Set waiting for a full budget = %v, want context.Canceled as it is", err)
	}
	if v, err := bits.Get(2); err != nil || v {
		t.Fatalf("a Set that gave up waiting: bit 2 = %v, %v; want false", v, err)
	}
	ffs.armed.Store(false)
	closeT(t, dbs[0])
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestMemoryBudgetFairness runs one writer per engine, 64 engines, under a
// budget that keeps them waiting most of the time, until their writes have
// queued for rounds (B2) 40 times per engine together. Two checks: no
// engine had two writes let through by one round (B2: a round lets each
// waiting writer through once, so with one writer per engine a second
// write in a round went round the queue; mutation 642), and each engine's
// writes queued (Metrics.BudgetWaits) between half and twice the mean:
// the rounds the engines' writers took part in, the target of
// each engine's share of the writes made under pressure. Writes that did
// not queue are not counted: below half the high mark with nobody waiting
// a write goes at once (B1), as fast as the scheduler runs its goroutine,
// which the budget has no say in (counting every write once the budget
// was first full, one engine made 104 against a mean of 40 in CI beside
// other packages' tests).
//
// It runs on one processor (GOMAXPROCS 1), so that the Go scheduler alone
// decides which writers run. With more processors than the machine gives
// the process, the operating system does: at 16 on 2 busy cores, 5 runs in
// 300 had an engine outside the bounds (one queued 1,147 times against a
// mean of 40), each time from a few writers making rounds alone or in
// pairs while the others were not run (stack dumps found 59 of 64 writers
// runnable in the scheduler's global queue, after runtime.Gosched). The
// rounds cannot queue a writer that does not run (MemoryBudget's caveats).
func TestMemoryBudgetFairness(t *testing.T) {
	const engines, per = 64, 40
	// maxWrites ends a writer that queues too rarely, so that a budget
	// that stopped queuing writes fails the test instead of hanging it.
	const maxWrites = 100 * per
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ffs := newBudgetFaultFS(1, 0)
	b := newBudgetT(t, engines*2<<10, nil)
	dbs, kvs := budgetEngines(t, engines, b, ffs)
	var wg sync.WaitGroup
	val := make([]byte, 100)
	start := make(chan struct{})
	for e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; b.waits.Load() < engines*per; i++ {
				if i == maxWrites {
					t.Errorf("engine %d: %d writes, and the budget's writes queued only %d times", e, i, b.waits.Load())
					return
				}
				if err := kvs[e].Put(context.Background(), binary.BigEndian.AppendUint32(nil, uint32(i)), val, 0); err != nil {
					t.Errorf("engine %d: %v", e, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	var lo, hi, sum int64
	for e, db := range dbs {
		w := db.Metrics().BudgetWaits
		if e == 0 {
			lo, hi = w, w
		}
		lo, hi, sum = min(lo, w), max(hi, w), sum+w
		if r := db.share.repeats.Load(); r != 0 {
			t.Errorf("engine %d: %d writes let through by a round that had let one of its writes through already", e, r)
		}
	}
	mean := sum / engines
	m := b.Metrics()
	t.Logf("writes per engine that queued: min %d, max %d, mean %d; %d waits, %d forced flushes", lo, hi, mean, m.Waits, m.ForcedFlushes)
	if sum != m.Waits {
		t.Errorf("the engines' waits sum to %d, the budget's are %d", sum, m.Waits)
	}
	if lo*2 < mean || hi > 2*mean {
		t.Errorf("writes per engine that queued from %d to %d: want within 2x of the mean %d", lo, hi, mean)
	}
	for _, db := range dbs {
		closeT(t, db)
	}
}

// putEach makes per puts of 100-byte values to each engine of kvs, a
// goroutine per engine, key(e, i) the key of engine e's put i, and returns
// once every put returned (a failed one ends its engine's puts).
func putEach(t *testing.T, ctx context.Context, kvs []*KV, per int, key func(e, i int) []byte) {
	t.Helper()
	var wg sync.WaitGroup
	for e := range kvs {
		wg.Go(func() {
			val := make([]byte, 100)
			for i := range per {
				if err := kvs[e].Put(ctx, key(e, i), val, 0); err != nil {
					t.Errorf("engine %d, put %d: %v", e, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestMemoryBudgetOverGen is issue 31's bound under many small engines
// (W11's geometry at --quick: 100 engines, 256 KiB each, a writer each,
// 12-byte keys and 100-byte values): the total passes the size by at most
// one mean forced generation. Oldest-first forcing flushes of engines
// just flushed (their first write's time kept while their writer never
// lets them empty) made the mean generation a few KiB and failed it
// (mutation 270).
func TestMemoryBudgetOverGen(t *testing.T) {
	engines, per := 100, 3000
	if raceEnabled() || testing.Short() {
		engines, per = 32, 2000
	}
	size := int64(engines) * 256 << 10
	for _, p := range []BudgetPolicy{BudgetOldestFirst, BudgetLargestFirst} {
		t.Run(p.String(), func(t *testing.T) {
			b := newBudgetT(t, size, &BudgetOptions{Policy: p})
			dbs, kvs := budgetEngines(t, engines, b, newBudgetFaultFS(1, 0))
			putEach(t, context.Background(), kvs, per, func(e, i int) []byte {
				return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(e)), uint32(i))
			})
			m := b.Metrics()
			if m.ForcedFlushes == 0 {
				t.Fatalf("no forced flush: peak %d of %d", m.MaxBytes, size)
			}
			gen := m.ForcedBytes / m.ForcedFlushes
			over := m.MaxBytes - size
			t.Logf("%s: peak %d (%.4f of the size), mean forced generation %d (%.4f), %d forced flushes, over/gen %.2f",
				p, m.MaxBytes, float64(m.MaxBytes)/float64(size), gen, float64(gen)/float64(size), m.ForcedFlushes, float64(over)/float64(gen))
			if over > gen {
				t.Errorf("%s: the total passed the size by %d bytes, %.2f mean forced generations of %d (want at most 1)", p, over, float64(over)/float64(gen), gen)
			}
			for _, db := range dbs {
				closeT(t, db)
			}
		})
	}
}

// TestMemoryBudgetOldestRestarts: an engine written while the budget
// flushes it, after the flush froze its changes and before it released
// them (so that its pending bytes never return to 0), is not the oldest
// any more once the flush succeeded: oldest-first picks the engine whose
// changes are older (mutation 270).
func TestMemoryBudgetOldestRestarts(t *testing.T) {
	b := newBudgetT(t, 1<<30, &BudgetOptions{Policy: BudgetOldestFirst}) // no flush forced on its own
	var during atomic.Bool
	var kvs []*KV
	ctx := context.Background()
	putT := func(kv *KV, key string) {
		if err := kv.Put(ctx, []byte(key), []byte("v"), 0); err != nil {
			t.Errorf("Put %q: %v", key, err)
		}
	}
	// Engine 0 flushes by ingestion into ffs: its first ingested file's
	// creation (after the freeze, before the release) writes "a2".
	ffs := &budgetFaultFS{}
	ffs.fs = errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.Contains(op.Path, storage.IngestDir) && during.CompareAndSwap(true, false) {
			putT(kvs[0], "a2")
		}
		return nil
	}))
	dbs, kvs := budgetEngines(t, 2, b, ffs)
	a, other := dbs[0].share, dbs[1].share
	putT(kvs[0], "a1")
	for time.Now().UnixNano() <= a.since.Load() {
		runtime.Gosched() // the other engine's changes strictly newer
	}
	putT(kvs[1], "b1")
	for time.Now().UnixNano() <= other.since.Load() {
		runtime.Gosched()
	}
	if a.since.Load() >= other.since.Load() {
		t.Fatalf("since %d and %d: want the first engine's older", a.since.Load(), other.since.Load())
	}
	during.Store(true)
	b.mu.Lock()
	a.flushing = true
	b.flushing++
	a.wg.Add(1)
	b.mu.Unlock()
	a.forcedFlush()
	if during.Load() || a.bytes.Load() <= 0 {
		t.Fatalf("engine holds %d bytes after its flush (write during it: %v)", a.bytes.Load(), !during.Load())
	}
	b.mu.Lock()
	got := b.pickLocked()
	b.mu.Unlock()
	if got != other {
		t.Errorf("oldest-first picked the engine just flushed (since %d, the other's %d)", a.since.Load(), other.since.Load())
	}
	for _, db := range dbs {
		closeT(t, db)
	}
}

// TestMemoryBudgetStepsLargerThanSize: engines whose every growth step is
// larger than the whole budget still make progress (writes wait for the
// budget only before they begin, holding nothing a flush needs, and a
// round's end past the high mark forces flushes), and the writes all land.
func TestMemoryBudgetStepsLargerThanSize(t *testing.T) {
	const engines, per = 4, 200
	b := newBudgetT(t, 2<<10, nil)
	dbs, kvs := budgetEngines(t, engines, b, newBudgetFaultFS(1, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // 1-2 s when it holds
	defer cancel()
	putEach(t, ctx, kvs, per, func(_, i int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(i)) })
	for e, db := range dbs {
		for i := range per {
			if _, err := kvs[e].Get(binary.BigEndian.AppendUint32(nil, uint32(i))); err != nil {
				t.Fatalf("engine %d, key %d: %v", e, i, err)
			}
		}
		closeT(t, db)
	}
	if m := b.Metrics(); m.ForcedFlushes == 0 || m.Waits == 0 {
		t.Errorf("%d forced flushes, %d waits: the budget never held writes back", m.ForcedFlushes, m.Waits)
	}
}

// TestMemoryBudgetRounds is rule B2 step by step: a write let through
// alone starts a round; while it runs, another engine's write queues
// though there is room, and so does the first engine's next write; the
// round's end lets both through together, as the next round. Without
// rounds (mutation 95) the second engine's write goes at once, and the
// writer the scheduler runs first could write on alone: the statistic of
// TestMemoryBudgetFairness does not tell the two apart any more.
func TestMemoryBudgetRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudgetT(t, 1<<20, nil)
		share := func() *budgetShare {
			return &budgetShare{b: b, done: make(chan struct{})}
		}
		a, c := share(), share()
		ctx := context.Background()
		if err := b.wait(ctx, a); err != nil { // nobody waits, no round: a round of one
			t.Fatal(err)
		}
		if r := b.round.Load(); r != 1 {
			t.Fatalf("round of %d writes after a write went alone; want 1", r)
		}
		went := make(chan string, 2)
		go func() {
			if err := b.wait(ctx, c); err != nil {
				t.Error(err)
			}
			went <- "c"
		}()
		synctest.Wait()
		select {
		case <-went:
			t.Fatal("engine c's write went while engine a's round ran")
		default:
		}
		go func() {
			if err := b.wait(ctx, a); err != nil {
				t.Error(err)
			}
			went <- "a"
		}()
		synctest.Wait()
		if w := b.waiting.Load(); w != 2 || len(went) != 0 {
			t.Fatalf("%d writes waiting, %d gone, during the round; want 2, 0", w, len(went))
		}
		b.done() // the round's one write ends: the next round lets both through
		synctest.Wait()
		if len(went) != 2 || b.round.Load() != 2 || b.waiting.Load() != 0 {
			t.Fatalf("%d writes gone, round of %d, %d waiting after the round ended; want 2, 2, 0", len(went), b.round.Load(), b.waiting.Load())
		}
		b.done()
		b.done()
		if r := b.round.Load(); r != 0 {
			t.Fatalf("round count %d after both ended; want 0", r)
		}
	})
}

// TestMemoryBudgetRoundCap: a round lets at most budgetRoundMax queued
// writes through, oldest first; the rest go in the next round, once it
// ended. Without the cap (mutation 581) a round is every writer's write,
// and 1,000 writers (W11 before its fixed pool) passed the size by more
// than a forced generation.
func TestMemoryBudgetRoundCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudgetT(t, 1<<20, nil)
		ctx := context.Background()
		first := &budgetShare{b: b, done: make(chan struct{})}
		if err := b.wait(ctx, first); err != nil { // a round of one
			t.Fatal(err)
		}
		const n = budgetRoundMax + 2
		went := make(chan int, n)
		for i := range n {
			s := &budgetShare{b: b, done: make(chan struct{})}
			go func() {
				if err := b.wait(ctx, s); err != nil {
					t.Error(err)
				}
				went <- i
			}()
			synctest.Wait() // queued in order
		}
		if w := b.waiting.Load(); w != n || len(went) != 0 {
			t.Fatalf("%d writes waiting, %d gone, during the first round; want %d, 0", w, len(went), n)
		}
		b.done()
		synctest.Wait()
		if len(went) != budgetRoundMax || b.round.Load() != budgetRoundMax || b.waiting.Load() != 2 {
			t.Fatalf("%d writes gone, round of %d, %d waiting; want %d, %d, 2", len(went), b.round.Load(), b.waiting.Load(), budgetRoundMax, budgetRoundMax)
		}
		for range budgetRoundMax {
			if i := <-went; i >= budgetRoundMax {
				t.Fatalf("write %d (of the newest two) went in the first capped round", i)
			}
		}
		for range budgetRoundMax - 1 {
			b.done()
		}
		synctest.Wait()
		if len(went) != 0 || b.round.Load() != 1 {
			t.Fatalf("%d writes gone, round %d before the capped round ended; want 0, 1", len(went), b.round.Load())
		}
		b.done()
		synctest.Wait()
		if len(went) != 2 || b.round.Load() != 2 || b.waiting.Load() != 0 {
			t.Fatalf("%d writes gone, round of %d, %d waiting after the capped round; want 2, 2, 0", len(went), b.round.Load(), b.waiting.Load())
		}
		b.done()
		b.done()
	})
}

// TestMemoryBudgetQueuedForces: a write that queues while no round runs,
// the total past the size and no forced flush running, forces one itself
// (rule B4; mutation 380). As if the write that took the total over had
// been the last of its round and had read the waiting count before this
// write raised it, and this write's admission had read the total before
// that write: neither forced a flush, and without B4 this write would
// wait until its context ended (TestMemoryBudgetStepsLargerThanSize
// did, about once in 1,200 runs).
func TestMemoryBudgetQueuedForces(t *testing.T) {
	b, db := budgetOnePast(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // milliseconds when it holds
	defer cancel()
	if err := b.wait(ctx, db.share); err != nil {
		t.Fatalf("queued write: %v (%d forced flushes)", err, b.Metrics().ForcedFlushes)
	}
	if n := b.Metrics().ForcedFlushes; n != 1 {
		t.Fatalf("%d forced flushes; want 1", n)
	}
	b.done() // the round the flush's release started
	closeT(t, db)
}

// budgetOnePast opens one engine under a 1 KiB budget and writes one
// 100-byte value, admitted at once (below the fair mark), which takes the
// total past the size with no flush forced.
func budgetOnePast(t *testing.T) (*MemoryBudget, *DB) {
	t.Helper()
	b := newBudgetT(t, 1<<10, nil)
	dbs, kvs := budgetEngines(t, 1, b, newBudgetFaultFS(1, 0))
	if err := kvs[0].Put(context.Background(), []byte("k"), make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	if m := b.Metrics(); m.Bytes <= m.Size || m.ForcedFlushes != 0 {
		t.Fatalf("total %d (size %d), %d forced flushes: want past the size, none", m.Bytes, m.Size, m.ForcedFlushes)
	}
	return b, dbs[0]
}

// TestMemoryBudgetRoundEndForces: the last write of a round that left the
// total past the high mark forces a flush, for the writes queued behind it
// (mutation 272).
func TestMemoryBudgetRoundEndForces(t *testing.T) {
	b, db := budgetOnePast(t)
	// As if the put had been a round's only write, with a write queued
	// behind it below the mark.
	w := make(chan struct{})
	b.mu.Lock()
	b.queue = append(b.queue, w)
	b.waiting.Add(1)
	b.round.Store(1)
	b.mu.Unlock()
	b.done()
	if n := b.Metrics().ForcedFlushes; n != 1 {
		t.Fatalf("%d forced flushes at the round's end; want 1", n)
	}
	<-w // the flush's release starts the next round
	b.done()
	closeT(t, db)
}
