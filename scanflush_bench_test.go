package kvbuf

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkScanDuringFlush is YCSB E's tail during flushes (issue 25) in
// one process: n keys of YCSB's form ("user" and a number, values of
// scanFlushValue bytes) are loaded and flushed, then 1 or 4 goroutines scan
// scanFlushLen keys from random start keys while a writer inserts new keys
// at scanFlushInserts per second (E's 5% inserts) and the engine flushes
// them on its interval. Each scan is timed in three stages, open (NewIter),
// seek (SeekGE) and steps (Next), and counted as during a flush if a
// generation was in flight (Metrics.InFlight) when it started or ended, as
// the YCSB runner counts SCAN@FLUSH, and as beside a compaction if the
// store had a flush or compaction running then (Store.BackgroundJobs). It
// reports the p50 and p99 of each stage and of the whole scan during
// flushes and outside them, and the count and p99 of the scans beside
// neither, a flush only, a compaction only, and both, in microseconds.
// Every iteration is one scan. The slowest scans during flushes are logged
// (-test.v) with their thread's CPU time and context switches, the
// process's CPU time and the GC cycles that ended meanwhile: what the scan
// waited for. The flush state is sampled every 50µs (the flusher's
// counters), the store's jobs every 1ms; lsm-poll-mean-us and
// lsm-poll-max-us are what one Store.BackgroundJobs call took (pebble's
// Metrics, which DB.Metrics, the YCSB runner's flush probe, also calls).
//
// Designs, each on its own engine, in rotating order over scanFlushRounds
// rounds: the default flush pacing, a FlushQuantum of 50µs (the flusher
// yields four times as often) and a FlushCPUPercent of 50 (it also
// sleeps). doc/bench/2026-12-07-scantail30 has the figures.
//
// KVBUF_SCANFLUSH_N sets n (default 1,000,000).
func BenchmarkScanDuringFlush(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("KVBUF_SCANFLUSH_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("KVBUF_SCANFLUSH_N=%q: want a positive count", s)
		}
		n = v
	}
	designs := []struct {
		name string
		o    Options
	}{
		{"default", Options{}},
		{"quantum50us", Options{FlushQuantum: 50 * time.Microsecond}},
		{"cpu50", Options{FlushCPUPercent: 50}},
	}
	for r := range scanFlushRounds {
		for i := range designs {
			d := designs[(i+r)%len(designs)]
			b.Run(fmt.Sprintf("round=%d/%s", r, d.name), func(b *testing.B) {
				o := d.o
				scanFlushRound(b, &o, n)
			})
		}
	}
}

// scanFlushRounds is how many rounds BenchmarkScanDuringFlush runs, each
// design once per round in rotating order.
const scanFlushRounds = 3

// scanFlushRound opens an engine with o, loads n keys and runs the scans
// on 1 and 4 goroutines.
func scanFlushRound(b *testing.B, o *Options, n int) {
	db := openT(b, filepath.Join(b.TempDir(), "engine"), o)
	defer db.Close()
	k := mustKV(b, db, "usertable")
	ctx := context.Background()
	val := make([]byte, scanFlushValue)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	for i := range n {
		if err := k.Put(ctx, scanFlushKey(uint64(i)), val, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	settle(db.store.LSM)
	for _, threads := range []int{1, 4} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			scanDuringFlush(b, db, k, &n, threads, val)
		})
	}
}

const (
	scanFlushValue   = 1000 // YCSB's ten 100-byte fields
	scanFlushInserts = 1500 // E's 5% inserts at about 30k operations per second
	scanFlushLen     = 50
)

// scanFlushKey is YCSB's key of record i (hashed insert order).
func scanFlushKey(i uint64) []byte {
	h := i * 0x9e3779b97f4a7c15
	h ^= h >> 29
	return fmt.Appendf(nil, "user%019d", h)
}

// scanTimes is one scan's stages and what ran beside it.
type scanTimes struct {
	open, seek, steps time.Duration
	maxNext           time.Duration // the slowest step
	cpu, procCPU      time.Duration // the scanning thread's, the process's
	vcsw, ivcsw       int64         // the thread's context switches: voluntary, involuntary
	gc                uint64        // GC cycles that ended
	waits             uint64        // goroutines of the process that waited at least scanFlushLongWait for a processor
	pauses            uint64        // stop-the-world pauses of the GC
	mutex             time.Duration // the process's goroutines' time blocked on sync.Mutex and RWMutex
	flush, compact    bool
}

func (s scanTimes) total() time.Duration { return s.open + s.seek + s.steps }

// scanFlushLongWait is the scheduling latency counted as a long wait for a
// processor; scanFlushSlow a slow scan.
const (
	scanFlushLongWait = 500e-6 // seconds
	scanFlushSlow     = time.Millisecond
)

// histAbove returns the count of a runtime/metrics histogram's samples in
// buckets that start at or above min.
func histAbove(s metrics.Sample, min float64) uint64 {
	h := s.Value.Float64Histogram()
	var n uint64
	for i, c := range h.Counts {
		if h.Buckets[i] >= min {
			n += c
		}
	}
	return n
}

// rusage is the CPU time and context switches of the calling thread (who =
// RUSAGE_THREAD) or the process.
func rusage(who int) (cpu time.Duration, vcsw, ivcsw int64) {
	var ru unix.Rusage
	_ = unix.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw, ru.Nivcsw
}

func scanDuringFlush(b *testing.B, db *DB, k *KV, n *int, threads int, val []byte) {
	var inFlush, compacting, stop atomic.Bool
	var wg sync.WaitGroup
	var polls int
	var pollTime, pollMax time.Duration
	wg.Go(func() { // the flush state, sampled more often than the YCSB runner's DB.Metrics (1ms), and cheaper
		for i := 0; !stop.Load(); i++ {
			inFlush.Store(db.flusher.Stats().InFlight > 0)
			if i%20 == 0 {
				t0 := time.Now()
				compacting.Store(db.store.BackgroundJobs() > 0)
				d := time.Since(t0)
				polls, pollTime, pollMax = polls+1, pollTime+d, max(pollMax, d)
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	next := uint64(*n)
	wg.Go(func() { // the inserts, paced per millisecond
		t0 := time.Now()
		done := 0
		for !stop.Load() {
			due := int(time.Since(t0) * scanFlushInserts / time.Second)
			for ; done < due; done++ {
				if err := k.Put(context.Background(), scanFlushKey(next), val, 0); err != nil {
					b.Error(err)
					return
				}
				next++
			}
			time.Sleep(time.Millisecond)
		}
	})
	var left atomic.Int64
	left.Store(int64(b.N))
	res := make([][]scanTimes, threads)
	b.ResetTimer()
	var sc sync.WaitGroup
	for g := range threads {
		sc.Go(func() {
			runtime.LockOSThread() // for the thread's CPU time
			defer runtime.UnlockOSThread()
			ms := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/latencies:seconds"},
				{Name: "/sched/pauses/total/gc:seconds"}, {Name: "/sync/mutex/wait/total:seconds"}}
			rng := rand.New(rand.NewPCG(uint64(g), 30))
			for left.Add(-1) >= 0 {
				start := scanFlushKey(rng.Uint64N(uint64(*n)))
				f, cm := inFlush.Load(), compacting.Load()
				metrics.Read(ms)
				gc0 := ms[0].Value.Uint64()
				lat0, pause0 := histAbove(ms[1], scanFlushLongWait), histAbove(ms[2], 0)
				mu0 := ms[3].Value.Float64()
				c0, v0, i0 := rusage(unix.RUSAGE_THREAD)
				p0, _, _ := rusage(unix.RUSAGE_SELF)
				t0 := time.Now()
				it, err := k.NewIter(nil)
				if err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				ok := it.SeekGE(start)
				t2 := time.Now()
				var maxNext time.Duration
				for i := 1; ok && i < scanFlushLen; i++ {
					tn := time.Now()
					ok = it.Next()
					maxNext = max(maxNext, time.Since(tn))
				}
				if err := it.Close(); err != nil {
					b.Error(err)
					return
				}
				t3 := time.Now()
				c1, v1, i1 := rusage(unix.RUSAGE_THREAD)
				p1, _, _ := rusage(unix.RUSAGE_SELF)
				metrics.Read(ms)
				res[g] = append(res[g], scanTimes{
					open: t1.Sub(t0), seek: t2.Sub(t1), steps: t3.Sub(t2), maxNext: maxNext,
					cpu: c1 - c0, procCPU: p1 - p0, vcsw: v1 - v0, ivcsw: i1 - i0,
					gc:    ms[0].Value.Uint64() - gc0,
					waits: histAbove(ms[1], scanFlushLongWait) - lat0, pauses: histAbove(ms[2], 0) - pause0,
					mutex: time.Duration((ms[3].Value.Float64() - mu0) * 1e9),
					flush: f || inFlush.Load(), compact: cm || compacting.Load(),
				})
			}
		})
	}
	sc.Wait()
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	*n = int(next)
	if polls > 0 {
		b.ReportMetric(float64(pollTime/time.Duration(polls))/1e3, "lsm-poll-mean-us")
		b.ReportMetric(float64(pollMax)/1e3, "lsm-poll-max-us")
	}
	scanFlushReport(b, slices.Concat(res...))
}

func scanFlushReport(b *testing.B, all []scanTimes) {
	q := func(in func(scanTimes) bool, f func(scanTimes) time.Duration, p float64) float64 {
		var ds []time.Duration
		for _, s := range all {
			if in(s) {
				ds = append(ds, f(s))
			}
		}
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))]) / 1e3
	}
	stages := []struct {
		name string
		f    func(scanTimes) time.Duration
	}{
		{"scan", scanTimes.total},
		{"open", func(s scanTimes) time.Duration { return s.open }},
		{"seek", func(s scanTimes) time.Duration { return s.seek }},
		{"steps", func(s scanTimes) time.Duration { return s.steps }},
	}
	nf := 0
	for _, s := range all {
		if s.flush {
			nf++
		}
	}
	b.ReportMetric(float64(nf), "flush-scans")
	for _, st := range stages {
		for _, in := range []bool{false, true} {
			where := "out"
			if in {
				where = "flush"
			}
			sel := func(s scanTimes) bool { return s.flush == in }
			b.ReportMetric(q(sel, st.f, 0.5), st.name+"-"+where+"-p50-us")
			b.ReportMetric(q(sel, st.f, 0.99), st.name+"-"+where+"-p99-us")
		}
	}
	for _, c := range []struct {
		name           string
		flush, compact bool
	}{{"none", false, false}, {"flushonly", true, false}, {"compactonly", false, true}, {"both", true, true}} {
		sel := func(s scanTimes) bool { return s.flush == c.flush && s.compact == c.compact }
		k := 0
		for _, s := range all {
			if sel(s) {
				k++
			}
		}
		b.ReportMetric(float64(k), "n-"+c.name)
		b.ReportMetric(q(sel, scanTimes.total, 0.99), "scan-"+c.name+"-p99-us")
	}
	// What the slow scans during flushes coincided with: a goroutine's
	// long wait for a processor, a GC pause, a GC cycle's end, mutex waits.
	var slowN, withWait, withPause, withGC, withMutex int
	for _, s := range all {
		if s.flush && s.total() >= scanFlushSlow {
			slowN++
			withWait += b2i(s.waits > 0)
			withPause += b2i(s.pauses > 0)
			withGC += b2i(s.gc > 0)
			withMutex += b2i(s.mutex > 100*time.Microsecond)
		}
	}
	b.ReportMetric(float64(slowN), "slow-flush-scans")
	b.ReportMetric(float64(withWait), "slow-with-sched-wait")
	b.ReportMetric(float64(withPause), "slow-with-gc-pause")
	b.ReportMetric(float64(withGC), "slow-with-gc-end")
	b.ReportMetric(float64(withMutex), "slow-with-mutex-wait")
	slow := slices.Clone(all)
	slices.SortFunc(slow, func(a, c scanTimes) int { return cmp.Compare(c.total(), a.total()) })
	shown := 0
	for _, s := range slow {
		if !s.flush {
			continue
		}
		if shown++; shown > 12 {
			break
		}
		b.Logf("slow scan during a flush: compaction=%v total=%v open=%v seek=%v steps=%v slowest step=%v thread cpu=%v process cpu=%v csw=%d+%d gcs=%d gc-pauses=%d long-sched-waits=%d mutex-wait=%v",
			s.compact, s.total(), s.open, s.seek, s.steps, s.maxNext, s.cpu, s.procCPU, s.vcsw, s.ivcsw, s.gc, s.pauses, s.waits, s.mutex)
	}
}
