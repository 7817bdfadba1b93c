package storage

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

// walGate controls the WAL syncs of a store opened on its filesystem:
// pass them, hold them until release, or fail them with
// errorfs.ErrInjected.
type walGate struct {
	mu      sync.Mutex
	mode    int // gatePass, gateHold or gateFail
	release chan struct{}
	held    chan struct{} // gets a value each time a sync starts waiting
}

const (
	gatePass = iota
	gateHold
	gateFail
)

func newWALGate() *walGate {
	return &walGate{release: make(chan struct{}), held: make(chan struct{}, 1)}
}

// fs wraps base so that WAL syncs go through the gate.
func (g *walGate) fs(base vfs.FS) vfs.FS {
	return errorfs.Wrap(base, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") ||
			op.Kind != errorfs.OpFileSync && op.Kind != errorfs.OpFileSyncData && op.Kind != errorfs.OpFileSyncTo {
			return nil
		}
		g.mu.Lock()
		mode, release := g.mode, g.release
		g.mu.Unlock()
		if mode == gateHold {
			select {
			case g.held <- struct{}{}:
			default:
			}
			<-release
			g.mu.Lock()
			mode = g.mode
			g.mu.Unlock()
		}
		if mode == gateFail {
			return errorfs.ErrInjected
		}
		return nil
	}))
}

func (g *walGate) set(mode int) {
	g.mu.Lock()
	g.mode = mode
	g.mu.Unlock()
}

// open releases held syncs and sets the mode for later ones.
func (g *walGate) open(mode int) {
	g.mu.Lock()
	g.mode = mode
	close(g.release)
	g.release = make(chan struct{})
	g.mu.Unlock()
}

// done reports whether ch is closed or has a value, without waiting.
func done[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCommitVisibleBeforeDurable: Commit returns while the WAL sync is
// held; the write is visible to Get and snapshots, the watermark has not
// moved and Wait blocks until the sync completes.
func TestCommitVisibleBeforeDurable(t *testing.T) {
	gate := newWALGate()
	s, err := Open("db", &Options{FS: gate.fs(vfs.NewMem())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gate.set(gateHold)
	b := s.NewBatch()
	b.Put(ks1, []byte("k"), []byte("v"))
	b.SetWatermark(7)
	c := mustCommit(t, s, b)
	if b.Len() != 0 {
		t.Fatal("Commit did not empty the batch")
	}
	wantGet(t, s, "k", "v")
	sn, err := s.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, sn, "k", "v")
	if err := sn.Close(); err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, 0)

	<-gate.held // the sync covering c is in progress
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	if done(waited) {
		t.Fatal("Wait returned while the WAL sync is held")
	}
	wantWatermark(t, s, 0)
	gate.open(gatePass)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, 7)
	// The batch is reusable at once.
	b.Put(ks1, []byte("k2"), []byte("v2"))
	mustApply(t, s, b)
	wantGet(t, s, "k2", "v2")
}

// TestCommitOrdering makes many commits without waiting, then waits for
// them out of order (some in reverse, then all concurrently) while a
// goroutine watches the watermark: it moves only when a Wait returns, to
// the highest watermark committed up to the waited commit, and never goes
// backwards. Writes to one key land in commit order.
func TestCommitOrdering(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	commits := make([]*Commit, n+1)
	b := s.NewBatch()
	for i := 1; i <= n; i++ {
		b.Put(ks1, fmt.Appendf(nil, "k%03d", i), []byte("v"))
		b.Put(ks1, []byte("last"), fmt.Appendf(nil, "%d", i))
		b.SetWatermark(uint64(i))
		commits[i] = mustCommit(t, s, b)
	}
	// Nothing was waited for: the watermark has not moved, whatever the
	// syncs did meanwhile.
	wantWatermark(t, s, 0)

	stop := make(chan struct{})
	watcher := make(chan error, 1)
	go func() {
		var prev uint64
		for {
			wm, err := s.Watermark()
			if err != nil {
				watcher <- err
				return
			}
			if wm < prev {
				watcher <- fmt.Errorf("watermark went back from %d to %d", prev, wm)
				return
			}
			prev = wm
			if done(stop) {
				watcher <- nil
				return
			}
		}
	}()

	var waited uint64
	for _, i := range []int{50, 10, 49, 51, 1, 75, 74} {
		if err := commits[i].Wait(); err != nil {
			t.Fatal(err)
		}
		waited = max(waited, uint64(i))
		wantWatermark(t, s, waited)
	}
	for i := n; i >= 90; i-- {
		if err := commits[i].Wait(); err != nil {
			t.Fatal(err)
		}
		wantWatermark(t, s, n)
	}
	// Every commit is durable, so applied: writes to one key landed in
	// commit order.
	wantGet(t, s, "last", fmt.Sprint(n))
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			if err := commits[i].Wait(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-watcher; err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantWatermark(t, s, n)
	wantGet(t, s, "last", fmt.Sprint(n))
}

// TestCommitWatermarkAgainstCommitted: the "leave the watermark out if not
// above" decision is made against the highest watermark committed, not the
// persisted one. Committing 10 then 5 before either is waited for must not
// write 5 after 10 (which a reopen would read back as 5).
func TestCommitWatermarkAgainstCommitted(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Put(ks1, []byte("a"), []byte("1"))
	b.SetWatermark(10)
	c10 := mustCommit(t, s, b)
	b.Put(ks1, []byte("b"), []byte("2"))
	b.SetWatermark(5)
	c5 := mustCommit(t, s, b)
	if err := c5.Wait(); err != nil {
		t.Fatal(err)
	}
	// c5 is after c10: durable c5 means durable c10.
	wantWatermark(t, s, 10)
	if err := c10.Wait(); err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantWatermark(t, s, 10)
	wantGet(t, s, "b", "2")
}

// TestCommitEmpty: a commit with nothing to write completes with the
// latest earlier commit (its Wait does not return before that one is
// durable), and on a store with no commits at once.
func TestCommitEmpty(t *testing.T) {
	gate := newWALGate()
	s, err := Open("db", &Options{FS: gate.fs(vfs.NewMem())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	if err := mustCommit(t, s, b).Wait(); err != nil {
		t.Fatal(err)
	}
	b.SetWatermark(0) // not above the committed 0: nothing to write
	if err := mustCommit(t, s, b).Wait(); err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, 0)

	gate.set(gateHold)
	b.Put(ks1, []byte("k"), []byte("v"))
	b.SetWatermark(5)
	c1 := mustCommit(t, s, b)
	b.SetWatermark(3)
	c2 := mustCommit(t, s, b)
	<-gate.held
	waited := make(chan error, 1)
	go func() { waited <- c2.Wait() }()
	if done(waited) {
		t.Fatal("empty commit's Wait returned before the earlier commit was durable")
	}
	gate.open(gatePass)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, 5)
	if err := c1.Wait(); err != nil {
		t.Fatal(err)
	}
	b.SetWatermark(5)
	mustApply(t, s, b)
	wantWatermark(t, s, 5)
}

// TestCommitSyncFailure injects a WAL sync failure (pebble v2 reports it
// to the waiters instead of exiting): the failed commit and the one
// committed behind it fail with kverr.ErrSyncFailed wrapping the injected error,
// the watermark does not move, later writes are refused without reaching
// pebble (whose commit path panics once its log has failed), reads still
// work, Close finishes, and the store reopens.
func TestCommitSyncFailure(t *testing.T) {
	mem := vfs.NewMem()
	gate := newWALGate()
	s, err := Open("db", &Options{FS: gate.fs(mem)})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "before", "1")
	gate.set(gateHold)
	b := s.NewBatch()
	b.Put(ks1, []byte("k1"), []byte("v1"))
	b.SetWatermark(3)
	c1 := mustCommit(t, s, b)
	<-gate.held
	b.Put(ks1, []byte("k2"), []byte("v2"))
	b.SetWatermark(4)
	c2 := mustCommit(t, s, b)
	gate.open(gateFail)

	for i, c := range []*Commit{c2, c1, c2} {
		err := c.Wait()
		if !errors.Is(err, kverr.ErrSyncFailed) || !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("Wait %d = %v, want ErrSyncFailed wrapping the injected error", i, err)
		}
	}
	wantWatermark(t, s, 0)
	wantGet(t, s, "before", "1")
	wantGet(t, s, "k1", "v1") // visible, though not durable

	b.Put(ks1, []byte("k3"), []byte("v3"))
	if _, err := s.Commit(b); !errors.Is(err, kverr.ErrSyncFailed) {
		t.Fatalf("Commit after a failed sync = %v, want ErrSyncFailed", err)
	}
	if b.Len() != 0 {
		t.Fatal("refused Commit did not empty the batch")
	}
	b.Put(ks1, []byte("k3"), []byte("v3"))
	if err := s.Apply(b); !errors.Is(err, kverr.ErrSyncFailed) {
		t.Fatalf("Apply after a failed sync = %v, want ErrSyncFailed", err)
	}
	if err := s.Flush(); !errors.Is(err, kverr.ErrSyncFailed) {
		t.Fatalf("Flush after a failed sync = %v, want ErrSyncFailed", err)
	}
	wantNotFound(t, s, "k3")
	it, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() || string(it.Key()) != "before" {
		t.Fatalf("iterator after a failed sync at %q", it.Key())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing the failed log reports the failure again.
	if err := s.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close after a failed sync = %v, want the injected error", err)
	}
	if err := c1.Wait(); !errors.Is(err, kverr.ErrSyncFailed) {
		t.Fatalf("Wait after Close = %v", err)
	}

	s, err = Open("db", &Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantGet(t, s, "before", "1")
	// Contract 4: whatever survived, the watermark covers only data that
	// is there (MemFS kept the unsynced writes, so both usually are).
	wm, err := s.Watermark()
	if err != nil {
		t.Fatal(err)
	}
	if wm >= 3 {
		wantGet(t, s, "k1", "v1")
	}
	if wm >= 4 {
		wantGet(t, s, "k2", "v2")
	}
	put(t, s, "after", "ok")
	wantGet(t, s, "after", "ok")
}

// TestCloseWithPendingCommits: Close waits for the WAL syncs of pending
// commits before closing pebble; Waits running during Close, and Waits
// called after it, return the sync's result; the data and watermark are
// there after reopening.
func TestCloseWithPendingCommits(t *testing.T) {
	mem := vfs.NewMem()
	gate := newWALGate()
	s, err := Open("db", &Options{FS: gate.fs(mem)})
	if err != nil {
		t.Fatal(err)
	}
	gate.set(gateHold)
	var commits []*Commit
	b := s.NewBatch()
	for i := 1; i <= 5; i++ {
		b.Put(ks1, fmt.Appendf(nil, "k%d", i), []byte("v"))
		b.SetWatermark(uint64(i))
		commits = append(commits, mustCommit(t, s, b))
	}
	<-gate.held
	waits := make(chan error, len(commits))
	for _, c := range commits {
		go func() { waits <- c.Wait() }()
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if done(closed) {
		t.Fatal("Close returned while commits wait for their sync")
	}
	gate.open(gatePass)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range commits {
		if err := <-waits; err != nil {
			t.Fatalf("Wait during Close: %v", err)
		}
	}
	for _, c := range commits {
		if err := c.Wait(); err != nil {
			t.Fatalf("Wait after Close: %v", err)
		}
	}
	if _, err := s.Commit(s.NewBatch()); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Commit after Close = %v", err)
	}
	s, err = Open("db", &Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantWatermark(t, s, 5)
	for i := 1; i <= 5; i++ {
		wantGet(t, s, fmt.Sprintf("k%d", i), "v")
	}
}

// TestCommitCrashPrefix checks the ordering argument on pebble's
// crash-simulating filesystem. Commits are pipelined and waited for only
// now and then; crash clones keeping a random half of the unsynced data
// are taken, some while WAL syncs are held (so the tail is really
// unsynced). Every clone must hold a prefix of the commits and a watermark
// covered by that prefix; a clone taken after a Wait returned holds at
// least that commit.
func TestCommitCrashPrefix(t *testing.T) {
	mem := testutil.NewCrashableMem()
	gate := newWALGate()
	s, err := Open("db", &Options{FS: gate.fs(mem)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200
	b := s.NewBatch()
	type clone struct {
		fs     *vfs.MemFS
		at     int // commits made before the clone
		waited int // highest commit whose Wait returned before the clone
	}
	var clones []clone
	var last *Commit
	waited := 0
	for i := 1; i <= n; i++ {
		held := i%40 >= 20 // commits 20..39 of every 40 are held
		if i%40 == 20 {
			gate.set(gateHold)
		}
		b.Put(ks1, fmt.Appendf(nil, "k%03d", i), []byte("v"))
		b.SetWatermark(uint64(i))
		last = mustCommit(t, s, b)
		if i%5 == 0 {
			clones = append(clones, clone{mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng}), i, waited})
		}
		if i%40 == 39 {
			gate.open(gatePass)
		}
		if i%7 == 0 && !held {
			if err := last.Wait(); err != nil {
				t.Fatal(err)
			}
			waited = i
		}
	}
	partial := 0
	for _, c := range clones {
		cs, err := Open("db", &Options{FS: c.fs})
		if err != nil {
			t.Fatal(err)
		}
		wm, err := cs.Watermark()
		if err != nil {
			t.Fatal(err)
		}
		present := 0
		for i := 1; i <= n; i++ {
			_, err := cs.Get(ks1, fmt.Appendf(nil, "k%03d", i))
			switch {
			case err == nil && present == i-1:
				present = i
			case err == nil:
				t.Fatalf("clone holds commit %d but not %d", i, present+1)
			case !errors.Is(err, kverr.ErrNotFound):
				t.Fatal(err)
			}
		}
		if wm != uint64(present) || present < c.waited || present > c.at {
			t.Fatalf("clone: watermark %d, commits 1..%d present, %d waited for before the crash", wm, present, c.waited)
		}
		if present < c.at {
			partial++
		}
		if err := cs.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d clones lost unsynced commits", partial, len(clones))
	if partial == 0 {
		t.Fatal("no clone lost unsynced commits: the test did not exercise the crash")
	}
}

// TestWaitFromManyGoroutines: Wait is safe from any goroutine and returns
// the same result to all.
func TestWaitFromManyGoroutines(t *testing.T) {
	s, _ := openMem(t)
	b := s.NewBatch()
	b.Put(ks1, []byte("k"), []byte("v"))
	b.SetWatermark(1)
	c := mustCommit(t, s, b)
	var wg sync.WaitGroup
	var failures atomic.Int32
	for range 16 {
		wg.Go(func() {
			if c.Wait() != nil {
				failures.Add(1)
			}
		})
	}
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatal("Wait failed")
	}
	wantWatermark(t, s, 1)
}

// TestCommitLargeBatch: a batch larger than half a memtable, which pebble
// queues as a flushable batch instead of applying it to the memtable,
// commits, orders and syncs like any other, between small commits.
func TestCommitLargeBatch(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Put(ks1, []byte("small1"), []byte("v"))
	b.SetWatermark(1)
	c1 := mustCommit(t, s, b)
	for i := range 20_000 {
		b.Put(ks1, fmt.Appendf(nil, "big%05d", i), make([]byte, 64))
	}
	b.SetWatermark(2)
	c2 := mustCommit(t, s, b)
	b.Put(ks1, []byte("small2"), []byte("v"))
	b.SetWatermark(3)
	c3 := mustCommit(t, s, b)
	wantGet(t, s, "big19999", string(make([]byte, 64)))
	for _, c := range []*Commit{c3, c2, c1} {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	wantWatermark(t, s, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantWatermark(t, s, 3)
	wantGet(t, s, "small1", "v")
	wantGet(t, s, "big00000", string(make([]byte, 64)))
	wantGet(t, s, "small2", "v")
}
