package buffer

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvbuf/kvbuf/storage"
)

const w6Puts = 1_000_000

func w6Fill(rng *rand.Rand, keys [][]byte, vals [][]byte) {
	for i := range keys {
		if keys[i] == nil {
			keys[i], vals[i] = make([]byte, 8), make([]byte, 16)
		}
		binary.BigEndian.PutUint64(keys[i], rng.Uint64())
		binary.BigEndian.PutUint64(vals[i], uint64(i))
	}
}

// benchW6FlushKV is W6's KV half (BenchmarkW6/flush-kv-1m): flushing
// 1,000,000 pending puts (random 8-byte keys, 16-byte values) vs one synced
// pebble batch of the same puts built in arrival order (pebble-batch-sync,
// the floor). The extra row pebble-batch-sync-sorted-input builds the batch
// in key order (sort not timed), to show what sorted input is worth to
// pebble's commit; kvbuf's flush feeds its batch in key order.
func benchW6FlushKV(b *testing.B) {
	keys, vals := make([][]byte, w6Puts), make([][]byte, w6Puts)
	b.Run("flush-kv-1m/kvbuf", func(b *testing.B) {
		s, err := storage.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		kv := NewKV(s, nil)
		rng := rand.New(rand.NewPCG(6, 6))
		b.ReportAllocs()
		op := uint64(0)
		for b.Loop() {
			b.StopTimer()
			w6Fill(rng, keys, vals)
			for i := range keys {
				op++
				kv.Put(keys[i], vals[i], op)
			}
			b.StartTimer()
			if err := kv.Apply(context.Background(), kv.Freeze()); err != nil {
				b.Fatal(err)
			}
			kv.Release()
		}
		reportMSPerFlush(b)
	})
	for _, sorted := range []bool{false, true} {
		name := "flush-kv-1m/pebble-batch-sync"
		if sorted {
			name += "-sorted-input"
		}
		b.Run(name, func(b *testing.B) {
			db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietPebble{}})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			rng := rand.New(rand.NewPCG(6, 6))
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				w6Fill(rng, keys, vals)
				if sorted {
					idx := make([]int, len(keys))
					for i := range idx {
						idx[i] = i
					}
					slices.SortFunc(idx, func(x, y int) int { return bytes.Compare(keys[x], keys[y]) })
					k2, v2 := make([][]byte, len(keys)), make([][]byte, len(keys))
					for i, j := range idx {
						k2[i], v2[i] = keys[j], vals[j]
					}
					copy(keys, k2)
					copy(vals, v2)
				}
				b.StartTimer()
				batch := db.NewBatch()
				for i := range keys {
					batch.Set(keys[i], vals[i], nil)
				}
				if err := batch.Commit(pebble.Sync); err != nil {
					b.Fatal(err)
				}
				batch.Close()
			}
			reportMSPerFlush(b)
		})
	}
}

// BenchmarkFlushCollect isolates the "collect in key order" step of a 1M-key
// flush: merging the shards' skip lists (what Apply does) against collecting
// the entries unordered and sorting them with slices.SortFunc or an LSD
// radix sort on the 8-byte keys.
//
//	go test ./buffer -run '^$' -bench 'BenchmarkFlushCollect' -count 5
func BenchmarkFlushCollect(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 7))
	ordered := newTable[string, kvVal](DefaultShards, true)
	plain := newTable[string, kvVal](DefaultShards, false)
	for range w6Puts {
		k := string(binary.BigEndian.AppendUint64(nil, rng.Uint64()))
		ordered.Set(k, kvVal{}, 0)
		plain.Set(k, kvVal{}, 0)
	}
	out := make([]*entry[string, kvVal], 0, w6Puts)
	check := func(b *testing.B) {
		if len(out) != ordered.Len() || !slices.IsSortedFunc(out, func(x, y *entry[string, kvVal]) int {
			return bytes.Compare([]byte(x.key), []byte(y.key))
		}) {
			b.Fatal("collect step produced wrong order")
		}
	}
	b.Run("skiplist-merge", func(b *testing.B) {
		for b.Loop() {
			out = out[:0]
			var m mergeCursor[string, kvVal]
			m.addTable(ordered, 0)
			for m.seek("", true); m.valid(); m.advance() {
				out = append(out, m.top().ent.Load())
			}
		}
		check(b)
	})
	b.Run("sortfunc", func(b *testing.B) {
		for b.Loop() {
			out = out[:0]
			plain.rangeEntries(func(e *entry[string, kvVal]) bool { out = append(out, e); return true })
			slices.SortFunc(out, func(x, y *entry[string, kvVal]) int {
				switch {
				case x.key < y.key:
					return -1
				case x.key > y.key:
					return 1
				}
				return 0
			})
		}
		check(b)
	})
	b.Run("radix", func(b *testing.B) {
		tmp := make([]*entry[string, kvVal], w6Puts)
		for b.Loop() {
			out = out[:0]
			plain.rangeEntries(func(e *entry[string, kvVal]) bool { out = append(out, e); return true })
			src, dst := out, tmp[:len(out)]
			for pass := 7; pass >= 0; pass-- {
				var cnt [257]int
				for _, e := range src {
					cnt[int(e.key[pass])+1]++
				}
				for i := 1; i < 257; i++ {
					cnt[i] += cnt[i-1]
				}
				for _, e := range src {
					c := e.key[pass]
					dst[cnt[c]] = e
					cnt[c]++
				}
				src, dst = dst, src
			}
			// 8 passes: the result is back in out.
		}
		check(b)
	})
}
