package flush

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errInjected = errors.New("injected I/O error")

// manual disables the background triggers so tests control every flush.
var manual = &Options{Interval: -1, MaxPendingBytes: -1}

func closeOK(t *testing.T, f *Flusher) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Contract 2: when Flush returns nil, the caller's earlier write is in the
// durable backend of every target.
func TestFlushCoverage(t *testing.T) {
	data, receipt := newMemTarget("data"), newMemTarget("receipt")
	f := New([]Target{data, receipt}, manual)
	defer closeOK(t, f)
	var op atomic.Uint64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 25 {
				key := fmt.Sprintf("g%d-%d", g, i)
				if err := write(t.Context(), f, key, op.Add(1), data, receipt); err != nil {
					t.Error(err)
					return
				}
				if err := f.Flush(t.Context()); err != nil {
					t.Error(err)
					return
				}
				if !data.isDurable(key) || !receipt.isDurable(key) {
					t.Errorf("Flush returned nil but %s is not durable", key)
					return
				}
			}
		})
	}
	wg.Wait()
	st := f.Stats()
	if st.Flushes != 16*25 {
		t.Fatalf("Stats.Flushes = %d, want %d", st.Flushes, 16*25)
	}
	if st.Watermark != op.Load() {
		t.Fatalf("watermark %d, want %d", st.Watermark, op.Load())
	}
}

// blockFirstApply makes the first Apply wait for release.
func blockFirstApply(t *memTarget, release <-chan struct{}) {
	t.hook = func(n int, _ uint64) error {
		if n == 1 {
			<-release
		}
		return nil
	}
}

func TestFlushCoalesces64Callers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		release := make(chan struct{})
		blockFirstApply(tg, release)
		f := New([]Target{tg}, manual)
		defer closeOK(t, f)
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				key := fmt.Sprint(g)
				if err := write(t.Context(), f, key, uint64(g+1), tg); err != nil {
					t.Error(err)
				}
				if err := f.Flush(t.Context()); err != nil {
					t.Error(err)
				}
				if !tg.isDurable(key) {
					t.Errorf("key %s not durable after Flush", key)
				}
			})
		}
		synctest.Wait() // everyone is waiting on the first flush or the next generation
		close(release)
		wg.Wait()
		st := f.Stats()
		if st.PhysicalFlushes > 2 || st.PhysicalFlushes < 1 {
			t.Fatalf("%d physical flushes for 64 callers, want 1..2", st.PhysicalFlushes)
		}
		if st.Coalesced < 62 {
			t.Fatalf("Coalesced = %d, want >= 62", st.Coalesced)
		}
	})
}

// A caller that arrives while a flush runs must wait for the next one.
func TestFlushJoinerWaitsForNextGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		release := make(chan struct{})
		blockFirstApply(tg, release)
		f := New([]Target{tg}, manual)
		defer closeOK(t, f)
		write(t.Context(), f, "a", 1, tg)
		first := make(chan error, 1)
		go func() { first <- f.Flush(t.Context()) }()
		synctest.Wait() // first flush has frozen "a" and blocks in Apply
		write(t.Context(), f, "b", 2, tg)
		second := make(chan error, 1)
		go func() { second <- f.Flush(t.Context()) }()
		synctest.Wait()
		select {
		case <-second:
			t.Fatal("second Flush returned while the first flush was still running")
		default:
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if !tg.isDurable("b") {
			t.Fatal("b not durable after the second Flush returned nil")
		}
	})
}

func TestFlushCancelledCallerReturnsPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		release := make(chan struct{})
		blockFirstApply(tg, release)
		f := New([]Target{tg}, manual)
		defer closeOK(t, f)
		write(t.Context(), f, "a", 1, tg)
		ctx, cancel := context.WithCancel(t.Context())
		cancelled := make(chan error, 1)
		go func() { cancelled <- f.Flush(ctx) }()
		other := make(chan error, 1)
		go func() { other <- f.Flush(t.Context()) }()
		synctest.Wait()
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Flush = %v, want context.Canceled", err)
		}
		select {
		case err := <-other:
			t.Fatalf("other Flush returned %v before the flush finished", err)
		default:
		}
		close(release)
		if err := <-other; err != nil {
			t.Fatal(err)
		}
		if !tg.isDurable("a") {
			t.Fatal("a not durable")
		}
	})
}

func TestFlushFailureThenSuccessLosesNothing(t *testing.T) {
	data, receipt := newMemTarget("data"), newMemTarget("receipt")
	data.hook = func(n int, _ uint64) error {
		if n == 1 {
			return errInjected
		}
		return nil
	}
	f := New([]Target{data, receipt}, manual)
	defer closeOK(t, f)
	write(t.Context(), f, "a", 1, data, receipt)
	err := f.Flush(t.Context())
	if !errors.Is(err, errInjected) {
		t.Fatalf("Flush = %v, want the injected error", err)
	}
	if !strings.Contains(err.Error(), "target 0 (data)") {
		t.Fatalf("error %q does not name the target", err)
	}
	if _, wm, applies := receipt.snapshot(); applies != 0 || wm != 0 {
		t.Fatalf("receipt applied (applies=%d wm=%d) although data failed", applies, wm)
	}
	if f.Watermark() != 0 {
		t.Fatalf("watermark %d advanced on failure", f.Watermark())
	}
	if f.Stats().PendingBytes == 0 {
		t.Fatal("pending bytes dropped to 0 after a failed flush")
	}
	st := f.Stats()
	if st.Failures != 1 || !errors.Is(st.LastErr, errInjected) {
		t.Fatalf("Stats = %+v", st)
	}
	write(t.Context(), f, "b", 2, data, receipt) // arrives between the failure and the retry
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if !data.isDurable(k) || !receipt.isDurable(k) {
			t.Fatalf("%s lost after failure and retry", k)
		}
	}
	if f.Watermark() != 2 {
		t.Fatalf("watermark %d, want 2", f.Watermark())
	}
}

func TestFlushPanickingTarget(t *testing.T) {
	errValue := errors.New("panic value error")
	cases := []struct {
		name   string
		do     func()
		check  func(t *testing.T, pe *PanicError, err error)
		freeze bool
	}{
		{"string", func() { panic("boom") }, func(t *testing.T, pe *PanicError, _ error) {
			if pe.Value != "boom" || pe.Goexit || len(pe.Stack) == 0 {
				t.Fatalf("PanicError = %+v", pe)
			}
		}, false},
		{"error", func() { panic(errValue) }, func(t *testing.T, _ *PanicError, err error) {
			if !errors.Is(err, errValue) {
				t.Fatalf("errors.Is(err, panic value) = false: %v", err)
			}
		}, false},
		{"goexit", func() { runtime.Goexit() }, func(t *testing.T, pe *PanicError, _ error) {
			if !pe.Goexit {
				t.Fatalf("Goexit not reported: %+v", pe)
			}
		}, false},
		{"freeze", func() { panic("in freeze") }, func(t *testing.T, pe *PanicError, err error) {
			if !strings.Contains(err.Error(), "freeze") {
				t.Fatalf("error %q does not say freeze", err)
			}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tg := newMemTarget("t")
				// Flush 1 blocks in Apply until five callers have joined
				// generation 2, whose Freeze or Apply then fails.
				release := make(chan struct{})
				var freezes atomic.Int32
				if tc.freeze {
					tg.freezeHook = func() {
						if freezes.Add(1) == 2 {
							tc.do()
						}
					}
				}
				tg.hook = func(n int, _ uint64) error {
					switch {
					case n == 1:
						<-release
					case n == 2 && !tc.freeze:
						tc.do()
					}
					return nil
				}
				f := New([]Target{tg}, manual)
				defer closeOK(t, f)
				write(t.Context(), f, "a", 1, tg)
				first := make(chan error, 1)
				go func() { first <- f.Flush(t.Context()) }()
				synctest.Wait()
				write(t.Context(), f, "b", 2, tg)
				const n = 5
				errs := make(chan error, n)
				for range n {
					go func() { errs <- f.Flush(t.Context()) }()
				}
				synctest.Wait()
				close(release)
				if err := <-first; err != nil {
					t.Fatalf("first flush: %v", err)
				}
				for range n {
					err := <-errs
					if !errors.Is(err, ErrPanicked) {
						t.Fatalf("Flush = %v, want ErrPanicked", err)
					}
					var pe *PanicError
					if !errors.As(err, &pe) {
						t.Fatalf("no *PanicError in %v", err)
					}
					tc.check(t, pe, err)
				}
				if st := f.Stats(); st.PhysicalFlushes != 2 || st.Failures != 1 {
					t.Fatalf("Stats = %+v, want 2 physical flushes, 1 failure", st)
				}
				// The flusher keeps working, the barrier was released and
				// nothing was lost.
				write(t.Context(), f, "c", 3, tg)
				if err := f.Flush(t.Context()); err != nil {
					t.Fatalf("Flush after panic: %v", err)
				}
				if !tg.isDurable("a") || !tg.isDurable("b") || !tg.isDurable("c") {
					t.Fatal("writes lost after a panic")
				}
			})
		})
	}
}

func TestCloseDuringFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		release := make(chan struct{})
		blockFirstApply(tg, release)
		f := New([]Target{tg}, manual)
		write(t.Context(), f, "a", 1, tg)
		flushed := make(chan error, 1)
		go func() { flushed <- f.Flush(t.Context()) }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- f.Close() }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a flush was in flight")
		default:
		}
		if _, err := f.BeginRead(); !errors.Is(err, ErrClosed) {
			t.Fatalf("BeginRead during Close = %v", err)
		}
		if _, err := f.BeginWrite(t.Context()); !errors.Is(err, ErrClosed) {
			t.Fatalf("BeginWrite during Close = %v", err)
		}
		close(release)
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if !tg.isDurable("a") {
			t.Fatal("a not durable")
		}
	})
}

// Close runs a final flush of whatever is still pending.
func TestCloseFinalFlush(t *testing.T) {
	tg := newMemTarget("t")
	f := New([]Target{tg}, manual)
	write(t.Context(), f, "a", 7, tg)
	closeOK(t, f)
	if !tg.isDurable("a") || f.Watermark() != 7 {
		t.Fatalf("final flush missing: durable=%v wm=%d", tg.isDurable("a"), f.Watermark())
	}
}

func TestCloseReturnsFinalFlushError(t *testing.T) {
	tg := newMemTarget("t")
	tg.hook = func(int, uint64) error { return errInjected }
	f := New([]Target{tg}, manual)
	write(t.Context(), f, "a", 1, tg)
	if err := f.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close = %v, want injected error", err)
	}
	if err := f.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("second Close = %v, want the same error", err)
	}
}

func TestOperationsAfterClose(t *testing.T) {
	f := New(nil, nil)
	closeOK(t, f)
	if err := f.Flush(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush = %v", err)
	}
	if _, err := f.BeginRead(); !errors.Is(err, ErrClosed) {
		t.Fatalf("BeginRead = %v", err)
	}
	if _, err := f.BeginWrite(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("BeginWrite = %v", err)
	}
	if err := f.Wait(t.Context()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	var zero Op
	zero.End() // no-op
}

func TestCloseConcurrent(t *testing.T) {
	tg := newMemTarget("t")
	f := New([]Target{tg, nil}, nil) // nil targets are ignored
	write(t.Context(), f, "a", 1, tg)
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
	if _, _, applies := tg.snapshot(); applies != 1 {
		t.Fatalf("%d applies for concurrent Close, want 1", applies)
	}
}

func TestBackpressure(t *testing.T) {
	t.Run("waits-for-room", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tg := newMemTarget("t")
			release := make(chan struct{})
			blockFirstApply(tg, release)
			// 16 bytes per key: the bound admits 4 keys.
			f := New([]Target{tg}, &Options{Interval: -1, MaxPendingBytes: 64})
			defer closeOK(t, f)
			for i := range 5 {
				if err := write(t.Context(), f, fmt.Sprint(i), uint64(i+1), tg); err != nil {
					t.Fatal(err)
				}
			}
			// 80 bytes pending > 64: the next writer kicks a flush and waits.
			done := make(chan error, 1)
			go func() { done <- write(t.Context(), f, "x", 9, tg) }()
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("writer over the bound returned %v without waiting", err)
			default:
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !tg.isDurable("0") {
				t.Fatal("the byte-triggered flush did not run")
			}
		})
	})
	t.Run("context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tg := newMemTarget("t")
			tg.hook = func(int, uint64) error { return errInjected }
			f := New([]Target{tg}, &Options{Interval: -1, MaxPendingBytes: 16})
			write(t.Context(), f, "a", 1, tg)
			write(t.Context(), f, "b", 2, tg)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if err := write(ctx, f, "c", 3, tg); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("write = %v, want DeadlineExceeded", err)
			}
			if d := time.Since(start); d != 5*time.Second {
				t.Fatalf("waited %v, want 5s", d)
			}
			if st := f.Stats(); st.InFlight != 0 {
				t.Fatalf("writer left %d operations in the gate", st.InFlight)
			}
			if err := f.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close = %v", err)
			}
		})
	})
	t.Run("close-wakes-writers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tg := newMemTarget("t")
			tg.hook = func(int, uint64) error { return errInjected }
			f := New([]Target{tg}, &Options{Interval: -1, MaxPendingBytes: 16})
			write(t.Context(), f, "a", 1, tg)
			write(t.Context(), f, "b", 2, tg)
			errs := make(chan error, 8)
			for i := range 8 {
				go func() { errs <- write(t.Context(), f, fmt.Sprint("w", i), 3, tg) }()
			}
			synctest.Wait()
			if st := f.Stats(); st.InFlight != 8 {
				t.Fatalf("InFlight = %d, want 8 blocked writers", st.InFlight)
			}
			if err := f.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close = %v, want the final flush's error", err)
			}
			for range 8 {
				if err := <-errs; !errors.Is(err, ErrClosed) {
					t.Fatalf("blocked writer got %v, want ErrClosed", err)
				}
			}
		})
	})
}

// Contract 4: the watermark never decreases, only advances after every
// target applied, and the receipt (last target) is never applied when an
// earlier target failed.
func TestWatermarkMonotonicAndNotAhead(t *testing.T) {
	data, receipt := newMemTarget("data"), newMemTarget("receipt")
	fail := map[int]bool{2: true, 3: true, 6: true}
	data.hook = func(n int, _ uint64) error {
		if fail[n] {
			return errInjected
		}
		return nil
	}
	receipt.hook = func(_ int, wm uint64) error {
		d, _, _ := data.snapshot()
		var top uint64
		for _, v := range d {
			top = max(top, v)
		}
		if wm > top {
			t.Errorf("receipt asked to persist wm %d but data holds only up to %d", wm, top)
		}
		return nil
	}
	f := New([]Target{data, receipt}, &Options{Interval: -1, MaxPendingBytes: -1, Watermark: 0})
	defer closeOK(t, f)
	var last uint64
	for i := 1; i <= 8; i++ {
		write(t.Context(), f, fmt.Sprint(i), uint64(i), data)
		write(t.Context(), f, fmt.Sprint("r", i), uint64(i), receipt)
		err := f.Flush(t.Context())
		wm := f.Watermark()
		if wm < last {
			t.Fatalf("watermark went back from %d to %d", last, wm)
		}
		if fail[i] {
			if err == nil || wm != last {
				t.Fatalf("flush %d: err=%v wm=%d, want failure and wm %d", i, err, wm, last)
			}
		} else if err != nil || wm != uint64(i) {
			t.Fatalf("flush %d: err=%v wm=%d, want nil and %d", i, err, wm, i)
		}
		last = wm
	}
	_, _, rApplies := receipt.snapshot()
	if rApplies != 5 {
		t.Fatalf("receipt applied %d times, want 5 (never after a data failure)", rApplies)
	}
	receipt.mu.Lock()
	h := append([]uint64(nil), receipt.wmHistory...)
	receipt.mu.Unlock()
	for i := 1; i < len(h); i++ {
		if h[i] < h[i-1] {
			t.Fatalf("receipt watermark history not monotonic: %v", h)
		}
	}
}

func TestInitialWatermarkNeverLowered(t *testing.T) {
	tg := newMemTarget("t")
	f := New([]Target{tg}, &Options{Interval: -1, Watermark: 100})
	defer closeOK(t, f)
	write(t.Context(), f, "a", 5, tg)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, wm, _ := tg.snapshot(); wm != 100 || f.Watermark() != 100 {
		t.Fatalf("persisted %d / Watermark %d, want 100", wm, f.Watermark())
	}
}

func TestIntervalFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		f := New([]Target{tg}, &Options{Interval: time.Second})
		defer closeOK(t, f)
		time.Sleep(3 * time.Second) // idle: nothing pending, no Apply
		synctest.Wait()
		if _, _, n := tg.snapshot(); n != 0 {
			t.Fatalf("%d applies while idle", n)
		}
		write(t.Context(), f, "a", 1, tg)
		start := time.Now()
		// Next tick is at 4s (1s after the last idle tick at 3s).
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if tg.isDurable("a") {
			t.Fatalf("flushed before the interval (%v)", time.Since(start))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !tg.isDurable("a") {
			t.Fatal("not flushed after the interval")
		}
	})
}

func TestRetryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		var times []time.Duration
		start := time.Now()
		tg.hook = func(n int, _ uint64) error {
			times = append(times, time.Since(start))
			if n <= 5 {
				return errInjected
			}
			return nil
		}
		f := New([]Target{tg}, &Options{Interval: time.Second, RetryMin: 100 * time.Millisecond, RetryMax: 300 * time.Millisecond})
		defer closeOK(t, f)
		write(t.Context(), f, "a", 1, tg)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want := []time.Duration{1000, 1100, 1300, 1600, 1900, 2200} // ms: interval, then 100, 200, 300 (cap), 300, 300
		tg.mu.Lock()
		got := append([]time.Duration(nil), times...)
		tg.mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("apply times %v, want %v ms", got, want)
		}
		for i := range want {
			if got[i] != want[i]*time.Millisecond {
				t.Fatalf("apply times %v, want %v ms", got, want)
			}
		}
		if !tg.isDurable("a") {
			t.Fatal("not durable after retries")
		}
		if st := f.Stats(); st.Failures != 5 || st.PhysicalFlushes != 6 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

// An explicit Flush runs at once even while the loop is backing off.
func TestExplicitFlushIgnoresBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		tg.hook = func(n int, _ uint64) error {
			if n == 1 {
				return errInjected
			}
			return nil
		}
		f := New([]Target{tg}, &Options{Interval: -1, RetryMin: time.Hour})
		defer closeOK(t, f)
		write(t.Context(), f, "a", 1, tg)
		if err := f.Flush(t.Context()); !errors.Is(err, errInjected) {
			t.Fatal(err)
		}
		start := time.Now()
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("explicit Flush waited %v for the backoff", d)
		}
	})
}

func TestFlushBytesTriggersBackgroundFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newMemTarget("t")
		f := New([]Target{tg}, &Options{Interval: -1, MaxPendingBytes: 1 << 20, FlushBytes: 32})
		defer closeOK(t, f)
		for i := range 3 { // 48 bytes after the third; the fourth BeginWrite sees > 32
			write(t.Context(), f, fmt.Sprint(i), uint64(i+1), tg)
		}
		synctest.Wait()
		if tg.isDurable("0") {
			t.Fatal("flushed below FlushBytes")
		}
		write(t.Context(), f, "3", 4, tg)
		synctest.Wait()
		if !tg.isDurable("0") {
			t.Fatal("no background flush after passing FlushBytes")
		}
	})
}

func TestEmptyFlushIsSkipped(t *testing.T) {
	tg := newMemTarget("t")
	f := New([]Target{tg}, manual)
	defer closeOK(t, f)
	for range 3 {
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, n := tg.snapshot(); n != 0 {
		t.Fatalf("%d applies with nothing pending", n)
	}
	if st := f.Stats(); st.PhysicalFlushes != 0 || st.Flushes != 3 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestReadOpsDuringWrites(t *testing.T) {
	f := New(nil, manual)
	r, err := f.BeginRead()
	if err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.InFlight != 1 {
		t.Fatalf("InFlight = %d", st.InFlight)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case <-f.Done():
		t.Fatal("closed with a read in flight")
	default:
	}
	r.End()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestFlushCancelledContextDoesNotFlush(t *testing.T) {
	tg := newMemTarget("t")
	f := New([]Target{tg}, manual)
	defer closeOK(t, f)
	write(t.Context(), f, "a", 1, tg)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush = %v, want context.Canceled", err)
	}
	if st := f.Stats(); st.Flushes != 0 {
		t.Fatalf("a cancelled Flush was admitted: %+v", st)
	}
}

// Writers, flushers and Close race; every write that completed is durable
// once Close returns nil, and nothing is admitted after Close.
func TestCloseRaceStress(t *testing.T) {
	for round := range 20 {
		tg := newMemTarget("t")
		f := New([]Target{tg}, &Options{Interval: time.Millisecond, MaxPendingBytes: 4096})
		var mu sync.Mutex
		var done []string
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				for i := 0; ; i++ {
					key := fmt.Sprintf("r%d-g%d-%d", round, g, i)
					if err := write(t.Context(), f, key, uint64(i+1), tg); err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("write: %v", err)
						}
						return
					}
					mu.Lock()
					done = append(done, key)
					mu.Unlock()
					if i%4 == 0 {
						if err := f.Flush(t.Context()); err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("Flush: %v", err)
						}
					}
				}
			})
		}
		for tg.snapshotKeys() < 50 {
			runtime.Gosched()
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		mu.Lock()
		for _, k := range done {
			if !tg.isDurable(k) {
				t.Fatalf("completed write %s not durable after Close", k)
			}
		}
		mu.Unlock()
		if st := f.Stats(); st.InFlight != 0 || st.PendingBytes != 0 {
			t.Fatalf("after Close: %+v", st)
		}
	}
}
