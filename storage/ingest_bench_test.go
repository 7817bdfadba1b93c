package storage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
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

// writerVariant is one set of sstable writer options for an ingested
// table, as a change of the store's own (what Ingest uses).
type writerVariant struct {
	name string
	set  func(*sstable.WriterOptions)
}

var writerVariants = []writerVariant{
	{name: "store", set: func(*sstable.WriterOptions) {}},
	{name: "no-compression", set: func(o *sstable.WriterOptions) { o.Compression = sstable.NoCompression }},
	{name: "no-filter", set: func(o *sstable.WriterOptions) { o.FilterPolicy = nil }},
	{name: "row-blocks", set: func(o *sstable.WriterOptions) { o.TableFormat = sstable.TableFormatPebblev4 }},
	{name: "block-32k", set: func(o *sstable.WriterOptions) { o.BlockSize = 32 << 10 }},
	{name: "bare", set: func(o *sstable.WriterOptions) {
		o.Compression, o.FilterPolicy, o.TableFormat = sstable.NoCompression, nil, sstable.TableFormatPebblev4
	}},
}

// BenchmarkIngestWriter isolates the sstable writer of a large flush: 1M
// sorted 8-byte keys (in the store's key layout) with 16-byte values, as
// W6, written with sstable.Writer.Set into a synced file, with the
// store's writer options (the Ingest's: its table format, Bloom filter
// and compression) and with one of them changed (writerVariants), in
// rotating order within each op. Metrics per variant: ns/key, cpu-ns/key
// (the process's user+sys) and B/key (the file's size); and each
// variant's time over the store options'. It answers which writer option
// a flush's CPU would gain from (doc/design.md, "Flush by ingestion").
func BenchmarkIngestWriter(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(n, 26))
	raw := make([]uint64, n)
	for i := range raw {
		raw[i] = rng.Uint64N(4 * n)
	}
	slices.Sort(raw)
	raw = slices.Compact(raw)
	keys := make([][]byte, len(raw))
	for i, k := range raw {
		keys[i] = appendUserKey(nil, ks1, be8(k))
	}
	val := make([]byte, 16)
	dir := b.TempDir()
	wall := make([]time.Duration, len(writerVariants))
	cpu := make([]time.Duration, len(writerVariants))
	size := make([]int64, len(writerVariants))
	op := 0
	for b.Loop() {
		op++
		for j := range writerVariants {
			v := (j + op) % len(writerVariants)
			opts := s.ig.po.MakeWriterOptions(0, s.db.TableFormat())
			writerVariants[v].set(&opts)
			path := filepath.Join(dir, fmt.Sprintf("%d.sst", v))
			c0, _ := processCPU()
			t0 := time.Now()
			f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				b.Fatal(err)
			}
			w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), opts)
			for i, k := range keys {
				binary.BigEndian.PutUint64(val, uint64(i))
				binary.BigEndian.PutUint64(val[8:], uint64(op))
				if err := w.Set(k, val); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil { // syncs
				b.Fatal(err)
			}
			wall[v] += time.Since(t0)
			c1, _ := processCPU()
			cpu[v] += c1 - c0
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			size[v] += st.Size()
		}
	}
	keysDone := float64(op) * float64(len(keys))
	for v, wv := range writerVariants {
		b.ReportMetric(float64(wall[v].Nanoseconds())/keysDone, wv.name+"-ns/key")
		b.ReportMetric(float64(cpu[v].Nanoseconds())/keysDone, wv.name+"-cpu-ns/key")
		b.ReportMetric(float64(size[v])/keysDone, wv.name+"-B/key")
		if v > 0 {
			b.ReportMetric(float64(wall[v])/float64(wall[0]), wv.name+"/store")
		}
	}
}
