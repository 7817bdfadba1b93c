package kvbuf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkW8Watch measures what a watch costs W8's writer (doc/workloads.md:
// ops of 64 puts applied as one Batch, durable at the end of the round):
// the same round on a fresh engine without a watch ("none"), with one
// visible-mode watch ("visible") and with one durable-mode watch
// ("durable") read by a subscriber goroutine, and without a watch but with
// every change retained in the store ("retain": Options.WatchRetain with
// defaults), in rotating order, b.N rounds each. A round is timed from the first
// Apply until Flush returned and, with a watch, the subscriber received
// the resolved mark of the last op (all of the feed's work is timed). It
// reports the per-put time of each mode (medians of the rounds), the
// ratios of the watched modes to the unwatched one (medians of per-round
// ratios, with their spread), each watched mode's tail (tail-ms: the
// median over rounds of the wait for the last mark after Flush returned,
// the part of a round that only the watch makes), the ratios of the
// process CPU time of each watched round to the unwatched one's
// (cpu-ratio-MODE, medians of per-round ratios: every goroutine's work,
// the flusher's and the store's included, and on a loaded machine
// steadier than the wall-time ratios, since a round waiting for a core
// uses no CPU meanwhile), and the durable-mode delivery latency: for
// every op, from its Apply's return to the durable resolved mark that
// covers it, p50 and p99 over every round, beside the flush interval,
// and its two parts: from the Apply to the persisted watermark reaching
// the op (watermark-p99-ms: the engine's own durability latency, which no
// feed can beat) and from there to the mark's delivery, the feed's own
// part (after-watermark-p99-ms; after-watermark-stamped is the share of
// ops it covers: an op whose mark arrived before the watermark's arrival
// was stamped is left out). The subscriber reads with Watch.NextMany,
// 256 events a call, where the Watch has it (KVBUF_WATCH_NEXT=one: with
// Next, as before it), or with Watch.NextEvents where w8Lend is set
// (KVBUF_WATCH_NEXT=many: with NextMany); however it reads, it sums every
// put's key and value (w8Sum) and the round fails unless the sum is the
// writer's, so that every way of reading does a consumer's work. With
// KVBUF_W8_WORK=count it counts the puts instead (w8Counting: a put counts
// if its key and value have W8's lengths, and the round fails unless every
// one counted), as the rounds before the sum looked at kinds only:
// its after-watermark figure is the feed's delivery without the host's
// work on each change.
//
//	go test -run '^$' -bench BenchmarkW8Watch -benchtime 8x .
func BenchmarkW8Watch(b *testing.B) {
	const (
		ops      = 2000
		batch    = 64
		interval = 50 * time.Millisecond
	)
	modes := []string{"none", "visible", "durable", "retain"}
	if os.Getenv("KVBUF_W8_WORK") == "count" {
		w8Counting = true
		defer func() { w8Counting = false }()
	}
	if m := os.Getenv("KVBUF_WATCH_MODES"); m != "" {
		modes = strings.Split(m, ",") // profiling one mode; "none" first
	}
	perPut := map[string][]float64{}
	ratios := map[string][]float64{}
	cpuRatios := map[string][]float64{}
	var lat, feedLat, wmLat []time.Duration
	tails := map[string][]float64{}
	val := make([]byte, 16)
	for round := 0; round < b.N; round++ {
		t := map[string]time.Duration{}
		cpu := map[string]time.Duration{}
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			d, tail, l, fl, wl, c := w8WatchRound(b, mode, ops, batch, interval, val)
			cpu[mode] = c
			tails[mode] = append(tails[mode], float64(tail.Microseconds())/1000)
			feedLat = append(feedLat, fl...)
			wmLat = append(wmLat, wl...)
			t[mode] = d
			perPut[mode] = append(perPut[mode], float64(d.Nanoseconds())/(ops*batch))
			lat = append(lat, l...)
		}
		for _, m := range modes[1:] {
			ratios[m] = append(ratios[m], float64(t[m])/float64(t["none"]))
			if cpu["none"] > 0 {
				cpuRatios[m] = append(cpuRatios[m], float64(cpu[m])/float64(cpu["none"]))
			}
		}
	}
	reportModes(b, modes, perPut, ratios)
	for _, m := range modes[1:] {
		if r := cpuRatios[m]; len(r) > 0 {
			b.ReportMetric(median(r), "cpu-ratio-"+m)
		}
		if m == "visible" || m == "durable" {
			b.ReportMetric(median(tails[m]), "tail-ms-"+m)
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "durable-p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "durable-p99-ms")
		b.ReportMetric(float64(interval.Milliseconds()), "interval-ms")
	}
	if len(feedLat) > 0 {
		slices.Sort(feedLat)
		b.ReportMetric(float64(feedLat[len(feedLat)*99/100].Microseconds())/1000, "after-watermark-p99-ms")
		slices.Sort(wmLat)
		b.ReportMetric(float64(wmLat[len(wmLat)*99/100].Microseconds())/1000, "watermark-p99-ms")
	}
	if len(lat) > 0 {
		// The share of durable ops in the after-watermark figure: an op
		// whose mark came before the goroutine stamping the watermark's
		// arrival ran is left out of it, so a feed that wakes its
		// subscriber ahead of that goroutine biases the figure down.
		b.ReportMetric(float64(len(feedLat))/float64(len(lat)), "after-watermark-stamped")
	}
	b.ReportMetric(0, "ns/op")
}

// fillW8Batch resets bt to op's W8 batch: batch puts of unique 8-byte keys
// (a multiplicative hash of the put's number) in k, each valued op.
func fillW8Batch(bt *Batch, k *KV, key, val []byte, op, batch int) {
	bt.Reset()
	for j := range batch {
		binary.BigEndian.PutUint64(key, uint64(op*batch+j)*0x9e3779b97f4a7c15)
		binary.BigEndian.PutUint64(val, uint64(op))
		bt.Put(k, key, val)
	}
}

// w8Counting is KVBUF_W8_WORK=count: W8's subscriber counts the puts it
// reads (w8Work is 1 for each whose key and value have W8's lengths, 8
// and 16 bytes) instead of summing their keys and values.
var w8Counting bool

// w8Work is what W8's subscriber does with each put's key and value:
// w8Sum of each, or 1 where w8Counting (a branch taken the same way every
// time, not a call through a variable, so that the sum costs what it did).
func w8Work(key, val []byte) uint64 {
	if w8Counting {
		if len(key) == 8 && len(val) == 16 {
			return 1
		}
		return 0
	}
	return w8Sum(key) + w8Sum(val)
}

// w8Want is the writer's side of w8Work for op's batch of batch puts.
func w8Want(op, batch int) uint64 {
	if w8Counting {
		return uint64(batch)
	}
	return w8BatchSum(op, batch)
}

// w8Sum is what W8's subscriber does with an event's key and value: a
// sum of their 8-byte words (and of a tail's bytes), so that every byte
// is read.
func w8Sum(p []byte) uint64 {
	var s uint64
	for len(p) >= 8 {
		s += binary.LittleEndian.Uint64(p)
		p = p[8:]
	}
	for _, c := range p {
		s += uint64(c)
	}
	return s
}

// w8BatchSum is the w8Sum of the keys and values of the puts of op's
// batch (fillW8Batch's), as a subscriber sums them: the writer's side of
// the check.
func w8BatchSum(op, batch int) uint64 {
	var s uint64
	key, val := make([]byte, 8), make([]byte, 16)
	for j := range batch {
		binary.BigEndian.PutUint64(key, uint64(op*batch+j)*0x9e3779b97f4a7c15)
		binary.BigEndian.PutUint64(val, uint64(op))
		s += w8Sum(key) + w8Sum(val)
	}
	return s
}

// w8Lend, where set, is W8's subscriber reading with Watch.NextEvents: it
// adds the w8Work of every put's key and value to *sum, calls mark for
// every resolved mark, and returns nil once mark returned true (or the
// watch's error). A variable, so that this file builds with revisions
// before NextEvents (scripts/watch-ab.sh's overlay).
var w8Lend func(ctx context.Context, w *Watch, sum *uint64, mark func(op uint64) bool) error

// median returns the median of v (the upper one of an even count), leaving
// v as it was.
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// reportModes reports, for benchmarks that run every mode once a round in
// rotating order, each mode's median time per put and, for every mode but
// the first (the reference), the median, min and max of its per-round
// time ratio to the first.
func reportModes(b *testing.B, modes []string, perPut, ratios map[string][]float64) {
	for _, m := range modes {
		b.ReportMetric(median(perPut[m]), "ns/put-"+m)
	}
	for _, m := range modes[1:] {
		r := ratios[m]
		b.ReportMetric(median(r), "ratio-"+m)
		b.ReportMetric(slices.Min(r), "ratio-"+m+"-min")
		b.ReportMetric(slices.Max(r), "ratio-"+m+"-max")
	}
}

// w8WatchRound runs one round on a fresh engine and returns its time, the
// part of it after the final Flush returned (the wait for the watch's last
// mark), in durable mode each op's delivery latency, the part of it after
// the watermark reached the op, and the part before, and the process CPU
// time the round took (0 where processCPU cannot tell).
func w8WatchRound(b *testing.B, mode string, ops, batch int, interval time.Duration, val []byte) (time.Duration, time.Duration, []time.Duration, []time.Duration, []time.Duration, time.Duration) {
	b.StopTimer()
	opts := &Options{FlushInterval: interval}
	if mode == "retain" {
		opts.WatchRetain = &WatchRetention{}
	}
	db, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	k, err := db.KV("w8")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var want, got uint64 // w8Sum of every put's key and value: written, read
	applied := make([]time.Time, ops+1)
	var mu sync.Mutex
	var lat, feedLat, wmLat []time.Duration
	var wmAt []time.Time // when the persisted watermark first reached each op
	var w *Watch
	var done chan error
	if mode == "visible" || mode == "durable" {
		if w, err = db.Watch(ctx, &WatchOptions{Durable: mode == "durable"}); err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		done = make(chan error, 1)
		if mode == "durable" {
			wmAt = make([]time.Time, ops+1)
			wmDone, wmStop := make(chan struct{}), make(chan struct{})
			defer func() { close(wmStop); <-wmDone }()
			go func() {
				defer close(wmDone)
				var seen uint64
				for seen < uint64(ops) {
					wm, ch := db.WatermarkNotify()
					now := time.Now()
					mu.Lock()
					for o := seen + 1; o <= wm && o <= uint64(ops); o++ {
						wmAt[o] = now
					}
					mu.Unlock()
					seen = max(seen, wm)
					select {
					case <-ch:
					case <-wmStop:
						return
					}
				}
			}()
		}
		go func() {
			var seen uint64
			// mark handles a resolved mark; true once it is the last op's.
			mark := func(e *WatchEvent) bool {
				if mode == "durable" {
					now := time.Now()
					mu.Lock()
					for o := seen + 1; o <= e.Op && o <= uint64(ops); o++ {
						lat = append(lat, now.Sub(applied[o]))
						if !wmAt[o].IsZero() {
							feedLat = append(feedLat, now.Sub(wmAt[o]))
							wmLat = append(wmLat, wmAt[o].Sub(applied[o]))
						}
					}
					mu.Unlock()
				}
				seen = max(seen, e.Op)
				return e.Op >= uint64(ops)
			}
			how := os.Getenv("KVBUF_WATCH_NEXT")
			if w8Lend != nil && how == "" {
				done <- w8Lend(ctx, w, &got, func(op uint64) bool {
					return mark(&WatchEvent{Kind: EventResolved, Op: op})
				})
				return
			}
			if nm, ok := any(w).(nextManyer); ok && how != "one" {
				evs := make([]WatchEvent, 0, 256)
				for {
					var err error
					if evs, err = nm.NextMany(ctx, evs[:0]); err != nil {
						done <- err
						return
					}
					for i := range evs {
						if e := &evs[i]; e.Kind == EventResolved {
							if mark(e) {
								done <- nil
								return
							}
						} else {
							got += w8Work(e.Key, e.Value)
						}
					}
				}
			}
			for {
				e, err := w.Next(ctx)
				if err != nil {
					done <- err
					return
				}
				if e.Kind == EventResolved {
					if mark(&e) {
						done <- nil
						return
					}
				} else {
					got += w8Work(e.Key, e.Value)
				}
			}
		}()
	}
	if done != nil {
		for op := 1; op <= ops; op++ {
			want += w8Want(op, batch)
		}
	}
	bt := db.NewBatch()
	key := make([]byte, 8)
	b.StartTimer()
	start := time.Now()
	cpu0 := processCPU()
	for op := 1; op <= ops; op++ {
		fillW8Batch(bt, k, key, val, op, batch)
		if err := db.Apply(ctx, bt, uint64(op)); err != nil {
			b.Fatal(err)
		}
		if mode == "durable" {
			mu.Lock()
			applied[op] = time.Now()
			mu.Unlock()
		}
	}
	tw := time.Since(start)
	if err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	tf := time.Since(start)
	if testing.Verbose() {
		// With the generations frozen and those flushed by ingestion:
		// whether the round's writes crossed a flush interval (two
		// generations, each maybe under Options.IngestThreshold) moves
		// its flush time more than a watch's own cost does.
		defer func() {
			m := db.Metrics()
			b.Logf("%s: writes %v, flush returned at %v, mark at %v, generations %d, ingested %d", mode, tw, tf, time.Since(start), m.Generations, m.IngestedGenerations)
		}()
	}
	if done != nil {
		if err := <-done; err != nil {
			b.Fatal(fmt.Errorf("%s watch: %w", mode, err))
		}
	}
	d := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if got != want {
		b.Fatalf("%s watch: the subscriber's work on the puts read is %#x, on those written %#x", mode, got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	return d, d - tf, lat, feedLat, wmLat, cpu
}

// BenchmarkWatchRetainFlush measures what retention (Options.WatchRetain)
// adds to the flush of a generation: W8's ops (64 puts as one Batch) into a
// fresh engine with interval flushes off, then one Flush timed alone, on an
// engine without retention ("none") and one retaining every change
// ("retain"), in rotating order, b.N rounds each. It reports each mode's
// median flush time, the median of the per-round ratios retain/none with
// their spread, and how many of the timed flushes were ingestions. Each
// retained round checks that the store holds every op's changes.
//
//	go test -run '^$' -bench BenchmarkWatchRetainFlush -benchtime 8x .
func BenchmarkWatchRetainFlush(b *testing.B) {
	ops := 2000
	if s := os.Getenv("KVBUF_WATCH_OPS"); s != "" {
		if _, err := fmt.Sscan(s, &ops); err != nil {
			b.Fatal(err)
		}
	}
	const batch = 64
	modes := []string{"none", "retain"}
	flushT := map[string][]float64{}
	var ratios []float64
	ingested := map[string]int64{}
	val := make([]byte, 16)
	for round := 0; round < b.N; round++ {
		t := map[string]time.Duration{}
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			d, ing := retainFlushRound(b, mode, ops, batch, val)
			t[mode] = d
			ingested[mode] += ing
			flushT[mode] = append(flushT[mode], float64(d.Microseconds())/1000)
		}
		ratios = append(ratios, float64(t["retain"])/float64(t["none"]))
	}
	for _, m := range modes {
		b.ReportMetric(median(flushT[m]), "flush-ms-"+m)
		b.ReportMetric(float64(ingested[m]), "ingested-"+m)
	}
	b.ReportMetric(median(ratios), "ratio-retain")
	b.ReportMetric(slices.Min(ratios), "ratio-retain-min")
	b.ReportMetric(slices.Max(ratios), "ratio-retain-max")
	b.ReportMetric(0, "ns/op")
}

// retainFlushRound writes ops on a fresh engine and returns how long the
// Flush that makes them durable took, and whether it was an ingestion.
func retainFlushRound(b *testing.B, mode string, ops, batch int, val []byte) (time.Duration, int64) {
	b.StopTimer()
	opts := &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30}
	if mode == "retain" {
		opts.WatchRetain = &WatchRetention{MaxBytes: 1 << 30}
	}
	db, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	k, err := db.KV("w8")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bt := db.NewBatch()
	key := make([]byte, 8)
	for op := 1; op <= ops; op++ {
		fillW8Batch(bt, k, key, val, op, batch)
		if err := db.Apply(ctx, bt, uint64(op)); err != nil {
			b.Fatal(err)
		}
	}
	ing := db.Metrics().IngestedGenerations
	b.StartTimer()
	start := time.Now()
	if err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	b.StopTimer()
	m := db.Metrics()
	if mode == "retain" && (m.WatchRetainedFrom != 1 || m.WatchRetainedBytes < int64(ops*batch*(8+16))) { // at least each change's key and value
		b.Fatalf("retained from op %d, %d bytes: want every change of ops 1-%d", m.WatchRetainedFrom, m.WatchRetainedBytes, ops)
	}
	return d, m.IngestedGenerations - ing
}

// BenchmarkW8WatchWrites isolates what the change feed costs W8's writer
// itself, flushes aside: the time of W8's Apply calls alone (2,000 ops of
// 64 puts as one Batch, interval flushes off, under the pending bound so
// nothing flushes) on a fresh engine without the feed ("none"), with the
// feed recording but no watch ("record": Options.WatchFromOpen), with a
// visible-mode watch read by a subscriber goroutine ("visible": its cuts
// drain the writes in flight every watchTick) and with a durable-mode one
// ("durable": with nothing flushed nothing is cut, so this is what a
// durable watch adds to the writer beyond recording; its subscriber waits
// throughout), in rotating order, b.N rounds each (KVBUF_WATCH_MODES picks
// modes, "none" first). It reports each mode's median time per put and the medians of the
// per-round ratios to "none" with their spread, and each mode's median
// bytes allocated per put and process CPU time per put (less noisy on a
// shared machine than the time). Write only: no round makes
// its writes durable (BenchmarkW8Watch has the end-to-end figures).
//
//	go test -run '^$' -bench BenchmarkW8WatchWrites -benchtime 20x .
func BenchmarkW8WatchWrites(b *testing.B) {
	const ops, batch = 2000, 64
	modes := []string{"none", "record", "visible", "durable"}
	if m := os.Getenv("KVBUF_WATCH_MODES"); m != "" {
		modes = strings.Split(m, ",") // "none" first
	}
	perPut := map[string][]float64{}
	alloc := map[string][]float64{}
	cpu := map[string][]float64{}
	ratios := map[string][]float64{}
	val := make([]byte, 16)
	for round := 0; round < b.N; round++ {
		t := map[string]time.Duration{}
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			var allocB, cpuNs float64
			d := w8WritesRound(b, mode, ops, batch, val, &allocB, &cpuNs)
			alloc[mode] = append(alloc[mode], allocB)
			cpu[mode] = append(cpu[mode], cpuNs)
			t[mode] = d
			perPut[mode] = append(perPut[mode], float64(d.Nanoseconds())/(ops*batch))
		}
		for _, m := range modes[1:] {
			ratios[m] = append(ratios[m], float64(t[m])/float64(t["none"]))
		}
	}
	for _, m := range modes {
		b.ReportMetric(median(alloc[m]), "alloc-B/put-"+m)
		b.ReportMetric(median(cpu[m]), "cpu-ns/put-"+m)
	}
	reportModes(b, modes, perPut, ratios)
	b.ReportMetric(0, "ns/op")
}

// w8WritesRound times W8's Apply calls on a fresh engine in the given mode;
// a visible watch must then deliver the mark of the last op. It sets the
// bytes allocated per put during the writes, and the process's CPU time
// per put until the watch delivered that mark (every goroutine's).
func w8WritesRound(b *testing.B, mode string, ops, batch int, val []byte, allocB, cpuNs *float64) time.Duration {
	b.StopTimer()
	db, err := Open(b.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: mode != "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	k, err := db.KV("w8")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var done chan error
	var w *Watch
	if mode == "visible" || mode == "durable" {
		w, err = db.Watch(ctx, &WatchOptions{From: 1, Durable: mode == "durable"})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		done = make(chan error, 1)
		go func() {
			for {
				e, err := w.Next(ctx)
				if err != nil || e.Kind == EventResolved && e.Op >= uint64(ops) {
					done <- err
					return
				}
			}
		}()
	}
	bt := db.NewBatch()
	key := make([]byte, 8)
	runtime.GC() // the garbage of earlier rounds' engines is not this round's
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	alloc0, cpu0 := ms.TotalAlloc, processCPU()
	b.StartTimer()
	start := time.Now()
	// The writer's samples carry the mode (go tool pprof -tagfocus
	// mode=record), so one profile of rotating modes compares them.
	pprof.Do(ctx, pprof.Labels("mode", mode), func(ctx context.Context) {
		for op := 1; op <= ops; op++ {
			fillW8Batch(bt, k, key, val, op, batch)
			if err := db.Apply(ctx, bt, uint64(op)); err != nil {
				b.Fatal(err)
			}
		}
	})
	d := time.Since(start)
	b.StopTimer()
	if mode == "durable" {
		// Nothing is flushed, so nothing becomes durable: the watch's
		// subscriber waits until it is closed.
		w.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			b.Fatalf("durable watch: %v, want ErrClosed", err)
		}
	} else if done != nil {
		if err := <-done; err != nil {
			b.Fatal(fmt.Errorf("visible watch: %w", err))
		}
	}
	runtime.ReadMemStats(&ms)
	*allocB = float64(ms.TotalAlloc-alloc0) / float64(ops*batch)
	*cpuNs = float64((processCPU() - cpu0).Nanoseconds()) / float64(ops*batch)
	if g := db.flusher.Stats().Generations; g > 0 {
		b.Fatalf("%s: %d generations flushed during the writes", mode, g)
	}
	return d
}

// BenchmarkWatchRead measures a subscriber's own cost per event: W8's
// 2,000 ops of 64 puts written and flushed once (interval flushes off,
// the feed recording from Open), then each iteration a watch from op 1
// reads every change and the last mark with Next (in memory: the log
// holds them all) and closes. It reports the time per event delivered,
// the expansion of the records into events included (CPU-bound: steadier
// on a shared machine than BenchmarkW8Watch), and the process CPU time per
// event (cpu-ns/event: a loaded machine's waits for a core are not
// counted). The store's work after the setup's flush runs into the first
// iterations: at 50x NextMany's CPU an event was about twice its figure
// at 400x, so compare at 400x.
//
//	go test -run '^$' -bench BenchmarkWatchRead -benchtime 400x .
func BenchmarkWatchRead(b *testing.B) {
	db, ctx := watchReadDB(b)
	watchRead(b, db, func(w *Watch) int {
		for n := 1; ; n++ {
			e, err := w.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if watchReadLast(&e) {
				return n
			}
		}
	})
}

// BenchmarkWatchReadMany is BenchmarkWatchRead read with Watch.NextMany,
// 256 events a call. It is skipped where the Watch has no NextMany
// (scripts/watch-ab.sh builds older revisions with this file).
//
//	go test -run '^$' -bench 'BenchmarkWatchRead(Many)?$' -benchtime 400x .
func BenchmarkWatchReadMany(b *testing.B) {
	if _, ok := any((*Watch)(nil)).(nextManyer); !ok {
		b.Skip("no Watch.NextMany")
	}
	db, ctx := watchReadDB(b)
	evs := make([]WatchEvent, 0, 256)
	watchRead(b, db, func(w *Watch) int {
		nm := any(w).(nextManyer)
		n := 0
		for {
			var err error
			if evs, err = nm.NextMany(ctx, evs[:0]); err != nil {
				b.Fatal(err)
			}
			for i := range evs {
				if n++; watchReadLast(&evs[i]) {
					return n
				}
			}
		}
	})
}

// BenchmarkWatchReadStaged is no reader of the feed: it is what a Next
// would at best cost a durable watch that built its events before the
// watermark (the watch11 round's design (a), not built): BenchmarkWatchRead's
// events, built beforehand, returned one by one by value from a buffer.
//
//	go test -run '^$' -bench BenchmarkWatchReadStaged -benchtime 400x .
func BenchmarkWatchReadStaged(b *testing.B) {
	db, ctx := watchReadDB(b)
	var all []WatchEvent
	w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: true})
	if err != nil {
		b.Fatal(err)
	}
	for {
		e, err := w.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if all = append(all, e); watchReadLast(&e) {
			break
		}
	}
	w.Close()
	watchRead(b, db, func(*Watch) int {
		s := &stagedEvents{ev: all}
		for n := 1; ; n++ {
			if e := s.next(ctx); watchReadLast(&e) {
				return n
			}
		}
	})
}

// watchReadOps is how many W8 ops the BenchmarkWatchRead family writes.
const watchReadOps = 2000

// watchReadDB opens an engine holding W8's watchReadOps ops in its feed's
// log, flushed.
func watchReadDB(b *testing.B) (*DB, context.Context) {
	const batch = 64
	db, err := Open(b.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true, WatchBufferBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	k, err := db.KV("w8")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bt := db.NewBatch()
	key, val := make([]byte, 8), make([]byte, 16)
	for op := 1; op <= watchReadOps; op++ {
		fillW8Batch(bt, k, key, val, op, batch)
		if err := db.Apply(ctx, bt, uint64(op)); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return db, ctx
}

// watchReadLast reports whether e is the last event a read waits for.
func watchReadLast(e *WatchEvent) bool { return e.Kind == EventResolved && e.Op >= watchReadOps }

// watchRead runs sub on a durable watch from op 1 each iteration (sub
// returns the events it read) and reports the time and process CPU per
// event.
func watchRead(b *testing.B, db *DB, sub func(w *Watch) int) {
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := processCPU()
	n := 0
	for range b.N {
		w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: true})
		if err != nil {
			b.Fatal(err)
		}
		n += sub(w)
		w.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n), "cpu-ns/event")
	b.ReportMetric(0, "ns/op")
}

// nextManyer is Watch.NextMany, asserted so that this file builds with
// revisions before it (scripts/watch-ab.sh's overlay).
type nextManyer interface {
	NextMany(ctx context.Context, dst []WatchEvent) ([]WatchEvent, error)
}

// stagedEvents returns events built beforehand, one by one by value, as
// a Next that only copies would (BenchmarkWatchReadStaged).
type stagedEvents struct {
	ev []WatchEvent
	i  int
}

//go:noinline
func (s *stagedEvents) next(ctx context.Context) WatchEvent {
	if s.i < len(s.ev) && ctx.Err() == nil {
		s.i++
		return s.ev[s.i-1]
	}
	return WatchEvent{}
}

// BenchmarkW8Record measures the writer's recording of one of W8's
// batches (64 puts of an 8-byte key and a 16-byte value) alone: feed.batch
// on a feed recording from Open with no watch, W8's 2,000 batches a round
// (the round's records dropped between rounds, untimed, as a resolved log
// trimmed would drop them). It reports the time, the process CPU time
// (the garbage collector's included) and the bytes allocated per put;
// CPU-bound, so steadier on a shared machine than BenchmarkW8WatchWrites,
// whose record-mode gap it isolates.
//
//	go test -run '^$' -bench BenchmarkW8Record -benchtime 200000x .
func BenchmarkW8Record(b *testing.B) {
	const ops, batch = 2000, 64
	db, err := Open(b.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	k, err := db.KV("w8")
	if err != nil {
		b.Fatal(err)
	}
	bt := db.NewBatch()
	key, val := make([]byte, 8), make([]byte, 16)
	f := &db.feed
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := range b.N {
		op := i%ops + 1
		if op == 1 {
			b.StopTimer()
			f.mu.Lock()
			clear(f.pending)
			f.pending, f.pendBytes = f.pending[:0], 0
			f.mu.Unlock()
			fillW8Batch(bt, k, key, val, op, batch)
			b.StartTimer()
		}
		f.batch(uint64(op), bt, nil)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*batch), "cpu-ns/put")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/put")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFeedIdle measures what an engine costs while nothing is
// written: the process CPU time per second of wall time, each iteration
// one second on a fresh engine, without the feed ("off") and with it
// recording from Open but no watch ("record": its resolver's watchTick
// wake-ups; doc/design.md, "Change feed", watch12).
//
//	go test -run '^$' -bench BenchmarkFeedIdle -benchtime 3x .
func BenchmarkFeedIdle(b *testing.B) {
	for _, mode := range []string{"off", "record"} {
		b.Run(mode, func(b *testing.B) {
			var per []float64
			for range b.N {
				db, err := Open(b.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: mode == "record"})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond) // Open's own work done
				c0 := processCPU()
				time.Sleep(time.Second)
				per = append(per, float64((processCPU()-c0).Microseconds())/1000)
				db.Close()
			}
			b.ReportMetric(median(per), "cpu-ms/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
