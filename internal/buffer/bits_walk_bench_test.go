package buffer

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// BenchmarkBitsWalk times the flush's walk alone (applyPages: the new
// words of every page from the packed ones and the file's, their pwrites,
// the writeback helper and the summary of the pages written) over W6's
// 1M random sets pending in one sealed table of a 4M-bit file, the
// workload of BenchmarkBitsW6's flush (issue 26). The walk is idempotent,
// so every iteration applies the same table again: the same words, the
// same pwrites, each after a sync of the last (untimed, as the
// flush's sync precedes the next flush). Metrics per walk: walk-ns (wall),
// walk-thread-cpu-ns (the CPU time of the walk's own thread: its path on
// a quiet machine) and walk-process-cpu-ns (every thread's, the writer
// goroutine's included).
func BenchmarkBitsWalk(b *testing.B) {
	w := newBenchW1(b)
	idx := make([]uint64, len(w.pending))
	vals := make([]bool, len(idx))
	for k, c := range w.pending {
		idx[k], vals[k] = c.i, c.v
	}
	if err := w.b.SetMany(idx, vals); err != nil {
		b.Fatal(err)
	}
	w.gen++
	g := w.b.Freeze(w.gen)
	if g == nil || len(g.tables) != 1 {
		b.Fatal("want one sealed table")
	}
	t := g.tables[0]
	nw := (t.hi.Load() + 63) >> 6
	ctx := context.Background()
	var walk, walkCPU, procCPU time.Duration
	n := 0
	runtime.LockOSThread() // the thread's CPU time is the walk's goroutine's
	defer runtime.UnlockOSThread()
	for b.Loop() {
		w.b.wmu.Lock()
		c0, _ := threadCPU()
		p0, _ := processCPU()
		t0 := time.Now()
		wb := w.b.startWriteback()
		err := w.b.applyPages(ctx, t, nw, wb)
		wb.join()
		walk += time.Since(t0)
		c1, _ := threadCPU()
		p1, _ := processCPU()
		walkCPU += c1 - c0
		procCPU += p1 - p0
		n++
		if err == nil {
			// As after a flush: no writeback of this walk's pages left
			// for the next one's pwrites to wait on.
			err = w.b.fio.Sync()
		}
		w.b.wmu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(walk.Nanoseconds())/float64(max(n, 1)), "walk-ns")
	b.ReportMetric(float64(walkCPU.Nanoseconds())/float64(max(n, 1)), "walk-thread-cpu-ns")
	b.ReportMetric(float64(procCPU.Nanoseconds())/float64(max(n, 1)), "walk-process-cpu-ns")
	if err := g.Write(ctx, w.gen); err != nil {
		b.Fatal(err)
	}
	w.b.Release(w.gen)
	w.b.Settle()
}
