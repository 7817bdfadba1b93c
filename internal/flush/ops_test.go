package flush

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// flushWM flushes and returns the watermark.
func flushWM(t *testing.T, f *Flusher) uint64 {
	t.Helper()
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f.Watermark()
}

// Issue 20, concurrent writers: ops begun in log order and ended in any
// order. The watermark is the contiguous prefix of ended ops; a write of an
// op begun and not ended is admitted however many later ops ended and were
// persisted (under the old claim rule it was ErrStaleOp, with the op
// already in the host's log and no way to recover).
func TestOutOfOrderCompletion(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	ctx := t.Context()
	for op := uint64(1); op <= 5; op++ {
		if err := f.BeginOp(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.Stats(); st.OpenOps != 5 || st.HighestOp != 5 || st.CompletedOp != 0 {
		t.Fatalf("OpenOps %d HighestOp %d CompletedOp %d, want 5, 5, 0", st.OpenOps, st.HighestOp, st.CompletedOp)
	}
	for _, step := range []struct {
		end    uint64
		wantWM uint64
	}{{3, 0}, {1, 1}, {5, 1}, {2, 3}, {4, 5}} {
		// Every op still open takes a write, the earliest ones included.
		for op := uint64(1); op <= 5; op++ {
			w, err := f.BeginWrite(ctx, op, false)
			switch {
			case op <= f.Watermark():
				if err != nil || !w.Skipped() {
					t.Fatalf("write of persisted op %d: %v (skipped %v)", op, err, w.Skipped())
				}
			case ft.isOpenIn(f, op):
				if err != nil {
					t.Fatalf("write of open op %d after ending op %d: %v", op, step.end, err)
				}
				ft.Put(fmt.Sprint("op", op, "-", step.end))
				w.End()
			default:
				if err == nil {
					w.End() // admitted by mistake: let Close drain it
				}
				if !errors.Is(err, kverr.ErrStaleOp) {
					t.Fatalf("write of ended op %d: %v, want kverr.ErrStaleOp", op, err)
				}
			}
		}
		if err := f.EndOp(ctx, step.end); err != nil {
			t.Fatal(err)
		}
		if wm := flushWM(t, f); wm != step.wantWM {
			t.Fatalf("after ending op %d: watermark %d, want %d", step.end, wm, step.wantWM)
		}
	}
	if st := f.Stats(); st.OpenOps != 0 || st.CompletedOp != 5 {
		t.Fatalf("OpenOps %d CompletedOp %d, want 0 and 5", st.OpenOps, st.CompletedOp)
	}
}

// refused runs a BeginWrite expected to fail and returns its error; one
// admitted by mistake is ended at once, so that a failing test does not
// leave Close waiting for it.
func refused(f *Flusher, op uint64, closes bool) error {
	w, err := f.BeginWrite(context.Background(), op, closes)
	if err == nil {
		w.End()
		if w.Skipped() {
			return errors.New("skipped")
		}
		return errors.New("admitted")
	}
	return err
}

// isOpenIn reports whether op is begun and not ended in f (for tests).
func (ft *fakeTarget) isOpenIn(f *Flusher, op uint64) bool {
	f.ops.mu.Lock()
	defer f.ops.mu.Unlock()
	_, open := f.ops.find(op)
	return open
}

// A batch (BeginWrite with closesOp) of an explicitly begun op ends it; an
// empty batch is an op without writes; a batch of an ended op is
// ErrStaleOp.
func TestBatchEndsBegunOp(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	ctx := t.Context()
	for op := uint64(1); op <= 3; op++ {
		if err := f.BeginOp(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(op uint64) error {
		w, err := f.BeginWrite(ctx, op, true)
		if err != nil {
			return err
		}
		ft.Put(fmt.Sprint("batch", op))
		w.End()
		return nil
	}
	if err := batch(2); err != nil {
		t.Fatal(err)
	}
	if err := batch(2); !errors.Is(err, kverr.ErrStaleOp) {
		t.Fatalf("second batch of op 2: %v, want kverr.ErrStaleOp", err)
	}
	if err := batch(1); err != nil {
		t.Fatal(err)
	}
	if wm := flushWM(t, f); wm != 2 {
		t.Fatalf("watermark %d, want 2 (op 3 open)", wm)
	}
	// An empty batch of a new op begins and ends it; op 3 still holds the
	// watermark back.
	w, err := f.BeginWrite(ctx, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	w.End()
	if wm := flushWM(t, f); wm != 2 {
		t.Fatalf("watermark %d, want 2", wm)
	}
	if err := f.EndOp(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if wm := flushWM(t, f); wm != 4 {
		t.Fatalf("watermark %d, want 4", wm)
	}
}

// The sequential host needs no extra call: a write of op n+1 ends op n
// (implicitly begun ops), a batch ends its op, and numbers it skips are
// complete. Mixed with an explicit op, the explicit one holds the
// watermark back until it ends.
func TestSequentialHostNeedsNoCalls(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	ctx := t.Context()
	for _, op := range []uint64{1, 1, 2, 5, 5} {
		if err := put(ctx, f, ft, fmt.Sprint("k", op), op); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(ctx, f, ft, "late", 3); !errors.Is(err, kverr.ErrStaleOp) {
		t.Fatalf("write of skipped op 3 after op 5 began: %v, want kverr.ErrStaleOp", err)
	}
	if err := put(ctx, f, ft, "late", 2); !errors.Is(err, kverr.ErrStaleOp) {
		t.Fatalf("write of op 2 after op 5 began: %v, want kverr.ErrStaleOp", err)
	}
	if wm := flushWM(t, f); wm != 4 {
		t.Fatalf("watermark %d, want 4 (op 5 may get more writes; 3 and 4 were skipped)", wm)
	}
	if err := f.BeginOp(ctx, 6); err != nil { // ends op 5 (implicit)
		t.Fatal(err)
	}
	if err := put(ctx, f, ft, "k7", 7); err != nil { // op 6 stays open
		t.Fatal(err)
	}
	if err := put(ctx, f, ft, "k8", 8); err != nil { // ends op 7
		t.Fatal(err)
	}
	if wm := flushWM(t, f); wm != 5 {
		t.Fatalf("watermark %d, want 5 (op 6 open)", wm)
	}
	if err := put(ctx, f, ft, "k6", 6); err != nil {
		t.Fatalf("write of open op 6 below later ops: %v", err)
	}
	if err := f.EndOp(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if wm := flushWM(t, f); wm != 7 {
		t.Fatalf("watermark %d, want 7 (op 8 open)", wm)
	}
	if err := f.EndOp(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if err := f.EndOp(ctx, 8); err != nil { // ending an ended op: a no-op
		t.Fatal(err)
	}
	if err := f.EndOp(ctx, 4); err != nil { // a skipped op is complete: a no-op
		t.Fatal(err)
	}
	if wm := flushWM(t, f); wm != 8 {
		t.Fatalf("watermark %d, want 8", wm)
	}
}

// Issue 20: EndOp(n) above any op seen moved the watermark to n (written op
// 7, EndOp(20): watermark 20), telling the host to skip ops it never
// applied. Refused with ErrBadOp, as are BeginOp out of order and op
// numbers above MaxOp; nothing changes.
func TestBadOpsRefused(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	ctx := t.Context()
	if err := put(ctx, f, ft, "a", 7); err != nil {
		t.Fatal(err)
	}
	if err := f.EndOp(ctx, 20); !errors.Is(err, kverr.ErrBadOp) {
		t.Fatalf("EndOp(20) after writing op 7: %v, want kverr.ErrBadOp", err)
	}
	if err := f.BeginOp(ctx, 7); !errors.Is(err, kverr.ErrBadOp) {
		t.Fatalf("BeginOp(7) after op 7 began: %v, want kverr.ErrBadOp", err)
	}
	if err := f.BeginOp(ctx, 3); !errors.Is(err, kverr.ErrBadOp) {
		t.Fatalf("BeginOp(3) after op 7 began: %v, want kverr.ErrBadOp", err)
	}
	for _, op := range []uint64{MaxOp + 1, 1 << 63, ^uint64(0)} {
		if err := refused(f, op, false); !errors.Is(err, kverr.ErrBadOp) {
			t.Fatalf("write of op %d: %v, want kverr.ErrBadOp", op, err)
		}
		if err := refused(f, op, true); !errors.Is(err, kverr.ErrBadOp) {
			t.Fatalf("batch of op %d: %v, want kverr.ErrBadOp", op, err)
		}
		if err := f.BeginOp(ctx, op); !errors.Is(err, kverr.ErrBadOp) {
			t.Fatalf("BeginOp(%d): %v, want kverr.ErrBadOp", op, err)
		}
		if err := f.EndOp(ctx, op); !errors.Is(err, kverr.ErrBadOp) {
			t.Fatalf("EndOp(%d): %v, want kverr.ErrBadOp", op, err)
		}
	}
	if wm := flushWM(t, f); wm != 6 {
		t.Fatalf("watermark %d, want 6", wm)
	}
	if st := f.Stats(); st.HighestOp != 7 || st.OpenOps != 1 || st.Active != 0 {
		t.Fatalf("HighestOp %d OpenOps %d Active %d, want 7, 1, 0", st.HighestOp, st.OpenOps, st.Active)
	}
	// MaxOp itself is fine.
	if err := f.BeginOp(ctx, MaxOp); err != nil {
		t.Fatal(err)
	}
	if err := f.EndOp(ctx, MaxOp); err != nil {
		t.Fatal(err)
	}
	if err := f.EndOp(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if wm := flushWM(t, f); wm != MaxOp {
		t.Fatalf("watermark %d, want MaxOp", wm)
	}
}

// HighestOp counts every op seen (written, batched, begun, ended) and
// starts from Options.HighestOp and Options.Watermark, so it means the same
// after a reopen; CompletedOp and OpenOps follow the ops.
func TestHighestOpEveryMode(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, Watermark: 10, HighestOp: 14})
	defer closeOK(t, f)
	ctx := t.Context()
	st := f.Stats()
	if st.HighestOp != 14 || st.CompletedOp != 10 || st.OpenOps != 0 {
		t.Fatalf("at open: HighestOp %d CompletedOp %d OpenOps %d, want 14, 10, 0", st.HighestOp, st.CompletedOp, st.OpenOps)
	}
	// The host replays ops 11-14: its replay is not refused.
	for op := uint64(11); op <= 14; op++ {
		if err := put(ctx, f, ft, fmt.Sprint("r", op), op); err != nil {
			t.Fatalf("replay of op %d: %v", op, err)
		}
	}
	if err := f.BeginOp(ctx, 20); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.HighestOp != 20 || st.CompletedOp != 19 || st.OpenOps != 1 {
		t.Fatalf("after BeginOp(20): HighestOp %d CompletedOp %d OpenOps %d, want 20, 19, 1", st.HighestOp, st.CompletedOp, st.OpenOps)
	}
	w, err := f.BeginWrite(ctx, 21, true)
	if err != nil {
		t.Fatal(err)
	}
	w.End()
	if st := f.Stats(); st.HighestOp != 21 || st.CompletedOp != 19 {
		t.Fatalf("after a batch of op 21: HighestOp %d CompletedOp %d, want 21, 19", st.HighestOp, st.CompletedOp)
	}
}

// Issue 20, log before data: with LogBeforeData no generation persists a
// watermark above the host's durable log position, whatever is complete;
// LogDurable lets it catch up. Without the option LogDurable changes
// nothing.
func TestLogBeforeDataCap(t *testing.T) {
	for _, capped := range []bool{true, false} {
		t.Run(fmt.Sprint("LogBeforeData=", capped), func(t *testing.T) {
			ft := newFake(t)
			f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, Watermark: 2, LogBeforeData: capped})
			defer closeOK(t, f)
			ctx := t.Context()
			batch := func(op uint64) {
				w, err := f.BeginWrite(ctx, op, true)
				if err != nil {
					t.Fatal(err)
				}
				ft.Put(fmt.Sprint("op", op))
				w.End()
			}
			for op := uint64(3); op <= 8; op++ {
				batch(op)
			}
			want := func(capWM, free uint64) uint64 {
				if capped {
					return capWM
				}
				return free
			}
			if wm := flushWM(t, f); wm != want(2, 8) {
				t.Fatalf("watermark %d with the log durable to 2, want %d", wm, want(2, 8))
			}
			f.LogDurable(5)
			if wm := flushWM(t, f); wm != want(5, 8) {
				t.Fatalf("watermark %d with the log durable to 5, want %d", wm, want(5, 8))
			}
			f.LogDurable(4) // lower: ignored
			f.LogDurable(100)
			if wm := flushWM(t, f); wm != 8 {
				t.Fatalf("watermark %d with the log durable to 100, want 8 (what is complete)", wm)
			}
			if st := f.Stats(); st.CompletedOp != 8 {
				t.Fatalf("CompletedOp %d, want 8", st.CompletedOp)
			}
		})
	}
}

// Concurrent writers as a database has them: each takes the host's log
// lock, numbers its op and begins it, then writes (several calls, or a
// batch) and ends it outside the lock, so ops end in any order; a flusher
// runs in a tight loop and checks every watermark against the ops whose
// end has been called; a log syncer reports the durable log position
// behind the writers. No write is ever refused, no watermark covers an op
// whose EndOp was not called or above the durable log, and at the end the
// watermark covers every op.
func TestConcurrentWritersOutOfOrder(t *testing.T) {
	const writers, opsPer = 8, 300
	ft := newFake(t)
	f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, LogBeforeData: true})
	ctx := t.Context()
	var (
		logMu   sync.Mutex
		lastOp  uint64
		ended   [writers*opsPer + 1]atomic.Bool
		logged  atomic.Uint64 // durable log position, reported after the fact
		wg      sync.WaitGroup
		stop    atomic.Bool
		failure atomic.Pointer[error]
	)
	fail := func(err error) { failure.CompareAndSwap(nil, &err) }
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range opsPer {
				logMu.Lock()
				lastOp++
				op := lastOp
				err := f.BeginOp(ctx, op)
				logMu.Unlock()
				if err != nil {
					fail(fmt.Errorf("BeginOp(%d): %w", op, err))
					return
				}
				closes := rng.IntN(3) == 0
				for i := range 1 + rng.IntN(3) {
					tk, err := f.BeginWrite(ctx, op, closes)
					if err != nil {
						fail(fmt.Errorf("write %d of op %d: %w", i, op, err))
						return
					}
					ft.Put(fmt.Sprint(op, "/", i))
					if closes {
						ended[op].Store(true) // a batch ends its op as it is admitted
					}
					tk.End()
					if closes {
						break
					}
					if rng.IntN(2) == 0 {
						runtime.Gosched()
					}
				}
				if !closes {
					ended[op].Store(true) // before EndOp: a freeze may claim it as soon as it is called
					if err := f.EndOp(ctx, op); err != nil {
						fail(fmt.Errorf("EndOp(%d): %w", op, err))
						return
					}
				}
			}
		})
	}
	var aux sync.WaitGroup
	aux.Go(func() { // the host's log syncer
		for !stop.Load() {
			logMu.Lock()
			n := lastOp
			logMu.Unlock()
			runtime.Gosched()
			logged.Store(n)
			f.LogDurable(n)
		}
	})
	aux.Go(func() { // the flusher, checking every watermark
		for !stop.Load() {
			if err := f.Flush(ctx); err != nil {
				fail(err)
				return
			}
			wm := f.Watermark()
			if l := logged.Load(); wm > l {
				fail(fmt.Errorf("watermark %d above the durable log position %d", wm, l))
				return
			}
			for op := wm; op > 0; op-- {
				if !ended[op].Load() {
					fail(fmt.Errorf("watermark %d covers op %d, whose EndOp was not called", wm, op))
					return
				}
			}
		}
	})
	wg.Wait()
	stop.Store(true)
	aux.Wait()
	if err := failure.Load(); err != nil {
		t.Fatal(*err)
	}
	f.LogDurable(writers * opsPer)
	if wm := flushWM(t, f); wm != writers*opsPer {
		t.Fatalf("final watermark %d, want %d", wm, writers*opsPer)
	}
	if st := f.Stats(); st.OpenOps != 0 || st.HighestOp != writers*opsPer {
		t.Fatalf("OpenOps %d HighestOp %d", st.OpenOps, st.HighestOp)
	}
	closeOK(t, f)
}

// A redelivered BeginOp is skipped like a write, and so are the writes and
// EndOp that follow it.
func TestRedeliveredBeginOp(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, Watermark: 9})
	defer closeOK(t, f)
	ctx := t.Context()
	if err := f.BeginOp(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if w, err := f.BeginWrite(ctx, 9, false); err != nil || !w.Skipped() {
		t.Fatalf("write of op 9: %v (skipped %v)", err, w.Skipped())
	}
	if err := f.EndOp(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Redelivered != 3 || st.OpenOps != 0 || st.HighestOp != 9 {
		t.Fatalf("Redelivered %d OpenOps %d HighestOp %d, want 3, 0, 9", st.Redelivered, st.OpenOps, st.HighestOp)
	}
	if err := f.BeginOp(ctx, 10); err != nil {
		t.Fatalf("BeginOp(10) after the redelivered op 9: %v", err)
	}
	if err := f.BeginOp(ctx, 0); err != nil { // untracked
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.BeginOp(cancelled, 11); !errors.Is(err, context.Canceled) {
		t.Fatalf("BeginOp with a cancelled context: %v", err)
	}
	if st := f.Stats(); st.HighestOp != 10 {
		t.Fatalf("HighestOp %d after a refused BeginOp, want 10", st.HighestOp)
	}
}

// BenchmarkOpTracking is the cost the op tracker adds to a write (W8's
// writes carry ops): BeginWrite and End of a tracked write against an
// untracked one (op 0), for the sequential host (single calls, 4 per op),
// batches, and concurrent writers that begin under a lock and end in any
// order. No flush runs (the Target is a no-op).
func BenchmarkOpTracking(b *testing.B) {
	ctx := context.Background()
	newF := func(b *testing.B) *Flusher {
		f := mustNew(newFake(b), manual)
		b.Cleanup(func() { f.Close() })
		return f
	}
	b.Run("untracked", func(b *testing.B) {
		f := newF(b)
		b.ReportAllocs()
		for b.Loop() {
			w, _ := f.BeginWrite(ctx, 0, false)
			w.End()
		}
	})
	b.Run("sequential-4-calls-per-op", func(b *testing.B) {
		f := newF(b)
		b.ReportAllocs()
		var i uint64
		for b.Loop() {
			i++
			w, err := f.BeginWrite(ctx, i/4+1, false)
			if err != nil {
				b.Fatal(err)
			}
			w.End()
		}
	})
	b.Run("batch", func(b *testing.B) {
		f := newF(b)
		b.ReportAllocs()
		var op uint64
		for b.Loop() {
			op++
			w, err := f.BeginWrite(ctx, op, true)
			if err != nil {
				b.Fatal(err)
			}
			w.End()
		}
	})
	b.Run("begin-write-end-8-goroutines", func(b *testing.B) {
		f := newF(b)
		b.ReportAllocs()
		var mu sync.Mutex
		var last uint64
		b.SetParallelism(4) // 8 goroutines on 2 Ps
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				last++
				op := last
				err := f.BeginOp(ctx, op)
				mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
				w, err := f.BeginWrite(ctx, op, false)
				if err != nil {
					b.Fatal(err)
				}
				w.End()
				if err := f.EndOp(ctx, op); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
