package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// W2 setup: 1,048,576 keys, 8-byte big-endian i*4, 16-byte values, flushed.
const (
	w2Keys     = 1 << 20
	w2KeySpace = 4 << 20
	w2Lookups  = 1 << 20
)

func be8(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

func w2Value(i uint64) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, i)
	binary.BigEndian.PutUint64(v[8:], ^i)
	return v
}

// openW2 returns a Store and a raw pebble DB on real directories, the raw
// one opened with PebbleOptions(nil) (exactly like the store) and holding
// the same stored keys (tag, keyspace ID, key), both loaded with the W2 data
// and flushed.
func openW2(b *testing.B) (*Store, *pebble.DB) {
	b.Helper()
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	db, err := pebble.Open(b.TempDir(), PebbleOptions(nil))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })

	sb := s.NewBatch()
	rb := db.NewBatch()
	for i := range uint64(w2Keys) {
		k, v := be8(i*4), w2Value(i)
		sb.Put(ks1, k, v)
		if err := rb.Set(appendUserKey(nil, ks1, k), v, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Apply(sb); err != nil {
		b.Fatal(err)
	}
	if err := rb.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	return s, db
}

// sink keeps benchmark results alive, so that the compiler cannot drop the
// copies being measured.
var sink []byte

// w2HotKeys bounds the "hot" lookups to stored keys whose blocks stay in
// the block cache, so that the per-call overhead is not lost in I/O noise.
const w2HotKeys = 1 << 14

// BenchmarkStoreGet compares Store.Get and Store.GetAppend with raw pebble
// db.Get on the W2 setup, pebble opened with PebbleOptions(nil) and given
// the stored keys (so the difference is the Store's own work: building the
// stored key, the close guard, error mapping). "hit" looks up stored keys
// only; "random" looks up uniform keys in [0, 4194304), a quarter of which
// exist; "hot" looks up the first 16,384 stored keys (block-cache
// resident). Pairs to compare: pebble-get-copy (db.Get, copy into a new
// slice, close) with kvbuf-get; pebble-get-append (db.Get, append to a
// reused buffer, close) with kvbuf-getappend. pebble-get (no copy) is the
// floor.
//
//	go test ./storage -run '^$' -bench 'BenchmarkStoreGet' -count 5
func BenchmarkStoreGet(b *testing.B) {
	s, db := openW2(b)
	rng := rand.New(rand.NewPCG(1, 2))
	sets := []struct {
		name string
		keys [][]byte
	}{{name: "hit"}, {name: "random"}, {name: "hot"}}
	for range w2Lookups {
		sets[0].keys = append(sets[0].keys, be8(rng.Uint64N(w2Keys)*4))
		sets[1].keys = append(sets[1].keys, be8(rng.Uint64N(w2KeySpace)))
		sets[2].keys = append(sets[2].keys, be8(rng.Uint64N(w2HotKeys)*4))
	}
	for _, set := range sets {
		keys := set.keys
		stored := make([][]byte, len(keys))
		for i, k := range keys {
			stored[i] = appendUserKey(nil, ks1, k)
		}
		b.Run(set.name+"/pebble-get", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				v, c, err := db.Get(stored[i%len(stored)])
				if err == nil {
					_ = v
					_ = c.Close()
				}
				i++
			}
		})
		b.Run(set.name+"/pebble-get-copy", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				v, c, err := db.Get(stored[i%len(stored)])
				if err == nil {
					out := make([]byte, len(v))
					copy(out, v)
					sink = out
					_ = c.Close()
				}
				i++
			}
		})
		b.Run(set.name+"/kvbuf-get", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink, _ = s.Get(ks1, keys[i%len(keys)])
				i++
			}
		})
		b.Run(set.name+"/pebble-get-append", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			i := 0
			for b.Loop() {
				v, c, err := db.Get(stored[i%len(stored)])
				if err == nil {
					buf = append(buf[:0], v...)
					_ = c.Close()
				}
				i++
			}
		})
		b.Run(set.name+"/kvbuf-getappend", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			i := 0
			for b.Loop() {
				_, _ = s.GetAppend(buf[:0], ks1, keys[i%len(keys)])
				i++
			}
		})
	}
}

// BenchmarkStoreGetOverhead measures what BenchmarkStoreGet's pairs
// differ by, robustly on a busy machine: each op runs 64 lookups through
// the Store and the same 64 through raw pebble (alternating which goes
// first, since the second run finds the same blocks in the CPU caches),
// timing each run. It reports both sides' mean ns per lookup and the
// Store's overhead in percent from the time ratios of the pairs of runs:
// the geometric mean of the median ratio with the Store first and the
// median ratio with pebble first. Medians move much less than means under
// bursts of load from other processes. Pairs: kvbuf-get against
// pebble-get-copy, kvbuf-getappend against pebble-get-append, on the "hot"
// and "random" key sets of BenchmarkStoreGet.
//
//	go test ./storage -run '^$' -bench 'BenchmarkStoreGetOverhead' -count 3
func BenchmarkStoreGetOverhead(b *testing.B) {
	s, db := openW2(b)
	rng := rand.New(rand.NewPCG(5, 6))
	const run = 64
	for _, set := range []struct {
		name  string
		space uint64
		mul   uint64
	}{{"hot", w2HotKeys, 4}, {"random", w2KeySpace, 1}} {
		keys := make([][]byte, 1<<16)
		stored := make([][]byte, len(keys))
		for i := range keys {
			keys[i] = be8(rng.Uint64N(set.space) * set.mul)
			stored[i] = appendUserKey(nil, ks1, keys[i])
		}
		for _, mode := range []string{"get", "getappend"} {
			b.Run(set.name+"/"+mode, func(b *testing.B) {
				buf := make([]byte, 0, 64)
				kvbuf := func(i int) {
					for j := i; j < i+run; j++ {
						if mode == "get" {
							sink, _ = s.Get(ks1, keys[j%len(keys)])
						} else {
							buf, _ = s.GetAppend(buf[:0], ks1, keys[j%len(keys)])
						}
					}
				}
				raw := func(i int) {
					for j := i; j < i+run; j++ {
						v, c, err := db.Get(stored[j%len(stored)])
						if err != nil {
							continue
						}
						if mode == "get" {
							out := make([]byte, len(v))
							copy(out, v)
							sink = out
						} else {
							buf = append(buf[:0], v...)
						}
						_ = c.Close()
					}
				}
				var tk, tp time.Duration
				var ratios [2][]float64 // Store first, pebble first
				i := 0
				for b.Loop() {
					first, second := kvbuf, raw
					if i/run%2 == 1 {
						first, second = raw, kvbuf
					}
					start := time.Now()
					first(i)
					mid := time.Now()
					second(i)
					d1, d2 := mid.Sub(start), time.Since(mid)
					if i/run%2 == 1 {
						d1, d2 = d2, d1
					}
					tk += d1
					tp += d2
					ratios[i/run%2] = append(ratios[i/run%2], float64(d1)/float64(d2))
					i += run
				}
				median := func(r []float64) float64 {
					if len(r) == 0 {
						return 1
					}
					slices.Sort(r)
					return r[len(r)/2]
				}
				n := float64(i)
				b.ReportMetric(float64(tk.Nanoseconds())/n, "kvbuf-ns/lookup")
				b.ReportMetric(float64(tp.Nanoseconds())/n, "pebble-ns/lookup")
				b.ReportMetric(100*(math.Sqrt(median(ratios[0])*median(ratios[1]))-1), "overhead-%")
			})
		}
	}
}

// BenchmarkW6 is workload W6 for the KV store: committing 1,000,000 puts
// (8-byte big-endian keys drawn uniformly from [0, 4194304), 16-byte
// values) as one synced batch. One op is building the batch plus the
// synced commit. pebble-batch-sync is the floor (raw pebble opened with
// PebbleOptions(nil), the same stored keys, input in random order);
// kvbuf/unsorted is Store.Apply of the same input with a watermark;
// kvbuf/sorted is the same after sorting the input (the sort is not timed:
// it models a caller that already holds sorted changes).
func BenchmarkW6(b *testing.B) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(3, 4))
	type kv struct{ k, v []byte }
	unsorted := make([]kv, n)
	for i := range unsorted {
		x := rng.Uint64N(w2KeySpace)
		unsorted[i] = kv{be8(x), w2Value(x)}
	}
	sorted := slices.Clone(unsorted)
	slices.SortFunc(sorted, func(a, b kv) int { return slices.Compare(a.k, b.k) })

	b.Run("flush-kv-1m/pebble-batch-sync", func(b *testing.B) {
		db, err := pebble.Open(b.TempDir(), PebbleOptions(nil))
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		stored := make([][]byte, len(unsorted))
		for i, e := range unsorted {
			stored[i] = appendUserKey(nil, ks1, e.k)
		}
		b.ReportAllocs()
		for b.Loop() {
			batch := db.NewBatch()
			for i, e := range unsorted {
				if err := batch.Set(stored[i], e.v, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := batch.Commit(pebble.Sync); err != nil {
				b.Fatal(err)
			}
			_ = batch.Close()
		}
	})
	for _, in := range []struct {
		name string
		kvs  []kv
	}{{"unsorted", unsorted}, {"sorted", sorted}} {
		b.Run("flush-kv-1m/kvbuf/"+in.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			batch := s.NewBatch()
			op := uint64(0)
			for b.Loop() {
				for _, e := range in.kvs {
					batch.Put(ks1, e.k, e.v)
				}
				op++
				batch.SetWatermark(op)
				if err := s.Apply(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommitPipeline commits small batches (10 puts and a watermark)
// on a real directory: "apply" waits for each sync before the next commit;
// "pipelined" commits batch n+1 before waiting for batch n, the flusher's
// pattern, so that the next batch is in the WAL while a sync is in flight.
func BenchmarkCommitPipeline(b *testing.B) {
	fill := func(batch *Batch, op uint64) {
		for j := range uint64(10) {
			batch.Put(ks1, be8(op*10+j), w2Value(j))
		}
		batch.SetWatermark(op)
	}
	b.Run("apply", func(b *testing.B) {
		s, err := Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		batch := s.NewBatch()
		op := uint64(0)
		for b.Loop() {
			op++
			fill(batch, op)
			if err := s.Apply(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pipelined", func(b *testing.B) {
		s, err := Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		batch := s.NewBatch()
		var prev *Commit
		op := uint64(0)
		for b.Loop() {
			op++
			fill(batch, op)
			c, err := s.Commit(batch)
			if err != nil {
				b.Fatal(err)
			}
			if prev != nil {
				if err := prev.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			prev = c
		}
		if err := prev.Wait(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkStoreScan compares a full scan through Store.NewIter (Key and
// Value at every key: since issue 30 both are the iterator's own copies,
// which Store.Close cannot release under a reader) with the same scan
// through a raw pebble iterator over the same stored keys (pebble opened
// with PebbleOptions(nil)), per value size: 16,384 keys (8-byte keys),
// flushed, block-cache resident, both on a vfs.MemFS (no disk I/O to
// drown the difference). One op is one scan of every key; the ratio
// kvbuf-iter/pebble-iter is the store iterator's overhead.
//
//	go test ./storage -run '^$' -bench 'BenchmarkStoreScan' -count 5
func BenchmarkStoreScan(b *testing.B) {
	const n = 1 << 14
	for _, vsize := range []int{16, 256, 4096} {
		s, err := Open("s", &Options{FS: vfs.NewMem(), CacheSize: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		db, err := pebble.Open("p", PebbleOptions(&Options{FS: vfs.NewMem(), CacheSize: 256 << 20}))
		if err != nil {
			b.Fatal(err)
		}
		sb, rb := s.NewBatch(), db.NewBatch()
		val := make([]byte, vsize)
		for i := range uint64(n) {
			binary.BigEndian.PutUint64(val, i)
			sb.Put(ks1, be8(i), val)
			if err := rb.Set(appendUserKey(nil, ks1, be8(i)), val, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := errors.Join(s.Apply(sb), rb.Commit(pebble.Sync), s.Flush(), db.Flush()); err != nil {
			b.Fatal(err)
		}
		var sum int
		b.Run(fmt.Sprintf("value-%d/kvbuf-iter", vsize), func(b *testing.B) {
			for b.Loop() {
				it, err := s.NewIter(ks1, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				for ok := it.First(); ok; ok = it.Next() {
					sum += len(it.Key()) + int(it.Value()[0])
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("value-%d/pebble-iter", vsize), func(b *testing.B) {
			lo := appendUserKey(nil, ks1, nil)
			hi := keyspaceEnd(nil, ks1)
			for b.Loop() {
				it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
				if err != nil {
					b.Fatal(err)
				}
				for ok := it.First(); ok; ok = it.Next() {
					sum += len(it.Key()) + int(it.Value()[0])
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
		if err := errors.Join(s.Close(), db.Close()); err != nil {
			b.Fatal(err)
		}
		sink = binary.AppendUvarint(sink[:0], uint64(sum))
	}
}
