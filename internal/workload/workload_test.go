package workload

import (
	"context"
	"errors"
	"sync"
	"testing"
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
		Write: func(g, i int) error {
			mu.Lock()
			written[[2]int{g, i}] = true
			mu.Unlock()
			return nil
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
		Durable: func(g, i int) bool {
			mu.Lock()
			defer mu.Unlock()
			return durable[[2]int{g, i}]
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
		Write: func(g, i int) error { return nil },
		Flush: func(context.Context) error { return boom },
	}
	if _, err := l.Run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	l.Write = nil
	if _, err := l.Run(t.Context()); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Run = %v, want ErrBadConfig", err)
	}
	l = FlushLoop{Goroutines: 0, PerGoroutine: 1, Write: func(int, int) error { return nil }, Flush: func(context.Context) error { return nil }}
	if _, err := l.Run(t.Context()); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Run = %v, want ErrBadConfig", err)
	}
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
	var s Result
	s.Add(Result{Writes: 10, Elapsed: time.Second})
	s.Add(Result{Writes: 10, Elapsed: time.Second})
	if s.WritesPerSec() != 10 {
		t.Fatalf("WritesPerSec = %v", s.WritesPerSec())
	}
}
