package storage

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
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

// openW2 returns a Store and a raw pebble DB on real directories, loaded
// with the same W2 data and the same pebble options (default cache size),
// both flushed.
func openW2(b *testing.B) (*Store, *pebble.DB) {
	b.Helper()
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	po := (*Options)(nil).pebbleOptions()
	db, err := pebble.Open(b.TempDir(), po)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })

	sb := s.NewBatch()
	rb := db.NewBatch()
	for i := range uint64(w2Keys) {
		k, v := be8(i*4), w2Value(i)
		sb.Put(k, v)
		if err := rb.Set(k, v, nil); err != nil {
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

// w2HotKeys bounds the "hot" lookups to stored keys whose blocks stay in
// the block cache, so that the per-call overhead is not lost in I/O noise.
const w2HotKeys = 1 << 14

// BenchmarkStoreGet compares Store.Get (tagged key, close guard, value copy)
// with raw pebble db.Get on the W2 setup. "hit" looks up stored keys only;
// "random" looks up uniform keys in [0, 4194304), a quarter of which exist;
// "hot" looks up the first 16,384 stored keys (block-cache resident).
// The raw baseline closes the closer and does not copy; kvbuf-get copies
// into a new slice; kvbuf-getappend copies into a reused buffer.
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
		b.Run(set.name+"/pebble-get", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				v, c, err := db.Get(keys[i%len(keys)])
				if err == nil {
					_ = v
					_ = c.Close()
				}
				i++
			}
		})
		b.Run(set.name+"/kvbuf-get", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = s.Get(keys[i%len(keys)])
				i++
			}
		})
		b.Run(set.name+"/kvbuf-getappend", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			i := 0
			for b.Loop() {
				_, _ = s.GetAppend(buf[:0], keys[i%len(keys)])
				i++
			}
		})
	}
}

// BenchmarkW6 is workload W6 for the KV store: committing 1,000,000 puts
// (8-byte big-endian keys drawn uniformly from [0, 4194304), 16-byte
// values) as one synced batch. One op is building the batch plus the
// synced commit. pebble-batch-sync is the floor (raw pebble keys, input in
// random order); kvbuf/unsorted is Store.Apply of the same input with a
// watermark; kvbuf/sorted is the same after sorting the input (the sort is
// not timed: it models a caller that already holds sorted changes).
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
		db, err := pebble.Open(b.TempDir(), (*Options)(nil).pebbleOptions())
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		b.ReportAllocs()
		for b.Loop() {
			batch := db.NewBatch()
			for _, e := range unsorted {
				if err := batch.Set(e.k, e.v, nil); err != nil {
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
					batch.Put(e.k, e.v)
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
