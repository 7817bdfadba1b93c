package flush

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

var errInjected = errors.New("injected I/O error")

// eager makes f freeze and write while a generation with Flush callers
// syncs, instead of holding new callers for the sibling wait: the pipeline
// then overlaps callers' generations, which these tests need.
func eager(f *Flusher) *Flusher {
	f.mu.Lock()
	f.eager = true
	f.mu.Unlock()
	return f
}

// manual disables the background triggers and the sibling wait so tests
// control every flush.
var manual = &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1}

func closeOK(t *testing.T, f *Flusher) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// flushAsync starts a Flush and returns its result channel.
func flushAsync(ctx context.Context, f *Flusher) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f.Flush(ctx) }()
	return ch
}

func pending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned %v too early", what, err)
	default:
	}
}

// opSeq hands out op numbers the way a host does: op n is admitted before
// op n+1 (each op has one write here), so no write is ever stale.
type opSeq struct {
	mu   sync.Mutex
	last uint64
}

func (s *opSeq) put(ctx context.Context, f *Flusher, ft *fakeTarget, key string) (uint64, error) {
	s.mu.Lock()
	op := s.last + 1
	w, err := f.BeginWrite(ctx, op, false)
	if err == nil {
		s.last = op
	}
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	ft.Put(key)
	w.End()
	return op, nil
}

// Contract 2, at 64 goroutines: when Flush returns nil, the caller's earlier
// write is in a released generation. Runs with the default sibling wait.
func TestFlushCoverage(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1})
	defer closeOK(t, f)
	var ops opSeq
	var wg sync.WaitGroup
	const G, N = 64, 20
	for g := range G {
		wg.Go(func() {
			for i := range N {
				key := fmt.Sprintf("g%d-%d", g, i)
				if _, err := ops.put(t.Context(), f, ft, key); err != nil {
					t.Error(err)
					return
				}
				if err := f.Flush(t.Context()); err != nil {
					t.Error(err)
					return
				}
				if !ft.isDurable(key) {
					t.Errorf("Flush returned nil but %s is not in a released generation", key)
					return
				}
			}
		})
	}
	wg.Wait()
	st := f.Stats()
	if st.Flushes != G*N {
		t.Fatalf("Stats.Flushes = %d, want %d", st.Flushes, G*N)
	}
	if st.Generations >= G*N/2 {
		t.Errorf("%d generations for %d flushes at 64 goroutines: no group commit", st.Generations, G*N)
	}
	// Every op below the highest is complete: the claim reaches hi-1.
	if want := ops.last - 1; st.Watermark != want || st.ClaimedOp != want || st.HighestOp != ops.last {
		t.Fatalf("watermark %d claimed %d highest %d, want %d %d %d", st.Watermark, st.ClaimedOp, st.HighestOp, want, want, ops.last)
	}
	if st.InFlight != 0 || st.MaxInFlight < 1 || st.MaxInFlight > DefaultPipelineDepth {
		t.Fatalf("InFlight %d MaxInFlight %d", st.InFlight, st.MaxInFlight)
	}
	t.Logf("%d flushes, %d generations, %d coalesced, max in flight %d, p50 %v p99 %v",
		st.Flushes, st.Generations, st.Coalesced, st.MaxInFlight, st.Latency.Quantile(0.5), st.Latency.Quantile(0.99))
}

// Generation N+1 is frozen and written while N's wait is running: by
// default when N is a background generation (no caller), and in eager mode
// for callers' generations too.
func TestPipelineOverlaps(t *testing.T) {
	for _, mode := range []string{"background", "eager"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ft := newFake(t)
				waits := newBlocker()
				ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
				f := mustNew(ft, &Options{Interval: time.Second, MaxPendingBytes: -1, GroupWait: -1})
				if mode == "eager" {
					eager(f)
				}
				defer closeOK(t, f)
				put(t.Context(), f, ft, "a", 1)
				var first <-chan error
				if mode == "eager" {
					first = flushAsync(t.Context(), f)
				} else {
					time.Sleep(time.Second) // the interval flush
				}
				synctest.Wait() // generation 1 written, its wait blocks
				put(t.Context(), f, ft, "b", 2)
				second := flushAsync(t.Context(), f)
				synctest.Wait()
				want := []string{"freeze 1", "write 1", "wait 1", "freeze 2", "write 2"}
				if got := ft.log(); !slices.Equal(got, want) {
					t.Fatalf("events %v, want %v (generation 2 written while 1 waits)", got, want)
				}
				if st := f.Stats(); st.InFlight != 2 {
					t.Fatalf("InFlight = %d, want 2", st.InFlight)
				}
				if first != nil {
					pending(t, first, "first Flush")
				}
				pending(t, second, "second Flush")
				waits.open(1)
				if first != nil {
					if err := <-first; err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				pending(t, second, "second Flush") // generation 2 still waits
				if !ft.isDurable("a") || ft.isDurable("b") {
					t.Fatal("a should be released and b not")
				}
				waits.open(2)
				if err := <-second; err != nil {
					t.Fatal(err)
				}
				want = append(want, "release 1", "wait 2", "release 2")
				if got := ft.log(); !slices.Equal(got, want) {
					t.Fatalf("events %v, want %v", got, want)
				}
			})
		})
	}
}

// At most PipelineDepth generations are frozen and not released; further
// callers accumulate in the open generation.
func TestPipelineDepth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
		f := eager(mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, PipelineDepth: 2}))
		defer closeOK(t, f)
		var results []<-chan error
		for i := range 5 {
			put(t.Context(), f, ft, fmt.Sprint(i), uint64(i+1))
			results = append(results, flushAsync(t.Context(), f))
			synctest.Wait()
		}
		if n := ft.numFrozen(); n != 2 {
			t.Fatalf("%d generations frozen with depth 2", n)
		}
		if st := f.Stats(); st.InFlight != 2 || st.MaxInFlight != 2 {
			t.Fatalf("InFlight %d MaxInFlight %d, want 2 2", st.InFlight, st.MaxInFlight)
		}
		waits.open(1)
		synctest.Wait()
		// A slot opened: the three waiting callers share generation 3.
		if n := ft.numFrozen(); n != 3 {
			t.Fatalf("%d generations frozen after one release, want 3", n)
		}
		if keys := ft.keysOf(3); !slices.Equal(keys, []string{"2", "3", "4"}) {
			t.Fatalf("generation 3 holds %v", keys)
		}
		waits.open(2)
		waits.open(3)
		for _, r := range results {
			if err := <-r; err != nil {
				t.Fatal(err)
			}
		}
		if st := f.Stats(); st.MaxInFlight != 2 || st.Coalesced != 2 {
			t.Fatalf("MaxInFlight %d Coalesced %d", st.MaxInFlight, st.Coalesced)
		}
	})
}

// Writes, waits and releases run in generation order whatever the wait
// times, and each generation is released only after its wait.
func TestPipelineOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		ft.onWait = func(g uint64, _ int) error {
			time.Sleep(time.Duration(7-g%7) * time.Millisecond)
			return nil
		}
		f := eager(mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, PipelineDepth: 3}))
		defer closeOK(t, f)
		var wg sync.WaitGroup
		for i := range 30 {
			put(t.Context(), f, ft, fmt.Sprint(i), uint64(i+1))
			wg.Go(func() {
				if err := f.Flush(t.Context()); err != nil {
					t.Error(err)
				}
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		next := map[string]uint64{"write": 1, "wait": 1, "release": 1}
		waited := map[uint64]bool{}
		for _, e := range ft.log() {
			var kind string
			var g uint64
			fmt.Sscanf(e, "%s %d", &kind, &g)
			if kind == "freeze" {
				continue
			}
			if g != next[kind] {
				t.Fatalf("%s out of order (want %s %d): %v", e, kind, next[kind], ft.log())
			}
			next[kind]++
			if kind == "wait" {
				waited[g] = true
			}
			if kind == "release" && !waited[g] {
				t.Fatalf("release %d before its wait", g)
			}
		}
		if next["release"] < 2 || next["release"] != next["write"] {
			t.Fatalf("releases %d writes %d", next["release"]-1, next["write"]-1)
		}
	})
}

// A wait failure of N with N+1 already written fails both callers; the
// retry writes N then N+1 in order before anything new, then everything is
// durable.
func TestWaitFailureFailsLaterGenerations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, attempt int) error {
			if attempt == 1 && g <= 2 {
				waits.block(g)
				if g == 1 {
					return errInjected
				}
			}
			return nil
		}
		f := eager(mustNew(ft, manual))
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 1)
		first := flushAsync(t.Context(), f)
		synctest.Wait()
		put(t.Context(), f, ft, "b", 2)
		second := flushAsync(t.Context(), f)
		synctest.Wait()
		waits.open(1) // generation 1's wait fails while 2 waits
		if err := <-first; !errors.Is(err, errInjected) {
			t.Fatalf("first Flush = %v, want the injected error", err)
		}
		if err := <-second; !errors.Is(err, errInjected) {
			t.Fatalf("second Flush = %v, want the injected error (its generation is behind a failed one)", err)
		}
		if !strings.Contains(fmt.Sprint(f.Stats().LastErr), "generation 1 wait") {
			t.Fatalf("LastErr %v does not name the stage", f.Stats().LastErr)
		}
		if f.Watermark() != 0 || ft.isDurable("a") || ft.isDurable("b") {
			t.Fatal("something was released after a failure")
		}
		put(t.Context(), f, ft, "c", 3)
		// The stale wait of generation 2 is still running: the retry waits
		// for it, even for an explicit Flush.
		third := flushAsync(t.Context(), f)
		synctest.Wait()
		pending(t, third, "Flush with a stale wait in flight")
		waits.open(2)
		if err := <-third; err != nil {
			t.Fatal(err)
		}
		// The retry writes 1 then 2 before anything new is frozen.
		var writes []string
		for _, e := range ft.log() {
			if !strings.HasPrefix(e, "wait") && !strings.HasPrefix(e, "release") {
				writes = append(writes, e)
			}
		}
		want := []string{"freeze 1", "write 1", "freeze 2", "write 2", "write 1", "write 2", "freeze 3", "write 3"}
		if !slices.Equal(writes, want) {
			t.Fatalf("events %v, want %v", ft.log(), want)
		}
		for _, k := range []string{"a", "b", "c"} {
			if !ft.isDurable(k) {
				t.Fatalf("%s lost", k)
			}
		}
		if f.Watermark() != 2 {
			t.Fatalf("watermark %d, want 2", f.Watermark())
		}
		if st := f.Stats(); st.Failures != 1 || st.Generations != 3 || st.Writes != 5 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

// The same in the default mode: a background generation N fails in its wait
// while a caller's generation N+1 is already written behind it. The caller
// gets the error, and the next Flush writes N then N+1 again.
func TestBackgroundFailureFailsCallerBehindIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, attempt int) error {
			if g == 1 && attempt == 1 {
				waits.block(1)
				return errInjected
			}
			return nil
		}
		f := mustNew(ft, &Options{Interval: time.Second, MaxPendingBytes: -1, RetryMin: time.Hour})
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 1)
		time.Sleep(time.Second) // the interval freezes generation 1
		synctest.Wait()
		put(t.Context(), f, ft, "b", 2)
		caller := flushAsync(t.Context(), f)
		synctest.Wait()
		if got := ft.log(); !slices.Equal(got, []string{"freeze 1", "write 1", "wait 1", "freeze 2", "write 2"}) {
			t.Fatalf("events %v", got)
		}
		waits.open(1)
		if err := <-caller; !errors.Is(err, errInjected) {
			t.Fatalf("caller behind a failed generation got %v", err)
		}
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !ft.isDurable("a") || !ft.isDurable("b") || f.Watermark() != 1 {
			t.Fatalf("after the retry: a %v b %v wm %d", ft.isDurable("a"), ft.isDurable("b"), f.Watermark())
		}
		if writes := ft.log(); !slices.Contains(writes, "release 2") {
			t.Fatalf("events %v", writes)
		}
	})
}

// A Write failure of N+1 while N waits: N's caller gets nil, N+1's the
// error, and a later frozen generation behind it the error too.
func TestWriteFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, attempt int) error {
			if g == 1 {
				waits.block(g)
			}
			return nil
		}
		ft.onWrite = func(g uint64, attempt int) error {
			if g == 2 && attempt == 1 {
				return errInjected
			}
			return nil
		}
		f := eager(mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, RetryMin: time.Hour}))
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 1)
		first := flushAsync(t.Context(), f)
		synctest.Wait()
		put(t.Context(), f, ft, "b", 2)
		if err := f.Flush(t.Context()); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "generation 2 write") {
			t.Fatalf("second Flush = %v", err)
		}
		pending(t, first, "first Flush")
		waits.open(1)
		if err := <-first; err != nil {
			t.Fatalf("first Flush = %v: generation 1 did not fail", err)
		}
		if f.Watermark() != 0 { // generation 1 claims op 0: op 1 may still write
			t.Fatalf("watermark %d, want 0", f.Watermark())
		}
		// The background retry waits for the (hour-long) backoff; an
		// explicit Flush retries at once.
		time.Sleep(time.Minute)
		synctest.Wait()
		if ft.isDurable("b") {
			t.Fatal("retried before the backoff")
		}
		start := time.Now()
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) != 0 || !ft.isDurable("b") || f.Watermark() != 1 {
			t.Fatalf("explicit retry: waited %v, durable %v, wm %d", time.Since(start), ft.isDurable("b"), f.Watermark())
		}
	})
}

// A panic or runtime.Goexit in any stage becomes a *PanicError for the
// generation's callers; the barrier is not left locked, the flusher keeps
// working and nothing is lost.
func TestPanicsInEveryStage(t *testing.T) {
	errValue := errors.New("panic value error")
	kinds := []struct {
		name  string
		do    func()
		check func(t *testing.T, pe *PanicError, err error)
	}{
		{"string", func() { panic("boom") }, func(t *testing.T, pe *PanicError, _ error) {
			if pe.Value != "boom" || pe.Goexit || len(pe.Stack) == 0 {
				t.Fatalf("PanicError = %+v", pe)
			}
		}},
		{"error", func() { panic(errValue) }, func(t *testing.T, _ *PanicError, err error) {
			if !errors.Is(err, errValue) {
				t.Fatalf("errors.Is(err, panic value) = false: %v", err)
			}
		}},
		{"goexit", func() { runtime.Goexit() }, func(t *testing.T, pe *PanicError, _ error) {
			if !pe.Goexit {
				t.Fatalf("Goexit not reported: %+v", pe)
			}
		}},
	}
	for _, stage := range []string{"freeze", "write", "wait", "release"} {
		for _, kind := range kinds {
			t.Run(stage+"/"+kind.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ft := newFake(t)
					var fired atomic.Bool
					fire := func(g uint64) {
						if g == 2 && fired.CompareAndSwap(false, true) {
							kind.do()
						}
					}
					switch stage {
					case "freeze":
						ft.onFreeze = fire
					case "write":
						ft.onWrite = func(g uint64, _ int) error { fire(g); return nil }
					case "wait":
						ft.onWait = func(g uint64, _ int) error { fire(g); return nil }
					case "release":
						ft.onRelease = fire
					}
					// Generation 1's wait blocks (depth 1), so five callers
					// join generation 2, whose stage then fails.
					first := newBlocker()
					onWait := ft.onWait
					ft.onWait = func(g uint64, attempt int) error {
						if g == 1 {
							first.block(1)
						}
						if onWait != nil {
							return onWait(g, attempt)
						}
						return nil
					}
					f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, PipelineDepth: 1})
					defer closeOK(t, f)
					put(t.Context(), f, ft, "a", 1)
					r1 := flushAsync(t.Context(), f)
					synctest.Wait()
					put(t.Context(), f, ft, "b", 2)
					const n = 5
					errs := make(chan error, n)
					for range n {
						go func() { errs <- f.Flush(t.Context()) }()
					}
					synctest.Wait()
					first.open(1)
					if err := <-r1; err != nil {
						t.Fatalf("first flush: %v", err)
					}
					for range n {
						err := <-errs
						var pe *PanicError
						if !errors.Is(err, kverr.ErrPanicked) || !errors.As(err, &pe) {
							t.Fatalf("Flush = %v, want a *PanicError", err)
						}
						if !strings.Contains(err.Error(), stage) {
							t.Fatalf("error %q does not name the stage %s", err, stage)
						}
						kind.check(t, pe, err)
					}
					if st := f.Stats(); st.Failures != 1 {
						t.Fatalf("Stats = %+v, want 1 failure", st)
					}
					// The barrier was released and the flusher goes on.
					put(t.Context(), f, ft, "c", 3)
					if err := f.Flush(t.Context()); err != nil {
						t.Fatalf("Flush after the panic: %v", err)
					}
					for _, k := range []string{"a", "b", "c"} {
						if !ft.isDurable(k) {
							t.Fatalf("%s lost after a panic in %s", k, stage)
						}
					}
					if f.Watermark() != 2 {
						t.Fatalf("watermark %d, want 2", f.Watermark())
					}
				})
			})
		}
	}
}

// The claim rule and ErrStaleOp, including the repro: Put op 1;
// Flush; Set op 1: the flush must not claim op 1 (the second write would
// not be covered); a later op 2 write lets the next flush claim 1.
func TestClaimRuleAndStaleOp(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	ctx := t.Context()
	if err := put(ctx, f, ft, "put-1", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 0 || f.Stats().ClaimedOp != 0 {
		t.Fatalf("op 1 claimed while it may still write: wm %d", f.Watermark())
	}
	if err := put(ctx, f, ft, "set-1", 1); err != nil {
		t.Fatalf("second write of op 1 refused: %v", err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 0 {
		t.Fatalf("watermark %d, want 0", f.Watermark())
	}
	if err := put(ctx, f, ft, "put-2", 2); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 1 || ft.wmOf(ft.numFrozen()) != 1 {
		t.Fatalf("watermark %d, want 1", f.Watermark())
	}
	if w, err := f.BeginWrite(ctx, 1, false); err != nil || !w.Skipped() {
		t.Fatalf("write of persisted op 1 = %v (skipped %v), want a skipped ticket", err, w.Skipped())
	}
	// A batch closes its op: the next flush claims it.
	w, err := f.BeginWrite(ctx, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	ft.Put("batch-3")
	w.End()
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 3 {
		t.Fatalf("watermark %d after a closing batch, want 3", f.Watermark())
	}
	for _, op := range []uint64{2, 3} {
		if w, err := f.BeginWrite(ctx, op, false); err != nil || !w.Skipped() {
			t.Fatalf("write of persisted op %d = %v (skipped %v), want a skipped ticket", op, err, w.Skipped())
		}
	}
	// Untracked writes are always admitted.
	if err := put(ctx, f, ft, "untracked", 0); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Active != 0 {
		t.Fatalf("refused writes left %d operations in the gate", st.Active)
	}
}

// EndOp ends an op without a write; an op never begun cannot be ended
// (ErrBadOp); a flush with nothing pending but a higher claim (an op begun
// and ended without writes) freezes a watermark-only generation.
func TestEndOpAndWatermarkOnlyGeneration(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	ctx := t.Context()
	put(ctx, f, ft, "a", 7)
	if err := f.EndOp(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Watermark() != 7 {
		t.Fatalf("watermark %d, want 7", f.Watermark())
	}
	if w, err := f.BeginWrite(ctx, 7, false); err != nil || !w.Skipped() {
		t.Fatalf("write of persisted op 7 = %v (skipped %v)", err, w.Skipped())
	}
	if err := f.EndOp(ctx, 5); err != nil { // already claimed: a no-op
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ft.numFrozen(); n != 1 {
		t.Fatalf("%d generations, want 1 (nothing to claim)", n)
	}
	if err := f.EndOp(ctx, 9); !errors.Is(err, kverr.ErrBadOp) {
		t.Fatalf("EndOp of an op never begun: %v, want kverr.ErrBadOp", err)
	}
	if err := f.BeginOp(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if err := f.EndOp(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ft.numFrozen(); n != 2 || len(ft.keysOf(2)) != 0 || ft.wmOf(2) != 9 || f.Watermark() != 9 {
		t.Fatalf("generation %d keys %v wm %d, Watermark %d: want an empty generation 2 with wm 9",
			n, ft.keysOf(2), ft.wmOf(2), f.Watermark())
	}
	if err := f.EndOp(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// Options.Watermark is the starting claim: lower ops are refused and no
// generation carries a lower watermark.
func TestInitialWatermark(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, Watermark: 100})
	defer closeOK(t, f)
	if f.Watermark() != 100 {
		t.Fatalf("Watermark %d", f.Watermark())
	}
	if w, err := f.BeginWrite(t.Context(), 5, false); err != nil || !w.Skipped() {
		t.Fatalf("write of op 5 under watermark 100 = %v (skipped %v)", err, w.Skipped())
	}
	put(t.Context(), f, ft, "b", 0)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ft.wmOf(1) != 100 || f.Watermark() != 100 {
		t.Fatalf("persisted %d / Watermark %d, want 100", ft.wmOf(1), f.Watermark())
	}
}

func TestEmptyFlushIsSkipped(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	for range 3 {
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := ft.numFrozen(); n != 0 {
		t.Fatalf("%d generations with nothing pending", n)
	}
	put(t.Context(), f, ft, "a", 1)
	f.Flush(t.Context())
	f.Flush(t.Context())
	if n := ft.numFrozen(); n != 1 {
		t.Fatalf("%d generations, want 1", n)
	}
	if st := f.Stats(); st.Generations != 1 || st.Flushes != 5 {
		t.Fatalf("Stats = %+v", st)
	}
}

// A caller that arrives while a generation is in flight, with no new write,
// waits for that generation (not for nothing, not for a new one).
func TestFlushWithNothingNewWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
		f := mustNew(ft, manual)
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 0)
		first := flushAsync(t.Context(), f)
		synctest.Wait()
		second := flushAsync(t.Context(), f)
		synctest.Wait()
		pending(t, second, "Flush behind an unreleased generation")
		waits.open(1)
		for _, ch := range []<-chan error{first, second} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		if n := ft.numFrozen(); n != 1 {
			t.Fatalf("%d generations, want 1", n)
		}
	})
}

// A caller that arrives while a generation is written waits for the next.
func TestFlushJoinerWaitsForNextGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		writes := newBlocker()
		ft.onWrite = func(g uint64, _ int) error {
			if g == 1 {
				writes.block(1)
			}
			return nil
		}
		f := mustNew(ft, manual)
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 1)
		first := flushAsync(t.Context(), f)
		synctest.Wait() // generation 1 frozen, Write blocks
		put(t.Context(), f, ft, "b", 2)
		second := flushAsync(t.Context(), f)
		synctest.Wait()
		pending(t, second, "second Flush")
		writes.open(1)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if !ft.isDurable("b") || !slices.Equal(ft.keysOf(2), []string{"b"}) {
			t.Fatal("b not in generation 2")
		}
	})
}

func TestFlushCancelledCallerReturnsPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
		f := mustNew(ft, manual)
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 1)
		ctx, cancel := context.WithCancel(t.Context())
		cancelled := flushAsync(ctx, f)
		other := flushAsync(t.Context(), f)
		synctest.Wait()
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Flush = %v, want context.Canceled", err)
		}
		pending(t, other, "other Flush")
		waits.open(1)
		if err := <-other; err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(t.Context())
		cancel()
		if err := f.Flush(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Flush with a done context = %v", err)
		}
	})
}

// Sibling wait: with no sync in flight and k callers in the last released
// generation, the writer waits (bounded by GroupWait) for k callers.
func TestGroupWait(t *testing.T) {
	const gw = time.Millisecond
	// setupK makes generation 2 have k callers and returns them released.
	setupK := func(t *testing.T, k int) (*fakeTarget, *Flusher, *blocker) {
		ft := newFake(t)
		writes := newBlocker()
		ft.onWrite = func(g uint64, _ int) error {
			if g == 1 {
				writes.block(1)
			}
			return nil
		}
		f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: gw})
		put(t.Context(), f, ft, "0", 0)
		r := []<-chan error{flushAsync(t.Context(), f)}
		synctest.Wait()
		for i := range k { // the writer is busy: all k join generation 2
			put(t.Context(), f, ft, fmt.Sprint("k", i), 0)
			r = append(r, flushAsync(t.Context(), f))
		}
		synctest.Wait()
		writes.open(1)
		for _, ch := range r {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		if n := ft.numFrozen(); n != 2 {
			t.Fatalf("setup froze %d generations, want 2", n)
		}
		return ft, f, writes
	}
	setup := func(t *testing.T) (*fakeTarget, *Flusher, *blocker) { return setupK(t, 3) }
	t.Run("k-callers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft, f, _ := setup(t)
			defer closeOK(t, f)
			start := time.Now()
			var r []<-chan error
			for i := range 2 {
				put(t.Context(), f, ft, fmt.Sprint("w", i), 0)
				r = append(r, flushAsync(t.Context(), f))
				synctest.Wait()
				if n := ft.numFrozen(); n != 2 {
					t.Fatalf("froze with %d of 3 callers", i+1)
				}
			}
			put(t.Context(), f, ft, "w2", 0)
			r = append(r, flushAsync(t.Context(), f))
			for _, ch := range r {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			if d := time.Since(start); d != 0 {
				t.Fatalf("the third caller did not end the wait: %v passed", d)
			}
			if keys := ft.keysOf(3); len(keys) != 3 {
				t.Fatalf("generation 3 holds %v, want the three callers' writes", keys)
			}
		})
	})
	t.Run("bounded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft, f, _ := setup(t)
			defer closeOK(t, f)
			start := time.Now()
			put(t.Context(), f, ft, "w0", 0)
			if err := f.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != groupGap(gw) {
				t.Fatalf("a lone caller waited %v, want the gap %v", d, groupGap(gw))
			}
			// The last generation had one caller: no wait now.
			start = time.Now()
			put(t.Context(), f, ft, "w1", 0)
			if err := f.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != 0 {
				t.Fatalf("waited %v after a one-caller generation", d)
			}
		})
	})
	// Each joining sibling extends the wait by the gap, up to GroupWait.
	t.Run("gap-and-deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft, f, _ := setupK(t, 8)
			defer closeOK(t, f)
			gap := groupGap(gw)
			start := time.Now()
			var r []<-chan error
			for i := range 5 { // joins at 0, 0.8, 1.6, 2.4, 3.2 gaps
				if i > 0 {
					time.Sleep(gap * 4 / 5)
					synctest.Wait()
					if n := ft.numFrozen(); n != 2 {
						t.Fatalf("froze after %v with %d callers", time.Since(start), i)
					}
				}
				put(t.Context(), f, ft, fmt.Sprint("w", i), 0)
				r = append(r, flushAsync(t.Context(), f))
			}
			for _, ch := range r {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			// The fifth joined at 3.2 gaps; its gap would end at 4.2 gaps,
			// after the deadline (GroupWait = 4 gaps).
			if d := time.Since(start); d != gw {
				t.Fatalf("wait ended after %v, want GroupWait %v", d, gw)
			}
			if n := len(ft.keysOf(3)); n != 5 {
				t.Fatalf("generation 3 has %d callers' writes, want 5", n)
			}
		})
	})
	t.Run("gap-ends-wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft, f, _ := setupK(t, 8)
			defer closeOK(t, f)
			gap := groupGap(gw)
			start := time.Now()
			put(t.Context(), f, ft, "a", 0)
			a := flushAsync(t.Context(), f)
			time.Sleep(gap / 2)
			put(t.Context(), f, ft, "b", 0)
			b := flushAsync(t.Context(), f)
			for _, ch := range []<-chan error{a, b} {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			if d := time.Since(start); d != gap/2+gap {
				t.Fatalf("wait ended after %v, want %v (a gap after the last join)", d, gap/2+gap)
			}
		})
	})
	// While a generation with callers syncs, a new caller is held; after the
	// release it shares one generation with the returning callers.
	t.Run("hold-merges", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft, f, _ := setup(t)
			defer closeOK(t, f)
			waits := newBlocker()
			ft.mu.Lock()
			ft.onWait = func(g uint64, _ int) error {
				if g == 3 {
					waits.block(3)
				}
				return nil
			}
			ft.mu.Unlock()
			// Three callers make generation 3 (wait blocked).
			var r []<-chan error
			for i := range 3 {
				put(t.Context(), f, ft, fmt.Sprint("w", i), 0)
				r = append(r, flushAsync(t.Context(), f))
			}
			synctest.Wait()
			if n := ft.numFrozen(); n != 3 {
				t.Fatalf("%d generations, want 3", n)
			}
			put(t.Context(), f, ft, "x", 0)
			x := flushAsync(t.Context(), f)
			synctest.Wait()
			if n := ft.numFrozen(); n != 3 {
				t.Fatalf("caller frozen while callers' generation 3 syncs (%d frozen)", n)
			}
			waits.open(3)
			for _, ch := range r {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			// x waits for the three returning siblings (3 + x = 4 callers).
			pending(t, x, "held caller")
			if n := ft.numFrozen(); n != 3 {
				t.Fatalf("froze without the siblings (%d generations)", n)
			}
			start := time.Now()
			for i := range 3 {
				put(t.Context(), f, ft, fmt.Sprint("v", i), 0)
				r[i] = flushAsync(t.Context(), f)
			}
			for _, ch := range append(r, x) {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			if d := time.Since(start); d != 0 {
				t.Fatalf("merge waited %v", d)
			}
			if keys := ft.keysOf(4); len(keys) != 4 {
				t.Fatalf("generation 4 = %v, want x and the three siblings", keys)
			}
		})
	})
	// In eager mode a caller's generation freezes at once while another
	// caller's generation syncs.
	t.Run("eager-while-syncing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft, f, _ := setup(t)
			eager(f)
			defer closeOK(t, f)
			waits := newBlocker()
			ft.mu.Lock()
			ft.onWait = func(g uint64, _ int) error {
				if g == 3 {
					waits.block(3)
				}
				return nil
			}
			ft.mu.Unlock()
			var r []<-chan error
			for i := range 3 {
				put(t.Context(), f, ft, fmt.Sprint("w", i), 0)
				r = append(r, flushAsync(t.Context(), f))
			}
			synctest.Wait()
			put(t.Context(), f, ft, "x", 0)
			r = append(r, flushAsync(t.Context(), f))
			synctest.Wait()
			if n := ft.numFrozen(); n != 4 {
				t.Fatalf("generation 4 not frozen while 3 syncs (%d frozen)", n)
			}
			waits.open(3)
			for _, ch := range r {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

func TestCloseDuringPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
		f := eager(mustNew(ft, manual))
		put(t.Context(), f, ft, "a", 1)
		first := flushAsync(t.Context(), f)
		synctest.Wait()
		put(t.Context(), f, ft, "b", 2)
		second := flushAsync(t.Context(), f)
		synctest.Wait()
		put(t.Context(), f, ft, "c", 3) // only Close's final flush covers it
		closed := make(chan error, 1)
		go func() { closed <- f.Close() }()
		synctest.Wait()
		pending(t, closed, "Close")
		if _, err := f.BeginWrite(t.Context(), 4, false); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("BeginWrite during Close = %v", err)
		}
		if err := f.Flush(t.Context()); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("Flush during Close = %v", err)
		}
		waits.open(1)
		waits.open(2)
		synctest.Wait()
		pending(t, closed, "Close") // the final generation 3 still waits
		waits.open(3)
		for _, ch := range []<-chan error{first, second, closed} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range []string{"a", "b", "c"} {
			if !ft.isDurable(k) {
				t.Fatalf("%s not durable after Close", k)
			}
		}
		if f.Watermark() != 2 {
			t.Fatalf("watermark %d, want 2", f.Watermark())
		}
	})
}

// Close runs a final flush, retrying failed generations at once.
func TestCloseFinalFlushRetries(t *testing.T) {
	ft := newFake(t)
	ft.onWrite = func(g uint64, attempt int) error {
		if attempt == 1 {
			return errInjected
		}
		return nil
	}
	f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, RetryMin: time.Hour})
	put(t.Context(), f, ft, "a", 7)
	if err := f.Flush(t.Context()); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	closeOK(t, f)
	if !ft.isDurable("a") || f.Watermark() != 6 {
		t.Fatalf("final flush: durable=%v wm=%d", ft.isDurable("a"), f.Watermark())
	}
}

func TestCloseReturnsFinalFlushError(t *testing.T) {
	ft := newFake(t)
	ft.onWait = func(uint64, int) error { return errInjected }
	f := mustNew(ft, manual)
	put(t.Context(), f, ft, "a", 1)
	if err := f.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close = %v, want the injected error", err)
	}
	if err := f.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("second Close = %v, want the same error", err)
	}
	if err := f.Wait(t.Context()); !errors.Is(err, errInjected) {
		t.Fatalf("Wait = %v", err)
	}
}

func TestOperationsAfterClose(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, nil)
	closeOK(t, f)
	ctx := t.Context()
	if err := f.Flush(ctx); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Flush = %v", err)
	}
	if _, err := f.BeginWrite(ctx, 1, false); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("BeginWrite = %v", err)
	}
	if err := f.EndOp(ctx, 1); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("EndOp = %v", err)
	}
	if _, err := f.Enter(); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Enter = %v", err)
	}
	if err := f.Exclusive(ctx, func() { t.Error("fn ran after Close") }); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Exclusive = %v", err)
	}
	if err := f.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	var zero Ticket
	zero.End() // no-op
	if n := ft.numFrozen(); n != 0 {
		t.Fatalf("%d generations for an idle Close", n)
	}
}

func TestCloseConcurrent(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, nil)
	put(t.Context(), f, ft, "a", 1)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 16 {
		wg.Go(func() { errs <- f.Close() })
		wg.Go(func() { errs <- f.Wait(context.Background()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	<-f.Done()
	if n := ft.numFrozen(); n != 1 || !ft.isDurable("a") {
		t.Fatalf("%d generations for concurrent Close, want 1", n)
	}
}

// Close waits for Enter tickets and for writes in flight.
func TestCloseWaitsForTickets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		f := mustNew(ft, manual)
		e, err := f.Enter()
		if err != nil {
			t.Fatal(err)
		}
		w, err := f.BeginWrite(t.Context(), 1, false)
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- f.Close() }()
		synctest.Wait()
		pending(t, closed, "Close")
		// The Enter ticket; the write holds the barrier, not the gate
		// (invariant 13).
		if st := f.Stats(); st.Active != 1 {
			t.Fatalf("Active = %d, want 1", st.Active)
		}
		e.End()
		ft.Put("a")
		w.End()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if !ft.isDurable("a") {
			t.Fatal("write in flight at Close not flushed")
		}
	})
}

// TestCloseRefusesWritesUnderBarrier: writes hold the barrier, not the
// gate (invariant 13), so Close drains them through the barrier and a
// write that begins after Close returned is refused. Writers count their
// writes in plain (unsynchronised) counters that the test reads after
// Close: only the barrier orders them, so the race detector reports a
// write Close did not wait for; a write admitted after Close returned is
// reported as such (mutation 200). Half the writers use Write, whose fast
// path takes the barrier itself (mutation 450).
func TestCloseRefusesWritesUnderBarrier(t *testing.T) {
	errAfterClose := errors.New("admitted after Close returned")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	for range 20 {
		ft := newFake(t)
		f := mustNew(ft, manual)
		const writers = 12
		counts := make([]int, writers) // plain: ordered by the barrier only
		var started atomic.Int64
		var closed atomic.Bool
		var wg sync.WaitGroup
		for j := range writers {
			wg.Go(func() {
				for {
					if j%2 == 1 {
						// Write's fast path (mutation 450).
						err := f.Write(t.Context(), 0, func() error {
							if closed.Load() {
								return errAfterClose
							}
							counts[j]++
							started.Add(1)
							return nil
						})
						if errors.Is(err, kverr.ErrClosed) {
							return
						}
						if err != nil {
							t.Errorf("writer %d: %v", j, err)
							return
						}
						continue
					}
					w, err := f.BeginWrite(t.Context(), 0, false)
					if errors.Is(err, kverr.ErrClosed) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					if closed.Load() {
						t.Errorf("writer %d admitted after Close returned", j)
						w.End()
						return
					}
					counts[j]++
					started.Add(1)
					w.End()
				}
			})
		}
		for started.Load() < writers*20 {
			runtime.Gosched()
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		closed.Store(true)
		total := 0
		for _, c := range counts {
			total += c
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if total == 0 {
			t.Fatal("no write admitted before Close")
		}
	}
}

// Exclusive runs with no write in flight, and no write begins while fn
// runs. (Not under synctest: a goroutine blocked on the barrier's mutex is
// not durably blocked.)
func TestExclusive(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	var writing atomic.Int32
	var exclusive atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w, err := f.BeginWrite(t.Context(), 0, false)
				if err != nil {
					t.Error(err)
					return
				}
				writing.Add(1)
				if exclusive.Load() {
					t.Error("a write began during Exclusive")
				}
				ft.Put(fmt.Sprint(g, "-", i))
				runtime.Gosched()
				writing.Add(-1)
				w.End()
			}
		})
	}
	for range 200 {
		err := f.Exclusive(t.Context(), func() {
			exclusive.Store(true)
			if n := writing.Load(); n != 0 {
				t.Errorf("Exclusive with %d writes in flight", n)
			}
			runtime.Gosched()
			exclusive.Store(false)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	// A panic in fn releases the barrier and the gate.
	func() {
		defer func() {
			if recover() != "fn" {
				t.Fatal("panic in fn not propagated")
			}
		}()
		f.Exclusive(t.Context(), func() { panic("fn") })
	}()
	if err := put(t.Context(), f, ft, "c", 3); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Active != 0 {
		t.Fatalf("Active = %d", st.Active)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.Exclusive(ctx, func() { t.Error("ran with a done context") }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exclusive = %v", err)
	}
}

// Settle runs after a release that left nothing in flight.
func TestSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &settleTarget{fakeTarget: newFake(t)}
		waits := newBlocker()
		st.onWait = func(g uint64, _ int) error {
			if g == 1 {
				waits.block(1)
			}
			return nil
		}
		f := eager(mustNew(st, manual))
		defer closeOK(t, f)
		put(t.Context(), f, st.fakeTarget, "a", 0)
		first := flushAsync(t.Context(), f)
		synctest.Wait()
		put(t.Context(), f, st.fakeTarget, "b", 0)
		second := flushAsync(t.Context(), f)
		synctest.Wait()
		waits.open(1)
		<-first
		<-second
		synctest.Wait()
		if n := st.settles.Load(); n != 1 {
			t.Fatalf("%d settles, want 1 (generation 1's release left 2 in flight)", n)
		}
		if got := st.log(); got[len(got)-1] != "settle" {
			t.Fatalf("events %v", got)
		}
	})
}

// Recycle runs once per released generation, after its Flush callers
// were woken (a Recycle that waits for the caller to return would
// otherwise never end), and a panic in it fails no caller.
func TestRecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &recycleTarget{fakeTarget: newFake(t)}
		returned := make(chan struct{}, 2)
		rt.onRecycle = func(g uint64) {
			<-returned // the caller of generation g's Flush returned
			if g == 2 {
				panic("recycle")
			}
		}
		f := mustNew(rt, manual)
		defer closeOK(t, f)
		for i := range 2 {
			put(t.Context(), f, rt.fakeTarget, fmt.Sprint(i), 0)
			if err := f.Flush(t.Context()); err != nil {
				t.Fatalf("Flush %d: %v", i+1, err)
			}
			returned <- struct{}{}
			synctest.Wait()
		}
		want := []string{"freeze 1", "write 1", "wait 1", "release 1", "recycle 1", "freeze 2", "write 2", "wait 2", "release 2"}
		if got := rt.log(); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		if st := f.Stats(); st.Failures != 1 || !errors.Is(st.LastErr, kverr.ErrPanicked) {
			t.Fatalf("Failures %d, LastErr %v: want the Recycle panic counted", st.Failures, st.LastErr)
		}
	})
}

func TestBackpressure(t *testing.T) {
	t.Run("waits-for-room", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFake(t)
			waits := newBlocker()
			ft.onWait = func(g uint64, _ int) error { waits.block(g); return nil }
			// 16 bytes per key: the bound admits 4 keys. FlushBytes at the
			// bound: its default (half the bound) would kick a background
			// flush at the third put, and whether the writer goroutine ran
			// before the fifth (a second generation) depended on scheduling.
			f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: 64, FlushBytes: 64})
			defer closeOK(t, f)
			for i := range 5 {
				if err := put(t.Context(), f, ft, fmt.Sprint(i), uint64(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			// 80 bytes pending > 64: the next writer kicks a flush and waits
			// for its release.
			done := make(chan error, 1)
			go func() { done <- put(t.Context(), f, ft, "x", 9) }()
			synctest.Wait()
			pending(t, done, "writer over the bound")
			if n := ft.numFrozen(); n != 1 {
				t.Fatalf("no byte-triggered flush (%d generations)", n)
			}
			time.Sleep(time.Second)
			waits.open(1)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if st := f.Stats(); st.Stalls != 1 || st.StallTime != time.Second {
				t.Fatalf("Stalls %d StallTime %v, want 1 and 1s", st.Stalls, st.StallTime)
			}
			waits.open(2)
		})
	})
	t.Run("context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFake(t)
			ft.onWrite = func(uint64, int) error { return errInjected }
			f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: 16})
			put(t.Context(), f, ft, "a", 1)
			put(t.Context(), f, ft, "b", 2)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if err := put(ctx, f, ft, "c", 3); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("write = %v, want DeadlineExceeded", err)
			}
			if d := time.Since(start); d != 5*time.Second {
				t.Fatalf("waited %v, want 5s", d)
			}
			if st := f.Stats(); st.Active != 0 {
				t.Fatalf("writer left %d operations in the gate", st.Active)
			}
			if err := f.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close = %v", err)
			}
		})
	})
	t.Run("close-wakes-writers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFake(t)
			ft.onWrite = func(uint64, int) error { return errInjected }
			f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: 16})
			put(t.Context(), f, ft, "a", 1)
			put(t.Context(), f, ft, "b", 2)
			errs := make(chan error, 8)
			for i := range 8 {
				go func() { errs <- put(t.Context(), f, ft, fmt.Sprint("w", i), 3) }()
			}
			synctest.Wait()
			if st := f.Stats(); st.Active != 8 || st.Stalls != 8 {
				t.Fatalf("Active %d Stalls %d, want 8 blocked writers", st.Active, st.Stalls)
			}
			if err := f.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close = %v, want the final flush's error", err)
			}
			for range 8 {
				if err := <-errs; !errors.Is(err, kverr.ErrClosed) {
					t.Fatalf("blocked writer got %v, want kverr.ErrClosed", err)
				}
			}
		})
	})
}

// Contract 4: the watermark never decreases and only advances with a
// generation whose wait returned nil.
func TestWatermarkMonotonic(t *testing.T) {
	ft := newFake(t)
	fail := map[[2]uint64]bool{{2, 1}: true, {2, 2}: true, {5, 1}: true}
	ft.onWait = func(g uint64, attempt int) error {
		if fail[[2]uint64{g, uint64(attempt)}] {
			return errInjected
		}
		return nil
	}
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	var last uint64
	failures := 0
	for i := uint64(1); i <= 8; i++ {
		w, _ := f.BeginWrite(t.Context(), i, true)
		ft.Put(fmt.Sprint(i))
		w.End()
		err := f.Flush(t.Context())
		wm := f.Watermark()
		if wm < last {
			t.Fatalf("watermark went back from %d to %d", last, wm)
		}
		if err != nil {
			failures++
			if wm >= i {
				t.Fatalf("flush %d failed but the watermark reached %d", i, wm)
			}
		} else if wm != i {
			t.Fatalf("flush %d: wm %d", i, wm)
		}
		ft.mu.Lock()
		if ft.durableWM < wm {
			t.Errorf("Watermark %d ahead of the durable watermark %d", wm, ft.durableWM)
		}
		ft.mu.Unlock()
		last = wm
	}
	if failures < 2 || f.Stats().Failures != 3 {
		t.Fatalf("%d failed flushes, %d failures", failures, f.Stats().Failures)
	}
}

func TestIntervalFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		f := mustNew(ft, &Options{Interval: time.Second})
		defer closeOK(t, f)
		time.Sleep(3 * time.Second) // idle: nothing pending, no freeze
		synctest.Wait()
		if n := ft.numFrozen(); n != 0 {
			t.Fatalf("%d generations while idle", n)
		}
		put(t.Context(), f, ft, "a", 1)
		// Next tick is at 4s (1s after the idle tick at 3s).
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if ft.isDurable("a") {
			t.Fatal("flushed before the interval")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !ft.isDurable("a") {
			t.Fatal("not flushed after the interval")
		}
		// An op without writes (BeginOp, EndOp) is flushed by the
		// interval too.
		f.BeginOp(t.Context(), 5)
		f.EndOp(t.Context(), 5)
		time.Sleep(time.Second)
		synctest.Wait()
		if f.Watermark() != 5 {
			t.Fatalf("watermark %d, want 5", f.Watermark())
		}
	})
}

func TestRetryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		var times []time.Duration
		start := time.Now()
		var mu sync.Mutex
		ft.onWait = func(_ uint64, attempt int) error {
			mu.Lock()
			times = append(times, time.Since(start))
			mu.Unlock()
			if attempt <= 5 {
				return errInjected
			}
			return nil
		}
		f := mustNew(ft, &Options{Interval: time.Second, RetryMin: 100 * time.Millisecond, RetryMax: 300 * time.Millisecond})
		defer closeOK(t, f)
		put(t.Context(), f, ft, "a", 1)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want := []time.Duration{1000, 1100, 1300, 1600, 1900, 2200} // ms: interval, then 100, 200, 300 (cap), 300, 300
		mu.Lock()
		got := slices.Clone(times)
		mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("wait times %v, want %v ms", got, want)
		}
		for i := range want {
			if got[i] != want[i]*time.Millisecond {
				t.Fatalf("wait times %v, want %v ms", got, want)
			}
		}
		if !ft.isDurable("a") {
			t.Fatal("not durable after retries")
		}
		if st := f.Stats(); st.Failures != 5 || st.Generations != 1 || st.Writes != 6 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

func TestFlushBytesTriggersBackgroundFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: 1 << 20, FlushBytes: 32})
		defer closeOK(t, f)
		for i := range 3 { // 48 bytes after the third; the fourth BeginWrite sees > 32
			put(t.Context(), f, ft, fmt.Sprint(i), uint64(i+1))
		}
		synctest.Wait()
		if ft.isDurable("0") {
			t.Fatal("flushed below FlushBytes")
		}
		put(t.Context(), f, ft, "3", 4)
		synctest.Wait()
		if !ft.isDurable("0") {
			t.Fatal("no background flush after passing FlushBytes")
		}
	})
}

func TestStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		ft.onWait = func(uint64, int) error { time.Sleep(3 * time.Millisecond); return nil }
		f := mustNew(ft, manual)
		defer closeOK(t, f)
		var wg sync.WaitGroup
		for i := range 4 {
			put(t.Context(), f, ft, fmt.Sprint(i), uint64(i+1))
			wg.Go(func() { f.Flush(t.Context()) })
		}
		wg.Wait()
		st := f.Stats()
		if st.Flushes != 4 || st.Latency.Count != 4 || st.Generations < 1 || st.Writes != st.Generations ||
			st.Coalesced < 1 || st.Coalesced > 3 || st.HighestOp != 4 || st.ClaimedOp != 3 || st.Watermark != 3 ||
			st.InFlight != 0 || st.PendingBytes != 0 || st.Failures != 0 || st.LastErr != nil {
			t.Fatalf("Stats = %+v", st)
		}
		// A caller that arrives while a generation syncs waits for the
		// next one: two syncs (the race detector's scheduling makes that
		// happen in some runs).
		if q := st.Latency.Quantile(1); q < 3*time.Millisecond || q > 7*time.Millisecond {
			t.Fatalf("max latency bucket %v for 3ms syncs (at most two per Flush)", q)
		}
	})
}

func TestHistogram(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{0, 500, 1024, 1279, 1280, time.Millisecond, time.Hour} {
		h.observe(d)
	}
	s := h.snapshot()
	if s.Count != 7 {
		t.Fatalf("Count %d", s.Count)
	}
	prev := time.Duration(0)
	for i := range HistogramBuckets {
		b := BucketBound(i)
		if b <= prev {
			t.Fatalf("bound %d = %v not above %v", i, b, prev)
		}
		prev = b
	}
	for _, d := range []time.Duration{0, 1023, 1024, 1279, 1280, 3 * time.Microsecond, time.Second, time.Minute, time.Hour} {
		i := histBucket(d)
		if d >= BucketBound(i) || (i > 0 && d < BucketBound(i-1)) {
			t.Fatalf("%v in bucket %d [%v, %v)", d, i, BucketBound(i-1), BucketBound(i))
		}
	}
	if q := s.Quantile(0.5); q != 1280 {
		t.Fatalf("median bound %v, want 1.28µs", q)
	}
	if q := s.Quantile(1); q != BucketBound(HistogramBuckets-1) {
		t.Fatalf("max bound %v", q)
	}
}

func TestTicketEndedTwiceDetected(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("needs -tags invariants")
	}
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	w, _ := f.BeginWrite(t.Context(), 0, false)
	w.End()
	defer func() {
		if recover() == nil {
			t.Fatal("second End not detected")
		}
	}()
	w.End()
}

// Writers, flushers and Close race; every write that completed is durable
// once Close returns nil, and nothing is admitted after Close.
func TestCloseRaceStress(t *testing.T) {
	for round := range 20 {
		ft := newFake(t)
		f := mustNew(ft, &Options{Interval: time.Millisecond, MaxPendingBytes: 4096, PipelineDepth: 2})
		var mu sync.Mutex
		var done []string
		var wg sync.WaitGroup
		var ops opSeq
		for g := range 6 {
			wg.Go(func() {
				for i := 0; ; i++ {
					key := fmt.Sprintf("r%d-g%d-%d", round, g, i)
					if _, err := ops.put(t.Context(), f, ft, key); err != nil {
						if !errors.Is(err, kverr.ErrClosed) {
							t.Errorf("write: %v", err)
						}
						return
					}
					mu.Lock()
					done = append(done, key)
					mu.Unlock()
					if i%4 == 0 {
						if err := f.Flush(t.Context()); err != nil && !errors.Is(err, kverr.ErrClosed) {
							t.Errorf("Flush: %v", err)
						}
					}
				}
			})
		}
		for ft.bytes.Load() < 50*16 && f.Stats().Generations < 5 {
			runtime.Gosched()
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		mu.Lock()
		for _, k := range done {
			if !ft.isDurable(k) {
				t.Fatalf("completed write %s not durable after Close", k)
			}
		}
		mu.Unlock()
		if st := f.Stats(); st.Active != 0 || st.PendingBytes != 0 || st.InFlight != 0 {
			t.Fatalf("after Close: %+v", st)
		}
	}
}

// Redelivered ops (issue 18: raft redelivers entries at or below the
// applied index the host restarted from): a write or EndOp whose op is at
// or below the persisted watermark is skipped and counted; one above it
// but claimed by a generation still in flight is ErrStaleOp (the op was
// complete: a host bug); a cancelled context and Close come first.
func TestRedeliveredOpsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error {
			if g == 2 {
				waits.block(g)
			}
			return nil
		}
		f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, Watermark: 10})
		defer func() { waits.open(2); f.Close() }() // a failure must not leave the bubble blocked
		ctx := t.Context()
		for op := uint64(1); op <= 10; op++ {
			w, err := f.BeginWrite(ctx, op, op%2 == 0)
			if err != nil || !w.Skipped() {
				t.Fatalf("write of op %d under watermark 10: %v (skipped %v)", op, err, w.Skipped())
			}
			w.End() // a no-op on a skipped ticket
			if err := f.EndOp(ctx, op); err != nil {
				t.Fatalf("EndOp(%d) under watermark 10: %v", op, err)
			}
		}
		if st := f.Stats(); st.Redelivered != 20 || st.Active != 0 || ft.PendingBytes() != 0 {
			t.Fatalf("Redelivered %d Active %d pending %d, want 20, 0, 0", st.Redelivered, st.Active, ft.PendingBytes())
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := ft.numFrozen(); n != 0 {
			t.Fatalf("skipped writes froze %d generations", n)
		}
		// Op 11 ends and is persisted by generation 1; op 12 ends and is
		// claimed by generation 2, whose wait blocks.
		for op := uint64(11); op <= 12; op++ {
			if err := put(ctx, f, ft, fmt.Sprint("k", op), op); err != nil {
				t.Fatal(err)
			}
			if err := f.EndOp(ctx, op); err != nil {
				t.Fatal(err)
			}
			if op == 11 {
				if err := f.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		second := flushAsync(ctx, f)
		synctest.Wait()
		if st := f.Stats(); st.ClaimedOp != 12 || st.Watermark != 11 {
			t.Fatalf("claimed %d watermark %d, want 12 and 11", st.ClaimedOp, st.Watermark)
		}
		if w, err := f.BeginWrite(ctx, 11, false); err != nil || !w.Skipped() {
			t.Fatalf("write of persisted op 11: %v (skipped %v)", err, w.Skipped())
		}
		if w, err := f.BeginWrite(ctx, 12, false); !errors.Is(err, kverr.ErrStaleOp) {
			w.End() // admitted by mistake: let Close drain it
			t.Fatalf("write of op 12, claimed but not persisted: %v, want kverr.ErrStaleOp", err)
		}
		waits.open(2)
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if w, err := f.BeginWrite(ctx, 12, false); err != nil || !w.Skipped() {
			t.Fatalf("write of op 12 once persisted: %v (skipped %v)", err, w.Skipped())
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := f.BeginWrite(cancelled, 5, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("redelivered write with a cancelled context: %v", err)
		}
		if err := f.EndOp(cancelled, 5); !errors.Is(err, context.Canceled) {
			t.Fatalf("redelivered EndOp with a cancelled context: %v", err)
		}
		if st := f.Stats(); st.Redelivered != 22 {
			t.Fatalf("Redelivered %d, want 22", st.Redelivered)
		}
		closeOK(t, f)
		if _, err := f.BeginWrite(ctx, 5, false); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("redelivered write after Close: %v, want kverr.ErrClosed", err)
		}
		if err := f.EndOp(ctx, 5); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("redelivered EndOp after Close: %v, want kverr.ErrClosed", err)
		}
	})
}

// BeginWrite checks its context before admitting anything: a write with a
// context already done is refused even when it would not wait.
func TestBeginWriteCancelledContext(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, op := range []uint64{0, 1} {
		if _, err := f.BeginWrite(cancelled, op, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("BeginWrite(op %d) with a cancelled context: %v", op, err)
		}
	}
	if st := f.Stats(); st.Active != 0 || st.HighestOp != 0 {
		t.Fatalf("a refused write left Active %d HighestOp %d", st.Active, st.HighestOp)
	}
}

// WatermarkNotify's channel closes exactly when the persisted watermark
// advances (not at a freeze, not when a generation writes no higher
// watermark) and for good at Close; WaitWatermark wakes on it, honours its
// context and returns ErrClosed after Close.
func TestWatermarkNotify(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFake(t)
		waits := newBlocker()
		ft.onWait = func(g uint64, _ int) error {
			if g == 1 {
				waits.block(g)
			}
			return nil
		}
		f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: -1, Watermark: 3})
		defer func() { waits.open(1); f.Close() }() // a failure must not leave the bubble blocked
		ctx := t.Context()
		wm, ch := f.WatermarkNotify()
		if wm != 3 || chanClosed(ch) {
			t.Fatalf("WatermarkNotify = %d (closed %v), want 3 and an open channel", wm, chanClosed(ch))
		}
		got := make(chan uint64, 1)
		go func() {
			wm, err := f.WaitWatermark(ctx, 3)
			if err != nil {
				t.Errorf("WaitWatermark: %v", err)
			}
			got <- wm
		}()
		put(ctx, f, ft, "a", 4)
		f.EndOp(ctx, 4)
		first := flushAsync(ctx, f)
		synctest.Wait() // generation 1 frozen and written; its wait blocks
		if chanClosed(ch) || len(got) != 0 {
			t.Fatal("notified before the watermark was persisted")
		}
		waits.open(1)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !chanClosed(ch) {
			t.Fatal("channel still open after the watermark advanced")
		}
		if wm := <-got; wm != 4 {
			t.Fatalf("WaitWatermark returned %d, want 4", wm)
		}
		wm, ch = f.WatermarkNotify()
		if wm != 4 || chanClosed(ch) {
			t.Fatalf("WatermarkNotify = %d (closed %v), want 4 and an open channel", wm, chanClosed(ch))
		}
		// A generation that persists no higher watermark notifies nobody.
		put(ctx, f, ft, "b", 0)
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if chanClosed(ch) {
			t.Fatal("notified of a flush that did not move the watermark")
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := f.WaitWatermark(short, 4); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitWatermark with a context that ends: %v", err)
		}
		waiting := make(chan error, 1)
		go func() {
			_, err := f.WaitWatermark(ctx, 4)
			waiting <- err
		}()
		synctest.Wait()
		closeOK(t, f)
		if err := <-waiting; !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("WaitWatermark across Close: %v, want kverr.ErrClosed", err)
		}
		if !chanClosed(ch) {
			t.Fatal("channel still open after Close")
		}
		if wm, ch := f.WatermarkNotify(); wm != 4 || !chanClosed(ch) {
			t.Fatalf("WatermarkNotify after Close = %d (closed %v), want 4 and a closed channel", wm, chanClosed(ch))
		}
		if wm, err := f.WaitWatermark(ctx, 3); wm != 4 || err != nil {
			t.Fatalf("WaitWatermark(3) after Close = %d, %v; want 4, nil", wm, err)
		}
		if _, err := f.WaitWatermark(ctx, 4); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("WaitWatermark(4) after Close: %v, want kverr.ErrClosed", err)
		}
	})
}

// mustNew is New for options a test knows are valid.
func mustNew(t Target, opts *Options) *Flusher {
	f, err := New(t, opts)
	if err != nil {
		panic(err)
	}
	return f
}

// TestNewBadOptions: New refuses options out of range and starts nothing
// (goleak in TestMain checks the goroutines).
func TestNewBadOptions(t *testing.T) {
	for _, o := range []*Options{
		{PipelineDepth: -1},
		{PipelineDepth: MaxPipelineDepth + 1},
		{RetryMin: -time.Second},
		{RetryMax: -time.Second},
	} {
		f, err := New(newFake(t), o)
		if !errors.Is(err, kverr.ErrBadOptions) || f != nil {
			t.Errorf("New(%+v) = %v, %v; want nil, kverr.ErrBadOptions", *o, f, err)
		}
	}
	for _, o := range []*Options{nil, {}, {PipelineDepth: MaxPipelineDepth}, {PipelineDepth: 1}} {
		f, err := New(newFake(t), o)
		if err != nil {
			t.Fatalf("New(%+v): %v", o, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDrainOverlappingWrites: writes that overlap without a gap keep a
// stripe held at every TryLock; the drain still ends, at the poll after
// DrainPatience, once the writes in flight then have ended (before the fix
// it polled forever: TestDrain ran 10 minutes on a loaded machine).
func TestDrainOverlappingWrites(t *testing.T) {
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	held := f.barrier.RLockAt(0) // a write in flight at BeginDrain
	var d Drain
	f.BeginDrain(&d)
	for range DrainPatience {
		if d.Poll() {
			t.Fatal("a drain is done while its stripe was never free")
		}
		next := f.barrier.RLockAt(0) // the next write begins before this one ends
		held.RUnlock()
		held = next
	}
	done := make(chan bool)
	go func() { done <- d.Poll() }()
	select {
	case <-done:
		t.Fatal("the poll after DrainPatience returned with a write in flight")
	case <-time.After(20 * time.Millisecond):
	}
	held.RUnlock()
	if !<-done {
		t.Fatal("the poll after DrainPatience is not done once the writes in flight ended")
	}
}

// TestDrain: a drain is done only once every write in flight when it began
// has ended (each such write's End happens before the Poll that returns
// true), whatever writes begin meanwhile, and no writer waits for it.
func TestDrain(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	ft := newFake(t)
	f := mustNew(ft, manual)
	defer closeOK(t, f)
	var d Drain
	f.BeginDrain(&d)
	if !d.Poll() {
		t.Fatal("a drain with no write in flight is not done")
	}
	// One write held open: the drain waits for it, not for later writes.
	w, err := f.BeginWrite(t.Context(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	f.BeginDrain(&d)
	for range DrainPatience {
		if d.Poll() {
			t.Fatal("a drain is done with a write in flight since it began")
		}
	}
	w.End()
	if !d.Poll() {
		t.Fatal("a drain is not done after the write it waited for ended")
	}
	// Many writers: each write records that it ended; a drain begun while
	// a write is in flight must see that write's end once done.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var started, ended [8]atomic.Uint64
	for g := range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				w, err := f.BeginWrite(t.Context(), 0, false)
				if err != nil {
					t.Error(err)
					return
				}
				n := started[g].Add(1)
				runtime.Gosched()
				ended[g].Store(n)
				w.End()
			}
		})
	}
	for range 200 {
		var snap [8]uint64
		for g := range snap {
			snap[g] = started[g].Load() // writes begun so far (one may be in flight)
		}
		f.BeginDrain(&d)
		for n := 1; !d.Poll(); n++ {
			if n > DrainPatience {
				t.Fatalf("a drain not done after %d polls", n)
			}
			runtime.Gosched()
		}
		for g := range snap {
			if e := ended[g].Load(); e < snap[g] {
				t.Fatalf("writer %d: drain done with write %d in flight at its start (ended %d)", g, snap[g], e)
			}
		}
	}
	close(stop)
	wg.Wait()
}

// TestWriteTracksOps: Write, whose fast path takes the barrier itself (with
// no bound on pending bytes, and with one that the fake's counter is
// below), begins an op above every op begun, admits its open head op,
// refuses a complete one and skips a redelivered one, as BeginWrite does
// (mutation 451).
func TestWriteTracksOps(t *testing.T) {
	for _, opts := range []*Options{manual, {Interval: -1, MaxPendingBytes: 1 << 20, GroupWait: -1}} {
		ft := newFake(t)
		f := mustNew(ft, opts)
		ctx := t.Context()
		applied := 0
		apply := func() error { applied++; return nil }
		for _, op := range []uint64{3, 3, 5} {
			if err := f.Write(ctx, op, apply); err != nil {
				t.Fatalf("Write of op %d: %v", op, err)
			}
		}
		if h, c := f.HighestOp(), f.CompletedOp(); h != 5 || c != 4 {
			t.Fatalf("HighestOp %d, CompletedOp %d after writes of ops 3, 3, 5; want 5, 4", h, c)
		}
		if err := f.Write(ctx, 3, apply); !errors.Is(err, kverr.ErrStaleOp) {
			t.Fatalf("Write of complete op 3: %v, want ErrStaleOp", err)
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Write(ctx, 4, apply); err != nil {
			t.Fatalf("Write of redelivered op 4: %v", err)
		}
		if applied != 3 {
			t.Fatalf("%d writes applied, want 3 (the stale and the redelivered one not)", applied)
		}
		closeOK(t, f)
	}
}
