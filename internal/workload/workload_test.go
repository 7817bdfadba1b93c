package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFlushLoopCounts(t *testing.T) {
	var mu sync.Mutex
	written := map[[2]int]bool{}
	durable := map[[2]int]bool{}
	l := FlushLoop{
		Goroutines:   4,
		PerGoroutine: 10,
		Write: func(_ context.Context, g, i int) (uint64, error) {
			mu.Lock()
			written[[2]int{g, i}] = true
			mu.Unlock()
			return uint64(g*100 + i), nil
		},
		Flush: func(context.Context) error {
			mu.Lock()
			for k := range written {
				if k[1]%2 == 0 { // odd writes never become durable
					durable[k] = true
				}
			}
			mu.Unlock()
			return nil
		},
		Durable: func(g, i int, op uint64) (bool, error) {
			if op != uint64(g*100+i) {
				return false, fmt.Errorf("write (%d, %d) checked with op %d", g, i, op)
			}
			mu.Lock()
			defer mu.Unlock()
			return durable[[2]int{g, i}], nil
		},
	}
	r, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.Writes != 40 || r.Flushes != 40 || len(r.Latencies) != 40 {
		t.Fatalf("counts %+v", r)
	}
	if r.Violations != 20 {
		t.Fatalf("Violations = %d, want 20", r.Violations)
	}
	var got []string
	r.Report(func(_ float64, unit string) { got = append(got, unit) }, true)
	if len(got) != 4 {
		t.Fatalf("reported %v", got)
	}
}

func TestFlushLoopError(t *testing.T) {
	boom := errors.New("boom")
	l := FlushLoop{Goroutines: 3, PerGoroutine: 100,
		Write: func(context.Context, int, int) (uint64, error) { return 0, nil },
		Flush: func(context.Context) error { return boom },
	}
	if _, err := l.Run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	l.Write = nil
	if _, err := l.Run(t.Context()); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Run = %v, want ErrBadConfig", err)
	}
	ok := func(context.Context, int, int) (uint64, error) { return 0, nil }
	nop := func(context.Context) error { return nil }
	for _, bad := range []FlushLoop{
		{Goroutines: 0, PerGoroutine: 1, Write: ok, Flush: nop},
		{Goroutines: 1, PerGoroutine: 0, Write: ok, Flush: nop},
		{Goroutines: 1, PerGoroutine: 1, Write: ok},
		{Goroutines: 1, PerGoroutine: 1, Write: ok, Flush: nop, Think: -1},
	} {
		if _, err := bad.Run(t.Context()); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Run(%+v) = %v, want ErrBadConfig", bad, err)
		}
	}
	checkErr := FlushLoop{Goroutines: 2, PerGoroutine: 5, Write: ok, Flush: nop,
		Durable: func(int, int, uint64) (bool, error) { return false, boom }}
	if _, err := checkErr.Run(t.Context()); !errors.Is(err, boom) {
		t.Errorf("Durable error: Run = %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if r, err := (FlushLoop{Goroutines: 2, PerGoroutine: 5, Write: ok, Flush: nop}).Run(ctx); !errors.Is(err, context.Canceled) || r.Flushes != 0 {
		t.Errorf("cancelled: Run = %+v, %v", r, err)
	}
}

// TestFlushLoopThink checks the think time on synctest's fake clock: each
// goroutine sleeps after each of its iterations, and sleeps are not Flush
// latency.
func TestFlushLoopThink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		think := time.Millisecond
		l := FlushLoop{Goroutines: 2, PerGoroutine: 3, Think: think,
			Write: func(context.Context, int, int) (uint64, error) { return 0, nil },
			Flush: func(context.Context) error { time.Sleep(time.Microsecond); return nil }}
		r, err := l.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if want := 3 * (think + time.Microsecond); r.Elapsed != want {
			t.Errorf("3 iterations with %v think took %v, want %v", think, r.Elapsed, want)
		}
		if r.Percentile(1) != time.Microsecond {
			t.Errorf("slowest Flush %v, want 1µs", r.Percentile(1))
		}
	})
}

func TestPercentile(t *testing.T) {
	var r Result
	if r.Percentile(0.5) != 0 || r.WritesPerSec() != 0 {
		t.Fatal("empty result not zero")
	}
	for i := 1; i <= 100; i++ {
		r.Latencies = append(r.Latencies, time.Duration(101-i))
	}
	if p := r.Percentile(0.5); p != 50 {
		t.Fatalf("p50 = %d", p)
	}
	if p := r.Percentile(0.99); p != 99 {
		t.Fatalf("p99 = %d", p)
	}
	if p := r.Percentile(2); p != 100 {
		t.Fatalf("p200 = %d", p)
	}
	if r.Latencies[0] != 100 {
		t.Fatal("Percentile sorted its input")
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {0.999, 100}, {1, 100}, {0, 1}} {
		if got := Percentile(r.Latencies, tc.q); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	var s Result
	s.Add(Result{Writes: 10, Elapsed: time.Second})
	s.Add(Result{Writes: 10, Elapsed: time.Second})
	if s.WritesPerSec() != 10 {
		t.Fatalf("WritesPerSec = %v", s.WritesPerSec())
	}
}
