package buffer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// dumpStore returns every stored key of keyspace 1 as "key=value".
func dumpStore(t testing.TB, st *storage.Store) []string {
	t.Helper()
	it, err := st.NewIter(1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ingestGen writes gen into st by ingestion (IngestTo, CommitIngest, Wait).
func ingestGen(t testing.TB, st *storage.Store, gen *KVGen) {
	t.Helper()
	in := st.NewIngest()
	if err := gen.IngestTo(context.Background(), in, nil); err != nil {
		t.Fatal(err)
	}
	c, err := st.CommitIngest(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestKVIngestMatchesBatch writes random generations (puts, deletes, range
// deletes, with snapshots sealing several tables per generation) to an
// overlay, and flushes each both ways into two stores that hold the same
// older data: as a batch (AddTo) and as an ingest (IngestTo). Both stores
// must then hold the same keys and values.
func TestKVIngestMatchesBatch(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	open := func() *storage.Store {
		st, err := storage.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	viaBatch, viaIngest := open(), open()
	kv, err := NewKV(viaBatch, 1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func() []byte {
		if rng.IntN(16) == 0 { // a long key (kept out of the slot)
			return fmt.Appendf(nil, "k%03d-%s", rng.IntN(300), strings.Repeat("l", 40))
		}
		return fmt.Appendf(nil, "k%03d", rng.IntN(300))
	}
	var snaps []*KVSnapshot
	ctx := context.Background()
	for g := uint64(1); g <= 40; g++ {
		for range 1 + rng.IntN(200) {
			switch x := rng.IntN(20); {
			case x < 13:
				v := strings.Repeat("v", rng.IntN(3)*rng.IntN(30))
				if err := kv.Put(key(), fmt.Appendf(nil, "%d.%s", g, v)); err != nil {
					t.Fatal(err)
				}
			case x < 17:
				if err := kv.Delete(key()); err != nil {
					t.Fatal(err)
				}
			case x < 19:
				lo, hi := key(), key()
				if string(lo) > string(hi) {
					lo, hi = hi, lo
				}
				if rng.IntN(8) == 0 {
					hi = nil
				}
				if err := kv.DeleteRange(lo, hi); err != nil {
					t.Fatal(err)
				}
			default:
				snaps = append(snaps, kv.Snapshot()) // seals a table of this generation
			}
		}
		gen := kv.Freeze(g)
		if gen == nil {
			continue
		}
		b := viaBatch.NewBatch()
		if err := gen.AddTo(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := viaBatch.Apply(b); err != nil {
			t.Fatal(err)
		}
		for _, t := range gen.tables { // every design of ingestTable
			t.flushDesign = flushDesign(rng.IntN(int(flushNoPrefetch) + 1))
			t.flushParts = rng.IntN(5) // 0: the default; 2-4: parallel parts
		}
		ingestGen(t, viaIngest, gen)
		gen.Release()
		a, b2 := dumpStore(t, viaBatch), dumpStore(t, viaIngest)
		if !slices.Equal(a, b2) {
			t.Fatalf("generation %d (%d tables): the stores differ:\nbatch:  %v\ningest: %v", g, len(gen.tables), a, b2)
		}
		for _, s := range snaps {
			s.Close()
		}
		snaps = snaps[:0]
	}
}

// TestKVIngestRangeDeletionsOnly: a generation whose table holds range
// deletions and no key (its shards never allocated, so it has no key order)
// ingests in every design of ingestTable, and the deletions reach the
// store. The ranked design used to dereference the missing order
// (TestKVIngestMatchesBatch met it by chance).
func TestKVIngestRangeDeletionsOnly(t *testing.T) {
	for d := range flushNoPrefetch + 1 {
		st, err := storage.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		b := st.NewBatch()
		b.Put(1, []byte("b"), []byte("stored"))
		b.Put(1, []byte("d"), []byte("kept"))
		if err := st.Apply(b); err != nil {
			t.Fatal(err)
		}
		kv, err := NewKV(st, 1, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.DeleteRange([]byte("a"), []byte("c")); err != nil {
			t.Fatal(err)
		}
		gen := kv.Freeze(1)
		if gen == nil || len(gen.tables) != 1 || gen.tables[0].shards.Load() != nil {
			t.Fatalf("design %d: want one table without shards", d)
		}
		gen.tables[0].flushDesign = d
		ingestGen(t, st, gen)
		gen.Release()
		if got := dumpStore(t, st); !slices.Equal(got, []string{"d=kept"}) {
			t.Errorf("design %d: store holds %v, want [d=kept]", d, got)
		}
		st.Close()
	}
}

// BenchmarkIngestTo writes a sealed generation of 1M keys (8-byte keys, 16-
// byte values, as W6) into an Ingest (not committed: the table is written
// but not finished, then removed), the designs of ingestTable in
// rotating order within each op: slot words loaded a chunk ahead
// ("chunked", flushNoPrefetch), the same with the next chunk's slots
// touched before the writer's work on this one ("prefetch", flushChunked,
// the design kept), or every slot read in slot order
// into a buffer by rank first ("ranked", wordsByRank). (One key at a time,
// flushByKey, was 1.5x slower than chunked: doc/design.md.)
func BenchmarkIngestTo(b *testing.B) {
	st, kv, gen := ingestBenchGen(b)
	designs := []flushDesign{flushNoPrefetch, flushRanked, flushChunked}
	var times [3]int64
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		for j := range designs {
			d := (i + j) % len(designs)
			gen.tables[0].flushDesign = designs[d]
			t0 := time.Now()
			in := st.NewIngest()
			if err := gen.IngestTo(ctx, in, nil); err != nil {
				b.Fatal(err)
			}
			in.Abort()
			times[d] += int64(time.Since(t0))
		}
	}
	ops := float64(b.N) * float64(kv.PendingKeys())
	b.ReportMetric(float64(times[0])/ops, "chunked-ns/key")
	b.ReportMetric(float64(times[1])/ops, "ranked-ns/key")
	b.ReportMetric(float64(times[2])/ops, "prefetch-ns/key")
	b.ReportMetric(float64(times[1])/float64(times[0]), "ranked/chunked")
	b.ReportMetric(float64(times[2])/float64(times[0]), "prefetch/chunked")
}

// ingestBenchGen returns a store and the sealed generation of 1M random
// keys the ingest benchmarks write (8-byte keys, 16-byte values, as W6),
// its table sorted once, as by the first flush; the store closes with b.
func ingestBenchGen(b *testing.B) (*storage.Store, *KV, *KVGen) {
	st, err := storage.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	kv, err := NewKV(st, 1, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	putRandom(b, kv, 1<<20)
	gen := kv.Freeze(1)
	gen.tables[0].sortedKeys() // sorted once, as by the first flush
	return st, kv, gen
}

// BenchmarkIngestToWriters is BenchmarkIngestTo's 1M-key table written
// (the default design, synced, not committed) by 1, 2 and 4 writers
// (ingestTable's parts, each its own sstable on its own goroutine), in
// rotating order within each op: ns/key and CPU ns/key (the process's
// user+sys) per writer count and the time ratios to one writer.
func BenchmarkIngestToWriters(b *testing.B) {
	st, kv, gen := ingestBenchGen(b)
	writers := []int{1, 2, 4}
	times := make([]int64, len(writers))
	cpus := make([]int64, len(writers))
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		for j := range writers {
			d := (i + j) % len(writers)
			gen.tables[0].flushParts = writers[d]
			c0, _ := processCPU()
			t0 := time.Now()
			in := st.NewIngest()
			if err := gen.IngestTo(ctx, in, nil); err != nil {
				b.Fatal(err)
			}
			in.Abort() // joins the parts: every table is written and synced
			times[d] += int64(time.Since(t0))
			c1, _ := processCPU()
			cpus[d] += int64(c1 - c0)
		}
	}
	ops := float64(b.N) * float64(kv.PendingKeys())
	for d, w := range writers {
		b.ReportMetric(float64(times[d])/ops, fmt.Sprintf("w%d-ns/key", w))
		b.ReportMetric(float64(cpus[d])/ops, fmt.Sprintf("w%d-cpu-ns/key", w))
		if d > 0 {
			b.ReportMetric(float64(times[d])/float64(times[0]), fmt.Sprintf("w%d/w1", w))
		}
	}
}

// BenchmarkIngestSlotReads isolates the slot reads of a 1M-key flush (the
// table of BenchmarkIngestTo, nothing written): the chunked loads of
// ingestTable against wordsByRank (ranks scattered, slots read in slot
// order, words scattered to their rank), in rotating order within each op.
func BenchmarkIngestSlotReads(b *testing.B) {
	const n = 1 << 20
	kv, err := NewKV(nil, 1, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	putRandom(b, kv, n)
	gen := kv.Freeze(1)
	x, ents := gen.tables[0].sortedKeys()
	var times [2]int64
	var sink uint64
	for i := 0; b.Loop(); i++ {
		for j := range 2 {
			d := (i + j) % 2
			t0 := time.Now()
			if d == 0 {
				var sws [ingestChunk]slotWords
				for base := 0; base < len(ents); base += ingestChunk {
					part := ents[base:min(base+ingestChunk, len(ents))]
					for j, e := range part {
						sws[j], _ = x.words(e.ref)
					}
					for j := range part {
						sink += sws[j].w0
					}
				}
			} else {
				for _, sw := range wordsByRank(x, ents) {
					sink += sw.w0
				}
			}
			times[d] += int64(time.Since(t0))
		}
	}
	_ = sink
	ops := float64(b.N) * float64(len(ents))
	b.ReportMetric(float64(times[0])/ops, "chunked-ns/key")
	b.ReportMetric(float64(times[1])/ops, "ranked-ns/key")
	b.ReportMetric(float64(times[1])/float64(times[0]), "ranked/chunked")
}

// putRandom puts n random 8-byte keys (drawn from 4n, so some repeat)
// with 16-byte values into kv, the same keys on every call: the 1M-key
// flush of the ingest benchmarks.
func putRandom(b *testing.B, kv *KV, n int) {
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 16)
	for range n {
		binary.BigEndian.PutUint64(val, rng.Uint64())
		if err := kv.Put(binary.BigEndian.AppendUint64(nil, rng.Uint64N(uint64(4*n))), val); err != nil {
			b.Fatal(err)
		}
	}
}

// TestIngestWritersOption: a negative IngestWriters is refused.
func TestIngestWritersOption(t *testing.T) {
	if _, err := NewKV(nil, 1, nil, &Options{IngestWriters: -1}); !errors.Is(err, kverr.ErrBadOptions) {
		t.Fatalf("NewKV with IngestWriters -1 = %v, want ErrBadOptions", err)
	}
	if err := (&Options{IngestWriters: 4}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFlushSort is the sort of a flush: the key order of
// BenchmarkIngestTo's sealed 1M-key table built from nothing, its entries
// taken in slot order (a sequential scan, the design kept for sealed
// shards) or in log order (a cache miss per key: sortFromLog), in
// rotating order within each op; the two orders are checked equal.
// Metrics: ns/key and cpu-ns/key (the process's user+sys) of each, and
// the ratios slot/log and slot/log-cpu.
func BenchmarkFlushSort(b *testing.B) {
	kv, err := NewKV(nil, 1, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	putRandom(b, kv, 1<<20)
	t := kv.Freeze(1).tables[0]
	var times, cpus [2]int64
	var orders [2][]sortEnt
	for i := 0; b.Loop(); i++ {
		for j := range 2 {
			d := (i + j) % 2
			t.ord.Store(nil)
			t.sortFromLog = d == 1
			c0, _ := processCPU()
			t0 := time.Now()
			_, ents := t.sortedKeys()
			times[d] += int64(time.Since(t0))
			c1, _ := processCPU()
			cpus[d] += int64(c1 - c0)
			orders[d] = ents
		}
	}
	if !slices.Equal(orders[0], orders[1]) {
		b.Fatal("the slot-order and log-order sorts differ")
	}
	keys := float64(b.N) * float64(kv.PendingKeys())
	b.ReportMetric(float64(times[0])/keys, "slot-order-ns/key")
	b.ReportMetric(float64(times[1])/keys, "log-order-ns/key")
	b.ReportMetric(float64(cpus[0])/keys, "slot-order-cpu-ns/key")
	b.ReportMetric(float64(cpus[1])/keys, "log-order-cpu-ns/key")
	b.ReportMetric(float64(times[0])/float64(times[1]), "slot/log")
	b.ReportMetric(float64(cpus[0])/float64(cpus[1]), "slot/log-cpu")
}

// TestFlushSortSlotOrder: the order fullOrder builds for a sealed table
// from its slot arrays (in slot order) is the one it builds from the logs,
// and lists every key once in key order: short, inline, long and
// 8-byte-prefix-sharing keys, deletes, overwrites, slot arrays that grew,
// several shards.
func TestFlushSortSlotOrder(t *testing.T) {
	for _, n := range []int{1, 100, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			kv, err := NewKV(nil, 1, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(n), 3))
			want := map[string]bool{}
			for i := range n {
				var k []byte
				switch i % 4 {
				case 0:
					k = binary.BigEndian.AppendUint64(nil, rng.Uint64N(uint64(4*n)))
				case 1:
					k = fmt.Appendf(nil, "k%d", rng.IntN(n))
				case 2:
					k = fmt.Appendf(nil, "shared-prefix-%040d", rng.IntN(n)) // long, one 8-byte prefix
				case 3:
					k = []byte{byte(rng.IntN(256))}
				}
				if rng.IntN(5) == 0 {
					err = kv.Delete(k)
				} else {
					err = kv.Put(k, fmt.Appendf(nil, "v%d", i))
				}
				if err != nil {
					t.Fatal(err)
				}
				want[string(k)] = true
			}
			tb := kv.Freeze(1).tables[0]
			var orders [2][]string
			for d := range 2 {
				tb.ord.Store(nil)
				tb.sortFromLog = d == 1
				x, ents := tb.sortedKeys()
				for _, e := range ents {
					orders[d] = append(orders[d], x.key(e.ref))
				}
			}
			if !slices.Equal(orders[0], orders[1]) {
				t.Fatalf("slot order %q\nlog order %q", orders[0], orders[1])
			}
			if !slices.IsSorted(orders[0]) || len(orders[0]) != len(want) {
				t.Fatalf("order of %d keys (sorted: %v), want %d", len(orders[0]), slices.IsSorted(orders[0]), len(want))
			}
			for _, k := range orders[0] {
				if !want[k] {
					t.Fatalf("order lists %q, never written", k)
				}
			}
		})
	}
}
