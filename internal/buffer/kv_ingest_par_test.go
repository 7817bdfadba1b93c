package buffer

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/storage"
)

// BenchmarkFlushParallel is the Flush of W6's generation alone, from a
// sealed 1M-key table that was never sorted (as a flush finds it): the
// sort, the slot reads and the sstables written and synced (not
// committed: BenchmarkIngestTo's span), paced as the engine paces it
// (yielding every 200µs), by each design in rotating order within every
// op:
//
//   - serial: one goroutine sorts and writes one table (IngestWriters 1);
//   - par-write: one sorts, then two write two tables (IngestWriters 2
//     before this benchmark: the sort on one goroutine);
//   - par-all: two sort (parallelSort) and two write;
//   - floor: a bare pebble sstable writer with the store's writer options
//     (format, filter, compression) writing the same keys and values
//     from byte slices already in key order, synced: the writer's cost
//     with nothing of the engine's;
//   - floor-2: the same keys cut in two, two writers on two goroutines;
//   - floor-bare: floor with what an L0 ingest of small values could drop
//     dropped (no compression, no Bloom filter, row blocks): the writer's
//     own minimum;
//   - pebble-sorted-batch: the same keys and values in key order in one
//     pebble batch committed with Sync, on a pebble with the store's
//     options and a 128 MiB memtable (BenchmarkFlushW6's
//     pebble/batch-sync-sorted, the Flush target's baseline; the memtable
//     flush it causes is waited for after the clock stops, before the next
//     design).
//
// Metrics: ns/key and cpu-ns/key (the process's user+sys) per design,
// wake-p99-µs (the 99th percentile of how late a goroutine sleeping 100µs
// at a time woke while the design ran: what a reader waits for a
// processor),
// each design's time and CPU over serial's, and pebble-sorted-batch's time
// over each kvbuf design's (speedup-*; the target is 2).
func BenchmarkFlushParallel(b *testing.B) {
	st, kv, gen := ingestBenchGen(b)
	t := gen.tables[0]
	x, ents := t.sortedKeys()
	keys := make([][]byte, len(ents))
	for i, e := range ents {
		keys[i] = append([]byte{2, 0, 0, 0, 1}, x.key(e.ref)...) // storage's user key, keyspace 1
	}
	val := make([]byte, 16)
	po := storage.PebbleOptions(&storage.Options{MemTableSize: 128 << 20})
	pdb, err := pebble.Open(b.TempDir(), po)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pdb.Close() })
	wo := po.Clone()
	wo.EnsureDefaults()
	wopts := wo.MakeWriterOptions(0, pdb.TableFormat())
	floorDir := b.TempDir()
	// The writer's minimum: no compression, no filter, row blocks
	// (BenchmarkIngestWriter's cheapest variant).
	bare := wopts
	bare.Compression, bare.FilterPolicy, bare.TableFormat = sstable.NoCompression, nil, sstable.TableFormatPebblev4
	floor := func(parts int, wopts sstable.WriterOptions) error {
		errs := make(chan error, parts)
		for p := range parts {
			go func() {
				f, err := vfs.Default.Create(filepath.Join(floorDir, fmt.Sprintf("%d.sst", p)), vfs.WriteCategoryUnspecified)
				if err != nil {
					errs <- err
					return
				}
				w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wopts)
				for _, k := range keys[len(keys)*p/parts : len(keys)*(p+1)/parts] {
					if err := w.Set(k, val); err != nil {
						_ = w.Close()
						errs <- err
						return
					}
				}
				errs <- w.Close() // syncs
			}()
		}
		var first error
		for range parts {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	ctx := context.Background()
	engine := func(sortW, writeW int) func() error {
		return func() error {
			t.ord.Store(nil) // a flush sorts the sealed table first
			t.flushSortWorkers, t.flushParts = sortW, writeW
			in := st.NewIngest()
			last := time.Now()
			err := gen.IngestTo(ctx, in, func() { // the engine's pacer at its default quantum
				if time.Since(last) >= 200*time.Microsecond {
					runtime.Gosched()
					last = time.Now()
				}
			})
			in.Abort() // joins the parts: every table written and synced
			return err
		}
	}
	designs := []struct {
		name string
		run  func() error
	}{
		{"serial", engine(1, 1)},
		{"par-write", engine(1, 2)},
		{"par-all", engine(2, 2)},
		{"floor", func() error { return floor(1, wopts) }},
		{"floor-2", func() error { return floor(2, wopts) }},
		{"floor-bare", func() error { return floor(1, bare) }},
		{"pebble-sorted-batch", func() error {
			bt := pdb.NewBatch()
			for _, k := range keys {
				if err := bt.Set(k, val, nil); err != nil {
					return err
				}
			}
			err := bt.Commit(pebble.Sync)
			_ = bt.Close()
			return err
		}},
	}
	times := make([]int64, len(designs))
	cpus := make([]int64, len(designs))
	// The wake probe: a goroutine sleeping 100µs at a time records how
	// late it wakes while each design runs (a reader's wait for a
	// processor the flush's goroutines hold).
	var (
		cur   atomic.Int32 // design running + 1; 0 between designs
		stop  atomic.Bool
		wakes = make([][]time.Duration, len(designs))
		wg    sync.WaitGroup
		mu    sync.Mutex
	)
	wg.Go(func() {
		for !stop.Load() {
			t0 := time.Now()
			time.Sleep(100 * time.Microsecond)
			late := time.Since(t0) - 100*time.Microsecond
			if d := cur.Load(); d > 0 {
				mu.Lock()
				wakes[d-1] = append(wakes[d-1], late)
				mu.Unlock()
			}
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	for i := 0; b.Loop(); i++ {
		binary.BigEndian.PutUint64(val, uint64(i))
		for j := range designs {
			d := (i + j) % len(designs)
			runtime.GC() // no design pays for another's garbage
			c0, _ := processCPU()
			t0 := time.Now()
			cur.Store(int32(d + 1))
			if err := designs[d].run(); err != nil {
				b.Fatalf("%s: %v", designs[d].name, err)
			}
			cur.Store(0)
			times[d] += int64(time.Since(t0))
			c1, _ := processCPU()
			cpus[d] += int64(c1 - c0)
			// pebble's flush of the batch (a flushable batch: it is
			// over half the memtable) and the compactions after it
			// would run into the next design's time and CPU.
			for m := pdb.Metrics(); m.Flush.NumInProgress+m.Compact.NumInProgress > 0; m = pdb.Metrics() {
				time.Sleep(time.Millisecond)
			}
		}
	}
	n := float64(b.N) * float64(kv.PendingKeys())
	for d, ds := range designs {
		b.ReportMetric(float64(times[d])/n, ds.name+"-ns/key")
		b.ReportMetric(float64(cpus[d])/n, ds.name+"-cpu-ns/key")
		if d > 0 {
			b.ReportMetric(float64(times[d])/float64(times[0]), ds.name+"/serial")
			b.ReportMetric(float64(cpus[d])/float64(cpus[0]), ds.name+"/serial-cpu")
		}
	}
	for d, ds := range designs {
		if w := wakes[d]; len(w) > 0 {
			slices.Sort(w)
			b.ReportMetric(float64(w[len(w)*99/100].Microseconds()), ds.name+"-wake-p99-µs")
		}
	}
	pb := len(designs) - 1
	for d := range 3 {
		b.ReportMetric(float64(times[pb])/float64(times[d]), "speedup-"+designs[d].name)
	}
}

// TestParallelSort: the order parallelSort builds with 2-300 workers is
// sort's, for keys whose prefixes differ in their first byte, only in
// low bytes, not at all (one shared 8-byte prefix), skewed ones (most
// keys in one value of the byte the groups are cut at), short and mixed
// lengths; and a sealed table's flush sort (sortedKeysN, entries gathered
// by two goroutines) is the one-goroutine one.
func TestParallelSort(t *testing.T) {
	gens := map[string]func(i int, r uint64) []byte{
		"random": func(i int, r uint64) []byte { return binary.BigEndian.AppendUint64(nil, r) },
		"w6":     func(i int, r uint64) []byte { return binary.BigEndian.AppendUint64(nil, r%(1<<22)) },
		"shared": func(i int, r uint64) []byte { return fmt.Appendf(nil, "shared-prefix-%012d", r%1e9) },
		"skewed": func(i int, r uint64) []byte {
			if i%10 != 0 {
				r %= 1000 // nine in ten keys in one value of every byte but the last two
			}
			return binary.BigEndian.AppendUint64(nil, r)
		},
		"short":    func(i int, r uint64) []byte { return []byte{byte(r), byte(r >> 8)} },
		"mixedlen": func(i int, r uint64) []byte { return binary.BigEndian.AppendUint64(nil, r)[:1+i%8] },
	}
	fill := func(t *testing.T, n int, gen func(i int, r uint64) []byte) *table {
		kv, err := NewKV(nil, 1, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := uint64(12345)
		for i := range n {
			r = r*6364136223846793005 + 1442695040888963407
			if err := kv.Put(gen(i, r>>7), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		return kv.Freeze(1).tables[0]
	}
	for name, gen := range gens {
		t.Run(name, func(t *testing.T) {
			tb := fill(t, 6000, gen)
			x, want := tb.sortedKeys()
			for i := 1; i < len(want); i++ {
				if x.cmp(want[i-1], want[i]) >= 0 {
					t.Fatalf("key %d %q not above key %d %q", i, x.key(want[i].ref), i-1, x.key(want[i-1].ref))
				}
			}
			rng := uint64(len(want))
			for _, w := range []int{2, 3, 5, 8, 300} {
				in := slices.Clone(want)
				for i := len(in) - 1; i > 0; i-- {
					rng = rng*6364136223846793005 + 1442695040888963407
					j := int(rng>>33) % (i + 1)
					in[i], in[j] = in[j], in[i]
				}
				if out := x.parallelSort(in, make([]sortEnt, len(in)), w); !slices.Equal(out, want) {
					t.Fatalf("parallelSort with %d workers differs from sort", w)
				}
			}
		})
	}
	t.Run("flush-sort", func(t *testing.T) {
		tb := fill(t, 2*parallelSortMin+1000, gens["random"])
		var orders [2][]sortEnt
		for w := range 2 {
			tb.ord.Store(nil)
			_, orders[w] = tb.sortedKeysN(w + 1)
		}
		if !slices.Equal(orders[0], orders[1]) {
			t.Fatal("the flush's sort on two goroutines differs from one goroutine's")
		}
	})
}
