// Package workload is the one W4 harness (flush coalescing, doc/workloads.md):
// the loop of G goroutines each writing, flushing and checking that its own
// write is durable. Two targets run it: the engine through its public API
// (bench, behind kvtool bench and go test -bench ./bench), and the flusher
// alone over a file that syncs like pebble's log (internal/flush/bench_test.go, which
// cannot import bench: bench imports the engine, which imports flush).
// It also holds W6's best raw baseline for bit words, PwriteWords, shared
// by bench and the engine's own BenchmarkBitsW6 (which, inside the engine's
// package, cannot import bench either), and ProcessDiskWrites, the
// process's count of bytes written to disk that bench and bench/ycsb report
// per byte of user data.
//
// # Caveats
//
//   - The loop measures wall-clock time on whatever machine runs it; it does
//     not pin goroutines or warm caches. Compare implementations as ratios
//     within one process, not absolute figures across runs.
//   - Violations are a lower bound when Durable reads the implementation's
//     durable state after Flush returned (as both targets do): a later flush
//     that completes between the return and the check can hide a violation;
//     it can never invent one. See FlushLoop.Durable.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// FlushLoop is W4: Goroutines goroutines each loop PerGoroutine times over
// {op := Write(g, i); Flush; Durable(g, i, op); sleep Think}.
type FlushLoop struct {
	// Goroutines is the number of concurrent writers (W4's G). Must be > 0.
	Goroutines int
	// PerGoroutine is the number of write+flush iterations per goroutine.
	// Must be > 0.
	PerGoroutine int
	// Write performs the i-th write of goroutine g and returns what Durable
	// needs to check it (the op number it wrote as, or 0). Required.
	Write func(ctx context.Context, g, i int) (op uint64, err error)
	// Flush makes earlier writes durable. Required.
	Flush func(ctx context.Context) error
	// Durable, if set, is called after every Flush that returned nil and
	// reports whether write (g, i), written as op before the Flush began,
	// is durable. Each false is a coverage violation (design contract 2: a
	// Flush returned before its caller's own write was durable). It runs
	// after Flush returned, so if it reads durable state that only grows,
	// the count is a lower bound (see the package Caveats).
	Durable func(g, i int, op uint64) (bool, error)
	// Think is how long each goroutine sleeps after each iteration. Zero:
	// none.
	Think time.Duration
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

// Run runs the loop once and returns its figures. The first Write, Flush or
// Durable error stops every goroutine and is returned (wrapped with g and
// i); so is ctx's error if ctx ends first.
func (l FlushLoop) Run(ctx context.Context) (Result, error) {
	if l.Goroutines <= 0 || l.PerGoroutine <= 0 || l.Write == nil || l.Flush == nil || l.Think < 0 {
		return Result{}, fmt.Errorf("%w: %d goroutines, %d per goroutine, think %v, write set %t, flush set %t",
			ErrBadConfig, l.Goroutines, l.PerGoroutine, l.Think, l.Write != nil, l.Flush != nil)
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
			if err := l.goroutine(ctx, g, &lat[g], &viol[g]); err != nil {
				cancel(err)
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

// goroutine is goroutine g's loop.
func (l FlushLoop) goroutine(ctx context.Context, g int, lat *[]time.Duration, viol *int64) error {
	for i := range l.PerGoroutine {
		if ctx.Err() != nil {
			return nil
		}
		op, err := l.Write(ctx, g, i)
		if err != nil {
			return fmt.Errorf("workload: write g=%d i=%d: %w", g, i, err)
		}
		t0 := time.Now()
		err = l.Flush(ctx)
		*lat = append(*lat, time.Since(t0))
		if err != nil {
			return fmt.Errorf("workload: flush g=%d i=%d: %w", g, i, err)
		}
		if l.Durable != nil {
			ok, err := l.Durable(g, i, op)
			if err != nil {
				return fmt.Errorf("workload: check g=%d i=%d: %w", g, i, err)
			}
			if !ok {
				*viol++
			}
		}
		if l.Think > 0 {
			time.Sleep(l.Think)
		}
	}
	return nil
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

// Percentile returns the q-quantile of the Flush latencies (see Percentile).
func (r Result) Percentile(q float64) time.Duration {
	return time.Duration(Percentile(r.Latencies, q))
}

// Percentile returns the q-quantile (0 <= q <= 1, nearest rank: the
// smallest value with at least q of the values at or below it) of ds in
// nanoseconds, or 0 for none. ds is not modified.
func Percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q = min(max(q, 0), 1)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return float64(s[min(max(i, 0), len(s)-1)].Nanoseconds())
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
