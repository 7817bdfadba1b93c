package kvbuf

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkFlushLatency answers issue 20's question about Flush latency on
// a busy machine (p50 5-40 ms, p99 80-470 ms with a flush every 10 ms,
// against a 1.4 ms raw fsync): is it only CPU starvation? Each iteration
// is one 10 ms period of W7's load: a writer puts 1,000 keys (100k writes
// per second, paced per millisecond) while the period's Flush runs and is
// timed. In the same run, interleaved with it, three probes:
//
//   - fsync: a 4 KiB write and fdatasync of a file next to the engine, once
//     per period (what the device costs, whatever the CPU does);
//   - wake: how late a goroutine sleeping 1 ms wakes up (scheduling
//     delay: the CPU starvation the Go runtime and the OS add to any
//     wait);
//   - flush: the Flush call itself.
//
// It reports the p50 and p99 of each in milliseconds. scripts/flush-latency.sh
// runs it idle and with busy processes on every core, next to W7.
func BenchmarkFlushLatency(b *testing.B) {
	dir := b.TempDir()
	db, err := Open(filepath.Join(dir, "engine"), &Options{FlushInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	k, err := db.KV("w7")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.OpenFile(filepath.Join(dir, "raw"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	page := make([]byte, 4096)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var wakeMu sync.Mutex
	var wakes []time.Duration
	wg.Go(func() { // the wake probe
		for !stop.Load() {
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			d := time.Since(t0) - time.Millisecond
			wakeMu.Lock()
			wakes = append(wakes, d)
			wakeMu.Unlock()
		}
	})
	wg.Go(func() { // the writer: 100 puts per millisecond
		key := make([]byte, 8)
		val := make([]byte, 16)
		next := time.Now()
		for i := 0; !stop.Load(); {
			for range 100 {
				i++
				key[0], key[1], key[2] = byte(i), byte(i>>8), byte(i>>16)
				if err := k.Put(context.Background(), key, val, 0); err != nil {
					b.Error(err)
					return
				}
			}
			// A writer that fell behind does not catch up in a burst (a
			// starved process would then write as fast as it can and
			// feed its own flushes): the rate is at most 100k/s.
			next = next.Add(time.Millisecond)
			if now := time.Now(); next.Before(now) {
				next = now
			}
			time.Sleep(time.Until(next))
		}
	})
	var flushes, syncs []time.Duration
	period := time.NewTicker(10 * time.Millisecond)
	defer period.Stop()
	for b.Loop() {
		<-period.C
		t0 := time.Now()
		if err := db.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		flushes = append(flushes, time.Since(t0))
		t0 = time.Now()
		if _, err := raw.WriteAt(page, 0); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(raw.Fd())); err != nil {
			b.Fatal(err)
		}
		syncs = append(syncs, time.Since(t0))
	}
	stop.Store(true)
	wg.Wait()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	q := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	b.ReportMetric(ms(q(flushes, 0.5)), "flush-p50-ms")
	b.ReportMetric(ms(q(flushes, 0.99)), "flush-p99-ms")
	b.ReportMetric(ms(q(syncs, 0.5)), "fsync-p50-ms")
	b.ReportMetric(ms(q(syncs, 0.99)), "fsync-p99-ms")
	wakeMu.Lock()
	b.ReportMetric(ms(q(wakes, 0.5)), "wake-late-p50-ms")
	b.ReportMetric(ms(q(wakes, 0.99)), "wake-late-p99-ms")
	wakeMu.Unlock()
}
