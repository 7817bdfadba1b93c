package buffer

import (
	"encoding/binary"
	"flag"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The KV table benchmarks, named after the workloads of doc/workloads.md
// they isolate: the buffer's overlay alone (no engine, no admission), next
// to the in-memory structures it competes with, built from the same keys
// in the same run. Sizes follow W2 at -kvscale=1 (1,000,000 pending
// changes at uniform keys of [0, 4,194,304), 8-byte big-endian keys,
// 16-byte values, 10% deletes); doc/design.md ("KV tables") quotes them:
//
//	go test ./internal/buffer -run '^$' -bench 'BenchmarkW[238]' -count 5
//
// Every row reports ns per operation (a lookup, a put, a scan) and
// allocations; W2/memory adds live heap bytes per pending entry, and
// W2/gc-1m the time of one runtime.GC() with the entries pending.
var kvScale = flag.Float64("kvscale", 1, "KV table benchmark size (1: W2's 1,000,000 pending changes)")

const (
	w3ChurnKeys = 65_536 // W3's churn keys per goroutine
	w2Space     = 4 << 20
	w2ValueLen  = 16
	w2Lookups   = 1 << 16
)

// w2Fixture is W2's pending changes, built once per process, in flat
// arrays (a fixture of a million small objects would make the garbage
// collector's work, which W2/gc-1m measures, mostly the fixture's).
type w2Fixture struct {
	n        int
	keys     []byte // change i's key: keys[8i:8i+8]
	vals     []byte // change i's value: vals[16i:16i+16]
	del      []bool // change i is a delete
	distinct int    // keys changed
	hits     [][]byte
	tombs    [][]byte // keys whose last change is a delete
	miss     [][]byte // keys without a change
}

func (f *w2Fixture) key(i int) []byte { return f.keys[8*i : 8*i+8 : 8*i+8] }

func (f *w2Fixture) val(i int) []byte {
	if f.del[i] {
		return nil
	}
	return f.vals[w2ValueLen*i : w2ValueLen*(i+1) : w2ValueLen*(i+1)]
}

var (
	w2Once sync.Once
	w2Fix  *w2Fixture
)

func w2Key(i uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, i)
	return k
}

func w2Data() *w2Fixture {
	w2Once.Do(func() {
		n := int(1_000_000 * *kvScale)
		rng := rand.New(rand.NewPCG(1, 1))
		f := &w2Fixture{n: n, keys: make([]byte, 8*n), vals: make([]byte, w2ValueLen*n), del: make([]bool, n)}
		last := map[uint64]int{} // key -> its last change
		for i := range n {
			k := rng.Uint64N(w2Space)
			binary.BigEndian.PutUint64(f.keys[8*i:], k)
			if rng.IntN(10) == 0 {
				f.del[i] = true
			} else {
				for j := range w2ValueLen {
					f.vals[w2ValueLen*i+j] = byte(rng.Uint32())
				}
			}
			last[k] = i
		}
		f.distinct = len(last)
		var hits, tombs []uint64
		for k, i := range last {
			if f.del[i] {
				tombs = append(tombs, k)
			} else {
				hits = append(hits, k)
			}
		}
		slices.Sort(hits)
		slices.Sort(tombs)
		flat := make([]byte, 0, 3*8*w2Lookups)
		pick := func(from []uint64) [][]byte {
			out := make([][]byte, w2Lookups)
			for i := range out {
				flat = binary.BigEndian.AppendUint64(flat, from[rng.IntN(len(from))])
				out[i] = flat[len(flat)-8 : len(flat) : len(flat)]
			}
			return out
		}
		f.hits, f.tombs = pick(hits), pick(tombs)
		for len(f.miss) < w2Lookups {
			k := rng.Uint64N(w2Space)
			if _, ok := last[k]; !ok {
				flat = binary.BigEndian.AppendUint64(flat, k)
				f.miss = append(f.miss, flat[len(flat)-8:len(flat):len(flat)])
			}
		}
		w2Fix = f
	})
	return w2Fix
}

// benchKV returns an overlay over an empty store.
func benchKV(b *testing.B, opts *Options) *KV {
	b.Helper()
	r := newKVRig(b, opts)
	return r.kv
}

// loadW2 applies the fixture's changes to kv as single writes.
func loadW2(b *testing.B, kv *KV, f *w2Fixture) {
	for i := range f.n {
		var err error
		if f.del[i] {
			err = kv.Delete(f.key(i))
		} else {
			err = kv.Put(f.key(i), f.val(i))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// mapW2 builds the map baseline of the fixture (copied keys and values).
func mapW2(f *w2Fixture) map[string][]byte {
	m := make(map[string][]byte)
	for i := range f.n {
		var v []byte
		if !f.del[i] {
			v = append([]byte(nil), f.val(i)...)
		}
		m[string(f.key(i))] = v
	}
	return m
}

// getAppendNoSeq is GetAppend without loading the visible sequence number
// (every change visible): the benchmark's measure of what atomic batch
// visibility costs a Get. Keep it in step with KV.GetAppend.
func (kv *KV) getAppendNoSeq(dst, key []byte) ([]byte, bool) {
	if kv.checkKey(key) != nil {
		return dst, false
	}
	k := unsafe.String(unsafe.SliceData(key), len(key))
	h, kw := keyHash(k, kv.seed)
	for {
		v := kv.view.Load()
		out, kind := v.getAppend(dst, k, h, kw, ^uint64(0))
		if kv.view.Load() == v {
			return out, kind == probeValue
		}
	}
}

// lookup is GetAppend's probe of the pending tables alone (a found value
// appended to dst), re-validated against recycling: the pending side of a
// read that misses.
func (kv *KV) lookup(dst, key []byte) ([]byte, uint8) {
	k := unsafe.String(unsafe.SliceData(key), len(key))
	h, kw := keyHash(k, kv.seed)
	for {
		// The visible number first: every change numbered at or below
		// it was stored before it was published, so it is in the
		// tables of any view loaded after (or in the store, if its
		// table was released).
		vis := kv.seq.visible.Load()
		v := kv.view.Load()
		out, kind := v.getAppend(dst, k, h, kw, vis)
		// A table of v may have been released and cleared while we
		// probed it: only if the view is unchanged did the probe precede
		// every clear (a release publishes the new view first).
		if kv.view.Load() == v && kind != probeRetry {
			return out, kind
		}
	}
}

// perOp reports wall time per operation of a loop of ops operations per
// b.Loop iteration. Call it after the loop.
func perOp(b *testing.B, ops int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ops), "ns/op")
}

// cpuMeter measures the CPU time of a benchmark's loop on its own thread
// (the goroutine is locked to it): start it before the loop, stop it after.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	runtime.LockOSThread()
	t, ok := threadCPU()
	return cpuMeter{t, ok}
}

// stop reports CPU time per operation as cpu-ns/op, and wall time.
func (m cpuMeter) stop(b *testing.B, ops int) {
	t, ok := threadCPU()
	runtime.UnlockOSThread()
	if m.ok && ok {
		b.ReportMetric(float64((t-m.start).Nanoseconds())/float64(b.N*ops), "cpu-ns/op")
	}
	perOp(b, ops)
}

// BenchmarkW2 runs W2's lookups (one op: one Get of a random key of the
// class), GetMany (64 keys per call, reported per key), the pending-side
// scan, the memory and GC rows, and the first iterator over 1M pending
// changes in both designs of the active table's order.
func BenchmarkW2(b *testing.B) {
	f := w2Data()
	kv := benchKV(b, nil)
	loadW2(b, kv, f)
	var mu sync.RWMutex
	m := mapW2(f)
	get := func(b *testing.B, keys [][]byte, want bool) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		cm := startCPU()
		for b.Loop() {
			for _, k := range keys {
				var err error
				buf, err = kv.GetAppend(buf[:0], k)
				if (err == nil) != want {
					b.Fatalf("Get(%x): %v", k, err)
				}
			}
		}
		cm.stop(b, len(keys))
	}
	getNoSeq := func(b *testing.B, keys [][]byte) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		cm := startCPU()
		for b.Loop() {
			for _, k := range keys {
				var ok bool
				if buf, ok = kv.getAppendNoSeq(buf[:0], k); !ok {
					b.Fatalf("Get(%x) missed", k)
				}
			}
		}
		cm.stop(b, len(keys))
	}
	getMany := func(b *testing.B, keys [][]byte) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64*w2ValueLen)
		vals := make([][]byte, 64)
		cm := startCPU()
		for b.Loop() {
			for j := 0; j < len(keys); j += 64 {
				var err error
				if buf, err = kv.GetMany(keys[j:j+64], vals, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		}
		cm.stop(b, len(keys))
	}
	mapGet := func(b *testing.B, keys [][]byte) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		cm := startCPU()
		for b.Loop() {
			for _, k := range keys {
				mu.RLock()
				v, ok := m[string(k)]
				if ok && v != nil {
					buf = append(buf[:0], v...)
				}
				mu.RUnlock()
			}
		}
		cm.stop(b, len(keys))
	}
	b.Run("get-pending-hit/kvbuf-overlay", func(b *testing.B) { get(b, f.hits, true) })
	b.Run("get-pending-hit/kvbuf-no-visible-seq", func(b *testing.B) { getNoSeq(b, f.hits) })
	b.Run("get-pending-hit/kvbuf-getmany", func(b *testing.B) { getMany(b, f.hits) })
	b.Run("get-pending-hit/kvbuf-getmany-per-get", func(b *testing.B) {
		// GetMany's time per key over a loop of Get's, each op one
		// pass of each over the same keys, in alternating order: a
		// ratio within each op, so that the machine's load moves both
		// sides (the rows above run minutes apart). Reports the median.
		b.ReportAllocs()
		buf := make([]byte, 0, 64*w2ValueLen)
		vals := make([][]byte, 64)
		pass := func(many bool) time.Duration {
			start := time.Now()
			var err error
			for j := 0; j < len(f.hits) && err == nil; j += 64 {
				if many {
					buf, err = kv.GetMany(f.hits[j:j+64], vals, buf[:0])
					continue
				}
				for _, k := range f.hits[j : j+64] {
					if buf, err = kv.GetAppend(buf[:0], k); err != nil {
						break
					}
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		var ratios []float64
		for b.Loop() {
			first := len(ratios)%2 == 0
			d1, d2 := pass(first), pass(!first)
			if !first {
				d1, d2 = d2, d1
			}
			ratios = append(ratios, float64(d1)/float64(d2))
		}
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "getmany/get")
	})
	b.Run("get-pending-hit/rwmutex+map", func(b *testing.B) { mapGet(b, f.hits) })
	b.Run("get-pending-tombstone/kvbuf-overlay", func(b *testing.B) { get(b, f.tombs, false) })
	b.Run("get-pending-tombstone/rwmutex+map", func(b *testing.B) { mapGet(b, f.tombs) })
	b.Run("get-miss-pending-side/kvbuf-overlay", func(b *testing.B) {
		// The pending side of a miss: the probe of the tables that
		// sends a key to the store (the store read is left out).
		b.ReportAllocs()
		cm := startCPU()
		for b.Loop() {
			for _, k := range f.miss {
				if _, kind := kv.lookup(nil, k); kind != probeAbsent {
					b.Fatalf("%x found", k)
				}
			}
		}
		cm.stop(b, len(f.miss))
	})
	b.Run("get-miss-pending-side/rwmutex+map", func(b *testing.B) { mapGet(b, f.miss) })
	b.Run("scan-10k/kvbuf-overlay", func(b *testing.B) {
		b.ReportAllocs()
		rng := rand.New(rand.NewPCG(2, 2))
		for b.Loop() {
			it, err := kv.NewIter(w2Key(rng.Uint64N(w2Space*9/10)), nil)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for ok := it.First(); ok && n < 10_000; ok = it.Next() {
				n += int(it.Value()[0]&1) + 1
			}
			if err := it.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, p := range orderDesigns {
		b.Run("first-iter-1m/kvbuf-"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				kv := benchKV(b, nil)
				kv.orderOf = p.orderOf
				loadW2(b, kv, f)
				runtime.GC()
				b.StartTimer()
				c0, _ := threadCPU()
				it, err := kv.NewIter(nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				if !it.First() {
					b.Fatal("empty")
				}
				_ = it.Close()
				c1, _ := threadCPU()
				cpu += c1 - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(f.distinct), "cpu-ns/key")
		})
	}
	b.Run("memory/kvbuf-overlay", func(b *testing.B) {
		for b.Loop() {
			before := liveHeap()
			kv := benchKV(b, nil)
			loadW2(b, kv, f)
			after := liveHeap()
			b.ReportMetric(float64(after-before)/float64(f.distinct), "heap-B/entry")
			b.ReportMetric(float64(kv.PendingBytes())/float64(kv.PendingKeys()), "accounted-B/entry")
			runtime.KeepAlive(kv)
		}
	})
	b.Run("memory/map", func(b *testing.B) {
		for b.Loop() {
			before := liveHeap()
			m := mapW2(f)
			after := liveHeap()
			b.ReportMetric(float64(after-before)/float64(f.distinct), "heap-B/entry")
			runtime.KeepAlive(m)
		}
	})
	gc := func(b *testing.B) {
		var d time.Duration
		for b.Loop() {
			start := time.Now()
			runtime.GC()
			d += time.Since(start)
		}
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "gc-ns")
	}
	b.Run("gc-1m/kvbuf-overlay", func(b *testing.B) {
		m = nil
		runtime.GC()
		gc(b)
		runtime.KeepAlive(kv)
	})
	b.Run("gc-1m/map", func(b *testing.B) {
		m := mapW2(f)
		gc(b)
		runtime.KeepAlive(m)
	})
}

// liveHeap returns the live heap after two collections.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkW2Interleaved: 100 puts, then a scan of 100 keys from a random
// start, repeated (one op: the puts and the scan), over a table holding
// 100,000 pending keys, for both designs of the active table's order and a
// pebble indexed batch receiving the same puts.
func BenchmarkW2Interleaved(b *testing.B) {
	const (
		preload = 100_000
		puts    = 100
		scanLen = 100
	)
	val := make([]byte, w2ValueLen)
	type impl struct {
		put  func(k []byte)
		scan func(start []byte) int
	}
	run := func(b *testing.B, x impl) {
		b.ReportAllocs()
		rng := rand.New(rand.NewPCG(3, 3))
		for range preload {
			x.put(w2Key(rng.Uint64N(w2Space)))
		}
		for b.Loop() {
			for range puts {
				x.put(w2Key(rng.Uint64N(w2Space)))
			}
			if n := x.scan(w2Key(rng.Uint64N(w2Space * 9 / 10))); n == 0 {
				b.Fatal("empty scan")
			}
		}
	}
	for _, p := range orderDesigns {
		b.Run("kvbuf-"+p.name, func(b *testing.B) {
			kv := benchKV(b, nil)
			kv.orderOf = p.orderOf
			run(b, impl{
				put: func(k []byte) {
					if err := kv.Put(k, val); err != nil {
						b.Fatal(err)
					}
				},
				scan: func(start []byte) int {
					it, err := kv.NewIter(start, nil)
					if err != nil {
						b.Fatal(err)
					}
					n := 0
					for ok := it.First(); ok && n < scanLen; ok = it.Next() {
						n++
					}
					_ = it.Close()
					return n
				},
			})
		})
	}
	b.Run("pebble-indexed-batch", func(b *testing.B) {
		db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		ib := db.NewIndexedBatch()
		defer ib.Close()
		run(b, impl{
			put: func(k []byte) {
				if err := ib.Set(k, val, nil); err != nil {
					b.Fatal(err)
				}
			},
			scan: func(start []byte) int {
				it, err := ib.NewIter(&pebble.IterOptions{LowerBound: start})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for ok := it.First(); ok && n < scanLen; ok = it.Next() {
					n++
				}
				_ = it.Close()
				return n
			},
		})
	})
}

// BenchmarkW3 runs W3's hit rows in one goroutine (one op: one lookup
// copying the value out) over n preloaded keys, its churn row (one op: a
// put and a delete of key 64 + t mod 65,536, so that the first 65,536 ops
// add keys and every later one overwrites) and its construct row (one op:
// an overlay holding one key), the overlay against a mutex-guarded map.
func BenchmarkW3(b *testing.B) {
	b.Run("miss_churn-64/kvbuf-overlay", func(b *testing.B) {
		kv := benchKV(b, nil)
		keys := make([][]byte, 64+w3ChurnKeys)
		for i := range keys {
			keys[i] = w2Key(uint64(i))
			if i < 64 {
				if err := kv.Put(keys[i], keys[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportAllocs()
		cm := startCPU()
		t := 0
		for b.Loop() {
			k := keys[64+t%w3ChurnKeys]
			if err := kv.Put(k, k); err != nil {
				b.Fatal(err)
			}
			if err := kv.Delete(k); err != nil {
				b.Fatal(err)
			}
			t++
		}
		cm.stop(b, 1)
	})
	b.Run("miss_churn-64/mutex+map", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string][]byte{}
		keys := make([][]byte, 64+w3ChurnKeys)
		for i := range keys {
			keys[i] = w2Key(uint64(i))
			if i < 64 {
				m[string(keys[i])] = append([]byte(nil), keys[i]...)
			}
		}
		b.ReportAllocs()
		cm := startCPU()
		t := 0
		for b.Loop() {
			k := keys[64+t%w3ChurnKeys]
			mu.Lock()
			m[string(k)] = append([]byte(nil), k...)
			mu.Unlock()
			mu.Lock()
			m[string(k)] = nil
			mu.Unlock()
			t++
		}
		cm.stop(b, 1)
	})
	b.Run("construct/kvbuf-overlay", func(b *testing.B) {
		one := w2Key(1)
		keep := make([]*KV, 0, 1000)
		b.ReportAllocs()
		cm := startCPU()
		for b.Loop() {
			if len(keep) == cap(keep) {
				keep = keep[:0]
			}
			kv, err := NewKV(nil, 1, nil, nil)
			if err == nil {
				err = kv.Put(one, one)
			}
			if err != nil {
				b.Fatal(err)
			}
			keep = append(keep, kv)
		}
		cm.stop(b, 1)
	})
	b.Run("construct/mutex+map", func(b *testing.B) {
		one := w2Key(1)
		type locked struct {
			mu sync.Mutex
			m  map[string][]byte
		}
		keep := make([]*locked, 0, 1000)
		b.ReportAllocs()
		cm := startCPU()
		for b.Loop() {
			if len(keep) == cap(keep) {
				keep = keep[:0]
			}
			x := &locked{m: map[string][]byte{}}
			x.mu.Lock()
			x.m[string(one)] = append([]byte(nil), one...)
			x.mu.Unlock()
			keep = append(keep, x)
		}
		cm.stop(b, 1)
	})
	for _, n := range []int{1, 64, 1024} {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = w2Key(uint64(i))
		}
		name := map[int]string{1: "hit_same_key", 64: "hit_disjoint-64", 1024: "hit_disjoint-1024"}[n]
		const ops = 1 << 14
		b.Run(name+"/kvbuf-overlay", func(b *testing.B) {
			kv := benchKV(b, nil)
			for _, k := range keys {
				if err := kv.Put(k, k); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			buf := make([]byte, 0, 16)
			cm := startCPU()
			for b.Loop() {
				for t := range ops {
					var err error
					if buf, err = kv.GetAppend(buf[:0], keys[t%n]); err != nil {
						b.Fatal(err)
					}
				}
			}
			cm.stop(b, ops)
		})
		b.Run(name+"/mutex+map", func(b *testing.B) {
			var mu sync.Mutex
			m := map[string][]byte{}
			for _, k := range keys {
				m[string(k)] = append([]byte(nil), k...)
			}
			b.ReportAllocs()
			buf := make([]byte, 0, 16)
			cm := startCPU()
			for b.Loop() {
				for t := range ops {
					mu.Lock()
					v, ok := m[string(keys[t%n])]
					if !ok {
						b.Fatal("missing")
					}
					buf = append(buf[:0], v...)
					mu.Unlock()
				}
			}
			cm.stop(b, ops)
		})
	}
}

// BenchmarkW8 runs W8's batches (one op: one put of a batch of 64, 8-byte
// keys uniform in [0, 4,194,304), 16-byte values) on the overlay (a
// sequence range per batch, applied with ApplyAt and published at once, as
// DB.Apply does) and single puts, against a
// mutex-guarded map[string][]byte of copied keys and values. Every 10,000
// batches the overlay freezes and releases its table and the map starts
// over (not timed), as W8's rounds end with a flush. The hot-keys rows
// write each key 10 times (a tenth of the keys) before that.
func BenchmarkW8(b *testing.B) {
	const (
		batch  = 64
		rounds = 10_000
	)
	rng := rand.New(rand.NewPCG(4, 4))
	keys := make([][]byte, rounds*batch)
	for i := range keys {
		keys[i] = w2Key(rng.Uint64N(w2Space))
	}
	val := make([]byte, w2ValueLen)
	for _, hot := range []int{1, 10} {
		suffix := ""
		if hot > 1 {
			suffix = "-hot-keys"
		}
		b.Run("batch-64-puts"+suffix+"/kvbuf-overlay", func(b *testing.B) {
			r := newKVRig(b, nil)
			cs := make([]Change, batch)
			b.ReportAllocs()
			i, g := 0, uint64(0)
			cm := startCPU()
			for b.Loop() {
				if i == len(keys) {
					b.StopTimer()
					g++
					r.kv.Freeze(g).Release()
					i = 0
					b.StartTimer()
				}
				seqs := r.kv.Seq().Reserve(batch)
				for j := range cs {
					cs[j] = Change{Kind: ChangePut, Key: keys[(i+j)%(len(keys)/hot)], Value: val}
				}
				if err := r.kv.ApplyAt(seqs.Take(batch), cs); err != nil {
					b.Fatal(err)
				}
				seqs.Publish()
				i += batch
			}
			cm.stop(b, batch)
		})
		b.Run("batch-64-puts"+suffix+"/kvbuf-single-puts", func(b *testing.B) {
			r := newKVRig(b, nil)
			b.ReportAllocs()
			i, g := 0, uint64(0)
			cm := startCPU()
			for b.Loop() {
				if i == len(keys) {
					b.StopTimer()
					g++
					r.kv.Freeze(g).Release()
					i = 0
					b.StartTimer()
				}
				for j := range batch {
					if err := r.kv.Put(keys[(i+j)%(len(keys)/hot)], val); err != nil {
						b.Fatal(err)
					}
				}
				i += batch
			}
			cm.stop(b, batch)
		})
		b.Run("batch-64-puts"+suffix+"/mutex+map", func(b *testing.B) {
			var mu sync.Mutex
			m := map[string][]byte{}
			b.ReportAllocs()
			i := 0
			cm := startCPU()
			for b.Loop() {
				if i == len(keys) {
					b.StopTimer()
					m = map[string][]byte{}
					i = 0
					b.StartTimer()
				}
				mu.Lock()
				for j := range batch {
					m[string(keys[(i+j)%(len(keys)/hot)])] = append([]byte(nil), val...)
				}
				mu.Unlock()
				i += batch
			}
			cm.stop(b, batch)
		})
	}
}

// BenchmarkKVGrowStores is not a workload row: it is the figure behind
// grow's plain stores into its private array (placePrivate; publication
// order 3 in doc/design.md), which it compares with place's atomic ones
// within one process. Each op copies the keys of the slot array of a
// one-shard table holding n keys (8-byte, uniform in [0, 4,194,304),
// 16-byte values) into a fresh grown array, as grow does, once per mode,
// in alternating order. It reports the median ratio atomic/plain of the
// ops and logs its quartiles and each mode's median time per copied key.
// (Growth copies each key about twice over a table's life: see
// growGroups.)
func BenchmarkKVGrowStores(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(map[int]string{10_000: "keys-10k", 100_000: "keys-100k", 1_000_000: "keys-1m"}[n], func(b *testing.B) {
			kv, err := NewKV(nil, 1, nil, &Options{Shards: 1, PoolBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(5, 5))
			val := make([]byte, w2ValueLen)
			for range n {
				if err := kv.Put(w2Key(rng.Uint64N(w2Space)), val); err != nil {
					b.Fatal(err)
				}
			}
			t := kv.view.Load().active
			sh := t.shards.Load().s[0]
			old := sh.arr.Load()
			keys := float64(old.n)
			// The copy loop of grow into a fresh array allocated before
			// the clock (the allocation and the zeroing are the same in
			// both modes).
			grow := func(atomicGrow bool) time.Duration {
				arr := newSlotArray(growGroups(old.groups))
				start := time.Now()
				for g, c := range old.ctrl {
					for m := ^matchEmpty(c) & ctrlMSB; m != 0; m &= m - 1 {
						sw := old.load(g*groupSlots + bits.TrailingZeros64(m)/8)
						if atomicGrow {
							arr.place(t.slotHash(&sw, sh), sw)
						} else {
							arr.placePrivate(t.slotHash(&sw, sh), sw)
						}
					}
				}
				return time.Since(start)
			}
			var ratios, plain, atomic []float64
			for b.Loop() {
				first := len(ratios)%2 == 0
				d1, d2 := grow(first), grow(!first)
				if !first {
					d1, d2 = d2, d1
				}
				// d1: atomic, d2: plain
				ratios = append(ratios, float64(d1)/float64(d2))
				atomic = append(atomic, float64(d1.Nanoseconds())/keys)
				plain = append(plain, float64(d2.Nanoseconds())/keys)
			}
			q := func(x []float64, f float64) float64 {
				slices.Sort(x)
				return x[int(f*float64(len(x)-1))]
			}
			b.ReportMetric(q(ratios, 0.5), "atomic/plain")
			b.Logf("%d ops: atomic/plain p25 %.3f p50 %.3f p75 %.3f; ns per copied key: plain %.1f, atomic %.1f",
				len(ratios), q(ratios, 0.25), q(ratios, 0.5), q(ratios, 0.75), q(plain, 0.5), q(atomic, 0.5))
		})
	}
}
