package kvbuf

// The host's op protocol: redelivered ops, watermark notifications, and
// contexts checked before admission.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedeliveredOpsAreNoOps (issue 18): a raft host restarts with
// Applied = min(Watermark(), HardState.Commit), so raft redelivers entries
// at or below the watermark. Every kind of write, a batch and EndOp of such
// an op returns nil, changes nothing (pending state, store, files) and is
// counted in Metrics.Redelivered; also after a reopen.
func TestRedeliveredOpsAreNoOps(t *testing.T) {
	dir := newEngineDir(t) // k: a=1; b: bit 3; watermark 2
	for round := range 2 {
		db := openT(t, dir, &Options{FlushInterval: -1})
		k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
		if round == 0 {
			mustPut(t, k, "c", "3", 3)
			if err := db.EndOp(ctx, 4); err != nil {
				t.Fatal(err)
			}
			mustFlush(t, db)
		}
		if wm := db.Watermark(); wm != 4 {
			t.Fatalf("round %d: watermark %d, want 4", round, wm)
		}
		before := engineState(t, db)
		calls := []struct {
			name string
			run  func(op uint64) error
		}{
			{"Put", func(op uint64) error { return k.Put(ctx, []byte("a"), []byte("redelivered"), op) }},
			{"Delete", func(op uint64) error { return k.Delete(ctx, []byte("a"), op) }},
			{"DeleteRange", func(op uint64) error { return k.DeleteRange(ctx, nil, nil, op) }},
			{"Set", func(op uint64) error { return b.Set(ctx, 3, false, op) }},
			{"SetRange", func(op uint64) error { return b.SetRange(ctx, 0, 100, true, op) }},
			{"DropKV", func(op uint64) error { return db.DropKV(ctx, "k", op) }},
			{"Apply", func(op uint64) error {
				bt := db.NewBatch()
				bt.Put(k, []byte("z"), []byte("redelivered"))
				bt.Set(b, 9, true)
				return db.Apply(ctx, bt, op)
			}},
			{"EndOp", func(op uint64) error { return db.EndOp(ctx, op) }},
		}
		var n int64
		for _, c := range calls {
			for op := uint64(1); op <= 4; op++ {
				if err := c.run(op); err != nil {
					t.Fatalf("round %d: redelivered %s of op %d: %v", round, c.name, op, err)
				}
				n++
			}
		}
		m := db.Metrics()
		if m.Redelivered != n || m.PendingBytes != 0 {
			t.Fatalf("round %d: Redelivered %d PendingBytes %d, want %d and 0", round, m.Redelivered, m.PendingBytes, n)
		}
		if after := engineState(t, db); after != before {
			t.Fatalf("round %d: redelivered ops changed the engine:\n%s\nwant\n%s", round, after, before)
		}
		mustFlush(t, db)
		if g := db.Metrics().Generations; g != int64(1-round) {
			t.Fatalf("round %d: %d generations; redelivered ops must not make a flush", round, g)
		}
		closeT(t, db)
	}
}

// TestContextCheckedBeforeAdmission (issue 20): a call given a context that
// is already done returns its error and changes nothing, even when it would
// not have waited; that holds for every engine call that takes a context.
func TestContextCheckedBeforeAdmission(t *testing.T) {
	dir := newEngineDir(t)
	db := openT(t, dir, &Options{FlushInterval: -1})
	defer closeT(t, db)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	before := engineState(t, db)
	done, cancel := context.WithCancel(ctx)
	cancel()
	calls := []struct {
		name string
		run  func() error
	}{
		{"Put", func() error { return k.Put(done, []byte("x"), []byte("1"), 5) }},
		{"Put op 0", func() error { return k.Put(done, []byte("x"), []byte("1"), 0) }},
		{"Delete", func() error { return k.Delete(done, []byte("a"), 5) }},
		{"DeleteRange", func() error { return k.DeleteRange(done, nil, nil, 5) }},
		{"Set", func() error { return b.Set(done, 9, true, 5) }},
		{"SetRange", func() error { return b.SetRange(done, 0, 10, true, 5) }},
		{"DropKV", func() error { return db.DropKV(done, "k", 5) }},
		{"Apply", func() error {
			bt := db.NewBatch()
			bt.Put(k, []byte("x"), []byte("1"))
			return db.Apply(done, bt, 5)
		}},
		{"Update", func() error {
			return db.Update(done, 5, func(bt *Batch) error { bt.Put(k, []byte("x"), []byte("1")); return nil })
		}},
		{"EndOp", func() error { return db.EndOp(done, 5) }},
		{"Flush", func() error { return db.Flush(done) }},
		{"FlushMemtables", func() error { return db.FlushMemtables(done) }},
		{"Wait", func() error { return db.Wait(done) }},
		{"WaitWatermark", func() error { _, err := db.WaitWatermark(done, 100); return err }},
	}
	for _, c := range calls {
		if err := c.run(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", c.name, err)
		}
	}
	if after := engineState(t, db); after != before {
		t.Fatalf("calls with a cancelled context changed the engine:\n%s\nwant\n%s", after, before)
	}
	if m := db.Metrics(); m.PendingBytes != 0 {
		t.Fatalf("PendingBytes %d after refused calls, want 0", m.PendingBytes)
	}
}

// TestWatermarkNotifyDrivesLogCompaction (issue 18): a host truncates its
// log as the watermark advances, woken by WaitWatermark (no polling), while
// its writers append ops. Every notified watermark is at least the one
// before (never backwards), is durable (a kill -9 copy of the directory
// opens with a watermark at least as high, so nothing truncated is ever
// needed for replay), and after Close the compactor gets ErrClosed and
// leaks nothing; a reopen starts at least at the last one notified.
func TestWatermarkNotifyDrivesLogCompaction(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: time.Millisecond})
	k := mustKV(t, db, "k")
	var truncated atomic.Uint64 // the host log's compaction point
	compactorDone := make(chan error, 1)
	go func() {
		var wm uint64
		for {
			next, err := db.WaitWatermark(context.Background(), wm)
			if err != nil {
				compactorDone <- err
				return
			}
			if next <= wm {
				compactorDone <- fmt.Errorf("WaitWatermark(%d) returned %d", wm, next)
				return
			}
			wm = next
			truncated.Store(wm) // log.TruncateThrough(wm)
		}
	}()
	const ops = 400
	for op := uint64(1); op <= ops; op++ {
		if err := db.Update(ctx, op, func(b *Batch) error {
			b.Put(k, fmt.Appendf(nil, "k%04d", op), []byte("v"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if op%100 == 0 {
			t0 := truncated.Load()
			c := openT(t, crashCopy(t, dir), nil)
			if wm := c.Watermark(); wm < t0 {
				t.Fatalf("the log was truncated through op %d, a crash now recovers watermark %d", t0, wm)
			}
			closeT(t, c)
		}
	}
	mustFlush(t, db)
	deadline := time.Now().Add(time.Minute)
	for truncated.Load() != ops && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if got := truncated.Load(); got != ops {
		t.Fatalf("compactor saw watermark %d after a Flush covering op %d", got, ops)
	}
	closeT(t, db)
	if err := <-compactorDone; !errors.Is(err, ErrClosed) {
		t.Fatalf("compactor ended with %v, want ErrClosed", err)
	}
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm < ops {
		t.Fatalf("reopened at watermark %d below the last one notified (%d)", wm, ops)
	}
}

// TestWatermarkNeverGoesBackAcrossRestarts: over reopen and crash cycles
// with ops of every shape, the watermark an engine opens with is never
// below one it reported before (etcd#13922).
func TestWatermarkNeverGoesBackAcrossRestarts(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	var seen, op uint64
	for cycle := range 12 {
		db := openT(t, dir, &Options{FlushInterval: time.Duration(1+rng.IntN(3)) * time.Millisecond})
		if wm := db.Watermark(); wm < seen {
			t.Fatalf("cycle %d: opened at watermark %d, below %d reported before", cycle, wm, seen)
		}
		op = max(op, db.Watermark())
		k := mustKV(t, db, "k")
		for range 50 + rng.IntN(100) {
			op++
			var err error
			switch rng.IntN(3) {
			case 0:
				err = k.Put(ctx, fmt.Appendf(nil, "k%d", rng.IntN(50)), []byte("v"), op)
			case 1:
				err = db.Update(ctx, op, func(b *Batch) error { b.Delete(k, fmt.Appendf(nil, "k%d", rng.IntN(50))); return nil })
			default:
				err = k.Put(ctx, []byte("x"), []byte("y"), op)
				if err == nil {
					err = db.EndOp(ctx, op)
				}
			}
			if err != nil {
				t.Fatalf("cycle %d op %d: %v", cycle, op, err)
			}
			if wm := db.Watermark(); wm < seen {
				t.Fatalf("cycle %d: watermark %d went below %d", cycle, wm, seen)
			} else {
				seen = wm
			}
		}
		if cycle%2 == 0 {
			seen = max(seen, db.Watermark())
			crashed := crashCopy(t, dir)
			closeT(t, db)
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(crashed, dir); err != nil {
				t.Fatal(err)
			}
			continue
		}
		closeT(t, db)
		seen = max(seen, db.Watermark())
	}
}

// crashCopy copies the directory of an open engine as a kill -9 would leave
// it (copyDir) into a new temporary directory, trying again if pebble
// replaced a file while it was being copied.
func crashCopy(t testing.TB, dir string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		dst := filepath.Join(t.TempDir(), "crashed")
		err := copyDir(dir, dst)
		if err == nil {
			return dst
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 10 {
			t.Fatalf("copy %s: %v", dir, err)
		}
	}
}
