package storage

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// flushPath is one way of making a flush generation durable.
type flushPath struct {
	name  string
	split uint64 // ingestSplit of the store; batch if < 0
	batch bool
}

var flushPaths = []flushPath{
	{name: "batch", batch: true},
	{name: "ingest", split: 0},
	{name: "ingest-split", split: 1},
}

// BenchmarkFlushPath measures the paths a flush generation can take into
// the store, at each generation size (keys=n): n distinct 8-byte keys
// drawn from [0, 4n) with 16-byte values and a watermark, already sorted
// (a sealed table's order, which the flush reuses), as one synced Batch
// (the WAL, the memtable, later pebble's flush of it) or as an Ingest (one
// table with the watermark; or, ingest-split, the watermark in a table of
// its own). Every store is on its own directory and sees the same stream
// of generations, each round a new one over the same key space, so that
// the LSMs reach a steady state.
//
// One op is one generation through every path, in rotating order. Each
// path's time runs from the commit to the moment its store has no flush or
// compaction left (so each pays for the background work it causes, the
// batch path's memtable flushes included); its CPU time (user+sys of the
// process, getrusage) and the bytes its store wrote (WAL, flushes,
// compactions, ingested tables) are counted over the same span. Metrics
// per path: ns/key, cpu-ns/key and B/key (bytes written per key), and
// commit-ns/key, the time until the commit's Wait returned (what a Flush
// waits for; the rest is background work); ingest/batch, the ratio of the
// ingest path's time to the batch path's (below 1: ingestion is faster),
// and the same of the commit times, whose medians over -count rounds pick
// the threshold (Options.IngestThreshold of the engine; doc/design.md,
// "Flush by ingestion").
func BenchmarkFlushPath(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 12, 1 << 14, 1 << 15, 1 << 16, 1 << 18, 1 << 20} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) { benchFlushPath(b, n) })
	}
}

func benchFlushPath(b *testing.B, n int) {
	stores := make([]*Store, len(flushPaths))
	for i, p := range flushPaths {
		s, err := Open(b.TempDir(), &Options{ingestSplit: p.split})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	rng := rand.New(rand.NewPCG(uint64(n), 25))
	keys := make([]uint64, n)
	val := make([]byte, 16)
	var wall, commit, cpu [3]time.Duration
	var written [3]uint64
	op := uint64(0)
	for b.Loop() {
		b.StopTimer()
		seen := map[uint64]bool{}
		for i := range keys {
			for {
				k := rng.Uint64N(4 * uint64(n))
				if !seen[k] {
					seen[k] = true
					keys[i] = k
					break
				}
			}
		}
		slices.Sort(keys)
		op++
		b.StartTimer()
		for j := range flushPaths {
			i := (j + int(op)) % len(flushPaths) // rotating order
			s, p := stores[i], flushPaths[i]
			before, _ := s.LSM()
			c0, _ := processCPU()
			t0 := time.Now()
			if p.batch {
				bt := s.NewBatch()
				for _, k := range keys {
					val[0] = byte(op)
					bt.Put(ks1, be8(k), val)
				}
				bt.SetWatermark(op)
				if err := s.Apply(bt); err != nil {
					b.Fatal(err)
				}
			} else {
				in := s.NewIngest()
				in.SetWatermark(op)
				for _, k := range keys {
					val[0] = byte(op)
					in.Put(ks1, be8(k), val)
				}
				c, err := s.CommitIngest(in)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			commit[i] += time.Since(t0)
			for s.BackgroundJobs() > 0 {
				time.Sleep(50 * time.Microsecond)
			}
			wall[i] += time.Since(t0)
			c1, _ := processCPU()
			cpu[i] += c1 - c0
			after, _ := s.LSM()
			written[i] += after.BytesWritten - before.BytesWritten
		}
	}
	keysDone := float64(op) * float64(n)
	for i, p := range flushPaths {
		b.ReportMetric(float64(wall[i].Nanoseconds())/keysDone, p.name+"-ns/key")
		b.ReportMetric(float64(commit[i].Nanoseconds())/keysDone, p.name+"-commit-ns/key")
		b.ReportMetric(float64(cpu[i].Nanoseconds())/keysDone, p.name+"-cpu-ns/key")
		b.ReportMetric(float64(written[i])/keysDone, p.name+"-B/key")
		st, _ := stores[i].LSM()
		b.ReportMetric(float64(st.ReadAmp), p.name+"-read-amp")
	}
	b.ReportMetric(float64(wall[1])/float64(wall[0]), "ingest/batch")
	b.ReportMetric(float64(wall[2])/float64(wall[0]), "ingest-split/batch")
	b.ReportMetric(float64(commit[1])/float64(commit[0]), "ingest/batch-commit")
	b.ReportMetric(float64(commit[2])/float64(commit[0]), "ingest-split/batch-commit")
}
