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
	w, g, nw := sealedW6Table(b)
	t := g.tables[0]
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

// BenchmarkBitsWalkSync times the flush's walk and its sync together
// (applyPages, then SyncLagged, as BitsGen.WriteLagged does), over the
// workload of BenchmarkBitsWalk, in six variants of the writeback helper,
// one round of each per iteration in rotating order: the helper handed
// each run of 8 pages (h8, main's before bitsflush19), or runs of at
// least 16, 32, 64 or 128 pages (h16 ... h128; W6's file has 128 pages,
// so h128 hands it everything once the walk is over), each joined before
// the sync; and h8 joined after the sync, the helper starting its last
// ranges while the sync runs (h8-overlap). (Revision cd4d23b also had
// h8-drop, h32-drop and h64-drop: joined after the sync, the ranges the
// helper had not started left to the sync.) Metrics: each variant's
// median wall time of a walk and sync (h8-ns, ...) and the median of the
// per-round ratios h8 ÷ the variant (h8/h16, ...; above 1: the variant is
// faster).
func BenchmarkBitsWalkSync(b *testing.B) {
	w, g, nw := sealedW6Table(b)
	t := g.tables[0]
	ctx := context.Background()
	const (
		before = iota
		overlap
	)
	variants := []struct {
		name  string
		pages uint64
		join  int
	}{
		{"h8", 8, before}, {"h16", 16, before}, {"h32", 32, before}, {"h64", 64, before},
		{"h128", 128, before}, {"h8-overlap", 8, overlap},
	}
	times := make([][]float64, len(variants))
	ratios := make([][]float64, len(variants))
	wm := uint64(1 << 40)
	round := 0
	for b.Loop() {
		d := make([]time.Duration, len(variants))
		for k := range variants {
			i := (k + round) % len(variants)
			v := variants[i]
			wm++
			w.b.wmu.Lock()
			t0 := time.Now()
			wb := w.b.startWriteback()
			wb.handoff = v.pages * pageWords64
			err := w.b.applyPages(ctx, t, nw, wb)
			if v.join == before {
				wb.join()
			}
			if err == nil {
				w.b.fio.SetWatermark(wm)
				err = w.b.fio.SyncLagged()
			}
			if v.join != before {
				wb.join()
			}
			d[i] = time.Since(t0)
			w.b.wmu.Unlock()
			if err != nil {
				b.Fatal(err)
			}
		}
		round++
		for k := range variants {
			times[k] = append(times[k], float64(d[k].Nanoseconds()))
			ratios[k] = append(ratios[k], float64(d[0])/float64(d[k]))
		}
	}
	for k, v := range variants {
		b.ReportMetric(medianOf(times[k]), v.name+"-ns")
		if k > 0 {
			b.ReportMetric(medianOf(ratios[k]), "h8/"+v.name)
		}
	}
	if err := g.Write(ctx, wm+1); err != nil {
		b.Fatal(err)
	}
	w.b.Release(w.gen)
	w.b.Settle()
}

// sealedW6Table is the walk benchmarks' setup: W1's bitslice with W6's 1M
// pending sets frozen in generation g, one sealed table of nw words.
func sealedW6Table(b *testing.B) (w *benchW1, g *BitsGen, nw uint64) {
	w = newBenchW1(b)
	idx := make([]uint64, len(w.pending))
	vals := make([]bool, len(idx))
	for k, c := range w.pending {
		idx[k], vals[k] = c.i, c.v
	}
	if err := w.b.SetMany(idx, vals); err != nil {
		b.Fatal(err)
	}
	w.gen++
	g = w.b.Freeze(w.gen)
	if g == nil || len(g.tables) != 1 {
		b.Fatal("want one sealed table")
	}
	return w, g, (g.tables[0].hi.Load() + 63) >> 6
}
