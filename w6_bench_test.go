package kvbuf

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/storage"
)

// gcCPU returns the CPU the Go runtime has spent on garbage collection so
// far (runtime/metrics' estimate: mark workers, assists and pauses).
func gcCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * 1e9)
}

// BenchmarkFlushW6Put is the part of BenchmarkFlushW6 that a change to the
// put path or the flush is measured with: W6's 1M puts of 16-byte values
// made durable, one round per op, by kvbuf/puts (1M KV.Put, then
// DB.Flush), kvbuf/batches (Batches of 1000, DB.Apply) and pebble's synced
// batch of the same keys in arrival order (pebble/batch-sync) and sorted
// (pebble/batch-sync-sorted), in rotating order, each on a store of its
// own with the engine's store options (the pebble rows with a memtable as
// large as the engines' pending budget). Two revisions are compared with
// scripts/w6-ab.sh, which runs this benchmark of each in rotating order.
//
// Metrics: per row ns/put (to durability), flush-ns/put (the Flush
// alone), cpu-ns/put (getrusage user+sys over the timed span, background
// goroutines included), gc-cpu-ns/put (the runtime's GC CPU over the same
// span); the ratios speedup-puts and speedup-batches (pebble/batch-sync's
// time over the kvbuf row's), speedup-flush-vs-sorted-batch (the sorted
// batch's time over kvbuf/puts' Flush), cpu-puts/pebble and
// cpu-batches/pebble (the kvbuf row's CPU over pebble/batch-sync's), each
// the median of the per-round ratios, with -min and -max the spread.
//
// For a CPU profile (-cpuprofile) of kvbuf alone: W6PROFILE=run runs
// kvbuf/puts alone (1M KV.Put, then DB.Flush, each round; the whole W6
// run of the engine), W6PROFILE=puts its puts alone (no Flush timed, a new
// engine each round, whose Close flushes outside the timed part).
func BenchmarkFlushW6Put(b *testing.B) {
	const n = 1_000_000
	keys, stored := w6Keys(n, 1)
	val := make([]byte, 16)
	type row struct {
		name  string
		run   func(round uint64) (flush time.Duration, err error)
		lsm   func() (storage.LSMStats, error)
		total []float64 // per round
		flush []float64
		cpu   []float64
		gc    []float64
	}
	open := func() (*DB, *KV) {
		db, err := Open(b.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: w6Pending})
		if err != nil {
			b.Fatal(err)
		}
		kv, err := db.KV("w6")
		if err != nil {
			b.Fatal(err)
		}
		return db, kv
	}
	if os.Getenv("W6PROFILE") == "run" {
		db, kv := open()
		defer func() { _ = db.Close() }()
		for round := uint64(1); b.Loop(); round++ {
			binary.BigEndian.PutUint64(val, round)
			for _, k := range keys {
				if err := kv.Put(ctx, k, val, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := db.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/put")
		return
	}
	if os.Getenv("W6PROFILE") == "puts" {
		var db *DB
		for round := uint64(1); b.Loop(); round++ {
			b.StopTimer()
			if db != nil {
				_ = db.Close()
			}
			var kv *KV
			db, kv = open()
			binary.BigEndian.PutUint64(val, round)
			b.StartTimer()
			for _, k := range keys {
				if err := kv.Put(ctx, k, val, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		_ = db.Close()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/put")
		return
	}
	engine := func(name string, batch bool) *row {
		db, kv := open()
		b.Cleanup(func() { _ = db.Close() })
		r := &row{name: name, lsm: db.store.LSM}
		r.run = func(round uint64) (time.Duration, error) {
			binary.BigEndian.PutUint64(val, round)
			if err := w6Write(ctx, db, kv, keys, val, batch); err != nil {
				return 0, err
			}
			t0 := time.Now()
			err := db.Flush(ctx)
			d := time.Since(t0)
			if err == nil {
				// Every row checks what it wrote.
				for _, i := range [...]int{0, n / 2, n - 1} {
					got, gerr := kv.Get(keys[i])
					if gerr != nil || binary.BigEndian.Uint64(got) != round {
						return 0, fmt.Errorf("key %x after the flush: %x, %v", keys[i], got, gerr)
					}
				}
			}
			return d, err
		}
		return r
	}
	raw := func(name string, order [][]byte) *row {
		db := w6Pebble(b)
		r := &row{name: name, lsm: pebbleLSM(db)}
		r.run = func(round uint64) (time.Duration, error) {
			binary.BigEndian.PutUint64(val, round)
			err := w6PebbleBatch(db, order, val)
			if err == nil {
				got, closer, gerr := db.Get(order[n/2])
				if gerr != nil {
					return 0, gerr
				}
				if binary.BigEndian.Uint64(got) != round {
					err = fmt.Errorf("pebble key %x: %x", order[n/2], got)
				}
				_ = closer.Close()
			}
			return 0, err
		}
		return r
	}
	arrival := w6Arrival(keys)
	rows := []*row{
		engine("kvbuf/puts", false),
		engine("kvbuf/batches", true),
		raw("pebble/batch-sync", arrival),
		raw("pebble/batch-sync-sorted", stored),
	}
	round := uint64(0)
	for b.Loop() {
		round++
		for j := range rows {
			r := rows[(j+int(round))%len(rows)]
			settle(r.lsm)
			c0, g0 := processCPU(), gcCPU()
			t0 := time.Now()
			fl, err := r.run(round)
			if err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			r.total = append(r.total, float64(time.Since(t0)))
			r.flush = append(r.flush, float64(fl))
			r.cpu = append(r.cpu, float64(processCPU()-c0))
			r.gc = append(r.gc, float64(gcCPU()-g0))
			settle(r.lsm)
		}
	}
	sum := func(xs []float64) (s float64) {
		for _, x := range xs {
			s += x
		}
		return s
	}
	puts := float64(round) * n
	for _, r := range rows {
		b.ReportMetric(sum(r.total)/puts, r.name+"-ns/put")
		if sum(r.flush) > 0 {
			b.ReportMetric(sum(r.flush)/puts, r.name+"-flush-ns/put")
		}
		b.ReportMetric(sum(r.cpu)/puts, r.name+"-cpu-ns/put")
		b.ReportMetric(sum(r.gc)/puts, r.name+"-gc-cpu-ns/put")
	}
	ratio := func(name string, num, den []float64) {
		rs := make([]float64, len(num))
		for i := range num {
			rs[i] = num[i] / den[i]
		}
		slices.Sort(rs)
		b.ReportMetric(rs[len(rs)/2], name)
		b.ReportMetric(rs[0], name+"-min")
		b.ReportMetric(rs[len(rs)-1], name+"-max")
	}
	puts0, batches, peb, sorted := rows[0], rows[1], rows[2], rows[3]
	ratio("speedup-puts", peb.total, puts0.total)
	ratio("speedup-batches", peb.total, batches.total)
	ratio("speedup-flush-vs-sorted-batch", sorted.total, puts0.flush)
	ratio("cpu-puts/pebble", puts0.cpu, peb.cpu)
	ratio("cpu-batches/pebble", batches.cpu, peb.cpu)
}
