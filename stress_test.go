package kvbuf

// Stress tests of the engine's contracts under a machine busier than the
// tests: GOMAXPROCS well above the core count (so that the OS preempts a
// goroutine between two atomic stores, not only at the end of a time slice),
// flushes in a tight loop, pooled tables (the default), readers that pin
// old tables with open iterators and snapshots, and range deletes and
// snapshots that seal tables so that one generation holds several. Each test
// checks a contract the issue "Contracts that hold when the machine is
// busier than the tests" found broken in an earlier design, from the
// caller's side only:
//
//   - TestStressKVReadYourWrites, TestStressBitsReadYourWrites,
//     TestStressBitsWholeChunks: a read after a write returned sees it
//     (read-your-writes), before, during and after flushes, from the writer
//     and from other goroutines;
//   - TestStressKVRecycledUnderReaders: the same, in the setting of the
//     earlier design's stale KV reads (a table recycled under a reader while
//     an older one stays intact), made as frequent as a test can make it;
//   - TestStressBatchesVersusReaders: a batch is one op; readers after it see
//     all of it, a snapshot never sees part of it;
//   - TestStressReadsRacingClose: reads racing Close return the right value
//     or ErrClosed, never a crash; writes acknowledged are durable;
//   - TestStressWatermarkCoversWholeOps: the watermark never covers an op
//     whose last write has not been called; a write of a claimed op is
//     refused with ErrStaleOp;
//   - TestStressDropKVRacingWriters: after DropKV returns, writes to the
//     keyspace fail with ErrDropped, through any number of flushes.
//
// The readers that pin tables (stressPinner) also check the iterator's
// edges: inverted bounds are ErrBadRange, empty ranges are empty, Key,
// Value and Valid at the end and after Close.
//
// Every test runs a short workload by default (1.5 to 3 seconds, longer on
// a machine too busy to flush often enough); -kvbuf.stress=DURATION (or
// KVBUF_STRESS=DURATION) runs each one longer.
// A worker that makes no progress for stressStuck fails the test with every
// goroutine's stack (a writer spinning on a sealed table, a flush that never
// returns) instead of waiting for go test's timeout.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var stressFor = flag.Duration("kvbuf.stress", 0,
	"workload duration of each stress and linearizability test (default: a short run; env KVBUF_STRESS also sets it)")

// stressProcs is GOMAXPROCS during these tests: several times the cores of
// the 2-core machines the suite runs on. The environment variable
// KVBUF_STRESS_PROCS sets another (say 16 or 32, to hunt a rare
// interleaving: more Ps than cores preempt the workers more often).
const stressProcs = 12

// stressStuck is how long a worker may go without progress before the
// watchdog fails the test. A minute: at 20 s, TestStressKVRecycledUnderReaders
// failed on a loaded 2-core machine (load average 12-26) with the flusher
// running, not blocked, inside pebble's own checks (pebble turns them on in
// race builds) on a flush of 3.5 KB keys beside 14 readers; a real deadlock
// still fails the test, a little later.
const stressStuck = time.Minute

// stressDuration returns the workload duration: the flag, else the
// environment, else def.
func stressDuration(def time.Duration) time.Duration {
	if *stressFor > 0 {
		return *stressFor
	}
	if s := os.Getenv("KVBUF_STRESS"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			return d
		}
	}
	return def
}

var stressEpoch = time.Now()

// stressNow is a monotonic clock reading in nanoseconds.
func stressNow() int64 { return int64(time.Since(stressEpoch)) }

// stressSetup raises GOMAXPROCS for the test.
func stressSetup(t *testing.T) {
	procs := stressProcs
	if n, err := strconv.Atoi(os.Getenv("KVBUF_STRESS_PROCS")); err == nil && n > 0 {
		procs = n
	}
	old := runtime.GOMAXPROCS(procs)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// stressDir returns a path for an engine directory, on tmpfs if the machine
// has one (syncs cost nothing there, so flushes come faster).
func stressDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		if d, err := os.MkdirTemp("/dev/shm", "kvbuf-"+name+"-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return filepath.Join(d, "engine")
		}
	}
	return filepath.Join(t.TempDir(), "engine")
}

// stressOptions are the engine options of these tests: background
// generations every 250µs besides the explicit flush loops (so that
// generations without callers freeze while another syncs: several
// generations in flight), a small pending bound (byte-triggered flushes),
// pooled tables, generations of 512 KiB and more ingested, the default
// read tier.
func stressOptions() *Options {
	return &Options{
		FlushInterval:   250 * time.Microsecond,
		MaxPendingBytes: 8 << 20,
		IngestThreshold: 512 << 10,
	}
}

// stressOpen opens an engine in dir; the test's cleanup closes it.
func stressOpen(t testing.TB, dir string, opts *Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// stressRun runs workers until a deadline or the first failure, with a
// watchdog.
type stressRun struct {
	t        testing.TB
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	stuck    chan string
	quit     chan struct{}
	main     *stressWorker

	mu      sync.Mutex
	fails   []string
	workers []*stressWorker
}

// stressWorker is one goroutine of a run.
type stressWorker struct {
	r     *stressRun
	name  string
	last  atomic.Int64 // stressNow at the last sign of progress
	done  atomic.Bool
	rng   *rand.Rand
	calls int
}

func newStressRun(t testing.TB) *stressRun {
	r := &stressRun{t: t, stop: make(chan struct{}), stuck: make(chan string, 1), quit: make(chan struct{})}
	r.main = r.worker("the test goroutine")
	go r.monitor()
	t.Cleanup(func() { close(r.quit) })
	return r
}

func (r *stressRun) worker(name string) *stressWorker {
	w := &stressWorker{r: r, name: name, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	w.beat()
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	return w
}

// beat records progress.
func (w *stressWorker) beat() { w.last.Store(stressNow()) }

// stopped records progress and reports whether the run is stopping. Every
// few calls it yields: with more Ps than cores, a goroutine preempted while
// it holds the write barrier (a freeze) otherwise waits for the end of a
// spinning reader's time slice, and every writer with it.
func (w *stressWorker) stopped() bool {
	w.beat()
	if w.calls++; w.calls%8 == 0 {
		runtime.Gosched()
	}
	select {
	case <-w.r.stop:
		return true
	default:
		return false
	}
}

// pause yields or sleeps briefly, at random: a reader holding a pin, a
// host between two writes of an op.
func (w *stressWorker) pause() {
	switch n := w.rng.IntN(8); {
	case n < 5:
		for range n + 1 {
			runtime.Gosched()
		}
	case n < 7:
		time.Sleep(time.Duration(w.rng.IntN(50)) * time.Microsecond)
	default:
		time.Sleep(time.Duration(w.rng.IntN(500)) * time.Microsecond)
	}
}

// goWork starts a worker. A panic in it is a failure of the run.
func (r *stressRun) goWork(name string, fn func(w *stressWorker)) {
	w := r.worker(name)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer w.done.Store(true)
		defer func() {
			if p := recover(); p != nil {
				r.failf("%s panicked: %v\n%s", name, p, debug.Stack())
			}
		}()
		fn(w)
	}()
}

// failf records a failure and stops the run.
func (r *stressRun) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	if len(r.fails) < 20 {
		r.fails = append(r.fails, msg)
	}
	r.mu.Unlock()
	r.halt()
}

func (r *stressRun) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *stressRun) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fails) > 0
}

// monitor fails the test, with every goroutine's stack, when a worker makes
// no progress for stressStuck.
func (r *stressRun) monitor() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-tick.C:
		}
		now := stressNow()
		var stuck *stressWorker
		r.mu.Lock()
		for _, w := range r.workers {
			if !w.done.Load() && time.Duration(now-w.last.Load()) > stressStuck {
				stuck = w
				break
			}
		}
		r.mu.Unlock()
		if stuck == nil {
			continue
		}
		msg := fmt.Sprintf("stress watchdog: %s: %s made no progress for %v (goroutines above)", r.t.Name(), stuck.name, stressStuck)
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "%s\n\n%s\n", msg, buf)
		select {
		case r.stuck <- msg:
		default:
		}
		r.halt()
		// The test goroutine panics with msg if it can (the test is
		// reported as failed); its cleanup (closing the engine) waits for
		// the stuck goroutine too, so the monitor ends the process.
		time.Sleep(10 * time.Second)
		panic(msg)
	}
}

// run lets the workers run for d or until the first failure, stops them,
// waits for them and fails the test with the failures recorded.
func (r *stressRun) run(d time.Duration) {
	r.t.Helper()
	r.runUntil(d, d, nil)
}

// runUntil is run for at least d, and then on until enough reports true
// (checked every 100ms) or max has passed: on a machine busy with other
// work, the flushes a test needs may come slower.
func (r *stressRun) runUntil(d, max time.Duration, enough func() bool) {
	r.t.Helper()
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		r.main.beat()
		select {
		case <-r.stop:
			break wait
		case msg := <-r.stuck:
			panic(msg)
		case <-tick.C:
		}
		if el := time.Since(start); el >= max || el >= d && (enough == nil || enough()) {
			break wait
		}
	}
	r.halt()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	for {
		r.main.beat()
		select {
		case <-done:
			r.check()
			return
		case msg := <-r.stuck:
			panic(msg)
		case <-tick.C:
		}
	}
}

// check fails the test with the failures recorded so far.
func (r *stressRun) check() {
	r.t.Helper()
	r.mu.Lock()
	fails := r.fails
	r.mu.Unlock()
	if len(fails) > 0 {
		r.t.Fatalf("%d failure(s); the first:\n%s", len(fails), strings.Join(fails, "\n---\n"))
	}
}

// stressFlusher calls Flush in a tight loop, and FlushMemtables every
// memtableEvery flushes (0: never) so that iterators also read keys from
// sstables (whose key buffers pebble reuses).
func stressFlusher(r *stressRun, db *DB, memtableEvery int, flushes *atomic.Int64) {
	r.goWork("flusher", func(w *stressWorker) {
		ctx := context.Background()
		for n := 1; !w.stopped(); n++ {
			var err error
			if memtableEvery > 0 && n%memtableEvery == 0 {
				err = db.FlushMemtables(ctx)
			} else {
				err = db.Flush(ctx)
			}
			if err != nil {
				r.failf("Flush: %v", err)
				return
			}
			if flushes != nil {
				flushes.Add(1)
			}
		}
	})
}

// stressPinner loops NewIter, First, a pause, Close, and a gap: the
// iterator pins the tables of the view it saw, so that while flushes
// release them the tables made after it are recycled and the older ones
// stay intact (the setting of the earlier design's stale KV reads). The gap
// matters: a table that some iterator pinned while it was in a view is
// never recycled, and with iterators open all the time nothing would be.
// Every few rounds it also checks the iterator's edges: bad and empty
// bounds, Key, Value and Valid at the end and after Close.
func stressPinner(r *stressRun, k *KV, id int) {
	r.goWork(fmt.Sprintf("pinner %d", id), func(w *stressWorker) {
		for n := 0; !w.stopped(); n++ {
			it, err := k.NewIter(nil)
			if err != nil {
				r.failf("pinner: NewIter: %v", err)
				return
			}
			it.First()
			w.pause()
			if n%4 == 0 {
				for it.Next() {
				}
				if err := stressIterEnded(it, "after its last key"); err != nil {
					r.failf("pinner: %v", err)
				}
			}
			if err := it.Close(); err != nil {
				r.failf("pinner: Close: %v", err)
				return
			}
			if err := stressIterEnded(it, "after Close"); err != nil {
				r.failf("pinner: %v", err)
			}
			if it.First() || it.Last() || it.SeekGE(nil) || it.Next() || it.Prev() || it.Valid() {
				r.failf("pinner: a closed iterator positioned itself")
			}
			if n%16 == 0 {
				if err := stressCheckBounds(k); err != nil {
					r.failf("pinner: %v", err)
				}
			}
			time.Sleep(time.Duration(w.rng.IntN(2000)) * time.Microsecond)
		}
	})
}

// stressIterEnded checks an iterator that is not positioned.
func stressIterEnded(it *Iter, when string) error {
	if it.Valid() || it.Key() != nil || it.Value() != nil {
		return fmt.Errorf("iterator %s: Valid %v, Key %q, Value %q; want false, nil, nil", when, it.Valid(), it.Key(), it.Value())
	}
	return nil
}

// stressCheckBounds checks NewIter's handling of inverted and empty bounds:
// ErrBadRange for lower > upper (before anything reaches the store), an
// empty iterator for lower == upper and for a prefix outside the bounds.
func stressCheckBounds(k *KV) error {
	for _, o := range []*IterOptions{
		{LowerBound: []byte("b"), UpperBound: []byte("a")},
		{LowerBound: []byte("\xff"), UpperBound: []byte("")},
	} {
		it, err := k.NewIter(o)
		if !errors.Is(err, ErrBadRange) || it != nil {
			if it != nil {
				it.Close()
			}
			return fmt.Errorf("NewIter[%q, %q) = %v, %v; want nil, ErrBadRange", o.LowerBound, o.UpperBound, it, err)
		}
	}
	for _, o := range []*IterOptions{
		{LowerBound: []byte("a"), UpperBound: []byte("a")},
		{LowerBound: []byte(""), UpperBound: []byte("")},
		{LowerBound: []byte("m"), UpperBound: []byte("n"), Prefix: []byte("a")},
	} {
		it, err := k.NewIter(o)
		if err != nil {
			return fmt.Errorf("NewIter(%+v): %v", *o, err)
		}
		if err := stressIterEnded(it, "of an empty range, unpositioned"); err != nil {
			it.Close()
			return err
		}
		if it.First() || it.Last() || it.SeekGE([]byte("a")) || it.SeekLT([]byte("z")) || it.Next() || it.Prev() {
			it.Close()
			return fmt.Errorf("NewIter(%+v) positioned itself in an empty range at %q", *o, it.Key())
		}
		if err := stressIterEnded(it, "of an empty range"); err != nil {
			it.Close()
			return err
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("NewIter(%+v): Close: %v", *o, err)
		}
	}
	return nil
}

// stressSnapshotHolder takes snapshots and holds each open for up to
// maxHold, then waits as long: taking one seals every active table that
// holds changes (so that a generation holds several tables: at its release
// the newer ones are recycled while the older ones, pinned by the snapshot,
// stay intact), and an open one pins them.
func stressSnapshotHolder(r *stressRun, db *DB, maxHold time.Duration) {
	r.goWork("snapshot holder", func(w *stressWorker) {
		for !w.stopped() {
			s, err := db.NewSnapshot()
			if err != nil {
				r.failf("NewSnapshot: %v", err)
				return
			}
			if w.rng.IntN(2) == 0 {
				w.pause()
			} else {
				time.Sleep(time.Duration(w.rng.Int64N(int64(maxHold))))
			}
			s.Close()
			time.Sleep(time.Duration(w.rng.Int64N(int64(maxHold))))
		}
	})
}

// TestStressKVReadYourWrites: each writer owns a few keys and checks every
// read of them against what it wrote last (Get, GetAppend, GetMany, bounded
// scans forward and backward), after Puts, Deletes and range deletes that
// seal the active table, while pinners hold old tables, snapshots seal and
// pin, and flushes recycle tables in a tight loop. After Close and a
// reopen, every key holds its last value.
func TestStressKVReadYourWrites(t *testing.T) {
	stressSetup(t)
	dir := stressDir(t)
	db := stressOpen(t, dir, stressOptions())
	k, err := db.KV("ryw")
	if err != nil {
		t.Fatal(err)
	}
	const writers, keysEach = 4, 8
	r := newStressRun(t)
	var flushes, reads atomic.Int64
	stressFlusher(r, db, 32, &flushes)
	for i := range 2 {
		stressPinner(r, k, i)
	}
	stressSnapshotHolder(r, db, 3*time.Millisecond)
	stressSnapshotHolder(r, db, 3*time.Millisecond)
	// Hot keys: each rewritten every few puts (so that one generation
	// holds several of its values, in tables sealed by snapshots and range
	// deletes), the number of the last put that returned published; readers
	// must never read an older one.
	const hotWriters, hotKeys = 2, 4
	var hotPub [hotWriters][hotKeys]atomic.Int64
	hotKey := func(id, j int) []byte { return fmt.Appendf(nil, "h%d/%d", id, j) }
	for id := range hotWriters {
		for j := range hotKeys {
			hotPub[id][j].Store(-1)
		}
		r.goWork(fmt.Sprintf("hot writer %d", id), func(w *stressWorker) {
			for n := int64(0); !w.stopped(); n++ {
				j := int(n % hotKeys)
				v := fmt.Appendf(nil, "%d", n)
				if err := k.Put(context.Background(), hotKey(id, j), v, 0); err != nil {
					r.failf("hot writer: Put: %v", err)
					return
				}
				hotPub[id][j].Store(n)
				if got, err := k.Get(hotKey(id, j)); err != nil || string(got) != string(v) {
					r.failf("hot writer %d: Get(%s) after Put %s = %q, %v", id, hotKey(id, j), v, got, err)
					return
				}
			}
		})
	}
	for id := range 6 {
		r.goWork(fmt.Sprintf("hot reader %d", id), func(w *stressWorker) {
			vals := make([][]byte, 3)
			keys := make([][]byte, 3)
			for !w.stopped() {
				hw, j := w.rng.IntN(hotWriters), w.rng.IntN(hotKeys)
				pub := hotPub[hw][j].Load()
				if pub < 0 {
					continue
				}
				kk := hotKey(hw, j)
				var got []byte
				var err error
				how := "Get"
				switch w.rng.IntN(3) {
				case 0:
					got, err = k.Get(kk)
				case 1:
					how = "GetAppend"
					got, err = k.GetAppend(nil, kk)
				case 2:
					how = "GetMany"
					keys[0], keys[1], keys[2] = hotKey(hw, (j+1)%hotKeys), kk, hotKey(1-hw, j)
					if _, err = k.GetMany(keys, vals, nil); err == nil {
						got = vals[1]
					}
				}
				reads.Add(1)
				var n int64
				if err == nil {
					_, err = fmt.Sscan(string(got), &n)
				}
				if err != nil || n < pub {
					r.failf("hot reader: %s(%s) = %q, %v after the put of %d returned", how, kk, got, err, pub)
					return
				}
			}
		})
	}
	models := make([]map[string]string, writers)
	for id := range writers {
		model := map[string]string{}
		models[id] = model
		r.goWork(fmt.Sprintf("writer %d", id), func(w *stressWorker) {
			ctx := context.Background()
			key := func(j int) []byte { return fmt.Appendf(nil, "w%d/%d", id, j) }
			// check compares every way of reading key j with the model.
			check := func(j int, after string) bool {
				kj := key(j)
				want, present := model[string(kj)]
				reads.Add(1)
				got, err := k.Get(kj)
				if err := stressWant(got, err, want, present); err != nil {
					r.failf("writer %d: Get(%s) after %s: %v", id, kj, after, err)
					return false
				}
				switch w.rng.IntN(8) {
				case 0, 1, 2:
					// Get only.
				case 3:
					dst := []byte("prefix:")
					got, err := k.GetAppend(dst, kj)
					if err == nil && !bytes.HasPrefix(got, dst) {
						r.failf("writer %d: GetAppend(%s) lost its prefix: %q", id, kj, got)
						return false
					}
					if err == nil {
						got = got[len(dst):]
					}
					if err := stressWant(got, err, want, present); err != nil {
						r.failf("writer %d: GetAppend(%s) after %s: %v", id, kj, after, err)
						return false
					}
				case 4, 5:
					other := key(w.rng.IntN(keysEach))
					vals := make([][]byte, 2)
					if _, err := k.GetMany([][]byte{other, kj}, vals, nil); err != nil {
						r.failf("writer %d: GetMany: %v", id, err)
						return false
					}
					if err := stressWantMany(vals[1], want, present); err != nil {
						r.failf("writer %d: GetMany(%s) after %s: %v", id, kj, after, err)
						return false
					}
				case 6, 7:
					// A scan over the writer's keys, in either direction.
					lo, hi := fmt.Appendf(nil, "w%d/", id), fmt.Appendf(nil, "w%d0", id)
					it, err := k.NewIter(&IterOptions{LowerBound: lo, UpperBound: hi})
					if err != nil {
						r.failf("writer %d: NewIter: %v", id, err)
						return false
					}
					seen := map[string]string{}
					var prev []byte
					back := w.rng.IntN(2) == 0
					ok := it.First()
					if back {
						ok = it.Last()
					}
					for ; ok; ok = stressStep(it, back) {
						kk := string(it.Key())
						if prev != nil && (string(prev) >= kk) != back {
							r.failf("writer %d: scan (backward %v) returned %q after %q", id, back, kk, prev)
						}
						if _, dup := seen[kk]; dup {
							r.failf("writer %d: scan returned %q twice", id, kk)
						}
						prev = append(prev[:0], kk...)
						seen[kk] = string(it.Value())
					}
					if err := it.Close(); err != nil {
						r.failf("writer %d: scan: %v", id, err)
						return false
					}
					for kk, v := range model {
						if seen[kk] != v {
							r.failf("writer %d: scan (backward %v) after %s: %s = %q, want %q", id, back, after, kk, seen[kk], v)
							return false
						}
					}
					if len(seen) != len(model) {
						r.failf("writer %d: scan (backward %v) after %s found %d keys, model has %d: %v", id, back, after, len(seen), len(model), seen)
						return false
					}
				}
				return true
			}
			for n := 0; !w.stopped(); n++ {
				j := w.rng.IntN(keysEach)
				kj := key(j)
				var what string
				switch p := w.rng.IntN(100); {
				case p < 70:
					v := fmt.Sprintf("%d.%d", id, n)
					if err := k.Put(ctx, kj, []byte(v), 0); err != nil {
						r.failf("writer %d: Put: %v", id, err)
						return
					}
					model[string(kj)] = v
					what = "Put " + v
				case p < 85:
					if err := k.Delete(ctx, kj, 0); err != nil {
						r.failf("writer %d: Delete: %v", id, err)
						return
					}
					delete(model, string(kj))
					what = "Delete"
				default:
					// A range delete over some of the writer's keys: with
					// keys of it pending, it seals the active table.
					lo, hi := w.rng.IntN(keysEach), w.rng.IntN(keysEach+1)
					if lo > hi {
						lo, hi = hi, lo
					}
					if err := k.DeleteRange(ctx, key(lo), key(hi), 0); err != nil {
						r.failf("writer %d: DeleteRange: %v", id, err)
						return
					}
					for x := lo; x < hi; x++ {
						delete(model, string(key(x)))
					}
					what = fmt.Sprintf("DeleteRange[%d,%d)", lo, hi)
					j = lo
				}
				if !check(j, what) {
					return
				}
			}
		})
	}
	d := stressDuration(1500 * time.Millisecond)
	r.runUntil(d, 20*d, func() bool { return flushes.Load() >= 20 })
	t.Logf("%d flushes, %d checked reads, metrics %+v", flushes.Load(), reads.Load(), db.Metrics())
	if flushes.Load() < 20 {
		t.Fatalf("only %d flushes: the test did not exercise recycling", flushes.Load())
	}
	// Close flushes everything; a reopened engine holds the last values.
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	db = stressOpen(t, dir, nil)
	k, err = db.KV("ryw")
	if err != nil {
		t.Fatal(err)
	}
	for id, model := range models {
		for j := range keysEach {
			kj := fmt.Sprintf("w%d/%d", id, j)
			want, present := model[kj]
			got, err := k.Get([]byte(kj))
			if err := stressWant(got, err, want, present); err != nil {
				t.Errorf("after reopen: Get(%s): %v", kj, err)
			}
		}
	}
}

// stressStep moves an iterator one key in its direction.
func stressStep(it *Iter, back bool) bool {
	if back {
		return it.Prev()
	}
	return it.Next()
}

// stressWant checks a Get result against the expected value.
func stressWant(got []byte, err error, want string, present bool) error {
	switch {
	case present && err != nil:
		return fmt.Errorf("error %v, want %q", err, want)
	case present && string(got) != want:
		return fmt.Errorf("%q, want %q", got, want)
	case !present && !errors.Is(err, ErrNotFound):
		return fmt.Errorf("%q, %v; want ErrNotFound", got, err)
	}
	return nil
}

// stressWantMany checks a GetMany value (nil: absent).
func stressWantMany(got []byte, want string, present bool) error {
	switch {
	case present && (got == nil || string(got) != want):
		return fmt.Errorf("%q, want %q", got, want)
	case !present && got != nil:
		return fmt.Errorf("%q, want absent", got)
	}
	return nil
}

// stressBitPositions are the bits TestStressBitsReadYourWrites' single-bit
// writer toggles in turn: at word and chunk boundaries, in several chunks,
// and few, so that each is rewritten in every table a snapshot seals (a
// stale read needs the bit pending in two tables of one generation).
func stressBitPositions() []uint64 {
	return []uint64{0, 31, 32, 4095, 32767, 32768 + 64, 65536 + 1, 100000}
}

// stressRanges are the ranges TestStressBitsReadYourWrites' range writer
// toggles, away from the single-bit writer's: within a word, across words,
// across a chunk boundary, and one whole chunk (a shared full chunk while
// nothing else in it is pending).
var stressRanges = [][2]uint64{
	{200000, 200005}, {200030, 200040}, {200060, 200200}, {229370, 229380},
	{230000, 231000}, {262144 - 10, 262144 + 10}, {294912, 294912 + 32768},
}

// TestStressBitsReadYourWrites: a writer sets bit i and then publishes it;
// readers read the latest published bit (Get, GetMany, Ones) while flushes
// freeze, write and release generations in a tight loop and snapshots seal
// and pin tables. Bits toggle (set, then cleared on the next pass), so a
// stale read is a wrong value, not only a missing one. A second writer does
// the same with ranges, one of them a whole chunk.
func TestStressBitsReadYourWrites(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), stressOptions())
	b, err := db.Bits("ryw")
	if err != nil {
		t.Fatal(err)
	}
	k, err := db.KV("pins")
	if err != nil {
		t.Fatal(err)
	}
	pos := stressBitPositions()
	m := int64(len(pos))
	mr := int64(len(stressRanges))
	// want returns the bit and value of write c (c / m even: set).
	want := func(c int64) (uint64, bool) { return pos[c%m], c/m%2 == 0 }
	wantRange := func(c int64) ([2]uint64, bool) { return stressRanges[c%mr], c/mr%2 == 0 }
	var published, rangePublished atomic.Int64
	published.Store(-1)
	rangePublished.Store(-1)
	r := newStressRun(t)
	var flushes, reads atomic.Int64
	stressFlusher(r, db, 0, &flushes)
	// Frequent snapshots: each seals the active table, so that a bit
	// written before and after it is pending in two tables of one
	// generation, and its release resets the newer one only.
	stressSnapshotHolder(r, db, 500*time.Microsecond)
	stressPinner(r, k, 0)
	r.goWork("keys for the pinner", func(w *stressWorker) {
		for n := 0; !w.stopped(); n++ {
			if err := k.Put(context.Background(), fmt.Appendf(nil, "k%d", n%64), []byte("v"), 0); err != nil {
				r.failf("Put: %v", err)
				return
			}
			w.pause()
		}
	})
	r.goWork("bit writer", func(w *stressWorker) {
		for c := int64(0); !w.stopped(); c++ {
			i, v := want(c)
			if err := b.Set(context.Background(), i, v, 0); err != nil {
				r.failf("Set: %v", err)
				return
			}
			published.Store(c)
		}
	})
	r.goWork("range writer", func(w *stressWorker) {
		for c := int64(0); !w.stopped(); c++ {
			rg, v := wantRange(c)
			if err := b.SetRange(context.Background(), rg[0], rg[1], v, 0); err != nil {
				r.failf("SetRange: %v", err)
				return
			}
			rangePublished.Store(c)
			w.pause()
		}
	})
	for id := range 8 {
		r.goWork(fmt.Sprintf("reader %d", id), func(w *stressWorker) {
			// GetMany reads the bits of the last m writes (every position),
			// 32 times over, in one go: the longer a read, the likelier a
			// release falls into it.
			idx := make([]uint64, 32*m)
			out := make([]bool, 32*m)
			for !w.stopped() {
				c1 := published.Load()
				if c1 < m {
					runtime.Gosched()
					continue
				}
				var got []bool
				var what string
				switch w.rng.IntN(4) {
				case 0:
					i, _ := want(c1)
					v, err := b.Get(i)
					if err != nil {
						r.failf("reader: Get: %v", err)
						return
					}
					got, what = []bool{v}, "Get"
				case 1, 2:
					for j := range idx {
						idx[j], _ = want(c1 - int64(j)%m)
					}
					if err := b.GetMany(idx, out); err != nil {
						r.failf("reader: GetMany: %v", err)
						return
					}
					got, what = out, "GetMany"
				case 3:
					i, _ := want(c1)
					v := false
					for x := range b.Ones(i) {
						v = x == i
						break
					}
					got, what = []bool{v}, "Ones"
				}
				c2 := published.Load()
				reads.Add(1)
				// Write c1-j+m rewrites the bit of write c1-j; it starts
				// after c1-j+m-1 is published. Check only reads that
				// ended before that.
				for j, v := range got {
					c := c1 - int64(j)%m
					if c2+1 >= c+m {
						continue
					}
					if i, wv := want(c); v != wv {
						r.failf("reader: %s: bit %d = %v after write %d set it to %v and returned (latest write %d)", what, i, v, c, wv, c2)
						return
					}
				}
				// The range writer's latest range.
				if c1 := rangePublished.Load(); c1 >= 0 {
					rg, wv := wantRange(c1)
					i := rg[0] + w.rng.Uint64N(rg[1]-rg[0])
					v, err := b.Get(i)
					if err != nil {
						r.failf("reader: Get: %v", err)
						return
					}
					if c2 := rangePublished.Load(); c2+1 < c1+mr && v != wv {
						r.failf("reader: bit %d = %v after SetRange[%d, %d) = %v returned", i, v, rg[0], rg[1], wv)
						return
					}
				}
			}
		})
	}
	// On a loaded machine the run goes on until it has flushed enough.
	d := stressDuration(3 * time.Second)
	r.runUntil(d, 8*d, func() bool { return flushes.Load() >= 20 })
	t.Logf("%d bit writes, %d range writes, %d flushes, %d checked reads, metrics %+v",
		published.Load()+1, rangePublished.Load()+1, flushes.Load(), reads.Load(), db.Metrics())
	if flushes.Load() < 20 {
		t.Fatalf("only %d flushes", flushes.Load())
	}
}

// TestStressBatchesVersusReaders: each batch writer applies batches (one op
// each) that put the same value n into two keys, set a bit and a range of
// bits to the parity of n, and delete a third key; a reader that starts
// after batch n returned sees all of it (exactly it, if the next one had
// not started when the read ended), and a snapshot always sees whole
// batches: both keys equal, the bits agree with them.
func TestStressBatchesVersusReaders(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), stressOptions())
	k, err := db.KV("batches")
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Bits("batches")
	if err != nil {
		t.Fatal(err)
	}
	const pairs = 3
	type pair struct {
		applying, applied atomic.Int64 // batch number: started, returned
	}
	var ps [pairs]pair
	keyA := func(p int) []byte { return fmt.Appendf(nil, "p%d.a", p) }
	keyB := func(p int) []byte { return fmt.Appendf(nil, "p%d.b", p) }
	bit := func(p int) uint64 { return uint64(p)*70000 + 31 }
	rng := func(p int) (uint64, uint64) { return uint64(p)*70000 + 40000, uint64(p)*70000 + 40100 }
	r := newStressRun(t)
	var flushes, reads, snaps atomic.Int64
	stressFlusher(r, db, 64, &flushes)
	stressPinner(r, k, 0)
	stressPinner(r, k, 1)
	for p := range pairs {
		r.goWork(fmt.Sprintf("batch writer %d", p), func(w *stressWorker) {
			batch := db.NewBatch()
			for n := int64(1); !w.stopped(); n++ {
				batch.Reset()
				v := []byte(fmt.Sprint(n))
				batch.Put(k, keyA(p), v)
				batch.Set(b, bit(p), n%2 == 1)
				lo, hi := rng(p)
				batch.SetRange(b, lo, hi, n%2 == 1)
				batch.Delete(k, fmt.Appendf(nil, "p%d.gone", p))
				batch.Put(k, keyB(p), v)
				batch.Put(k, fmt.Appendf(nil, "p%d.gone", p), v)
				ps[p].applying.Store(n)
				if err := db.Apply(context.Background(), batch, 0); err != nil {
					r.failf("Apply: %v", err)
					return
				}
				ps[p].applied.Store(n)
				if w.rng.IntN(4) == 0 {
					w.pause()
				}
			}
		})
	}
	// parse turns a read value into a batch number (0: absent).
	parse := func(v []byte, err error) (int64, error) {
		if errors.Is(err, ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		var n int64
		if _, err := fmt.Sscan(string(v), &n); err != nil {
			return 0, fmt.Errorf("value %q: %v", v, err)
		}
		return n, nil
	}
	for id := range 6 {
		r.goWork(fmt.Sprintf("live reader %d", id), func(w *stressWorker) {
			vals := make([][]byte, 2)
			for !w.stopped() {
				p := w.rng.IntN(pairs)
				a1 := ps[p].applied.Load()
				var na, nb int64
				var err error
				if w.rng.IntN(2) == 0 {
					if na, err = parse(k.Get(keyA(p))); err == nil {
						nb, err = parse(k.Get(keyB(p)))
					}
				} else if _, err = k.GetMany([][]byte{keyA(p), keyB(p)}, vals, nil); err == nil {
					na, _ = parse(vals[0], nil)
					nb, _ = parse(vals[1], nil)
				}
				if err != nil {
					r.failf("live reader: %v", err)
					return
				}
				bv, err := b.Get(bit(p))
				if err != nil {
					r.failf("live reader: %v", err)
					return
				}
				lo, hi := rng(p)
				rv, err := b.Get(lo + w.rng.Uint64N(hi-lo))
				if err != nil {
					r.failf("live reader: %v", err)
					return
				}
				s2 := ps[p].applying.Load()
				reads.Add(1)
				if na < a1 || nb < a1 || na > s2 || nb > s2 {
					r.failf("live reader: pair %d = (%d, %d) read after batch %d returned and before batch %d began", p, na, nb, a1, s2+1)
					return
				}
				if s2 == a1 && (na != a1 || nb != a1 || bv != (a1%2 == 1) || rv != (a1%2 == 1)) {
					r.failf("live reader: pair %d = (%d, %d), bit %v, range bit %v, read after batch %d returned and before the next began", p, na, nb, bv, rv, a1)
					return
				}
			}
		})
	}
	r.goWork("snapshot reader", func(w *stressWorker) {
		var old *Snapshot
		var oldSeen map[int]int64
		for !w.stopped() {
			var before [pairs]int64
			for p := range pairs {
				before[p] = ps[p].applied.Load()
			}
			s, err := db.NewSnapshot()
			if err != nil {
				r.failf("NewSnapshot: %v", err)
				return
			}
			var after [pairs]int64
			for p := range pairs {
				after[p] = ps[p].applying.Load()
			}
			seen, err := stressReadPairs(s, pairs, keyA, keyB, bit, rng, parse)
			if err != nil {
				r.failf("snapshot: %v", err)
				return
			}
			for p, n := range seen {
				if n < before[p] || n > after[p] {
					r.failf("snapshot: pair %d at batch %d, taken after batch %d returned and before batch %d began", p, n, before[p], after[p]+1)
					return
				}
			}
			snaps.Add(1)
			// The previous snapshot still reads what it read, flushes later.
			if old != nil {
				again, err := stressReadPairs(old, pairs, keyA, keyB, bit, rng, parse)
				if err != nil {
					r.failf("older snapshot: %v", err)
					return
				}
				for p, n := range oldSeen {
					if again[p] != n {
						r.failf("older snapshot: pair %d read batch %d, then batch %d", p, n, again[p])
						return
					}
				}
				old.Close()
			}
			old, oldSeen = s, seen
			w.pause()
		}
		if old != nil {
			old.Close()
		}
	})
	d := stressDuration(1500 * time.Millisecond)
	r.runUntil(d, 8*d, func() bool { return snaps.Load() >= 10 })
	t.Logf("%d flushes, %d live reads, %d snapshots, metrics %+v", flushes.Load(), reads.Load(), snaps.Load(), db.Metrics())
	if snaps.Load() < 10 {
		t.Fatalf("only %d snapshots", snaps.Load())
	}
}

// stressReadPairs reads TestStressBatchesVersusReaders' pairs through a
// snapshot and checks that each is one whole batch; it returns the batch
// number of each pair.
func stressReadPairs(s *Snapshot, pairs int, keyA, keyB func(int) []byte, bit func(int) uint64,
	rng func(int) (uint64, uint64), parse func([]byte, error) (int64, error)) (map[int]int64, error) {
	sk, err := s.KV("batches")
	if err != nil {
		return nil, err
	}
	sb, err := s.Bits("batches")
	if err != nil {
		return nil, err
	}
	seen := map[int]int64{}
	for p := range pairs {
		na, err := parse(sk.Get(keyA(p)))
		if err != nil {
			return nil, err
		}
		nb, err := parse(sk.Get(keyB(p)))
		if err != nil {
			return nil, err
		}
		ng, err := parse(sk.Get(fmt.Appendf(nil, "p%d.gone", p)))
		if err != nil {
			return nil, err
		}
		bv, err := sb.Get(bit(p))
		if err != nil {
			return nil, err
		}
		lo, hi := rng(p)
		idx := []uint64{lo, (lo + hi) / 2, hi - 1}
		out := make([]bool, len(idx))
		if err := sb.GetMany(idx, out); err != nil {
			return nil, err
		}
		odd := na%2 == 1
		if na != nb || ng != na || bv != odd || out[0] != odd || out[1] != odd || out[2] != odd {
			return nil, fmt.Errorf("pair %d: keys (%d, %d, %d), bit %v, range bits %v: part of a batch", p, na, nb, ng, bv, out)
		}
		seen[p] = na
	}
	return seen, nil
}

// TestStressReadsRacingClose: readers of every kind (Get, GetMany,
// iterators opened before Close, snapshot reads, Bits.Get and Count) and
// writers race two concurrent Closes, round after round. A read returns the
// right value or ErrClosed, never a crash or another value; once Close has
// returned, every read returns ErrClosed; a write returns nil or ErrClosed,
// and every write that returned nil is there after a reopen.
func TestStressReadsRacingClose(t *testing.T) {
	stressSetup(t)
	dir := stressDir(t)
	const keys = 64
	want := func(i int) string { return fmt.Sprintf("value %d", i) }
	acked := map[string]string{} // writes acknowledged in any round
	deadline := time.Now().Add(stressDuration(1500 * time.Millisecond))
	rounds := 0
	var totalOK, totalClosed int64
	for ; rounds < 4 || time.Now().Before(deadline); rounds++ {
		db, err := Open(dir, stressOptions())
		if err != nil {
			t.Fatal(err)
		}
		k, err := db.KV("close")
		if err != nil {
			t.Fatal(err)
		}
		b, err := db.Bits("close")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// Half the keys and bits durable, half pending.
		for i := range keys {
			if i == keys/2 {
				if err := db.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := k.Put(ctx, fmt.Appendf(nil, "k%02d", i), []byte(want(i)), 0); err != nil {
				t.Fatal(err)
			}
			if err := b.Set(ctx, uint64(i)*1000, i%3 == 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		wantCount := uint64((keys + 2) / 3)
		snap, err := db.NewSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		var closed atomic.Bool // Close has returned
		// began: a write was refused with ErrClosed, so Close has begun
		// (the engine flags itself closing before it shuts the gate).
		var began atomic.Bool
		r := newStressRun(t)
		var okReads, closedReads atomic.Int64
		// verdict checks one read's outcome. startedClosed: the read
		// started after Close had begun.
		verdict := func(w *stressWorker, what string, startedClosed bool, err error, right bool) bool {
			switch {
			case errors.Is(err, ErrClosed):
				closedReads.Add(1)
				return true
			case err != nil:
				r.failf("%s: %s: %v", w.name, what, err)
			case startedClosed:
				r.failf("%s: %s started after Close had begun (a write was refused with ErrClosed) and did not fail with ErrClosed", w.name, what)
			case !right:
				r.failf("%s: %s returned a wrong value", w.name, what)
			default:
				okReads.Add(1)
				return true
			}
			return false
		}
		for id := range 6 {
			// Iterators opened before Close, read across it (over the
			// k keys only: pending changes are read live, and the writers
			// add x keys).
			it, err := k.NewIter(&IterOptions{UpperBound: []byte("l")})
			if err != nil {
				t.Fatal(err)
			}
			sk, err := snap.KV("close")
			if err != nil {
				t.Fatal(err)
			}
			sb, err := snap.Bits("close")
			if err != nil {
				t.Fatal(err)
			}
			r.goWork(fmt.Sprintf("reader %d", id), func(w *stressWorker) {
				defer it.Close()
				next := 0 // the iterator's expected next key
				itDone := false
				vals := make([][]byte, 3)
				// Read until 20 reads have started after Close returned.
				for afterClose := 0; afterClose < 20; {
					w.beat()
					if closed.Load() {
						afterClose++
					}
					c := began.Load()
					i := w.rng.IntN(keys)
					key := fmt.Appendf(nil, "k%02d", i)
					var ok bool
					switch w.rng.IntN(7) {
					case 0:
						v, err := k.Get(key)
						ok = verdict(w, fmt.Sprintf("Get(%s) = %q", key, v), c, err, string(v) == want(i))
					case 1:
						keys3 := [][]byte{key, []byte("absent"), fmt.Appendf(nil, "k%02d", (i+1)%keys)}
						_, err := k.GetMany(keys3, vals, nil)
						ok = verdict(w, fmt.Sprintf("GetMany = %q", vals), c, err,
							string(vals[0]) == want(i) && vals[1] == nil && string(vals[2]) == want((i+1)%keys))
					case 2:
						v, err := b.Get(uint64(i) * 1000)
						ok = verdict(w, fmt.Sprintf("Bits.Get(%d) = %v", i*1000, v), c, err, v == (i%3 == 0))
					case 3:
						n, err := b.Count()
						ok = verdict(w, fmt.Sprintf("Count = %d", n), c, err, n == wantCount)
					case 4:
						v, err := sk.Get(key)
						ok = verdict(w, fmt.Sprintf("snapshot Get(%s) = %q", key, v), c, err, string(v) == want(i))
					case 5:
						v, err := sb.Get(uint64(i) * 1000)
						ok = verdict(w, fmt.Sprintf("snapshot Bits.Get(%d) = %v", i*1000, v), c, err, v == (i%3 == 0))
					case 6:
						if itDone {
							ok = true
							break
						}
						var moved bool
						if next == 0 {
							moved = it.First()
						} else {
							moved = it.Next()
						}
						key, val := it.Key(), it.Value()
						switch {
						case moved && (key == nil || val == nil):
							// A move that returned true holds its key until
							// the next move, whatever Close does meanwhile
							// (issue 30).
							r.failf("%s: iterator moved to a key it does not return (Key %q, Value %q, Valid %v, Error %v)", w.name, key, val, it.Valid(), it.Error())
							return
						case moved:
							ok = verdict(w, fmt.Sprintf("iterator at %q=%q (want k%02d, after %d keys)", key, val, next, next), c, nil,
								string(key) == fmt.Sprintf("k%02d", next) && string(val) == want(next))
							next++
						default:
							itDone = true
							err := it.Error()
							if err == nil && next != keys {
								err = fmt.Errorf("iterator ended after %d keys without an error", next)
							}
							ok = verdict(w, "iterator end", false, err, true)
							if errors.Is(err, ErrClosed) && (it.Valid() || it.Key() != nil || it.First()) {
								r.failf("%s: iterator stopped by Close is still positioned", w.name)
								return
							}
						}
					}
					if !ok {
						return
					}
				}
			})
		}
		var writeMu sync.Mutex
		roundAcked := map[string]string{}
		for id := range 2 {
			r.goWork(fmt.Sprintf("writer %d", id), func(w *stressWorker) {
				for n := 0; !closed.Load(); n++ {
					key, val := fmt.Sprintf("x%d/%d", id, n%16), fmt.Sprintf("round %d write %d", rounds, n)
					err := k.Put(ctx, []byte(key), []byte(val), 0)
					switch {
					case err == nil:
						writeMu.Lock()
						roundAcked[key] = val
						writeMu.Unlock()
					case errors.Is(err, ErrClosed):
						began.Store(true)
					default:
						r.failf("writer: Put: %v", err)
						return
					}
					w.beat()
				}
			})
		}
		// Two concurrent Closes after a moment.
		var closeErrs [2]error
		var closers sync.WaitGroup
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		for i := range closeErrs {
			closers.Go(func() { closeErrs[i] = db.Close() })
		}
		closers.Wait()
		began.Store(true)
		closed.Store(true)
		r.run(time.Millisecond)
		if closeErrs[0] != nil || closeErrs[1] != nil {
			t.Fatalf("round %d: Close: %v, %v", rounds, closeErrs[0], closeErrs[1])
		}
		// After Close: reads, snapshot reads, writes and flushes fail.
		if _, err := k.Get([]byte("k00")); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: Get after Close: %v", rounds, err)
		}
		if _, err := b.Get(0); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: Bits.Get after Close: %v", rounds, err)
		}
		if err := k.Put(ctx, []byte("late"), nil, 0); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: Put after Close: %v", rounds, err)
		}
		if sk, _ := snap.KV("close"); sk != nil {
			if _, err := sk.Get([]byte("k00")); !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: snapshot Get after Close: %v", rounds, err)
			}
		}
		if _, err := db.NewSnapshot(); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: NewSnapshot after Close: %v", rounds, err)
		}
		snap.Close()
		for key, val := range roundAcked {
			acked[key] = val
		}
		totalOK += okReads.Load()
		totalClosed += closedReads.Load()
	}
	t.Logf("%d rounds: %d right reads, %d ErrClosed, %d keys acknowledged", rounds, totalOK, totalClosed, len(acked))
	// Every acknowledged write is durable.
	db := stressOpen(t, dir, nil)
	k, err := db.KV("close")
	if err != nil {
		t.Fatal(err)
	}
	// A write refused with ErrClosed wrote nothing, and each key has one
	// writer: its last acknowledged value is the durable one.
	for key, val := range acked {
		got, err := k.Get([]byte(key))
		if err != nil || string(got) != val {
			t.Errorf("after reopen: %s = %q, %v; want %q (acknowledged before Close)", key, got, err, val)
		}
	}
	for i := range keys {
		got, err := k.Get(fmt.Appendf(nil, "k%02d", i))
		if err != nil || string(got) != want(i) {
			t.Errorf("after reopen: k%02d = %q, %v", i, got, err)
		}
	}
}

// TestStressWatermarkCoversWholeOps: a host writes ops in order, each op
// two or three calls (a KV put, a pause, a bit set, sometimes a delete) or
// one batch, while flushes run in a tight loop. The watermark read at any
// moment never covers an op whose last write has not even been called (the
// earlier design's watermark covered op 1 after Put(p7, op 1); Flush,
// before Set(7, op 1)); the host never sees ErrStaleOp; a Flush covers every
// op complete before it began; a late write of a persisted op is skipped
// as a redelivered op and leaves nothing behind. After Close and a reopen the
// watermark is the last op and its data is there.
func TestStressWatermarkCoversWholeOps(t *testing.T) {
	stressSetup(t)
	dir := stressDir(t)
	db := stressOpen(t, dir, stressOptions())
	k, err := db.KV("ops")
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Bits("ops")
	if err != nil {
		t.Fatal(err)
	}
	const keys = 64
	// complete: every write of every op <= complete returned; finalCalled:
	// the last write of every op <= finalCalled has been called (a flush
	// may claim an op as soon as its last write is admitted).
	var complete, finalCalled atomic.Uint64
	r := newStressRun(t)
	var flushes, checks atomic.Int64
	ctx := context.Background()
	model := map[int]uint64{} // key -> op that wrote it last
	bitsModel := map[uint64]bool{}
	r.goWork("host", func(w *stressWorker) {
		batch := db.NewBatch()
		for op := uint64(1); !w.stopped(); op++ {
			key := int(op % keys)
			val := fmt.Appendf(nil, "op %d", op)
			i := op % 997
			if w.rng.IntN(8) == 0 {
				batch.Reset()
				batch.Put(k, fmt.Appendf(nil, "k%02d", key), val)
				batch.Set(b, i, op%2 == 0)
				finalCalled.Store(op)
				if err := db.Apply(ctx, batch, op); err != nil {
					r.failf("host: op %d: Apply: %v", op, err)
					return
				}
			} else {
				if err := k.Put(ctx, fmt.Appendf(nil, "k%02d", key), val, op); err != nil {
					r.failf("host: op %d: Put: %v", op, err)
					return
				}
				w.pause() // the window the earlier design's flush fell into
				third := w.rng.IntN(4) == 0
				if !third {
					finalCalled.Store(op)
				}
				if err := b.Set(ctx, i, op%2 == 0, op); err != nil {
					r.failf("host: op %d: Set after Put (same op): %v", op, err)
					return
				}
				if third {
					w.pause()
					finalCalled.Store(op)
					if err := k.Delete(ctx, fmt.Appendf(nil, "k%02d", (key+1)%keys), op); err != nil {
						r.failf("host: op %d: Delete (third write): %v", op, err)
						return
					}
					delete(model, (key+1)%keys)
				}
			}
			model[key] = op
			bitsModel[i] = op%2 == 0
			complete.Store(op)
			if w.rng.IntN(16) == 0 {
				if err := db.EndOp(ctx, op); err != nil {
					r.failf("host: EndOp(%d): %v", op, err)
					return
				}
			}
		}
	})
	// checkWM checks a watermark read before finalCalled was loaded.
	checkWM := func(who string, wm, called uint64) bool {
		checks.Add(1)
		if wm > called {
			r.failf("%s: watermark %d covers op %d, whose last write had not even been called (it had for ops up to %d)", who, wm, wm, called)
			return false
		}
		return true
	}
	r.goWork("flusher", func(w *stressWorker) {
		for !w.stopped() {
			before := complete.Load()
			if err := db.Flush(ctx); err != nil {
				r.failf("Flush: %v", err)
				return
			}
			flushes.Add(1)
			wm := db.Watermark()
			if !checkWM("after Flush", wm, finalCalled.Load()) {
				return
			}
			// Ops up to before-1 were complete (a later op was admitted)
			// when Flush was called.
			if before > 0 && wm < before-1 {
				r.failf("Flush called after op %d completed returned with watermark %d", before, wm)
				return
			}
			// A write of a persisted op is a redelivered op: skipped, and
			// it leaves nothing.
			if wm > 0 && w.rng.IntN(4) == 0 {
				if err := k.Put(ctx, []byte("late"), []byte("late"), wm); err != nil {
					r.failf("Put of persisted op %d: %v, want nil (skipped)", wm, err)
					return
				}
				if err := b.Set(ctx, 5000, true, wm); err != nil {
					r.failf("Set of persisted op %d: %v, want nil (skipped)", wm, err)
					return
				}
				if v, err := k.Get([]byte("late")); !errors.Is(err, ErrNotFound) {
					r.failf("a skipped write is visible: %q, %v", v, err)
					return
				}
				if v, _ := b.Get(5000); v {
					r.failf("a skipped bit write is visible")
					return
				}
			}
		}
	})
	r.goWork("watermark reader", func(w *stressWorker) {
		for !w.stopped() {
			wm := db.Watermark()
			if !checkWM("Watermark", wm, finalCalled.Load()) {
				return
			}
			w.pause()
		}
	})
	stressSnapshotHolder(r, db, 3*time.Millisecond)
	d := stressDuration(1500 * time.Millisecond)
	r.runUntil(d, 8*d, func() bool { return flushes.Load() >= 20 && complete.Load() >= 100 })
	last := complete.Load()
	t.Logf("%d ops, %d flushes, %d watermark checks, metrics %+v", last, flushes.Load(), checks.Load(), db.Metrics())
	if flushes.Load() < 20 || last < 100 {
		t.Fatalf("only %d flushes and %d ops", flushes.Load(), last)
	}
	if err := db.EndOp(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = stressOpen(t, dir, nil)
	if wm := db.Watermark(); wm != last {
		t.Fatalf("reopened watermark %d, want %d", wm, last)
	}
	k, _ = db.KV("ops")
	b, _ = db.Bits("ops")
	for key := range keys {
		got, err := k.Get(fmt.Appendf(nil, "k%02d", key))
		op, present := model[key]
		if err := stressWant(got, err, fmt.Sprintf("op %d", op), present); err != nil {
			t.Errorf("after reopen: k%02d: %v", key, err)
		}
	}
	for i, v := range bitsModel {
		if got, err := b.Get(i); err != nil || got != v {
			t.Errorf("after reopen: bit %d = %v, %v; want %v", i, got, err, v)
		}
	}
}

// TestStressDropKVRacingWriters: writers put to a keyspace while DropKV
// drops it and flushes run in a tight loop. A write that returned nil
// before the drop, and only those, may be lost to it; every write that
// starts after DropKV returned fails with ErrDropped, however many flushes
// follow, and so do reads; a new keyspace of the same name is empty.
func TestStressDropKVRacingWriters(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), stressOptions())
	ctx := context.Background()
	deadline := time.Now().Add(stressDuration(1200 * time.Millisecond))
	for round := 0; round < 6 || time.Now().Before(deadline); round++ {
		name := fmt.Sprintf("drop%d", round%3)
		k, err := db.KV(name)
		if err != nil {
			t.Fatal(err)
		}
		if it, err := k.NewIter(nil); err != nil {
			t.Fatal(err)
		} else {
			if it.First() {
				t.Fatalf("round %d: a new keyspace %q holds %q", round, name, it.Key())
			}
			it.Close()
		}
		var dropped atomic.Bool // DropKV has returned
		r := newStressRun(t)
		stressFlusher(r, db, 0, nil)
		var after atomic.Int64 // writes refused after the drop
		for id := range 4 {
			r.goWork(fmt.Sprintf("writer %d", id), func(w *stressWorker) {
				for n := 0; !w.stopped(); n++ {
					d := dropped.Load()
					key := fmt.Appendf(nil, "w%d/%d", id, n%32)
					err := k.Put(ctx, key, []byte("v"), 0)
					switch {
					case d && !errors.Is(err, ErrDropped):
						r.failf("round %d: Put after DropKV returned: %v, want ErrDropped", round, err)
						return
					case err != nil && !errors.Is(err, ErrDropped):
						r.failf("round %d: Put: %v", round, err)
						return
					case d:
						after.Add(1)
						if _, err := k.Get(key); !errors.Is(err, ErrDropped) {
							r.failf("round %d: Get after DropKV returned: %v, want ErrDropped", round, err)
							return
						}
					}
				}
			})
		}
		r.goWork("dropper", func(w *stressWorker) {
			time.Sleep(time.Duration(w.rng.IntN(3000)) * time.Microsecond)
			if err := db.DropKV(ctx, name, 0); err != nil {
				r.failf("DropKV: %v", err)
				return
			}
			dropped.Store(true)
			// Flushes after the drop until the writers have been refused
			// a while.
			for n := 0; n < 5 || after.Load() < 200; n++ {
				if err := db.Flush(ctx); err != nil {
					r.failf("Flush: %v", err)
					return
				}
				if w.stopped() {
					return
				}
			}
			r.halt()
		})
		r.run(stressStuck)
		if after.Load() == 0 {
			t.Fatalf("round %d: no write was tried after the drop", round)
		}
	}
}

// TestStressBitsWholeChunks: a writer sets whole chunks (32768 bits, one
// shared full chunk each while nothing in the chunk is pending) and then a
// bit inside each (which copies the shared chunk into a private one), to
// alternating values, and publishes its progress; readers read bits of the
// latest chunk (Get, GetMany, Ones) and must see its value. Tables, and the
// chunks they keep for reuse, are recycled by flushes in a tight loop while
// snapshots seal and pin tables.
func TestStressBitsWholeChunks(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), stressOptions())
	b, err := db.Bits("chunks")
	if err != nil {
		t.Fatal(err)
	}
	const chunks, chunkBits = 4, 32768
	// Step c sets chunk c%chunks to c/chunks%2 == 0.
	want := func(c int64) (uint64, bool) { return uint64(c%chunks) * chunkBits, c/chunks%2 == 0 }
	var published atomic.Int64
	published.Store(-1)
	r := newStressRun(t)
	var flushes, reads atomic.Int64
	stressFlusher(r, db, 0, &flushes)
	stressSnapshotHolder(r, db, 3*time.Millisecond)
	r.goWork("writer", func(w *stressWorker) {
		ctx := context.Background()
		for c := int64(0); !w.stopped(); c++ {
			lo, v := want(c)
			if err := b.SetRange(ctx, lo, lo+chunkBits, v, 0); err != nil {
				r.failf("SetRange: %v", err)
				return
			}
			if err := b.Set(ctx, lo+w.rng.Uint64N(chunkBits), v, 0); err != nil {
				r.failf("Set: %v", err)
				return
			}
			published.Store(c)
		}
	})
	for id := range 8 {
		r.goWork(fmt.Sprintf("reader %d", id), func(w *stressWorker) {
			idx := make([]uint64, 8)
			out := make([]bool, 8)
			for !w.stopped() {
				c1 := published.Load()
				if c1 < 0 {
					runtime.Gosched()
					continue
				}
				lo, v := want(c1)
				for j := range idx {
					idx[j] = lo + w.rng.Uint64N(chunkBits)
				}
				var what string
				var err error
				switch w.rng.IntN(3) {
				case 0:
					what = "Get"
					for j, i := range idx {
						if out[j], err = b.Get(i); err != nil {
							break
						}
					}
				case 1:
					what = "GetMany"
					err = b.GetMany(idx, out)
				case 2:
					what = "Ones"
					for j, i := range idx {
						out[j] = false
						for x := range b.Ones(i) {
							out[j] = x == i
							break
						}
					}
				}
				if err != nil {
					r.failf("reader: %s: %v", what, err)
					return
				}
				// Step c1+chunks rewrites the chunk; it starts after
				// c1+chunks-1 is published.
				if c2 := published.Load(); c2+1 >= c1+chunks {
					continue
				}
				reads.Add(1)
				for j, i := range idx {
					if out[j] != v {
						r.failf("reader: %s: bit %d = %v after SetRange of its chunk to %v returned (step %d)", what, i, out[j], v, c1)
						return
					}
				}
			}
		})
	}
	r.run(stressDuration(3 * time.Second))
	t.Logf("%d steps, %d flushes, %d checked reads", published.Load()+1, flushes.Load(), reads.Load())
}

// TestStressKVRecycledUnderReaders is the setting of the earlier design's
// stale KV reads, made as frequent as possible: a generation whose newer
// tables are recycled at its release while an older table of the same view,
// holding older values of the same keys, is still intact. Two things make
// a generation hold several tables: a sealer that puts a key and range
// deletes it at once (a range delete that finds a key in the active table
// seals it), so that at a release the tables are cleared newest first, one
// after the other; and a snapshot, which seals the active table and pins it
// for a while, so that the next release recycles only the newer tables.
// Writers rewrite keys in short bursts (so that a key's values sit in
// several tables of one generation and in none of the newer ones) and
// publish each put once it returned; readers (Get, GetAppend, GetMany) must
// never read an older value. The readers do little else (values are 8-byte
// counters), so that as many reads as possible overlap a release. No scans
// and no iterators (whose pins keep every table intact).
func TestStressKVRecycledUnderReaders(t *testing.T) {
	db, k := stressRecycleKV(t, "recycled")
	const writers, keysEach = 2, 24
	// Every key shares a long prefix, and the tomber below leaves range
	// tombstones in every table: a read checks the tombstones of every
	// table it passes, comparing long keys, so it spends longer between
	// loading the view and reaching the table that holds its key (the
	// window a release must fall into).
	prefix := strings.Repeat("p", 3500)
	var pub [writers * keysEach]atomic.Int64
	keys := make([][]byte, writers*keysEach)
	for x := range keys {
		keys[x] = fmt.Appendf(nil, "%sw%d/%02d", prefix, x/keysEach, x%keysEach)
		pub[x].Store(-1)
	}
	r := newStressRun(t)
	var flushes, reads, snaps atomic.Int64
	stressFlusher(r, db, 0, &flushes)
	r.goWork("sealer", func(w *stressWorker) {
		ctx := context.Background()
		for !w.stopped() {
			if err := k.Put(ctx, []byte(prefix+"z/seal"), nil, 0); err != nil {
				r.failf("Put: %v", err)
				return
			}
			if err := k.DeleteRange(ctx, []byte(prefix+"z/"), []byte(prefix+"z0"), 0); err != nil {
				r.failf("DeleteRange: %v", err)
				return
			}
			time.Sleep(time.Duration(w.rng.IntN(100)) * time.Microsecond)
		}
	})
	stressTomber(r, k, prefix)
	stressSnapshots(r, db, &snaps)
	for id := range writers {
		r.goWork(fmt.Sprintf("writer %d", id), func(w *stressWorker) {
			v := make([]byte, 8)
			for n := int64(0); !w.stopped(); n++ {
				x := id*keysEach + int(n/3%keysEach)
				binary.BigEndian.PutUint64(v, uint64(n))
				if err := k.Put(context.Background(), keys[x], v, 0); err != nil {
					r.failf("Put: %v", err)
					return
				}
				pub[x].Store(n)
				if n%3 != 2 {
					time.Sleep(time.Duration(w.rng.IntN(200)) * time.Microsecond)
				}
			}
		})
	}
	for id := range 14 {
		r.goWork(fmt.Sprintf("reader %d", id), func(w *stressWorker) {
			// Readers 0-3: GetMany of 32 keys (the longer a read, the
			// likelier a release falls into it); the others: Get and
			// GetAppend of 8, one by one (a much shorter window each).
			n := 8
			if id < 4 {
				n = 32
			}
			vals := make([][]byte, n)
			lows := make([]int64, n)
			buf := make([]byte, 0, 8*n)
			for !w.stopped() {
				x0 := w.rng.IntN(len(keys) - len(lows))
				for j := range lows {
					lows[j] = pub[x0+j].Load() // lower bounds first, reads after
				}
				how := "GetMany"
				op := 0
				if id >= 4 {
					op = 1 + w.rng.IntN(2)
				}
				switch op {
				case 0:
					if _, err := k.GetMany(keys[x0:x0+len(lows)], vals, buf[:0]); err != nil {
						r.failf("GetMany: %v", err)
						return
					}
				case 1:
					how = "Get"
					for j := range lows {
						v, err := k.Get(keys[x0+j])
						if err != nil && !errors.Is(err, ErrNotFound) {
							r.failf("Get: %v", err)
							return
						}
						vals[j] = v
					}
				case 2:
					how = "GetAppend"
					for j := range lows {
						v, err := k.GetAppend(buf[8*j:8*j], keys[x0+j])
						if err != nil && !errors.Is(err, ErrNotFound) {
							r.failf("GetAppend: %v", err)
							return
						}
						vals[j] = v
					}
				}
				reads.Add(int64(len(lows)))
				for j, v := range vals {
					if lows[j] >= 0 && (len(v) != 8 || int64(binary.BigEndian.Uint64(v)) < lows[j]) {
						// Read again at once: a value found now says the
						// read path missed it (a visibility bug); none says
						// the write was lost (a flush bug) or the store's
						// point reads answer from an older state (a cached
						// iterator of a stale epoch, point-read rule P1:
						// with mutation 121 the second read misses too).
						again, aerr := k.Get(keys[x0+j])
						r.failf("%s(<prefix>%s) = %x after the put of %d returned (read again: %x, %v; %d generations)",
							how, keys[x0+j][len(prefix):], v, lows[j], again, aerr, db.Metrics().Generations)
						return
					}
				}
			}
		})
	}
	d := stressDuration(3 * time.Second)
	start := time.Now()
	// Runs on until the check below has its 20 generations, for up to
	// 20x its duration: 14 readers at -race on a loaded 2-core machine
	// leave the flusher a small share of the CPU (9-16 generations in
	// 4x its duration at a load average of 11-14).
	r.runUntil(d, 20*d, func() bool { return db.Metrics().Generations >= 20 })
	t.Logf("%d flushes, %d snapshots, %d checked reads, metrics %+v", flushes.Load(), snaps.Load(), reads.Load(), db.Metrics())
	if g := db.Metrics().Generations; g < 20 {
		t.Fatalf("only %d generations in %v: the test did not exercise recycling", g, time.Since(start).Round(time.Second))
	}
}

// TestStressKVFirstValues makes the first value of a key the common case of
// TestStressKVRecycledUnderReaders: writers put ever new keys (each three
// times in a row, as there) and publish each once its first put returned;
// readers read the keys published last (pending, being flushed, or just
// released to the store) with Get, GetAppend and GetMany and must find
// every one. A miss is a read that fell between the overlay and the store.
// Each writer deletes its keys far behind the readers with one range delete
// every 512 keys (a tombstone beside the live keys, and a store that does
// not grow with the run).
func TestStressKVFirstValues(t *testing.T) {
	db, k := stressRecycleKV(t, "first")
	const writers = 2
	prefix := strings.Repeat("p", 3500)
	key := func(w int, i int64) []byte { return fmt.Appendf(nil, "%sw%d/%08d", prefix, w, i) }
	var pub [writers]atomic.Int64 // keys [0, pub) of each writer have their first value
	r := newStressRun(t)
	var flushes, reads, snaps atomic.Int64
	stressFlusher(r, db, 0, &flushes)
	stressTomber(r, k, prefix)
	stressSnapshots(r, db, &snaps)
	for id := range writers {
		r.goWork(fmt.Sprintf("writer %d", id), func(w *stressWorker) {
			v := make([]byte, 8)
			for n := int64(0); !w.stopped(); n++ {
				binary.BigEndian.PutUint64(v, uint64(n))
				if err := k.Put(context.Background(), key(id, n/3), v, 0); err != nil {
					r.failf("Put: %v", err)
					return
				}
				if n%3 == 0 {
					pub[id].Store(n/3 + 1)
					if x := n / 3; x%512 == 0 && x >= 2048 {
						// Keys far behind the readers' go, so that the
						// store stays small: a range tombstone beside
						// the live keys, in the same tables.
						if err := k.DeleteRange(context.Background(), key(id, 0), key(id, x-2048), 0); err != nil {
							r.failf("DeleteRange: %v", err)
							return
						}
					}
				}
				if n%3 != 2 {
					time.Sleep(time.Duration(w.rng.IntN(200)) * time.Microsecond)
				}
			}
		})
	}
	for id := range 10 {
		r.goWork(fmt.Sprintf("reader %d", id), func(w *stressWorker) {
			const n = 16
			keys := make([][]byte, n)
			vals := make([][]byte, n)
			buf := make([]byte, 0, 8*n)
			for !w.stopped() {
				wr := w.rng.IntN(writers)
				hi := pub[wr].Load() // published first, read after
				if hi < n {
					continue
				}
				for j := range keys {
					keys[j] = key(wr, hi-n+int64(j))
				}
				how := "GetMany"
				switch op := id % 3; op {
				case 0:
					if _, err := k.GetMany(keys, vals, buf[:0]); err != nil {
						r.failf("GetMany: %v", err)
						return
					}
				default:
					how = "Get"
					if op == 2 {
						how = "GetAppend"
					}
					for j := range keys {
						var v []byte
						var err error
						if op == 1 {
							v, err = k.Get(keys[j])
						} else {
							v, err = k.GetAppend(buf[8*j:8*j], keys[j])
						}
						if err != nil && !errors.Is(err, ErrNotFound) {
							r.failf("Get: %v", err)
							return
						}
						if err != nil {
							v = nil
						}
						vals[j] = v
					}
				}
				reads.Add(n)
				for j, v := range vals {
					if len(v) != 8 {
						again, aerr := k.Get(keys[j])
						r.failf("%s(<prefix>%s) = %x after its first put returned (read again: %x, %v; %d generations)",
							how, keys[j][len(prefix):], v, again, aerr, db.Metrics().Generations)
						return
					}
				}
			}
		})
	}
	d := stressDuration(3 * time.Second)
	start := time.Now()
	// As TestStressKVRecycledUnderReaders: on until 20 generations (each
	// a window this test races), for up to 20x its duration.
	r.runUntil(d, 20*d, func() bool { return db.Metrics().Generations >= 20 })
	t.Logf("%d flushes, %d snapshots, %d checked reads, metrics %+v", flushes.Load(), snaps.Load(), reads.Load(), db.Metrics())
	if g := db.Metrics().Generations; g < 20 || reads.Load() == 0 {
		t.Fatalf("%d generations, %d checked reads in %v: the test did not race releases", g, reads.Load(), time.Since(start).Round(time.Second))
	}
}

// stressTomber runs a worker that range deletes disjoint, empty ranges
// under prefix: each adds a tombstone to the active table without sealing
// it. The ranges repeat every 256: each table gets its own tombstones,
// while the store's grow no further (a store holding one more range
// deletion per flush for the whole run made its flushes, and so the test,
// slower and slower: 13 generations in a CI run under -cover).
func stressTomber(r *stressRun, k *KV, prefix string) {
	r.goWork("tomber", func(w *stressWorker) {
		ctx := context.Background()
		for n := 0; !w.stopped(); n++ {
			lo := fmt.Appendf(nil, "%st/%06d", prefix, n%256)
			if err := k.DeleteRange(ctx, lo, append(lo, 0), 0); err != nil {
				r.failf("DeleteRange: %v", err)
				return
			}
			time.Sleep(time.Duration(w.rng.IntN(400)) * time.Microsecond)
		}
	})
}

// stressSnapshots runs a worker that holds snapshots of db for 1-5 ms at
// a time, counting them in snaps: readers that pin old state.
func stressSnapshots(r *stressRun, db *DB, snaps *atomic.Int64) {
	r.goWork("snapshots", func(w *stressWorker) {
		for !w.stopped() {
			s, err := db.NewSnapshot()
			if err != nil {
				r.failf("NewSnapshot: %v", err)
				return
			}
			snaps.Add(1)
			time.Sleep(time.Duration(1000+w.rng.IntN(4000)) * time.Microsecond)
			s.Close()
			time.Sleep(time.Duration(w.rng.IntN(2000)) * time.Microsecond)
		}
	})
}

// stressRecycleKV opens a stress engine for the tests of reads racing a
// release, and its keyspace name. Without the read tier: every table is
// released (and recycled) at once, and its probes, which long keys and
// tombstones make slow, would slow the readers' loop (TestReadTierModel
// races the tier's evictions, which recycle too, against readers). The
// default ingestion threshold: what is raced is the release, whichever way
// the generation reached the store.
func stressRecycleKV(t *testing.T, name string) (*DB, *KV) {
	stressSetup(t)
	opts := stressOptions()
	opts.ReadTierBytes = -1
	opts.IngestThreshold = 0
	db := stressOpen(t, stressDir(t), opts)
	k, err := db.KV(name)
	if err != nil {
		t.Fatal(err)
	}
	return db, k
}
