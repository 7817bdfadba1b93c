package buffer

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// W7's bit side over the overlay (doc/workloads.md, W7/lookup-under-writes):
// W1's lookups while a writer sets bits at W7's rate and a flusher flushes
// every 10 ms, against the same lookups in other states, in one process:
//
//	go test ./internal/buffer -run '^$' -bench 'BenchmarkBitsW7$' -count 5
//
// Each b.Loop iteration runs one pass of the 1M lookups in every state, in
// rotating order, each pass timed on its own:
//
//   - no-writer: nothing pending, direct view (the W7 floor row);
//   - few-active: 500 sets pending in the active table, no sealed one,
//     no goroutine running: W7's state between two flushes (bitsw7_26);
//   - few-pending: what a flush every 10 ms at W7's rate leaves (500 sets
//     frozen into a sealed generation, 500 in the active table), and no
//     goroutine running: the read path's own cost;
//   - writer-no-flush: the writer running, no flusher (the pending sets
//     grow over the pass to about as many);
//   - writer: the writer and the flusher (Freeze, WriteLagged, Release,
//     Settle, as the engine's bits flush): W7.
//
// The writer makes 50,000 sets a second (the bit half of W7's 100,000
// writes a second), paced as W7's writer (a sleep every 64 writes), under
// the shared side of a write barrier that Freeze and Settle take
// exclusively (as the engine's). Metrics: ns per lookup of each state and
// the median (and min, max) over iterations of each state's ratio to
// no-writer.
const (
	w7BenchRate  = 50_000
	w7BenchFlush = 10 * time.Millisecond
	w7BenchFew   = 500
)

func BenchmarkBitsW7(b *testing.B) {
	w := newBenchW1(b)
	var bar sync.RWMutex
	ctx := context.Background()
	// flushAll freezes, writes and releases what is pending, then settles.
	flushAll := func() {
		bar.Lock()
		w.gen++
		g := w.b.Freeze(w.gen)
		bar.Unlock()
		if g != nil {
			if err := g.WriteLagged(ctx, w.gen); err != nil {
				b.Error(err)
				return
			}
			w.b.Release(w.gen)
		}
		bar.Lock()
		w.b.Settle()
		bar.Unlock()
	}
	next := 0 // the writer's next change (w.pending, cycled)
	set := func() {
		c := w.pending[next%len(w.pending)]
		next++
		bar.RLock()
		err := w.b.Set(c.i, c.v != ((next/len(w.pending))&1 == 1))
		bar.RUnlock()
		if err != nil {
			b.Error(err)
		}
	}
	pass := func() (time.Duration, int) {
		n := 0
		t0 := time.Now()
		for _, i := range w.lookups {
			if w.b.Get(i) {
				n++
			}
		}
		return time.Since(t0), n
	}
	// underWrites runs a pass while the writer (and, with flush, the
	// flusher) run.
	underWrites := func(flush bool) time.Duration {
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			interval := time.Second / w7BenchRate
			begin := time.Now()
			for n := 0; !stop.Load(); n++ {
				if n%64 == 0 {
					if d := time.Until(begin.Add(time.Duration(n) * interval)); d > 0 {
						time.Sleep(d)
					}
				}
				set()
			}
		})
		if flush {
			wg.Go(func() {
				tick := time.NewTicker(w7BenchFlush)
				defer tick.Stop()
				for !stop.Load() {
					<-tick.C
					flushAll()
				}
			})
		}
		d, _ := pass()
		stop.Store(true)
		wg.Wait()
		flushAll()
		return d
	}
	type row struct {
		name string
		run  func() time.Duration
	}
	rows := []row{
		{"no-writer", func() time.Duration {
			if !w.b.direct() {
				b.Fatal("not on the direct path")
			}
			d, _ := pass()
			return d
		}},
		{"few-active", func() time.Duration {
			// W7's usual state between two flushes: a few hundred bits
			// pending in the active table, no sealed one.
			for range w7BenchFew {
				set()
			}
			d, _ := pass()
			flushAll()
			return d
		}},
		{"few-pending", func() time.Duration {
			for range w7BenchFew {
				set()
			}
			bar.Lock()
			w.gen++
			g := w.b.Freeze(w.gen)
			bar.Unlock()
			for range w7BenchFew {
				set()
			}
			d, _ := pass()
			if err := g.WriteLagged(ctx, w.gen); err != nil {
				b.Fatal(err)
			}
			w.b.Release(w.gen)
			flushAll()
			return d
		}},
		{"writer-no-flush", func() time.Duration { return underWrites(false) }},
		{"writer", func() time.Duration { return underWrites(true) }},
	}
	spent := make([]time.Duration, len(rows))
	ratios := make([][]float64, len(rows))
	r := 0
	for b.Loop() {
		var dt [8]time.Duration
		for j := range rows {
			k := (r + j) % len(rows)
			dt[k] = rows[k].run()
			spent[k] += dt[k]
		}
		r++
		for k := range rows {
			ratios[k] = append(ratios[k], float64(dt[k])/float64(max(dt[0], 1)))
		}
	}
	ops := float64(max(r, 1) * len(w.lookups))
	for k, row := range rows {
		b.ReportMetric(float64(spent[k].Nanoseconds())/ops, row.name+"-ns/op")
		if k > 0 {
			b.ReportMetric(medianOf(ratios[k]), row.name+"/no-writer")
			b.ReportMetric(slices.Min(ratios[k]), row.name+"/no-writer-min")
			b.ReportMetric(slices.Max(ratios[k]), row.name+"/no-writer-max")
		}
	}
}
