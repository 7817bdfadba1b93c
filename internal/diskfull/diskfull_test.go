package diskfull

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// fixture is a guard over a MemFS whose disk fills on demand: while full,
// writes, creations and syncs fail with ENOSPC.
type fixture struct {
	g                     *FS
	full                  atomic.Bool
	syncFull              atomic.Bool
	mu                    sync.Mutex
	fulls, waits, spaces  int
	injectedWrites, syncs atomic.Int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{}
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/db", 0o755); err != nil {
		t.Fatal(err)
	}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate:
			if fx.full.Load() {
				fx.injectedWrites.Add(1)
				return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
			}
		case errorfs.OpFileSync:
			if fx.syncFull.Load() {
				fx.syncs.Add(1)
				return &os.PathError{Op: "fsync", Path: op.Path, Err: syscall.ENOSPC}
			}
		}
		return nil
	})
	fx.g = New(errorfs.Wrap(mem, inj), "/db", &Options{
		Full:     func(error) { fx.mu.Lock(); fx.fulls++; fx.mu.Unlock() },
		Waiting:  func(error) { fx.mu.Lock(); fx.waits++; fx.mu.Unlock() },
		Space:    func() { fx.mu.Lock(); fx.spaces++; fx.mu.Unlock() },
		RetryMax: 2 * time.Millisecond,
	})
	return fx
}

func (fx *fixture) counts() (fulls, waits, spaces int) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.fulls, fx.waits, fx.spaces
}

func (fx *fixture) create(t *testing.T, name string) vfs.File {
	t.Helper()
	f, err := fx.g.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// waitFor polls until cond holds (at most 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A write of a write-ahead log waits for space once resumed, and
// succeeds, whole, when space returns; the owner hears Full, Waiting and
// Space once each.
func TestLogWriteWaitsForSpace(t *testing.T) {
	fx := newFixture(t)
	fx.g.Resume()
	f := fx.create(t, "/db/000001.log")
	fx.full.Store(true)
	done := make(chan error, 1)
	go func() {
		n, err := f.Write([]byte("record"))
		if err == nil && n != 6 {
			err = errors.New("short write")
		}
		done <- err
	}()
	waitFor(t, "the write to wait", func() bool { return fx.g.Waiting() == 1 && fx.injectedWrites.Load() >= 3 })
	if !fx.g.isFull() {
		t.Fatal("Full() = false while a write waits")
	}
	fx.full.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("the waiting write: %v", err)
	}
	if fulls, waits, spaces := fx.counts(); fulls != 1 || waits != 1 || spaces != 1 || fx.g.isFull() || fx.g.Waiting() != 0 {
		t.Fatalf("Full %d, Waiting %d, Space %d calls, Full() %v, Waiting() %d; want 1, 1, 1, false, 0", fulls, waits, spaces, fx.g.isFull(), fx.g.Waiting())
	}
}

// Before Resume and after Abort a log write fails at once with ENOSPC; a
// waiting one fails at Abort. A MANIFEST write waits through Abort.
func TestAbort(t *testing.T) {
	fx := newFixture(t)
	log := fx.create(t, "/db/000002.log")
	man := fx.create(t, "/db/MANIFEST-000003")
	fx.full.Store(true)
	if _, err := log.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("log write before Resume = %v, want ENOSPC at once", err)
	}
	fx.g.Resume()
	logDone, manDone := make(chan error, 1), make(chan error, 1)
	go func() { _, err := log.Write([]byte("x")); logDone <- err }()
	go func() { _, err := man.Write([]byte("y")); manDone <- err }()
	waitFor(t, "both writes to wait", func() bool { return fx.g.Waiting() == 2 })
	fx.g.Abort()
	if err := <-logDone; !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("waiting log write at Abort = %v, want ENOSPC", err)
	}
	select {
	case err := <-manDone:
		t.Fatalf("the MANIFEST write returned at Abort: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := log.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("log write after Abort = %v, want ENOSPC at once", err)
	}
	fx.full.Store(false)
	if err := <-manDone; err != nil {
		t.Fatalf("the MANIFEST write once space returned: %v", err)
	}
}

// Other files fail at once, reported; files outside the directory are
// neither waited for nor reported; a sync is never retried.
func TestFailFastUnguardedAndSync(t *testing.T) {
	fx := newFixture(t)
	fx.g.Resume()
	sst := fx.create(t, "/db/000004.sst")
	other := fx.create(t, "/elsewhere.log")
	fx.full.Store(true)
	if _, err := sst.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("sstable write on a full disk = %v, want ENOSPC at once", err)
	}
	if fulls, waits, _ := fx.counts(); fulls != 1 || waits != 0 {
		t.Fatalf("Full %d, Waiting %d after a failed sstable write; want 1, 0", fulls, waits)
	}
	if _, err := other.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write outside the directory = %v, want ENOSPC at once", err)
	}
	fx.full.Store(false)
	if _, err := other.Write([]byte("x")); err != nil || !fx.g.isFull() {
		t.Fatalf("a write outside the directory ended the episode (err %v, Full %v)", err, fx.g.isFull())
	}
	log := fx.create(t, "/db/000005.log")
	if fx.g.isFull() {
		t.Fatal("a successful creation did not end the episode")
	}
	fx.syncFull.Store(true)
	if err := log.Sync(); !errors.Is(err, syscall.ENOSPC) || fx.syncs.Load() != 1 {
		t.Fatalf("Sync on a full disk = %v after %d attempts; want ENOSPC after 1", err, fx.syncs.Load())
	}
	if fulls, _, _ := fx.counts(); fulls != 2 || !fx.g.isFull() {
		t.Fatalf("a failed sync was not reported (Full %d calls)", fulls)
	}
}

// isFull reports whether an episode is on: a write found the disk full and
// none has succeeded since. (The engine asks only Waiting.)
func (g *FS) isFull() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.full
}
