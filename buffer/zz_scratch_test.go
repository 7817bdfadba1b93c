package buffer

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
)

func BenchmarkScratchKVHit(b *testing.B) {
	r := newKVRig(b, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	var keys [][]byte
	val := make([]byte, 16)
	for range 1000000 {
		k := make([]byte, 8)
		binary.BigEndian.PutUint64(k, rng.Uint64N(4194304))
		r.kv.Put(k, val)
		keys = append(keys, k)
	}
	look := make([][]byte, 200000)
	for i := range look {
		look[i] = keys[rng.IntN(len(keys))]
	}
	b.Run("getappend", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		for b.Loop() {
			for _, k := range look {
				r.kv.GetAppend(buf[:0], k)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(look)), "ns/lookup")
	})
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			for _, k := range look {
				r.kv.lookup(k)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(look)), "ns/lookup")
	})
	b.Run("getmany", func(b *testing.B) {
		buf := make([]byte, 0, 64*16)
		vals := make([][]byte, 64)
		for b.Loop() {
			for j := 0; j+64 <= len(look); j += 64 {
				r.kv.GetMany(look[j:j+64], vals, buf[:0])
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(look)), "ns/lookup")
	})
	b.Run("map", func(b *testing.B) {
		m := map[string][]byte{}
		for _, k := range keys {
			m[string(k)] = append([]byte(nil), val...)
		}
		buf := make([]byte, 0, 64)
		for b.Loop() {
			for _, k := range look {
				if v, ok := m[string(k)]; ok {
					buf = append(buf[:0], v...)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(look)), "ns/lookup")
	})
}

func TestScratchMem(t *testing.T) {
	r := newKVRig(t, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 16)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for range 1000000 {
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], rng.Uint64N(4194304))
		r.kv.Put(k[:], val)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	n := r.kv.PendingKeys()
	t.Logf("keys %d, PendingBytes/key %.1f, heap/key %.1f", n, float64(r.kv.PendingBytes())/float64(n), float64(ms1.HeapAlloc-ms0.HeapAlloc)/float64(n))
	m := map[string][]byte{}
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	rng = rand.New(rand.NewPCG(1, 2))
	for range 1000000 {
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], rng.Uint64N(4194304))
		m[string(k[:])] = append([]byte(nil), val...)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	t.Logf("map: keys %d heap/key %.1f", len(m), float64(ms1.HeapAlloc-ms0.HeapAlloc)/float64(len(m)))
	runtime.KeepAlive(m)
}

func BenchmarkScratchKVMiss(b *testing.B) {
	r := newKVRig(b, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 16)
	for range 1000000 {
		k := make([]byte, 8)
		binary.BigEndian.PutUint64(k, rng.Uint64N(4194304))
		r.kv.Put(k, val)
	}
	look := make([][]byte, 200000)
	for i := range look {
		k := make([]byte, 8)
		binary.BigEndian.PutUint64(k, 4194304+rng.Uint64N(4194304))
		look[i] = k
	}
	b.Run("lookup-miss", func(b *testing.B) {
		for b.Loop() {
			for _, k := range look {
				r.kv.lookup(k)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(look)), "ns/lookup")
	})
}

func BenchmarkScratchPut(b *testing.B) {
	val := make([]byte, 16)
	keys := make([][]byte, 1000000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		k := make([]byte, 8)
		binary.BigEndian.PutUint64(k, rng.Uint64N(4194304))
		keys[i] = k
	}
	b.Run("kv", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			r := newKVRig(b, nil)
			b.StartTimer()
			for _, k := range keys {
				r.kv.Put(k, val)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/put")
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := map[string][]byte{}
			for _, k := range keys {
				m[string(k)] = append([]byte(nil), val...)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/put")
	})
}
