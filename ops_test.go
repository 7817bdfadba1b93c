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
	"slices"
	"sync"
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
			if err := db.Apply(ctx, db.NewBatch(), 4); err != nil { // an op without writes
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

// TestConcurrentWritersNeverStale (issue 20): four goroutines applying their
// own op numbers got 17-50 ErrStaleOp per run, with each op already in the
// host's log and no way to recover. With BeginOp under the host's log lock
// and ends in any order, no write is refused; the watermark never covers an
// op whose end was not called; after every op ended it covers them all.
func TestConcurrentWritersNeverStale(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: time.Millisecond})
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	const writers, opsPer = 4, 250
	var (
		logMu  sync.Mutex
		last   uint64
		ended  [writers*opsPer + 1]atomic.Bool
		errs   = make(chan error, writers+1)
		wg     sync.WaitGroup
		done   = make(chan struct{})
		checks atomic.Int64
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 20))
			for range opsPer {
				logMu.Lock() // the host appends to its log and numbers the op
				last++
				op := last
				err := db.BeginOp(ctx, op)
				logMu.Unlock()
				if err != nil {
					errs <- err
					return
				}
				key := fmt.Appendf(nil, "w%d-%d", w, op)
				if rng.IntN(3) == 0 {
					ended[op].Store(true)
					err = db.Update(ctx, op, func(bt *Batch) error {
						bt.Put(k, key, []byte("batch"))
						bt.Set(b, op, true)
						return nil
					})
				} else {
					err = k.Put(ctx, key, []byte("single"), op)
					if err == nil {
						runtime.Gosched()
						err = b.Set(ctx, op, true, op)
					}
					ended[op].Store(true)
					if err == nil {
						err = db.EndOp(ctx, op)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("op %d: %w", op, err)
					return
				}
			}
		})
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-done:
				return
			default:
			}
			wm := db.Watermark()
			for op := wm; op > 0; op-- {
				if !ended[op].Load() {
					errs <- fmt.Errorf("watermark %d covers op %d, not ended", wm, op)
					return
				}
			}
			checks.Add(1)
			if wm == writers*opsPer {
				return
			}
			runtime.Gosched()
		}
	}()
	wg.Wait()
	mustFlush(t, db)
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := db.Metrics()
	if m.Watermark != writers*opsPer || m.HighestOp != writers*opsPer || m.CompletedOp != writers*opsPer || m.OpenOps != 0 || m.ReceiptLag != 0 {
		t.Fatalf("Metrics: Watermark %d HighestOp %d CompletedOp %d OpenOps %d ReceiptLag %d, want %d, %d, %d, 0, 0",
			m.Watermark, m.HighestOp, m.CompletedOp, m.OpenOps, m.ReceiptLag, writers*opsPer, writers*opsPer, writers*opsPer)
	}
	if n, _ := b.Count(); n != writers*opsPer {
		t.Fatalf("%d bits set, want %d", n, writers*opsPer)
	}
	closeT(t, db)
	t.Logf("%d watermark checks", checks.Load())
}

// TestHighestOpAndReceiptLagEveryMode (issue 20): HighestOp and ReceiptLag
// mean the same whether the host writes ops in order, as batches, or
// begins and ends them (the workaround of writing op 0 and calling EndOp
// read 0), and survive a reopen (HighestOp read 0 after one).
func TestHighestOpAndReceiptLagEveryMode(t *testing.T) {
	modes := []struct {
		name string
		op   func(db *DB, k *KV, op uint64) error
	}{
		{"sequential", func(db *DB, k *KV, op uint64) error { return k.Put(ctx, []byte("a"), []byte("v"), op) }},
		{"batch", func(db *DB, k *KV, op uint64) error {
			return db.Update(ctx, op, func(b *Batch) error { b.Put(k, []byte("a"), []byte("v")); return nil })
		}},
		{"begin-end", func(db *DB, k *KV, op uint64) error {
			if err := db.BeginOp(ctx, op); err != nil {
				return err
			}
			if err := k.Put(ctx, []byte("a"), []byte("v"), op); err != nil {
				return err
			}
			return db.EndOp(ctx, op)
		}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openT(t, dir, &Options{FlushInterval: -1})
			k := mustKV(t, db, "k")
			for op := uint64(1); op <= 10; op++ {
				if err := mode.op(db, k, op); err != nil {
					t.Fatal(err)
				}
			}
			// Ops 1-10 durable; 11 and 12 written and not flushed.
			mustFlush(t, db)
			wm := db.Watermark()
			for op := uint64(11); op <= 12; op++ {
				if err := mode.op(db, k, op); err != nil {
					t.Fatal(err)
				}
			}
			m := db.Metrics()
			if m.HighestOp != 12 || m.ReceiptLag != 12-wm || m.Watermark != wm {
				t.Fatalf("HighestOp %d ReceiptLag %d Watermark %d; want 12, %d, %d", m.HighestOp, m.ReceiptLag, m.Watermark, 12-wm, wm)
			}
			if err := db.FlushMemtables(ctx); err != nil {
				t.Fatal(err)
			}
			crashed := crashCopy(t, dir) // ops 11-12 flushed, their receipt too
			closeT(t, db)
			for _, d := range []string{dir, crashed} {
				db := openT(t, d, nil)
				m := db.Metrics()
				if m.HighestOp != 12 || m.ReceiptLag != 12-m.Watermark {
					t.Fatalf("after reopen: HighestOp %d ReceiptLag %d Watermark %d; want 12 and 12-Watermark", m.HighestOp, m.ReceiptLag, m.Watermark)
				}
				closeT(t, db)
			}
		})
	}
}

// TestEndOpTypoRefused (issue 20): written op 7, EndOp(20) moved the
// watermark to 20, telling the host to skip replaying ops 8-20 it never
// applied. It is ErrBadOp, with nothing changed, and so is BeginOp out of
// order; an empty batch is how an op without writes is recorded.
func TestEndOpTypoRefused(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 7)
	if err := db.EndOp(ctx, 20); !errors.Is(err, ErrBadOp) {
		t.Fatalf("EndOp(20) after op 7: %v, want ErrBadOp", err)
	}
	if err := db.BeginOp(ctx, 5); !errors.Is(err, ErrBadOp) {
		t.Fatalf("BeginOp(5) after op 7: %v, want ErrBadOp", err)
	}
	if err := db.BeginOp(ctx, MaxOp+1); !errors.Is(err, ErrBadOp) {
		t.Fatalf("BeginOp(MaxOp+1): %v, want ErrBadOp", err)
	}
	if err := k.Put(ctx, []byte("b"), nil, MaxOp+1); !errors.Is(err, ErrBadOp) {
		t.Fatalf("Put of op MaxOp+1: %v, want ErrBadOp", err)
	}
	if err := db.EndOp(ctx, 7); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 7 {
		t.Fatalf("watermark %d, want 7", wm)
	}
	if m := db.Metrics(); m.HighestOp != 7 {
		t.Fatalf("HighestOp %d after refused calls, want 7", m.HighestOp)
	}
	if err := db.Apply(ctx, db.NewBatch(), 20); err != nil { // ops 8-20 without writes here
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 20 {
		t.Fatalf("watermark %d after an empty batch of op 20, want 20", wm)
	}
	closeT(t, db)
}

// TestSnapshotOp (issue 20): a snapshot exposes the op it reflects: every
// op at or below Op() is wholly in it, whatever ops are open or ended out
// of order, and Watermark() is the persisted one at that instant.
func TestSnapshotOp(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	for op := uint64(1); op <= 4; op++ {
		if err := db.BeginOp(ctx, op); err != nil {
			t.Fatal(err)
		}
		mustPut(t, k, fmt.Sprint("k", op), "v", op)
	}
	if err := db.EndOp(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db) // watermark 1
	for _, op := range []uint64{3, 2} {
		if err := db.EndOp(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Op() != 3 || s.Watermark() != 1 {
		t.Fatalf("snapshot Op %d Watermark %d, want 3 and 1", s.Op(), s.Watermark())
	}
	mustPut(t, k, "k4b", "v", 4) // after the snapshot: not in it
	sk, err := s.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	if got := scan(t, sk, nil); !slices.Equal(got, []string{"k1=v", "k2=v", "k3=v", "k4=v"}) {
		t.Fatalf("snapshot scan %v", got)
	}
}

// TestLogBeforeData (issue 20): a host that group-commits its own log
// acknowledges op n only once its log is durable, but interval and
// size-triggered flushes could persist watermark n first. With
// Options.LogBeforeData the watermark never passes the log position the
// host reported (checked by a kill -9 copy of the directory, with the
// host's log lagging behind the engine on purpose), and catches up when
// the log does.
func TestLogBeforeData(t *testing.T) {
	for _, capped := range []bool{true, false} {
		t.Run(fmt.Sprint("LogBeforeData=", capped), func(t *testing.T) {
			dir := t.TempDir()
			db := openT(t, dir, &Options{FlushInterval: time.Millisecond, LogBeforeData: capped})
			k := mustKV(t, db, "k")
			var logDurable uint64 // the host's log syncs every 50 ops, after the writes
			for op := uint64(1); op <= 200; op++ {
				if err := db.Update(ctx, op, func(b *Batch) error { b.Put(k, fmt.Appendf(nil, "%03d", op), []byte("v")); return nil }); err != nil {
					t.Fatal(err)
				}
				if op%50 == 0 {
					mustFlush(t, db) // the engine is ahead of the log here
					wm := db.Watermark()
					c := openT(t, crashCopy(t, dir), nil)
					cwm := c.Watermark()
					closeT(t, c)
					if capped && (wm > logDurable || cwm > logDurable) {
						t.Fatalf("op %d: watermark %d (after a crash %d) above the durable log position %d", op, wm, cwm, logDurable)
					}
					if !capped && wm != op {
						t.Fatalf("op %d: watermark %d without the cap, want %d", op, wm, op)
					}
					logDurable = op // the log syncs
					db.LogDurable(logDurable)
				}
			}
			mustFlush(t, db)
			if wm := db.Watermark(); wm != 200 {
				t.Fatalf("final watermark %d, want 200 (the log caught up)", wm)
			}
			closeT(t, db)
		})
	}
}

// TestCloseDoesNotCoverOpenOps (issue 20): Close's final flush persists
// every pending write, but its watermark covers no op that was begun and
// never ended (implicitly, as the last op of single calls, or by BeginOp):
// the host replays it, which the redelivery rule makes safe.
func TestCloseDoesNotCoverOpenOps(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	if err := db.Update(ctx, 1, func(b *Batch) error { b.Put(k, []byte("a"), []byte("1")); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := db.BeginOp(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mustPut(t, k, "b", "2", 2)
	mustPut(t, k, "c", "3", 3) // op 3 ends op... nothing: op 2 was begun explicitly
	if err := db.EndOp(ctx, 3); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 1 {
		t.Fatalf("watermark %d after Close with op 2 open, want 1", wm)
	}
	k = mustKV(t, db, "k")
	wantGet(t, k, "b", "2") // flushed, but not covered: replayed
	wantGet(t, k, "c", "3")
	// The host replays ops 2 and 3 from its log.
	mustPut(t, k, "b", "2", 2)
	mustPut(t, k, "c", "3", 3)
	if err := db.EndOp(ctx, 3); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 3 {
		t.Fatalf("watermark %d after the replay, want 3", wm)
	}
}
