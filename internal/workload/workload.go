// Package workload holds reusable benchmark harnesses for the workloads in
// doc/workloads.md, so that `go test -bench` functions and `kvtool bench`
// run exactly the same loops.
//
// # Caveats
//
// The harnesses measure wall-clock time on whatever machine runs them; they
// do not pin goroutines or warm caches. Compare implementations as ratios
// within one process, not absolute figures across runs.
package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// FlushLoop is W4: Goroutines goroutines each loop PerGoroutine times over
// {Write(g, i); Flush(ctx)}.
type FlushLoop struct {
	// Goroutines is the number of concurrent writers (W4's G). Must be > 0.
	Goroutines int
	// PerGoroutine is the number of write+flush iterations per goroutine.
	// Must be > 0.
	PerGoroutine int
	// Write performs the i-th write of goroutine g. Required.
	Write func(g, i int) error
	// Flush makes earlier writes durable. Required.
	Flush func(ctx context.Context) error
	// Durable, if set, is called after every Flush that returned nil and
	// reports whether write (g, i) — the caller's own write that completed
	// before the Flush — is durable. Each false is a coverage violation
	// (design contract 2).
	Durable func(g, i int) bool
}

// Result holds the figures of one or more FlushLoop runs.
type Result struct {
	Writes     int64
	Flushes    int64
	Violations int64
	Elapsed    time.Duration
	// Latencies are the durations of every Flush call, unsorted.
	Latencies []time.Duration
}

// ErrBadConfig is returned by Run for a FlushLoop with a missing function or
// a non-positive count.
var ErrBadConfig = errors.New("workload: bad configuration")

// Run runs the loop once and returns its figures. The first Write or Flush
// error stops every goroutine and is returned (wrapped with g and i).
func (l FlushLoop) Run(ctx context.Context) (Result, error) {
	if l.Goroutines <= 0 || l.PerGoroutine <= 0 || l.Write == nil || l.Flush == nil {
		return Result{}, fmt.Errorf("%w: %+v", ErrBadConfig, l)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lat := make([][]time.Duration, l.Goroutines)
	viol := make([]int64, l.Goroutines)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range l.Goroutines {
		lat[g] = make([]time.Duration, 0, l.PerGoroutine)
		wg.Go(func() {
			for i := range l.PerGoroutine {
				if ctx.Err() != nil {
					return
				}
				if err := l.Write(g, i); err != nil {
					cancel(fmt.Errorf("workload: write g=%d i=%d: %w", g, i, err))
					return
				}
				t0 := time.Now()
				err := l.Flush(ctx)
				lat[g] = append(lat[g], time.Since(t0))
				if err != nil {
					cancel(fmt.Errorf("workload: flush g=%d i=%d: %w", g, i, err))
					return
				}
				if l.Durable != nil && !l.Durable(g, i) {
					viol[g]++
				}
			}
		})
	}
	wg.Wait()
	r := Result{Elapsed: time.Since(start)}
	for g := range l.Goroutines {
		r.Flushes += int64(len(lat[g]))
		r.Writes += int64(len(lat[g]))
		r.Violations += viol[g]
		r.Latencies = append(r.Latencies, lat[g]...)
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return r, err
	}
	return r, ctx.Err()
}

// Add merges o into r (for accumulating benchmark rounds).
func (r *Result) Add(o Result) {
	r.Writes += o.Writes
	r.Flushes += o.Flushes
	r.Violations += o.Violations
	r.Elapsed += o.Elapsed
	r.Latencies = append(r.Latencies, o.Latencies...)
}

// WritesPerSec is writes (each followed by a successful Flush) per second of
// wall time.
func (r Result) WritesPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Writes) / r.Elapsed.Seconds()
}

// Percentile returns the q-quantile (0 <= q <= 1, nearest rank) of the
// Flush latencies, or 0 if there are none.
func (r Result) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.Latencies)
	slices.Sort(s)
	q = min(max(q, 0), 1)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Report passes the figures to report (testing.B.ReportMetric fits) as
// writes/s, p50-flush-ns, p99-flush-ns and, if any Flush was checked,
// violations.
func (r Result) Report(report func(n float64, unit string), checked bool) {
	report(r.WritesPerSec(), "writes/s")
	report(float64(r.Percentile(0.50).Nanoseconds()), "p50-flush-ns")
	report(float64(r.Percentile(0.99).Nanoseconds()), "p99-flush-ns")
	if checked {
		report(float64(r.Violations), "violations")
	}
}
